"""Serve a web chat page for a chat model, on this machine (127.0.0.1) by default.

Opens the model once and answers at http://HOST:PORT/: the page (type a message, Enter sends;
the answer streams in; New chat starts over), GET /health, and POST /chat/completions, which
takes {"messages": [{"role", "content"}...], "temperature", "top_k", "max_tokens"} and answers
with server-sent events, as nanochat's chat_web.py: data: {"token": "..."} per piece of text,
then data: {"done": true, "stop_reason": ...}. One answer is generated at a time; up to
--max-queue requests wait for it, later ones get 503. What users and the model write is shown
as text, never as HTML. There is no authentication: --host 0.0.0.0 lets anyone who reaches
the port use the model.

examples:
  nfn serve --checkpoint my-sft-run
  nfn serve --checkpoint smollm2 --port 8080 --temperature 0
"""
from nfn.cli.common import add_command


def register(sub):
    p = add_command(sub, "serve", __doc__)
    p.add_argument("--checkpoint", required=True, help="checkpoint directory, model file, or artifact name")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000; 0: any free port)")
    p.add_argument("--name", help="the model's name on the page (default: the --checkpoint's last path part)")
    p.add_argument("--temperature", type=float, default=0.6,
                   help="sampling temperature for requests that give none, in [0, 2] (default 0.6; 0 is greedy)")
    p.add_argument("--top-k", type=int, default=50, help="top-k for requests that give none, in [0, 200] (default 50)")
    p.add_argument("--max-tokens", type=int, default=512,
                   help="answer length for requests that give none, in [1, 4096] (default 512)")
    p.add_argument("--max-queue", type=int, default=8,
                   help="requests that may wait while one generates; more get 503 (default 8)")
    p.add_argument("--tool", choices=["calculator", "python"], default="calculator",
                   help="what runs the model's python blocks (default calculator)")
    p.add_argument("--no-tools", action="store_true", help="do not run the model's python blocks")
    p.add_argument("--tokenizer", help="tokenizer overriding the manifest's")
    p.add_argument("--backend", choices=["cpu", "cuda", "auto"], default="auto")
    p.add_argument("--quantize", choices=["q8_0", "q4_1", "nf4"],
                   help="keep a nanochat or llama model's block matrices quantized (weights near 1/4 the size)")
    p.add_argument("--context", type=int, default=0,
                   help="positions the KV cache holds, at most the model's (default: the model's; nanochat and llama)")
    p.add_argument("--quiet", action="store_true", help="do not log each request")
    p.set_defaults(run=run)


def run(args):
    from nfn.chat import web
    return web.run(args)
