"""SmolLM2-135M-Instruct as a chat model and fine-tuned: the ChatML turns and training renderings
nfn writes are the token ids its own chat template gives (rendered as text with the template's
rules and tokenized by the `tokenizers` library, special tokens included), with the loss mask on
the assistant's text and <|im_end|> only; `--checkpoint smollm2` imports the model on first use,
and the web chat server streams its answer;
a QLoRA SFT run (q4_1 base, rank 8) on chit-chat conversations lowers their held-out masked loss
below the base model's, and its merged export scores as the adapters over their base."""
import json
import os
import shutil
import tempfile
import unittest

import numpy as np

from nfn_probe import run_nfn
from smollm2_gguf import MISSING, path as gguf_path

SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"


@unittest.skipIf(gguf_path() is None, MISSING)
class Smollm2ChatTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.env = {"NFN_NATIVE_BIN_DIR": os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"])),
                   "NFN_ARTIFACTS_DIR": os.path.join(cls.tmp, "artifacts"),
                   "NFN_DATASETS_DIR": os.path.join(cls.tmp, "datasets"),
                   "NFN_TOKENIZERS_DIR": os.path.join(cls.tmp, "tokenizers")}
        os.environ.update(cls.env)
        # First use imports it: nfn chat answers by name.
        code, out, err, _ = run_nfn(["chat", "--checkpoint", "smollm2", "-p", "What is the capital of France?",
                                     "--temperature", "0", "--max-new-tokens", "16", "--backend", "cpu", "--json"],
                                    env=cls.env, timeout=600)
        assert code == 0, err
        cls.answer = json.loads(out)
        cls.import_notice = err

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_first_use_imports_and_answers(self):
        self.assertIn("nfn: importing SmolLM2-135M-Instruct.Q4_1.gguf", self.import_notice)
        self.assertEqual(self.answer["format"], "chatml")
        self.assertIn("Paris", self.answer["messages"][1]["content"][0]["text"])
        self.assertTrue(os.path.isfile(os.path.join(self.env["NFN_ARTIFACTS_DIR"], "smollm2", "DONE_00000000")))

    def test_the_web_page_answers(self):
        import threading
        import urllib.request
        from nfn import _native, tokenizers
        from nfn.chat.formats import chat_format
        from nfn.chat.web import ChatServer, WebChat, WebSession
        tok = tokenizers.load("smollm2")
        engine = _native.InferenceEngine(
            weights_file=os.path.join(self.env["NFN_ARTIFACTS_DIR"], "smollm2", "model_00000000.bin"), context=512,
            quantize="q8_0")
        session = WebSession(engine, tok, chat_format(tok, "smollm2"), engine.max_seq_len)
        server = ChatServer(("127.0.0.1", 0), WebChat(session, "smollm2", {"temperature": 0.0, "top_k": 0,
                                                                            "max_tokens": 24}, 2), quiet=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            body = json.dumps({"messages": [{"role": "user", "content": "What is the capital of France?"}],
                               "temperature": 0}).encode()
            request = urllib.request.Request(server.url + "chat/completions", data=body,
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=120) as response:
                events = [json.loads(line[len("data: "):]) for line in response.read().decode().splitlines()
                          if line.startswith("data: ")]
        finally:
            server.shutdown()
            server.server_close()
        text = "".join(e.get("token", "") for e in events)
        self.assertTrue(events[-1]["done"])
        self.assertIn("Paris", text)

    def test_renderings_are_the_templates(self):
        from tokenizers import Tokenizer
        from nfn import tokenizers
        from nfn.chat.formats import chat_format
        tok = tokenizers.load("smollm2")
        fmt = chat_format(tok, "smollm2")
        hf = Tokenizer.from_file(os.path.join(self.env["NFN_ARTIFACTS_DIR"], "smollm2", "tokenizer.json"))

        def template(messages, generation_prompt):  # the chat template's rules, written out
            text = "" if messages[0]["role"] == "system" else f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
            for m in messages:
                text += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
            return hf.encode(text + ("<|im_start|>assistant\n" if generation_prompt else ""),
                             add_special_tokens=False).ids

        self.assertIn("<|im_start|>system\\nYou are a helpful AI assistant named SmolLM", json.dumps(tok.chat_template))
        user = [{"role": "user", "content": "Hi there! How are you?"}]
        self.assertEqual(fmt.turn(user[0]["content"], True), template(user, True))
        talk = user + [{"role": "assistant", "content": "Fine, thanks. And you?"},
                       {"role": "user", "content": "Good: 2 + 2 = 4."},
                       {"role": "assistant", "content": "Right!"}]
        ids, mask = fmt.render({"messages": talk})
        self.assertEqual(ids, template(talk, False))
        # Learned: each reply's tokens and its <|im_end|>, nothing else.
        learned = [i for i, m in zip(ids, mask) if m]
        want = hf.encode("Fine, thanks. And you?", add_special_tokens=False).ids + [2] + \
            hf.encode("Right!", add_special_tokens=False).ids + [2]
        self.assertEqual(learned, want)
        # A second chat turn continues the first exactly as the template renders the whole.
        second = fmt.turn(talk[2]["content"], False)
        head = template(talk[:2], False)
        self.assertEqual(head[:-1] + second, template(talk[:3], True))  # head ends in "\n" after <|im_end|>

    def test_qlora_sft_lowers_held_out_loss_and_merges(self):
        common = ["sft", "--init-from", "smollm2", "--mixture", "chitchat", "--lora-rank", "8", "--lora-alpha", "16",
                  "--quantize-base", "q4_1", "--train-seq-len", "128", "--batch-size", "4", "--eval-batches", "3",
                  "--warmup-steps", "0", "--backend", "cpu", "--json"]
        runs = {}
        for name, steps, lr in (("base", 1, "0"), ("tuned", 6, "3e-3")):
            out = os.path.join(self.tmp, name)
            code, stdout, err, _ = run_nfn(common + ["--max-steps", str(steps), "--eval-every-steps", str(steps),
                                                     "--learning-rate", lr, "--output-dir", out],
                                           env=self.env, timeout=1200)
            self.assertEqual(code, 0, err)
            runs[name] = json.loads(stdout)
        base, tuned = runs["base"]["final_validation_loss"], runs["tuned"]["final_validation_loss"]
        print(f"held-out masked loss: base {base:.4f}, after 6 QLoRA steps {tuned:.4f}")
        # A learning rate of 0 leaves B at zero: the base model's held-out loss.
        self.assertLess(tuned, base - 0.05, (base, tuned))
        merged = os.path.join(self.tmp, "merged")
        code, _, err, _ = run_nfn(["export", "--checkpoint", os.path.join(self.tmp, "tuned"), "--merge-lora", merged],
                                  env=self.env)
        self.assertEqual(code, 0, err)
        from nfn import _native
        tokens = np.arange(100, 133, dtype=np.int32)
        a = _native.InferenceEngine(weights_file=os.path.join(self.tmp, "tuned", "model_00000006.bin"), context=64)
        b = _native.InferenceEngine(weights_file=os.path.join(merged, "model_00000000.bin"), context=64)
        np.testing.assert_array_equal(a.forward(tokens, all_logits=True), b.forward(tokens, all_logits=True))


if __name__ == "__main__":
    unittest.main()
