"""HumanEval's generative scorer with a stand-in session (scorer tests only): a reply holding the
canonical solution in a fenced block passes the task's tests in the sandbox; a reply whose code
is wrong, or has none, does not."""
import unittest

from nfn.evals import chat
from nfn.tasks.humaneval import HumanEval


class Session:
    def __init__(self, text):
        self.text = text

    def clear(self):
        pass

    def fits(self, prompt):
        return True

    def ask(self, prompt):
        return {"message": {"role": "assistant", "content": [{"type": "text", "text": self.text}]},
                "stop_reason": "stop_token", "tool_calls": []}


class HumanEvalScoringTest(unittest.TestCase):
    def test_replies(self):
        task = HumanEval(stop=2)
        for row in task:
            solution = row["prompt"] + row["messages"][1]["content"][len(row["prompt"]):]
            right = f"Here it is:\n```python\n{solution}\n```\nIt loops once."
            self.assertTrue(chat.generative_item(Session(right), task, row)[0], row["task_id"])
            wrong = f"```python\ndef {row['entry_point']}(*args):\n    return None\n```"
            self.assertFalse(chat.generative_item(Session(wrong), task, row)[0], row["task_id"])
            self.assertFalse(chat.generative_item(Session("I do not know."), task, row)[0], row["task_id"])


if __name__ == "__main__":
    unittest.main()
