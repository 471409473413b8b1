"""Generate text from a checkpoint with a KV cache, or inspect or convert a checkpoint.

The tokenizer and geometry come from the checkpoint's manifest. The prompt is prefilled once,
then tokens are sampled one at a time through the KV cache; text streams as it is made.
--checkpoint takes a directory written by `nfn train` (the checkpoint `nfn train --resume
auto` would continue there), a model_%08d.bin or other llm.c model file (v3 fp32 / v5 bf16),
a Hugging Face GPT-2 directory (config.json + model.safetensors), or an artifact name.

Without --prompt or --prompt-tokens, samples from the end-of-text token alone (unconditional).

examples:
  nfn infer --checkpoint gpt
  nfn infer --checkpoint gpt --prompt "Once upon" --max-new-tokens 40 --temperature 0.8 --top-k 50
  nfn infer --checkpoint gpt --prompt-tokens 464,2068 --temperature 0 --json
  nfn infer --checkpoint gpt --checkpoint-layout
  nfn infer --checkpoint gpt --export-hf /tmp/gpt-hf
"""
from nfn.cli.common import add_command


def register(sub):
    p = add_command(sub, "infer", __doc__)
    p.add_argument("--checkpoint", required=True,
                   help="checkpoint directory, model_%%08d.bin file, HF directory, or artifact name")
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
    p.add_argument("--tokenizer", help="tokenizer overriding the manifest's (for files without one)")
    p.add_argument("--backend", choices=["cpu", "cuda", "auto"], default="auto")
    p.add_argument("--quantize", choices=["q8_0", "q4_1", "nf4", "bf16"],
                   help="keep a nanochat or llama model's block matrices quantized (weights near 1/4 the "
                        "size) or in bf16 (half; bf16 GEMMs on a CPU that has them)")
    p.add_argument("--context", type=int, default=0,
                   help="positions the KV cache holds, at most the model's (default: the model's; nanochat and llama)")
    p.add_argument("--native-info", action="store_true", help="print the checkpoint header as JSON")
    p.add_argument("--checkpoint-layout", action="store_true",
                   help="print tensor names, shapes and byte offsets as JSON")
    p.add_argument("--export-hf", metavar="DIR", help="write config.json + model.safetensors (GPT-2 layout)")
    p.add_argument("--export-llmc", metavar="FILE", help="write an llm.c model file (from any checkpoint)")
    p.add_argument("--json", action="store_true", help="print one JSON object with the result")
    p.set_defaults(run=run)


def run(args):
    from nfn.infer import generate
    return generate.run(args)
