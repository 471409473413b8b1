"""`nfn export --nanochat` and `nfn import --nanochat` on tiny random nanochat checkpoints with
a chat BPE trained here: the export is what nanochat's checkpoint_manager and tokenizer load
(the state dict's names and shapes as gpt.py makes them, written out below from its source;
meta.json's model_config; tokenizer.pkl, a tiktoken Encoding, and token_bytes.pt as tok_train.py
computes it), the float64 reference forward on the exported state dict gives the native engine's
logits of the original, import of the export gives back the checkpoint file and the tokenizer
bit for bit (f32 and bf16), and bad input is refused in one line with nothing left behind."""
import hashlib
import json
import os
import pickle
import shutil
import tempfile
import unittest

import numpy as np
import torch

from decoder_reference import nanochat_logits, random_weights
from nfn_probe import run_nfn

TEXT = ("First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. 12 34 567 "
        "You are all resolved rather to die than to famish? Caf\u00e9 \u6771\u4eac\n") * 40


def gpt_py_state_shapes(cfg):
    """nanochat's gpt.py, GPT.__init__, as names and shapes of its state dict: the vocabulary
    padded to a multiple of 64; per block c_q, c_k, c_v, c_proj (no biases), ve_gate =
    Linear(12, n_kv_head) on the layers has_ve picks (alternating, the last always), mlp c_fc
    4x and c_proj; lm_head untied; resid_lambdas and x0_lambdas (n_layer); smear_gate =
    Linear(24, 1); smear_lambda and backout_lambda (1); value_embeds = ModuleDict of
    Embedding(padded, n_kv_head * head_dim) keyed by layer."""
    V = (cfg["vocab_size"] + 63) // 64 * 64
    C, L, H, KV = cfg["n_embd"], cfg["n_layer"], cfg["n_head"], cfg["n_kv_head"]
    hd = C // H

    def has_ve(i):
        return i % 2 == (L - 1) % 2

    shapes = {"transformer.wte.weight": (V, C), "lm_head.weight": (V, C), "resid_lambdas": (L,),
              "x0_lambdas": (L,), "smear_gate.weight": (1, 24), "smear_lambda": (1,), "backout_lambda": (1,)}
    for i in range(L):
        p = f"transformer.h.{i}."
        shapes.update({p + "attn.c_q.weight": (H * hd, C), p + "attn.c_k.weight": (KV * hd, C),
                       p + "attn.c_v.weight": (KV * hd, C), p + "attn.c_proj.weight": (C, C),
                       p + "mlp.c_fc.weight": (4 * C, C), p + "mlp.c_proj.weight": (C, 4 * C)})
        if has_ve(i):
            shapes[p + "attn.ve_gate.weight"] = (KV, 12)
            shapes[f"value_embeds.{i}.weight"] = (V, KV * hd)
    return shapes


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class NanochatInterchangeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        os.environ["NFN_TOKENIZERS_DIR"] = os.path.join(cls.tmp, "tok")
        from nfn import paths
        from nfn.tokenizers import bpe
        bpe.train([TEXT], 300, "chatbpe", paths.tokenizers_dir(), quiet=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=self.tmp)
        self.artifacts = os.path.join(self.dir, "artifacts")
        self.env = {"NFN_ARTIFACTS_DIR": self.artifacts, "NFN_TOKENIZERS_DIR": os.environ["NFN_TOKENIZERS_DIR"]}
        os.environ["NFN_ARTIFACTS_DIR"] = self.artifacts
        from nfn import tokenizers
        self.vocab = tokenizers.vocab_size_of("chatbpe")

    def checkpoint(self, name="nano", kv_heads=2, dtype="F32", tokenizer="chatbpe", seed=0):
        """A random nanochat checkpoint written as the trainer writes one; (directory, flat, geometry)."""
        from nfn import _native
        from nfn.weights import decoder_checkpoint
        g = {"max_seq_len": 24, "vocab_size": self.vocab, "padded_vocab_size": (self.vocab + 63) // 64 * 64,
             "num_layers": 3, "num_heads": 4, "num_kv_heads": kv_heads, "head_dim": 12, "channels": 48,
             "mlp_hidden": 192, "rope_theta": 100000.0, "window_pattern": "SSL", "tied_head": False}
        native = _native.NativeDecoder("nanochat", g["max_seq_len"], g["vocab_size"], g["padded_vocab_size"],
                                       g["num_layers"], g["num_heads"], g["num_kv_heads"], g["head_dim"],
                                       g["channels"], g["mlp_hidden"], window_pattern=g["window_pattern"])
        layout = native.layout()
        # Python's layout of the family is the trainer's, name for name and shape for shape.
        self.assertEqual([(n, tuple(s)) for n, s in decoder_checkpoint.nanochat_layout(g)],
                         [(n, (c,) if r == 1 else (r, c)) for n, r, c, _ in layout])
        flat = random_weights(layout, np.random.default_rng(seed))
        if dtype == "BF16":
            flat = (torch.from_numpy(flat).to(torch.bfloat16).to(torch.float32)).numpy()
        tensors = {n: flat[o:o + r * c] for n, r, c, o in layout}

        def make(n):
            t = tensors[n]
            return t if dtype == "F32" else torch.from_numpy(t).to(torch.bfloat16).view(torch.int16).numpy().view(
                np.uint16)

        from nfn import tokenizers
        directory = os.path.join(self.artifacts, name)
        os.makedirs(directory)
        fields = decoder_checkpoint.manifest(g, tokenizer, tokenizers.eot_id_of(tokenizer) if tokenizer else None,
                                             120, "tiny", family="nanochat")
        decoder_checkpoint.write_decoder(directory, "nanochat", g, lambda n: make(n).reshape(
            dict(decoder_checkpoint.nanochat_layout(g))[n]), fields, step=120, dtype=dtype)
        return directory, flat, g, layout

    def nfn(self, *args):
        code, out, err, _ = run_nfn([*args, "--json"], env=self.env)
        self.assertEqual(code, 0, err)
        return json.loads(out)

    def test_export_is_what_nanochat_loads_and_imports_back(self):
        from nfn import _native, tokenizers
        directory, flat, g, layout = self.checkpoint()
        out = os.path.join(self.dir, "nanochat-base")
        result = self.nfn("export", "--checkpoint", directory, "--nanochat", out)
        self.assertEqual((result["step"], result["tokenizer"], result["note"]), (120, "chatbpe", None))
        ckpt_dir = os.path.join(out, "base_checkpoints", "d3")
        self.assertEqual(sorted(os.listdir(ckpt_dir)), ["meta_000120.json", "model_000120.pt"])
        with open(os.path.join(ckpt_dir, "meta_000120.json")) as f:
            meta = json.load(f)
        config = {"sequence_len": 24, "vocab_size": self.vocab, "n_layer": 3, "n_head": 4, "n_kv_head": 2,
                  "n_embd": 48, "window_pattern": "SSL"}
        self.assertEqual(meta["model_config"], config)
        # checkpoint_manager.build_model: torch.load, then load_state_dict(strict=True).
        state = torch.load(os.path.join(ckpt_dir, "model_000120.pt"), map_location="cpu", weights_only=True)
        want = gpt_py_state_shapes(config)
        self.assertEqual({k: tuple(v.shape) for k, v in state.items()}, want)
        self.assertEqual({v.dtype for v in state.values()}, {torch.float32})
        # The float64 reference on the exported state dict: the native engine's logits of the original.
        p = {k: v.double().reshape(-1) if v.ndim == 2 and v.shape[0] == 1 else v.double() for k, v in state.items()}
        cfg = {"num_layers": 3, "num_heads": 4, "num_kv_heads": 2, "head_dim": 12, "max_seq_len": 24,
               "window_pattern": "SSL"}
        tokens = np.random.default_rng(4).integers(0, self.vocab, size=24).astype(np.int32)
        ref = nanochat_logits(p, torch.tensor(tokens[None]).long(), cfg)[0, :, :self.vocab].numpy()
        engine = _native.InferenceEngine(weights_file=os.path.join(directory, "model_00000120.bin"))
        got = engine.forward(tokens, all_logits=True)
        np.testing.assert_allclose(got, ref, atol=2e-5 * np.abs(ref).max(), rtol=0)
        # tokenizer.pkl: the tiktoken Encoding nanochat's RustBPETokenizer.from_directory unpickles.
        with open(os.path.join(out, "tokenizer", "tokenizer.pkl"), "rb") as f:
            enc = pickle.load(f)
        tok = tokenizers.load("chatbpe")
        for text in ("Before we proceed, 12345!", TEXT[:200], "Caf\u00e9 \u6771\u4eac \U0001f600"):
            self.assertEqual(enc.encode_ordinary(text), tok.encode(text))
        self.assertEqual(enc.encode_single_token("<|assistant_end|>"), tok.special_id("<|assistant_end|>"))
        self.assertEqual(enc.n_vocab, self.vocab)
        # token_bytes.pt as tok_train.py computes it: decoded UTF-8 length, 0 for special tokens.
        token_bytes = torch.load(os.path.join(out, "tokenizer", "token_bytes.pt"), weights_only=True)
        special = set(enc.special_tokens_set)
        expected = [0 if enc.decode([i]) in special else len(enc.decode([i]).encode("utf-8"))
                    for i in range(enc.n_vocab)]
        self.assertEqual((token_bytes.dtype, token_bytes.tolist()), (torch.int32, expected))
        # And back: the same checkpoint file, byte for byte, and the same tokenizer.
        back = self.nfn("import", "--nanochat", out, "--name", "back")
        self.assertEqual((back["tokenizer"], back["eot_token"], back["source"]["step"]),
                         ("back", tok.special_id("<|bos|>"), 120))
        original = os.path.join(directory, "model_00000120.bin")
        self.assertEqual(sha256(os.path.join(back["directory"], "model_00000000.bin")), sha256(original))
        tok_dir = os.environ["NFN_TOKENIZERS_DIR"]
        self.assertEqual(sha256(os.path.join(tok_dir, "back", "bpe.tiktoken")),
                         sha256(os.path.join(tok_dir, "chatbpe", "bpe.tiktoken")))
        self.assertEqual(tokenizers.load("back").encode(TEXT[:300]), tok.encode(TEXT[:300]))
        # Naming the existing tokenizer reuses it (it must be the same one).
        again = self.nfn("import", "--nanochat", os.path.join(ckpt_dir), "--name", "again", "--tokenizer", "chatbpe")
        self.assertEqual(again["tokenizer"], "chatbpe")
        self.assertFalse(os.path.exists(os.path.join(tok_dir, "again")))

    def test_bf16_and_one_kv_head_round_trip(self):
        directory, _, _, _ = self.checkpoint("bf", kv_heads=1, dtype="BF16", seed=3)
        out = os.path.join(self.dir, "bf-export")
        result = self.nfn("export", "--checkpoint", "bf", "--nanochat", out, "--phase", "sft")
        self.assertEqual(result["dtype"], "bf16")
        state = torch.load(os.path.join(out, "chatsft_checkpoints", "d3", "model_000120.pt"), weights_only=True)
        self.assertEqual({v.dtype for v in state.values()}, {torch.bfloat16})
        self.assertEqual(tuple(state["transformer.h.0.attn.ve_gate.weight"].shape), (1, 12))
        back = self.nfn("import", "--nanochat", out, "--name", "bf-back", "--tokenizer", "chatbpe")
        self.assertEqual(back["dtype"], "bf16")
        self.assertEqual(sha256(os.path.join(back["directory"], "model_00000000.bin")),
                         sha256(os.path.join(directory, "model_00000120.bin")))

    def test_tokenizers_that_do_not_travel(self):
        directory, _, _, _ = self.checkpoint("plain", tokenizer=None)
        out = os.path.join(self.dir, "plain-export")
        code, _, err, _ = run_nfn(["export", "--checkpoint", "plain", "--nanochat", out], env=self.env)
        self.assertEqual(code, 0, err)
        self.assertEqual(err.strip(), "nfn export: note: the checkpoint names no tokenizer: no tokenizer files "
                                      "written")
        self.assertEqual(os.listdir(out), ["base_checkpoints"])
        back = self.nfn("import", "--nanochat", out, "--name", "plain-back")
        self.assertIsNone(back["tokenizer"])

    def refused(self, args, message):
        before = sorted(os.listdir(self.artifacts)) if os.path.isdir(self.artifacts) else []
        tokenizers_before = sorted(os.listdir(os.environ["NFN_TOKENIZERS_DIR"]))
        code, out, err, _ = run_nfn(args, env=self.env)
        self.assertEqual(code, 1, err)
        self.assertEqual(err.strip(), f"nfn {args[0]}: error: {message}")
        self.assertEqual(out, "")
        self.assertEqual(sorted(os.listdir(self.artifacts)) if os.path.isdir(self.artifacts) else [], before)
        self.assertEqual(sorted(os.listdir(os.environ["NFN_TOKENIZERS_DIR"])), tokenizers_before)

    def test_bad_input_is_one_line(self):
        directory, _, _, _ = self.checkpoint()
        out = os.path.join(self.dir, "export")
        self.nfn("export", "--checkpoint", directory, "--nanochat", out)
        ckpt_dir = os.path.join(out, "base_checkpoints", "d3")
        model = os.path.join(ckpt_dir, "model_000120.pt")
        state = torch.load(model, weights_only=True)

        def variant(name, state=state, meta_change=None, pickle_bytes=None):
            d = os.path.join(self.dir, name)
            shutil.copytree(out, d)
            c = os.path.join(d, "base_checkpoints", "d3")
            torch.save(state, os.path.join(c, "model_000120.pt"))
            if meta_change is not None:
                with open(os.path.join(c, "meta_000120.json")) as f:
                    meta = json.load(f)
                meta["model_config"].update(meta_change)
                with open(os.path.join(c, "meta_000120.json"), "w") as f:
                    json.dump(meta, f)
            if pickle_bytes is not None:
                with open(os.path.join(d, "tokenizer", "tokenizer.pkl"), "wb") as f:
                    f.write(pickle_bytes)
            return d, os.path.join(c, "model_000120.pt")

        d, m = variant("short", {k: v for k, v in state.items() if k != "smear_lambda"})
        self.refused(["import", "--nanochat", d], f"{m}: missing tensor smear_lambda (of 29 that model_config's GPT "
                                                  "has)")
        d, m = variant("extra", dict(state, **{"transformer.h.0.attn.c_proj_scalar": torch.zeros(48)}))
        self.refused(["import", "--nanochat", d], f"{m}: tensors nfn's nanochat has no place for: "
                                                  "transformer.h.0.attn.c_proj_scalar")
        d, m = variant("wide", meta_change={"n_embd": 96, "n_head": 8})
        self.refused(["import", "--nanochat", d], f"{m}: tensor transformer.wte.weight has shape [320, 48], "
                                                  "model_config implies [320, 96]")
        d, m = variant("heads", meta_change={"n_kv_head": 3})
        self.refused(["import", "--nanochat", d], f"{d}/base_checkpoints/d3/meta_000120.json: model_config.n_kv_head "
                                                  "3 does not divide n_head 4")

        marker = os.path.join(self.dir, "ran")

        class Evil:
            def __reduce__(self):
                return (os.system, ("touch " + marker,))

        d, _ = variant("evil", pickle_bytes=pickle.dumps(Evil()))
        self.refused(["import", "--nanochat", d], f"{d}/tokenizer/tokenizer.pkl: not a pickled tiktoken Encoding (it "
                                                  "names posix.system, not tiktoken's Encoding)")
        self.assertFalse(os.path.exists(marker))
        self.refused(["import", "--nanochat", self.dir + "/artifacts"], f"{self.dir}/artifacts: no model_NNNNNN.pt "
                                                                        "here or in its <phase>_checkpoints/<tag>/ "
                                                                        "directories")
        self.refused(["import", "--nanochat", out, "--name", "x", "--step", "7"],
                     f"{ckpt_dir}: no model of step 7 (steps: 120)")
        # A tokenizer of that name that is another one.
        from nfn import paths
        from nfn.tokenizers import bpe
        bpe.train([TEXT[:500] * 3], 280, "other", paths.tokenizers_dir(), quiet=True)
        self.refused(["import", "--nanochat", out, "--name", "other"],
                     f"tokenizer other in {paths.tokenizers_dir()} differs from {out}/tokenizer/tokenizer.pkl; pass "
                     "--name for another name")
        # Exports: a checkpoint nanochat's GPTConfig cannot say, a non-empty target.
        self.refused(["export", "--checkpoint", directory, "--nanochat", out],
                     f"{out}: exists and is not empty; nfn export writes a new directory")


if __name__ == "__main__":
    unittest.main()
