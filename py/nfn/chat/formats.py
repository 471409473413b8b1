"""How a chat model's turns become tokens, by the special tokens its tokenizer has.

- nanochat's (tokenizers from `nfn tokenizer train`; render.py's layout): <|bos|>, then
  <|user_start|> text <|user_end|> <|assistant_start|> reply <|assistant_end|> ..., with
  tool calls <|python_start|> code <|python_end|> answered by <|output_start|> ... <|output_end|>.
- ChatML (SmolLM2 and other imported models): <|im_start|>role\\ntext<|im_end|>\\n per message,
  the assistant's turn opened by <|im_start|>assistant\\n and ended by <|im_end|>. No tools.

`turn(text, first)` gives the tokens from the end of the previous assistant turn (its stop
token) up to where the model writes the next reply. Text a user types is encoded as text,
never as a special token.
"""
from nfn.errors import UserError


class NanochatFormat:
    name = "nanochat"
    has_tools = True

    def __init__(self, tok):
        self.tok = tok
        sp = tok.special_id
        self.bos, self.user_start, self.user_end = sp("<|bos|>"), sp("<|user_start|>"), sp("<|user_end|>")
        self.assistant_start, self.stop = sp("<|assistant_start|>"), sp("<|assistant_end|>")
        self.python_start, self.python_end = sp("<|python_start|>"), sp("<|python_end|>")
        self.output_start, self.output_end = sp("<|output_start|>"), sp("<|output_end|>")

    def turn(self, text, first, system=None):
        if system:  # folded into the first user turn, as render_conversation does
            text = system + "\n\n" + text
        return ([self.bos] if first else []) + [self.user_start] + self.tok.encode(text) + \
            [self.user_end, self.assistant_start]

    def tool_output(self, text):
        return [self.output_start] + self.tok.encode(text) + [self.output_end]


class ChatMLFormat:
    name = "chatml"
    has_tools = False
    python_start = python_end = None

    def __init__(self, tok, default_system=None):
        self.tok = tok
        self.im_start, self.stop = tok.special_id("<|im_start|>"), tok.special_id("<|im_end|>")
        self.default_system = default_system

    def message(self, role, text):
        return [self.im_start] + self.tok.encode(f"{role}\n{text}") + [self.stop] + self.tok.encode("\n")

    def turn(self, text, first, system=None):
        ids = [] if first else self.tok.encode("\n")  # after the previous reply's <|im_end|>
        system = system if system is not None else (self.default_system if first else None)
        if first and system:
            ids += self.message("system", system)
        return ids + self.message("user", text) + [self.im_start] + self.tok.encode("assistant\n")


def default_system(template):
    """The system message a ChatML template writes when a conversation has none (SmolLM2's
    names the model), read from the template's literal text; None when it writes none."""
    import re
    found = re.search(r"<\|im_start\|>system(?:\n|\\n)(.*?)<\|im_end\|>", template or "", re.S)
    return found.group(1).replace("\\n", "\n") if found else None


def chat_format(tok, name):
    """The format of tokenizer `tok` (called `name`): nanochat's where it has <|assistant_start|>,
    ChatML where it has <|im_start|>; a UserError otherwise."""
    def has(token):
        try:
            tok.special_id(token)
            return True
        except (KeyError, AttributeError):
            return False
    if has("<|assistant_start|>"):
        return NanochatFormat(tok)
    if has("<|im_start|>") and has("<|im_end|>"):
        return ChatMLFormat(tok, default_system(getattr(tok, "chat_template", None)))
    raise UserError(f"tokenizer {name} has no chat format: it has neither nanochat's <|assistant_start|> "
                    "nor ChatML's <|im_start|>/<|im_end|> special tokens (chat needs a model trained or "
                    "fine-tuned to chat)")
