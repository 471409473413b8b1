"""nanochat's BOS-aligned best-fit packing (nanochat/dataloader.py, "bos_bestfit"), written in
plain Python from its description, over documents cut from llm.c shards as
cc/data/best_fit.h documents them: the reference the native sampler and the trainer are
checked against."""
import numpy as np
from native_shards_test import reference_order


def document_stream(data, seed, bos):
    """Yields (span, position after it): each document (shard, offset, length) from a BOS up to
    the next BOS or its shard's end, shard by shard in each epoch's order; the tokens before a
    shard's first BOS belong to no document."""
    epoch = 0
    while True:
        for k, s in enumerate(reference_order(len(data), seed, epoch)):
            starts = [i for i, t in enumerate(data[s]) if t == bos]
            for j, start in enumerate(starts):
                end = starts[j + 1] if j + 1 < len(starts) else len(data[s])
                yield (s, start, end - start), (epoch, k, end)
        epoch += 1


class ReferenceBestFit:
    """nanochat's bos_bestfit loop: refill the buffer before every choice, place the largest
    document that fits whole, else crop the shortest to fill the row."""

    def __init__(self, data, B, T, seed, bos, buffer):
        self.data, self.B, self.T, self.size = data, B, T, buffer
        self.stream = document_stream(data, seed, bos)
        self.buffer, self.position = [], (0, 0, 0)
        self.placed = self.cropped = 0

    def row(self):
        row = []
        while len(row) < self.T + 1:
            while len(self.buffer) < self.size:
                span, self.position = next(self.stream)
                self.buffer.append(span)
            room = self.T + 1 - len(row)
            fitting = [i for i, d in enumerate(self.buffer) if d[2] <= room]
            if fitting:
                pick = max(fitting, key=lambda i: self.buffer[i][2])  # the first of the longest
            else:
                pick = min(range(len(self.buffer)), key=lambda i: self.buffer[i][2])  # the first of the shortest
            s, o, n = self.buffer.pop(pick)
            take = min(n, room)
            row.extend(int(t) for t in self.data[s][o: o + take])
            self.placed += take
            self.cropped += n - take
        return row

    def batch(self):
        rows = np.array([self.row() for _ in range(self.B)], dtype=np.int32)
        return rows[:, :-1], rows[:, 1:]
