"""Run the whole chat pipeline in one command: tokenizer, pretraining, evaluation, SFT, RL, report.

As nanochat's speedrun.sh: a chat BPE tokenizer trained on the corpus; a nanochat model
pretrained on it (bits per byte and CORE); SFT on the chat mixture; RL; ChatCORE of the final
model; the report cards (OUTPUT_DIR/report.md: a summary table, then each run's card). Each stage
is skipped when it finished before, and a stage interrupted part way (a kill, a crash) continues
from its last checkpoint when the pipeline runs again with the same arguments.

  --size tiny   4 layers of 256 channels, a 2,048-token vocabulary, 250 steps on the corpus; SFT
                on chit-chat and arithmetic; RL on the arithmetic task; evaluations of 16 items
                a task. About a minute and a half on 2 CPU cores.
  --depth N     the real run: nanochat's --depth recipe (64 x N channels, context 2048, tokens
                20x the parameters), a 65,536-token vocabulary, SFT on chit-chat, ARC, MMLU and
                GSM8K, RL on GSM8K, every item of every evaluation. Meant for GPUs.

OUTPUT_DIR holds datasets/ (the corpus's shards), base/, sft/, rl/, logs/STAGE.log, pipeline/ (the
finished stages) and report.md; the tokenizer, pipeline-HASH, goes to the tokenizers directory
with the others (`nfn chat --checkpoint OUTPUT_DIR/rl` finds it). See docs/pipeline.md.

examples:
  nfn pipeline --size tiny --output-dir ~/NeuralFn/artifacts/tiny-chat
  nfn pipeline --depth 20 --backend cuda --output-dir ~/NeuralFn/artifacts/d20 --json
"""
from nfn.cli.common import add_command


def register(sub):
    p = add_command(sub, "pipeline", __doc__)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--size", choices=["tiny"], help="a preset size (default: tiny unless --depth)")
    size.add_argument("--depth", type=int, help="the real run's depth (nanochat's d20 is 20)")
    p.add_argument("--output-dir", required=True, help="where every stage's output goes")
    p.add_argument("--dataset", default="shakespeare",
                   help="the corpus: a text alias (shakespeare, moby-dick), a UTF-8 file or a directory of "
                        ".txt files (default: shakespeare)")
    p.add_argument("--backend", choices=["cpu", "cuda", "auto"], default="auto")
    p.add_argument("--threads", type=int, default=0, help="CPU threads of every stage (default: every core)")
    p.add_argument("--dry-run", action="store_true", help="print the stages' commands and exit")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.set_defaults(run=run)


def run(args):
    import json
    from nfn.errors import UserError
    from nfn.pipeline import plan as plan_lib
    if args.depth is not None and not 1 <= args.depth <= 64:
        raise UserError(f"--depth must be in [1, 64] (got {args.depth})")
    if args.threads < 0:
        raise UserError(f"--threads must be >= 0 (got {args.threads})")
    size = plan_lib.depth_size(args.depth) if args.depth is not None else plan_lib.TINY
    plan = plan_lib.build(args.output_dir, size, args.dataset, args.backend, args.threads)
    if args.dry_run:
        stages = {name: [["nfn"] + argv for argv in cmds] for name, cmds in plan.stages.items()}
        print(json.dumps({"output_dir": plan.out, "size": size.name, "stages": stages}, indent=1))
        return 0
    from nfn.pipeline import run as run_lib, summary
    run_lib.run(plan)
    results = summary.stage_results(plan)
    if args.json:
        print(json.dumps({"output_dir": plan.out, "size": size.name, "stages": results,
                          "report": plan.path("report.md")}, indent=1))
    else:
        print("\n".join(summary.table(results)))
        print(f"report: {plan.path('report.md')}")
    return 0
