"""A conversation with a chat model on the KV-cached engine, kept as tokens.

Each turn appends the user's tokens (chat formats, formats.py) and prefills only what the
cache does not hold yet, then samples the reply until the format's stop token. When the model
closes a tool call (<|python_end|>), the tool runs on the call's text and its answer is fed
back as <|output_start|> ... <|output_end|> before sampling goes on, as nanochat's engine
does; a failed call feeds nothing back. The reply comes back as a conversation message whose
content is parts (conversation.py: text, python, python_output).
"""
from nfn.errors import UserError

TOOL_OUTPUT_CHARS = 2000  # a tool's answer is cut to this before it is fed back


def run_tool(tool, code):
    """(ok, output, error) of the calculator or the sandboxed Python runner on code."""
    if tool == "calculator":
        from nfn.sandbox.calculator import calculate
        result = calculate(code.strip())
    else:
        from nfn.sandbox.python_exec import run_python
        result = run_python(code)
    output = result.output.strip()[:TOOL_OUTPUT_CHARS] if result.ok else ""
    return result.ok, output, result.error


class _Streamer:
    """Text of growing token lists, handed on as whole characters."""

    def __init__(self, tok, on_text):
        self.tok, self.on_text, self.ids, self.shown = tok, on_text, [], 0

    def push(self, token):
        self.ids.append(token)
        if self.on_text is None:
            return
        text = self.tok.decode(self.ids)
        end = len(text.rstrip("\ufffd"))
        if end > self.shown:
            self.on_text(text[self.shown:end])
            self.shown = end

    def finish(self):
        text = self.tok.decode(self.ids)
        if self.on_text is not None and len(text) > self.shown:
            self.on_text(text[self.shown:])
        return text


class ChatSession:
    def __init__(self, engine, tok, fmt, max_seq_len, temperature=0.6, top_k=50, max_new_tokens=512, seed=0,
                 tool="calculator", system=None):
        self.engine, self.tok, self.fmt, self.max_seq_len = engine, tok, fmt, max_seq_len
        self.temperature, self.top_k, self.max_new_tokens, self.seed = temperature, top_k, max_new_tokens, seed
        self.tool = tool if fmt.has_tools else None
        self.system = system
        self.clear()

    def clear(self):
        """Forget the conversation (and the cache)."""
        self.engine.reset()
        self.tokens, self.messages, self.tool_calls, self.calls = [], [], [], 0

    def fits(self, text):
        """Whether `text` as the next user turn leaves room for at least one token of reply."""
        first = not self.tokens
        return len(self.tokens) + len(self.fmt.turn(text, first, self.system if first else None)) < self.max_seq_len

    def ask(self, text, on_text=None):
        """The reply to `text`: {"message", "stop_reason", "tool_calls"}; on_text(str) is called
        with the reply's text as it is sampled (tool calls as <<call=answer>>)."""
        first = not self.tokens
        new = self.fmt.turn(text, first, self.system if first else None)
        if len(self.tokens) + len(new) >= self.max_seq_len:
            raise UserError(f"the message does not fit: {len(self.tokens)} tokens of conversation and {len(new)} new "
                            f"leave no room in the context of {self.max_seq_len} (start a new chat)")
        self.tokens += new
        self.messages.append({"role": "user", "content": text})
        parts, calls = [], []
        part = _Streamer(self.tok, on_text)
        in_call = False

        def close_text():
            if part.ids:
                parts.append({"type": "text", "text": part.finish()})

        def on_token(t):
            nonlocal part, in_call
            if t == self.fmt.stop:
                return True
            if t == self.fmt.python_start and not in_call:
                close_text()
                part, in_call = _Streamer(self.tok, None), True
            elif t == self.fmt.python_end and in_call:
                parts.append({"type": "python", "text": part.finish()})
                part, in_call = _Streamer(self.tok, on_text), False
                return self.tool is None  # stop here to run the tool
            else:
                part.push(t)
            return True

        budget, reason = self.max_new_tokens, "max_new_tokens"
        while budget > 0:
            pending = self.tokens[self.engine.position:]
            try:
                result = self.engine.generate(pending, budget, temperature=self.temperature, top_k=self.top_k,
                                              seed=(self.seed + self.calls) % 2**64, stop_token=self.fmt.stop,
                                              on_token=on_token, append=True)
            except (RuntimeError, ValueError) as e:
                raise UserError(str(e)) from None
            self.calls += 1
            self.tokens += result["tokens"]
            budget -= len(result["tokens"])
            reason = result["stop_reason"]
            if reason != "callback":
                break
            code = parts[-1]["text"]
            ok, output, error = run_tool(self.tool, code)
            calls.append({"tool": self.tool, "input": code, "ok": ok, "output": output, "error": error})
            if on_text is not None:
                on_text(f"<<{code}={output if ok else 'error: ' + str(error)}>>")
            if ok:
                fed = self.fmt.tool_output(output)
                if len(self.tokens) + len(fed) >= self.max_seq_len:
                    reason = "context"
                    break
                self.tokens += fed
                parts.append({"type": "python_output", "text": output})
            reason = "max_new_tokens"
        if in_call:  # cut off inside a call: keep what it wrote
            parts.append({"type": "python", "text": part.finish()})
        else:
            close_text()
        if reason == "callback":
            reason = "max_new_tokens"
        message = {"role": "assistant", "content": parts}
        self.messages.append(message)
        self.tool_calls += calls
        return {"message": message, "stop_reason": reason, "tool_calls": calls}
