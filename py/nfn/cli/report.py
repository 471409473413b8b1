"""Write a checkpoint directory's report card: report.md and the loss curve loss.png.

As nanochat's report: the model (manifest.json), the training run (report.json, its losses from
log.jsonl drawn with matplotlib), bits per byte and every task score `nfn eval` recorded in the
directory's evals.jsonl (the latest of each). Nothing is recomputed: run `nfn eval --checkpoint DIR`
(bits per byte) and `nfn eval --checkpoint DIR --tasks core|chatcore` first. Prints the report's path.

examples:
  nfn report ~/NeuralFn/artifacts/gpt
  nfn report smollm2 --output /tmp/smollm2.md
"""
from nfn.cli.common import add_command


def register(sub):
    p = add_command(sub, "report", __doc__)
    p.add_argument("checkpoint_dir", metavar="CHECKPOINT_DIR", help="a checkpoint directory or an artifact name")
    p.add_argument("--output", help="where report.md goes (default: CHECKPOINT_DIR/report.md); loss.png beside it")
    p.set_defaults(run=run)


def run(args):
    from nfn.evals import report
    return report.run(args)
