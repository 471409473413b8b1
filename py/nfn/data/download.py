"""HTTP downloads into the cache: streamed, length-checked, atomic (temp file + rename).

TinyStories (the public GPT-4 stories text) comes from $NFN_TINYSTORIES_URL, by default the
dataset's public file host. Offline, the error names the alias and the offline choices.
"""
import os
import sys
import time
import urllib.error
import urllib.request

from nfn import fileio, paths
from nfn.errors import UserError

TIMEOUT_S = 30
TINYSTORIES_URL_ENV = "NFN_TINYSTORIES_URL"
TINYSTORIES_URL = "https://huggingface.co/datasets/roneneldan/TinyStories/resolve/main"
TINYSTORIES_FILES = {"train": "TinyStoriesV2-GPT4-train.txt", "val": "TinyStoriesV2-GPT4-valid.txt"}
TINYSTORIES_SHARDS_ENV = "NFN_TINYSTORIES_SHARDS_DIR"
TINYSTORIES_SHARDS_ENV_ALIAS = "NFN_LLM_KITTENS_TINYSTORIES_DIR"  # read where the variable above is unset
OFFLINE_CHOICES = ("offline choices: --dataset shakespeare or moby-dick, --pretraining-file PATH, "
                   f"or {TINYSTORIES_SHARDS_ENV}=DIR holding TinyStories_train.bin and TinyStories_val.bin "
                   "(GPT-2 tokens: with --tokenizer gpt2)")


def _open(url, what):
    try:
        return urllib.request.urlopen(url, timeout=TIMEOUT_S)
    except urllib.error.HTTPError as e:
        raise UserError(f"{what}: cannot download {url} (HTTP {e.code} {e.reason})") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", None) or e
        raise UserError(f"{what}: cannot download {url} ({reason})") from None


def _copy(resp, out, url, what, progress=None):
    expected = resp.headers.get("Content-Length")
    got = 0
    try:
        for block in iter(lambda: resp.read(1 << 20), b""):
            out.write(block)
            got += len(block)
            if progress:
                progress(got, int(expected) if expected else None)
    except (OSError, urllib.error.URLError) as e:
        raise UserError(f"{what}: download of {url} broke after {got} bytes ({e})") from None
    if expected is not None and got != int(expected):
        raise UserError(f"{what}: download of {url} ended after {got} of {expected} bytes")


def fetch_bytes(url, what):
    """A small file's bytes (a tokenizer model)."""
    import io
    buf = io.BytesIO()
    with _open(url, what) as resp:
        _copy(resp, buf, url, what)
    return buf.getvalue()


def download_file(url, dest, what, quiet=False):
    """Stream url to dest; dest appears only when complete."""
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    show = not quiet and sys.stderr.isatty()
    start = time.time()

    def progress(got, total):
        if show:
            pct = f"{100 * got / total:5.1f}% " if total else ""
            print(f"\r{what}: {pct}{got / 1e6:.1f} MB ({got / 1e6 / max(time.time() - start, 1e-3):.1f} MB/s)",
                  end="", file=sys.stderr, flush=True)

    try:  # a killed download's part is unfinished work that the next writer there removes
        with fileio.atomic_open(dest, "wb") as out, _open(url, what) as resp:
            _copy(resp, out, url, what, progress)
    finally:
        if show:
            print(file=sys.stderr)
    return dest


def ensure_tinystories(quiet=False):
    """{"train": path, "val": path} of the TinyStories text, downloaded once into the cache."""
    base = (os.environ.get(TINYSTORIES_URL_ENV, "").strip() or TINYSTORIES_URL).rstrip("/")
    directory = os.path.join(paths.datasets_dir(), "sources", "tinystories")
    out = {}
    for split, name in TINYSTORIES_FILES.items():
        dest = os.path.join(directory, name)
        if not os.path.isfile(dest):
            if not quiet:  # a one-time notice, kept in logs too
                print(f"nfn: fetching tinystories {name} from {base} once", file=sys.stderr)
            try:
                download_file(f"{base}/{name}", dest, "tinystories", quiet)
            except UserError as e:
                raise UserError(f"{e}; {OFFLINE_CHOICES}") from None
            except OSError as e:
                raise UserError(f"{directory}: dataset cache is not writable ({e.strerror}); "
                                f"set {paths.DATASETS_ENV} to a writable directory") from None
        out[split] = dest
    return out
