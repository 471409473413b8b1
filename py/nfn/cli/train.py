"""Train a model with the compiled native trainer (no Python in the training process).

Prepares the dataset when it is not cached, then runs nfn_<family>_native_train. With no
arguments it trains a small GPT on the default corpus (Shakespeare, fetched once, with the sp1024
tokenizer) in about three minutes on the CPU.
"""
from nfn.cli.common import add_command
from nfn.errors import UserError


def run(args):
    from nfn.train import launch

    return launch.run(args)


def register(sub):
    from nfn.train import flags

    p = add_command(sub, "train", __doc__)
    groups = {name: p.add_argument_group(name) for name in flags.GROUPS}
    try:
        p.set_defaults(trainer_flags=flags.add_trainer_flags(groups))
    except UserError as e:  # no generated table (not run through Bazel): said when it runs
        p.set_defaults(trainer_flags=e)
    # nfn train's own: which data to prepare, and how to show the plan.
    data = groups["data"]
    source = data.add_mutually_exclusive_group()
    source.add_argument("--dataset", help="dataset alias or shard directory (default: shakespeare)")
    source.add_argument("--pretraining-file", help="UTF-8 text file or directory of .txt files")
    source.add_argument("--tinystories", action="store_true", help="the TinyStories dataset")
    data.add_argument("--tokenizer", help="gpt2, sp1024..sp8192 or a trained name (default: the resumed "
                                           "run's, else gpt2; sp1024 for the demo, when no dataset, template "
                                           "or graph file is named)")
    groups["run"].add_argument("--print-command", action="store_true",
                               help="print the trainer argv and exit without starting it")
    p.set_defaults(run=run)
