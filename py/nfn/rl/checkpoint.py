"""`nfn rl`'s checkpoints, in the decoder trainers' format and by their rules (docs/training.md),
so that `nfn chat`, `nfn infer`, `nfn eval` and `nfn sft --init-from` take an RL output
directory as they take a trainer's:

  model_%08d.bin          the decoder weights file (safetensors, f32), decoder_checkpoint.py's
  state_%08d_00000.bin    the trainer's state file (cc/ckpt/checkpoint.h): 256 int32 header
                          (magic 20240527, version 1, step at [10], the RNG state at [20:22],
                          data shard, offset and epoch at [30:36], parameters at [40:42]), then
                          the optimizer's m and v, f32. nfn rl keeps its sampler's RNG state in
                          the RNG field and where its question order stands in epoch and offset.
  manifest.json, DONE_%08d  the init checkpoint's manifest with this step's weights, step and
                          run id, and an "rl" object; DONE last, so a checkpoint without it is
                          incomplete and `--resume auto` passes it over.
"""
import os
import re

import numpy as np

from nfn import fileio
from nfn.errors import UserError
from nfn.weights import decoder_checkpoint

STATE_MAGIC, STATE_VERSION = 20240527, 1
HEADER_INTS = 256
DONE_RE = re.compile(r"^DONE_(\d{8})$")


def state_file_name(step):
    return f"state_{step:08d}_00000.bin"


def _u64(header, at, value=None):
    if value is None:
        return int(header[at].astype(np.uint32)) | (int(header[at + 1].astype(np.uint32)) << 32)
    header[at:at + 2] = np.array([value & 0xFFFFFFFF, value >> 32], dtype=np.uint32).view(np.int32)


def write_state(path, step, rng_state, epoch, offset, m, v):
    header = np.zeros(HEADER_INTS, dtype=np.int32)
    header[0], header[1], header[2] = STATE_MAGIC, STATE_VERSION, 1
    header[10] = step
    _u64(header, 20, rng_state)
    _u64(header, 32, offset)
    _u64(header, 34, epoch)
    _u64(header, 40, len(m))
    with fileio.atomic_open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.ascontiguousarray(m, dtype=np.float32).tobytes())
        f.write(np.ascontiguousarray(v, dtype=np.float32).tobytes())


def read_state(path, num_parameters):
    """{"step", "rng_state", "epoch", "offset", "m", "v"} of a state file; one line naming the
    file and field that is wrong."""
    try:
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    want = HEADER_INTS * 4 + 8 * num_parameters
    if len(data) < HEADER_INTS * 4:
        raise UserError(f"{path}: {len(data)} bytes, shorter than a state file's header")
    header = data[:HEADER_INTS * 4].view(np.int32)
    if header[0] != STATE_MAGIC:
        raise UserError(f"{path}: bad magic {header[0]} (a state file has {STATE_MAGIC})")
    if header[1] != STATE_VERSION or header[4] != 0:
        raise UserError(f"{path}: unsupported state version {header[1]} (master weights flag {header[4]})")
    if _u64(header, 40) != num_parameters or len(data) != want:
        raise UserError(f"{path}: holds {_u64(header, 40)} parameters' moments in {len(data)} bytes; the model has "
                        f"{num_parameters} ({want} bytes)")
    floats = data[HEADER_INTS * 4:].view(np.float32)
    return {"step": int(header[10]), "rng_state": _u64(header, 20), "offset": _u64(header, 32),
            "epoch": _u64(header, 34), "m": floats[:num_parameters], "v": floats[num_parameters:]}


def complete_steps(directory):
    """Steps in directory with a DONE marker, a model file and a state file, newest first."""
    try:
        names = set(os.listdir(directory))
    except OSError:
        return []
    steps = [int(m.group(1)) for m in map(DONE_RE.match, names) if m]
    return sorted((s for s in steps if decoder_checkpoint.model_file_name(s) in names
                   and state_file_name(s) in names), reverse=True)


def save(directory, step, family, geometry, layout, params, m, v, rng_state, epoch, offset, manifest):
    """One checkpoint: the state file, the model, the manifest and, last, the DONE marker (one an
    earlier run left for this step goes first)."""
    os.makedirs(directory, exist_ok=True)
    done = os.path.join(directory, decoder_checkpoint.done_file_name(step))
    if os.path.exists(done):
        os.remove(done)
    write_state(os.path.join(directory, state_file_name(step)), step, rng_state, epoch, offset, m, v)
    shapes = dict(decoder_checkpoint.layout(family, geometry))
    where = {name: offset_ for name, _, _, offset_ in layout}

    def tensor(name):
        size = int(np.prod(shapes[name]))
        return params[where[name]:where[name] + size].reshape(shapes[name])

    decoder_checkpoint.write_decoder(directory, family, geometry, tensor, manifest, step)
