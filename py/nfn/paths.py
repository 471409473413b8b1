"""Where nfn keeps what it makes: artifacts, prepared datasets and tokenizers.

Every module that reads or writes these places asks here, so one environment variable
moves each of them for every command.
"""
import os

ARTIFACTS_ENV = "NFN_ARTIFACTS_DIR"
ARTIFACTS_ENV_ALIAS = "NEURALFN_ARTIFACTS_DIR"  # the project's first name for it, still read
DATASETS_ENV = "NFN_DATASETS_DIR"
TOKENIZERS_ENV = "NFN_TOKENIZERS_DIR"


def env_value(var, alias=None):
    """The variable's value, stripped; where it is unset or blank, its alias's ("" if neither)."""
    value = os.environ.get(var, "").strip()
    if not value and alias:
        value = os.environ.get(alias, "").strip()
    return value


def from_env(var, default, alias=None):
    """The absolute path the variable (else its alias) names, else the default, "~" expanded."""
    return os.path.abspath(os.path.expanduser(env_value(var, alias) or default))


def artifacts_dir():
    """Trained models, reports and samples: $NFN_ARTIFACTS_DIR (else $NEURALFN_ARTIFACTS_DIR)
    or ~/NeuralFn/artifacts."""
    return from_env(ARTIFACTS_ENV, "~/NeuralFn/artifacts", ARTIFACTS_ENV_ALIAS)


def datasets_dir():
    """Prepared token shards: $NFN_DATASETS_DIR or ~/.cache/nfn/datasets."""
    return from_env(DATASETS_ENV, "~/.cache/nfn/datasets")


def tokenizers_dir():
    """Tokenizer models: $NFN_TOKENIZERS_DIR or ~/.cache/nfn/tokenizers."""
    return from_env(TOKENIZERS_ENV, "~/.cache/nfn/tokenizers")
