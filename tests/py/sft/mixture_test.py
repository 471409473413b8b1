"""The --mixture spec: its syntax, nanochat's order and shuffle (chat_sft.py's task list, then
TaskMixture's random.Random(42) over the (task, row) map, written out here), the validation
hold-out, identity files, and one-line errors naming the file and line."""
import json
import os
import random
import shutil
import tempfile
import unittest

from nfn.errors import UserError
from nfn.sft import mixture


def nanochat_task_mixture(lengths):
    """nanochat's TaskMixture index map: (task, row) of every task in list order, shuffled."""
    index_map = [(t, i) for t, n in enumerate(lengths) for i in range(n)]
    random.Random(42).shuffle(index_map)
    return index_map


class MixtureTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def identity(self, name, count, answer="I am Nimbus."):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            for i in range(count):
                messages = [{"role": "user", "content": f"question {i} of {name}"},
                            {"role": "assistant", "content": answer}]
                f.write(json.dumps(messages if i % 2 else {"messages": messages}) + "\n")
                if i == 2:
                    f.write("   \n")  # blank lines are skipped
        return path

    def test_syntax(self):
        entries = mixture.parse(" chitchat , gsm8k*2,arc*0.5,identity:a b.jsonl*3,mmlu")
        self.assertEqual([(e["name"], e["weight"]) for e in entries],
                         [("chitchat", 1), ("gsm8k", 2), ("arc-easy", 0.5), ("arc-challenge", 0.5),
                          ("identity", 3), ("mmlu", 1)])
        self.assertEqual(entries[4]["path"], os.path.abspath("a b.jsonl"))
        self.assertEqual(entries[4]["label"], "identity:a b.jsonl")
        # nanochat's order: conversations, identity, multiple choice, math.
        self.assertEqual([e["name"] for e in mixture.ordered(entries)],
                         ["chitchat", "identity", "arc-easy", "arc-challenge", "mmlu", "gsm8k"])

    def test_errors_are_one_line(self):
        for spec, message in [
                ("chitchat,smoltalk", "--mixture: unknown task 'smoltalk' (known: chitchat, gsm8k, arithmetic, "
                                      "arc (arc-easy, arc-challenge), mmlu, identity:FILE)"),
                ("chitchat,,gsm8k", "an empty entry"), ("", "--mixture: empty"),
                ("gsm8k*two", "the weight 'two' after '*' is not a number"),
                ("gsm8k*0", "the weight must be a positive number of epochs"),
                ("gsm8k*-1", "positive number"), ("gsm8k*inf", "positive number"),
                ("identity:", "identity: names no file")]:
            with self.subTest(spec=spec), self.assertRaises(UserError) as e:
                mixture.parse(spec)
            self.assertIn(message, str(e.exception))
            self.assertNotIn("\n", str(e.exception))

    def test_order_epochs_shuffle_and_validation(self):
        a, b = self.identity("a.jsonl", 10), self.identity("b.jsonl", 4)
        m = mixture.Mixture(f"identity:{b}*0.5,identity:{a}*2", val_fraction=0.2)
        # a: 10 rows, its last 2 held out; b: 4 rows, its last 1 (at least one of a task of two or more).
        self.assertEqual([(p["task"], p["rows"], p["val_rows"], p["train_conversations"]) for p in m.parts],
                         [(f"identity:{b}", 4, 1, 2), (f"identity:{a}", 10, 2, 16)])
        # The task list: b's first half (round(0.5 * 3) = 2 rows), then a twice (8 rows each).
        want = nanochat_task_mixture([2, 8, 8])
        copy_entry, copy_rows = [0, 1, 1], [range(2), range(8), range(8)]
        self.assertEqual(m.train, [(copy_entry[t], copy_rows[t][i]) for t, i in want])
        self.assertEqual(sorted(m.val), [(0, 3), (1, 8), (1, 9)])
        self.assertEqual(m.conversation((1, 8))["messages"][0]["content"], "question 8 of a.jsonl")
        # Conversations are copies: changing one changes nothing.
        m.conversation((1, 8))["messages"].clear()
        self.assertEqual(len(m.conversation((1, 8))["messages"]), 2)
        # No validation: every row trains.
        none = mixture.Mixture(f"identity:{a}", val_fraction=0)
        self.assertEqual((len(none.train), none.val), (10, []))

    def test_the_offline_tasks_load(self):
        m = mixture.Mixture("chitchat*0.01,arc-challenge*0.1", val_fraction=0.05)
        self.assertEqual([p["task"] for p in m.parts], ["chitchat", "arc-challenge"])
        self.assertEqual(m.parts[0]["rows"], 4017)
        conv = m.conversation(m.train[0])
        self.assertEqual(conv["messages"][0]["role"], "user")
        # arithmetic: nfn rl's training questions only, answered as its reward reads them.
        from nfn.rl import tasks
        m = mixture.Mixture("arithmetic", val_fraction=0)
        held = {tasks.load("arithmetic", "held_out")[i]["question"] for i in range(45)}
        seen = [m.conversation(ref)["messages"] for ref in m.train]
        self.assertEqual(len(seen), len(tasks.load("arithmetic", "train")))
        for user, assistant in seen:
            self.assertNotIn(user["content"], held)
            a, op, b = user["content"].partition("+") if "+" in user["content"] else user["content"].partition("-")
            self.assertEqual(assistant["content"], f"#### {int(a) + int(b) if op == '+' else int(a) - int(b)}")

    def test_malformed_identity_lines_name_the_file_and_line(self):
        path = os.path.join(self.tmp, "bad.jsonl")
        good = json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}])
        cases = [
            ("{not json", f"{path}:2: not valid JSON (Expecting property name enclosed in double quotes, column 2)"),
            ("42", f"{path}:2: expected a list of {{\"role\", \"content\"}} messages or an object with a "
                   "\"messages\" list, got int"),
            (json.dumps([{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}]),
             f"{path}:2: messages[1]: field 'role' is 'bot', expected 'assistant'"),
            (json.dumps({"messages": []}), f"{path}:2: 'messages' is empty"),
            (json.dumps({"messages": [{"role": "user", "content": 3}]}),
             f"{path}:2: messages[0]: field 'content' must be a string"),
        ]
        for line, message in cases:
            with self.subTest(line=line):
                with open(path, "w") as f:
                    f.write(good + "\n" + line + "\n")
                with self.assertRaises(UserError) as e:
                    mixture.Mixture(f"identity:{path}", 0)
                self.assertEqual(str(e.exception), message)
        with open(path, "wb") as f:
            f.write(good.encode() + b"\n\xff\n")
        with self.assertRaisesRegex(UserError, f"^{path}:2: not UTF-8"):
            mixture.Mixture(f"identity:{path}", 0)
        with open(path, "w") as f:
            f.write("\n\n")
        with self.assertRaisesRegex(UserError, "no conversations"):
            mixture.Mixture(f"identity:{path}", 0)
        with self.assertRaisesRegex(UserError, "missing.jsonl: cannot read"):
            mixture.Mixture(f"identity:{self.tmp}/missing.jsonl", 0)


if __name__ == "__main__":
    unittest.main()
