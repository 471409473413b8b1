"""Completions of one question on the KV-cached engine: the prompt is prefilled once, and each
of the N samples goes on from that prefix (the cache cut back to it with truncate), with tool
calls run by the calculator and their answers fed back as `nfn chat` does (chat/session.py).

A sample is its tokens (prompt, then what was sampled and fed), a mask (1 on the tokens the
model sampled, its stop token included; 0 on the prompt and on tool answers, which the model
did not choose) and the completion's text, which the reward reads.
"""
import numpy as np

SEED_MASK = (1 << 64) - 1


def splitmix64(state):
    """(next state, a 64-bit draw): the sampler's RNG, whose state a checkpoint keeps."""
    state = (state + 0x9E3779B97F4A7C15) & SEED_MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & SEED_MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & SEED_MASK
    return state, z ^ (z >> 31)


class Sample:
    def __init__(self, tokens, mask, text, stop_reason):
        self.tokens, self.mask, self.text, self.stop_reason = tokens, mask, text, stop_reason

    @property
    def sampled(self):
        return sum(self.mask)


def prefill(engine, prompt):
    """The prompt but its last token into an empty cache: each sample's generate feeds that one."""
    engine.reset()
    if len(prompt) > 1:
        engine.forward(np.asarray(prompt[:-1], dtype=np.int32))
    return len(prompt) - 1


def complete(engine, fmt, tok, prompt, prefix, seed, max_new_tokens, temperature, top_k, tool, max_seq_len):
    """One sample after the prefilled prefix (prefix positions of prompt in the cache)."""
    from nfn.chat.session import run_tool
    engine.truncate(prefix)
    tokens, mask = list(prompt), [0] * len(prompt)
    tool = tool if fmt.has_tools else None
    budget, calls, reason = max_new_tokens, 0, "max_new_tokens"

    def on_token(t):
        return not (tool is not None and t == fmt.python_end)

    while budget > 0 and len(tokens) < max_seq_len:
        pending = tokens[engine.position:]
        result = engine.generate(pending, min(budget, max_seq_len - len(tokens)), temperature=temperature,
                                 top_k=top_k, seed=(seed + calls) & SEED_MASK, stop_token=fmt.stop,
                                 on_token=on_token, append=True)
        calls += 1
        new = result["tokens"]
        tokens += new
        mask += [1] * len(new)
        budget -= len(new)
        reason = result["stop_reason"]
        if reason != "callback":
            break
        reason = "max_new_tokens"
        starts = [i for i in range(len(tokens) - 1, len(prompt) - 1, -1) if tokens[i] == fmt.python_start]
        if not starts:  # a <|python_end|> that closes nothing: no call
            continue
        ok, output, _ = run_tool(tool, tok.decode(tokens[starts[0] + 1:-1]))
        if ok:
            fed = fmt.tool_output(output)
            if len(tokens) + len(fed) >= max_seq_len:
                reason = "context"
                break
            tokens += fed
            mask += [0] * len(fed)
    return Sample(tokens, mask, tok.decode(tokens[len(prompt):]), reason)
