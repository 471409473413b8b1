"""Evaluate a checkpoint: loss and bits per byte on a dataset, or scores on CORE and ChatCORE tasks.

Loss mode (no --tasks): mean loss, perplexity and bits per byte on a dataset split, scored in
windows of the model's context with the native engine. Bits per byte divide the summed loss by
ln 2 and by the UTF-8 bytes of the decoded targets (end-of-text tokens excluded), as nanochat
does. Without --dataset, the data the checkpoint was trained on (its manifest names it).

Task mode (--tasks): accuracy per task and the centered accuracy (accuracy - chance) / (1 - chance).
  core       DCLM's CORE as nanochat's core_eval.py: few-shot prompts scored by the likelihood of
             each continuation (multiple choice, schema) or by exact greedy continuation
             (language modelling); CORE is the mean centered accuracy. 14 of DCLM's 22 tasks
             ship offline: hellaswag-zeroshot jeopardy arc-easy arc-challenge copa commonsenseqa
             piqa openbookqa lambada hellaswag winogrande squad coqa boolq
  chatcore   a chat model as nanochat's chat_eval.py: chat-arc-easy chat-arc-challenge mmlu (the
             letter with the highest logit after the question, in the chat format), gsm8k (greedy
             answer, the calculator running tool calls) and humaneval (the reply's code run against
             the tests in the sandbox); ChatCORE is the mean centered accuracy
Scores are appended to evals.jsonl in the checkpoint's directory (for `nfn report`) unless
--no-record. docs/evaluation.md lists the tasks, their shots, baselines and prompts.

examples:
  nfn eval --checkpoint gpt --max-tokens 20000 --json
  nfn eval --checkpoint smollm2 --tasks core --max-per-task 100
  nfn eval --checkpoint my-sft-run --tasks chatcore --json
  nfn eval --checkpoint smollm2 --tasks hellaswag-zeroshot,mmlu --max-per-task 50
"""
from nfn.cli.common import add_command


def register(sub):
    p = add_command(sub, "eval", __doc__)
    p.add_argument("--checkpoint", required=True, help="checkpoint directory, file, or artifact name")
    p.add_argument("--tasks", help="core, chatcore, or task ids separated by commas (task mode)")
    p.add_argument("--max-per-task", type=int, help="score the first N items of each task's fixed order")
    p.add_argument("--max-new-tokens", type=int,
                   help="tokens a generative task's answer may take (gsm8k, humaneval; default 512)")
    p.add_argument("--dataset", help="dataset alias or shard directory (default: the checkpoint's training data)")
    p.add_argument("--split", default="val", choices=["train", "val"], help="split (default: val)")
    p.add_argument("--max-tokens", type=int, help="stop after this many tokens")
    p.add_argument("--graph-file", help="manifest overriding the checkpoint's")
    p.add_argument("--weights", help="weights file overriding the checkpoint's")
    p.add_argument("--tokenizer", help="tokenizer overriding the manifest's (for files without one)")
    p.add_argument("--backend", choices=["cpu", "cuda", "auto"], default="auto")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads of the engine (default 0: the op library's choice, every core)")
    p.add_argument("--quantize", choices=["q8_0", "q4_1", "nf4", "bf16"],
                   help="keep a nanochat or llama model's block matrices quantized (weights near 1/4 the "
                        "size) or in bf16 (half; bf16 GEMMs on a CPU that has them)")
    p.add_argument("--context", type=int, default=0,
                   help="positions the KV cache holds, at most the model's (default: the model's; nanochat and llama)")
    p.add_argument("--no-record", action="store_true", help="do not append the scores to the checkpoint's evals.jsonl")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=run)


def run(args):
    if args.tasks is not None:
        from nfn.evals import suite
        return suite.run(args)
    from nfn.errors import UserError
    for flag, value in (("--max-per-task", args.max_per_task), ("--max-new-tokens", args.max_new_tokens)):
        if value is not None:
            raise UserError(f"{flag} belongs to the task mode (--tasks)")
    from nfn.infer import evaluate
    return evaluate.run(args)
