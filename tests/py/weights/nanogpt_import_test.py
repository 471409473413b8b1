"""`nfn import --nanogpt` on checkpoints written here as nanoGPT's train.py writes them: a tiny
GPT of nanoGPT's model.py structure (LayerNorm with an optional bias, fused c_attn, a 4x GELU
MLP, lm_head tied to wte), its state dict under torch.compile's `_orig_mod.` prefix, saved with
model_args, optimizer state and counters. The imported llm.c checkpoint's logits, on the native
engine and through `nfn eval`, equal that PyTorch model's in float64 with GPT-2's tanh GELU (which
nfn's GPT computes); nanoGPT's own exact (erf) GELU differs by the approximation, stated below.
Bad input is refused in one line with nothing left behind."""
import json
import math
import os
import shutil
import struct
import tempfile
import unittest

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

from nfn_probe import run_nfn

HEADER_BYTES = 1024  # llm.c's 256 int32


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.c_attn = nn.Linear(cfg["n_embd"], 3 * cfg["n_embd"], bias=cfg["bias"])
        self.c_proj = nn.Linear(cfg["n_embd"], cfg["n_embd"], bias=cfg["bias"])
        self.n_head, self.n_embd = cfg["n_head"], cfg["n_embd"]

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg, gelu):
        super().__init__()
        self.c_fc = nn.Linear(cfg["n_embd"], 4 * cfg["n_embd"], bias=cfg["bias"])
        self.gelu = gelu
        self.c_proj = nn.Linear(4 * cfg["n_embd"], cfg["n_embd"], bias=cfg["bias"])

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg, gelu):
        super().__init__()
        self.ln_1 = LayerNorm(cfg["n_embd"], cfg["bias"])
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg["n_embd"], cfg["bias"])
        self.mlp = MLP(cfg, gelu)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's GPT; gelu: nn.GELU() as nanoGPT has it, or nn.GELU("tanh") as GPT-2 (and nfn)."""

    def __init__(self, cfg, gelu=None):
        super().__init__()
        gelu = gelu or nn.GELU()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg["vocab_size"], cfg["n_embd"]),
            wpe=nn.Embedding(cfg["block_size"], cfg["n_embd"]),
            drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block(cfg, gelu) for _ in range(cfg["n_layer"])]),
            ln_f=LayerNorm(cfg["n_embd"], cfg["bias"])))
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied, as nanoGPT ties them

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


def model_args(vocab_size, bias, n_layer=2, n_head=4, n_embd=32, block_size=16):
    return dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size, bias=bias,
                vocab_size=vocab_size, dropout=0.0)


def random_gpt(args, seed):
    """A nanoGPT model with every parameter random (biases and norms too) at a scale that makes
    the logits large enough to compare."""
    torch.manual_seed(seed)
    model = GPT(args)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 1:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / math.sqrt(p.shape[-1]))
    return model


def save_checkpoint(path, model, args, compiled=True):
    """As nanoGPT's train.py: the compiled model's state dict, optimizer state, counters, config."""
    state = model.state_dict()
    if compiled:
        state = {"_orig_mod." + k: v for k, v in state.items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.save({"model": state, "optimizer": optimizer.state_dict(), "model_args": args, "iter_num": 250,
                "best_val_loss": torch.tensor(1.5), "config": {"dataset": "shakespeare", "batch_size": 12}}, path)


def forward64(model, args, tokens, gelu):
    """The model's logits in float64 with the given GELU."""
    reference = GPT(args, gelu).double()
    reference.load_state_dict({k: v.double() for k, v in model.state_dict().items()})
    with torch.no_grad():
        return reference(torch.tensor(tokens[None]).long())[0].numpy()


def write_shard(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, len(tokens)) + bytes(1012))
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


class NanoGPTImportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.artifacts = os.path.join(self.tmp, "artifacts")
        self.env = {"NFN_ARTIFACTS_DIR": self.artifacts, "NFN_TOKENIZERS_DIR": os.path.join(self.tmp, "tok")}
        os.environ.update(self.env)

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def checkpoint(self, args, seed=0, name="out-tiny", **kwargs):
        os.makedirs(os.path.join(self.tmp, name), exist_ok=True)
        path = os.path.join(self.tmp, name, "ckpt.pt")
        model = random_gpt(args, seed)
        save_checkpoint(path, model, args, **kwargs)
        return path, model

    def import_file(self, path, *extra):
        code, out, err, _ = run_nfn(["import", "--nanogpt", path, "--json", *extra], env=self.env)
        self.assertEqual(code, 0, err)
        return json.loads(out)

    def engine(self, result):
        from nfn import _native
        g = result["geometry"]
        path = os.path.join(result["directory"], "model_00000000.bin")
        params = np.fromfile(path, dtype="<f4", offset=HEADER_BYTES)
        dims = [g[k] for k in ("max_seq_len", "vocab_size", "num_layers", "num_heads", "channels",
                               "padded_vocab_size")]
        return _native.InferenceEngine(params, *dims), params

    def compare(self, result, model, args, tokens, vocab):
        engine, _ = self.engine(result)
        got = engine.forward(tokens, all_logits=True)
        tanh = forward64(model, args, tokens, nn.GELU(approximate="tanh"))[:, :vocab]
        erf = forward64(model, args, tokens, nn.GELU())[:, :vocab]
        scale = np.abs(tanh).max()
        print(f"\nnative f32 against nanoGPT in float64 (vocabulary {vocab}, bias {args['bias']}): tanh GELU "
              f"{np.abs(got - tanh).max():.2e}, nanoGPT's erf GELU {np.abs(got - erf).max():.2e} "
              f"(logits up to {scale:.2f})")
        np.testing.assert_allclose(got, tanh, atol=2e-5 * scale, rtol=0)
        np.testing.assert_allclose(got, erf, atol=2e-2 * scale, rtol=0)
        return tanh

    def test_gpt2_vocabulary_with_biases(self):
        args = model_args(50304, bias=True)
        path, model = self.checkpoint(args)
        result = self.import_file(path)
        self.assertEqual((result["name"], result["tokenizer"], result["eot_token"]), ("out-tiny", "gpt2", 50256))
        g = result["geometry"]
        self.assertEqual((g["vocab_size"], g["padded_vocab_size"], g["max_seq_len"]), (50257, 50304, 16))
        with open(os.path.join(result["directory"], "manifest.json")) as f:
            manifest = json.load(f)
        self.assertEqual((manifest["family"], manifest["model_family"], manifest["tokenizer"]), ("gpt", "gpt", "gpt2"))
        tokens = np.random.default_rng(1).integers(0, 50257, size=16).astype(np.int32)
        self.compare(result, model, args, tokens, 50257)
        # The rows past GPT-2's vocabulary are the trained ones, bit for bit.
        _, params = self.engine(result)
        wte = params[:50304 * 32].reshape(50304, 32)
        np.testing.assert_array_equal(wte, model.transformer.wte.weight.detach().numpy())
        # nfn eval on a split of one context: the mean loss of the reference's logits.
        data = os.path.join(self.tmp, "data")
        os.makedirs(data)
        stream = np.random.default_rng(2).integers(0, 50256, size=17)
        write_shard(os.path.join(data, "tiny_train_000000.bin"), stream)
        write_shard(os.path.join(data, "tiny_val_000000.bin"), stream)
        code, out, err, _ = run_nfn(["eval", "--checkpoint", "out-tiny", "--dataset", data, "--json", "--backend",
                                     "cpu"], env=self.env)
        self.assertEqual(code, 0, err)
        logits = forward64(model, args, stream[:16], nn.GELU(approximate="tanh"))[:, :50257]
        want = F.cross_entropy(torch.tensor(logits), torch.tensor(stream[1:]).long()).item()
        got = json.loads(out)
        self.assertEqual(got["tokens"], 16)
        self.assertAlmostEqual(got["loss"], want, delta=2e-5 * want)

    def test_own_vocabulary_without_biases(self):
        args = model_args(65, bias=False, n_layer=3, n_head=2, n_embd=48, block_size=20)
        path, model = self.checkpoint(args, seed=5, name="shakespeare-char", compiled=False)
        result = self.import_file(path)
        self.assertEqual((result["name"], result["tokenizer"], result["eot_token"]), ("shakespeare-char", None, None))
        g = result["geometry"]
        self.assertEqual((g["vocab_size"], g["padded_vocab_size"]), (65, 128))
        tokens = np.random.default_rng(3).integers(0, 65, size=20).astype(np.int32)
        self.compare(result, model, args, tokens, 65)
        # Biases absent: zeros in the llm.c file.
        from nfn.infer import checkpoint, hf
        _, params = self.engine(result)
        p = hf.split_flat(params, checkpoint.geometry_layout(g, "test")["geometry"])
        for name in ("ln1b", "qkvb", "attprojb", "ln2b", "fcb", "fcprojb", "lnfb"):
            self.assertFalse(p[name].any(), name)

    def refused(self, path, message, *args):
        code, out, err, _ = run_nfn(["import", "--nanogpt", path, *args], env=self.env)
        self.assertEqual(code, 1, err)
        self.assertEqual(err.strip(), f"nfn import: error: {message}")
        self.assertEqual(out, "")
        self.assertEqual(os.listdir(self.artifacts) if os.path.isdir(self.artifacts) else [], [])

    def test_bad_input_is_one_line(self):
        text = os.path.join(self.tmp, "notes.pt")
        with open(text, "w") as f:
            f.write("hello")
        self.refused(text, f"{text}: not a PyTorch checkpoint (torch.save's zip file)")
        self.refused(os.path.join(self.tmp, "absent.pt"), f"{self.tmp}/absent.pt: no such file")
        other = os.path.join(self.tmp, "list.pt")
        torch.save([1, 2, 3], other)
        self.refused(other, f"{other}: not a nanoGPT checkpoint (a dict with 'model' and 'model_args')")
        args = model_args(96, bias=True)
        model = random_gpt(args, 1)
        state = model.state_dict()

        def save(name, state, margs=args):
            path = os.path.join(self.tmp, name)
            torch.save({"model": state, "model_args": margs}, path)
            return path

        path = save("missing.pt", {k: v for k, v in state.items() if k != "transformer.h.1.mlp.c_fc.weight"})
        self.refused(path, f"{path}: missing tensor transformer.h.1.mlp.c_fc.weight")
        path = save("untied.pt", dict(state, **{"lm_head.weight": state["lm_head.weight"] + 1}))
        self.refused(path, f"{path}: lm_head.weight differs from transformer.wte.weight; nanoGPT ties them, and so "
                           "does nfn's GPT")
        path = save("wide.pt", state, dict(args, n_embd=48))
        self.refused(path, f"{path}: tensor transformer.wte.weight has shape [96, 32], model_args imply [96, 48]")
        path = save("biased.pt", state, dict(args, bias=False))
        self.refused(path, f"{path}: tensors a nanoGPT of these model_args does not have (model_args say "
                           "bias=False): transformer.h.0.attn.c_attn.bias, transformer.h.0.attn.c_proj.bias, "
                           "transformer.h.0.ln_1.bias, transformer.h.0.ln_2.bias ...")
        path = save("heads.pt", state, dict(args, n_head=5))
        self.refused(path, f"{path}: model_args n_embd 32 is not a multiple of n_head 5")
        path = save("ok.pt", state)
        self.refused(path, "--tokenizer gpt2 has 50257 tokens, the checkpoint's embedding 96 rows", "--tokenizer",
                     "gpt2")


if __name__ == "__main__":
    unittest.main()
