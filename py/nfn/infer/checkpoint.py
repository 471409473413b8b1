"""Finding a checkpoint and reading its header and tensor layout, with the standard library
only (`nfn infer --native-info` and `--checkpoint-layout` import nothing heavier).

A checkpoint is named by a directory written by `nfn train` (the checkpoint `nfn train
--resume auto` would continue), a model file (`model_%08d.bin` or any llm.c model file), a
Hugging Face GPT-2 directory (config.json + model.safetensors), or an artifact name under
the artifacts directory.
"""
import json
import os
import re
import struct
from dataclasses import dataclass
from typing import Optional

from nfn import fileio, paths
from nfn.errors import UserError

MODEL_MAGIC = 20240326
VERSIONS = {3: "f32", 5: "bf16"}
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
# Header fields after magic and version, in order.
GEOMETRY_FIELDS = ["max_seq_len", "vocab_size", "num_layers", "num_heads", "channels", "padded_vocab_size"]
PARAM_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
               "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
MODEL_FILE = re.compile(r"^model_(\d{8})\.bin$")
DONE_FILE = "DONE_{:08d}"
STATE_FILE = "state_{:08d}_00000.bin"  # the optimizer's state, which a resume needs beside the model
MANIFEST = "manifest.json"
HF_FILES = ("config.json", "model.safetensors")


@dataclass
class Checkpoint:
    kind: str                 # "llmc" (a model file) or "hf" (config.json + model.safetensors)
    path: str                 # the model file, or the HF directory
    step: Optional[int]       # from model_%08d.bin, when the name has one
    manifest: Optional[str]   # the checkpoint's manifest (its DONE marker, or manifest.json beside it)


def shapes(g):
    """Tensor shapes in checkpoint order for a geometry dict."""
    V, T, L, C = g["padded_vocab_size"], g["max_seq_len"], g["num_layers"], g["channels"]
    return [(V, C), (T, C), (L, C), (L, C), (L, 3 * C, C), (L, 3 * C), (L, C, C), (L, C),
            (L, C), (L, C), (L, 4 * C, C), (L, 4 * C), (L, C, 4 * C), (L, C), (C,), (C,)]


def num_parameters(g):
    total = 0
    for shape in shapes(g):
        n = 1
        for d in shape:
            n *= d
        total += n
    return total


def validate_geometry(g, where):
    """Raises UserError naming the field when the geometry cannot be a model."""
    for field in GEOMETRY_FIELDS:
        if not isinstance(g.get(field), int) or g[field] < 1:
            raise UserError(f"{where}: {field} must be a positive integer (got {g.get(field)!r})")
    if g["channels"] % g["num_heads"]:
        raise UserError(f"{where}: channels {g['channels']} is not a multiple of num_heads {g['num_heads']}")
    if g["padded_vocab_size"] < g["vocab_size"]:
        raise UserError(f"{where}: padded_vocab_size {g['padded_vocab_size']} is smaller than "
                        f"vocab_size {g['vocab_size']}")


def read_header(path):
    """The llm.c header of a model file as a dict; the file size must match it exactly."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
        size = os.path.getsize(path)
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    if len(raw) < HEADER_BYTES:
        raise UserError(f"{path}: truncated: {len(raw)} bytes, the header alone is {HEADER_BYTES}")
    ints = struct.unpack(f"<{HEADER_INTS}i", raw)
    if ints[0] != MODEL_MAGIC:
        raise UserError(f"{path}: bad magic {ints[0]} (a model checkpoint has {MODEL_MAGIC})")
    if ints[1] not in VERSIONS:
        raise UserError(f"{path}: unsupported version {ints[1]} (3 = fp32 and 5 = bf16 are supported)")
    header = {"file": os.path.abspath(path), "magic": ints[0], "version": ints[1], "dtype": VERSIONS[ints[1]]}
    header.update(zip(GEOMETRY_FIELDS, ints[2:8]))
    validate_geometry(header, f"{path}: header")
    header["parameters"] = num_parameters(header)
    want = HEADER_BYTES + header["parameters"] * (4 if ints[1] == 3 else 2)
    if size != want:
        raise UserError(f"{path}: size {size} bytes, the header implies {want}")
    header["file_bytes"] = size
    return header


def geometry(header):
    return {k: header[k] for k in GEOMETRY_FIELDS}


def layout(header):
    """Every tensor's name, shape, dtype, byte offset in the file and byte size."""
    esize = 4 if header["version"] == 3 else 2
    out, offset = [], HEADER_BYTES
    for name, shape in zip(PARAM_NAMES, shapes(header)):
        n = 1
        for d in shape:
            n *= d
        out.append({"name": name, "shape": list(shape), "dtype": header["dtype"], "offset": offset,
                    "bytes": n * esize})
        offset += n * esize
    return out


def _json_object(path):
    """The JSON object in path; None when it is absent, empty, unreadable or not an object."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _run_id(manifest):
    run_id = (manifest or {}).get("run_id")
    return run_id if isinstance(run_id, str) and run_id else None


def manifest_of(model_path):
    """The manifest describing a trainer's model_%08d.bin: its DONE marker, where the trainer
    writes the checkpoint's own manifest, else (a marker from before that: empty) the
    directory's manifest.json; None if neither exists."""
    directory = os.path.dirname(os.path.abspath(model_path))
    m = MODEL_FILE.match(os.path.basename(model_path))
    if m:
        marker = os.path.join(directory, DONE_FILE.format(int(m.group(1))))
        if _json_object(marker) is not None:
            return marker
    candidate = os.path.join(directory, MANIFEST)
    return candidate if os.path.isfile(candidate) else None


def _from_directory(directory, for_resume):
    names = os.listdir(directory)
    if all(f in names for f in HF_FILES):
        return Checkpoint("hf", os.path.abspath(directory), None, None)
    steps = sorted((int(m.group(1)) for m in map(MODEL_FILE.match, names) if m), reverse=True)
    if not steps:
        raise UserError(f"{directory}: no checkpoint here (no model_%08d.bin, and not a Hugging Face "
                        f"directory with {' + '.join(HF_FILES)})")
    # A resume also needs the step's optimizer state, as the trainer counts a step complete
    # (cc/ckpt complete_steps); sampling needs the model alone.
    complete = [step for step in steps if DONE_FILE.format(step) in names and
                (not for_resume or STATE_FILE.format(step) in names)]
    manifest = _json_object(os.path.join(directory, MANIFEST))
    run_id, last = _run_id(manifest), (manifest or {}).get("step")
    if run_id is not None and isinstance(last, int) and not isinstance(last, bool) and last >= 0:
        # As `nfn train --resume auto` takes it: the step the manifest names (the last
        # checkpoint written here), else (its run stopped before that step's marker) that
        # run's newest complete step below it. Markers from before run ids count for any run.
        chosen = next((step for step in complete if step <= last and
                       _run_id(_json_object(os.path.join(directory, DONE_FILE.format(step)))) in (None, run_id)),
                      None)
        if chosen is None and complete:
            raise UserError(f"{directory}: the run that last wrote {MANIFEST} (run_id {run_id}, step {last}) left "
                            f"no complete checkpoint, and model_{complete[0]:08d}.bin is another run's: name that file")
    else:  # no manifest, or one from before run ids: the newest complete step
        chosen = complete[0] if complete else None
    if chosen is not None:
        model = os.path.join(os.path.abspath(directory), f"model_{chosen:08d}.bin")
        return Checkpoint("llmc", model, chosen, manifest_of(model))
    raise UserError(f"{directory}: incomplete checkpoint: model_{steps[0]:08d}.bin has no "
                    f"{DONE_FILE.format(steps[0])} marker (the run stopped before it finished writing)")


def resolve(spec, for_resume=False):
    """The Checkpoint that `--checkpoint spec` names; for_resume: the one `--resume spec`
    continues, a directory's newest complete step with its optimizer state too."""
    expanded = os.path.expanduser(spec)
    if os.path.isfile(expanded):
        m = MODEL_FILE.match(os.path.basename(expanded))
        if m:
            done = os.path.join(os.path.dirname(expanded) or ".", DONE_FILE.format(int(m.group(1))))
            manifest = manifest_of(expanded)
            # Only a trainer's directory (it has a manifest) promises DONE markers.
            if manifest is not None and not os.path.exists(done):
                raise UserError(f"{expanded}: incomplete checkpoint: no {os.path.basename(done)} marker beside it")
            return Checkpoint("llmc", os.path.abspath(expanded), int(m.group(1)), manifest)
        return Checkpoint("llmc", os.path.abspath(expanded), None, None)
    if os.path.isdir(expanded):
        return _from_directory(expanded, for_resume)
    artifact = os.path.join(paths.artifacts_dir(), spec)
    if spec and os.sep not in spec and os.path.isdir(artifact):
        return _from_directory(artifact, for_resume)
    raise UserError(f"checkpoint {spec}: not a file, a directory, or an artifact name under "
                    f"{paths.artifacts_dir()}")


def read_manifest(path):
    """A trainer manifest as a dict (format nfn.manifest, version 1)."""
    m = fileio.read_json(path)
    if not isinstance(m, dict) or m.get("format") != "nfn.manifest":
        raise UserError(f'{path}: not an nfn manifest (field format must be "nfn.manifest")')
    if m.get("version") != 1:
        raise UserError(f"{path}: unsupported manifest version {m.get('version')!r} (expected 1)")
    if not isinstance(m.get("geometry"), dict):
        raise UserError(f"{path}: missing object field geometry")
    validate_geometry(m["geometry"], f"{path}: geometry")
    eot, tokenizer = m.get("eot_token"), m.get("tokenizer")
    if eot is not None and (not isinstance(eot, int) or isinstance(eot, bool) or
                            not 0 <= eot < m["geometry"]["vocab_size"]):
        raise UserError(f"{path}: eot_token {eot!r} is not a token id of the vocabulary "
                        f"[0, {m['geometry']['vocab_size']})")
    if tokenizer is not None and not isinstance(tokenizer, str):
        raise UserError(f"{path}: tokenizer {tokenizer!r} is not a name")
    return m


def recorded_data(manifest):
    """The data a run was trained on, as its manifest names it: ("dataset", an alias or a
    shards path) or ("pretraining_file", the path of its text); None when nothing is recorded
    (a run the trainer made directly, or a file with no manifest)."""
    dataset = (manifest or {}).get("dataset")
    name = dataset.get("name") if isinstance(dataset, dict) else None
    if not isinstance(name, str) or not name:
        return None
    from nfn.data import shard_headers
    shards = name.endswith(".bin") or (os.path.isdir(name) and shard_headers.shards_in(name, "train"))
    return ("pretraining_file" if os.path.isabs(name) and not shards else "dataset"), name


def check_manifest_matches(manifest_path, manifest, geom):
    """The manifest must describe the weights it is used with, field by field."""
    for field in GEOMETRY_FIELDS:
        if manifest["geometry"][field] != geom[field]:
            raise UserError(f"{manifest_path}: geometry.{field} is {manifest['geometry'][field]} but the "
                            f"weights have {geom[field]}")


def header_info(ckpt):
    """What --native-info prints: the header of an llm.c file, or config.json of an HF one."""
    if ckpt.kind == "hf":
        from nfn.infer import hf
        return hf.read_info(ckpt.path)
    info = read_header(ckpt.path)
    info["step"] = ckpt.step
    info["manifest"] = ckpt.manifest
    return info
