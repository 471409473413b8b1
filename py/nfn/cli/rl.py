"""Reinforcement learning of a chat model on questions with checkable answers (nanochat's chat_rl).

    nfn rl --init-from ~/NeuralFn/artifacts/sft --output-dir ~/NeuralFn/artifacts/rl
           [--task gsm8k|arithmetic] [--steps 100] [--samples 16] [--resume auto]

From a chat model (an `nfn sft` output: nanochat or llama, its tokenizer with a chat format),
each step takes --examples-per-step training questions and samples --samples completions of
each on the KV-cached engine (the prompt prefilled once; tool calls run by the calculator as in
`nfn chat`). Reward 1 for the exact answer after "#### ", else 0; advantage = reward minus the
question's mean; loss = -sum advantage * log p over the sampled tokens, normalised as chat_rl.py
(no KL, no ratio clipping). Learning rates are --init-lr-frac of the family's, decaying linearly
to 0 over --steps. Each step prints the mean reward and the sampled tokens/s; every --eval-every
steps, greedy pass@1 on held-out questions (never trained on). The output directory is a
decoder checkpoint directory, as the trainers write (`nfn chat --checkpoint DIR` takes it);
--resume auto continues its newest complete checkpoint bit for bit (the sampler's RNG and the
question order are in its state file), log.jsonl and report.json beside it.

--task gsm8k: the GSM8K problems that ship offline (the test split): the first 1,000 train, the
other 319 are held out. --task arithmetic: "a+b" and "a-b" over 0..9, answered "#### N", a
reward a tiny model reaches. Training runs on the CPU op library. See docs/rl.md.
"""
from nfn.cli.common import add_command


def run(args):
    from nfn.rl import run as rl

    return rl.run(args)


def register(sub):
    p = add_command(sub, "rl", __doc__)
    p.add_argument("--init-from", help="the chat model: an `nfn sft` output directory or its model_%%08d.bin")
    p.add_argument("--output-dir", help="where checkpoints, log.jsonl and report.json go")
    p.add_argument("--task", default="gsm8k", choices=["gsm8k", "arithmetic"], help="(default: gsm8k)")
    p.add_argument("--steps", "--max-steps", dest="steps", type=int, default=100, metavar="N",
                   help="optimizer steps (default: 100)")
    p.add_argument("--samples", type=int, default=16, metavar="N",
                   help="completions sampled per question (default: 16)")
    p.add_argument("--examples-per-step", type=int, default=16, metavar="N",
                   help="questions per optimizer step (default: 16)")
    p.add_argument("--max-new-tokens", type=int, default=256, metavar="N", help="(default: 256)")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: 1.0)")
    p.add_argument("--top-k", type=int, default=50, help="(default: 50)")
    p.add_argument("--init-lr-frac", type=float, default=0.05, metavar="X",
                   help="the family's learning rates times this at step 1, then linear to 0 (default: 0.05)")
    p.add_argument("--learning-rate", type=float, default=3e-4, metavar="LR",
                   help="llama's AdamW peak, before --init-lr-frac (default: 3e-4; nanochat uses its own "
                        "per-group rates)")
    p.add_argument("--max-grad-norm", type=float, default=0.0, metavar="X", help="clip (default: 0, none)")
    p.add_argument("--eval-every", "--eval-every-steps", dest="eval_every", type=int, default=20, metavar="N",
                   help="greedy pass@1 on held-out questions every N steps and at the end (0: never; default: 20)")
    p.add_argument("--eval-examples", type=int, default=100, metavar="N",
                   help="held-out questions pass@1 reads (default: 100)")
    p.add_argument("--checkpoint-every", type=int, default=0, metavar="N",
                   help="a checkpoint every N steps (0: only the last; default: 0)")
    p.add_argument("--resume", default="none", choices=["auto", "none"],
                   help="auto: continue the output directory's newest complete checkpoint (default: none)")
    p.add_argument("--seed", type=int, default=0, help="question order and sampling seed (default: 0)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads of the sampling engine (0: all)")
    p.add_argument("--backend", default="auto", choices=["cpu", "cuda", "auto"],
                   help="the op library: training runs on the CPU one (auto: cpu; cuda is refused)")
    p.add_argument("--json", action="store_true", help="print the report as JSON (progress goes to stderr)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(run=run)
