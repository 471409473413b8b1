"""A one-line progress bar on stderr, shown only on a terminal and redrawn at most 5 times a second."""
import sys
import time


class Progress:
    def __init__(self, label, total_bytes, enabled=True):
        self.label = label
        self.total = max(total_bytes, 1)
        self.enabled = enabled and sys.stderr.isatty()
        self.start = self.last = time.time()
        self.done_bytes = 0
        self.tokens = 0

    def update(self, nbytes, ntokens):
        self.done_bytes += nbytes
        self.tokens += ntokens
        now = time.time()
        if self.enabled and now - self.last >= 0.2:
            self.last = now
            self._draw(now)

    def _draw(self, now):
        rate = self.tokens / max(now - self.start, 1e-6)
        frac = min(self.done_bytes / self.total, 1.0)
        bar = "#" * int(30 * frac)
        print(f"\r{self.label} [{bar:<30}] {100 * frac:5.1f}% {self.tokens / 1e6:8.2f}M tokens {rate / 1e6:6.2f}M tok/s",
              end="", file=sys.stderr, flush=True)

    def close(self):
        if self.enabled:
            self._draw(time.time())
            print(file=sys.stderr)
