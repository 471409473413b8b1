"""`nfn train` end to end: the argv it builds for a cached dataset (without importing numpy or
the native module), and a short real run whose report and decoded sample land on disk."""
import json
import os
import tempfile
import unittest

import numpy as np
from nfn_probe import run_nfn
from shards import write_shard

BIN_DIR = os.path.dirname(os.path.abspath(os.environ["NFN_DISPATCHER"]))

class TrainCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.data = os.path.join(cls.tmp, "shards")
        os.makedirs(cls.data)
        rng = np.random.default_rng(0)
        tokens = np.tile(rng.integers(0, 300, size=50), 100)
        write_shard(os.path.join(cls.data, "tiny_train_000000.bin"), tokens[:4000])
        write_shard(os.path.join(cls.data, "tiny_val_000000.bin"), tokens[4000:])
        cls.env = dict(NFN_NATIVE_BIN_DIR=BIN_DIR,
                       NFN_ARTIFACTS_DIR=os.path.join(cls.tmp, "artifacts"),
                       NFN_DATASETS_DIR=os.path.join(cls.tmp, "datasets"),
                       NFN_TOKENIZERS_DIR=os.path.join(cls.tmp, "tokenizers"))

    def nfn(self, args):
        return run_nfn(args, env=self.env, timeout=600)

    def test_print_command_for_cached_shards_is_import_light(self):
        code, out, err, modules = self.nfn(["train", "--dataset", self.data, "--max-steps", "7", "--print-command"])
        self.assertEqual(code, 0, err)
        argv = out.split()
        self.assertEqual(argv[0], os.path.join(BIN_DIR, "nfn_native_train"))
        self.assertEqual(argv[argv.index("--train-data") + 1], os.path.join(self.data, "tiny_train_000000.bin"))
        self.assertEqual(argv[argv.index("--val-data") + 1], os.path.join(self.data, "tiny_val_000000.bin"))
        self.assertEqual(argv[argv.index("--max-steps") + 1], "7")
        self.assertEqual(argv[argv.index("--vocab-size") + 1], "50257")
        self.assertNotIn("--output-dir", argv)  # the trainer's default: its family's artifacts folder
        for heavy in ("numpy", "nfn._native", "tiktoken", "torch"):
            self.assertNotIn(heavy, modules)

    def test_print_command_prepares_nothing(self):
        text = os.path.join(self.tmp, "corpus.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("never tokenized by --print-command\n")
        code, out, err, modules = self.nfn(["train", "--pretraining-file", text, "--tokenizer", "sp1024",
                                       "--print-command"])
        self.assertEqual(code, 0, err)
        self.assertIn("# dataset not prepared yet", out)
        argv = out.split()
        self.assertEqual(argv[argv.index("--vocab-size") + 1], "1024")
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "datasets")), "print-command must not prepare")
        self.assertNotIn("numpy", modules)

    def test_demo_takes_sp1024_and_named_data_gpt2(self):
        def tokenizer(extra):
            code, out, err, modules = self.nfn(["train", "--print-command"] + extra)
            self.assertEqual(code, 0, err)
            self.assertNotIn("numpy", modules)
            argv = out.split()
            return argv[argv.index("--tokenizer") + 1], argv[argv.index("--vocab-size") + 1]
        self.assertEqual(tokenizer([]), ("sp1024", "1024"))
        self.assertEqual(tokenizer(["--max-steps", "5", "--num-layers", "2"]), ("sp1024", "1024"))
        self.assertEqual(tokenizer(["--dataset", "shakespeare"]), ("gpt2", "50257"))
        self.assertEqual(tokenizer(["--template-name", "gpt2-124m"]), ("gpt2", "50257"))
        self.assertEqual(tokenizer(["--tokenizer", "sp2048"]), ("sp2048", "2048"))
        # resuming keeps the run's tokenizer: a GPT-2-tokenized demo run stays GPT-2
        run = os.path.join(self.tmp, "gpt2_demo_run")
        os.makedirs(run, exist_ok=True)
        with open(os.path.join(run, "manifest.json"), "w", encoding="utf-8") as f:
            json.dump({"format": "nfn.manifest", "tokenizer": "gpt2"}, f)
        self.assertEqual(tokenizer(["--resume", run]), ("gpt2", "50257"))
        self.assertEqual(tokenizer(["--resume", os.path.join(run, "model_00000300.bin")]), ("gpt2", "50257"))
        self.assertEqual(tokenizer(["--resume", "auto", "--output-dir", run]), ("gpt2", "50257"))
        self.assertEqual(tokenizer(["--resume", "auto", "--output-dir", os.path.join(self.tmp, "fresh")]),
                         ("sp1024", "1024"))
        # a new folder inside a run's is no resume of that run
        self.assertEqual(tokenizer(["--resume", "auto", "--output-dir", os.path.join(run, "newrun")]),
                         ("sp1024", "1024"))
        self.assertEqual(tokenizer(["--resume", run, "--tokenizer", "sp2048"]), ("sp2048", "2048"))

    def test_resume_follows_the_runs_data(self):
        def resumed(manifest, extra=()):
            run = tempfile.mkdtemp(dir=self.tmp)
            with open(os.path.join(run, "manifest.json"), "w", encoding="utf-8") as f:
                json.dump(manifest, f)
            code, out, err, modules = self.nfn(["train", "--print-command", "--resume", run, *extra])
            self.assertEqual(code, 0, err)
            self.assertNotIn("numpy", modules)
            argv = out.split()
            return argv[argv.index("--dataset-name") + 1], argv[argv.index("--train-data") + 1]
        text = os.path.join(self.tmp, "story.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("a story never tokenized by --print-command\n")
        gpt2 = {"format": "nfn.manifest", "tokenizer": "gpt2"}
        # An alias, a shards directory, pretraining text: each comes back as it was named.
        self.assertEqual(resumed({**gpt2, "dataset": {"name": "moby-dick"}})[0], "moby-dick")
        self.assertEqual(resumed({**gpt2, "dataset": {"name": self.data}}),
                         (self.data, os.path.join(self.data, "tiny_train_000000.bin")))
        self.assertEqual(resumed({**gpt2, "dataset": {"name": text}})[0], text)
        # Data named on the command line wins; a manifest without a dataset keeps the demo.
        self.assertEqual(resumed({**gpt2, "dataset": {"name": "moby-dick"}}, ["--dataset", self.data])[0], self.data)
        self.assertEqual(resumed({**gpt2, "dataset": {"name": ""}})[0], "shakespeare")
        # A checkpoint named by its file follows its own marker's manifest, not manifest.json,
        # which another run sharing the directory may have written since.
        run = tempfile.mkdtemp(dir=self.tmp)
        with open(os.path.join(run, "manifest.json"), "w", encoding="utf-8") as f:
            json.dump({**gpt2, "dataset": {"name": "moby-dick"}, "run_id": "bbbb", "step": 3}, f)
        with open(os.path.join(run, "DONE_00000006"), "w", encoding="utf-8") as f:
            json.dump({**gpt2, "dataset": {"name": self.data}, "run_id": "aaaa", "step": 6}, f)
        open(os.path.join(run, "model_00000006.bin"), "wb").close()
        code, out, err, _ = self.nfn(["train", "--print-command", "--resume", os.path.join(run, "model_00000006.bin")])
        self.assertEqual(code, 0, err)
        self.assertEqual(out.split()[out.split().index("--dataset-name") + 1], self.data)
        # Data that is gone is one line naming it, not a silent switch to the demo.
        gone = os.path.join(self.tmp, "deleted_shards")
        run = tempfile.mkdtemp(dir=self.tmp)
        with open(os.path.join(run, "manifest.json"), "w", encoding="utf-8") as f:
            json.dump({**gpt2, "dataset": {"name": gone}}, f)
        code, _, err, _ = self.nfn(["train", "--print-command", "--resume", run])
        self.assertEqual(code, 1)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertIn(f"{gone}: no such file or directory (the data of the run --resume continues", err)

    def test_short_run_writes_report_and_sample(self):
        out_dir = os.path.join(self.tmp, "run")
        code, out, err, _ = self.nfn(["train", "--dataset", self.data, "--num-layers", "1", "--num-heads", "2",
                                 "--model-dim", "32", "--train-seq-len", "16", "--batch-size", "2",
                                 "--max-steps", "3", "--eval-batches", "2", "--sample-tokens", "8",
                                 "--backend", "cpu", "--output-dir", out_dir, "--json"])
        self.assertEqual(code, 0, err)
        report = json.loads(out)
        self.assertEqual(report["steps"], 3)
        self.assertEqual(len(report["sample_tokens"]), 8)
        with open(os.path.join(out_dir, "sample.txt"), encoding="utf-8") as f:
            self.assertEqual(f.read(), report["sample_text"])
        self.assertTrue(os.path.exists(os.path.join(out_dir, "DONE_00000003")))
        self.assertIsNotNone(report["final_validation_loss"])
        # A run that samples nothing leaves no earlier run's sample beside its report.
        code, _, err, _ = self.nfn(["train", "--dataset", self.data, "--num-layers", "1", "--num-heads", "2",
                                    "--model-dim", "32", "--train-seq-len", "16", "--batch-size", "2",
                                    "--max-steps", "3", "--eval-batches", "2", "--sample-tokens", "0",
                                    "--backend", "cpu", "--output-dir", out_dir, "--seed", "9"])
        self.assertEqual(code, 0, err)
        self.assertFalse(os.path.exists(os.path.join(out_dir, "sample.txt")))

    def test_flags_and_shards_meet_the_trainer_as_given(self):
        def argv(*flags):
            code, out, err, modules = self.nfn(["train", "--print-command", *flags])
            self.assertEqual(code, 0, err)
            self.assertNotIn("numpy", modules)
            return out.split()

        def value(args, flag):
            return args[args.index(flag) + 1] if flag in args else None

        # Shards prepared with sp1024 (a meta.json saying so): its eot id travels with them, and
        # --tokenizer naming another is one line, not silently replaced.
        shards = os.path.join(self.tmp, "sp_shards")
        os.makedirs(shards, exist_ok=True)
        tokens = np.arange(2000) % 1000
        write_shard(os.path.join(shards, "x_train_000000.bin"), tokens)
        write_shard(os.path.join(shards, "x_val_000000.bin"), tokens[:500])
        with open(os.path.join(shards, "meta.json"), "w", encoding="utf-8") as f:
            json.dump({"schema": 1, "tokenizer": {"name": "sp1024"}, "eot_id": 7}, f)  # not sp1024's own 1
        got = argv("--dataset", shards)
        self.assertEqual((value(got, "--tokenizer"), value(got, "--eot-token")), ("sp1024", "7"))
        with open(os.path.join(shards, "meta.json"), "w", encoding="utf-8") as f:
            json.dump({"schema": 2, "tokenizer": {"name": "sp1024"}, "eot_id": 7}, f)  # not nfn's schema: not read
        got = argv("--dataset", shards)
        self.assertEqual((value(got, "--tokenizer"), value(got, "--eot-token")), ("gpt2", "50256"))
        with open(os.path.join(shards, "meta.json"), "w", encoding="utf-8") as f:
            json.dump({"schema": 1, "tokenizer": {"name": "sp1024"}, "eot_id": 7}, f)
        code, _, err, _ = self.nfn(["train", "--print-command", "--dataset", shards, "--tokenizer", "gpt2"])
        self.assertEqual(code, 1)
        self.assertIn(f"--tokenizer gpt2: the shards in {shards} are tokenized with sp1024", err)
        # A --graph-file names its model's tokenizer, which the data and the eot id follow.
        graph = os.path.join(self.tmp, "graph.json")
        with open(graph, "w", encoding="utf-8") as f:
            json.dump({"format": "nfn.manifest", "version": 1, "tokenizer": "sp1024"}, f)
        text = os.path.join(self.tmp, "graph_text.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("a text never tokenized by --print-command\n")
        got = argv("--graph-file", graph, "--pretraining-file", text)
        self.assertEqual((value(got, "--tokenizer"), value(got, "--eot-token")), ("sp1024", "1"))
        # and its family, which the trainer's output folder follows (it refuses another named one)
        with open(graph, "w", encoding="utf-8") as f:
            json.dump({"format": "nfn.manifest", "version": 1, "tokenizer": "sp1024", "model_family": "gpt2",
                       "geometry": {"max_seq_len": 64, "vocab_size": 1024, "padded_vocab_size": 1024,
                                    "num_layers": 1, "num_heads": 2, "channels": 32}}, f)
        code, out, err, _ = self.nfn(["train", "--graph-file", graph, "--pretraining-file", text, "--dry-run"])
        self.assertEqual(code, 0, err)
        self.assertEqual((json.loads(out)["model_family"], json.loads(out)["output_dir"]),
                         ("gpt2", os.path.join(self.tmp, "artifacts", "gpt2")))
        self.assertEqual(value(argv("--graph-file", graph, "--pretraining-file", text, "--base-model", "gpt2"),
                               "--model-family"), "gpt2")
        code, _, err, _ = self.nfn(["train", "--dry-run", "--graph-file", graph, "--pretraining-file", text,
                                    "--base-model", "gpt3"])
        self.assertEqual((code, err.strip()), (2, f"nfn_gpt_native_train: error: --model-family gpt3 contradicts "
                                                  f"{graph}, whose model_family is gpt2; give one"))
        with open(graph, "w", encoding="utf-8") as f:
            json.dump({"format": "nfn.manifest", "version": 1, "model_family": "embedding"}, f)
        code, _, err, _ = self.nfn(["train", "--dry-run", "--graph-file", graph, "--pretraining-file", text])
        self.assertEqual(code, 2, err)
        self.assertTrue(err.strip().startswith(f"nfn_native_train: error: {graph}: model_family embedding: no "
                                               "trainer yet"), err)
        # The seed is the trainer's to choose (a resumed run keeps its own unless --seed names
        # another: trainer_run_test): nfn train passes --seed only as given.
        resumed = os.path.join(self.tmp, "resumed_seed")
        os.makedirs(resumed)
        with open(os.path.join(resumed, "manifest.json"), "w", encoding="utf-8") as f:
            json.dump({"format": "nfn.manifest", "version": 1, "training": {"seed": 42}}, f)
        self.assertIsNone(value(argv("--dataset", self.data, "--resume", resumed), "--seed"))
        self.assertEqual(value(argv("--dataset", self.data, "--resume", resumed, "--seed", "3"), "--seed"), "3")
        self.assertIsNone(value(argv("--dataset", self.data), "--seed"))
        # GPT-2 shards without a meta.json: gpt2's end of text.
        self.assertEqual(value(argv("--dataset", self.data), "--eot-token"), "50256")
        # Flags docs/training.md names reach the trainer.
        got = argv("--dataset", self.data, "--checkpoint-dtype", "bf16", "--max-grad-norm", "0.5", "--weights",
                   "/w/model_00000001.bin")
        self.assertEqual((value(got, "--checkpoint-dtype"), value(got, "--max-grad-norm"), value(got, "--weights")),
                         ("bf16", "0.5", "/w/model_00000001.bin"))
        self.assertEqual(value(argv("--dataset", self.data, "--base-model", "gpt2"), "--model-family"), "gpt2")
        for flags, says in [(["--base-model", "gpt2", "--model-family", "gpt3"], "contradicts"),
                            (["--pretraining-file", ""], "an empty path"), (["--dataset", ""], "an empty path")]:
            code, _, err, _ = self.nfn(["train", "--print-command", *flags])
            self.assertEqual((code, len(err.strip().splitlines())), (1, 1), err)
            self.assertIn(says, err)
        # --dry-run plans without opening the op library: a GPU run's plan on any machine.
        code, out, err, _ = self.nfn(["train", "--dataset", self.data, "--template-name", "gpt2-124m", "--backend",
                                      "cuda", "--attention", "cudnn", "--dry-run"])
        self.assertEqual(code, 0, err)
        self.assertGreater(json.loads(out)["memory_gib"]["bf16"], 1)
        for workers in ("0", "-3"):
            code, _, err, _ = self.nfn(["data", "prepare", "--dataset", self.data, "--workers", workers])
            self.assertEqual(code, 1)
            self.assertIn("--workers must be at least 1", err)

    def test_backend_options_reach_the_trainer(self):
        code, out, err, _ = self.nfn(["train", "--dataset", self.data, "--matmul", "f32", "--attention", "flash_mma",
                                      "--graphs", "on", "--gemm-tune", "on", "--deterministic", "off",
                                      "--overlap", "on", "--pdl", "on", "--print-command"])
        self.assertEqual(code, 0, err)
        argv = out.split()
        self.assertEqual(argv[argv.index("--matmul") + 1], "f32")
        self.assertEqual(argv[argv.index("--attention") + 1], "flash_mma")
        for flag, value in (("--graphs", "on"), ("--gemm-tune", "on"), ("--deterministic", "off"), ("--overlap", "on"),
                            ("--pdl", "on")):
            self.assertEqual(argv[argv.index(flag) + 1], value, flag)
        # The CPU library has no attention option: refused in one line naming the flag.
        code, _, err, _ = self.nfn(["train", "--dataset", self.data, "--num-layers", "1", "--num-heads", "2",
                                    "--model-dim", "32", "--train-seq-len", "16", "--batch-size", "2",
                                    "--max-steps", "1", "--backend", "cpu", "--attention", "flash_mma",
                                    "--output-dir", os.path.join(self.tmp, "refused")])
        self.assertEqual(code, 2)  # a bad flag
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertIn("--attention", lines[0])
        self.assertIn("unknown option attention", lines[0])

    def test_unknown_family_is_one_line(self):
        code, _, err, _ = self.nfn(["train", "--base-model", "embedding", "--dataset", self.data])
        self.assertEqual(code, 2)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertTrue(err.startswith("nfn_native_train: error: --model-family embedding: no trainer yet"), err)

    def test_bad_flag_fails_before_any_preparation(self):
        # An uncached corpus would take a tokenizer's training and an encoding first: the
        # trainer's own check of its flags must come before them.
        text = os.path.join(self.tmp, "unprepared.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("a corpus that a bad flag must leave unprepared\n")
        datasets = os.path.join(self.tmp, "datasets_of_bad_flag")
        code, _, err, _ = run_nfn(["train", "--pretraining-file", text, "--tokenizer", "sp1024",
                                   "--num-layers", "0"],
                                  env=dict(self.env, NFN_DATASETS_DIR=datasets), timeout=600)
        self.assertEqual(code, 2, err)
        self.assertEqual(err.strip(), "nfn_gpt_native_train: error: --num-layers: 0 is out of range (at least 1)")
        self.assertFalse(os.path.exists(datasets), "a bad flag must not prepare the dataset")
        # What only the op library, the checkpoint or the file system can refuse is checked by
        # the same check (--check): each fails in a moment, with the dataset still unprepared.
        blocker = os.path.join(self.tmp, "a_file")
        open(blocker, "w").close()
        for flags, code_want, says in [
                (["--threads", "0"], 2, "--threads: configure: threads=0 is not a count in 1..4096"),
                (["--dtype", "bf16"], 2, "--dtype bf16: the CPU op library stores f32 only"),
                (["--graphs", "on"], 2, "--graphs on:"),
                (["--attention", "flash"], 2, "--attention:"),
                (["--resume", os.path.join(self.tmp, "no_such_run")], 1, "--resume"),
                (["--output-dir", os.path.join(blocker, "run")], 1, "is not a directory"),
                (["--tile-ops-lib", os.path.join(self.tmp, "missing.so")], 1, "missing.so")]:
            with self.subTest(flags=flags):
                code, _, err, _ = run_nfn(["train", "--pretraining-file", text, "--backend", "cpu", *flags],
                                          env=dict(self.env, NFN_DATASETS_DIR=datasets), timeout=600)
                self.assertEqual((code, len(err.strip().splitlines())), (code_want, 1), err)
                self.assertIn(says, err)
                self.assertFalse(os.path.exists(datasets), "a bad flag must not prepare the dataset")


if __name__ == "__main__":
    unittest.main()
