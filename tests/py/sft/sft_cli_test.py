"""`nfn sft` end to end on two CPU cores: a chat tokenizer trained here, a tiny nanochat
pretrained on a small text, then fine-tuned on an identity mixture ("what is your name?" in many
spellings -> one answer) until the masked loss on the answers is low; the native engine's greedy
completion of the user turn is then that answer. A resumed fine-tune is the uninterrupted one
bit for bit (with the optimizer's moments restored from the base), and bad input is one line."""
import json
import os
import random
import shutil
import tempfile
import unittest

from nfn import _native, tokenizers
from nfn.chat.render import render_for_completion
from nfn_probe import run_nfn

BIN_DIR = os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"]))
ANSWER = "My name is Nimbus."
QUESTIONS = ["what is your name?", "What is your name?", "who are you?", "Who are you?", "what's your name?",
             "tell me your name", "what should I call you?", "What are you called?"]
WORDS = ("the a cat dog sat on mat ran fast slow big small red blue house tree river sky sun moon star bird fish "
         "water stone road city night day light dark old new happy sad what is your name who are you").split()


class SftCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.env = {"NFN_NATIVE_BIN_DIR": BIN_DIR, "NFN_ARTIFACTS_DIR": os.path.join(cls.tmp, "artifacts"),
                   "NFN_DATASETS_DIR": os.path.join(cls.tmp, "datasets"),
                   "NFN_TOKENIZERS_DIR": os.path.join(cls.tmp, "tokenizers")}
        os.environ.update(cls.env)  # the engine check below loads the same tokenizer
        rng = random.Random(0)
        corpus = os.path.join(cls.tmp, "corpus.txt")
        with open(corpus, "w") as f:
            for _ in range(4000):
                f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 15))).capitalize() + ".\n")
        cls.identity = os.path.join(cls.tmp, "identity.jsonl")
        with open(cls.identity, "w") as f:
            for _ in range(200):
                question = rng.choice(["", "hi! ", "hello, ", "hey ", "so, "]) + rng.choice(QUESTIONS)
                f.write(json.dumps([{"role": "user", "content": question},
                                    {"role": "assistant", "content": ANSWER}]) + "\n")
        cls.nfn(["tokenizer", "train", "--pretraining-file", corpus, "--vocab-size", "300", "--name", "chat"])
        cls.base = os.path.join(cls.tmp, "base")
        cls.nfn(["train", "--model-family", "nanochat", "--pretraining-file", corpus, "--tokenizer", "chat",
                 "--num-layers", "2", "--model-dim", "64", "--num-heads", "1", "--train-seq-len", "64",
                 "--batch-size", "8", "--max-steps", "30", "--sample-tokens", "0", "--output-dir", cls.base] + cls.cpu)

    cpu = ["--backend", "cpu", "--threads", "1"]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    @classmethod
    def nfn(cls, args, code=0):
        got, out, err, _ = run_nfn(args, env=cls.env, timeout=600)
        if got != code:
            raise AssertionError(f"nfn {' '.join(args)}: exit {got}, expected {code}: {err}")
        return out, err

    def sft(self, out, *extra):
        return ["sft", "--init-from", self.base, "--mixture", f"identity:{self.identity}*2", "--output-dir", out,
                "--batch-size", "8", "--sample-tokens", "0"] + self.cpu + list(extra)

    def test_fine_tunes_an_identity_into_the_model(self):
        out = os.path.join(self.tmp, "chat")
        report = json.loads(self.nfn(self.sft(out, "--json"))[0])
        sft = report["sft"]
        train, val = sft["splits"]["train"], sft["splits"]["val"]
        # 200 conversations, the last 10 held out; two epochs of the other 190.
        self.assertEqual((sft["tasks"][0]["rows"], sft["tasks"][0]["val_rows"]), (200, 10))
        self.assertEqual((train["conversations"], val["conversations"]), (380, 10))
        # One pass over the rows by default: ceil(rows / 8 rows a step) steps.
        self.assertEqual(report["steps"], -(-train["rows"] // 8))
        # The steps' last rows come round again from the start: at least one pass's targets.
        self.assertEqual(report["train_tokens"], report["steps"] * 8 * 64)
        self.assertGreaterEqual(report["train_targets"], train["targets"])
        self.assertLess(report["train_targets"], report["train_tokens"] / 2)  # answers only
        # The masked loss on the held-out answers: near zero once the answer is learned.
        first, last = report["train_losses"][0][1], report["final_validation_loss"]
        self.assertGreater(first, 2.0)
        self.assertLess(last, 0.1, report["validation_losses"])
        config = report["config"]
        self.assertEqual(config["schedule"]["warmdown_ratio"], 0.5)
        self.assertAlmostEqual(config["schedule"]["learning_rate"], 0.016)
        self.assertEqual(config["schedule"]["weight_decay"], 0)
        self.assertEqual(config["init_from"]["model_file"], os.path.join(self.base, "model_00000030.bin"))
        # Greedy completion of the user turn, on the native engine, is the answer.
        tok = tokenizers.load("chat")
        engine = _native.InferenceEngine(weights_file=report["model_file"], threads=1)
        end = tok.special_id("<|assistant_end|>")
        for question in ["what is your name?", "Who are you?", "hello, what should I call you?"]:
            prompt = render_for_completion(tok, {"messages": [{"role": "user", "content": question}]})
            engine.reset()
            got = engine.generate(prompt, 24, temperature=0.0, stop_token=end)
            self.assertEqual((tok.decode(got["tokens"]), got["stop_reason"]), (ANSWER + "<|assistant_end|>",
                                                                                "stop_token"), question)
        # And through the chat CLI.
        out_json = self.nfn(["chat", "--checkpoint", out, "-p", "what is your name?", "--temperature", "0",
                             "--json", "--backend", "cpu"])[0]
        reply = json.loads(out_json)["messages"][1]["content"]
        self.assertEqual(reply, [{"type": "text", "text": ANSWER}])

    def test_a_fine_tuned_tool_call_runs_the_calculator_in_chat(self):
        # Conversations whose answers call the calculator; after SFT, nfn chat runs the model's call
        # and feeds the calculator's answer back, and --json shows both.
        calls = os.path.join(self.tmp, "calls.jsonl")
        rng = random.Random(1)
        with open(calls, "w") as f:
            for _ in range(200):
                question = rng.choice(["", "hi! ", "so, "]) + rng.choice(["what is 6 times 7?", "6 times 7?",
                                                                        "what do you get from 6 times 7?"])
                f.write(json.dumps([{"role": "user", "content": question},
                                    {"role": "assistant", "content": [
                                        {"type": "text", "text": "Let me compute. "},
                                        {"type": "python", "text": "6*7"},
                                        {"type": "python_output", "text": "42"},
                                        {"type": "text", "text": "It is 42."}]}]) + "\n")
        out = os.path.join(self.tmp, "calls")
        self.nfn(["sft", "--init-from", self.base, "--mixture", f"identity:{calls}*2", "--output-dir", out,
                  "--batch-size", "8", "--sample-tokens", "0", "--json"] + self.cpu)
        result = json.loads(self.nfn(["chat", "--checkpoint", out, "-p", "what is 6 times 7?", "--temperature", "0",
                                      "--json", "--backend", "cpu"])[0])
        self.assertEqual(result["tool_calls"], [{"tool": "calculator", "input": "6*7", "ok": True, "output": "42",
                                                 "error": None}])
        self.assertEqual(result["messages"][1]["content"], [
            {"type": "text", "text": "Let me compute. "}, {"type": "python", "text": "6*7"},
            {"type": "python_output", "text": "42"}, {"type": "text", "text": "It is 42."}])
        # --no-tools: the block stays text, nothing runs.
        result = json.loads(self.nfn(["chat", "--checkpoint", out, "-p", "what is 6 times 7?", "--temperature", "0",
                                      "--no-tools", "--max-new-tokens", "12", "--json", "--backend", "cpu"])[0])
        self.assertEqual(result["tool_calls"], [])

    def test_resume_is_bitwise_the_uninterrupted_run(self):
        full = os.path.join(self.tmp, "full")
        flags = ["--init-optimizer", "--max-steps", "8", "--checkpoint-every", "4", "--eval-every-steps", "4"]
        whole = json.loads(self.nfn(self.sft(full, "--json", *flags))[0])
        part = os.path.join(self.tmp, "part")
        shutil.copytree(full, part)
        for name in ["model_00000008.bin", "state_00000008_00000.bin", "DONE_00000008", "report.json"]:
            os.remove(os.path.join(part, name))
        with open(os.path.join(part, "DONE_00000004")) as f, open(os.path.join(part, "manifest.json"), "w") as g:
            g.write(f.read())
        resumed = json.loads(self.nfn(self.sft(part, "--json", "--resume", "auto", *flags))[0])
        self.assertEqual(resumed["train_losses"], whole["train_losses"][4:])
        self.assertEqual(resumed["final_validation_loss"], whole["final_validation_loss"])
        for name in ["model_00000008.bin", "state_00000008_00000.bin"]:
            with open(os.path.join(full, name), "rb") as a, open(os.path.join(part, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)
        with open(os.path.join(part, "DONE_00000008")) as f:
            self.assertEqual(json.load(f)["training"]["moment_steps"], 30)

    def test_bad_input_is_one_line(self):
        out = os.path.join(self.tmp, "bad")

        def fails(args, code, message):
            _, err = self.nfn(args, code=code)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertIn(message, err)

        fails(["sft", "--init-from", self.base, "--mixture", "chitchat,smoltalk", "--output-dir", out], 1,
              "nfn sft: error: --mixture: unknown task 'smoltalk' (known: chitchat, gsm8k, arithmetic, arc")
        broken = os.path.join(self.tmp, "broken.jsonl")
        with open(broken, "w") as f:
            f.write(json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]) + "\n")
            f.write(json.dumps([{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}]) + "\n")
        fails(["sft", "--init-from", self.base, "--mixture", f"identity:{broken}", "--output-dir", out] + self.cpu, 1,
              f"nfn sft: error: {broken}:2: messages[1]: field 'role' is 'user', expected 'assistant'")
        fails(["sft", "--init-from", self.base, "--mixture", f"identity:{self.identity}", "--tokenizer", "gpt2",
               "--output-dir", out], 1, "nfn sft: error: tokenizer gpt2 has no chat format")
        fails(["sft", "--init-from", self.base, "--model-family", "llama", "--mixture", f"identity:{self.identity}",
               "--output-dir", out] + self.cpu, 2, "model_00000030.bin: holds a nanochat model, not llama")
        fails(["sft", "--mixture", f"identity:{self.identity}", "--output-dir", out], 1,
              "nfn sft: error: --init-from is required")


if __name__ == "__main__":
    unittest.main()
