"""nanochat checkpoints to and from nfn's nanochat family (docs/weights.md).

    export_nanochat("d4", "/tmp/nanochat-base")     # what nanochat's scripts load
    import_nanochat("/tmp/nanochat-base")           # -> artifacts/nanochat-base/

nanochat keeps its runs under a base directory ($NANOCHAT_BASE_DIR):

    tokenizer/tokenizer.pkl           the tiktoken Encoding, pickled (tokenizer.py's get_tokenizer)
    tokenizer/token_bytes.pt          int32 bytes of each token, 0 for special ones (bits per byte)
    base_checkpoints/d<L>/model_NNNNNN.pt   the state dict (checkpoint_manager.py's build_model)
    base_checkpoints/d<L>/meta_NNNNNN.json  {"model_config": GPTConfig's fields, ...}

(mid_checkpoints, chatsft_checkpoints and chatrl_checkpoints for the later phases). The state
dict's names are nfn's nanochat names (cc/model/decoder_config.cc), which are gpt.py's; only two
shapes differ: nanochat's smear_gate.weight is (1, 24) and a one-kv-head ve_gate.weight (1, 12),
where nfn stores a one-row tensor as a vector.

PyTorch is imported by these two commands only: torch.save and torch.load (weights_only, which
never runs code). tokenizer.pkl is read by an unpickler that knows one class, tiktoken's
Encoding, and keeps only its fields: a pickle that names anything else is refused.
"""
import json
import os
import pickle
import re
import time

from nfn import fileio, paths
from nfn.errors import UserError
from nfn.weights import artifact, decoder_checkpoint

ROPE_THETA = 100000.0  # nanochat's rotary base; GPTConfig has no field for another
PHASES = {"base": "base_checkpoints", "mid": "mid_checkpoints", "sft": "chatsft_checkpoints",
          "rl": "chatrl_checkpoints"}
MODEL_CONFIG = ("sequence_len", "vocab_size", "n_layer", "n_head", "n_kv_head", "n_embd", "window_pattern")
MODEL_FILE = re.compile(r"^model_(\d+)\.pt$")
PREFIX = "_orig_mod."
TOKENIZER_DIR, TOKENIZER_PICKLE, TOKEN_BYTES = "tokenizer", "tokenizer.pkl", "token_bytes.pt"


def nanochat_shapes(geometry):
    """[(name, shape)] of gpt.py's state dict for the geometry, in nfn's order."""
    out = []
    for name, shape in decoder_checkpoint.nanochat_layout(geometry):
        if name == "smear_gate.weight":
            shape = (1, decoder_checkpoint.SMEAR_GATE_CHANNELS)
        elif name.endswith("ve_gate.weight"):
            shape = (geometry["num_kv_heads"], decoder_checkpoint.VALUE_GATE_CHANNELS)
        out.append((name, tuple(shape)))
    return out


def model_config(geometry):
    """meta.json's model_config: GPTConfig's fields for an nfn nanochat geometry."""
    return {"sequence_len": geometry["max_seq_len"], "vocab_size": geometry["vocab_size"],
            "n_layer": geometry["num_layers"], "n_head": geometry["num_heads"], "n_kv_head": geometry["num_kv_heads"],
            "n_embd": geometry["channels"], "window_pattern": geometry["window_pattern"]}


def geometry_of(config, where):
    """nfn's nanochat geometry for a model_config, checked."""
    for key in MODEL_CONFIG[:-1]:
        value = config.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"{where}: model_config.{key} is {json.dumps(value)}, not a positive integer")
    pattern = config.get("window_pattern", "SSSL")  # GPTConfig's default
    if not isinstance(pattern, str) or not pattern or set(pattern.upper()) - set("SL"):
        raise UserError(f"{where}: model_config.window_pattern is {json.dumps(pattern)}, not letters S and L")
    C, H, KV = config["n_embd"], config["n_head"], config["n_kv_head"]
    if C % H:
        raise UserError(f"{where}: model_config.n_embd {C} is not a multiple of n_head {H}")
    if H % KV:
        raise UserError(f"{where}: model_config.n_kv_head {KV} does not divide n_head {H}")
    if (C // H) % 2:
        raise UserError(f"{where}: the head size {C // H} is odd; rotary pairs need it even")
    if C < decoder_checkpoint.SMEAR_GATE_CHANNELS:
        raise UserError(f"{where}: model_config.n_embd {C} is below the smear gate's 24 channels")
    V = config["vocab_size"]
    return {"max_seq_len": config["sequence_len"], "vocab_size": V, "padded_vocab_size": (V + 63) // 64 * 64,
            "num_layers": config["n_layer"], "num_heads": H, "num_kv_heads": KV, "head_dim": C // H, "channels": C,
            "mlp_hidden": 4 * C, "rope_theta": ROPE_THETA, "window_pattern": pattern.upper(), "tied_head": False}


# --- the tokenizer ------------------------------------------------------------------------

class _EncodingFields:
    """What tiktoken's Encoding pickles: its __getstate__'s dict (or a registered name)."""

    def __setstate__(self, state):
        self.state = state


class _TokenizerUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) == ("tiktoken.core", "Encoding"):
            return _EncodingFields
        raise pickle.UnpicklingError(f"it names {module}.{name}, not tiktoken's Encoding")


def read_tokenizer_pickle(path):
    """(pattern, mergeable ranks {bytes: rank}, special tokens {text: id}) of tokenizer.pkl."""
    try:
        with open(path, "rb") as f:
            obj = _TokenizerUnpickler(f).load()
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e.strerror})") from None
    except Exception as e:  # whatever a damaged or foreign pickle raises
        raise UserError(f"{path}: not a pickled tiktoken Encoding ({e})") from None
    state = getattr(obj, "state", None)
    if not isinstance(state, dict):
        raise UserError(f"{path}: a pickled tiktoken Encoding by name only ({state!r}); nanochat's carries its ranks")
    pattern, ranks, special = state.get("pat_str"), state.get("mergeable_ranks"), state.get("special_tokens")
    if not isinstance(pattern, str) or not isinstance(ranks, dict) or not isinstance(special, dict) or \
            not all(isinstance(k, bytes) and isinstance(v, int) for k, v in ranks.items()) or \
            not all(isinstance(k, str) and isinstance(v, int) for k, v in special.items()):
        raise UserError(f"{path}: its Encoding lacks pat_str, mergeable_ranks or special_tokens")
    return pattern, ranks, special


def bpe_files(name, pattern, ranks, special):
    """The files of nfn's chat BPE (nfn.tokenizers.bpe) for these ranks and special tokens,
    checked as nfn reads them."""
    import base64
    from nfn.tokenizers import bpe
    ordered = sorted(ranks.items(), key=lambda kv: kv[1])
    manifest = {"kind": "bpe", "format": bpe.FORMAT_VERSION, "name": name, "vocab_size": len(ranks) + len(special),
                "pattern": pattern, "special_tokens": dict(sorted(special.items(), key=lambda kv: kv[1])),
                "files": {"ranks": bpe.RANKS_FILE}}
    ranks_text = "".join(f"{base64.b64encode(b).decode()} {r}\n" for b, r in ordered)
    return {bpe.RANKS_FILE: ranks_text, bpe.MANIFEST: json.dumps(manifest, indent=1) + "\n"}


def trained_bpe(name):
    """(pattern, ranks, special tokens) of the chat BPE `name` in the tokenizer cache, read as
    nfn.tokenizers.bpe reads them (and checked by loading it)."""
    from nfn.tokenizers import bpe
    directory = os.path.join(paths.tokenizers_dir(), name)
    bpe.load_trained(directory)
    manifest = fileio.read_json(os.path.join(directory, bpe.MANIFEST))
    ranks_path = os.path.join(directory, manifest["files"]["ranks"])
    with open(ranks_path, "rb") as f:
        ranks = bpe.read_ranks(ranks_path, f.read())
    return manifest["pattern"], ranks, dict(manifest["special_tokens"])


def check_chat_bpe(where, ranks, special, vocab_size):
    """nanochat's tokenizer is nfn's chat BPE: ranks 0..n-1 with the 256 bytes, then its nine
    special tokens in order, the model's vocabulary in all."""
    from nfn.tokenizers import bpe
    if sorted(ranks.values()) != list(range(len(ranks))) or any(bytes([b]) not in ranks for b in range(256)):
        raise UserError(f"{where}: its ranks are not 0..{len(ranks) - 1} with every single byte")
    want = {t: len(ranks) + i for i, t in enumerate(bpe.SPECIAL_TOKENS)}
    if special != want:
        raise UserError(f"{where}: special tokens {sorted(special, key=special.get)} are not nanochat's "
                        f"{bpe.SPECIAL_TOKENS} after the ranks")
    if len(ranks) + len(special) != vocab_size:
        raise UserError(f"{where}: {len(ranks) + len(special)} tokens, the model's vocabulary {vocab_size}")


def token_bytes(ranks, special):
    """tok_train.py's token_bytes: each token's UTF-8 length as tiktoken decodes it (invalid
    bytes as U+FFFD), 0 for the special tokens."""
    by_rank = sorted(ranks, key=ranks.get)
    return [len(b.decode("utf-8", errors="replace").encode("utf-8")) for b in by_rank] + [0] * len(special)


# --- export -------------------------------------------------------------------------------

def export_nanochat(spec, target, phase="base"):
    """Write the nanochat checkpoint `spec` names as a nanochat base directory at target (absent
    or empty). Returns what `nfn export --json` prints."""
    import numpy as np
    t0 = time.time()
    artifact.check_export_target(target)
    torch = _torch("nfn export --nanochat")
    from nfn.weights.hf_llama import resolve_decoder
    weights, manifest = resolve_decoder(spec, "nanochat", "--nanochat")
    g = weights.geometry
    differs = [f"{key} {g.get(key)!r} (nanochat's: {want!r})" for key, want in
               (("mlp_hidden", 4 * g["channels"]), ("rope_theta", ROPE_THETA),
                ("padded_vocab_size", (g["vocab_size"] + 63) // 64 * 64), ("tied_head", False), ("norm_eps", 1e-5))
               if g.get(key, want) != want]
    if g["channels"] != g["num_heads"] * g["head_dim"]:
        differs.append(f"head_dim {g['head_dim']} (nanochat's: channels / heads)")
    if differs:
        raise UserError(f"{weights.path}: nanochat's GPTConfig has no field for {', '.join(differs)}")
    step = (manifest or {}).get("step", 0)
    if not isinstance(step, int) or step < 0:
        step = 0
    tokenizer_name = (manifest or {}).get("tokenizer")
    ranks = special = pattern = None
    from nfn import tokenizers
    if tokenizer_name and tokenizer_name in tokenizers.trained_names():  # a chat BPE of `nfn tokenizer train`
        pattern, ranks, special = trained_bpe(tokenizer_name)
        check_chat_bpe(f"tokenizer {tokenizer_name}", ranks, special, g["vocab_size"])
        note = None
    else:
        note = (f"tokenizer {tokenizer_name} is not an nfn chat BPE (`nfn tokenizer train`): no tokenizer files "
                "written" if tokenizer_name else "the checkpoint names no tokenizer: no tokenizer files written")
    state = {}
    for name, shape in nanochat_shapes(g):
        array = np.array(weights.tensor(name))  # a writable copy, as torch wants one
        t = torch.from_numpy(array.view(np.int16)).view(torch.bfloat16) if weights.dtype == "BF16" else \
            torch.from_numpy(array)
        state[name] = t.reshape(shape)
    meta = {"step": step, "model_config": model_config(g),
            "nfn": {"source": os.path.abspath(weights.path), "geometry": g, "tokenizer": tokenizer_name,
                    "eot_token": (manifest or {}).get("eot_token")}}
    tag = f"d{g['num_layers']}"
    checkpoint_dir = os.path.join(PHASES[phase], tag)

    def write(tmp):
        os.makedirs(os.path.join(tmp, checkpoint_dir))
        with fileio.atomic_open(os.path.join(tmp, checkpoint_dir, f"model_{step:06d}.pt")) as f:
            torch.save(state, f)
        fileio.write_json(os.path.join(tmp, checkpoint_dir, f"meta_{step:06d}.json"), meta)
        if ranks is not None:
            import tiktoken
            os.makedirs(os.path.join(tmp, TOKENIZER_DIR))
            enc = tiktoken.Encoding(name="rustbpe", pat_str=pattern, mergeable_ranks=ranks, special_tokens=special)
            with fileio.atomic_open(os.path.join(tmp, TOKENIZER_DIR, TOKENIZER_PICKLE)) as f:
                pickle.dump(enc, f)
            with fileio.atomic_open(os.path.join(tmp, TOKENIZER_DIR, TOKEN_BYTES)) as f:
                torch.save(torch.tensor(token_bytes(ranks, special), dtype=torch.int32), f)

    final = artifact.export(target, write)
    return {"directory": final, "source": weights.path, "model_family": "nanochat",
            "checkpoint": os.path.join(final, checkpoint_dir, f"model_{step:06d}.pt"), "step": step,
            "dtype": weights.dtype.lower(), "tokenizer": tokenizer_name if ranks is not None else None, "note": note,
            "seconds": round(time.time() - t0, 2)}


def _torch(command):
    try:
        import torch
    except ImportError:
        raise UserError(f"{command} needs PyTorch (pip install torch): nanochat's files are torch.save's") from None
    return torch


# --- import -------------------------------------------------------------------------------

def find_checkpoint(directory, step=None):
    """(checkpoint directory, step, tokenizer directory or None) in a nanochat base directory or
    one of its checkpoint directories: the one directory holding model_*.pt files (at most two
    levels down), its newest step (or `step`), and the tokenizer beside or above it as nanochat
    lays them out."""
    if not os.path.isdir(directory):
        raise UserError(f"{directory}: not a directory (nfn import --nanochat reads nanochat's base directory or "
                        "a checkpoint directory in it)")

    def steps(d):
        try:
            return sorted(int(m.group(1)) for m in map(MODEL_FILE.match, os.listdir(d)) if m)
        except OSError:
            return []

    candidates = [directory] if steps(directory) else []
    if not candidates:
        for sub in sorted(os.listdir(directory)):
            for tag in sorted(os.listdir(os.path.join(directory, sub))) if os.path.isdir(
                    os.path.join(directory, sub)) else []:
                if steps(os.path.join(directory, sub, tag)):
                    candidates.append(os.path.join(directory, sub, tag))
    if not candidates:
        raise UserError(f"{directory}: no model_NNNNNN.pt here or in its <phase>_checkpoints/<tag>/ directories")
    if len(candidates) > 1:
        raise UserError(f"{directory}: checkpoints in {', '.join(os.path.relpath(c, directory) for c in candidates)}; "
                        "name one of those directories")
    found = candidates[0]
    have = steps(found)
    if step is None:
        step = have[-1]
    elif step not in have:
        raise UserError(f"{found}: no model of step {step} (steps: {', '.join(map(str, have))})")
    tokenizer = next((d for d in (os.path.join(found, TOKENIZER_DIR),
                                  os.path.join(found, os.pardir, os.pardir, TOKENIZER_DIR))
                      if os.path.isfile(os.path.join(d, TOKENIZER_PICKLE))), None)
    return found, step, os.path.normpath(tokenizer) if tokenizer else None


def load_state(path, torch):
    """The state dict of model_NNNNNN.pt: {name without the compile prefix: tensor}."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except Exception as e:  # unpickling raises what the file holds
        raise UserError(f"{path}: not a readable state dict ({type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''})") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise UserError(f"{path}: not a state dict of tensors")
    return {k[len(PREFIX):] if k.startswith(PREFIX) else k: v for k, v in state.items()}


def import_nanochat(directory, name=None, force=False, step=None, tokenizer=None, quiet=True):
    """Import a nanochat checkpoint into artifacts_dir()/name (the base directory's name by
    default), its tokenizer.pkl into the tokenizer cache as a chat BPE of that name (or checked
    against `tokenizer`, an existing one). Returns what `nfn import --json` prints."""
    import numpy as np
    from nfn import tokenizers
    from nfn.tokenizers import bpe
    t0 = time.time()
    name = name or artifact.plain_name(os.path.basename(os.path.abspath(directory)))
    artifact.check_name(name, tokenizer_dir=True)
    final = artifact.destination(name, force)
    torch = _torch("nfn import --nanochat")
    found, step, tokenizer_dir = find_checkpoint(directory, step)
    model_path = os.path.join(found, f"model_{step:06d}.pt")
    meta_path = os.path.join(found, f"meta_{step:06d}.json")
    if not os.path.isfile(meta_path):
        raise UserError(f"{found}: model_{step:06d}.pt has no meta_{step:06d}.json beside it")
    meta = fileio.read_json(meta_path)
    if not isinstance(meta, dict) or not isinstance(meta.get("model_config"), dict):
        raise UserError(f"{meta_path}: no model_config object")
    g = geometry_of(meta["model_config"], meta_path)
    state = load_state(model_path, torch)
    want = dict(nanochat_shapes(g))
    missing = [n for n in want if n not in state]
    if missing:
        raise UserError(f"{model_path}: missing tensor{'s' if len(missing) > 1 else ''} {', '.join(missing[:4])}"
                        f"{' ...' if len(missing) > 4 else ''} (of {len(want)} that model_config's GPT has)")
    extra = sorted(set(state) - set(want))
    if extra:
        raise UserError(f"{model_path}: tensors nfn's nanochat has no place for: {', '.join(extra[:4])}"
                        f"{' ...' if len(extra) > 4 else ''}")
    for n, shape in want.items():
        if tuple(state[n].shape) != shape:
            raise UserError(f"{model_path}: tensor {n} has shape {list(state[n].shape)}, model_config implies "
                            f"{list(shape)}")
        if state[n].dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise UserError(f"{model_path}: tensor {n} is {state[n].dtype}; nfn reads float32, bfloat16, float16")
    dtype = "BF16" if all(t.dtype == torch.bfloat16 for t in state.values()) else "F32"
    # The tokenizer: written as nfn's chat BPE of this name, or found equal to the one named.
    tok_files = tok_name = None
    if tokenizer_dir is not None:
        pickle_path = os.path.join(tokenizer_dir, TOKENIZER_PICKLE)
        pattern, ranks, special = read_tokenizer_pickle(pickle_path)
        check_chat_bpe(pickle_path, ranks, special, g["vocab_size"])
        tok_name = tokenizer or name
        files = bpe_files(tok_name, pattern, ranks, special)
        if tok_name in tokenizers.trained_names():
            if trained_bpe(tok_name) != (pattern, ranks, special):
                raise UserError(f"tokenizer {tok_name} in {paths.tokenizers_dir()} differs from {pickle_path}; "
                                f"{'name another with --tokenizer' if tokenizer else 'pass --name for another name'}")
        elif tokenizer is not None:
            raise UserError(f"--tokenizer {tokenizer}: no chat BPE of that name in {paths.tokenizers_dir()}")
        elif tokenizers.imported_dir(tok_name) and tokenizers.imported_dir(tok_name) != final:
            raise UserError(f"--name {tok_name} is the tokenizer of the model imported in "
                            f"{tokenizers.imported_dir(tok_name)}; choose another name")
        else:
            tok_files = files
    elif tokenizer is not None:
        if tokenizers.vocab_size_of(tokenizer) != g["vocab_size"]:
            raise UserError(f"--tokenizer {tokenizer} has {tokenizers.vocab_size_of(tokenizer)} tokens, the model's "
                            f"vocabulary {g['vocab_size']}")
        tok_name = tokenizer

    def tensor(n):
        t = state[n].reshape(dict(decoder_checkpoint.nanochat_layout(g))[n])
        if dtype == "BF16":
            return t.contiguous().view(torch.int16).numpy().view(np.uint16)
        return t.to(torch.float32).numpy()  # bf16 and f16 widen exactly

    source = {"format": "nanochat", "file": os.path.abspath(model_path), "step": step,
              "model_config": meta["model_config"],
              "tokenizer": os.path.abspath(tokenizer_dir) if tokenizer_dir else None}
    eot = None
    if tok_name is not None:
        eot = (json.loads(tok_files[bpe.MANIFEST])["special_tokens"]["<|bos|>"] if tok_files
               else tokenizers.eot_id_of(tok_name))
    fields = decoder_checkpoint.manifest(g, tok_name, eot, 0, "imported", {"source": source}, family="nanochat")
    wrote_tokenizer = False
    if tok_files is not None:  # before the model, which names it; removed again if the model fails
        bpe.save_atomically(paths.tokenizers_dir(), tok_name, tok_files, quiet)
        wrote_tokenizer = True
    try:
        artifact.install(name, force, lambda tmp: decoder_checkpoint.write_decoder(
            tmp, "nanochat", g, tensor, fields, dtype=dtype), quiet)
    except BaseException:
        if wrote_tokenizer:
            import shutil
            shutil.rmtree(os.path.join(paths.tokenizers_dir(), tok_name), ignore_errors=True)
        raise
    return {"name": name, "directory": final, "source": source, "model_family": "nanochat",
            "geometry": fields["geometry"], "parameters": fields["parameters"], "dtype": dtype.lower(),
            "tokenizer": tok_name, "eot_token": eot, "seconds": round(time.time() - t0, 2)}

