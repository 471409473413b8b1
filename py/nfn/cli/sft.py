"""Fine-tune a checkpoint into a chat model on a task mixture (the native trainer, no PyTorch).

    nfn sft --init-from ~/NeuralFn/artifacts/nanochat --mixture chitchat,gsm8k*2,identity:me.jsonl
            --output-dir ~/NeuralFn/artifacts/chat [--init-optimizer] [trainer flags...]

--mixture: comma-separated tasks, each `NAME` or `NAME*W`: chitchat, gsm8k, arithmetic (`nfn rl
--task arithmetic`'s training questions), arc (arc-easy and arc-challenge), mmlu, or
identity:FILE (JSONL, one conversation a line: a list of {"role", "content"} messages or an
object with a "messages" list). W is a positive number of epochs: `gsm8k*2` twice, `mmlu*0.5`
its first half, `arc*1.5` once and its first half again.
The tasks are put in nanochat's chat_sft.py order and shuffled as its TaskMixture shuffles them.

The conversations are rendered with the checkpoint's tokenizer (its manifest names it; it must
have nanochat's chat tokens, as `nfn tokenizer train` makes them), packed by best fit into rows
of --train-seq-len + 1 tokens that start with BOS, and written as masked-row shards into the
dataset cache (reused while the mixture, tokenizer and row length are the same). The trainer
learns only the assistant's tokens (its text, tool calls and <|assistant_end|>): the losses it
reports, train and validation, are means over those. Geometry and family are the checkpoint's.
Unless a flag says otherwise: no warmup, constant then linear to 0 over the last half of the
steps, no weight decay, learning rates 0.8 of the family's defaults, one pass over the rows.
See docs/chat.md, "SFT".
"""
from nfn.cli.common import add_command
from nfn.errors import UserError

# Trainer flags nfn sft leaves out: the packing of pretraining token streams (nfn sft packs
# conversations itself), and the model's geometry and first weights, which are --init-from's.
NOT_FOR_SFT = ("packing", "packing-buffer", "weights", "graph-file", "template-name", "depth", "num-layers",
               "num-heads", "model-dim", "num-kv-heads", "mlp-hidden", "window-pattern", "rope-theta",
               "tie-embeddings")


def run(args):
    from nfn.sft import run as sft

    return sft.run(args)


def register(sub):
    from nfn.train import flags

    p = add_command(sub, "sft", __doc__)
    groups = {name: p.add_argument_group(name) for name in flags.GROUPS}
    try:
        table = [f for f in flags.load() if f["name"] not in NOT_FOR_SFT]
        p.set_defaults(trainer_flags=flags.add_trainer_flags(groups, table))
    except UserError as e:  # no generated table (not run through Bazel): said when it runs
        p.set_defaults(trainer_flags=e)
    data = groups["data"]
    data.add_argument("--mixture", required=True,
                      help="tasks to fine-tune on: NAME[*EPOCHS],... with NAME chitchat, gsm8k, arithmetic, arc, "
                           "arc-easy, arc-challenge, mmlu or identity:FILE (JSONL conversations)")
    data.add_argument("--val-fraction", type=float, default=0.05, metavar="X",
                      help="each task's last rows held out for validation (at least one of a task of two or more "
                           "rows; 0: none) (default: 0.05)")
    data.add_argument("--packing-buffer", dest="sft_packing_buffer", type=int, default=100, metavar="N",
                      help="conversations best fit chooses each row's from (default: 100, nanochat's SFT loader)")
    data.add_argument("--tokenizer", help="the chat tokenizer to render with (default: the checkpoint's, from its "
                                          "manifest)")
    groups["run"].add_argument("--print-command", action="store_true",
                               help="print the trainer argv and exit without building rows or training")
    p.set_defaults(run=run)
