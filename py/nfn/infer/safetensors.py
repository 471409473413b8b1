"""The safetensors format, read and written by our own code: an 8-byte little-endian header
length N, N bytes of JSON ({name: {"dtype", "shape", "data_offsets": [begin, end]}} plus an
optional "__metadata__" of strings), then the raw little-endian tensor bytes.

Headers are read with the standard library (for --native-info); tensor data needs numpy.
"""
import json
import os
import struct

from nfn import fileio
from nfn.errors import UserError

DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
               "BOOL": 1}
# numpy dtype names of the types we move (BF16 travels as raw uint16 words).
NUMPY = {"F32": "<f4", "BF16": "<u2", "F16": "<f2", "F64": "<f8", "I32": "<i4", "I64": "<i8"}
MAX_HEADER = 100 * 1024 * 1024


def read_header(path):
    """(tensors {name: entry}, metadata, data_start); the file must be exactly covered."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise UserError(f"{path}: truncated: no safetensors header length")
            (n,) = struct.unpack("<Q", head)
            if n > min(MAX_HEADER, size - 8):
                raise UserError(f"{path}: safetensors header length {n} does not fit the file of {size} bytes")
            raw = f.read(n)
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{path}: safetensors header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise UserError(f"{path}: safetensors header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    end_max = 0
    for name, entry in header.items():
        where = f"{path}: tensor {name}"
        if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str) or entry["dtype"] not in DTYPE_BYTES:
            raise UserError(f"{where}: unknown dtype {entry.get('dtype') if isinstance(entry, dict) else entry!r}")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise UserError(f"{where}: shape must be a list of non-negative integers")
        if not (isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(o, int) for o in offsets)
                and 0 <= offsets[0] <= offsets[1]):
            raise UserError(f"{where}: data_offsets must be [begin, end] with begin <= end")
        count = 1
        for d in shape:
            count *= d
        if offsets[1] - offsets[0] != count * DTYPE_BYTES[entry["dtype"]]:
            raise UserError(f"{where}: data_offsets cover {offsets[1] - offsets[0]} bytes, shape {shape} of "
                            f"{entry['dtype']} needs {count * DTYPE_BYTES[entry['dtype']]}")
        end_max = max(end_max, offsets[1])
    data_start = 8 + n
    if data_start + end_max != size:
        raise UserError(f"{path}: size {size} bytes, the safetensors header implies {data_start + end_max}")
    return header, metadata, data_start


def read_tensor(path, entry, data_start):
    """One tensor as a numpy array of its stored type (BF16 as uint16 words)."""
    import numpy as np
    if entry["dtype"] not in NUMPY:
        raise UserError(f"{path}: tensors of dtype {entry['dtype']} are not supported here")
    begin, end = entry["data_offsets"]
    with open(path, "rb") as f:
        f.seek(data_start + begin)
        raw = f.read(end - begin)
    return np.frombuffer(raw, dtype=NUMPY[entry["dtype"]]).reshape(entry["shape"])


def write(path, tensors, metadata=None):
    """Writes [(name, dtype, numpy array)] in the given order, atomically (temp + rename)."""
    write_streamed(path, [(name, dtype, array.shape, lambda a=array: a) for name, dtype, array in tensors], metadata)


def write_streamed(path, tensors, metadata=None):
    """As write, from [(name, dtype, shape, make)]: each make() returns its array when the data
    reaches it, so that only one tensor need be in memory at a time."""
    import numpy as np
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, dtype, shape, _ in tensors:
        count = 1
        for d in shape:
            count *= int(d)
        nbytes = count * np.dtype(NUMPY[dtype]).itemsize
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # data starts 8-byte aligned, as the reference writer does
    with fileio.atomic_open(path) as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for name, dtype, shape, make in tensors:
            array = make()
            if tuple(array.shape) != tuple(int(d) for d in shape):
                raise ValueError(f"{path}: tensor {name} has shape {list(array.shape)}, declared {list(shape)}")
            f.write(np.ascontiguousarray(array, dtype=NUMPY[dtype]).tobytes())
