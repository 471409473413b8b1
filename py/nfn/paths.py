"""Where nfn keeps what it makes: artifacts, prepared datasets and tokenizers.

Every module that reads or writes these places asks here, so one environment variable
moves each of them for every command.
"""
import os

ARTIFACTS_ENV = "NEURALFN_ARTIFACTS_DIR"
DATASETS_ENV = "NFN_DATASETS_DIR"
TOKENIZERS_ENV = "NFN_TOKENIZERS_DIR"


def _from_env(var, default):
    value = os.environ.get(var, "").strip()
    return os.path.abspath(os.path.expanduser(value or default))


def artifacts_dir():
    """Trained models, reports and samples: $NEURALFN_ARTIFACTS_DIR or ~/NeuralFn/artifacts."""
    return _from_env(ARTIFACTS_ENV, "~/NeuralFn/artifacts")


def datasets_dir():
    """Prepared token shards: $NFN_DATASETS_DIR or ~/.cache/nfn/datasets."""
    return _from_env(DATASETS_ENV, "~/.cache/nfn/datasets")


def tokenizers_dir():
    """Tokenizer models: $NFN_TOKENIZERS_DIR or ~/.cache/nfn/tokenizers."""
    return _from_env(TOKENIZERS_ENV, "~/.cache/nfn/tokenizers")


def describe():
    """Each location with the variable that moves it (for `nfn kernels doctor` and docs)."""
    return {
        "artifacts": {"path": artifacts_dir(), "env": ARTIFACTS_ENV},
        "datasets": {"path": datasets_dir(), "env": DATASETS_ENV},
        "tokenizers": {"path": tokenizers_dir(), "env": TOKENIZERS_ENV},
    }
