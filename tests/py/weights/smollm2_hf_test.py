"""SmolLM2-135M-Instruct, imported from its GGUF file, exported as a Hugging Face llama
directory and imported from that: the second import's weights file is the first's byte for
byte and its tokenizer the same; transformers loads the export (LlamaForCausalLM and its fast
tokenizer with the chat template) and gives the native engine's logits and greedy answer."""
import hashlib
import json
import os
import shutil
import tempfile
import time
import unittest

import numpy as np

import smollm2_gguf

QUESTION = "What is the capital of France?"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return h.hexdigest()


@unittest.skipIf(smollm2_gguf.path() is None, smollm2_gguf.MISSING)
class SmolLM2HFTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from nfn.weights import gguf_import, hf_llama
        cls.tmp = tempfile.mkdtemp()
        os.environ["NFN_ARTIFACTS_DIR"] = os.path.join(cls.tmp, "artifacts")
        os.environ["NFN_TOKENIZERS_DIR"] = os.path.join(cls.tmp, "tokenizers")
        t0 = time.time()
        cls.first = gguf_import.import_gguf(smollm2_gguf.path())
        t1 = time.time()
        cls.export_dir = os.path.join(cls.tmp, "SmolLM2-135M-Instruct")
        cls.exported = hf_llama.export_hf(cls.first["name"], cls.export_dir)
        t2 = time.time()
        cls.second = hf_llama.import_hf(cls.export_dir, name="back")
        print(f"\nGGUF import {t1 - t0:.1f} s, export --hf {t2 - t1:.1f} s, import --hf {time.time() - t2:.1f} s")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_round_trip_is_bit_for_bit(self):
        self.assertEqual(self.exported["files"], ["config.json", "model.safetensors", "tokenizer.json",
                                                  "tokenizer_config.json"])
        a, b = self.first["directory"], self.second["directory"]
        self.assertEqual(sha256(os.path.join(a, "model_00000000.bin")), sha256(os.path.join(b, "model_00000000.bin")))
        self.assertEqual(sha256(os.path.join(a, "tokenizer.json")), sha256(os.path.join(b, "tokenizer.json")))
        with open(os.path.join(a, "nfn_tokenizer.json")) as f1, open(os.path.join(b, "nfn_tokenizer.json")) as f2:
            ta, tb = json.load(f1), json.load(f2)
        for key in ("vocab_size", "eot_token", "bos_token", "special_tokens", "chat_template", "chat_special_tokens"):
            self.assertEqual(ta[key], tb[key], key)
        self.assertEqual(self.second["geometry"], self.first["geometry"])
        self.assertEqual(self.second["eot_token"], self.first["eot_token"])

    def test_transformers_runs_the_export(self):
        import torch
        import transformers
        from nfn import _native, tokenizers
        transformers.logging.disable_progress_bar()
        tok = tokenizers.load(self.first["tokenizer"])
        hf_tok = transformers.AutoTokenizer.from_pretrained(self.export_dir)
        messages = [{"role": "user", "content": QUESTION}]
        text = hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        self.assertIn(f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n", text)
        prompt = hf_tok(text, add_special_tokens=False)["input_ids"]
        start, end = tok.special_id("<|im_start|>"), tok.special_id("<|im_end|>")
        self.assertEqual(prompt.count(start), 3)  # the template's system turn, the user's, the answer's
        self.assertEqual(hf_tok.eos_token_id, end)
        model = transformers.LlamaForCausalLM.from_pretrained(self.export_dir, dtype=torch.float32)
        with torch.no_grad():
            theirs = model(torch.tensor([prompt])).logits[0].numpy()
        engine = _native.InferenceEngine(weights_file=os.path.join(self.second["directory"], "model_00000000.bin"))
        ours = engine.forward(np.array(prompt, np.int32), all_logits=True)
        worst = np.abs(ours - theirs).max()
        print(f"\n{len(prompt)}-token chat prompt: native f32 against transformers f32, largest logit difference "
              f"{worst:.2e} (logits up to {np.abs(theirs).max():.1f})")
        self.assertLess(worst, 1e-5 * np.abs(theirs).max())
        with torch.no_grad():
            generated = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0, len(prompt):]
        engine.reset()
        answer = engine.generate(prompt, 12, temperature=0.0)["tokens"]

        def until_end(ids):  # transformers stops at the eos; the engine, told nothing, goes on
            return ids[:ids.index(end) + 1] if end in ids else ids

        self.assertEqual(until_end(answer), until_end(generated.tolist()))
        self.assertIn("Paris", tok.decode(until_end(answer)))


if __name__ == "__main__":
    unittest.main()
