"""The task mixture `nfn sft --mixture` names, ordered as nanochat's chat_sft.py orders its own.

    chitchat,gsm8k*2,arc,identity:me.jsonl*3,mmlu*0.5

Each entry is a task name, or `identity:FILE` (JSONL, one conversation a line), with an optional
`*W`: W epochs of the task, a positive number whose whole part is repeated copies and whose
fraction is that share of the task's first rows (`*2` twice, `*0.5` the first half, `*1.5` once
and then the first half again). `arc` is ARC-Easy then ARC-Challenge.

The order is nanochat's chat_sft.py mixture: general conversations (chitchat, in SmolTalk's
place), then the identity conversations, multiple choice (mmlu, arc-easy, arc-challenge, in
MMLU's place), then GSM8K and `arithmetic` (the training questions of `nfn rl --task
arithmetic`: "7+5" answered "#### 12"); entries of one kind keep the order given, and each epoch
is one more copy in that list, as nanochat lists a task once per epoch. TaskMixture then maps every row to
(copy, row) in list order and shuffles that map with random.Random(42), as nanochat's does.

Validation holds each task's last rows out of training (`--val-fraction` of them, at least one
where a task has two or more rows and the fraction is not 0), once whatever the task's epochs.
"""
import json
import math
import os
import random

from nfn.chat.conversation import validate
from nfn.errors import UserError

# The kinds in nanochat's chat_sft.py order; the names each kind takes.
KINDS = ("conversations", "identity", "multiple_choice", "math")
TASKS = {
    "chitchat": "conversations",
    "mmlu": "multiple_choice",
    "arc-easy": "multiple_choice",
    "arc-challenge": "multiple_choice",
    "gsm8k": "math",
    "arithmetic": "math",
}
ALIASES = {"arc": ("arc-easy", "arc-challenge")}
KNOWN = "chitchat, gsm8k, arithmetic, arc (arc-easy, arc-challenge), mmlu, identity:FILE"
SHUFFLE_SEED = 42  # nanochat's TaskMixture


class IdentityConversations:
    """Conversations from a JSONL file: each line a list of {"role", "content"} messages or an
    object with a "messages" list (blank lines skipped); a malformed line is one error naming
    the file, the line and what is wrong."""

    def __init__(self, path):
        self.path = path
        try:
            with open(path, "rb") as f:
                lines = f.read().split(b"\n")
        except OSError as e:
            raise UserError(f"identity:{path}: cannot read ({e.strerror})") from None
        self.rows = []
        for number, raw in enumerate(lines, 1):
            where = f"{path}:{number}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{where}: not UTF-8 (byte {e.start + 1})") from None
            if not text.strip():
                continue
            try:
                item = json.loads(text)
            except ValueError as e:
                raise UserError(f"{where}: not valid JSON ({getattr(e, 'msg', e)}, column "
                                f"{getattr(e, 'colno', '?')})") from None
            if isinstance(item, list):
                item = {"messages": item}
            if not isinstance(item, dict):
                raise UserError(f"{where}: expected a list of {{\"role\", \"content\"}} messages or an object with "
                                f"a \"messages\" list, got {type(item).__name__}")
            validate(item, where=where)
            self.rows.append({"messages": item["messages"]})
        if not self.rows:
            raise UserError(f"identity:{path}: no conversations (one JSON conversation a line)")

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return json.loads(json.dumps(self.rows[i]))  # a copy, as Task's rows are


def load_task(name, path=None):
    """The rows of one task, lazily importing what reads it."""
    if name == "identity":
        return IdentityConversations(path)
    if name == "chitchat":
        from nfn.tasks.chitchat import ChitChat
        return ChitChat()
    if name == "gsm8k":
        from nfn.tasks.gsm8k import GSM8K
        return GSM8K()
    if name == "arithmetic":  # `nfn rl --task arithmetic`'s training questions, never its held-out ones
        from nfn.rl import tasks
        return tasks.load("arithmetic", "train")
    if name in ("arc-easy", "arc-challenge"):
        from nfn.tasks.arc import ARC
        return ARC("ARC-Easy" if name == "arc-easy" else "ARC-Challenge")
    from nfn.tasks.mmlu import MMLU
    return MMLU(split="validation")


def parse(spec):
    """[{"name", "path", "weight", "label"}] of a --mixture spec, in the order given (aliases
    expanded); UserError for an unknown task, an empty entry or a bad weight."""
    if not isinstance(spec, str) or not spec.strip():
        raise UserError("--mixture: empty (name tasks, e.g. chitchat,gsm8k*2,identity:FILE)")
    entries = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            raise UserError(f"--mixture {spec}: an empty entry (two commas, or one at an end)")
        weight = 1.0
        if "*" in item:
            head, _, tail = item.rpartition("*")
            try:
                weight = float(tail)
            except ValueError:
                raise UserError(f"--mixture: {item}: the weight {tail!r} after '*' is not a number") from None
            if not math.isfinite(weight) or weight <= 0:
                raise UserError(f"--mixture: {item}: the weight must be a positive number of epochs")
            item = head.strip()
        if item.startswith("identity:"):
            path = item[len("identity:"):]
            if not path:
                raise UserError("--mixture: identity: names no file (identity:FILE, a JSONL file)")
            entries.append({"name": "identity", "path": os.path.abspath(os.path.expanduser(path)),
                            "weight": weight, "label": f"identity:{path}"})
            continue
        if item not in TASKS and item not in ALIASES:
            raise UserError(f"--mixture: unknown task {item!r} (known: {KNOWN})")
        for name in ALIASES.get(item, (item,)):
            entries.append({"name": name, "path": None, "weight": weight, "label": name})
    return entries


def ordered(entries):
    """The entries in nanochat's order of kinds, the given order within a kind."""
    kind = lambda e: KINDS.index("identity" if e["name"] == "identity" else TASKS[e["name"]])  # noqa: E731
    return sorted(entries, key=kind)  # stable


def held_out(n, val_fraction):
    """How many of a task's n rows (its last) validation holds out."""
    if val_fraction <= 0 or n < 2:
        return 0
    return min(n - 1, max(1, round(n * val_fraction)))


class Mixture:
    """The training and validation conversations of a spec: `train` and `val` are lists of
    (entry index, row within that task) in TaskMixture's shuffled order; conversation(ref)
    returns one; `parts` says what each entry gave."""

    def __init__(self, spec, val_fraction):
        if not 0 <= val_fraction < 1:
            raise UserError(f"--val-fraction {val_fraction}: a fraction in [0, 1)")
        self.entries = ordered(parse(spec))
        loaded = {}
        self._tasks = []
        self.parts = []
        train_lists, val_lists = [], []  # nanochat's task list: one (entry, rows) per copy
        seen_val = set()
        for i, e in enumerate(self.entries):
            key = (e["name"], e["path"])
            if key not in loaded:
                loaded[key] = load_task(e["name"], e["path"])
            task = loaded[key]
            self._tasks.append(task)
            n = len(task)
            held = held_out(n, val_fraction)
            train_rows = range(n - held)
            whole, fraction = int(e["weight"]), e["weight"] - int(e["weight"])
            copies = [train_rows] * whole
            if fraction > 0 and round(fraction * len(train_rows)) > 0:
                copies.append(train_rows[:round(fraction * len(train_rows))])
            train_lists += [(i, rows) for rows in copies]
            val_rows = range(n - held, n) if key not in seen_val else range(0)
            seen_val.add(key)
            if val_rows:
                val_lists.append((i, val_rows))
            self.parts.append({"task": e["label"], "epochs": e["weight"], "rows": n, "val_rows": len(val_rows),
                               "train_conversations": sum(len(r) for r in copies)})
        self.train = self._shuffled(train_lists)
        self.val = self._shuffled(val_lists)
        if not self.train:
            raise UserError(f"--mixture {spec}: no training conversations (every task's rows went to validation, "
                            "or its weight took none)")

    @staticmethod
    def _shuffled(lists):
        index_map = [(entry, row) for entry, rows in lists for row in rows]
        random.Random(SHUFFLE_SEED).shuffle(index_map)
        return index_map

    def conversation(self, ref):
        entry, row = ref
        return self._tasks[entry][row]
