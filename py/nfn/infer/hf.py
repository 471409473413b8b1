"""The Hugging Face GPT-2 layout: config.json + model.safetensors, as GPT2LMHeadModel saves
it (keys under "transformer.", the LM head tied to wte and not stored).

Our tensors map one to one: HF's Conv1D weights are stored (in, out), the transpose of our
(out, in) matrices; HF's wte has vocab_size rows, ours is padded to padded_vocab_size with
zero rows, which no real token's logit reads. Values are moved bit for bit, f32 as F32 and
bf16 (version 5 files) as BF16.

Module level is standard library only; numpy is imported by the functions that move data.
"""
import json
import math
import os

from nfn import fileio
from nfn.errors import UserError
from nfn.infer import checkpoint, safetensors

PREFIX = "transformer."
# Our per-layer tensor -> (HF name inside h.{l}., transposed)
LAYER_MAP = [("ln1w", "ln_1.weight", False), ("ln1b", "ln_1.bias", False),
             ("qkvw", "attn.c_attn.weight", True), ("qkvb", "attn.c_attn.bias", False),
             ("attprojw", "attn.c_proj.weight", True), ("attprojb", "attn.c_proj.bias", False),
             ("ln2w", "ln_2.weight", False), ("ln2b", "ln_2.bias", False),
             ("fcw", "mlp.c_fc.weight", True), ("fcb", "mlp.c_fc.bias", False),
             ("fcprojw", "mlp.c_proj.weight", True), ("fcprojb", "mlp.c_proj.bias", False)]
# Buffers some GPT-2 files carry that hold no parameters.
IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")


def config_json(geom, dtype, tokenizer=None, eot=None):
    """A GPT2Config for our geometry: tanh GELU, eps 1e-5, tied embeddings."""
    cfg = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
           "vocab_size": geom["vocab_size"], "n_positions": geom["max_seq_len"], "n_ctx": geom["max_seq_len"],
           "n_embd": geom["channels"], "n_layer": geom["num_layers"], "n_head": geom["num_heads"],
           "n_inner": None, "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
           "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "tie_word_embeddings": True,
           "torch_dtype": "float32" if dtype == "f32" else "bfloat16"}
    if eot is not None:
        cfg["bos_token_id"] = cfg["eos_token_id"] = int(eot)
    if tokenizer:
        cfg["nfn_tokenizer"] = tokenizer
    return cfg


def read_config(directory):
    """Our geometry from config.json; refuses configs our GPT cannot represent."""
    path = os.path.join(directory, "config.json")
    cfg = fileio.read_json(path)
    if not isinstance(cfg, dict) or cfg.get("model_type") != "gpt2":
        raise UserError(f"{path}: model_type must be \"gpt2\" (got {cfg.get('model_type') if isinstance(cfg, dict) else cfg!r})")
    for field in ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head"):
        if not isinstance(cfg.get(field), int):
            raise UserError(f"{path}: missing integer field {field}")
    if cfg.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh"):
        raise UserError(f"{path}: activation_function {cfg['activation_function']} is not GPT-2's tanh GELU")
    if cfg.get("n_inner") not in (None, 4 * cfg["n_embd"]):
        raise UserError(f"{path}: n_inner {cfg['n_inner']} is not 4 * n_embd")
    if cfg.get("tie_word_embeddings", True) is not True:
        raise UserError(f"{path}: tie_word_embeddings is false; nfn's GPT ties the LM head to wte")
    # Fields of GPT2Config that change the forward pass: each must be GPT-2's (and nfn's) value.
    for field, want, what in (("layer_norm_epsilon", 1e-5, "nfn's LayerNorm epsilon is 1e-5"),
                              ("scale_attn_weights", True, "nfn scales attention scores by 1/sqrt(head size)"),
                              ("scale_attn_by_inverse_layer_idx", False,
                               "nfn does not scale attention scores by the layer's index"),
                              ("add_cross_attention", False, "nfn's GPT has no cross-attention")):
        got = cfg.get(field, want)
        # The epsilon within float32's rounding: nfn's 1e-5f is 9.99999974e-06 as a double.
        if type(got) is not type(want) or not (got == want or (type(want) is float and
                                                              math.isclose(got, want, rel_tol=1e-6))):
            raise UserError(f"{path}: {field} is {json.dumps(got)}, not {json.dumps(want)}: {what}")
    # The trainer pads the vocabulary (wte's rows) and checks the geometry.
    geom = checkpoint.geometry_layout({"max_seq_len": cfg["n_positions"], "vocab_size": cfg["vocab_size"],
                                       "num_layers": cfg["n_layer"], "num_heads": cfg["n_head"],
                                       "channels": cfg["n_embd"]}, path)["geometry"]
    # eos_token_id: one id, or (as Hugging Face allows) a list of them, of which the first
    # stops generation here.
    eos = cfg.get("eos_token_id")
    if isinstance(eos, list) and eos:
        eos = eos[0]
    if eos is not None and (not isinstance(eos, int) or isinstance(eos, bool) or not 0 <= eos < cfg["vocab_size"]):
        raise UserError(f"{path}: eos_token_id {cfg.get('eos_token_id')!r} is not a token id of the vocabulary")
    cfg["eos_token_id"] = eos
    if cfg.get("nfn_tokenizer") is not None and not isinstance(cfg["nfn_tokenizer"], str):
        raise UserError(f"{path}: nfn_tokenizer {cfg['nfn_tokenizer']!r} is not a name")
    return cfg, geom


def _names(directory):
    tensors, metadata, start = safetensors.read_header(os.path.join(directory, "model.safetensors"))
    # Accept both "transformer.h.0..." (save_pretrained) and bare "h.0..." keys.
    prefixed = any(k.startswith(PREFIX) for k in tensors)
    return tensors, metadata, start, (PREFIX if prefixed else "")


def read_info(directory):
    """--native-info for an HF directory: geometry, dtype, tensors (standard library only)."""
    cfg, geom = read_config(directory)
    tensors, _, _, _ = _names(directory)
    dtypes = sorted({e["dtype"] for e in tensors.values()})
    return {"file": os.path.join(directory, "model.safetensors"), "format": "hf-gpt2", **geom,
            "dtype": dtypes, "parameters": checkpoint.geometry_layout(geom, directory)["parameters"],
            "tensors": len(tensors)}


def hf_layout(directory):
    """--checkpoint-layout for an HF directory: the safetensors entries with absolute offsets."""
    tensors, _, start, _ = _names(directory)
    return [{"name": k, "shape": e["shape"], "dtype": e["dtype"], "offset": start + e["data_offsets"][0],
             "bytes": e["data_offsets"][1] - e["data_offsets"][0]} for k, e in tensors.items()]


def split_flat(flat, geom):
    """{name: view} of a flat array in checkpoint order, as the trainer lays the tensors out."""
    return {t["name"]: flat[t["element_offset"]:t["element_offset"] + t["elements"]].reshape(t["shape"])
            for t in checkpoint.geometry_layout(geom, "model geometry")["tensors"]}


def export(flat, geom, dtype, out_dir, tokenizer=None, eot=None):
    """Writes config.json and model.safetensors for a flat parameter array (f32, or uint16
    bf16 words when dtype is "bf16"). Each file is written to a temp name and renamed."""
    st_dtype = "F32" if dtype == "f32" else "BF16"
    p = split_flat(flat, geom)
    V, L = geom["vocab_size"], geom["num_layers"]
    tensors = [(PREFIX + "wte.weight", st_dtype, p["wte"][:V]), (PREFIX + "wpe.weight", st_dtype, p["wpe"])]
    for layer in range(L):
        for ours, theirs, transposed in LAYER_MAP:
            t = p[ours][layer]
            tensors.append((f"{PREFIX}h.{layer}.{theirs}", st_dtype, t.T if transposed else t))
    tensors += [(PREFIX + "ln_f.weight", st_dtype, p["lnfw"]), (PREFIX + "ln_f.bias", st_dtype, p["lnfb"])]
    os.makedirs(out_dir, exist_ok=True)
    safetensors.write(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    fileio.write_json(os.path.join(out_dir, "config.json"), config_json(geom, dtype, tokenizer, eot))


def load(directory):
    """(geometry, dtype, flat array in checkpoint order, config dict) from an HF directory."""
    import numpy as np
    cfg, geom = read_config(directory)
    path = os.path.join(directory, "model.safetensors")
    tensors, _, start, prefix = _names(directory)
    dtypes = {e["dtype"] for k, e in tensors.items() if not k.endswith(IGNORED_SUFFIXES)}
    if len(dtypes) != 1 or next(iter(dtypes)) not in ("F32", "BF16"):
        raise UserError(f"{path}: tensors must all be F32 or all BF16 (found {', '.join(sorted(dtypes))})")
    st_dtype = dtypes.pop()
    dtype = "f32" if st_dtype == "F32" else "bf16"
    used = set()

    def get(name, shape):
        key = prefix + name
        if key not in tensors:
            raise UserError(f"{path}: missing tensor {key}")
        if list(tensors[key]["shape"]) != list(shape):
            raise UserError(f"{path}: tensor {key} has shape {tensors[key]['shape']}, config.json implies {list(shape)}")
        used.add(key)
        return safetensors.read_tensor(path, tensors[key], start)

    V, T, L, C = (geom[k] for k in ("vocab_size", "max_seq_len", "num_layers", "channels"))
    model = checkpoint.geometry_layout(geom, path)
    flat = np.zeros(model["parameters"], dtype=np.float32 if dtype == "f32" else np.uint16)
    p = split_flat(flat, geom)
    p["wte"][:V] = get("wte.weight", (V, C))  # padding rows stay zero
    p["wpe"][:] = get("wpe.weight", (T, C))
    for layer in range(L):
        for ours, theirs, transposed in LAYER_MAP:
            shape = p[ours].shape[1:]
            t = get(f"h.{layer}.{theirs}", shape[::-1] if transposed else shape)
            p[ours][layer] = t.T if transposed else t
    p["lnfw"][:] = get("ln_f.weight", (C,))
    p["lnfb"][:] = get("ln_f.bias", (C,))
    head = "lm_head.weight"
    if head in tensors:  # stored untied: allowed only when it equals wte
        used.add(head)
        if not np.array_equal(safetensors.read_tensor(path, tensors[head], start), p["wte"][:V]):
            raise UserError(f"{path}: lm_head.weight differs from wte; nfn's GPT ties them")
    extra = [k for k in tensors if k not in used and not k.endswith(IGNORED_SUFFIXES)]
    if extra:
        raise UserError(f"{path}: tensors a GPT-2 does not have: {', '.join(sorted(extra)[:5])}")
    return geom, dtype, flat, cfg
