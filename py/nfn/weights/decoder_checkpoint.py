"""A llama checkpoint written from Python as the llama trainer writes one (docs/decoder.md),
so that the trainer, `nfn infer` and any safetensors reader take it as theirs:

  model_%08d.bin   safetensors: the tensors in decoder_layout's order and names
                   (cc/model/decoder_config.cc), f32, and __metadata__ format "nfn-decoder",
                   model_family "llama", geometry (decoder_geometry_json's exact text: the
                   trainer compares it with its own as a string)
  manifest.json    the trainer's manifest (cc/train/manifest.cc)
  DONE_%08d        the same JSON, written last: the checkpoint is complete
"""
import math
import os
import secrets

from nfn import fileio

WEIGHTS_FORMAT = "nfn-decoder"
MANIFEST_FORMAT = "nfn.manifest"
MANIFEST_VERSION = 1
# decoder_geometry_json's keys, in its order.
GEOMETRY_KEYS = ("max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads", "num_kv_heads",
                 "head_dim", "channels", "mlp_hidden", "rope_theta", "window_pattern", "tied_head")


def json_double(x):
    """A double as cc/util/json.cc's Json::dump prints it: whole numbers below 1e15 without a
    point, else the shortest of %.15g, %.16g, %.17g that reads back as the same double."""
    x = float(x)
    if not math.isfinite(x):
        return "null"
    if x == math.floor(x) and abs(x) < 1e15:
        return "%.0f" % x
    for precision in (15, 16, 17):
        text = "%.*g" % (precision, x)
        if float(text) == x:
            break
    return text


def geometry_text(geometry):
    """decoder_geometry_json(...).dump() for this geometry, byte for byte. rope_theta is a float
    in the trainer's config, widened to a double when written."""
    import numpy as np
    parts = []
    for key in GEOMETRY_KEYS:
        value = geometry[key]
        if key == "rope_theta":
            text = json_double(float(np.float32(value)))
        elif key == "window_pattern":
            text = '"' + value + '"'  # S and L only: nothing to escape
        elif key == "tied_head":
            text = "true" if value else "false"
        else:
            text = str(int(value))
        parts.append(f'"{key}":{text}')
    return "{" + ",".join(parts) + "}"


def llama_layout(geometry):
    """[(name, shape)] in memory order, as decoder_layout lays out a llama."""
    C, V, H = geometry["channels"], geometry["padded_vocab_size"], geometry["mlp_hidden"]
    QD = geometry["num_heads"] * geometry["head_dim"]
    KD = geometry["num_kv_heads"] * geometry["head_dim"]
    out = [("model.embed_tokens.weight", (V, C))]
    for layer in range(geometry["num_layers"]):
        p = f"model.layers.{layer}."
        out += [(p + "input_layernorm.weight", (C,)),
                (p + "self_attn.q_proj.weight", (QD, C)),
                (p + "self_attn.k_proj.weight", (KD, C)),
                (p + "self_attn.v_proj.weight", (KD, C)),
                (p + "self_attn.o_proj.weight", (C, QD)),
                (p + "post_attention_layernorm.weight", (C,)),
                (p + "mlp.gate_proj.weight", (H, C)),
                (p + "mlp.up_proj.weight", (H, C)),
                (p + "mlp.down_proj.weight", (C, H))]
    out.append(("model.norm.weight", (C,)))
    if not geometry["tied_head"]:
        out.append(("lm_head.weight", (V, C)))
    return out


def num_parameters(geometry):
    return sum(math.prod(shape) for _, shape in llama_layout(geometry))


def model_file_name(step):
    return f"model_{step:08d}.bin"


def done_file_name(step):
    return f"DONE_{step:08d}"


def manifest(geometry, tokenizer, eot_token, step, template, extra=None):
    """The trainer's manifest fields in its order (no dataset or training: nothing was trained
    here), then `extra`."""
    import json
    m = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "family": "decoder", "model_family": "llama",
         "template": template, "geometry": json.loads(geometry_text(geometry)),
         "parameters": num_parameters(geometry), "tokenizer": tokenizer, "eot_token": eot_token,
         "weights": model_file_name(step), "step": step, "run_id": secrets.token_hex(8)}
    m.update(extra or {})
    return m


def write_llama(directory, geometry, make_tensor, manifest_fields, step=0):
    """Writes the checkpoint of step `step` into directory: make_tensor(name) returns each
    tensor of llama_layout as a float32 array when its turn comes; manifest_fields is
    manifest()'s dict. The DONE marker is written last."""
    from nfn.infer import safetensors
    metadata = {"format": WEIGHTS_FORMAT, "model_family": "llama", "geometry": geometry_text(geometry)}
    entries = [(name, "F32", shape, lambda n=name: make_tensor(n)) for name, shape in llama_layout(geometry)]
    safetensors.write_streamed(os.path.join(directory, model_file_name(step)), entries, metadata)
    fileio.write_json(os.path.join(directory, "manifest.json"), manifest_fields)
    fileio.write_json(os.path.join(directory, done_file_name(step)), manifest_fields)
