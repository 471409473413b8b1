"""Evaluate a checkpoint: mean loss, perplexity and bits per byte on a dataset split."""
from nfn.cli.common import add_command, not_implemented


def register(sub):
    p = add_command(sub, "eval", __doc__)
    p.add_argument("--checkpoint", required=True, help="checkpoint directory, file, or artifact name")
    p.add_argument("--dataset", help="dataset alias or shard directory")
    p.add_argument("--split", default="val", choices=["train", "val"], help="split (default: val)")
    p.add_argument("--max-tokens", type=int, help="stop after this many tokens")
    p.add_argument("--backend", choices=["cpu", "cuda", "auto"], default="auto")
    p.add_argument("--json", action="store_true", help="print loss, perplexity, bits_per_byte, tokens")
    p.set_defaults(run=not_implemented("nfn eval", "#6"))
