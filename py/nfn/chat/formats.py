"""How a chat model's turns become tokens, by the special tokens its tokenizer has.

- nanochat's (tokenizers from `nfn tokenizer train`; render.py's layout): <|bos|>, then
  <|user_start|> text <|user_end|> <|assistant_start|> reply <|assistant_end|> ..., with
  tool calls <|python_start|> code <|python_end|> answered by <|output_start|> ... <|output_end|>.
- ChatML (SmolLM2 and other imported models): <|im_start|>role\\ntext<|im_end|>\\n per message,
  the assistant's turn opened by <|im_start|>assistant\\n and ended by <|im_end|>. No tools.

`turn(text, first)` gives the tokens from the end of the previous assistant turn (its stop
token) up to where the model writes the next reply; `render(conversation)` a whole conversation
for training, (ids, mask) with mask 1 exactly on what the model must learn to write (the
assistant's text, its tool calls and its stop token). Each rendering starts with the format's
`bos` (nanochat's <|bos|>; ChatML's <|im_start|>), so best-fit packing starts rows there. Text
a user types is encoded as text, never as a special token.
"""
from nfn.errors import UserError


NANOCHAT_TOKENS = ("<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
                   "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>")


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

    def render(self, conversation):
        from nfn.chat.render import render_conversation
        return render_conversation(self.tok, conversation, max_tokens=1 << 62)


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

    @property
    def bos(self):
        return self.im_start

    def render(self, conversation):
        """As the template renders it (the template's system turn where the conversation has
        none); an assistant's tool calls, which ChatML has no tokens for, as <<code=output>> text."""
        from nfn.chat.conversation import parts, validate
        messages = validate(conversation)
        ids, mask = [], []

        def add(tokens, m):
            ids.extend(tokens)
            mask.extend([m] * len(tokens))

        if messages[0]["role"] != "system" and self.default_system:
            add(self.message("system", self.default_system), 0)
        for msg in messages:
            if msg["role"] != "assistant":
                add(self.message(msg["role"], msg["content"]), 0)
                continue
            add([self.im_start] + self.tok.encode("assistant\n"), 0)
            text, pending = "", None
            for part in parts(msg):
                if part["type"] == "text":
                    text += part["text"]
                elif part["type"] == "python":
                    pending = part["text"]
                    text += f"<<{pending}="
                else:
                    text += part["text"] + ">>"
                    pending = None
            if pending is not None:
                text += ">>"
            add(self.tok.encode(text) + [self.stop], 1)
            add(self.tok.encode("\n"), 0)
        return ids, mask


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
        for token in NANOCHAT_TOKENS:
            if not has(token):
                raise UserError(f"tokenizer {name} has no {token} token: nanochat's chat format needs all of "
                                f"{' '.join(NANOCHAT_TOKENS)}")
        return NanochatFormat(tok)
    if has("<|im_start|>") and has("<|im_end|>"):
        return ChatMLFormat(tok, default_system(getattr(tok, "chat_template", None)))
    raise UserError(f"tokenizer {name} has no chat format: it has neither nanochat's <|assistant_start|> "
                    "nor ChatML's <|im_start|>/<|im_end|> special tokens (chat needs a model trained or "
                    "fine-tuned to chat)")
