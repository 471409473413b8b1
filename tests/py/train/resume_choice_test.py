"""The checkpoint `nfn infer --checkpoint DIR` samples and `nfn train --resume DIR` continues
is the one the trainer itself resumes from, with the seed its run had: checkpoint directories
are made by real trainer runs (several runs in one directory, a run resumed from an earlier
step, runs killed before a marker or with a state file lost, markers from before run ids),
then `nfn train --print-command --resume DIR` gives the argv Python builds, and that argv runs
the real trainer, whose report names the checkpoint it resumed from."""
import json
import os
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
from nfn_probe import run_nfn
from shards import write_shard

DISPATCHER = os.path.abspath(os.environ["NFN_DISPATCHER"])
SEED_A, SEED_B, SEED_C, SEED_D = 5, 2**53 + 1, -1, 2**63 - 1  # B, C and D: past a double, negative, the largest
GEOMETRY = ["--num-layers", "1", "--num-heads", "2", "--model-dim", "16", "--train-seq-len", "8",
            "--batch-size", "2", "--train-batch-tokens", "16", "--warmup-steps", "1", "--eval-every-steps", "100",
            "--eval-batches", "1", "--backend", "cpu", "--threads", "1", "--sample-tokens", "0"]


def model(step):
    return f"model_{step:08d}.bin"


class ResumeChoiceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.data = os.path.join(cls.tmp, "shards")
        os.makedirs(cls.data)
        rng = np.random.default_rng(0)
        # Four training shards, so that another seed is another shard order.
        for i in range(4):
            write_shard(os.path.join(cls.data, f"tiny_train_{i:06d}.bin"), rng.integers(0, 300, size=400))
        write_shard(os.path.join(cls.data, "tiny_val_000000.bin"), rng.integers(0, 300, size=100))
        cls.env = dict(NFN_NATIVE_BIN_DIR=os.path.dirname(DISPATCHER),
                       NFN_ARTIFACTS_DIR=os.path.join(cls.tmp, "artifacts"),
                       NFN_DATASETS_DIR=os.path.join(cls.tmp, "datasets"),
                       NFN_TOKENIZERS_DIR=os.path.join(cls.tmp, "tokenizers"))
        os.environ.update(cls.env)  # this process's own queries (nfn.infer.checkpoint) too
        cls.dirs = {}  # name -> (the step a resume continues, the step sampling takes: None = refused)
        cls.make_directories()

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    @classmethod
    def train(cls, out, seed, max_steps, every, *extra):
        proc = subprocess.run([DISPATCHER, "--base-model", "gpt", "--train-data", cls.data, "--val-data", cls.data,
                               "--tokenizer", "gpt2", "--vocab-size", "50257", "--output-dir", out, "--seed", str(seed),
                               "--max-steps", str(max_steps), "--checkpoint-every", str(every), *GEOMETRY, *extra],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr

    @classmethod
    def copy(cls, source, name, resume_step, sample_step):
        d = os.path.join(cls.tmp, name)
        shutil.copytree(source, d)
        cls.dirs[name] = (resume_step, sample_step)
        return d

    @classmethod
    def make_directories(cls):
        a = os.path.join(cls.tmp, "a")
        cls.train(a, SEED_A, 6, 2)  # run a: 2, 4, 6
        both = cls.copy(a, "fresh_run_after", 3, 3)
        cls.train(both, SEED_B, 3, 3)  # run b, afresh in a's directory: its 3, not a's later 6
        d = cls.copy(both, "last_run_left_none", None, None)  # b stopped before its marker: refused
        os.remove(os.path.join(d, "DONE_00000003"))
        d = cls.copy(a, "old_marker_below", 2, 2)  # as that, above an empty marker (any run's)
        open(os.path.join(d, "DONE_00000002"), "w").close()
        cls.train(d, SEED_B, 3, 3)
        os.remove(os.path.join(d, "DONE_00000003"))
        d = cls.copy(a, "rewound", 5, 5)  # a resumed from its step 2 wrote 4 again, then 5
        cls.train(d, SEED_A, 5, 2, "--resume", os.path.join(d, model(2)))
        d = cls.copy(d, "rewound_incomplete", 4, 4)  # and stopped before 5's marker: 4, not the old 6
        os.remove(os.path.join(d, "DONE_00000005"))
        d = cls.copy(a, "newest_without_state", 4, 6)  # a resume needs the state; sampling does not
        os.remove(os.path.join(d, "state_00000006_00000.bin"))
        d = cls.copy(a, "incomplete_newest", 6, 6)  # a run killed between model and marker
        shutil.copy(os.path.join(d, model(6)), os.path.join(d, model(8)))
        d = cls.copy(both, "before_run_ids", 6, 6)  # empty markers, a manifest without a run id
        for step in (2, 3, 4, 6):
            open(os.path.join(d, f"DONE_{step:08d}"), "w").close()
        with open(os.path.join(d, "manifest.json")) as f:
            manifest = json.load(f)
        del manifest["run_id"]
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        for name, seed in (("negative_seed", SEED_C), ("largest_seed", SEED_D)):
            cls.dirs[name] = (2, 2)
            cls.train(os.path.join(cls.tmp, name), seed, 2, 2)
        os.makedirs(os.path.join(cls.tmp, "empty"))
        cls.dirs["empty"] = (None, None)

    def sampled_step(self, d):
        """The step `nfn infer --checkpoint d` reads (None: refused, with the one line)."""
        code, out, err, _ = run_nfn(["infer", "--checkpoint", d, "--native-info"], env=self.env)
        if code != 0:
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            return None
        return json.loads(out)["step"]

    def resumed(self, d, *extra):
        """`nfn train --resume d` as Python builds it, run: (its argv, the trainer's exit, report
        or None, stderr)."""
        code, out, err, _ = run_nfn(["train", "--print-command", "--resume", d, "--output-dir", d, "--dataset",
                                     self.data, "--max-steps", "10", *GEOMETRY, *extra], env=self.env)
        self.assertEqual(code, 0, err)
        argv = out.split()
        proc = subprocess.run(argv + ["--json"], capture_output=True, text=True, timeout=300)
        return argv, proc.returncode, json.loads(proc.stdout) if proc.returncode == 0 else None, proc.stderr

    def marker_seed(self, d, step):
        with open(os.path.join(d, f"DONE_{step:08d}")) as f:
            text = f.read()
        return json.loads(text)["training"]["seed"] if text else None

    def test_python_and_the_trainer_take_the_same_checkpoint_and_seed(self):
        from nfn.errors import UserError
        from nfn.infer import checkpoint
        for name, (resume_step, sample_step) in sorted(self.dirs.items()):
            with self.subTest(directory=name):
                d = os.path.join(self.tmp, name)
                try:
                    asked = checkpoint.resolve(d, for_resume=True).step
                except UserError:
                    asked = None
                self.assertEqual(asked, resume_step)
                self.assertEqual(self.sampled_step(d), sample_step)
                seed = self.marker_seed(d, resume_step) if resume_step is not None else None
                argv, code, report, err = self.resumed(d)
                if resume_step is None:  # the trainer refuses too, naming the other run's newest
                    self.assertEqual(code, 1, err)
                    if name != "empty":
                        self.assertIn(f"{model(6)} is another run's", err)
                    continue
                self.assertEqual(code, 0, err)
                self.assertEqual(report["resumed_from"], os.path.join(d, model(resume_step)))
                # nfn train names no seed: the trainer takes the marker's (None: a marker from
                # before run ids records none), and the data position applies.
                self.assertNotIn("--seed", argv)
                self.assertEqual(report["config"]["seed"], seed if seed is not None else 1337)
                self.assertNotIn("reading the data from the start", err)

    def test_another_seed_is_noticed(self):
        # The check above has teeth: with these shards, a seed other than the run's is another
        # shard order, and the trainer says it reads the data from the start.
        d = os.path.join(self.tmp, "control")
        shutil.copytree(os.path.join(self.tmp, "a"), d)
        _, code, _, err = self.resumed(d, "--seed", str(SEED_B))
        self.assertEqual(code, 0, err)
        self.assertIn(f"(seed {SEED_A}): reading the data from the start", err)


if __name__ == "__main__":
    unittest.main()
