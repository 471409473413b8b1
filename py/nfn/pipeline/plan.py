"""The stages of `nfn pipeline` and the nfn commands each runs, for a size.

tokenizer -> base -> base-eval -> sft -> rl -> chat-eval -> report, as nanochat's speedrun.sh:
a chat BPE tokenizer trained on the corpus, a nanochat model pretrained on it, its bits per byte
and CORE, SFT on the chat mixture, RL, ChatCORE of the final model, and the report cards. Each
stage is a list of nfn command lines (argument lists) over paths inside the output directory;
the trainers run with `--resume auto`, so a stage interrupted part way continues from its last
checkpoint. Standard library only: `nfn pipeline --dry-run` prints the plan without loading
anything.
"""
import hashlib
import json
import os
from dataclasses import dataclass, field

STAGES = ("tokenizer", "base", "base-eval", "sft", "rl", "chat-eval", "report")


@dataclass(frozen=True)
class Size:
    """What a size trains and how much it evaluates."""
    name: str
    vocab_size: int
    geometry: tuple          # trainer flags of the base model's shape (or --depth N)
    base_steps: tuple        # trainer flags of the base run's length and batch
    sft_mixture: str
    sft_flags: tuple
    rl_task: str
    rl_flags: tuple
    max_per_task: int = 0    # 0: every item
    max_new_tokens: int = 512
    checkpoint_every: int = 0


TINY = Size(
    name="tiny",
    vocab_size=2048,
    geometry=("--num-layers", "4", "--model-dim", "256", "--num-heads", "2", "--train-seq-len", "256"),
    base_steps=("--batch-size", "8", "--max-steps", "250", "--eval-every-steps", "50", "--eval-batches", "4",
                "--sample-tokens", "64"),
    sft_mixture="chitchat*0.05,arithmetic*30",
    sft_flags=("--batch-size", "8", "--max-steps", "150", "--eval-every-steps", "50", "--sample-tokens", "0"),
    rl_task="arithmetic",
    rl_flags=("--steps", "40", "--examples-per-step", "8", "--samples", "8", "--max-new-tokens", "16",
              "--eval-every", "10", "--eval-examples", "45"),
    max_per_task=16,
    max_new_tokens=48,
    checkpoint_every=20,
)


def depth_size(depth):
    """The real run: nanochat's --depth recipe (channels 64 x depth, context 2048, tokens 20x the
    parameters), nanochat's 65,536-token vocabulary, the full SFT mixture, RL on GSM8K, and
    every item of every evaluation."""
    return Size(
        name=f"d{depth}",
        vocab_size=65536,
        geometry=("--depth", str(depth)),
        base_steps=(),
        sft_mixture="chitchat,arc,mmlu,gsm8k",
        sft_flags=(),
        rl_task="gsm8k",
        rl_flags=(),
        checkpoint_every=500,
    )


@dataclass
class Plan:
    out: str                  # the output directory (absolute)
    size: Size
    dataset: str              # a dataset alias or a directory/file of text
    tokenizer: str            # the trained tokenizer's name (in the tokenizers directory)
    device: tuple = ()        # --backend and --threads, passed to every command that runs a model
    stages: dict = field(default_factory=dict)  # name -> [argv, ...]

    def path(self, *parts):
        return os.path.join(self.out, *parts)

    def output(self, stage):
        """Where a stage leaves its result (for the summary, and what a later stage needs)."""
        if stage == "tokenizer":
            from nfn import paths
            return os.path.join(paths.tokenizers_dir(), self.tokenizer)
        return self.path(*OUTPUTS[stage])


def tokenizer_name(out):
    """The tokenizer of the pipeline in `out`: the name its pipeline.json records, else one of
    its own ("pipeline-" and a digest of the directory's path). It lives in the tokenizers
    directory with every trained tokenizer, so `nfn chat --checkpoint OUT/rl` finds it."""
    try:
        with open(os.path.join(out, "pipeline.json"), encoding="utf-8") as f:
            name = json.load(f).get("tokenizer")
        if isinstance(name, str) and name:
            return name
    except (OSError, ValueError, AttributeError):
        pass
    return "pipeline-" + hashlib.sha256(os.path.abspath(out).encode()).hexdigest()[:10]


def text_flags(dataset):
    """The flag naming the corpus: an alias, else a text file or directory."""
    if os.path.exists(dataset):
        return ("--pretraining-file", os.path.abspath(dataset))
    return ("--dataset", dataset)


def build(out, size, dataset="shakespeare", backend="auto", threads=0):
    plan = Plan(os.path.abspath(out), size, dataset, tokenizer_name(out))
    device = ("--backend", backend) + (("--threads", str(threads)) if threads else ())
    plan.device = device
    # nfn rl trains on the CPU op library (it refuses cuda): a CUDA pipeline's RL runs there.
    rl_device = ("--backend", "cpu" if backend == "cuda" else backend) + device[2:]
    every = ("--checkpoint-every", str(size.checkpoint_every)) if size.checkpoint_every else ()
    base, sft, rl = plan.path("base"), plan.path("sft"), plan.path("rl")
    limit = ("--max-per-task", str(size.max_per_task)) if size.max_per_task else ()
    plan.stages = {
        "tokenizer": [["tokenizer", "train", *text_flags(dataset), "--vocab-size", str(size.vocab_size),
                       "--name", plan.tokenizer]],
        "base": [["train", "--model-family", "nanochat", *text_flags(dataset), "--tokenizer", plan.tokenizer,
                  *size.geometry, *size.base_steps, *every, *device, "--output-dir", base, "--resume", "auto"]],
        "base-eval": [["eval", "--checkpoint", base, *device],
                      ["eval", "--checkpoint", base, "--tasks", "core", *limit, *device]],
        "sft": [["sft", "--init-from", base, "--mixture", size.sft_mixture, *size.sft_flags, *every, *device,
                 "--output-dir", sft, "--resume", "auto"]],
        "rl": [["rl", "--init-from", sft, "--task", size.rl_task, *size.rl_flags, *every, *rl_device,
                "--output-dir", rl, "--resume", "auto"]],
        "chat-eval": [["eval", "--checkpoint", rl, "--tasks", "chatcore", *limit, "--max-new-tokens",
                       str(size.max_new_tokens), *device]],
        "report": [["report", base], ["report", sft], ["report", rl]],
    }
    return plan


# Where each stage but the tokenizer leaves its result, in the output directory.
OUTPUTS = {"base": ("base",), "base-eval": ("base", "evals.jsonl"),
           "sft": ("sft",), "rl": ("rl",), "chat-eval": ("rl", "evals.jsonl"), "report": ("report.md",)}
