"""Train and evaluate byte-level BPE tokenizers for the chat pipeline.

  nfn tokenizer train --dataset ALIAS|--pretraining-file PATH --vocab-size N --name NAME
  nfn tokenizer eval --name NAME
"""
from nfn.cli.common import add_command, not_implemented


def register(sub):
    p = add_command(sub, "tokenizer", __doc__)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    tr = actions.add_parser("train", help="train a BPE tokenizer into the tokenizer cache")
    source = tr.add_mutually_exclusive_group(required=True)
    source.add_argument("--dataset", help="dataset alias")
    source.add_argument("--pretraining-file", help="UTF-8 text file or directory")
    tr.add_argument("--vocab-size", type=int, required=True, help="vocabulary size")
    tr.add_argument("--name", required=True, help="name to save under; use as --tokenizer NAME")
    tr.set_defaults(run=not_implemented("nfn tokenizer train", "#7"))
    ev = actions.add_parser("eval", help="bytes per token against gpt2 on held-out text")
    ev.add_argument("--name", required=True)
    ev.add_argument("--json", action="store_true")
    ev.set_defaults(run=not_implemented("nfn tokenizer eval", "#7"))
