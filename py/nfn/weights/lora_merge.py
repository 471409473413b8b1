"""`nfn export --merge-lora DIR`: a LoRA checkpoint (its adapters, naming their base) written as
the whole model they make with that base (W + (alpha/rank) B A, over the base as the run held
it), a decoder checkpoint any nfn command or `nfn export --hf` takes as it is."""
import os
import time

from nfn.errors import UserError
from nfn.weights import artifact, decoder_checkpoint


def export_merged(spec, target):
    from nfn.infer import checkpoint
    t0 = time.time()
    artifact.check_export_target(target)
    ckpt = checkpoint.resolve(spec, header=True)
    if ckpt.kind != "decoder":
        raise UserError(f"{ckpt.path}: not a LoRA checkpoint (a {ckpt.kind} model file)")
    weights = decoder_checkpoint.DecoderWeights(ckpt.path)
    if not weights.lora:
        raise UserError(f"{ckpt.path}: not a LoRA checkpoint: its model file holds the whole model already")
    manifest = checkpoint.read_manifest(ckpt.manifest) if ckpt.manifest else {}
    fields = decoder_checkpoint.manifest(weights.geometry, manifest.get("tokenizer"), manifest.get("eot_token"), 0,
                                         "merged", {"merged_from": os.path.abspath(ckpt.path)}, weights.family)
    final = artifact.export(target, lambda tmp: decoder_checkpoint.write_decoder(
        tmp, weights.family, weights.geometry, weights.tensor, fields))
    return {"directory": final, "source": ckpt.path, "model_family": weights.family, "dtype": "f32",
            "files": sorted(os.listdir(final)), "tokenizer": manifest.get("tokenizer"), "note": None,
            "seconds": round(time.time() - t0, 2)}
