"""The offline task loaders: row counts of the real files, rows checked by hand against
the published datasets, the canonical prompts, and scoring."""
import unittest

from nfn.chat.conversation import validate
from nfn.errors import UserError
from nfn.tasks.arc import ARC
from nfn.tasks.chitchat import ChitChat, to_conversation
from nfn.tasks.gsm8k import GSM8K, answer_parts, extract_answer
from nfn.tasks.hellaswag import HellaSwag
from nfn.tasks.humaneval import HumanEval
from nfn.tasks.mmlu import MMLU
from nfn.tasks.multiple_choice import first_letter, render_prompt


class MultipleChoiceTest(unittest.TestCase):
    def test_prompt_format(self):
        self.assertEqual(render_prompt(" Which? ", ["red", "blue"]),
                         "Multiple choice question: Which?\n\nA. red\nB. blue\n\n"
                         "Answer with the letter of the correct choice only.")
        with self.assertRaises(ValueError):
            render_prompt("q", ["only one"])

    def test_first_letter(self):
        letters = list("ABCD")
        for text, want in [("B", "B"), (" C.", "C"), ("(D) because", "D"), ("E", None),
                           ("b", None), ("", None), ("Because A", None), ("A", "A")]:
            self.assertEqual(first_letter(text, letters), want, text)

    def test_arc(self):
        easy, challenge = ARC("ARC-Easy"), ARC("ARC-Challenge")
        self.assertEqual((len(easy), len(challenge)), (570, 299))
        row = easy[0]
        self.assertEqual(row["id"], "MCAS_2000_4_6")
        self.assertEqual(row["messages"][0]["content"],
                         "Multiple choice question: Which technology was developed most recently?\n\n"
                         "A. cellular telephone\nB. television\nC. refrigerator\nD. airplane\n\n"
                         "Answer with the letter of the correct choice only.")
        self.assertEqual((row["answer"], row["messages"][1]["content"]), ("A", "A"))
        self.assertEqual((easy.evaluate(row, "A"), easy.evaluate(row, "B")), (1, 0))
        for task in (easy, challenge):
            for r in task:
                validate(r)
                self.assertIn(r["answer"], r["letters"])
        with self.assertRaises(UserError):
            ARC("ARC-Hard")
        with self.assertRaises(UserError):
            ARC("ARC-Easy", split="train")
        test_easy, test_challenge = ARC("ARC-Easy", split="test"), ARC("ARC-Challenge", split="test")
        self.assertEqual((len(test_easy), len(test_challenge)), (2376, 1172))
        row = test_easy[0]
        self.assertEqual((row["id"], row["answer"]), ("Mercury_417466", "A"))
        self.assertTrue(row["messages"][0]["content"].startswith(
            "Multiple choice question: Which statement best explains why photosynthesis is the foundation of most "
            "food webs?\n\nA. Sunlight is the source of energy for nearly all ecosystems.\n"))
        self.assertEqual(len({r["id"] for r in test_challenge}), 1172)
        self.assertEqual(len(ARC("ARC-Challenge", start=290)), 9)

    def test_mmlu(self):
        self.assertEqual(len(MMLU()), 14042)
        anatomy = MMLU("anatomy")
        self.assertEqual(len(anatomy), 135)
        row = anatomy[0]
        self.assertTrue(row["messages"][0]["content"].startswith(
            "Multiple choice question: A lesion causing compression of the facial nerve"))
        self.assertEqual((row["answer"], row["subject"]), ("A", "anatomy"))
        self.assertEqual(len(MMLU("anatomy", split="dev")), 5)
        with self.assertRaises(UserError):
            MMLU("astrology")
        with self.assertRaises(UserError):
            MMLU(split="train")

    def test_hellaswag(self):
        task = HellaSwag(stop=50)
        self.assertEqual(len(HellaSwag()), 10042)
        row = task[0]
        self.assertEqual(row["messages"][0]["content"].splitlines()[0],
                         "Multiple choice question: Roof shingle removal: A man is sitting on a "
                         "roof. he ... What happens next?")
        self.assertEqual(row["answer"], "D")
        for r in task:
            self.assertNotIn("[header]", r["messages"][0]["content"])


class GSM8KTest(unittest.TestCase):
    def test_extract_answer(self):
        for text, want in [("so #### 42", "42"), ("#### 1,234", "1234"), ("#### -5", "-5"),
                           ("#### 3.5", "3.5"), ("#### 18.0", "18"), ("no answer", None),
                           ("#### 18.00", "18"), ("#### 3.50", "3.5"), ("#### 1,800.50", "1800.5"),
                           ("#### .5", "0.5"), ("#### .0", "0"), ("#### -0.0", "0"), ("#### 007", "7"),
                           ("#### 100", "100"), ("#### -2.250", "-2.25"),
                           ("#### 1\n#### 2", "2"), ("", None), (None, None)]:
            self.assertEqual(extract_answer(text), want, text)

    def test_answer_parts(self):
        self.assertEqual(answer_parts("She has 3+4 = <<3+4=7>>7 eggs.\n#### 7"), [
            {"type": "text", "text": "She has 3+4 = "},
            {"type": "python", "text": "3+4"},
            {"type": "python_output", "text": "7"},
            {"type": "text", "text": "7 eggs.\n#### 7"}])

    def test_rows_and_reward(self):
        task = GSM8K()
        self.assertEqual(len(task), 1319)
        row = task[0]
        self.assertTrue(row["messages"][0]["content"].startswith("Janet’s ducks lay 16 eggs per day."))
        self.assertEqual(row["answer"], "18")
        validate(row)
        self.assertEqual(task.reward(row, "... so she makes #### 18"), 1.0)
        self.assertEqual(task.reward(row, "#### 19"), 0.0)
        self.assertEqual(task.reward(row, "18"), 0.0)  # the format is part of the task
        # Every reference solution scores 1 against itself.
        for r in GSM8K(stop=200):
            text = "".join(p["text"] for p in r["messages"][1]["content"] if p["type"] == "text")
            self.assertEqual(task.evaluate(r, text), 1)


class HumanEvalTest(unittest.TestCase):
    def test_canonical_solutions_pass_and_wrong_ones_fail(self):
        task = HumanEval(stop=8)
        self.assertEqual(len(HumanEval()), 164)
        for row in task:
            full = row["messages"][1]["content"]
            body = full[len(row["prompt"]):]
            self.assertEqual(task.evaluate(row, full), 1, row["task_id"])  # whole function
            self.assertEqual(task.evaluate(row, body), 1, row["task_id"])  # body only
            self.assertEqual(task.evaluate(row, f"```python\n{full}\n```"), 1)  # fenced
            self.assertEqual(task.evaluate(row, "    return None\n"), 0, row["task_id"])

    def test_hostile_completion_is_contained(self):
        task = HumanEval(stop=1, timeout=3)
        row = task[0]
        r = task.run(row, "    while True: pass\n")
        self.assertTrue(r.timed_out)


class ChitChatTest(unittest.TestCase):
    def test_conversion(self):
        chat = {"messages": [[{"text": "hi", "sender": "a"}, {"text": "there", "sender": "a"}],
                             [{"text": "hello", "sender": "b"}], [{"text": "", "sender": "a"}],
                             [{"text": "more", "sender": "b"}], [{"text": "bye", "sender": "a"}]]}
        self.assertEqual(to_conversation(chat), {"messages": [
            {"role": "user", "content": "hi\nthere"},
            {"role": "assistant", "content": "hello\nmore"}]})
        self.assertIsNone(to_conversation({"messages": [[{"text": "alone", "sender": "a"}]]}))

    def test_dataset(self):
        task = ChitChat()
        self.assertEqual(len(task), 4017)  # of 7,168 chats, 3,151 have a single speaker
        for i in range(0, len(task), 97):
            validate(task[i])
        self.assertEqual(task[0]["messages"][0]["content"], "Hello\nHow are you doing today?")


if __name__ == "__main__":
    unittest.main()
