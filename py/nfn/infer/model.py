"""Everything a command needs to run a checkpoint: weights, geometry, tokenizer, engine.

`load(args)` follows --checkpoint (and the --weights / --graph-file / --tokenizer
overrides); `start_engine` opens the native engine on the backend asked for.
"""
from dataclasses import dataclass
from typing import Optional

from nfn import fileio
from nfn.errors import UserError
from nfn.infer import checkpoint

CUDA_LIB = "libnfn_native_train_tile_ops.so"


@dataclass
class LoadedModel:
    geometry: dict
    dtype: str               # storage of the file: "f32" or "bf16"
    params: object           # numpy float32, checkpoint order (bf16 files widened); None for a
                             # decoder, whose engine reads its weights file itself
    tokenizer: Optional[str]
    eot: Optional[int]
    source: str              # the file or directory the weights came from
    data: Optional[tuple] = None  # the training data its manifest names (checkpoint.recorded_data)
    family: str = "gpt"      # or a decoder family: nanochat, llama


def read_raw(ckpt):
    """The parameters of an llm.c checkpoint (resolved with its header) as stored: float32, or
    uint16 bf16 words, from where its layout puts the first tensor."""
    import numpy as np
    dtype = np.float32 if ckpt.header["dtype"] == "f32" else np.uint16
    return np.fromfile(ckpt.path, dtype=dtype, count=ckpt.header["parameters"], offset=ckpt.tensors[0]["offset"])


def widen_bf16(words):
    import numpy as np
    return (words.astype(np.uint32) << 16).view(np.float32)


def write_llmc(path, geom, dtype, flat):
    """An llm.c model file (version 3 for f32, 5 for bf16 words), atomically."""
    import numpy as np
    header = np.zeros(checkpoint.HEADER_INTS, dtype="<i4")
    header[0], header[1] = checkpoint.MODEL_MAGIC, 3 if dtype == "f32" else 5
    header[2:8] = [geom[k] for k in checkpoint.GEOMETRY_FIELDS]
    with fileio.atomic_open(path) as f:
        f.write(header.tobytes())
        f.write(np.ascontiguousarray(flat, dtype="<f4" if dtype == "f32" else "<u2").tobytes())


def load_stored(args, ckpt=None):
    """(geometry, dtype, parameters as stored, manifest dict or None, source) for the args (whose
    checkpoint is ckpt, when the caller resolved it)."""
    weights = getattr(args, "weights", None)
    ckpt = ckpt or checkpoint.resolve(weights if weights else args.checkpoint, header=True)
    manifest_path = getattr(args, "graph_file", None) or ckpt.manifest
    if ckpt.kind == "decoder":
        raise UserError(f"{ckpt.path}: a {ckpt.family} checkpoint: --export-hf and --export-llmc write the dense "
                        "GPT-2 layout only")
    if ckpt.kind == "hf":
        from nfn.infer import hf
        geom, dtype, flat, cfg = hf.load(ckpt.path)
        manifest = {"tokenizer": cfg.get("nfn_tokenizer"), "eot_token": cfg.get("eos_token_id")}
    else:
        flat = read_raw(ckpt)
        geom, dtype, manifest = checkpoint.geometry(ckpt.header), ckpt.header["dtype"], None
    if manifest_path:
        manifest = checkpoint.read_manifest(manifest_path)
        checkpoint.check_manifest_matches(manifest_path, manifest, geom)
    return geom, dtype, flat, manifest, ckpt.path


def load_decoder(args, ckpt):
    """(geometry, dtype, manifest dict or None) of a decoder checkpoint: the geometry from its
    weights file's header; the engine reads the tensors itself."""
    _, geom, tensors = checkpoint.decoder_header(ckpt.path)
    manifest_path = getattr(args, "graph_file", None) or ckpt.manifest
    manifest = None
    if manifest_path:
        manifest = checkpoint.read_manifest(manifest_path)
        checkpoint.check_manifest_matches(manifest_path, manifest, geom)
    return geom, "bf16" if {t["dtype"] for t in tensors} == {"BF16"} else "f32", manifest


def load(args, need_tokenizer=True):
    weights = getattr(args, "weights", None)
    ckpt = checkpoint.resolve(weights if weights else args.checkpoint, header=True)
    if ckpt.kind == "decoder":
        (geom, dtype, manifest), params, source, family = load_decoder(args, ckpt), None, ckpt.path, ckpt.family
    else:
        geom, dtype, flat, manifest, source = load_stored(args, ckpt)
        params, family = flat if dtype == "f32" else widen_bf16(flat), "gpt"
    tokenizer = getattr(args, "tokenizer", None) or (manifest or {}).get("tokenizer")
    if tokenizer is None and geom["vocab_size"] == 50257:
        tokenizer = "gpt2"  # llm.c's GPT-2 files carry no manifest; their vocabulary says gpt2
    eot = (manifest or {}).get("eot_token")
    if tokenizer is not None:
        check_tokenizer(tokenizer, geom, source)
    elif need_tokenizer:
        also = " or --prompt-tokens IDS" if hasattr(args, "prompt_tokens") else ""  # nfn infer's
        raise UserError(f"{source}: no tokenizer recorded (no manifest); pass --tokenizer NAME{also}")
    return LoadedModel(geom, dtype, params, tokenizer, eot, source, checkpoint.recorded_data(manifest), family)


def check_tokenizer(name, geom, source):
    from nfn import tokenizers
    size = tokenizers.vocab_size_of(name)
    if size != geom["vocab_size"]:
        raise UserError(f"tokenizer {name} has {size} tokens but {source} has a vocabulary of "
                        f"{geom['vocab_size']}: they do not belong together")


def cuda_library():
    """The CUDA op library the trainer would load ($NFN_TILE_OPS_DIR, else beside it or in its
    runfiles), asked of the trainer's own lookup; None where there is none."""
    from nfn import _native, native_bin
    return _native.find_op_library("cuda", native_bin.trainer_binary()) or None


def start_engine(model, backend="auto", threads=0, quantize=None, context=0):
    """(engine, backend note). cpu: the CPU ops linked into nfn._native; cuda: the CUDA op
    library, loaded at run time; auto: CUDA when it loads and runs every op needed, else CPU.
    quantize (q8_0, q4_1, nf4, bf16): a decoder's block matrices stay so; context > 0: the
    positions a decoder's cache holds (at most the model's)."""
    for flag, value in (("--quantize", quantize), ("--context", context)):
        if value and model.family == "gpt":
            raise UserError(f"{flag}: {model.source} is a dense GPT checkpoint; {flag} applies to nanochat and "
                            "llama checkpoints")
    if context < 0:
        raise UserError(f"--context must be >= 0 (got {context})")
    from nfn import _native
    g = model.geometry
    dims = (g["max_seq_len"], g["vocab_size"], g["num_layers"], g["num_heads"], g["channels"],
            g["padded_vocab_size"])

    def open_engine(**kw):
        if model.family == "gpt":
            return _native.InferenceEngine(model.params, *dims, threads=threads, **kw)
        return _native.InferenceEngine(weights_file=model.source, threads=threads, quantize=quantize or "",
                                       context=context, **kw)
    note = None
    if backend in ("cuda", "auto"):
        lib = cuda_library()
        if lib is None:
            if backend == "cuda":
                raise UserError(f"--backend cuda: {CUDA_LIB} is not built (no CUDA toolkit at build time) "
                                "and $NFN_TILE_OPS_DIR does not hold it")
            note = "auto: no CUDA op library built"
        else:
            try:
                return open_engine(library=lib), None
            except ValueError as e:  # the weights file or the thread count, not the library
                raise UserError(str(e)) from None
            except RuntimeError as e:
                if backend == "cuda":
                    raise UserError(f"--backend cuda: {e}") from None
                note = f"auto: CUDA unusable ({e})"
    try:
        return open_engine(), note
    except (RuntimeError, ValueError) as e:
        raise UserError(str(e)) from None
