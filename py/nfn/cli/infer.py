"""Generate text from a checkpoint with a KV cache, or inspect a checkpoint's layout.

The tokenizer and geometry come from the checkpoint's manifest. Text streams as it is made.
"""
from nfn.cli.common import add_command, not_implemented


def register(sub):
    p = add_command(sub, "infer", __doc__)
    p.add_argument("--checkpoint", required=True,
                   help="checkpoint directory, model_%%08d.bin file, or artifact name")
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", help="prompt text")
    prompt.add_argument("--prompt-tokens", help="comma-separated prompt token ids")
    p.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate (default: 64)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature; 0 is greedy")
    p.add_argument("--top-k", type=int, help="sample from the k most likely tokens")
    p.add_argument("--top-p", type=float, help="nucleus sampling threshold")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    p.add_argument("--graph-file", help="manifest overriding the checkpoint's")
    p.add_argument("--weights", help="weights file overriding the checkpoint's")
    p.add_argument("--backend", choices=["cpu", "cuda", "auto"], default="auto")
    p.add_argument("--native-info", action="store_true", help="print the checkpoint header as JSON")
    p.add_argument("--checkpoint-layout", action="store_true",
                   help="print tensor names, shapes and byte offsets as JSON")
    p.add_argument("--json", action="store_true", help="print one JSON object with the result")
    p.set_defaults(run=not_implemented("nfn infer", "#6"))
