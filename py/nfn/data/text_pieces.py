"""Stream UTF-8 text files as documents cut into pieces that tokenize independently.

A document is a file, or a part of one between "<|endoftext|>" markers (TinyStories'
layout). Long documents are cut only just before a newline that follows a non-space
character: no GPT-2 pre-token spans such a point, and the SentencePiece models here never
merge across a newline, so encoding the pieces separately gives the same ids as encoding
the whole document (tests/py/data check both).
"""
import codecs
import os
import re

from nfn.errors import UserError

ENDOFTEXT = "<|endoftext|>"
PIECE_CHARS = 1 << 18   # ~256 KB: enough pieces to keep every core busy, small enough to stream
READ_BYTES = 1 << 20
_SAFE_CUT = re.compile(r"(?<=\S)\n")
_WORD_CUT = re.compile(r"(?<=\S)\s")  # a word's end: where validation ends when no line end is left


def safe_cut(text, start):
    """The first safe cut at or after index start, or -1."""
    m = _SAFE_CUT.search(text, max(start, 1))
    return m.start() if m else -1


def document_pieces(path, piece_chars=None):
    """Yield (doc_start, text) for one file; invalid UTF-8 raises UserError with the byte offset."""
    piece_chars = piece_chars or PIECE_CHARS
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    buf, doc_start, offset = "", True, 0
    with open(path, "rb") as f:
        while True:
            block = f.read(READ_BYTES)
            pending = len(decoder.getstate()[0])
            try:
                buf += decoder.decode(block, final=not block)
            except UnicodeDecodeError as e:
                raise UserError(f"{path}: invalid UTF-8 at byte {offset - pending + e.start}") from None
            offset += len(block)
            while True:  # whole documents closed by a marker
                at = buf.find(ENDOFTEXT)
                if at < 0:
                    break
                doc = buf[:at].rstrip()
                if doc:
                    yield doc_start, doc
                buf = buf[at + len(ENDOFTEXT):].lstrip()
                doc_start = True
            while len(buf) > piece_chars:
                cut = safe_cut(buf, piece_chars)
                if cut < 0:
                    break  # no safe cut yet: read more
                yield doc_start, buf[:cut]
                buf, doc_start = buf[cut:], False
            if not block:
                break
    if buf.strip() or (buf and not doc_start):
        yield doc_start, buf


def split_pieces(files, val_bytes, piece_chars=None):
    """split_stream over the documents of text files."""
    return split_stream((p for path in files for p in document_pieces(path, piece_chars)), val_bytes)


def split_stream(pieces, val_bytes):
    """Yield (split, doc_start, text, nbytes) from (doc_start, text) pieces: the first val_bytes
    of text go to "val", the rest to "train", cut at the first line end (or piece or document
    end) after that; where the text's last piece has none left but its final line break, at
    the first word's end after it."""
    val_left = val_bytes
    ahead = next(pieces, None)
    while ahead is not None:
        (doc_start, text), ahead = ahead, next(pieces, None)
        while ahead is not None and not ahead[0] and not ahead[1].strip():
            text, ahead = text + ahead[1], next(pieces, None)  # a line's break, cut off by size: one piece
        nbytes = len(text.encode("utf-8"))
        if val_left <= 0:
            yield "train", doc_start, text, nbytes
            continue
        cut = safe_cut(text, val_left) if nbytes > val_left else -1
        if (cut < 0 or not text[cut:].strip()) and ahead is None and nbytes > val_left:
            # No line end before the text's own last one (one long line): a word's end. Not where
            # a next piece follows: it starts a line.
            m = _WORD_CUT.search(text, max(val_left, 1))
            cut = m.start() if m and text[m.start():].strip() else -1
        if cut < 0:
            val_left -= nbytes
            yield "val", doc_start, text, nbytes
            continue
        head, tail = text[:cut], text[cut:]
        head_bytes = len(head.encode("utf-8"))
        val_left = 0
        yield "val", doc_start, head, head_bytes
        yield "train", False, tail, nbytes - head_bytes


def explicit_pieces(train_files, val_files, piece_chars=None):
    """Yield (split, doc_start, text, nbytes) when the source names its own validation files."""
    for split, files in (("val", val_files), ("train", train_files)):
        for path in files:
            for doc_start, text in document_pieces(path, piece_chars):
                yield split, doc_start, text, len(text.encode("utf-8"))


def total_bytes(files):
    return sum(os.path.getsize(f) for f in files)
