"""Finding a checkpoint and reading its header and tensor layout, with the standard library
only (`nfn infer --native-info` and `--checkpoint-layout` import nothing heavier).

A checkpoint is named by a directory written by `nfn train` (the checkpoint `nfn train
--resume auto` would continue), a model file (`model_%08d.bin` or any llm.c model file), a
Hugging Face GPT-2 directory (config.json + model.safetensors), or an artifact name under
the artifacts directory. Which checkpoint a name means, the llm.c header, the parameter
layout and the padded vocabulary are the trainer's to say: this module asks its binary
(`nfn_native_train --inspect-checkpoint` and `--inspect-geometry`, cc/train/checkpoint_query.h).
"""
import functools
import json
import os
import re
from dataclasses import dataclass
from typing import Optional

from nfn import fileio, native_bin, paths
from nfn.errors import UserError

MODEL_MAGIC = 20240326
HEADER_INTS = 256
# The geometry's fields, in the order the llm.c header holds them after magic and version.
GEOMETRY_FIELDS = ["max_seq_len", "vocab_size", "num_layers", "num_heads", "channels", "padded_vocab_size"]
MODEL_FILE = re.compile(r"^model_(\d{8})\.bin$")
MANIFEST = "manifest.json"


@dataclass
class Checkpoint:
    kind: str                 # "llmc" (a model file), "hf" (config.json + model.safetensors) or
                              # "decoder" (a nanochat or llama trainer's safetensors model file)
    path: str                 # the model file, or the HF directory
    step: Optional[int]       # from model_%08d.bin, when the name has one
    manifest: Optional[str]   # the checkpoint's manifest (its DONE marker, or manifest.json beside it)
    header: Optional[dict] = None   # an llm.c file's header, where resolve read it
    tensors: Optional[list] = None  # and each tensor's name, shape, dtype, byte offset and bytes
    family: Optional[str] = None    # a decoder checkpoint's model family (nanochat, llama)


def resolve(spec, for_resume=False, header=False):
    """The Checkpoint that `--checkpoint spec` names; for_resume: the one `--resume spec`
    continues, a directory's newest complete step with its optimizer state too. header: with
    an llm.c file's header and tensor layout (else the file is not read)."""
    from nfn.weights import embedded
    embedded.ensure(spec)  # smollm2: imported on first use
    answer = native_bin.ask([f"--inspect-checkpoint={spec}", f"--artifacts-dir={paths.artifacts_dir()}", "--json"] +
                            (["--for-resume"] if for_resume else []) + ([] if header else ["--resolve-only"]))
    return Checkpoint(answer["kind"], answer["path"], answer["step"], answer["manifest_file"],
                      answer.get("header"), answer.get("tensors"), answer.get("model_family"))


def decoder_header(path):
    """(model_family, geometry dict, tensors) of a decoder weights file, from its safetensors
    header: the tensors as [{name, shape, dtype, offset, bytes}] in file order."""
    from nfn.infer import safetensors
    entries, metadata, data_start = safetensors.read_header(path)
    try:
        geom = json.loads(metadata.get("geometry", ""))
    except ValueError:
        geom = None
    if not isinstance(geom, dict):
        raise UserError(f"{path}: __metadata__ geometry is not a JSON object")
    tensors = [{"name": name, "shape": e["shape"], "dtype": e["dtype"], "offset": data_start + e["data_offsets"][0],
                "bytes": e["data_offsets"][1] - e["data_offsets"][0]}
               for name, e in sorted(entries.items(), key=lambda kv: kv[1]["data_offsets"][0])]
    return metadata.get("model_family"), geom, tensors


def geometry(header):
    return {k: header[k] for k in GEOMETRY_FIELDS}


def geometry_layout(geom, where):
    """The model of a geometry, as the trainer lays it out: {"geometry" (padded_vocab_size
    filled in where geom has none), "parameters", "tensors": [{name, shape, elements,
    element_offset}]}. A geometry no model can have is a UserError naming `where`."""
    try:
        return _geometry_layout(tuple((k, geom[k]) for k in GEOMETRY_FIELDS if geom.get(k) is not None))
    except UserError as e:
        raise UserError(f"{where}: {e}") from None


@functools.lru_cache(maxsize=8)
def _geometry_layout(fields):
    return native_bin.ask(["--inspect-geometry", "--json"] + [f"--{k.replace('_', '-')}={v}" for k, v in fields])


def read_manifest(path):
    """A trainer manifest as a dict (format nfn.manifest, version 1)."""
    m = fileio.read_json(path)
    if not isinstance(m, dict) or m.get("format") != "nfn.manifest":
        raise UserError(f'{path}: not an nfn manifest (field format must be "nfn.manifest")')
    if m.get("version") != 1:
        raise UserError(f"{path}: unsupported manifest version {m.get('version')!r} (expected 1)")
    if not isinstance(m.get("geometry"), dict):
        raise UserError(f"{path}: missing object field geometry")
    # Whole numbers, to compare with the weights' (check_manifest_matches), whose geometry the
    # trainer's reader has checked.
    for field in GEOMETRY_FIELDS:
        value = m["geometry"].get(field)
        if not isinstance(value, int) or isinstance(value, bool):
            raise UserError(f"{path}: geometry.{field} must be an integer (got {value!r})")
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
    for field in geom:
        if manifest["geometry"].get(field) != geom[field]:
            raise UserError(f"{manifest_path}: geometry.{field} is {manifest['geometry'][field]} but the "
                            f"weights have {geom[field]}")


def header_info(ckpt):
    """What --native-info prints: the header of an llm.c file (ckpt resolved with header=True),
    or config.json of an HF one."""
    if ckpt.kind == "hf":
        from nfn.infer import hf
        return hf.read_info(ckpt.path)
    if ckpt.kind == "decoder":
        family, geom, _ = decoder_header(ckpt.path)
        return {"file": ckpt.path, "format": "safetensors", "model_family": family, "geometry": geom,
                "step": ckpt.step, "manifest": ckpt.manifest}
    return {"file": ckpt.path, **ckpt.header, "step": ckpt.step, "manifest": ckpt.manifest}
