"""Chit-chat conversations for supervised fine-tuning (chitchat-dataset, MIT, 7,168 chats).

Each chat alternates two people; the one who speaks first is the user, the other the
assistant. A speaker's consecutive messages join into one turn; a chat that ends on the
user is trimmed so the assistant has the last word.
"""
import json

from nfn.errors import UserError
from nfn.tasks.base import Task
from nfn.tasks.sources import package_file


def to_conversation(chat):
    turns = []
    for group in chat.get("messages", []):
        text = "\n".join(m["text"].strip() for m in group if m.get("text", "").strip())
        if not text:
            continue
        sender = group[0].get("sender")
        if turns and turns[-1][0] == sender:
            turns[-1] = (sender, turns[-1][1] + "\n" + text)
        else:
            turns.append((sender, text))
    if len(turns) % 2:
        turns.pop()
    if not turns:
        return None
    roles = ("user", "assistant")
    return {"messages": [{"role": roles[i % 2], "content": t} for i, (_, t) in enumerate(turns)]}


class ChitChat(Task):
    def __init__(self, **slicing):
        super().__init__(**slicing)
        path = package_file("chitchat_dataset", "dataset.json")
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except ValueError as e:
            raise UserError(f"{path}: not JSON ({e})") from None
        self._rows = [c for c in (to_conversation(chat) for chat in data.values()) if c]

    def num_rows(self):
        return len(self._rows)

    def get_row(self, index):
        return self._rows[index]
