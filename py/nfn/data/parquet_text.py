"""Documents from Parquet files (FineWeb-Edu's and ClimbMix's layout: one document a row, its
text in a string column), streamed a record batch at a time, never a whole file in memory.

Each row is a document; a long one is cut into pieces at the same safe points as text files
(text_pieces.safe_cut), so it tokenizes as a whole would.
"""
import glob
import os

from nfn.data.text_pieces import PIECE_CHARS, safe_cut
from nfn.errors import UserError

BATCH_ROWS = 1024


def parquet_files(pattern):
    """The files --parquet names: a file, a directory's *.parquet (sorted), or a glob."""
    path = os.path.abspath(os.path.expanduser(pattern))
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "*.parquet")))
        if not files:
            raise UserError(f"{path}: no .parquet files in this directory")
        return files
    files = sorted(f for f in glob.glob(path) if os.path.isfile(f))
    if not files:
        raise UserError(f"--parquet {pattern}: no such file, and no file matches it")
    return files


def _open(path):
    import pyarrow.parquet as pq
    try:
        return pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises its own error types for files that are not Parquet
        raise UserError(f"{path}: not a readable Parquet file ({e})") from None


def check_column(files, column):
    """Every file has `column` as a string column (from the footers alone); else one line."""
    import pyarrow as pa
    for path in files:
        schema = _open(path).schema_arrow
        if column not in schema.names:
            raise UserError(f"{path}: no column '{column}' (columns: {', '.join(schema.names)}); "
                            "name the text with --text-column")
        kind = schema.field(column).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise UserError(f"{path}: column '{column}' holds {kind}, not text")


def text_bytes(files):
    """The uncompressed size of the files' row groups: the progress bar's total."""
    total = 0
    for path in files:
        meta = _open(path).metadata
        total += sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    return total


def document_pieces(path, column, piece_chars=None):
    """Yield (doc_start, text) for each row's document in one file, a long one in pieces."""
    piece_chars = piece_chars or PIECE_CHARS
    for batch in _open(path).iter_batches(batch_size=BATCH_ROWS, columns=[column]):
        for text in batch.column(0).to_pylist():
            if not text or not text.strip():
                continue
            start = True
            while len(text) > piece_chars:
                cut = safe_cut(text, piece_chars)
                if cut < 0:
                    break
                yield start, text[:cut]
                text, start = text[cut:], False
            yield start, text
