"""Train and evaluate byte-level BPE tokenizers for the chat pipeline.

  nfn tokenizer train --dataset shakespeare|moby-dick|--pretraining-file PATH --vocab-size N --name NAME
  nfn tokenizer eval --name NAME [--dataset shakespeare|moby-dick|--pretraining-file PATH] [--json]

train: GPT-4-style regex pre-split, rustbpe merges, nine chat special tokens (<|bos|>,
<|user_start|>, ..., <|output_end|>); vocab size counts all of them. The last 5% of the text
(at most 1 MB) is held out and saved for eval. Saved atomically to
$NFN_TOKENIZERS_DIR/NAME, so `--tokenizer NAME` works wherever a tokenizer is accepted.
eval: bytes per token of NAME and of gpt2 on the held-out text (or on the given source).
"""
import json
import os
import sys
import time

from nfn.cli.common import add_command

HELDOUT_FRACTION = 0.05
HELDOUT_MAX_BYTES = 1_000_000  # of UTF-8


def read_source(args):
    """The text of --pretraining-file (a file or a directory of .txt) or --dataset."""
    from nfn.errors import UserError

    if args.pretraining_file:
        from nfn.data.resolve import text_files_of  # as `nfn data prepare` finds them
        files = text_files_of(args.pretraining_file)
        parts = []
        for f in files:
            try:
                with open(f, encoding="utf-8") as fh:
                    parts.append(fh.read())
            except UnicodeDecodeError as e:
                raise UserError(f"{f}: not UTF-8 text (byte {e.start})") from None
        return "\n".join(parts)
    from nfn.data.sources import read_text
    return read_text(args.dataset, quiet=args.json)


def split_heldout(text):
    """(train, heldout): the held-out tail is the text's last 5% of characters, at most 1 MB
    of UTF-8, starting at the first line boundary in it (mid-line if it holds none)."""
    # The most characters whose UTF-8 fits the byte limit: a character is 1 to 4 bytes, so
    # the last HELDOUT_MAX_BYTES characters hold them (a partial first character is dropped).
    last = text[-HELDOUT_MAX_BYTES:].encode("utf-8")[-HELDOUT_MAX_BYTES:]
    fits = len(last.decode("utf-8", errors="ignore"))
    cut = len(text) - min(int(len(text) * HELDOUT_FRACTION), fits)
    newline = text.find("\n", max(cut - 1, 0))
    if 0 <= newline < len(text) - 1:
        cut = newline + 1
    return text[:cut], text[cut:]


def chunks(text, size=1 << 16):
    """Line-aligned pieces for the trainer (the regex never spans pieces)."""
    start = 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


def run_train(args):
    from nfn import paths
    from nfn.errors import UserError
    from nfn.tokenizers import bpe

    bpe.check_name(args.name)
    text = read_source(args)
    train_text, heldout = split_heldout(text)
    if len(train_text) < 1000:
        raise UserError(f"training text is too short ({len(train_text)} characters; need 1000+)")
    t0 = time.time()
    directory = bpe.train(chunks(train_text), args.vocab_size, args.name, paths.tokenizers_dir(),
                          heldout=heldout, quiet=args.json)
    seconds = time.time() - t0
    tok = bpe.load_trained(directory)
    report = {"name": args.name, "dir": directory, "vocab_size": tok.vocab_size,
              "train_chars": len(train_text), "heldout_chars": len(heldout),
              "seconds": round(seconds, 3), "identity": tok.identity()}
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"trained {args.name}: vocab {tok.vocab_size} on {len(train_text):,} characters "
              f"in {seconds:.1f} s -> {directory}")
    if tok.vocab_size < args.vocab_size:
        print(f"note: the text has too few distinct pairs for vocab {args.vocab_size}; "
              f"{args.name} has {tok.vocab_size}", file=sys.stderr)
    return 0


def run_eval(args):
    from nfn import paths
    from nfn import tokenizers
    from nfn.errors import UserError
    from nfn.tokenizers import bpe

    tokenizers.vocab_size_of(args.name)  # an unknown name fails here, before any text is read
    if args.pretraining_file or args.dataset:
        text, source = read_source(args), args.pretraining_file or args.dataset
    else:
        path = os.path.join(paths.tokenizers_dir(), args.name, bpe.HELDOUT_FILE)
        if not os.path.isfile(path):
            raise UserError(f"{path}: no held-out text; pass --pretraining-file or --dataset")
        with open(path, encoding="utf-8") as f:
            text, source = f.read(), path
    if not text:
        raise UserError(f"{source}: evaluation text is empty")
    nbytes = len(text.encode("utf-8"))
    rows = []
    for name in (args.name, "gpt2"):
        tok = tokenizers.load(name, quiet=args.json)
        ntok = len(tok.encode(text))
        rows.append({"tokenizer": name, "vocab_size": tok.vocab_size, "tokens": ntok,
                     "bytes_per_token": round(nbytes / ntok, 4)})
    report = {"source": source, "bytes": nbytes, "results": rows,
              "relative_to_gpt2": round(rows[0]["bytes_per_token"] / rows[1]["bytes_per_token"], 4)}
    if args.json:
        print(json.dumps(report, indent=1))
    else:
        print(f"{nbytes:,} bytes of {source}")
        print(f"{'tokenizer':<16} {'vocab':>7} {'tokens':>10} {'bytes/token':>12}")
        for r in rows:
            print(f"{r['tokenizer']:<16} {r['vocab_size']:>7} {r['tokens']:>10} {r['bytes_per_token']:>12.3f}")
    return 0


def register(sub):
    p = add_command(sub, "tokenizer", __doc__)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    tr = actions.add_parser("train", help="train a BPE tokenizer into the tokenizer cache")
    source = tr.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", help="text source alias: shakespeare or moby-dick")
    source.add_argument("--pretraining-file", help="UTF-8 text file or directory of .txt files")
    tr.add_argument("--vocab-size", type=int, required=True,
                    help="vocabulary size, special tokens included (at least 265)")
    tr.add_argument("--name", required=True, help="name to save under; use as --tokenizer NAME")
    tr.add_argument("--json", action="store_true", help="print a JSON report")
    tr.set_defaults(run=run_train)
    ev = actions.add_parser("eval", help="bytes per token against gpt2 on held-out text")
    ev.add_argument("--name", required=True, help="a trained tokenizer's name")
    source = ev.add_mutually_exclusive_group()
    source.add_argument("--dataset", help="evaluate on this text source instead: shakespeare or moby-dick")
    source.add_argument("--pretraining-file", help="evaluate on this text file or directory instead")
    ev.add_argument("--json", action="store_true", help="print a JSON report")
    ev.set_defaults(run=run_eval)
