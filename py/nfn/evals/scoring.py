"""Scoring continuations on the KV-cached engine.

The engine holds one sequence in its cache. PrefixCache keeps that sequence's tokens, so a
request whose tokens start the same way (the choices of one question after their shared
context, questions after a shared system prompt) runs only what differs: with the engine's
truncate(position) the cache is cut back to the shared prefix; without it, a request that
does not extend the cached sequence starts over from position 0 (the scores are the same,
only slower).

Three scorers, as nanochat's core_eval.py and chat_eval.py define them:
- mean_losses: the mean cross-entropy of each sequence's continuation tokens (multiple choice
  and schema tasks: the lowest wins);
- greedy_match: whether the argmax at every continuation position is the next token
  (language-modelling tasks);
- best_choice: the highest of a few candidate tokens' logits after a prompt (letter choices).
"""
import numpy as np


def common_prefix(a, b):
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def log_softmax_at(rows, targets):
    """Cross-entropy (nats) of each row of logits (n, V) against targets (n ids), in float64."""
    rows = np.asarray(rows, dtype=np.float64)
    peak = rows.max(axis=1, keepdims=True)
    lse = peak[:, 0] + np.log(np.exp(rows - peak).sum(axis=1))
    return lse - rows[np.arange(len(targets)), np.asarray(targets)]


class PrefixCache:
    """An engine (forward(tokens, all_logits), reset(), max_seq_len; truncate(position) where it
    has one) and the tokens its cache holds."""

    def __init__(self, engine):
        self.engine = engine
        self.can_truncate = callable(getattr(engine, "truncate", None))
        self.tokens = []
        self.forwarded = 0  # tokens run through the model, for the benchmark and tests
        engine.reset()

    def clear(self):
        self.engine.reset()
        self.tokens = []

    def _keep(self, tokens, limit):
        """Cut the cache back to its longest prefix shared with tokens[:limit]; its length."""
        shared = common_prefix(self.tokens, tokens[:limit])
        if shared < len(self.tokens):
            if self.can_truncate and shared > 0:
                self.engine.truncate(shared)
            else:
                self.engine.reset()
                shared = 0
            self.tokens = self.tokens[:shared]
        return shared

    def _forward(self, block, all_logits):
        out = self.engine.forward(np.asarray(block, dtype=np.int32), all_logits=all_logits)
        self.tokens += list(block)
        self.forwarded += len(block)
        return out

    def logits(self, tokens, rows):
        """Logits (rows, V) of the last `rows` positions of tokens (each predicts the token
        after it), with the cache holding tokens afterwards."""
        if not 1 <= rows <= len(tokens):
            raise ValueError(f"rows must be in [1, {len(tokens)}], got {rows}")
        if len(tokens) > self.engine.max_seq_len:
            raise ValueError(f"{len(tokens)} tokens do not fit the context of {self.engine.max_seq_len}")
        split = len(tokens) - rows
        keep = self._keep(tokens, split)
        if rows == 1:
            return self._forward(tokens[keep:], False)
        if keep < split:  # the context whose logits nobody reads: the last row only
            self._forward(tokens[keep:split], False)
        return self._forward(tokens[split:], True)


def crop(tokens, start, end, max_len):
    """A sequence longer than the context loses tokens from its left, as nanochat crops:
    (tokens, start, end) shifted. A continuation that does not fit after one token of context
    keeps its last max_len - 1 tokens (a model with a short context still gets a score)."""
    over = len(tokens) - max_len
    if over <= 0:
        return tokens, start, end
    return tokens[over:], max(start - over, 1), end - over


def continuation_rows(cache, tokens, start, end):
    """Logits predicting tokens[start:end] (start >= 1)."""
    tokens, start, end = crop(tokens, start, end, cache.engine.max_seq_len)
    return cache.logits(tokens[:end - 1], end - start), tokens[start:end]


def mean_losses(cache, sequences, starts, ends):
    """Mean cross-entropy of tokens[start:end] of each sequence."""
    out = []
    for tokens, start, end in zip(sequences, starts, ends):
        rows, targets = continuation_rows(cache, tokens, start, end)
        out.append(float(log_softmax_at(rows, targets).mean()))
    return out


def greedy_match(cache, tokens, start, end):
    """True when the argmax at each position predicting tokens[start:end] is that token."""
    rows, targets = continuation_rows(cache, tokens, start, end)
    return bool(np.array_equal(np.argmax(rows, axis=1), np.asarray(targets)))


def best_choice(cache, prompt, candidates):
    """Index of the candidate token with the highest logit after prompt (first on ties)."""
    if len(prompt) > cache.engine.max_seq_len:
        prompt = prompt[len(prompt) - cache.engine.max_seq_len:]
    row = cache.logits(prompt, 1)[0]
    return int(np.argmax(row[np.asarray(candidates)]))
