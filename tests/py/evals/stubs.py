"""Stand-ins for the scorer tests only: an engine whose next-token log-probabilities are a fixed
table of the current token (a bigram model), and a tokenizer of one token a character."""
import math

import numpy as np

VOCAB = 6
# LOGP[prev][next]: each row a distribution of powers of two, so every loss is a multiple of ln 2.
PROBS = [
    [1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 32],
    [1 / 4, 1 / 2, 1 / 8, 1 / 16, 1 / 32, 1 / 32],
    [1 / 8, 1 / 8, 1 / 4, 1 / 4, 1 / 8, 1 / 8],
    [1 / 32, 1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2],
    [1 / 2, 1 / 8, 1 / 8, 1 / 8, 1 / 16, 1 / 16],
    [1 / 4, 1 / 4, 1 / 8, 1 / 8, 1 / 8, 1 / 8],
]
LOGP = np.log(np.array(PROBS))
LN2 = math.log(2)


class BigramEngine:
    """forward(tokens, all_logits), reset(), position, max_seq_len, and truncate(position) when
    made with truncate=True; counts the tokens it runs."""

    def __init__(self, max_seq_len=64, truncate=True):
        self.max_seq_len, self.position, self.forwarded, self.calls = max_seq_len, 0, 0, []
        if truncate:
            self.truncate = self._truncate

    def reset(self):
        self.position = 0

    def _truncate(self, position):
        assert 0 <= position <= self.position
        self.position = position

    def forward(self, tokens, all_logits=False):
        tokens = [int(t) for t in tokens]
        assert tokens and self.position + len(tokens) <= self.max_seq_len
        self.position += len(tokens)
        self.forwarded += len(tokens)
        self.calls.append((tuple(tokens), all_logits))
        rows = LOGP[tokens] + 3.0  # logits: log-probabilities up to a constant
        return rows if all_logits else rows[-1:]


class CharTokenizer:
    """One token a character: 'a'..'f' are 0..5, anything else is refused."""

    def encode(self, text):
        return [ord(c) - ord("a") for c in text]

    def decode(self, ids):
        return "".join(chr(ord("a") + i) for i in ids)

    def identity(self):
        return {"kind": "stub"}

    eot_id = 5
