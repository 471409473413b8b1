"""Reading and writing the project's files by its rules: a file is written whole or not at
all (temp name, flush, fsync, rename), and a file that cannot be read or parsed is a one-line
UserError naming it."""
import contextlib
import json
import os
import shutil
import tempfile
import time

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


WORK_PREFIX = ".nfn-"  # the names of unfinished work: .nfn-tmp-* (being written), .nfn-stale-*
GRACE_SECONDS = 60     # younger entries are never taken for a killed writer's


def lock_work(fd):
    """Hold `fd`'s file or directory for unfinished work (see WorkDir) until it is closed."""
    import fcntl
    fcntl.flock(fd, fcntl.LOCK_EX)


class WorkDir:
    """A new directory in `parent` for unfinished work, .nfn-KIND-NAME-XXXXXXXX (KIND tmp: being
    written; stale: being replaced), held by a lock (flock) until close(), which removes it
    unless it was renamed away. The lock ends with its process, however that ends: one left
    by a killed writer is free to take, and remove_orphaned_dirs removes it (a lock, not a
    pid, so that a writer in another PID namespace or on another host is never taken for dead)."""

    def __init__(self, parent, kind, name):
        self.path = tempfile.mkdtemp(prefix=f"{WORK_PREFIX}{kind}-{name}-", dir=parent)
        self._fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY)
        lock_work(self._fd)

    def close(self):
        if self._fd is None:
            return
        shutil.rmtree(self.path, ignore_errors=True)  # nothing there once it was renamed into place
        os.close(self._fd)
        self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def remove_orphaned_dirs(parent, quiet=False):
    """Remove the unfinished work in `parent` (WorkDir directories, and files named and locked
    as they are) whose writer is gone, saying so unless quiet; the number removed. Its
    contents were never trusted, only their space held."""
    import fcntl

    def orphaned(fd):  # not just made (its writer may not hold it yet), and no writer holds it
        try:
            if time.time() - os.fstat(fd).st_mtime < GRACE_SECONDS:
                return False
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError:
            return False

    try:
        names = [n for n in os.listdir(parent) if n.startswith(WORK_PREFIX)]
    except OSError:
        return 0
    removed = 0
    for name in names:
        path = os.path.join(parent, name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # a link, or gone
        try:
            if not orphaned(fd):
                continue
            if os.path.isdir(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    os.remove(path)
            removed += not os.path.lexists(path)
        finally:
            os.close(fd)
    if removed and not quiet:
        import sys
        print(f"nfn: removed {removed} unfinished item{'s' if removed > 1 else ''} in {parent} that a killed run "
              f"was writing", file=sys.stderr)
    return removed
