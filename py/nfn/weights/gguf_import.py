"""A llama GGUF file (llama.cpp's format) into an nfn llama checkpoint and its tokenizer.

    result = import_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")   # -> artifacts/smollm2-135m-instruct/

Everything is checked before anything is written: the file is GGUF, its architecture is
llama, its geometry is one nfn's llama has (RMSNorm eps 1e-5, rotary over the whole head, no
rope scaling), every tensor is there with its shape and of a type read here, and nothing else
is there. Then each tensor is dequantized to float32 by the `gguf` package, in the layout's
order, straight into the weights file.

llama.cpp's converter permutes the rows of q_proj and k_proj within each head so that GGML's
rotary, which rotates adjacent pairs (x[2i], x[2i+1]), computes what Hugging Face's
rotate_half computes on the halves (x[i], x[i + d/2]). nfn's llama rotates halves, so those
rows are put back: GGUF row h*d + 2i + j is Hugging Face row h*d + j*d/2 + i.
"""
import os
import re
import time

from nfn.errors import UserError
from nfn.weights import artifact, decoder_checkpoint

READ_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K")
NORM_EPS = 1e-5  # nfn's llama; the geometry has no field for another
GGUF_MAGIC = b"GGUF"

# GGUF tensor names -> nfn's (Hugging Face's) llama names; a layer's are under blk.N. and model.layers.N.
GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}
LAYER_NAMES = {"attn_norm.weight": "input_layernorm.weight", "attn_q.weight": "self_attn.q_proj.weight",
               "attn_k.weight": "self_attn.k_proj.weight", "attn_v.weight": "self_attn.v_proj.weight",
               "attn_output.weight": "self_attn.o_proj.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
               "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
               "ffn_down.weight": "mlp.down_proj.weight"}


def default_name(path):
    """The artifact name for a GGUF file: its base name without .gguf and the quantization
    suffix, lower case (SmolLM2-135M-Instruct.Q4_1.gguf -> smollm2-135m-instruct)."""
    stem = os.path.basename(path)
    if stem.lower().endswith(".gguf"):
        stem = stem[:-5]
    stem = re.sub(r"[.\-_](i?q\d[\w]*|f16|f32|bf16)$", "", stem, flags=re.IGNORECASE)
    return artifact.plain_name(stem)


def unpermute_rope_rows(w, n_head):
    """q or k weights [n_head * d, C] from llama.cpp's row order (rotary pairs adjacent) back
    to Hugging Face's (halves): the inverse of convert_hf_to_gguf.py's permute."""
    rows, cols = w.shape
    d = rows // n_head
    return w.reshape(n_head, d // 2, 2, cols).swapaxes(1, 2).reshape(rows, cols)


class GGUFModel:
    """An opened, checked llama GGUF: its geometry, tensors (by nfn name) and tokenizer spec."""

    def __init__(self, path):
        self.path = path
        self.reader = open_gguf(path)
        self._by_name = {t.name: t for t in self.reader.tensors}
        self.geometry, self.n_head, self.n_kv_head = self._geometry()
        self.tensors = self._tensors()
        from nfn.weights.gguf_tokenizer import TokenizerSpec
        self.tokenizer = TokenizerSpec(path, self.field)
        if len(self.tokenizer.tokens) != self.geometry["vocab_size"]:
            raise UserError(f"{path}: the tokenizer has {len(self.tokenizer.tokens)} tokens, the embedding "
                            f"{self.geometry['vocab_size']} rows")

    def field(self, key, default=None):
        f = self.reader.fields.get(key)
        if f is None:
            return default
        try:
            return f.contents()
        except Exception as e:  # a value the reader cannot decode
            raise UserError(f"{self.path}: metadata {key} cannot be read ({e})") from None

    def _number(self, key, default=None, kind=int):
        value = self.field(key, default)
        if value is None:
            raise UserError(f"{self.path}: metadata {key} is missing")
        ok = (isinstance(value, int) if kind is int else isinstance(value, (int, float))) and not isinstance(value, bool)
        if not ok or not value > 0:
            raise UserError(f"{self.path}: metadata {key} is {value!r}, not a positive "
                            f"{'integer' if kind is int else 'number'}")
        return value

    def _geometry(self):
        import numpy as np
        arch = self.field("general.architecture")
        if arch != "llama":
            raise UserError(f"{self.path}: architecture {arch!r}; nfn import --gguf reads llama models")
        a = "llama."
        C = self._number(a + "embedding_length")
        n_head = self._number(a + "attention.head_count")
        n_kv = self._number(a + "attention.head_count_kv", n_head)
        head_dim = self._number(a + "attention.key_length", C // n_head if C % n_head == 0 else None)
        if self.field(a + "attention.value_length", head_dim) != head_dim:
            raise UserError(f"{self.path}: attention.value_length {self.field(a + 'attention.value_length')} differs "
                            f"from key_length {head_dim}; nfn's llama has one head size")
        if n_head % n_kv:
            raise UserError(f"{self.path}: attention.head_count_kv {n_kv} does not divide head_count {n_head}")
        if head_dim % 2:
            raise UserError(f"{self.path}: head size {head_dim} is odd; rotary pairs need it even")
        rope_dims = self.field(a + "rope.dimension_count", head_dim)
        if rope_dims != head_dim:
            raise UserError(f"{self.path}: rope.dimension_count {rope_dims} is not the head size {head_dim}; "
                            "nfn's llama rotates the whole head")
        scaling = self.field(a + "rope.scaling.type", "none")
        if scaling != "none" or self.field(a + "rope.scaling.factor", 1.0) not in (0.0, 1.0):
            raise UserError(f"{self.path}: rope scaling ({scaling}, factor "
                            f"{self.field(a + 'rope.scaling.factor')}); nfn's llama has none")
        eps = self._number(a + "attention.layer_norm_rms_epsilon", kind=float)
        if np.float32(eps) != np.float32(NORM_EPS):
            raise UserError(f"{self.path}: attention.layer_norm_rms_epsilon is {eps:g}; nfn's llama uses "
                            f"{NORM_EPS:g}")
        embedding = self.reader_tensor("token_embd.weight")
        if embedding is None:
            raise UserError(f"{self.path}: missing tensor token_embd.weight")
        vocab = int(embedding.shape[-1]) if len(embedding.shape) == 2 else 0
        declared = self.field(a + "vocab_size", vocab)
        if declared != vocab:
            raise UserError(f"{self.path}: llama.vocab_size {declared} but token_embd.weight has {vocab} rows")
        geometry = {"max_seq_len": self._number(a + "context_length"), "vocab_size": vocab,
                    "padded_vocab_size": vocab, "num_layers": self._number(a + "block_count"),
                    "num_heads": n_head, "num_kv_heads": n_kv, "head_dim": head_dim, "channels": C,
                    "mlp_hidden": self._number(a + "feed_forward_length"),
                    "rope_theta": float(self._number(a + "rope.freq_base", 10000.0, kind=float)),
                    "window_pattern": "L", "tied_head": self.reader_tensor("output.weight") is None}
        return geometry, n_head, n_kv

    def reader_tensor(self, name):
        return self._by_name.get(name)

    def _tensors(self):
        """{nfn name: (GGUF tensor, layout shape)}, each of that shape and a type read here."""
        expected = {v: k for k, v in GLOBAL_NAMES.items()}
        for layer in range(self.geometry["num_layers"]):
            for gguf_name, name in LAYER_NAMES.items():
                expected[f"model.layers.{layer}.{name}"] = f"blk.{layer}.{gguf_name}"
        layout = decoder_checkpoint.llama_layout(self.geometry)
        wanted = {expected[name]: (name, shape) for name, shape in layout}
        have = set(self._by_name)
        missing = [g for g in wanted if g not in have]
        if missing:
            raise UserError(f"{self.path}: missing tensor{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} ({len(missing)} of "
                            f"{len(wanted)} that a llama of {self.geometry['num_layers']} layers has)")
        extra = sorted(have - set(wanted))
        if extra:
            raise UserError(f"{self.path}: tensor{'s' if len(extra) > 1 else ''} nfn's llama has no place for: "
                            f"{', '.join(extra[:4])}{' ...' if len(extra) > 4 else ''}")
        out = {}
        for t in self.reader.tensors:
            name, shape = wanted[t.name]
            kind = t.tensor_type.name
            if kind not in READ_TYPES:
                raise UserError(f"{self.path}: tensor {t.name} is of type {kind}; nfn import reads "
                                f"{', '.join(READ_TYPES)}")
            stored = tuple(int(d) for d in reversed(t.shape))  # GGUF lists dimensions fastest first
            while len(stored) > len(shape) and stored[0] == 1:
                stored = stored[1:]
            if stored != tuple(shape):
                raise UserError(f"{self.path}: tensor {t.name} has shape {list(stored)}, the geometry needs "
                                f"{list(shape)}")
            out[name] = (t, tuple(shape))
        return out

    def tensor(self, name):
        """The tensor of nfn name `name` as float32 of the layout's shape, q and k unpermuted."""
        import numpy as np
        from gguf import quants
        t, shape = self.tensors[name]
        w = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32).reshape(shape)
        if name.endswith("q_proj.weight"):
            w = unpermute_rope_rows(w, self.n_head)
        elif name.endswith("k_proj.weight"):
            w = unpermute_rope_rows(w, self.n_kv_head)
        return w

    def type_counts(self):
        counts = {}
        for t in self.reader.tensors:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def open_gguf(path):
    """A gguf.GGUFReader of path; a file that is not GGUF is refused by its first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: a directory, not a GGUF file") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    if head != GGUF_MAGIC:
        raise UserError(f"{path}: not a GGUF file (it starts with {head!r}, not {GGUF_MAGIC!r})")
    try:
        import gguf
    except ImportError:
        raise UserError("nfn import --gguf needs the gguf package (pip install gguf, or the nfn wheel's "
                        "[import] extra)") from None
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:  # the reader raises what its parsing meets: ValueError, IndexError, ...
        raise UserError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from None
    if getattr(reader, "endianess", None) not in (None, gguf.GGUFEndian.LITTLE):
        raise UserError(f"{path}: a big-endian GGUF file; nfn import reads little-endian ones")
    return reader


def import_gguf(path, name=None, force=False, quiet=True):
    """Import the GGUF file at path into artifacts_dir()/name (default_name(path) by default);
    force: replace what is there. Returns what `nfn import --json` prints."""
    import hashlib

    t0 = time.time()
    name = name or default_name(path)
    artifact.check_name(name)
    final = artifact.destination(name, force)
    model = GGUFModel(path)  # every check, before anything is written
    from nfn.tokenizers import hf_json
    from nfn.weights import gguf_tokenizer
    spec = model.tokenizer
    tokenizer = gguf_tokenizer.build(spec)
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            digest.update(block)
    source = {"format": "gguf", "file": os.path.abspath(path), "sha256": digest.hexdigest(),
              "name": model.field("general.name"), "tensor_types": model.type_counts()}
    eot = spec.eos
    fields = decoder_checkpoint.manifest(model.geometry, name, eot, 0, "imported", {"source": source})

    def write(directory):
        decoder_checkpoint.write_llama(directory, model.geometry, model.tensor, fields)
        tokenizer.save(os.path.join(directory, hf_json.TOKENIZER_FILE))
        with open(os.path.join(directory, hf_json.MANIFEST), "w", encoding="utf-8") as f:
            f.write(hf_json.manifest_text(name, len(spec.tokens), eot, spec.bos, spec.special, spec.chat_template,
                                          f"gguf {os.path.basename(path)}"))

    artifact.install(name, force, write, quiet)
    return {"name": name, "directory": final, "source": source, "model_family": "llama",
            "geometry": fields["geometry"], "parameters": fields["parameters"], "tokenizer": name,
            "eot_token": eot, "seconds": round(time.time() - t0, 2)}
