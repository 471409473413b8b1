"""Where imports and exports write: a new artifact directory or a new export directory, built in
a work directory beside it and renamed into place, so that a killed or failed writer leaves
nothing a reader trusts (the next writer there removes what it left)."""
import os
import re

from nfn import fileio, paths
from nfn.errors import UserError


def plain_name(text):
    """An artifact name from a file or directory name: lower case, runs of other characters as
    '-' ("SmolLM2 135M" -> "smollm2-135m")."""
    return re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.") or "model"


def check_name(name, tokenizer_dir=False):
    """A name an import may write under the artifacts directory. tokenizer_dir: the import also
    writes a tokenizer of that name into the tokenizer cache (nanochat's), which an existing
    model tokenizer of that name would shadow."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.startswith("."):
        raise UserError(f"--name must be a plain directory name, got {name!r}")
    from nfn import tokenizers
    if name in tokenizers.BUILTIN:
        raise UserError(f"--name {name} is a built-in tokenizer's; choose another name")
    if not tokenizer_dir and name in tokenizers.trained_names():  # the manifest's tokenizer would load that one
        raise UserError(f"--name {name} is the name of a tokenizer trained in {paths.tokenizers_dir()}; "
                        "choose another name")


def destination(name, force):
    """artifacts_dir()/name, refused where it exists and force is not given."""
    final = os.path.join(paths.artifacts_dir(), name)
    if os.path.lexists(final) and not force:
        raise UserError(f"{final} exists; pass --force to replace it (or --name for another name)")
    return final


def install(name, force, write, quiet=True):
    """Runs write(tmp) on a new work directory beside artifacts_dir()/name, then puts it in
    place (replacing what is there, in one step, with force). Returns the final path."""
    root = paths.artifacts_dir()
    final = os.path.join(root, name)
    os.makedirs(root, exist_ok=True)
    fileio.remove_orphaned_dirs(root, quiet)
    with fileio.WorkDir(root, "tmp", name) as tmp:
        write(tmp.path)
        _publish(tmp.path)
        if force:
            fileio.install_dir(tmp.path, final)  # in one step: a reader finds the old or the new one
        else:
            try:
                os.rename(tmp.path, final)
            except OSError:
                if os.path.lexists(final):
                    raise UserError(f"{final} appeared while importing; pass --force to replace it") from None
                raise
    return final


def check_export_target(target):
    """An export's directory: absent or empty (never another's files to mix with ours)."""
    if os.path.lexists(target) and not os.path.isdir(target):
        raise UserError(f"{target}: exists and is not a directory")
    if os.path.isdir(target) and os.listdir(target):
        raise UserError(f"{target}: exists and is not empty; nfn export writes a new directory")


def export(target, write):
    """Runs write(tmp) on a work directory beside target (its parents made where missing) and
    renames it to target, which must be absent or empty."""
    check_export_target(target)
    parent = os.path.dirname(os.path.abspath(target))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot make {parent}: {e.strerror}") from None
    fileio.remove_orphaned_dirs(parent, quiet=True)
    name = os.path.basename(os.path.abspath(target))
    with fileio.WorkDir(parent, "tmp", name) as tmp:
        write(tmp.path)
        _publish(tmp.path)
        check_export_target(target)  # again: another writer may have been quicker
        if os.path.isdir(target):
            os.rmdir(target)
        os.rename(tmp.path, target)
    return os.path.abspath(target)


def _publish(path):
    """A work directory's mode (0700) widened to a run directory's, as the umask allows."""
    umask = os.umask(0o022)
    os.umask(umask)
    os.chmod(path, 0o777 & ~umask)
