"""Hugging Face llama directories to and from nfn llama checkpoints (docs/weights.md).

    import_hf("SmolLM2-135M-Instruct/")                 # -> artifacts/smollm2-135m-instruct/
    export_hf("smollm2-135m-instruct", "/tmp/smollm2-hf")

A Hugging Face llama directory: config.json (LlamaForCausalLM), model.safetensors or shards
named by model.safetensors.index.json, and the tokenizer: tokenizer.json, tokenizer_config.json
(special tokens; the chat template, or chat_template.jinja beside it). nfn's llama names are
Hugging Face's (cc/model/decoder_config.cc), and both rotate halves (rotate_half), so tensors
move as they are: no permutation, no transposition.

Everything is checked before anything is written: the config is a llama nfn's geometry can
hold (RMSNorm eps 1e-5 and no rope scaling: the geometry has no field for others; no biases),
every tensor is there with the config's shape, and nothing else is.
"""
import json
import os
import time

from nfn import fileio
from nfn.errors import UserError
from nfn.weights import artifact, decoder_checkpoint

NORM_EPS = 1e-5
READ_DTYPES = ("F32", "F16", "BF16")
CONFIG, INDEX, SINGLE = "config.json", "model.safetensors.index.json", "model.safetensors"
TOKENIZER_CONFIG, CHAT_TEMPLATE_FILE = "tokenizer_config.json", "chat_template.jinja"
# Buffers older llama files carry that hold no parameters.
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


def _int(cfg, key, path, default=None):
    value = cfg.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f"{path}: {key} is {json.dumps(value)}, not a positive integer")
    return value


def read_config(directory):
    """(config dict, geometry without the vocabulary's final say) of a llama config.json,
    refusing what nfn's llama cannot hold."""
    import numpy as np
    path = os.path.join(directory, CONFIG)
    if not os.path.isdir(directory):
        raise UserError(f"{directory}: not a directory (nfn import --hf reads a Hugging Face model directory)")
    if not os.path.isfile(path):
        raise UserError(f"{directory}: no {CONFIG}; not a Hugging Face model directory")
    cfg = fileio.read_json(path)
    if not isinstance(cfg, dict):
        raise UserError(f"{path}: not a JSON object")
    arch = cfg.get("architectures") or []
    if cfg.get("model_type") != "llama" and "LlamaForCausalLM" not in arch:
        raise UserError(f"{path}: model_type {json.dumps(cfg.get('model_type'))}, architectures "
                        f"{json.dumps(arch)}; nfn import --hf reads llama models (LlamaForCausalLM)")
    C = _int(cfg, "hidden_size", path)
    n_head = _int(cfg, "num_attention_heads", path)
    n_kv = _int(cfg, "num_key_value_heads", path, n_head)
    head_dim = _int(cfg, "head_dim", path, C // n_head if C % n_head == 0 else None)
    if n_head % n_kv:
        raise UserError(f"{path}: num_key_value_heads {n_kv} does not divide num_attention_heads {n_head}")
    if head_dim % 2:
        raise UserError(f"{path}: head_dim {head_dim} is odd; rotary pairs need it even")
    if cfg.get("hidden_act", "silu") != "silu":
        raise UserError(f"{path}: hidden_act {json.dumps(cfg['hidden_act'])}; nfn's llama is SwiGLU (silu)")
    eps = cfg.get("rms_norm_eps", 1e-6)  # LlamaConfig's default
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or np.float32(eps) != np.float32(NORM_EPS):
        raise UserError(f"{path}: rms_norm_eps is {json.dumps(eps)}; nfn's llama uses {NORM_EPS:g} (the geometry "
                        "has no field for another)")
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    scaling = cfg.get("rope_scaling")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if scaling not in (None, {}) or rope_type != "default":
        raise UserError(f"{path}: rope scaling ({json.dumps(scaling if scaling else params)}); nfn's llama has "
                        "none (the geometry has no field for it)")
    theta = params.get("rope_theta", cfg.get("rope_theta", 10000.0))
    if not isinstance(theta, (int, float)) or isinstance(theta, bool) or not theta > 0:
        raise UserError(f"{path}: rope_theta is {json.dumps(theta)}, not a positive number")
    for key in ("attention_bias", "mlp_bias"):
        if cfg.get(key, False) is not False:
            raise UserError(f"{path}: {key} is {json.dumps(cfg[key])}; nfn's llama has no biases")
    tied = cfg.get("tie_word_embeddings", False)  # LlamaConfig's default
    if not isinstance(tied, bool):
        raise UserError(f"{path}: tie_word_embeddings is {json.dumps(tied)}, not true or false")
    rows = _int(cfg, "vocab_size", path)
    geometry = {"max_seq_len": _int(cfg, "max_position_embeddings", path), "vocab_size": rows,
                "padded_vocab_size": rows, "num_layers": _int(cfg, "num_hidden_layers", path),
                "num_heads": n_head, "num_kv_heads": n_kv, "head_dim": head_dim, "channels": C,
                "mlp_hidden": _int(cfg, "intermediate_size", path), "rope_theta": float(theta),
                "window_pattern": "L", "tied_head": tied}
    return cfg, geometry


class HFTensors:
    """The tensors of a directory's safetensors files (one, or the shards its index names):
    {name: (file, entry, data start)}, each of a dtype read here."""

    def __init__(self, directory):
        from nfn.infer import safetensors
        index = os.path.join(directory, INDEX)
        if os.path.isfile(index):
            content = fileio.read_json(index)
            weight_map = content.get("weight_map") if isinstance(content, dict) else None
            if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
                raise UserError(f"{index}: no weight_map of tensor names to files")
            files = sorted(set(weight_map.values()))
            for f in files:
                if os.path.basename(f) != f:
                    raise UserError(f"{index}: weight_map names {f!r}, not a file beside it")
        elif os.path.isfile(os.path.join(directory, SINGLE)):
            weight_map, files = None, [SINGLE]
        else:
            raise UserError(f"{directory}: no {SINGLE} and no {INDEX}")
        self.tensors = {}
        for f in files:
            path = os.path.join(directory, f)
            if not os.path.isfile(path):
                raise UserError(f"{index}: names {f}, which is not there")
            entries, _, start = safetensors.read_header(path)
            for name, entry in entries.items():
                if name in self.tensors:
                    raise UserError(f"{path}: tensor {name} is also in {os.path.basename(self.tensors[name][0])}")
                if weight_map is not None and weight_map.get(name) != f:
                    raise UserError(f"{path}: holds {name}, which {INDEX} places in {weight_map.get(name)}")
                if entry["dtype"] not in READ_DTYPES and not name.endswith(IGNORED_SUFFIXES):
                    raise UserError(f"{path}: tensor {name} is {entry['dtype']}; nfn import reads "
                                    f"{', '.join(READ_DTYPES)}")
                self.tensors[name] = (path, entry, start)
        if weight_map is not None and set(weight_map) - set(self.tensors):
            missing = sorted(set(weight_map) - set(self.tensors))
            raise UserError(f"{index}: names {missing[0]}, which its file does not hold")

    def shape(self, name):
        return tuple(self.tensors[name][1]["shape"])

    def dtypes(self):
        return {e["dtype"] for n, (_, e, _) in self.tensors.items() if not n.endswith(IGNORED_SUFFIXES)}

    def read(self, name):
        """The tensor as stored: float32, float16, or bf16 words (uint16)."""
        from nfn.infer import safetensors
        path, entry, start = self.tensors[name]
        return safetensors.read_tensor(path, entry, start)


def widen(array, dtype):
    """A stored tensor as float32 (exact for F16 and BF16)."""
    import numpy as np
    if dtype == "BF16":
        return (array.astype(np.uint32) << 16).view(np.float32)
    return np.asarray(array, dtype=np.float32)


class HFLlama:
    """An opened, checked Hugging Face llama directory."""

    def __init__(self, directory):
        self.directory = directory
        self.config, self.geometry = read_config(directory)
        self.files = HFTensors(directory)
        self.tokenizer = read_tokenizer(directory, self.config)
        self._check_tensors()
        dtypes = self.files.dtypes()
        # bf16 stays bf16 (bit for bit); anything else becomes float32, exactly.
        self.dtype = "BF16" if dtypes == {"BF16"} else "F32"
        if self.tokenizer is not None:
            # An embedding padded past the tokenizer (rows no token reads): the vocabulary is the
            # tokenizer's, the rows are the padded vocabulary.
            size = self.tokenizer["vocab_size"]
            if size > self.geometry["padded_vocab_size"]:
                raise UserError(f"{directory}: {TOKENIZER_FILE_NAME} holds {size} tokens, the embedding "
                                f"{self.geometry['padded_vocab_size']} rows")
            self.geometry["vocab_size"] = size

    def _check_tensors(self):
        g, have = self.geometry, self.files
        wanted = dict(decoder_checkpoint.llama_layout(g))
        head = "lm_head.weight"
        names = set(have.tensors)
        biases = sorted(n for n in names if n.endswith(".bias"))
        if biases:
            raise UserError(f"{self.directory}: bias tensors ({biases[0]}{' ...' if len(biases) > 1 else ''}); "
                            "nfn's llama has no biases")
        missing = [n for n in wanted if n not in names]
        if missing:
            raise UserError(f"{self.directory}: missing tensor{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''} ({len(missing)} of "
                            f"{len(wanted)} that a llama of {g['num_layers']} layers has)")
        extra = sorted(n for n in names - set(wanted) if not n.endswith(IGNORED_SUFFIXES) and
                       not (n == head and g["tied_head"]))
        if extra:
            raise UserError(f"{self.directory}: tensor{'s' if len(extra) > 1 else ''} nfn's llama has no place for: "
                            f"{', '.join(extra[:4])}{' ...' if len(extra) > 4 else ''}")
        for name, shape in wanted.items():
            if have.shape(name) != tuple(shape):
                raise UserError(f"{have.tensors[name][0]}: tensor {name} has shape {list(have.shape(name))}, "
                                f"{CONFIG} implies {list(shape)}")
        self.stored_head = head if g["tied_head"] and head in names else None
        if self.stored_head and have.shape(head) != wanted["model.embed_tokens.weight"]:
            raise UserError(f"{have.tensors[head][0]}: tensor {head} has shape {list(have.shape(head))}, "
                            f"{CONFIG} implies {list(wanted['model.embed_tokens.weight'])}")

    def check_tied_head(self):
        """A tied model's stored lm_head must be its embedding (read once, before writing)."""
        import numpy as np
        if self.stored_head is None:
            return
        embed = "model.embed_tokens.weight"
        if not np.array_equal(self.tensor(self.stored_head), self.tensor(embed)):
            raise UserError(f"{self.files.tensors[self.stored_head][0]}: tie_word_embeddings is true but "
                            f"{self.stored_head} differs from {embed}")

    def tensor(self, name):
        """The tensor in the checkpoint's dtype: float32, or bf16 words."""
        _, entry, _ = self.files.tensors[name]
        array = self.files.read(name)
        return array if self.dtype == "BF16" else widen(array, entry["dtype"])


TOKENIZER_FILE_NAME = "tokenizer.json"


def _token_text(value):
    """A special token of tokenizer_config.json: its text, or an AddedToken's dict's content."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def read_tokenizer(directory, cfg):
    """The tokenizer of a directory as hf_json's manifest fields, or None where it has no
    tokenizer.json."""
    path = os.path.join(directory, TOKENIZER_FILE_NAME)
    if not os.path.isfile(path):
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise UserError("nfn import --hf needs the tokenizers package (pip install tokenizers, or the nfn wheel's "
                        "[import] extra)") from None
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        tokenizer = Tokenizer.from_str(text)
    except Exception as e:  # the library raises its own exception types
        raise UserError(f"{path}: not a tokenizers file ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
            from None
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    special = {t.content: i for i, t in sorted(tokenizer.get_added_tokens_decoder().items()) if t.special}
    tcfg_path = os.path.join(directory, TOKENIZER_CONFIG)
    tcfg = fileio.read_json(tcfg_path) if os.path.isfile(tcfg_path) else {}
    if not isinstance(tcfg, dict):
        raise UserError(f"{tcfg_path}: not a JSON object")
    template = tcfg.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    jinja = os.path.join(directory, CHAT_TEMPLATE_FILE)
    if template is None and os.path.isfile(jinja):
        with open(jinja, encoding="utf-8") as f:
            template = f.read()
    if template is not None and not isinstance(template, str):
        raise UserError(f"{tcfg_path}: chat_template is not text")

    def token_id(config_key, tokenizer_key):
        """An id from config.json, else the id of tokenizer_config.json's token text."""
        value = cfg.get(config_key)
        if isinstance(value, list):  # several ids: the first stops generation here
            value = value[0] if value else None
        if value is None and _token_text(tcfg.get(tokenizer_key)) is not None:
            value = tokenizer.token_to_id(_token_text(tcfg.get(tokenizer_key)))
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < size):
            raise UserError(f"{directory}: {config_key} {json.dumps(cfg.get(config_key))} is not a token id of "
                            f"{TOKENIZER_FILE_NAME} [0, {size})")
        return value

    return {"text": text, "vocab_size": size, "special": special, "chat_template": template,
            "eot": token_id("eos_token_id", "eos_token"), "bos": token_id("bos_token_id", "bos_token")}


def import_hf(directory, name=None, force=False, quiet=True):
    """Import the Hugging Face llama directory into artifacts_dir()/name (the directory's name,
    lower case, by default). Returns what `nfn import --json` prints."""
    from nfn.tokenizers import hf_json
    t0 = time.time()
    directory = directory.rstrip("/") or "/"
    name = name or artifact.plain_name(os.path.basename(os.path.abspath(directory)))
    artifact.check_name(name)
    final = artifact.destination(name, force)
    model = HFLlama(directory)  # every check, before anything is written
    model.check_tied_head()
    tok = model.tokenizer
    source = {"format": "hf-llama", "directory": os.path.abspath(directory),
              "files": sorted({os.path.basename(p) for p, _, _ in model.files.tensors.values()}),
              "dtypes": sorted(model.files.dtypes())}
    eot = tok["eot"] if tok else None
    fields = decoder_checkpoint.manifest(model.geometry, name if tok else None, eot, 0, "imported",
                                         {"source": source})

    def write(tmp):
        decoder_checkpoint.write_decoder(tmp, "llama", model.geometry, model.tensor, fields, dtype=model.dtype)
        if tok:
            with open(os.path.join(tmp, hf_json.TOKENIZER_FILE), "w", encoding="utf-8") as f:
                f.write(tok["text"])
            with open(os.path.join(tmp, hf_json.MANIFEST), "w", encoding="utf-8") as f:
                f.write(hf_json.manifest_text(name, tok["vocab_size"], eot, tok["bos"], tok["special"],
                                              tok["chat_template"], f"hf {os.path.abspath(directory)}"))

    artifact.install(name, force, write, quiet)
    return {"name": name, "directory": final, "source": source, "model_family": "llama",
            "geometry": fields["geometry"], "parameters": fields["parameters"], "dtype": model.dtype.lower(),
            "tokenizer": fields["tokenizer"], "eot_token": eot, "seconds": round(time.time() - t0, 2)}


def config_json(geometry, dtype, bos=None, eos=None):
    """A LlamaConfig for the geometry, with the fields LlamaForCausalLM reads (rope_theta for
    transformers 4, rope_parameters for 5)."""
    theta = geometry["rope_theta"]
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "vocab_size": geometry["padded_vocab_size"], "hidden_size": geometry["channels"],
           "intermediate_size": geometry["mlp_hidden"], "num_hidden_layers": geometry["num_layers"],
           "num_attention_heads": geometry["num_heads"], "num_key_value_heads": geometry["num_kv_heads"],
           "head_dim": geometry["head_dim"], "hidden_act": "silu",
           "max_position_embeddings": geometry["max_seq_len"], "rms_norm_eps": NORM_EPS,
           "rope_theta": theta, "rope_scaling": None, "rope_parameters": {"rope_type": "default", "rope_theta": theta},
           "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "pretraining_tp": 1,
           "tie_word_embeddings": bool(geometry["tied_head"]), "initializer_range": 0.02, "use_cache": True,
           "torch_dtype": "float32" if dtype == "F32" else "bfloat16"}
    if bos is not None:
        cfg["bos_token_id"] = bos
    if eos is not None:
        cfg["eos_token_id"] = eos
    return cfg


def resolve_decoder(spec, family, flag):
    """(DecoderWeights, manifest dict or None) of the checkpoint `--checkpoint spec` names,
    which must be a decoder checkpoint of this family."""
    from nfn.infer import checkpoint
    ckpt = checkpoint.resolve(spec, header=True)  # resolve-only does not tell a decoder's file
    if ckpt.kind != "decoder":
        what = {"llmc": "a dense GPT checkpoint (llm.c's format)", "hf": "a Hugging Face GPT-2 directory"}.get(
            ckpt.kind, ckpt.kind)
        raise UserError(f"{ckpt.path}: {what}; nfn export {flag} writes {family} checkpoints")
    weights = decoder_checkpoint.DecoderWeights(ckpt.path)
    if weights.family != family:
        raise UserError(f"{ckpt.path}: a {weights.family} checkpoint; nfn export {flag} writes {family} checkpoints")
    manifest = checkpoint.read_manifest(ckpt.manifest) if ckpt.manifest else None
    return weights, manifest


def export_hf(spec, target):
    """Write the llama checkpoint `spec` names as a Hugging Face llama directory at target
    (absent or empty). Returns what `nfn export --json` prints."""
    from nfn.infer import safetensors
    t0 = time.time()
    artifact.check_export_target(target)
    weights, manifest = resolve_decoder(spec, "llama", "--hf")
    g = weights.geometry
    if g.get("norm_eps", NORM_EPS) != NORM_EPS:
        raise UserError(f"{weights.path}: norm_eps {g['norm_eps']}; config.json would need rms_norm_eps")
    tokenizer_name = (manifest or {}).get("tokenizer")
    eot = (manifest or {}).get("eot_token")
    tokenizer_dir, tokenizer_manifest, note = None, None, None
    if tokenizer_name:
        from nfn import tokenizers
        from nfn.tokenizers import hf_json
        tokenizer_dir = tokenizers.imported_dir(tokenizer_name)
        if tokenizer_dir is None:
            note = (f"tokenizer {tokenizer_name} is not a model's own tokenizer.json (an imported model's); "
                    "no tokenizer files written")
        else:
            tokenizer_manifest = hf_json.read_manifest(tokenizer_dir)
    else:
        note = "the checkpoint names no tokenizer; no tokenizer files written"
    bos = (tokenizer_manifest or {}).get("bos_token")

    def write(tmp):
        tensors = [(name, weights.dtype, shape, lambda n=name: weights.tensor(n)) for name, shape in weights.layout]
        safetensors.write_streamed(os.path.join(tmp, SINGLE), tensors, {"format": "pt"})
        fileio.write_json(os.path.join(tmp, CONFIG), config_json(g, weights.dtype, bos, eot))
        if tokenizer_manifest is not None:
            from nfn.tokenizers import hf_json
            with open(os.path.join(tokenizer_dir, hf_json.TOKENIZER_FILE), "rb") as src, \
                    open(os.path.join(tmp, TOKENIZER_FILE_NAME), "wb") as dst:
                dst.write(src.read())
            by_id = {i: t for t, i in tokenizer_manifest.get("special_tokens", {}).items()}
            tcfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": g["max_seq_len"],
                    "clean_up_tokenization_spaces": False}
            if by_id.get(bos) is not None:
                tcfg["bos_token"] = by_id[bos]
            if by_id.get(eot) is not None:
                tcfg["eos_token"] = by_id[eot]
            if tokenizer_manifest.get("chat_template"):
                tcfg["chat_template"] = tokenizer_manifest["chat_template"]
            fileio.write_json(os.path.join(tmp, TOKENIZER_CONFIG), tcfg)

    final = artifact.export(target, write)
    return {"directory": final, "source": weights.path, "model_family": "llama", "dtype": weights.dtype.lower(),
            "files": sorted(os.listdir(final)), "tokenizer": tokenizer_name if tokenizer_manifest else None,
            "note": note, "seconds": round(time.time() - t0, 2)}
