"""Reading and writing the project's files by its rules: a file is written whole or not at
all (temp name, flush, fsync, rename), and a file that cannot be read or parsed is a one-line
UserError naming it."""
import contextlib
import json
import os

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
