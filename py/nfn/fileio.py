"""Reading and writing the project's files by its rules: a file is written whole or not at
all (temp name, flush, fsync, rename), and a file that cannot be read or parsed is a one-line
UserError naming it."""
import contextlib
import errno
import json
import os
import shutil
import tempfile
import time

from nfn.errors import UserError


@contextlib.contextmanager
def atomic_open(path, mode="wb", encoding=None):
    """Open `path` for writing through a temporary name beside it; it appears only when the
    block ends without an exception, and the temporary file never outlives a failure. The
    temporary file is unfinished work (.nfn-tmp-NAME-XXXXXXXX, locked while written, see
    WorkDir): one a killed writer left in that directory is removed here first, silently (a
    file's leftovers are not worth a line on every export), as by every other writer there."""
    parent = os.path.dirname(os.path.abspath(path))
    remove_orphaned_dirs(parent, quiet=True)
    fd, tmp = _create_work_file(parent, os.path.basename(path))
    try:
        lock_work(fd)  # held until fd closes, after the rename: never taken for a killed writer's
        with os.fdopen(os.dup(fd), mode, encoding=encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    finally:
        os.close(fd)


def _create_work_file(parent, name):
    """(fd, path) of a new empty file .nfn-tmp-NAME-XXXXXXXX in parent, with the permissions a
    plain open() would give it (mkstemp's are 0600, which would pass to the final file)."""
    import secrets
    while True:
        tmp = os.path.join(parent, f"{WORK_PREFIX}tmp-{name[:100]}-{secrets.token_hex(4)}")
        try:
            return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), tmp
        except FileExistsError:
            continue


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


WORK_PREFIX = ".nfn-"  # unfinished work: .nfn-tmp-* (being written), .nfn-stale-*, .nfn-lock-* (held)
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
        if os.path.islink(self.path):  # a replaced entry that was a link (install_dir)
            os.unlink(self.path)
        else:
            shutil.rmtree(self.path, ignore_errors=True)  # nothing there once it was renamed into place
        os.close(self._fd)
        self._fd = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _exchange(a, b):
    """Swap the names a and b in one step (Linux renameat2 RENAME_EXCHANGE): True when done,
    False where this system or file system cannot, None when b is gone (nothing to swap)."""
    import ctypes
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # a C library without it
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err == errno.ENOENT and os.path.lexists(a):
        return None
    if err in (errno.EINVAL, errno.ENOSYS, errno.EPERM, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), a, None, b)


def install_dir(tmp, final):
    """Put the finished directory tmp (a WorkDir's) at final, replacing what is there in one
    step, so that a reader finds a whole entry, the old or the new, and never none; tmp is left
    holding the replaced one (or nothing) for its WorkDir to remove. Two writers at once end
    with one whole entry (the last one's). Where the names cannot be swapped in one step (no
    renameat2 RENAME_EXCHANGE: a kernel before 3.15, or a file system without it), the old
    entry is moved aside first, and put back when the new one cannot follow it (or left aside
    when another writer's went in meanwhile: that one stands); there a reader may find no
    entry for that moment."""
    while True:
        try:
            os.rename(tmp, final)  # nothing there (or an empty directory)
            return
        except OSError as e:
            # A directory there (ENOTEMPTY, EEXIST), or a link to one (ENOTDIR): replaced below.
            if not ((e.errno in (errno.ENOTEMPTY, errno.EEXIST) and os.path.isdir(final)) or
                    (e.errno == errno.ENOTDIR and os.path.islink(final))):
                raise
        swapped = _exchange(tmp, final)
        if swapped:
            return
        if swapped is None:  # removed meanwhile: the plain rename again
            continue
        with WorkDir(os.path.dirname(final), "stale", os.path.basename(final)) as stale:
            old = os.path.join(stale.path, "old")
            try:
                os.rename(final, old)
            except FileNotFoundError:
                continue
            try:
                os.rename(tmp, final)
                return
            except OSError as e:
                if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                    return  # another writer's entry went in between: it stands, whole
                os.rename(old, final)  # the old entry back where it was
                raise


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
        if os.path.islink(path):  # an entry that was a link, replaced (install_dir): the link alone goes
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue  # gone
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
