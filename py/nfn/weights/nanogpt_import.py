"""A nanoGPT checkpoint (its train.py's ckpt.pt) into the dense GPT family (docs/weights.md).

    import_nanogpt("out/ckpt.pt")      # -> artifacts/ckpt/ (llm.c model file + manifest)

nanoGPT's checkpoint is a dict saved with torch.save: "model" (the state dict, keys prefixed
"_orig_mod." when the model was torch.compile'd), "model_args" (n_layer, n_head, n_embd,
block_size, bias, vocab_size), and optimizer state and counters, not read here. Its GPT is
GPT-2's: learned positions, pre-LayerNorm (eps 1e-5), fused qkv, a 4x GELU MLP, lm_head tied to
wte. nn.Linear stores weights (out, in), which is how llm.c's layout (cc/ckpt/gpt2_layout.cc)
stores them too: qkvw (L, 3C, C), fcw (L, 4C, C), ... no transposition. Without biases
(bias=False) the bias tensors are written as zeros, which is what no bias computes.

The vocabulary: nanoGPT's default 50304 (and 50257) is GPT-2's tokenizer, padded; the manifest
then names gpt2 with vocabulary 50257, and the rows past it stay as trained (no token reads
them). Another size has no tokenizer unless --tokenizer names one. Rows are padded with zeros to
the trainer's padding (a multiple of 128).

PyTorch is imported by this module only, to read the file (torch.load with weights_only, which
unpickles tensors and plain containers, never code).
"""
import os
import secrets
import time

from nfn import fileio
from nfn.errors import UserError
from nfn.weights import artifact

PREFIX = "_orig_mod."
GPT2_ROWS = (50257, 50304)  # GPT-2's vocabulary, and nanoGPT's default padding of it
MODEL_ARGS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")
# llm.c's tensors per layer -> nanoGPT's names within transformer.h.N. (None: a bias).
LAYER_NAMES = [("ln1w", "ln_1.weight"), ("ln1b", "ln_1.bias"), ("qkvw", "attn.c_attn.weight"),
               ("qkvb", "attn.c_attn.bias"), ("attprojw", "attn.c_proj.weight"), ("attprojb", "attn.c_proj.bias"),
               ("ln2w", "ln_2.weight"), ("ln2b", "ln_2.bias"), ("fcw", "mlp.c_fc.weight"), ("fcb", "mlp.c_fc.bias"),
               ("fcprojw", "mlp.c_proj.weight"), ("fcprojb", "mlp.c_proj.bias")]
# Buffers some nanoGPT versions keep in the state dict (the causal mask without flash attention).
IGNORED_SUFFIX = ".attn.bias"


def default_name(path):
    """ckpt.pt in out-shakespeare/ -> out-shakespeare (nanoGPT names its file ckpt.pt, so the
    directory says more); another file name -> that name without .pt."""
    stem = os.path.basename(path)
    if stem.endswith(".pt"):
        stem = stem[:-3]
    if stem == "ckpt":
        stem = os.path.basename(os.path.dirname(os.path.abspath(path))) or stem
    return artifact.plain_name(stem)


def load_checkpoint(path):
    """(state dict of numpy float32 arrays without the compile prefix, model_args dict)."""
    import numpy as np
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: a directory, not a nanoGPT checkpoint (ckpt.pt)") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    if head != b"PK\x03\x04":
        raise UserError(f"{path}: not a PyTorch checkpoint (torch.save's zip file)")
    try:
        import torch
    except ImportError:
        raise UserError("nfn import --nanogpt needs PyTorch to read the checkpoint (pip install torch)") from None
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # unpickling raises what the file holds: RuntimeError, UnpicklingError, ...
        raise UserError(f"{path}: not readable as a nanoGPT checkpoint ({type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''})") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict) or \
            not isinstance(ckpt.get("model_args"), dict):
        raise UserError(f"{path}: not a nanoGPT checkpoint (a dict with 'model' and 'model_args')")
    args = ckpt["model_args"]
    for key in MODEL_ARGS:
        if not isinstance(args.get(key), int) or isinstance(args.get(key), bool) or args[key] < 1:
            raise UserError(f"{path}: model_args {key} is {args.get(key)!r}, not a positive integer")
    if not isinstance(args.get("bias", True), bool):
        raise UserError(f"{path}: model_args bias is {args.get('bias')!r}, not true or false")
    if args["n_embd"] % args["n_head"]:
        raise UserError(f"{path}: model_args n_embd {args['n_embd']} is not a multiple of n_head {args['n_head']}")
    state = {}
    for key, value in ckpt["model"].items():
        name = key[len(PREFIX):] if isinstance(key, str) and key.startswith(PREFIX) else key
        if not isinstance(value, torch.Tensor):
            raise UserError(f"{path}: model entry {key!r} is not a tensor")
        if not value.is_floating_point():
            raise UserError(f"{path}: tensor {name} is {value.dtype}, not floating point")
        state[name] = value.detach().to(torch.float32).numpy().astype(np.float32, copy=False)
    return state, args


def llmc_params(path, state, args, geometry):
    """The flat float32 parameters in llm.c's order for the checked state dict."""
    import numpy as np
    from nfn.infer import checkpoint, hf
    L, C, T = args["n_layer"], args["n_embd"], args["block_size"]
    rows, bias = args["vocab_size"], args.get("bias", True)
    used = set()

    def get(name, shape, absent=False):
        """The tensor of that name and shape; absent (a bias of a bias=False model): zeros."""
        if absent:
            return np.zeros(shape, np.float32)
        if name not in state:
            raise UserError(f"{path}: missing tensor {name}" + ("" if bias else " (bias=False)"))
        if tuple(state[name].shape) != tuple(shape):
            raise UserError(f"{path}: tensor {name} has shape {list(state[name].shape)}, model_args imply "
                            f"{list(shape)}")
        used.add(name)
        return state[name]

    layout = checkpoint.geometry_layout(geometry, path)
    flat = np.zeros(layout["parameters"], dtype=np.float32)
    p = hf.split_flat(flat, layout["geometry"])
    p["wte"][:rows] = get("transformer.wte.weight", (rows, C))  # padding rows stay zero
    p["wpe"][:] = get("transformer.wpe.weight", (T, C))
    for layer in range(L):
        for ours, theirs in LAYER_NAMES:
            is_bias = theirs.endswith(".bias")
            p[ours][layer] = get(f"transformer.h.{layer}.{theirs}", p[ours].shape[1:], absent=is_bias and not bias)
    p["lnfw"][:] = get("transformer.ln_f.weight", (C,))
    p["lnfb"][:] = get("transformer.ln_f.bias", (C,), absent=not bias)
    head = "lm_head.weight"
    if head in state:
        used.add(head)
        if tuple(state[head].shape) != (rows, C) or not np.array_equal(state[head], p["wte"][:rows]):
            raise UserError(f"{path}: lm_head.weight differs from transformer.wte.weight; nanoGPT ties them, and so "
                            "does nfn's GPT")
    extra = sorted(k for k in state if k not in used and not k.endswith(IGNORED_SUFFIX))
    if extra:
        what = " (model_args say bias=False)" if not bias and any(k.endswith(".bias") for k in extra) else ""
        raise UserError(f"{path}: tensors a nanoGPT of these model_args does not have{what}: "
                        f"{', '.join(extra[:4])}{' ...' if len(extra) > 4 else ''}")
    return flat, layout


def import_nanogpt(path, name=None, force=False, tokenizer=None, quiet=True):
    """Import nanoGPT's ckpt.pt at path into artifacts_dir()/name; tokenizer: the tokenizer the
    model was trained with (default: gpt2 for GPT-2's vocabulary, else none). Returns what
    `nfn import --json` prints."""
    import hashlib
    from nfn import tokenizers
    from nfn.infer import model as model_io
    from nfn.weights import decoder_checkpoint
    t0 = time.time()
    name = name or default_name(path)
    artifact.check_name(name)
    final = artifact.destination(name, force)
    state, args = load_checkpoint(path)
    rows = args["vocab_size"]
    if tokenizer is None and rows in GPT2_ROWS:
        tokenizer = "gpt2"
    vocab = rows
    if tokenizer is not None:
        vocab = tokenizers.vocab_size_of(tokenizer)
        if vocab > rows:
            raise UserError(f"--tokenizer {tokenizer} has {vocab} tokens, the checkpoint's embedding {rows} rows")
    padded = (rows + 127) // 128 * 128  # the trainer's padding (cc/model/gpt_config.cc), of the rows
    geometry = {"max_seq_len": args["block_size"], "vocab_size": vocab, "num_layers": args["n_layer"],
                "num_heads": args["n_head"], "channels": args["n_embd"], "padded_vocab_size": padded}
    flat, layout = llmc_params(path, state, args, geometry)
    geometry = layout["geometry"]
    eot = tokenizers.eot_id_of(tokenizer) if tokenizer else None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    source = {"format": "nanogpt", "file": os.path.abspath(path), "sha256": digest.hexdigest(),
              "model_args": {k: args[k] for k in MODEL_ARGS + ("bias",) if k in args}}
    fields = {"format": decoder_checkpoint.MANIFEST_FORMAT, "version": decoder_checkpoint.MANIFEST_VERSION,
              "family": "gpt", "model_family": "gpt", "template": "imported", "geometry": geometry,
              "parameters": layout["parameters"], "tokenizer": tokenizer, "eot_token": eot,
              "weights": decoder_checkpoint.model_file_name(0), "step": 0,
              "run_id": secrets.token_hex(8), "source": source}

    def write(tmp):
        model_io.write_llmc(os.path.join(tmp, decoder_checkpoint.model_file_name(0)), geometry, "f32", flat)
        fileio.write_json(os.path.join(tmp, "manifest.json"), fields)
        fileio.write_json(os.path.join(tmp, decoder_checkpoint.done_file_name(0)), fields)

    artifact.install(name, force, write, quiet)
    return {"name": name, "directory": final, "source": source, "model_family": "gpt", "geometry": geometry,
            "parameters": layout["parameters"], "tokenizer": tokenizer, "eot_token": eot,
            "seconds": round(time.time() - t0, 2)}
