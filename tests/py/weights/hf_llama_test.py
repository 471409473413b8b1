"""`nfn import --hf` and `nfn export --hf` on tiny random llamas written here as Hugging Face
writes them (the `safetensors` package; one file or shards with an index; f32 or bf16), with a
byte-level BPE tokenizer.json made by the `tokenizers` library: the import gives back the
tensors bit for bit, export then import gives back the same checkpoint file, the `safetensors`
package and transformers' LlamaForCausalLM read the export, the float64 reference forward
(decoder_reference.llama_logits) on the exported tensors gives the native engine's logits of the
original checkpoint, and bad input is refused in one line with nothing left behind."""
import hashlib
import json
import os
import shutil
import tempfile
import unittest

import numpy as np
import torch
from safetensors.numpy import load_file, save_file

from decoder_reference import llama_logits
from nfn_probe import run_nfn

LAYERS, C, HEADS, KV_HEADS, HIDDEN, CONTEXT, THETA = 2, 32, 4, 2, 88, 24, 50000.0
HEAD_DIM = C // HEADS
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
ROWS = 320  # the embedding's rows; the tokenizer holds fewer (an embedding padded past it)


def tokenizer_json():
    """A byte-level BPE over GPT-2's byte alphabet with a few merges and three special tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {t: i for i, t in enumerate(SPECIAL + sorted(alphabet) + ["he", "Ġt", "Ġthe", "in"])}
    merges = [("h", "e"), ("Ġ", "t"), ("Ġt", "he"), ("i", "n")]
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL])
    return tok.to_str(), tok.get_vocab_size(with_added_tokens=True)


def hf_weights(tied=False, seed=0):
    rng = np.random.default_rng(seed)
    w = {"model.embed_tokens.weight": rng.standard_normal((ROWS, C)) * 0.5, "model.norm.weight": 1 + rng.random(C) / 5}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        w.update({p + "input_layernorm.weight": 1 + rng.random(C) / 5,
                  p + "self_attn.q_proj.weight": rng.standard_normal((HEADS * HEAD_DIM, C)) / np.sqrt(C),
                  p + "self_attn.k_proj.weight": rng.standard_normal((KV_HEADS * HEAD_DIM, C)) / np.sqrt(C),
                  p + "self_attn.v_proj.weight": rng.standard_normal((KV_HEADS * HEAD_DIM, C)) / np.sqrt(C),
                  p + "self_attn.o_proj.weight": rng.standard_normal((C, HEADS * HEAD_DIM)) / np.sqrt(C),
                  p + "post_attention_layernorm.weight": 1 + rng.random(C) / 5,
                  p + "mlp.gate_proj.weight": rng.standard_normal((HIDDEN, C)) / np.sqrt(C),
                  p + "mlp.up_proj.weight": rng.standard_normal((HIDDEN, C)) / np.sqrt(C),
                  p + "mlp.down_proj.weight": rng.standard_normal((C, HIDDEN)) / np.sqrt(HIDDEN)})
    if not tied:
        w["lm_head.weight"] = rng.standard_normal((ROWS, C)) / np.sqrt(C)
    return {k: v.astype(np.float32) for k, v in w.items()}


def config(tied=False, **changes):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": ROWS, "hidden_size": C,
           "intermediate_size": HIDDEN, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
           "num_key_value_heads": KV_HEADS, "hidden_act": "silu", "max_position_embeddings": CONTEXT,
           "rms_norm_eps": 1e-5, "rope_theta": THETA, "rope_scaling": None, "attention_bias": False,
           "tie_word_embeddings": tied, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "float32"}
    cfg.update(changes)
    return cfg


def write_hf(directory, weights, cfg, shards=1, bf16=False, tokenizer=True):
    """A Hugging Face llama directory as save_pretrained writes one."""
    os.makedirs(directory)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f)
    names = sorted(weights)
    store = {}
    for name in names:
        t = torch.from_numpy(weights[name])
        store[name] = (t.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16) if bf16 else weights[name])
    if shards == 1:
        _save(store, os.path.join(directory, "model.safetensors"), bf16)
    else:
        weight_map = {}
        for i in range(shards):
            part = names[i::shards]
            fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            _save({n: store[n] for n in part}, os.path.join(directory, fname), bf16)
            weight_map.update({n: fname for n in part})
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    if tokenizer:
        with open(os.path.join(directory, "tokenizer.json"), "w") as f:
            f.write(tokenizer_json()[0])
        with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
            json.dump({"bos_token": "<|im_start|>", "eos_token": {"content": "<|im_end|>"}, "chat_template": TEMPLATE,
                       "tokenizer_class": "GPT2Tokenizer"}, f)


def _save(tensors, path, bf16):
    if not bf16:
        save_file(tensors, path, metadata={"format": "pt"})
        return
    from safetensors.torch import save_file as save_torch
    save_torch({n: torch.from_numpy(a.view(np.int16)).view(torch.bfloat16) for n, a in tensors.items()}, path,
               metadata={"format": "pt"})


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


class HFLlamaTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.artifacts = os.path.join(self.tmp, "artifacts")
        self.env = {"NFN_ARTIFACTS_DIR": self.artifacts, "NFN_TOKENIZERS_DIR": os.path.join(self.tmp, "tok")}
        os.environ.update(self.env)
        self.weights = hf_weights()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def hf_dir(self, name="Tiny-Llama", weights=None, cfg=None, **kwargs):
        path = os.path.join(self.tmp, name)
        write_hf(path, self.weights if weights is None else weights, cfg or config(), **kwargs)
        return path

    def nfn(self, *args):
        code, out, err, _ = run_nfn([*args, "--json"], env=self.env)
        self.assertEqual(code, 0, err)
        return json.loads(out)

    def model_file(self, result):
        return os.path.join(result["directory"], "model_00000000.bin")

    def test_import_gives_back_the_weights_and_tokenizer(self):
        from nfn import tokenizers
        result = self.nfn("import", "--hf", self.hf_dir())
        self.assertEqual((result["name"], result["dtype"], result["tokenizer"], result["eot_token"]),
                         ("tiny-llama", "f32", "tiny-llama", 2))
        tensors = load_file(self.model_file(result))
        self.assertEqual(sorted(tensors), sorted(self.weights))
        for name, value in self.weights.items():
            np.testing.assert_array_equal(tensors[name], value, err_msg=name)
        size = tokenizer_json()[1]
        g = result["geometry"]
        self.assertEqual((g["vocab_size"], g["padded_vocab_size"], g["rope_theta"], g["tied_head"]),
                         (size, ROWS, THETA, False))
        tok = tokenizers.load("tiny-llama")
        self.assertEqual((tok.vocab_size, tok.eot_id, tok.bos_id, tok.chat_template), (size, 2, 1, TEMPLATE))
        self.assertEqual(tok.special_tokens, {t: i for i, t in enumerate(SPECIAL)})
        self.assertEqual(tok.decode(tok.encode(" the hein 42")), " the hein 42")
        # The trainer's checkpoint lookup takes the directory as a llama decoder.
        code, out, err, _ = run_nfn(["infer", "--checkpoint", "tiny-llama", "--native-info"], env=self.env)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["model_family"], "llama")

    def test_shards_bf16_and_a_tied_head(self):
        sharded = self.nfn("import", "--hf", self.hf_dir("sharded", shards=3), "--name", "sharded")
        single = self.nfn("import", "--hf", self.hf_dir(), "--name", "single")
        self.assertEqual(sha256(self.model_file(sharded)), sha256(self.model_file(single)))
        bf16 = self.nfn("import", "--hf", self.hf_dir("bf16", bf16=True))
        self.assertEqual(bf16["dtype"], "bf16")
        with open(self.model_file(bf16), "rb") as f:
            header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
        self.assertEqual({e["dtype"] for k, e in header.items() if k != "__metadata__"}, {"BF16"})
        from safetensors.torch import load_file as load_torch
        imported = load_torch(self.model_file(bf16))
        for name, value in load_torch(os.path.join(self.tmp, "bf16", "model.safetensors")).items():
            self.assertTrue(torch.equal(imported[name], value), name)
        # Tied: the head is the embedding; a stored copy is dropped when it equals it.
        tied = {k: v for k, v in self.weights.items() if k != "lm_head.weight"}
        result = self.nfn("import", "--hf", self.hf_dir("tied", weights=tied, cfg=config(tied=True)))
        self.assertTrue(result["geometry"]["tied_head"])
        self.assertEqual(sorted(load_file(self.model_file(result))), sorted(tied))
        copy = dict(tied, **{"lm_head.weight": tied["model.embed_tokens.weight"]})
        self.nfn("import", "--hf", self.hf_dir("tied-copy", weights=copy, cfg=config(tied=True)))

    def test_export_round_trips_and_transformers_reads_it(self):
        first = self.nfn("import", "--hf", self.hf_dir())
        out = os.path.join(self.tmp, "exported")
        result = self.nfn("export", "--checkpoint", "tiny-llama", "--hf", out)
        self.assertEqual(result["files"], ["config.json", "model.safetensors", "tokenizer.json",
                                           "tokenizer_config.json"])
        # The safetensors package reads Hugging Face's names and the very tensors.
        exported = load_file(os.path.join(out, "model.safetensors"))
        self.assertEqual(sorted(exported), sorted(self.weights))
        for name, value in self.weights.items():
            np.testing.assert_array_equal(exported[name], value, err_msg=name)
        # Import of the export: the same model file, byte for byte, and the same tokenizer.
        back = self.nfn("import", "--hf", out, "--name", "back")
        self.assertEqual(sha256(self.model_file(back)), sha256(self.model_file(first)))
        for f in ("tokenizer.json",):
            self.assertEqual(sha256(os.path.join(back["directory"], f)), sha256(os.path.join(first["directory"], f)))
        with open(os.path.join(back["directory"], "nfn_tokenizer.json")) as f1, \
                open(os.path.join(first["directory"], "nfn_tokenizer.json")) as f2:
            a, b = json.load(f1), json.load(f2)
        for key in ("vocab_size", "eot_token", "bos_token", "special_tokens", "chat_template"):
            self.assertEqual(a[key], b[key], key)
        # transformers takes config.json as a LlamaConfig and the directory as a model.
        import transformers
        transformers.logging.disable_progress_bar()
        cfg = transformers.LlamaConfig.from_pretrained(out)
        self.assertEqual((cfg.num_key_value_heads, cfg.head_dim, cfg.intermediate_size, cfg.rms_norm_eps,
                          cfg.tie_word_embeddings, cfg.eos_token_id), (KV_HEADS, HEAD_DIM, HIDDEN, 1e-5, False, 2))
        hf = transformers.LlamaForCausalLM.from_pretrained(out, dtype=torch.float64)
        # The float64 reference on the exported tensors, the native engine on the original.
        from nfn import _native
        size = tokenizer_json()[1]
        tokens = np.random.default_rng(3).integers(0, size, size=CONTEXT).astype(np.int32)
        p = {k: torch.tensor(v, dtype=torch.float64) for k, v in exported.items()}
        g = first["geometry"]
        cfg_ref = {"num_layers": LAYERS, "num_heads": HEADS, "num_kv_heads": KV_HEADS, "head_dim": HEAD_DIM,
                   "norm_eps": 1e-5, "rope_theta": THETA, "tied_head": False}
        want = llama_logits(p, torch.tensor(tokens[None]).long(), cfg_ref)[0, :, :size].numpy()
        engine = _native.InferenceEngine(weights_file=self.model_file(first))
        got = engine.forward(tokens, all_logits=True)
        self.assertEqual(got.shape, (CONTEXT, g["vocab_size"]))
        scale = np.abs(want).max()
        worst = np.abs(got - want).max()
        print(f"\nnative f32 against the float64 reference on the export: largest difference {worst:.2e} "
              f"(logits up to {scale:.2f})")
        np.testing.assert_allclose(got, want, atol=2e-5 * scale, rtol=0)
        with torch.no_grad():
            theirs = hf(torch.tensor(tokens[None]).long()).logits[0, :, :size].numpy()
        # transformers' rotary angles are float32 (its inv_freq), so float64 agrees to 1e-6.
        np.testing.assert_allclose(theirs, want, atol=2e-6 * scale, rtol=0)

    def refused(self, args, message):
        code, out, err, _ = run_nfn(args, env=self.env)
        self.assertEqual(code, 1, err)
        self.assertEqual(err.strip(), f"nfn {args[0]}: error: {message}")
        self.assertEqual(out, "")
        self.assertEqual(os.listdir(self.artifacts) if os.path.isdir(self.artifacts) else [], [])

    def test_bad_input_is_one_line(self):
        d = self.hf_dir("eps", cfg=config(rms_norm_eps=1e-6))
        self.refused(["import", "--hf", d], f"{d}/config.json: rms_norm_eps is 1e-06; nfn's llama uses 1e-05 (the "
                                            "geometry has no field for another)")
        d = self.hf_dir("scaled", cfg=config(rope_scaling={"rope_type": "linear", "factor": 2.0}))
        self.refused(["import", "--hf", d], f"{d}/config.json: rope scaling ({{\"rope_type\": \"linear\", "
                                            "\"factor\": 2.0}); nfn's llama has none (the geometry has no field "
                                            "for it)")
        d = self.hf_dir("biased", cfg=config(attention_bias=True))
        self.refused(["import", "--hf", d], f"{d}/config.json: attention_bias is true; nfn's llama has no biases")
        biased = dict(self.weights, **{"model.layers.0.self_attn.q_proj.bias": np.zeros(C, np.float32)})
        d = self.hf_dir("bias-tensor", weights=biased)
        self.refused(["import", "--hf", d], f"{d}: bias tensors (model.layers.0.self_attn.q_proj.bias); nfn's llama "
                                            "has no biases")
        d = self.hf_dir("qwen", cfg=config(model_type="qwen2", architectures=["Qwen2ForCausalLM"]))
        self.refused(["import", "--hf", d], f"{d}/config.json: model_type \"qwen2\", architectures "
                                            "[\"Qwen2ForCausalLM\"]; nfn import --hf reads llama models "
                                            "(LlamaForCausalLM)")
        d = self.hf_dir("wide", cfg=config(intermediate_size=HIDDEN + 8))
        self.refused(["import", "--hf", d], f"{d}/model.safetensors: tensor model.layers.0.mlp.gate_proj.weight has "
                                            f"shape [{HIDDEN}, {C}], config.json implies [{HIDDEN + 8}, {C}]")
        d = self.hf_dir("short", weights={k: v for k, v in self.weights.items() if k != "model.norm.weight"})
        self.refused(["import", "--hf", d], f"{d}: missing tensor model.norm.weight (1 of 21 that a llama of 2 "
                                            "layers has)")
        d = self.hf_dir("untied-less", weights={k: v for k, v in self.weights.items() if k != "lm_head.weight"})
        self.refused(["import", "--hf", d], f"{d}: missing tensor lm_head.weight (1 of 21 that a llama of 2 layers "
                                            "has)")
        extra = dict(self.weights, **{"model.extra.weight": np.zeros(3, np.float32)})
        d = self.hf_dir("extra", weights=extra)
        self.refused(["import", "--hf", d], f"{d}: tensor nfn's llama has no place for: model.extra.weight")
        tied = {k: v for k, v in self.weights.items()}
        d = self.hf_dir("tied-differs", weights=tied, cfg=config(tied=True))
        self.refused(["import", "--hf", d], f"{d}/model.safetensors: tie_word_embeddings is true but lm_head.weight "
                                            "differs from model.embed_tokens.weight")
        self.refused(["import", "--hf", os.path.join(self.tmp, "absent")],
                     f"{self.tmp}/absent: not a directory (nfn import --hf reads a Hugging Face model directory)")
        # Exports: a non-empty target, a checkpoint of another family.
        self.nfn("import", "--hf", self.hf_dir())
        full = os.path.join(self.tmp, "full")
        os.makedirs(full)
        open(os.path.join(full, "x"), "w").close()
        code, _, err, _ = run_nfn(["export", "--checkpoint", "tiny-llama", "--hf", full], env=self.env)
        self.assertEqual((code, err.strip()), (1, f"nfn export: error: {full}: exists and is not empty; nfn export "
                                                  "writes a new directory"))
        self.assertEqual(os.listdir(full), ["x"])
        code, _, err, _ = run_nfn(["export", "--checkpoint", "tiny-llama", "--nanochat",
                                   os.path.join(self.tmp, "nc")], env=self.env)
        self.assertEqual(code, 1)
        self.assertTrue(err.strip().endswith("a llama checkpoint; nfn export --nanochat writes nanochat checkpoints"),
                        err)
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "nc")))

    def test_a_failed_write_leaves_nothing(self):
        from nfn.weights import hf_llama
        d = self.hf_dir()
        calls = []
        original = hf_llama.HFLlama.tensor

        def failing(model, name):
            calls.append(name)
            if len(calls) == 5:
                raise OSError("disk full")
            return original(model, name)

        hf_llama.HFLlama.tensor = failing
        try:
            with self.assertRaises(OSError):
                hf_llama.import_hf(d)
        finally:
            hf_llama.HFLlama.tensor = original
        self.assertEqual(os.listdir(self.artifacts), [])


if __name__ == "__main__":
    unittest.main()
