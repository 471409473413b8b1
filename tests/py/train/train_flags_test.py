"""The trainer's flags have one owner: the table the trainer binary itself prints
(--describe-flags). `nfn train`'s parser is built from the copy the build caches, and must hold
exactly those flags plus nfn train's own data and plan flags; every flag and each of its other
spellings reaches the trainer as given; two spellings that disagree, and abbreviations, are
refused."""
import json
import os
import subprocess
import tempfile
import unittest

import numpy as np
from nfn_probe import run_nfn
from shards import write_shard

from nfn.cli.main import build_parser
from nfn.train import flags

TRAINER = os.path.abspath(os.environ["NFN_TRAINER"])
BIN_DIR = os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"]))
# nfn train's own flags: which data to prepare (the trainer reads shards only) and the argv.
NFN_ONLY = {"--dataset", "--pretraining-file", "--tinystories", "--tokenizer", "--print-command", "--help", "-h"}
# A value of each type the trainer takes.
SAMPLE = {"int": "3", "float": "0.5", "text": "x"}


def nfn_train_options():
    """Every option string of `nfn train`'s parser."""
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return {s for action in sub.choices["train"]._actions for s in action.option_strings}


class TrainFlagsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.table = json.loads(subprocess.run([TRAINER, "--describe-flags"], capture_output=True, text=True,
                                              check=True).stdout)["flags"]
        cls.user = [f for f in cls.table if f["group"] != flags.INTERNAL]
        cls.tmp = tempfile.mkdtemp()
        cls.data = os.path.join(cls.tmp, "shards")
        os.makedirs(cls.data)
        write_shard(os.path.join(cls.data, "t_train_000000.bin"), np.arange(600) % 100)
        write_shard(os.path.join(cls.data, "t_val_000000.bin"), np.arange(200) % 100)
        cls.env = dict(NFN_NATIVE_BIN_DIR=BIN_DIR, NFN_ARTIFACTS_DIR=os.path.join(cls.tmp, "artifacts"))

    def print_command(self, *args):
        code, out, err, _ = run_nfn(["train", "--dataset", self.data, "--print-command", *args], env=self.env)
        self.assertEqual(code, 0, err)
        return out.split()

    def test_the_cached_table_is_the_trainers(self):
        self.assertEqual(flags.load(), self.table)

    def test_nfn_train_has_the_trainers_flags_and_only_its_own_besides(self):
        want = {"--" + n for f in self.user for n in [f["name"], *f["aliases"]]}
        self.assertEqual(nfn_train_options() - NFN_ONLY, want)
        internal = {"--" + f["name"] for f in self.table if f["group"] == flags.INTERNAL}
        # nfn train fills those from the dataset (its own --tokenizer chooses which to prepare).
        self.assertEqual(nfn_train_options() & internal - NFN_ONLY, set())

    def test_every_flag_and_spelling_reaches_the_trainer(self):
        graph = os.path.join(self.tmp, "graph.json")
        with open(graph, "w", encoding="utf-8") as f:
            json.dump({"format": "nfn.manifest", "version": 1}, f)
        for flag in self.user:
            if flag["name"] in flags.CONSUMED:
                continue
            value = graph if flag["name"] == "graph-file" else (
                flag["choices"][-1] if flag["choices"] else SAMPLE.get(flag["type"]))
            for spelling in [flag["name"], *flag["aliases"]]:
                with self.subTest(spelling=spelling):
                    given = ["--" + spelling] + ([] if flag["type"] == "toggle" else [value])
                    argv = self.print_command(*given)
                    at = argv.index("--" + flag["name"])
                    if flag["type"] != "toggle":
                        self.assertEqual(argv[at + 1], value)
        # An other spelling of a value: tile-cuda is cuda.
        argv = self.print_command("--kernel-backend", "tile-cuda")
        self.assertEqual(argv[argv.index("--backend") + 1], "cuda")

    def test_spellings_that_disagree_are_one_line(self):
        code, _, err, _ = run_nfn(["train", "--print-command", "--graph", "a.json", "--graph-file", "b.json"],
                                  env=self.env)
        self.assertEqual((code, err.strip()), (1, "nfn train: error: --graph a.json contradicts --graph-file b.json "
                                                  "(two spellings of one flag); give one"))
        proc = subprocess.run([TRAINER, "--preset", "gpt2-124m", "--template-name", "tiny", "--dry-run"],
                              capture_output=True, text=True)
        self.assertEqual((proc.returncode, proc.stderr.strip()),
                         (2, "nfn_gpt_native_train: error: --template-name tiny contradicts --preset gpt2-124m (two "
                             "spellings of one flag); give one"))
        # The same value twice is no contradiction.
        argv = self.print_command("--template", "tiny", "--template-name", "tiny")
        self.assertEqual(argv[argv.index("--template-name") + 1], "tiny")

    def test_abbreviations_are_refused(self):
        code, _, err, _ = run_nfn(["train", "--print-command", "--graph-fi", "a.json"], env=self.env)
        self.assertEqual(code, 2)
        self.assertIn("unrecognized arguments: --graph-fi", err)
        code, _, err, _ = run_nfn(["data", "prepare", "--data", self.data], env=self.env)
        self.assertEqual(code, 2)
        self.assertIn("--data", err)

    def test_values_are_checked_by_the_table(self):
        for given, says in ((["--max-steps", "0"], "--max-steps: 0 is out of range (at least 1)"),
                            (["--final-lr-fraction", "2"], "--final-lr-fraction 2: must be at most 1"),
                            (["--backend", "gpu"], "--backend gpu: expected one of cpu, cuda, auto")):
            proc = subprocess.run([TRAINER, *given, "--dry-run"], capture_output=True, text=True)
            self.assertEqual((proc.returncode, proc.stderr.strip()), (2, "nfn_gpt_native_train: error: " + says))


if __name__ == "__main__":
    unittest.main()
