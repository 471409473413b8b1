"""Measure nfn's engines on this machine.

  nfn bench infer --checkpoint C   prefill and decode tokens/s, weight bytes and peak memory of
                                   the KV-cached engine over weight formats and prompt lengths
"""
import argparse

from nfn.cli.common import add_command

INFER_DOC = """\
Prefill and decode tokens/s of the KV-cached engine, over weight formats and prompt lengths.

Each configuration (weights format, prompt length) runs in a process of its own, so the peak
memory it reports (resident set on the CPU, from /proc/self/status VmHWM; device memory in use
on CUDA) is its own. It opens the engine, runs one untimed generation, then --repeats greedy
generations of --new-tokens tokens after a prompt of random token ids, and reports the medians:
prefill tokens/s (the prompt over its one forward) and decode tokens/s (the tokens fed back
through the cache over the decode time), the engine's weight bytes and the memory. The host's
CPU model and GEMM features (and the GPU on CUDA) head the table.

Every row is batch 1: the engine decodes one sequence at a time (there is no batched decode).
Weights: f32, or q8_0, q4_1 and nf4 (a nanochat or llama model's block matrices kept
quantized); the engine has no bf16 weights. A dense GPT checkpoint runs f32 only.

examples:
  nfn bench infer --checkpoint smollm2
  nfn bench infer --checkpoint smollm2 --weights f32,q4_1 --prompt-lengths 16,512 --json
"""


def register(sub):
    p = add_command(sub, "bench", __doc__)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    inf = actions.add_parser("infer", help="prefill and decode tokens/s and memory of the inference engine",
                             description=INFER_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    inf.add_argument("--checkpoint", required=True,
                     help="checkpoint directory, weights or model file, HF directory, or artifact name")
    inf.add_argument("--prompt-lengths", default="16,128,512", metavar="N,N,...",
                     help="prompt lengths in tokens (default: 16,128,512)")
    inf.add_argument("--new-tokens", type=int, default=64, help="tokens generated a run (default: 64)")
    inf.add_argument("--weights", metavar="F,F,...",
                     help="weight formats among f32,q8_0,q4_1,nf4 (default: all four; f32 for a dense GPT)")
    inf.add_argument("--repeats", type=int, default=3, help="timed generations a configuration (default: 3)")
    inf.add_argument("--backend", choices=["cpu", "cuda"], default="cpu", help="op library (default: cpu)")
    inf.add_argument("--threads", type=int, default=0,
                     help="CPU threads (default: every core this process may use)")
    inf.add_argument("--context", type=int, default=0,
                     help="positions the cache holds (default: the longest prompt plus --new-tokens; "
                          "nanochat and llama)")
    inf.add_argument("--timeout", type=int, default=600, help="seconds a configuration may take (default: 600)")
    inf.add_argument("--json", action="store_true", help="print one JSON object")
    inf.set_defaults(run=run_infer)


def run_infer(args):
    from nfn.bench import infer
    return infer.main(args)
