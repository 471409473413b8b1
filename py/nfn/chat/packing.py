"""BOS-aligned best-fit packing of token sequences into fixed-length rows.

Every sequence starts with BOS, and every row starts with the start of a sequence, so no
row begins mid-document. Each row takes the longest waiting sequence that still fits
(best fit over a small buffer), until none fits. Then:
  - conversations (pad mode): the rest of the row is padding with mask 0;
  - pretraining documents (crop mode): the shortest waiting document is cropped to fill
    the row exactly, and its remainder is dropped (counted in the stats).
A sequence longer than a whole row is cropped to the row. Masks travel with their tokens.
"""
import bisect
import itertools
from dataclasses import dataclass, field


@dataclass
class PackStats:
    row_len: int
    rows: int = 0
    sequences: int = 0           # sequences consumed from the source
    tokens_in: int = 0           # their total length
    tokens_packed: int = 0       # tokens that made it into rows
    padding: int = 0             # pad tokens written
    cropped_sequences: int = 0   # sequences that lost a tail
    per_row_counts: list = field(default_factory=list, repr=False)

    @property
    def tokens_cropped(self):
        return self.tokens_in - self.tokens_packed

    @property
    def utilisation(self):
        """Share of row positions holding real tokens."""
        total = self.rows * self.row_len
        return self.tokens_packed / total if total else 0.0


class BestFitPacker:
    """pack(source) yields (ids, mask) rows of exactly row_len tokens; stats accumulate.

    source yields (ids, mask) pairs or bare id lists (mask then 1 everywhere).
    """

    def __init__(self, row_len, bos_id, pad_id=None, buffer_size=64, crop_to_fill=False):
        if row_len < 2:
            raise ValueError(f"row_len must be at least 2, got {row_len}")
        if buffer_size < 1:
            raise ValueError(f"buffer_size must be at least 1, got {buffer_size}")
        if not crop_to_fill and pad_id is None:
            raise ValueError("pad mode needs a pad_id")
        self.row_len, self.bos_id, self.pad_id = row_len, bos_id, pad_id
        self.buffer_size, self.crop_to_fill = buffer_size, crop_to_fill
        self.stats = PackStats(row_len)

    def pack(self, source):
        source = iter(source)
        waiting = []  # sorted by (length, arrival) so equal lengths leave in order
        counter = itertools.count()

        def refill():
            while len(waiting) < self.buffer_size:
                item = next(source, None)
                if item is None:
                    return
                ids, mask = self._split(item)
                self.stats.sequences += 1
                self.stats.tokens_in += len(ids)
                bisect.insort(waiting, (len(ids), next(counter), ids, mask))

        while True:
            refill()
            if not waiting:
                return
            row_ids, row_mask, count = [], [], 0
            while True:
                room = self.row_len - len(row_ids)
                if room == 0:
                    break
                # Longest waiting sequence with length <= room.
                i = bisect.bisect_right(waiting, (room, float("inf"))) - 1
                if i >= 0:
                    i = bisect.bisect_left(waiting, (waiting[i][0],))  # equal lengths: first come
                    _, _, ids, mask = waiting.pop(i)
                elif not row_ids or self.crop_to_fill:
                    # Nothing fits: crop one (the shortest wastes least) to the room left.
                    _, _, ids, mask = waiting.pop(0)
                    ids, mask = ids[:room], mask[:room]
                    self.stats.cropped_sequences += 1
                else:
                    row_ids.extend([self.pad_id] * room)
                    row_mask.extend([0] * room)
                    self.stats.padding += room
                    break
                row_ids.extend(ids)
                row_mask.extend(mask)
                self.stats.tokens_packed += len(ids)
                count += 1
                refill()
                if not waiting:  # source exhausted: the last row is padded, mask 0
                    pad = self.row_len - len(row_ids)
                    row_ids.extend([self.bos_id if self.pad_id is None else self.pad_id] * pad)
                    row_mask.extend([0] * pad)
                    self.stats.padding += pad
                    break
            self.stats.rows += 1
            self.stats.per_row_counts.append(count)
            yield row_ids, row_mask

    def _split(self, item):
        if isinstance(item, tuple):
            ids, mask = list(item[0]), list(item[1])
            if len(ids) != len(mask):
                raise ValueError(f"sequence {self.stats.sequences}: ids and mask differ in length")
        else:
            ids = list(item)
            mask = [1] * len(ids)
        if not ids or ids[0] != self.bos_id:
            raise ValueError(f"sequence {self.stats.sequences}: must start with BOS ({self.bos_id})")
        return ids, mask


def pack_conversations(rendered, row_len, bos_id, pad_id, buffer_size=64):
    """Rows of rendered (ids, mask) conversations, padded; returns (rows, stats)."""
    packer = BestFitPacker(row_len, bos_id, pad_id=pad_id, buffer_size=buffer_size)
    return list(packer.pack(rendered)), packer.stats


def pack_documents(documents, row_len, bos_id, buffer_size=64):
    """Rows of BOS-prefixed pretraining documents, cropped to fill; returns (rows, stats)."""
    packer = BestFitPacker(row_len, bos_id, buffer_size=buffer_size, crop_to_fill=True)
    return list(packer.pack(documents)), packer.stats
