"""Chat with a chat model in the terminal, the conversation kept in a KV cache.

Interactive: type a message; the answer streams as it is sampled. /clear starts a new
conversation, /quit (or end of input) leaves. With -p, prints the one answer and exits;
--json prints the conversation instead (its messages, tool calls and stop reason).

The chat format follows the model's tokenizer: nanochat's special tokens (models trained
here) or ChatML's (imported models such as SmolLM2). When a nanochat-format model writes a
python block, the calculator (or, with --tool python, the sandboxed Python runner) runs it
and its answer is fed back to the model; --no-tools turns this off.

examples:
  nfn chat --checkpoint smollm2
  nfn chat --checkpoint my-sft-run -p "What is 12*34?" --json
  nfn chat --checkpoint my-sft-run --temperature 0 --tool python
"""
from nfn.cli.common import add_command


def register(sub):
    p = add_command(sub, "chat", __doc__)
    p.add_argument("--checkpoint", required=True, help="checkpoint directory, model file, or artifact name")
    p.add_argument("-p", "--prompt", help="answer this one message and exit")
    p.add_argument("--system", help="a system message (folded into the first user turn for nanochat models)")
    p.add_argument("--temperature", type=float, default=0.6, help="sampling temperature; 0 is greedy (default 0.6)")
    p.add_argument("--top-k", type=int, default=50, help="sample from the k most likely tokens (default 50; 0: all)")
    p.add_argument("--max-new-tokens", type=int, default=512, help="tokens an answer may take (default 512)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0): a seed repeats its answers")
    p.add_argument("--tool", choices=["calculator", "python"], default="calculator",
                   help="what runs the model's python blocks (default calculator)")
    p.add_argument("--no-tools", action="store_true", help="do not run the model's python blocks")
    p.add_argument("--tokenizer", help="tokenizer overriding the manifest's")
    p.add_argument("--backend", choices=["cpu", "cuda", "auto"], default="auto")
    p.add_argument("--quantize", choices=["q8_0", "q4_1", "nf4", "bf16"],
                   help="keep a nanochat or llama model's block matrices quantized (weights near 1/4 the "
                        "size) or in bf16 (half; bf16 GEMMs on a CPU that has them)")
    p.add_argument("--context", type=int, default=0,
                   help="positions the KV cache holds, at most the model's (default: the model's; nanochat and llama)")
    p.add_argument("--json", action="store_true", help="with -p: print the conversation as JSON")
    p.set_defaults(run=run)


def run(args):
    from nfn.chat import chat_cli
    return chat_cli.run(args)
