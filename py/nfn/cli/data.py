"""Prepare and list datasets: raw text to cached llm.c-format token shards.

  nfn data prepare --dataset ALIAS|--pretraining-file PATH|--parquet PATH_OR_GLOB --tokenizer NAME [--json]
  nfn data list [--json]
  nfn data tokenizers [--json]

Aliases: shakespeare (default), moby-dick, tinystories, fineweb-sp1024-1shard and
fineweb-sp1024-10shards (1 or 10 train shards of FineWeb tokenized with sp1024, from
$NFN_FINEWEB_SP1024_DIR; golf1 and golf10 name them too); or a directory of token shards,
or a *_train*.bin file (its *_val*.bin siblings are found beside it). --parquet takes Parquet
files (a file, a directory's *.parquet, or a glob; FineWeb-Edu's layout), one document a row in
--text-column, read a batch of rows at a time.
Tokenizers: gpt2, sp1024, sp2048, sp4096, sp8192, or a name trained by `nfn tokenizer train`.
Prepared shards live under $NFN_DATASETS_DIR (default ~/.cache/nfn/datasets).
"""
import json

from nfn.cli.common import add_command


def register(sub):
    p = add_command(sub, "data", __doc__)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    prep = actions.add_parser("prepare", help="tokenize a source into cached shards")
    source = prep.add_mutually_exclusive_group()
    source.add_argument("--dataset", help="alias (shakespeare, moby-dick, tinystories, fineweb-sp1024-1shard, "
                                          "fineweb-sp1024-10shards), shard directory or *_train*.bin file "
                                          "(default: shakespeare)")
    source.add_argument("--pretraining-file", help="UTF-8 text file or directory of .txt files")
    source.add_argument("--tinystories", action="store_true", help="same as --dataset tinystories")
    source.add_argument("--parquet", metavar="PATH_OR_GLOB",
                        help="Parquet files, one document a row: a file, a directory's *.parquet or a glob")
    prep.add_argument("--text-column", default="text", help="the Parquet column holding the text (default: text)")
    prep.add_argument("--tokenizer", help="tokenizer name (default: gpt2, or the one existing shards were made with)")
    prep.add_argument("--shard-tokens", type=int, default=100_000_000,
                      help="tokens per shard file (default: 100000000, as llm.c)")
    prep.add_argument("--workers", type=int, default=None, help="tokenizer processes (default: every core)")
    prep.add_argument("--json", action="store_true", help="print one JSON object describing the shards")
    prep.set_defaults(run=run_prepare)
    lst = actions.add_parser("list", help="dataset aliases and whether each is cached")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(run=run_list)
    tok = actions.add_parser("tokenizers", help="known tokenizers and whether each is ready")
    tok.add_argument("--json", action="store_true")
    tok.set_defaults(run=run_tokenizers)


def run_prepare(args):
    from nfn.data.prepare import prepare_dataset
    from nfn.errors import UserError

    if args.workers is not None and args.workers < 1:
        raise UserError(f"--workers must be at least 1, got {args.workers}")
    if "" in (args.dataset, args.pretraining_file, args.tokenizer, args.parquet, args.text_column):
        raise UserError("an empty path or name was given (--dataset, --pretraining-file, --parquet, --text-column "
                        "or --tokenizer ''); an unset shell variable?")
    dataset = "tinystories" if args.tinystories else args.dataset
    result = prepare_dataset(dataset=dataset, pretraining_file=args.pretraining_file, tokenizer="gpt2" if args.tokenizer is None else args.tokenizer,
                             quiet=args.json, shard_tokens=args.shard_tokens, workers=args.workers,
                             parquet=args.parquet, text_column=args.text_column)
    if args.tokenizer is not None and result["tokenizer"] != args.tokenizer:  # shards that name their own tokenizer
        raise UserError(f"{result['dataset']}: its shards were made with tokenizer {result['tokenizer']}, "
                        f"not {args.tokenizer} (--tokenizer); prepare the text with {args.tokenizer} instead")
    if args.json:
        print(json.dumps(result))
        return 0
    state = "cached" if result["cached"] else "prepared"
    print(f"{result['dataset']} ({result['tokenizer']}, vocab {result['vocab_size']}): {state} in {result['dir']}")
    print(f"  train {result['train_tokens']:,} tokens in {len(result['train_shards'])} shard(s)")
    print(f"  val   {result['val_tokens']:,} tokens in {len(result['val_shards'])} shard(s)")
    return 0


def run_list(args):
    from nfn import paths
    from nfn.data import DEFAULT_DATASET
    from nfn.data.cache import cached_entries
    from nfn.data.resolve import ALIASES

    cached = cached_entries()
    rows = [{"alias": a, "default": a == DEFAULT_DATASET, "cached_tokenizers": cached.get(a, []), "description": d}
            for a, d in ALIASES.items()]
    others = [{"alias": name, "default": False, "cached_tokenizers": toks, "description": "prepared from files"}
              for name, toks in cached.items() if name not in ALIASES]
    if args.json:
        print(json.dumps({"datasets_dir": paths.datasets_dir(), "aliases": rows, "other": others}))
        return 0
    width = max(len(a) + 1 for a in ALIASES)  # the aliases line up; a long path of files may not
    print(f"{'alias':<{width}} {'cached for':<20} description")
    for r in rows + others:
        mark = "*" if r["default"] else " "
        print(f"{r['alias'] + mark:<{width}} {','.join(r['cached_tokenizers']) or '-':<20} {r['description']}")
    print(f"(* default; cache: {paths.datasets_dir()})")
    return 0


def run_tokenizers(args):
    from nfn import tokenizers

    rows = [tokenizers.describe(name) for name in tokenizers.known_names()]
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"{'name':<12} {'kind':<18} {'vocab':>6}  {'ready':<5}  note")
    for r in rows:
        print(f"{r['name']:<12} {r['kind']:<18} {r['vocab_size']:>6}  {'yes' if r['ready'] else 'no':<5}  {r['note']}")
    return 0
