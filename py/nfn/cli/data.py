"""Prepare and list datasets: raw text to cached llm.c-format token shards.

  nfn data prepare --dataset ALIAS|--pretraining-file PATH --tokenizer NAME [--json]
  nfn data list [--json]
  nfn data tokenizers [--json]
"""
from nfn.cli.common import add_command, not_implemented


def register(sub):
    p = add_command(sub, "data", __doc__)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    prep = actions.add_parser("prepare", help="tokenize a source into cached shards")
    source = prep.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", help="alias (shakespeare, tinystories, ...) or shard directory")
    source.add_argument("--pretraining-file", help="UTF-8 text file or directory of .txt files")
    prep.add_argument("--tokenizer", default="gpt2", help="tokenizer name (default: gpt2)")
    prep.add_argument("--json", action="store_true", help="print one JSON object describing the shards")
    prep.set_defaults(run=not_implemented("nfn data prepare", "#3"))
    lst = actions.add_parser("list", help="dataset aliases and whether each is cached")
    lst.add_argument("--json", action="store_true")
    lst.set_defaults(run=not_implemented("nfn data list", "#3"))
    tok = actions.add_parser("tokenizers", help="known tokenizers and whether each is ready")
    tok.add_argument("--json", action="store_true")
    tok.set_defaults(run=not_implemented("nfn data tokenizers", "#3"))
