"""nfn: one command line for training, sampling, evaluating and inspecting native GPT models."""
import argparse
import json
import os
import sys

from nfn import __version__
from nfn.cli.common import Parser
from nfn.cli import (bench, chat, data, eval as eval_cmd, export_model, import_model, infer, kernels, pipeline,
                     report, rl, serve, sft, tokenizer, tool, train)
from nfn.errors import UserError

COMMANDS = [train, sft, rl, pipeline, infer, chat, serve, eval_cmd, report, import_model, export_model, data,
            tokenizer, tool, kernels, bench]

EPILOG = """\
examples:
  nfn train --model-family gpt --dataset shakespeare
  nfn sft   --init-from ~/NeuralFn/artifacts/nanochat --mixture chitchat,identity:me.jsonl
  nfn rl    --init-from ~/NeuralFn/artifacts/sft --output-dir ~/NeuralFn/artifacts/rl --task gsm8k
  nfn infer --checkpoint ~/NeuralFn/artifacts/gpt --prompt "Once upon"
  nfn eval  --checkpoint ~/NeuralFn/artifacts/gpt --dataset shakespeare
  nfn eval  --checkpoint ~/NeuralFn/artifacts/gpt --tasks core --max-per-task 100
  nfn report ~/NeuralFn/artifacts/gpt
  nfn import --gguf SmolLM2-135M-Instruct.Q4_1.gguf
  nfn export --checkpoint smollm2-135m-instruct --hf /tmp/smollm2-hf
  nfn kernels list --json

locations (each moved by its environment variable):
  artifacts   ~/NeuralFn/artifacts    NFN_ARTIFACTS_DIR (alias: NEURALFN_ARTIFACTS_DIR)
  datasets    ~/.cache/nfn/datasets   NFN_DATASETS_DIR
  tokenizers  ~/.cache/nfn/tokenizers NFN_TOKENIZERS_DIR
"""


def version_text():
    """The --version line: nfn VERSION, plus (commit C) in a release (nfn/_build_info.json)."""
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_build_info.json")
    try:
        with open(path, encoding="utf-8") as f:
            return f"nfn {__version__} (commit {json.load(f)['commit']})"
    except (OSError, ValueError, KeyError):
        return f"nfn {__version__}"


def build_parser():
    parser = Parser(
        prog="nfn",
        description=__doc__.strip(),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv=None):
    # `bazel run` starts us inside the runfiles tree; relative paths the user typed are
    # relative to where they ran it.
    user_cwd = os.environ.get("BUILD_WORKING_DIRECTORY")
    if user_cwd:
        os.chdir(user_cwd)
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args) or 0
    except UserError as e:
        print(f"nfn {args.command}: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"nfn {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (nfn ... | head); stop quietly like other command-line tools.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
