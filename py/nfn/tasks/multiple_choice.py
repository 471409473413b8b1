"""Multiple-choice tasks: one canonical prompt with lettered choices, a one-letter answer.

    Multiple choice question: Which gas do plants absorb?

    A. oxygen
    B. carbon dioxide

    Answer with the letter of the correct choice only.

The assistant's reply is the letter alone ("B"). Categorical evaluation compares the
model's probabilities for the letters; generative evaluation reads the first letter.
"""
import re

from nfn.tasks.base import Task

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


def render_prompt(question, choices):
    if not 2 <= len(choices) <= len(LETTERS):
        raise ValueError(f"a multiple-choice question needs 2..{len(LETTERS)} choices, got {len(choices)}")
    lines = [f"Multiple choice question: {question.strip()}", ""]
    lines += [f"{letter}. {choice.strip()}" for letter, choice in zip(LETTERS, choices)]
    lines += ["", "Answer with the letter of the correct choice only."]
    return "\n".join(lines)


def make_row(question, choices, answer_index, **extra):
    letters = list(LETTERS[:len(choices)])
    if not 0 <= answer_index < len(choices):
        raise ValueError(f"answer index {answer_index} out of range for {len(choices)} choices")
    return {
        "messages": [
            {"role": "user", "content": render_prompt(question, choices)},
            {"role": "assistant", "content": letters[answer_index]},
        ],
        "letters": letters,
        "answer": letters[answer_index],
        **extra,
    }


def first_letter(completion, letters):
    """The letter a completion chose: its first standalone capital letter among letters."""
    match = re.match(r"\s*\(?([A-Z])\b", completion or "")
    return match.group(1) if match and match.group(1) in letters else None


class MultipleChoiceTask(Task):
    def __init__(self, rows, **slicing):
        super().__init__(**slicing)
        self._rows = rows

    def num_rows(self):
        return len(self._rows)

    def get_row(self, index):
        return self._rows[index]

    def evaluate(self, row, completion):
        return int(first_letter(completion, row["letters"]) == row["answer"])
