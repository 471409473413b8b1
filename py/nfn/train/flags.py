"""The trainer's flags as `nfn train`'s arguments.

The trainer declares each flag once (cc/train/train_flags.cc: name, type, default, help,
range, choices, other spellings); the build caches that table as train_flags.json beside this
module, and `nfn train` builds its parser from it and passes every flag given on to the
trainer as it was given. Standard library only: `nfn train --help` starts no process.
"""
import argparse
import json
import os

from nfn.errors import UserError

FLAGS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_flags.json")
# The trainer's help headings, in the order nfn train shows them.
GROUPS = ("model", "data", "schedule", "run")
INTERNAL = "internal"  # flags nfn train fills in from the dataset it prepared
# Trainer flags nfn train answers itself: it reads the trainer's report and prints it, with
# the decoded sample, for --json.
CONSUMED = ("json",)
_ALIAS_DEST = "{dest}__as_{alias}"


def load(path=FLAGS_FILE):
    """The trainer's flag table: a list of {name, group, type, help, default, choices, min,
    max, aliases, value_aliases}."""
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
    except FileNotFoundError:
        raise UserError(f"{path}: the trainer's flag table is missing; run nfn through Bazel "
                        "(bazel run //py:nfn -- train ...), which generates it") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: the trainer's flag table is not valid JSON ({e})") from None
    return table["flags"]


def dest(flag):
    return flag["name"].replace("-", "_")


def _help(flag):
    text = flag["help"].replace("%", "%%")
    if flag["default"] is not None:
        text += f" (default: {flag['default']})"
    if flag["aliases"]:
        text += " (also " + ", ".join("--" + a for a in flag["aliases"]) + ")"
    return text


def _argument(flag):
    """add_argument's keywords for a flag of the table (every default None: only the flags
    given reach the trainer, which applies its own defaults)."""
    kinds = {"int": int, "float": float}
    kw = {"default": None, "help": _help(flag)}
    if flag["type"] == "toggle":
        kw.update(action="store_true", default=False)
    elif flag["type"] == "choice":
        aliases = flag["value_aliases"]
        kw.update(choices=flag["choices"], type=lambda v: aliases.get(v, v), metavar="{" + ",".join(flag["choices"]) + "}")
    elif flag["type"] in kinds:
        kw.update(type=kinds[flag["type"]], metavar="N" if flag["type"] == "int" else "X")
    return kw


def add_trainer_flags(groups, table=None):
    """Adds each of the trainer's user flags to its group's argparse group (groups: heading ->
    group); each other spelling is an argument of its own, merged by resolve_aliases."""
    table = load() if table is None else table
    for flag in table:
        if flag["group"] == INTERNAL:
            continue
        kw = _argument(flag)
        group = groups[flag["group"]]
        group.add_argument("--" + flag["name"], dest=dest(flag), **kw)
        for alias in flag["aliases"]:
            group.add_argument("--" + alias, dest=_ALIAS_DEST.format(dest=dest(flag), alias=alias),
                               **dict(kw, help=argparse.SUPPRESS))
    return table


def resolve_aliases(args, table):
    """Folds each other spelling into its flag; two spellings with different values are an
    error naming both."""
    for flag in table:
        if flag["group"] == INTERNAL:
            continue
        name, value = "--" + flag["name"], getattr(args, dest(flag), None)
        for alias in flag["aliases"]:
            other = getattr(args, _ALIAS_DEST.format(dest=dest(flag), alias=alias))
            if other is None or other is False:
                continue
            if value not in (None, False) and value != other:
                raise UserError(f"--{alias} {other} contradicts {name} {value} (two spellings of one flag); give one")
            value, name = other, "--" + alias
        setattr(args, dest(flag), value)


def trainer_argv(args, table):
    """The trainer flags given to nfn train, as trainer arguments."""
    argv = []
    for flag in table:
        if flag["group"] == INTERNAL or flag["name"] in CONSUMED:
            continue
        value = getattr(args, dest(flag), None)
        if flag["type"] == "toggle":
            argv += ["--" + flag["name"]] if value else []
        elif value is not None:
            argv += ["--" + flag["name"], str(value)]
    return argv
