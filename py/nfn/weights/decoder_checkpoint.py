"""A decoder checkpoint (llama or nanochat) written from Python as the decoder trainers write
one (docs/decoder.md), so that the trainer, `nfn infer` and any safetensors reader take it as
theirs; and read back, for the exports:

  model_%08d.bin   safetensors: the tensors in decoder_layout's order and names
                   (cc/model/decoder_config.cc), f32 or bf16, and __metadata__ format
                   "nfn-decoder", model_family, geometry (decoder_geometry_json's exact text:
                   the trainer compares it with its own as a string)
  manifest.json    the trainer's manifest (cc/train/manifest.cc)
  DONE_%08d        the same JSON, written last: the checkpoint is complete
"""
import math
import os
import secrets

from nfn import fileio
from nfn.errors import UserError

WEIGHTS_FORMAT = "nfn-decoder"
LORA_FORMAT = "nfn-lora"  # a LoRA run's adapters, read as the model they make with their base
MANIFEST_FORMAT = "nfn.manifest"
MANIFEST_VERSION = 1
FAMILIES = ("llama", "nanochat")
SMEAR_GATE_CHANNELS, VALUE_GATE_CHANNELS = 24, 12  # nanochat's (cc/model/decoder_config.h)
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


def has_value_embedding(layer, num_layers):
    """nanochat's value embeddings: alternating layers, the last always."""
    return layer % 2 == (num_layers - 1) % 2


def nanochat_layout(geometry):
    """[(name, shape)] in memory order, as decoder_layout lays out a nanochat. A tensor of one
    row is stored one-dimensional, as the trainer stores it (smear_gate.weight [24])."""
    C, V, H, L = geometry["channels"], geometry["padded_vocab_size"], geometry["mlp_hidden"], geometry["num_layers"]
    QD = geometry["num_heads"] * geometry["head_dim"]
    KV = geometry["num_kv_heads"]
    KD = KV * geometry["head_dim"]

    def shape(rows, cols):
        return (cols,) if rows == 1 else (rows, cols)

    out = [("transformer.wte.weight", (V, C)), ("resid_lambdas", (L,)), ("x0_lambdas", (L,)),
           ("smear_gate.weight", (SMEAR_GATE_CHANNELS,)), ("smear_lambda", (1,)), ("backout_lambda", (1,))]
    for layer in range(L):
        p = f"transformer.h.{layer}."
        out += [(p + "attn.c_q.weight", (QD, C)), (p + "attn.c_k.weight", (KD, C)), (p + "attn.c_v.weight", (KD, C))]
        if has_value_embedding(layer, L):
            out.append((p + "attn.ve_gate.weight", shape(KV, VALUE_GATE_CHANNELS)))
        out += [(p + "attn.c_proj.weight", (C, QD)), (p + "mlp.c_fc.weight", (H, C)), (p + "mlp.c_proj.weight", (C, H))]
    out += [(f"value_embeds.{layer}.weight", (V, KD)) for layer in range(L) if has_value_embedding(layer, L)]
    out.append(("lm_head.weight", (V, C)))
    return out


def layout(family, geometry):
    return llama_layout(geometry) if family == "llama" else nanochat_layout(geometry)


def num_parameters(geometry, family="llama"):
    return sum(math.prod(shape) for _, shape in layout(family, geometry))


def model_file_name(step):
    return f"model_{step:08d}.bin"


def done_file_name(step):
    return f"DONE_{step:08d}"


def manifest(geometry, tokenizer, eot_token, step, template, extra=None, family="llama"):
    """The trainer's manifest fields in its order (no dataset or training: nothing was trained
    here), then `extra`."""
    import json
    m = {"format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "family": "decoder", "model_family": family,
         "template": template, "geometry": json.loads(geometry_text(geometry)),
         "parameters": num_parameters(geometry, family), "tokenizer": tokenizer, "eot_token": eot_token,
         "weights": model_file_name(step), "step": step, "run_id": secrets.token_hex(8)}
    m.update(extra or {})
    return m


def write_llama(directory, geometry, make_tensor, manifest_fields, step=0):
    """Writes the checkpoint of step `step` into directory: make_tensor(name) returns each
    tensor of llama_layout as a float32 array when its turn comes; manifest_fields is
    manifest()'s dict. The DONE marker is written last."""
    write_decoder(directory, "llama", geometry, make_tensor, manifest_fields, step)


def write_decoder(directory, family, geometry, make_tensor, manifest_fields, step=0, dtype="F32"):
    """write_llama for either family; dtype F32 (float32 arrays) or BF16 (bf16 words as uint16)."""
    from nfn.infer import safetensors
    metadata = {"format": WEIGHTS_FORMAT, "model_family": family, "geometry": geometry_text(geometry)}
    entries = [(name, dtype, shape, lambda n=name: make_tensor(n)) for name, shape in layout(family, geometry)]
    safetensors.write_streamed(os.path.join(directory, model_file_name(step)), entries, metadata)
    fileio.write_json(os.path.join(directory, "manifest.json"), manifest_fields)
    fileio.write_json(os.path.join(directory, done_file_name(step)), manifest_fields)


class DecoderWeights:
    """A decoder weights file opened for reading: family, geometry (the dict of its metadata),
    dtype ("F32" or "BF16", one for every tensor) and tensor(name) as stored (float32, or bf16
    words as uint16), in the layout's shapes."""

    def __init__(self, path):
        import json
        from nfn.infer import safetensors
        self.path = path
        self.entries, metadata, self._start = safetensors.read_header(path)
        self._merged = None
        self.lora = metadata.get("format") == LORA_FORMAT
        if self.lora:  # a LoRA checkpoint: the model it makes with its base
            from nfn import _native
            try:
                self.family, geometry, native_layout, flat = _native.read_decoder_weights(path)
            except ValueError as e:
                raise UserError(str(e)) from None
            self.geometry, self.layout, self.dtype = json.loads(geometry), layout(self.family, json.loads(geometry)), "F32"
            self._merged = {name: flat[offset:offset + rows * cols] for name, rows, cols, offset in native_layout}
            return
        if metadata.get("format") != WEIGHTS_FORMAT:
            raise UserError(f"{path}: not an nfn decoder weights file (__metadata__ format "
                            f"{metadata.get('format')!r})")
        self.family = metadata.get("model_family")
        if self.family not in FAMILIES:
            raise UserError(f"{path}: __metadata__ model_family {self.family!r} is not llama or nanochat")
        try:
            self.geometry = json.loads(metadata.get("geometry", ""))
            self.layout = layout(self.family, self.geometry)
        except (ValueError, KeyError, TypeError):
            raise UserError(f"{path}: __metadata__ geometry is not a decoder geometry") from None
        dtypes = {e["dtype"] for e in self.entries.values()}
        if len(dtypes) != 1 or not dtypes <= {"F32", "BF16"}:
            raise UserError(f"{path}: tensors of dtype {', '.join(sorted(dtypes))}; a decoder checkpoint's are "
                            "all F32 or all BF16")
        self.dtype = dtypes.pop()
        for name, shape in self.layout:
            entry = self.entries.get(name)
            if entry is None or tuple(entry["shape"]) != tuple(shape):
                raise UserError(f"{path}: tensor {name} is missing or not of shape {list(shape)}")

    def tensor(self, name):
        if self._merged is not None:
            return self._merged[name].reshape(dict(self.layout)[name])
        from nfn.infer import safetensors
        return safetensors.read_tensor(self.path, self.entries[name], self._start)
