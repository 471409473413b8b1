"""Reading and writing the project's files by its rules: a file is written whole or not at
all (temp name, flush, fsync, rename), and a file that cannot be read or parsed is a one-line
UserError naming it."""
import contextlib
import json
import os
import shutil
import tempfile

from nfn.errors import UserError


@contextlib.contextmanager
def atomic_open(path, mode="wb", encoding=None):
    """Open `path` for writing through a temporary name; it appears only when the block ends
    without an exception, and the temporary file never outlives a failure."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        with open(tmp, mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def write_json(path, obj, indent=2):
    with atomic_open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=indent)
        f.write("\n")


def read_json(path):
    """The parsed JSON of `path`; UserError naming the file when it is unreadable or invalid."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    except ValueError as e:
        raise UserError(f"{path}: not valid JSON ({e})") from None


def work_dir(parent, kind, name):
    """A new directory in `parent` for this process's unfinished work: .KIND-PID-NAME-XXXX
    (KIND tmp: being written; stale: being replaced). Renamed into place or removed when the
    work ends; one left by a killed process is removed by remove_orphaned_dirs."""
    return tempfile.mkdtemp(prefix=f".{kind}-{os.getpid()}-{name}-", dir=parent)


def _running(pid):
    """Whether process `pid` runs (a zombie does not: it only waits to be reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def remove_orphaned_dirs(parent, quiet=False):
    """Remove the work_dir directories in `parent` (and files named as they are) whose process
    no longer runs (killed while it wrote), saying so unless quiet; the number removed. Their
    contents were never trusted, only their space held."""
    removed = 0
    try:
        names = os.listdir(parent)
    except OSError:
        return 0
    for name in names:
        kind, _, rest = name.partition("-")
        pid = rest.split("-", 1)[0]
        if kind not in (".tmp", ".stale") or not pid.isdigit() or int(pid) == os.getpid() or _running(int(pid)):
            continue
        path = os.path.join(parent, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(path)
        removed += not os.path.lexists(path)
    if removed and not quiet:
        import sys
        print(f"nfn: removed {removed} unfinished folder{'s' if removed > 1 else ''} in {parent} that a killed run "
              f"was writing", file=sys.stderr)
    return removed
