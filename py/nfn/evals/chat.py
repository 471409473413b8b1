"""ChatCORE: a chat model's suite, as nanochat's chat_eval.py scores it.

- Categorical (ARC-Easy, ARC-Challenge, MMLU): the question's user turn (tasks/multiple_choice.py's
  lettered prompt) in the model's chat format, up to where the assistant's reply begins; the
  answer is the choice letter with the highest logit there, among the question's letters only.
- Generative (GSM8K, HumanEval): a greedy reply from a ChatSession (the calculator answers a
  nanochat-format model's tool calls), scored by the task: GSM8K's number after '#### ',
  HumanEval's tests run on the reply's code in the sandbox.

Accuracy per task, centered on chance (0.25 for the four-way choices, 0 for the generative
tasks); ChatCORE is the mean of the centered accuracies of the five.
"""
from dataclasses import dataclass
from typing import Callable

from nfn.errors import UserError
from nfn.evals import scoring


@dataclass(frozen=True)
class ChatTask:
    name: str
    label: str        # nanochat's name
    kind: str         # "categorical" or "generative"
    baseline: float
    load: Callable    # () -> an nfn.tasks Task
    source: str = ""


def _arc(subset):
    def load():
        from nfn.tasks.arc import ARC
        return ARC(subset, split="test")
    return load


def _mmlu():
    from nfn.tasks.mmlu import MMLU
    return MMLU(split="test")


def _gsm8k():
    from nfn.tasks.gsm8k import GSM8K
    return GSM8K()


def _humaneval():
    from nfn.tasks.humaneval import HumanEval
    return HumanEval()


CHAT_TASKS = [
    ChatTask("chat-arc-easy", "ARC-Easy", "categorical", 0.25, _arc("ARC-Easy"), "ARC-Easy test (2,376)"),
    ChatTask("chat-arc-challenge", "ARC-Challenge", "categorical", 0.25, _arc("ARC-Challenge"),
             "ARC-Challenge test (1,172)"),
    ChatTask("mmlu", "MMLU", "categorical", 0.25, _mmlu, "MMLU test, 57 subjects (14,042)"),
    ChatTask("gsm8k", "GSM8K", "generative", 0.0, _gsm8k, "GSM8K test (1,319)"),
    ChatTask("humaneval", "HumanEval", "generative", 0.0, _humaneval, "HumanEval (164)"),
]


class LetterIds:
    """Each choice letter's token id, as the assistant's reply would begin with it."""

    def __init__(self, tok):
        self.tok, self.ids = tok, {}

    def __call__(self, letters):
        out = []
        for letter in letters:
            if letter not in self.ids:
                ids = self.tok.encode(letter)
                if len(ids) != 1:
                    raise UserError(f"the choice letter {letter!r} is {len(ids)} tokens in this tokenizer; "
                                    "categorical scoring needs one token a letter")
                self.ids[letter] = ids[0]
            out.append(self.ids[letter])
        return out


def prompt_tokens(fmt, row):
    """The row's user turn, rendered for the assistant's reply (nanochat: render_for_completion)."""
    return fmt.turn(row["messages"][0]["content"], True)


def categorical_item(cache, fmt, letter_ids, row):
    """(correct, detail) of one lettered question."""
    pick = scoring.best_choice(cache, prompt_tokens(fmt, row), letter_ids(row["letters"]))
    pred = row["letters"][pick]
    return pred == row["answer"], {"gold": row["answer"], "pred": pred}


def reply_text(message):
    """An assistant message's parts as one text (tool calls and their answers included, as
    nanochat decodes the whole reply)."""
    return "".join(part["text"] for part in message["content"])


def generative_item(session, task, row):
    """(correct, detail) of one GSM8K problem or HumanEval function, answered greedily; a prompt
    that leaves no room for a reply in the context is wrong (detail "too_long")."""
    session.clear()
    if not session.fits(row["messages"][0]["content"]):
        return False, {"too_long": True}
    reply = session.ask(row["messages"][0]["content"])
    text = reply_text(reply["message"])
    ok = bool(task.evaluate(row, text))
    return ok, {"reply": text, "stop_reason": reply["stop_reason"], "tool_calls": len(reply["tool_calls"])}
