"""Evaluate a checkpoint: mean loss, perplexity and bits per byte on a dataset split.

The split's shards are scored in windows of the model's context with the native engine.
Bits per byte divide the summed loss by ln 2 and by the UTF-8 bytes of the decoded targets
(end-of-text tokens excluded), as nanochat does.

Without --dataset, the data the checkpoint was trained on (its manifest names it).

example:
  nfn eval --checkpoint gpt --max-tokens 20000 --json
"""
from nfn.cli.common import add_command


def register(sub):
    p = add_command(sub, "eval", __doc__)
    p.add_argument("--checkpoint", required=True, help="checkpoint directory, file, or artifact name")
    p.add_argument("--dataset", help="dataset alias or shard directory (default: the checkpoint's training data)")
    p.add_argument("--split", default="val", choices=["train", "val"], help="split (default: val)")
    p.add_argument("--max-tokens", type=int, help="stop after this many tokens")
    p.add_argument("--graph-file", help="manifest overriding the checkpoint's")
    p.add_argument("--weights", help="weights file overriding the checkpoint's")
    p.add_argument("--tokenizer", help="tokenizer overriding the manifest's (for files without one)")
    p.add_argument("--backend", choices=["cpu", "cuda", "auto"], default="auto")
    p.add_argument("--quantize", choices=["q8_0", "q4_1", "nf4", "bf16"],
                   help="keep a nanochat or llama model's block matrices quantized (weights near 1/4 the "
                        "size) or in bf16 (half; bf16 GEMMs on a CPU that has them)")
    p.add_argument("--context", type=int, default=0,
                   help="positions the KV cache holds, at most the model's (default: the model's; nanochat and llama)")
    p.add_argument("--json", action="store_true", help="print loss, perplexity, bits_per_byte, tokens")
    p.set_defaults(run=run)


def run(args):
    from nfn.infer import evaluate
    return evaluate.run(args)
