"""`nfn import --gguf` on tiny llama GGUF files written here with the `gguf` package, as
llama.cpp's converter writes them (q and k rows permuted for GGML's rotary): the import gives
back the Hugging Face weights, reads every tensor type it names, writes a checkpoint the llama
trainer takes, and refuses bad input in one line with nothing left in the artifacts directory."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q
from safetensors.numpy import load_file

from nfn.data.shard_headers import header_bytes
from nfn_probe import run_nfn

# Rows of 256: the K-quants' block.
LAYERS, C, HEADS, KV_HEADS, HIDDEN, CONTEXT, THETA = 2, 256, 4, 2, 512, 64, 50000.0
HEAD_DIM = C // HEADS
MERGES = ["h e", "Ġ t", "Ġt he", "i n"]
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def write_shard(path, tokens):
    with open(path, "wb") as f:
        f.write(header_bytes(len(tokens), 2))
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def bytes_to_unicode():
    """GPT-2's byte alphabet, the form in which GGUF stores byte-level BPE tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for _, c in sorted(zip(bs, cs))]


TOKENS = SPECIAL + bytes_to_unicode() + ["".join(m.split(" ")) for m in MERGES]
VOCAB = len(TOKENS)


def llama_cpp_permute(w, n_head):
    """convert_hf_to_gguf.py's LlamaModel.permute: Hugging Face rows to GGML's rotary order."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_weights(seed=0):
    """A random llama in Hugging Face's names, float32; norms near 1."""
    rng = np.random.default_rng(seed)
    w = {"model.embed_tokens.weight": rng.standard_normal((VOCAB, C)), "model.norm.weight": 1 + rng.random(C) / 10}
    for layer in range(LAYERS):
        p = f"model.layers.{layer}."
        w.update({p + "input_layernorm.weight": 1 + rng.random(C) / 10,
                  p + "self_attn.q_proj.weight": rng.standard_normal((HEADS * HEAD_DIM, C)),
                  p + "self_attn.k_proj.weight": rng.standard_normal((KV_HEADS * HEAD_DIM, C)),
                  p + "self_attn.v_proj.weight": rng.standard_normal((KV_HEADS * HEAD_DIM, C)),
                  p + "self_attn.o_proj.weight": rng.standard_normal((C, HEADS * HEAD_DIM)),
                  p + "post_attention_layernorm.weight": 1 + rng.random(C) / 10,
                  p + "mlp.gate_proj.weight": rng.standard_normal((HIDDEN, C)),
                  p + "mlp.up_proj.weight": rng.standard_normal((HIDDEN, C)),
                  p + "mlp.down_proj.weight": rng.standard_normal((C, HIDDEN))})
    return {k: (v * 0.05 if v.ndim == 2 else v).astype(np.float32) for k, v in w.items()}


def gguf_name(name):
    if not name.startswith("model.layers."):
        return {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                "lm_head.weight": "output.weight"}[name]
    layer, rest = name[len("model.layers."):].split(".", 1)
    short = {"input_layernorm.weight": "attn_norm", "self_attn.q_proj.weight": "attn_q",
             "self_attn.k_proj.weight": "attn_k", "self_attn.v_proj.weight": "attn_v",
             "self_attn.o_proj.weight": "attn_output", "post_attention_layernorm.weight": "ffn_norm",
             "mlp.gate_proj.weight": "ffn_gate", "mlp.up_proj.weight": "ffn_up", "mlp.down_proj.weight": "ffn_down"}
    return f"blk.{layer}.{short[rest]}.weight"


def k_quant_bytes(rows, cols, qtype, rng):
    """Random K-quant blocks whose f16 scales are small and finite (the `gguf` package
    dequantizes these types but does not quantize them)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    data = rng.integers(0, 256, size=(rows, cols // block, size), dtype=np.uint8)
    scales = np.frombuffer(np.full(2, 0.01, np.float16).tobytes(), np.uint8)  # two f16: 4 bytes
    if qtype == Q.Q4_K:
        data[..., 0:4] = scales  # d, dmin
    else:  # Q6_K: d is the block's last two bytes
        data[..., size - 2:size] = scales[:2]
    return data.reshape(rows, -1)


def write_gguf(path, weights, types=None, arch="llama", eps=1e-5, drop=(), extra=None, tokenizer_model="gpt2",
               seed=1):
    """A GGUF file of weights (Hugging Face names) as llama.cpp's converter writes it; types:
    {hf name: GGML type}, F32 otherwise; K-quant tensors get random blocks instead. Returns
    what each tensor dequantizes to, in Hugging Face's row order."""
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(LAYERS)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(C)
    w.add_feed_forward_length(HIDDEN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(THETA)
    w.add_layer_norm_rms_eps(eps)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_tokenizer_model(tokenizer_model)
    w.add_tokenizer_pre("smollm")
    w.add_token_list(TOKENS)
    w.add_token_types([3] * len(SPECIAL) + [1] * (VOCAB - len(SPECIAL)))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(TEMPLATE)
    expected = {}
    for name, value in weights.items():
        if name in drop:
            continue
        stored = value
        if name.endswith("q_proj.weight"):
            stored = llama_cpp_permute(value, HEADS)
        elif name.endswith("k_proj.weight"):
            stored = llama_cpp_permute(value, KV_HEADS)
        qtype = (types or {}).get(name, Q.F32)
        if qtype in (Q.Q4_K, Q.Q6_K):
            data = k_quant_bytes(*stored.shape, qtype, rng)
        elif qtype == Q.F32:
            data = stored
        elif qtype == Q.F16:
            data = stored.astype(np.float16)
        else:
            data = gguf.quants.quantize(stored, qtype)
        read = gguf.quants.dequantize(data, qtype).reshape(stored.shape).astype(np.float32)
        # What the import must give: the dequantized rows, back in Hugging Face's order.
        if name.endswith("q_proj.weight"):
            read = read.reshape(HEADS, HEAD_DIM // 2, 2, C).swapaxes(1, 2).reshape(read.shape)
        elif name.endswith("k_proj.weight"):
            read = read.reshape(KV_HEADS, HEAD_DIM // 2, 2, C).swapaxes(1, 2).reshape(read.shape)
        expected[name] = read
        w.add_tensor(gguf_name(name), data, raw_dtype=None if qtype in (Q.F32, Q.F16) else qtype)
    for name, value in (extra or {}).items():
        w.add_tensor(name, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return expected


class GGUFImportTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()
        self.artifacts = os.path.join(self.tmp, "artifacts")
        self.env = {"NFN_ARTIFACTS_DIR": self.artifacts, "NFN_TOKENIZERS_DIR": os.path.join(self.tmp, "tok")}
        os.environ.update(self.env)
        self.weights = hf_weights()

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def gguf(self, name="tiny.gguf", **kwargs):
        path = os.path.join(self.tmp, name)
        return path, write_gguf(path, self.weights, **kwargs)

    def import_file(self, path, *args):
        code, out, err, _ = run_nfn(["import", "--gguf", path, "--json", *args], env=self.env)
        self.assertEqual(code, 0, err)
        return json.loads(out)

    def test_f32_gives_back_the_hugging_face_weights(self):
        path, _ = self.gguf()
        result = self.import_file(path)
        self.assertEqual(result["name"], "tiny")
        tensors = load_file(os.path.join(result["directory"], "model_00000000.bin"))
        self.assertEqual(sorted(tensors), sorted(self.weights))  # tied: no lm_head
        for name, value in self.weights.items():
            np.testing.assert_array_equal(tensors[name], value, err_msg=name)

    def test_every_type_it_names(self):
        kinds = [Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q6_K]
        matrices = [n for n in self.weights if self.weights[n].ndim == 2]
        types = {n: kinds[i % len(kinds)] for i, n in enumerate(matrices)}
        path, expected = self.gguf(types=types)
        result = self.import_file(path)
        self.assertEqual(set(result["source"]["tensor_types"]), {k.name for k in kinds} | {"F32"})
        tensors = load_file(os.path.join(result["directory"], "model_00000000.bin"))
        for name, value in expected.items():
            self.assertTrue(np.isfinite(value).all(), name)
            np.testing.assert_array_equal(tensors[name], value, err_msg=f"{name} ({types.get(name, Q.F32).name})")

    def test_checkpoint_is_one_the_llama_trainer_takes(self):
        path, _ = self.gguf()
        result = self.import_file(path)
        weights = os.path.join(result["directory"], "model_00000000.bin")
        bin_dir = os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"]))
        data = os.path.join(self.tmp, "data")
        os.makedirs(data)
        tokens = np.random.default_rng(0).integers(0, VOCAB, size=4000)
        write_shard(os.path.join(data, "tiny_train_000000.bin"), tokens[:3000])
        write_shard(os.path.join(data, "tiny_val_000000.bin"), tokens[3000:])
        flags = ["--train-data", data, "--vocab-size", str(VOCAB), "--num-layers", str(LAYERS), "--num-heads",
                 str(HEADS), "--num-kv-heads", str(KV_HEADS), "--model-dim", str(C), "--mlp-hidden", str(HIDDEN),
                 "--train-seq-len", str(CONTEXT), "--rope-theta", str(THETA), "--tie-embeddings", "--batch-size",
                 "2", "--max-steps", "1", "--eval-batches", "1", "--backend", "cpu", "--threads", "2",
                 "--no-checkpoint", "--sample-tokens", "0", "--weights", weights, "--json"]
        trainer = os.path.join(bin_dir, "nfn_llama_native_train")
        proc = subprocess.run([trainer, "--output-dir", os.path.join(self.tmp, "run")] + flags, capture_output=True,
                              text=True, timeout=300)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        # The geometry is compared as text: one field off and the file is refused.
        flags[flags.index("--rope-theta") + 1] = "10000"
        proc = subprocess.run([trainer, "--output-dir", os.path.join(self.tmp, "run2")] + flags, capture_output=True,
                              text=True, timeout=300)
        self.assertNotEqual(proc.returncode, 0)
        self.assertIn("does not match the model's", proc.stderr)
        # The directory is a checkpoint of kind "decoder", as `nfn infer --checkpoint NAME` finds it.
        proc = subprocess.run([os.environ["NFN_DISPATCHER"], "--inspect-checkpoint=tiny",
                               f"--artifacts-dir={self.artifacts}", "--json"], capture_output=True, text=True,
                              timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        answer = json.loads(proc.stdout)
        self.assertEqual((answer["kind"], answer["model_family"], answer["path"]), ("decoder", "llama", weights))

    def test_tokenizer_travels_with_the_model(self):
        from nfn import tokenizers
        path, _ = self.gguf()
        self.import_file(path)
        tok = tokenizers.load("tiny")
        self.assertEqual((tok.vocab_size, tok.eot_id, tok.bos_id), (VOCAB, 2, 1))
        self.assertEqual(tok.special_tokens, {t: i for i, t in enumerate(SPECIAL)})
        self.assertEqual(tok.chat_special_ids, {"<|im_start|>": 1, "<|im_end|>": 2})
        self.assertEqual(tok.chat_template, TEMPLATE)
        ids = tok.encode(" the hein 42")
        self.assertEqual([TOKENS[i] for i in ids], ["Ġthe", "Ġ", "he", "in", "Ġ", "4", "2"])
        self.assertEqual(tok.decode(ids), " the hein 42")
        self.assertEqual(tok.identity()["sha256"], tokenizers.fingerprint("tiny"))
        self.assertIn("tiny", tokenizers.known_names())
        self.assertEqual((tokenizers.vocab_size_of("tiny"), tokenizers.eot_id_of("tiny")), (VOCAB, 2))
        self.assertEqual(tokenizers.describe("tiny")["kind"], "hf-tokenizer")

    def test_force_replaces_in_one_step(self):
        path, _ = self.gguf()
        first = self.import_file(path)
        code, _, err, _ = run_nfn(["import", "--gguf", path], env=self.env)
        self.assertEqual(code, 1)
        self.assertEqual(err.strip(), f"nfn import: error: {first['directory']} exists; pass --force to replace it "
                                      "(or --name for another name)")
        second = self.import_file(path, "--force")
        with open(os.path.join(second["directory"], "manifest.json")) as f:
            self.assertNotEqual(json.load(f)["run_id"], "")
        self.assertEqual(sorted(os.listdir(self.artifacts)), ["tiny"])
        other = self.import_file(path, "--name", "tiny-copy")
        self.assertEqual(other["directory"], os.path.join(self.artifacts, "tiny-copy"))

    def test_a_failed_write_leaves_nothing(self):
        from nfn.weights import gguf_import
        path, _ = self.gguf()
        calls = []

        def failing(self, name):
            calls.append(name)
            if len(calls) == 5:
                raise OSError("disk full")
            return original(self, name)

        original = gguf_import.GGUFModel.tensor
        gguf_import.GGUFModel.tensor = failing
        try:
            with self.assertRaises(OSError):
                gguf_import.import_gguf(path)
        finally:
            gguf_import.GGUFModel.tensor = original
        self.assertEqual(os.listdir(self.artifacts), [])

    def test_default_names(self):
        from nfn.weights.gguf_import import default_name
        self.assertEqual(default_name("/x/SmolLM2-135M-Instruct.Q4_1.gguf"), "smollm2-135m-instruct")
        self.assertEqual(default_name("Llama-3.2-1B-Instruct-Q4_K_M.gguf"), "llama-3.2-1b-instruct")
        self.assertEqual(default_name("tinyllama.f16.gguf"), "tinyllama")
        self.assertEqual(default_name("My Model.gguf"), "my-model")

    def refused(self, path, message, *args):
        """`nfn import` of path exits 1 with the one line `nfn import: error: PATH: message`,
        and the artifacts directory holds nothing."""
        code, out, err, _ = run_nfn(["import", "--gguf", path, *args], env=self.env)
        self.assertEqual(code, 1, err)
        self.assertEqual(err.strip(), f"nfn import: error: {path}: {message}")
        self.assertEqual(out, "")
        self.assertEqual(os.listdir(self.artifacts) if os.path.isdir(self.artifacts) else [], [])

    def test_bad_input_is_one_line(self):
        text = os.path.join(self.tmp, "notes.gguf")
        with open(text, "w") as f:
            f.write("hello")
        self.refused(text, "not a GGUF file (it starts with b'hell', not b'GGUF')")
        self.refused(os.path.join(self.tmp, "absent.gguf"), "no such file")
        path, _ = self.gguf("qwen.gguf", arch="qwen2")
        self.refused(path, "architecture 'qwen2'; nfn import --gguf reads llama models")
        path, _ = self.gguf("q5.gguf", types={"model.layers.1.mlp.up_proj.weight": Q.Q5_0})
        self.refused(path, "tensor blk.1.ffn_up.weight is of type Q5_0; nfn import reads F32, F16, BF16, Q8_0, "
                           "Q4_0, Q4_1, Q4_K, Q6_K")
        path, _ = self.gguf("missing.gguf", drop=("model.layers.1.mlp.up_proj.weight", "model.norm.weight"))
        self.refused(path, "missing tensors blk.1.ffn_up.weight, output_norm.weight (2 of 20 that a llama of 2 "
                           "layers has)")
        path, _ = self.gguf("extra.gguf", extra={"rope_freqs.weight": np.ones(HEAD_DIM // 2, np.float32)})
        self.refused(path, "tensor nfn's llama has no place for: rope_freqs.weight")
        path, _ = self.gguf("eps.gguf", eps=1e-6)
        self.refused(path, "attention.layer_norm_rms_epsilon is 1e-06; nfn's llama uses 1e-05")
        path, _ = self.gguf("spm.gguf", tokenizer_model="llama")
        self.refused(path, "tokenizer.ggml.model is 'llama'; nfn import reads byte-level BPE tokenizers ('gpt2')")
        path, _ = self.gguf()
        code, _, err, _ = run_nfn(["import", "--gguf", path, "--name", "gpt2"], env=self.env)
        self.assertEqual((code, err.strip()), (1, "nfn import: error: --name gpt2 is a built-in tokenizer's; "
                                                  "choose another name"))


if __name__ == "__main__":
    unittest.main()
