"""A mixture's conversations as masked-row shards in the dataset cache.

Each conversation is rendered with the chat tokenizer (nfn.chat.render: mask 1 on what the
assistant writes), cropped to a row, and packed by best fit into rows of --train-seq-len + 1
tokens that start with BOS (nfn.chat.packing; the rest of a row is BOS with mask 0, as
nanochat's SFT loader pads), then written as masked-row shards (nfn.data.masked_rows):

    <datasets>/sft-<key>/sft_train_000000.bin, sft_val_000000.bin (where validation has rows),
                         sft_meta.json

The entry is built in a work directory beside it and renamed into place (nfn.fileio), so a
killed build is never taken for an entry. The key hashes everything the rows depend on: the
mixture (each identity file's path, size and modification time), the tokenizer's files, the
row length, the validation fraction and the packing buffer; an entry whose meta and file sizes
match is used as it is.
"""
import datetime
import hashlib
import json
import os

from nfn import fileio, paths
from nfn.data import masked_rows
from nfn.errors import UserError

ROWS_FORMAT = "nfn-sft-rows-1"  # the rendering and packing rules; a change makes new keys
META_FILE = "sft_meta.json"
PREFIX = "sft"
def chat_format(tokenizer, name):
    """The format conversations are rendered in: the tokenizer's (nfn.chat.formats: nanochat's chat
    tokens, or an imported model's ChatML); one line where it has neither."""
    from nfn.chat.formats import chat_format as format_of
    return format_of(tokenizer, name)


def key_of(mixture_spec_entries, tokenizer_identity, row_tokens, val_fraction, buffer, chat_format_name="nanochat"):
    """(key, the document it hashes)."""
    entries = []
    for e in mixture_spec_entries:
        item = {"task": e["name"], "weight": e["weight"]}
        if e["path"] is not None:
            try:
                st = os.stat(e["path"])
            except OSError as err:
                raise UserError(f"identity:{e['path']}: cannot read ({err.strerror})") from None
            item["file"] = {"path": e["path"], "size": st.st_size, "mtime_ns": st.st_mtime_ns}
        entries.append(item)
    doc = {"format": ROWS_FORMAT, "chat_format": chat_format_name, "mixture": entries, "tokenizer": tokenizer_identity, "row_tokens": row_tokens,
           "val_fraction": val_fraction, "packing_buffer": buffer}
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    return f"{PREFIX}-{digest[:20]}", doc


def split_files(directory, meta):
    """{split: path} of an entry's files, or None when one is missing or the wrong size."""
    out = {}
    for split, info in meta["splits"].items():
        if not info["rows"]:
            continue
        path = os.path.join(directory, info["file"])
        try:
            size = os.path.getsize(path)
        except OSError:
            return None
        if size != masked_rows.file_bytes(info["rows"], meta["row_tokens"], meta["token_bytes"]):
            return None
        out[split] = path
    return out


def find_cached(key, doc):
    """The summary of the entry `key` when it holds what `doc` describes, else None."""
    directory = os.path.join(paths.datasets_dir(), key)
    try:
        meta = fileio.read_json(os.path.join(directory, META_FILE))
        if meta.get("key") != doc:
            return None
        files = split_files(directory, meta)
    except (UserError, AttributeError, KeyError, TypeError):
        return None
    return None if files is None or "train" not in files else summary(directory, meta, files)


def summary(directory, meta, files):
    return {"dir": directory, "train_file": files["train"], "val_file": files.get("val"), "meta": meta}


def planned(key):
    """Where an entry not built yet will put its files."""
    directory = os.path.join(paths.datasets_dir(), key)
    return {"dir": directory, "train_file": os.path.join(directory, f"{PREFIX}_train_000000.bin"),
            "val_file": os.path.join(directory, f"{PREFIX}_val_000000.bin"), "meta": None}


def _write_split(path, refs, mixture, fmt, row_tokens, token_bytes, buffer):
    """Renders, packs and writes one split's conversations; its statistics."""
    from nfn.chat.packing import BestFitPacker

    bos = fmt.bos
    packer = BestFitPacker(row_tokens, bos, pad_id=bos, buffer_size=buffer)
    # Whole conversations: the packer crops one longer than a row, and counts it.
    rendered = (fmt.render(mixture.conversation(ref)) for ref in refs)
    targets = 0
    with masked_rows.MaskedRowWriter(path, row_tokens, token_bytes, bos) as writer:
        for ids, mask in packer.pack(rendered):
            writer.write(ids, mask)
            targets += sum(mask[1:])
        writer.close()
    st = packer.stats
    return {"file": os.path.basename(path), "conversations": len(refs), "rows": writer.rows,
            "targets": targets, "tokens": st.tokens_packed, "padding": st.padding,
            "utilisation": round(st.utilisation, 4), "cropped_conversations": st.cropped_sequences,
            "tokens_cropped": st.tokens_cropped}


def build(key, doc, mixture, tokenizer, fmt, row_tokens, buffer, quiet=False):
    """Writes the entry (replacing a stale one in one step) and returns its summary."""
    import sys
    root = paths.datasets_dir()
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as e:
        raise UserError(f"{root}: dataset cache is not writable ({e.strerror}); set {paths.DATASETS_ENV} to a "
                        "writable directory") from None
    fileio.remove_orphaned_dirs(root, quiet)
    if not quiet:
        print(f"nfn: rendering {len(mixture.train):,} training and {len(mixture.val):,} validation conversations "
              f"into rows of {row_tokens} tokens", file=sys.stderr, flush=True)
    token_bytes = masked_rows.token_bytes_for_vocab(tokenizer.vocab_size)
    final = os.path.join(root, key)
    with fileio.WorkDir(root, "tmp", key) as work:
        splits = {}
        for split, refs in (("train", mixture.train), ("val", mixture.val)):
            name = f"{PREFIX}_{split}_000000.bin"
            if refs:
                splits[split] = _write_split(os.path.join(work.path, name), refs, mixture, fmt, row_tokens,
                                             token_bytes, buffer)
            else:
                splits[split] = {"file": name, "conversations": 0, "rows": 0, "targets": 0}
        meta = {"key": doc, "row_tokens": row_tokens, "token_bytes": token_bytes,
                "bos": fmt.bos, "format": fmt.name, "tasks": mixture.parts, "splits": splits,
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        fileio.write_json(os.path.join(work.path, META_FILE), meta)
        fileio.install_dir(work.path, final)
    return summary(final, meta, split_files(final, meta))
