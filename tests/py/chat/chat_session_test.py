"""`nfn chat` and its ChatSession on the native engine, with a chat BPE trained here and a small
random nanochat model: a second turn prefills only its new tokens yet answers exactly as a fresh
engine that prefills the whole conversation; the turns are laid out as render.py renders them;
the same seed gives the same answer; bad input is one line."""
import json
import os
import shutil
import tempfile
import unittest

import numpy as np
from safetensors.numpy import save_file

from nfn import _native, tokenizers
from nfn.chat.formats import chat_format
from nfn.chat.render import render_for_completion
from nfn.chat.session import ChatSession
from nfn_probe import run_nfn

CFG = dict(family="nanochat", max_seq_len=96, vocab_size=512, padded_vocab_size=512, num_layers=2, num_heads=2,
           num_kv_heads=1, head_dim=16, channels=32, hidden=128, window_pattern="SL")


def write_model(path):
    layout = _native.NativeDecoder(**CFG).layout()
    rng = np.random.default_rng(0)
    tensors = {name: (rng.standard_normal(rows * cols) / np.sqrt(cols)).astype(np.float32).reshape(
        (rows, cols) if rows > 1 else (cols,)) for name, rows, cols, _ in layout}
    geometry = {k: CFG[k] for k in ("max_seq_len", "vocab_size", "padded_vocab_size", "num_layers", "num_heads",
                                    "num_kv_heads", "head_dim", "channels")}
    geometry.update(mlp_hidden=CFG["hidden"], rope_theta=100000.0, window_pattern=CFG["window_pattern"],
                    tied_head=False)
    save_file(tensors, path, metadata={"format": "nfn-decoder", "model_family": "nanochat",
                                       "geometry": json.dumps(geometry)})


class ChatSessionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.env = {"NFN_NATIVE_BIN_DIR": os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"])),
                   "NFN_TOKENIZERS_DIR": os.path.join(cls.tmp, "tokenizers"),
                   "NFN_DATASETS_DIR": os.path.join(cls.tmp, "datasets")}
        os.environ.update(cls.env)
        code, _, err, _ = run_nfn(["tokenizer", "train", "--dataset", "shakespeare", "--vocab-size", "512",
                                   "--name", "chat512"], env=cls.env)
        assert code == 0, err
        cls.model = os.path.join(cls.tmp, "model.safetensors")
        write_model(cls.model)
        cls.tok = tokenizers.load("chat512")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def session(self, seed=0, temperature=0.0):
        engine = _native.InferenceEngine(weights_file=self.model)
        return ChatSession(engine, self.tok, chat_format(self.tok, "chat512"), CFG["max_seq_len"],
                           temperature=temperature, top_k=0, max_new_tokens=12, seed=seed)

    def test_second_turn_reuses_the_cache(self):
        s = self.session()
        first = s.ask("Hello, who are you?")
        fmt = s.fmt
        # The first turn is render.py's completion prompt.
        want = render_for_completion(self.tok, {"messages": [{"role": "user", "content": "Hello, who are you?"}]})
        self.assertEqual(s.tokens[:len(want)], want)
        self.assertEqual(first["stop_reason"], "max_new_tokens")
        # Everything but the last sampled token is in the cache.
        self.assertEqual(s.engine.position, len(s.tokens) - 1)
        before = len(s.tokens)
        second = s.ask("And then?")
        new_turn = s.tokens[before:before + len(fmt.turn("And then?", False))]
        self.assertEqual(new_turn, [fmt.user_start] + self.tok.encode("And then?") + [fmt.user_end,
                                                                                     fmt.assistant_start])
        # A fresh engine given the whole conversation at once answers the same, token for token.
        prompt = s.tokens[:before + len(new_turn)]
        fresh = _native.InferenceEngine(weights_file=self.model)
        out = fresh.generate(prompt, 12, temperature=0.0, stop_token=fmt.stop)
        reply = s.tokens[before + len(new_turn):]
        self.assertEqual(out["tokens"], reply)
        self.assertEqual(second["message"]["content"][0]["text"], self.tok.decode(reply))
        self.assertEqual([m["role"] for m in s.messages], ["user", "assistant", "user", "assistant"])
        s.clear()
        self.assertEqual((s.engine.position, s.tokens, s.messages), (0, [], []))

    def test_same_seed_same_answer(self):
        answers = [self.session(seed=seed, temperature=1.0).ask("Tell me a story.")["message"]["content"]
                   for seed in (7, 7, 8)]
        self.assertEqual(answers[0], answers[1])
        self.assertNotEqual(answers[0], answers[2])

    def test_a_message_that_does_not_fit_is_refused(self):
        s = self.session()
        with self.assertRaises(Exception) as e:
            s.ask("word " * 200)
        self.assertIn("does not fit", str(e.exception))
        self.assertEqual(s.engine.position, 0)

    def test_cli_prompt_mode_and_bad_input(self):
        code, out, err, _ = run_nfn(["chat", "--checkpoint", self.model, "--tokenizer", "chat512", "-p", "Hi",
                                     "--temperature", "0", "--max-new-tokens", "8", "--backend", "cpu", "--json"],
                                    env=self.env)
        self.assertEqual(code, 0, err)
        result = json.loads(out)
        self.assertEqual(result["format"], "nanochat")
        self.assertEqual(result["messages"][0], {"role": "user", "content": "Hi"})
        self.assertEqual(result["messages"][1]["role"], "assistant")
        # The streamed text of prompt mode is the JSON's reply.
        code, text, err, _ = run_nfn(["chat", "--checkpoint", self.model, "--tokenizer", "chat512", "-p", "Hi",
                                      "--temperature", "0", "--max-new-tokens", "8", "--backend", "cpu"],
                                     env=self.env)
        self.assertEqual(code, 0, err)
        self.assertEqual(text.rstrip("\n"), "".join(p["text"] for p in result["messages"][1]["content"]))
        for args, message in (
                (["--json"], "--json needs -p/--prompt"),
                (["-p", "Hi", "--tokenizer", "sp1024"], "tokenizer sp1024 has 1024 tokens"),
                (["-p", "Hi", "--temperature", "-1"], "--temperature must be >= 0"),
                (["-p", " "], "-p/--prompt: empty message")):
            code, _, err, _ = run_nfn(["chat", "--checkpoint", self.model, "--tokenizer", "chat512"] + args,
                                      env=self.env)
            self.assertEqual(code, 1, err)
            self.assertIn(message, err)
            self.assertEqual(len(err.strip().splitlines()), 1, err)


if __name__ == "__main__":
    unittest.main()
