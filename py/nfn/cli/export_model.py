"""Export a checkpoint for other tools: Hugging Face llama, nanochat, or a LoRA run merged.

  nfn export --checkpoint C --hf DIR [--json]
  nfn export --checkpoint C --nanochat DIR [--phase base|mid|sft|rl] [--json]
  nfn export --checkpoint C --merge-lora DIR [--json]

--hf (llama checkpoints): DIR/config.json (a LlamaConfig), model.safetensors (Hugging Face's
tensor names, the checkpoint's dtype) and, when the checkpoint's tokenizer is a model's own
(`nfn import`'s), tokenizer.json and tokenizer_config.json with its special tokens and chat
template. transformers' LlamaForCausalLM.from_pretrained(DIR) loads it.

--nanochat (nanochat checkpoints): DIR laid out as nanochat's base directory:
<phase>_checkpoints/d<layers>/model_NNNNNN.pt and meta_NNNNNN.json, and, when the checkpoint's
tokenizer is a chat BPE of `nfn tokenizer train`, tokenizer/tokenizer.pkl and token_bytes.pt.
NANOCHAT_BASE_DIR=DIR then lets nanochat's scripts load it. PyTorch is imported here only.

--merge-lora (a LoRA run's checkpoint, its adapters alone): DIR holds the whole model they make
with their base, W + (alpha/rank) B A, as a decoder checkpoint. --hf and --nanochat take a LoRA
checkpoint too, merged the same way.

DIR must be absent or empty; it is written in a temporary directory beside it and renamed into
place. `nfn import --hf DIR` and `nfn import --nanochat DIR` read the exports back, bit for bit.
The dense GPT's exports are `nfn infer --export-hf` and `--export-llmc`. docs/weights.md.

examples:
  nfn export --checkpoint smollm2-135m-instruct --hf /tmp/smollm2-hf
  nfn export --checkpoint nanochat --nanochat /tmp/nanochat-base
"""
import json

from nfn.cli.common import add_command


def register(sub):
    p = add_command(sub, "export", __doc__)
    p.add_argument("--checkpoint", required=True, help="checkpoint directory, model file, or artifact name")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--hf", metavar="DIR", help="write a Hugging Face llama directory")
    target.add_argument("--nanochat", metavar="DIR", help="write a nanochat base directory")
    target.add_argument("--merge-lora", metavar="DIR", help="write a LoRA checkpoint's merged model as a checkpoint")
    p.add_argument("--phase", choices=["base", "mid", "sft", "rl"], default="base",
                   help="--nanochat: the phase's checkpoints directory to write (default: base)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(run=run)


def run(args):
    import sys
    from nfn.errors import UserError
    if args.phase != "base" and not args.nanochat:
        raise UserError("--phase is for --nanochat")
    if args.hf:
        from nfn.weights import hf_llama
        result = hf_llama.export_hf(args.checkpoint, args.hf)
    elif args.merge_lora:
        from nfn.weights import lora_merge
        result = lora_merge.export_merged(args.checkpoint, args.merge_lora)
    else:
        from nfn.weights import nanochat_interchange
        result = nanochat_interchange.export_nanochat(args.checkpoint, args.nanochat, args.phase)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    if result["note"]:
        print(f"nfn export: note: {result['note']}", file=sys.stderr)
    print(f"wrote {result['directory']} ({result['model_family']}, {result['dtype']}; tokenizer "
          f"{result['tokenizer'] or 'none'}) from {result['source']} in {result['seconds']:.1f} s")
    return 0
