"""`nfn eval` against a reference computed here: the split's tokens cut into context-sized
windows, each scored by an independent numpy GPT-2 forward; loss, perplexity and bits per
byte (decoded UTF-8 bytes of the targets, end-of-text excluded) recomputed from scratch."""
import json
import math
import os
import shutil
import struct
import tempfile
import unittest

import numpy as np

import fixtures
from nfn import tokenizers

T, V, L, NH, C = 32, 50257, 2, 2, 32
EOT = 50256
TEXT = ["First Citizen: Before we proceed any further, hear me speak.",
        "All: Speak, speak. You are all resolved rather to die than to famish?",
        "Caf\u00e9 na\u00efve \u2014 \u00fcber \u6771\u4eac: bytes that are not ASCII.",
        "Second Citizen: One word, good citizens."]


def write_shard(path, tokens):
    with open(path, "wb") as f:
        f.write(struct.pack("<3i", 20240520, 1, len(tokens)) + bytes(1012))
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def log_softmax_at(logits, targets):
    m = logits.max(-1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logits - m).sum(-1))
    return lse - logits[np.arange(len(targets)), targets]


class EvalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.geom, cls.params = fixtures.random_model(T, V, L, NH, C, seed=4)
        cls.ckpt = os.path.join(cls.tmp, "run")
        os.makedirs(cls.ckpt)
        fixtures.write_llmc_by_hand(os.path.join(cls.ckpt, "model_00000010.bin"), cls.geom, cls.params)
        open(os.path.join(cls.ckpt, "DONE_00000010"), "w").close()
        with open(os.path.join(cls.ckpt, "manifest.json"), "w") as f:
            json.dump({"format": "nfn.manifest", "version": 1, "geometry": cls.geom, "tokenizer": "gpt2",
                       "eot_token": EOT}, f)
        tok = tokenizers.load("gpt2")
        stream = []
        for text in TEXT * 3:
            stream += [EOT] + tok.encode(text)
        cls.tokens = np.array(stream, dtype=np.int64)
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)
        write_shard(os.path.join(cls.data, "tiny_train_000000.bin"), stream[:40])
        write_shard(os.path.join(cls.data, "tiny_val_000000.bin"), stream)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def reference(self, max_tokens=None):
        tokens = self.tokens if max_tokens is None else self.tokens[:max_tokens + 1]
        hf = fixtures.llmc_to_hf_names(self.params, V)
        losses = []
        for start in range(0, len(tokens) - 1, T):
            inputs = tokens[start:start + T]
            targets = tokens[start + 1:start + T + 1]
            inputs = inputs[:len(targets)]
            losses.append(log_softmax_at(fixtures.hf_forward(hf, inputs, NH), targets))
        losses = np.concatenate(losses)
        targets = tokens[1:]
        keep = targets != EOT
        nbytes = len(tokenizers.load("gpt2").decode(targets[keep].tolist()).encode("utf-8"))
        loss = losses.mean()
        return {"loss": loss, "perplexity": math.exp(loss), "tokens": len(losses),
                "bits_per_byte": losses[keep].sum() / math.log(2) / nbytes}

    def check(self, max_tokens=None):
        args = ["eval", "--checkpoint", self.ckpt, "--dataset", self.data, "--json", "--backend", "cpu"]
        if max_tokens:
            args += ["--max-tokens", str(max_tokens)]
        code, out, err, _ = fixtures.run_nfn(args)
        self.assertEqual(code, 0, err)
        got, want = json.loads(out), self.reference(max_tokens)
        self.assertEqual(got["tokens"], want["tokens"])
        for key in ("loss", "perplexity", "bits_per_byte"):
            self.assertAlmostEqual(got[key], want[key], delta=2e-5 * abs(want[key]), msg=key)

    def test_metrics_against_reference(self):
        self.assertGreater(len(self.tokens), 3 * T)  # several windows, the last one partial
        self.check()

    def test_max_tokens(self):
        self.check(max_tokens=45)

    def test_the_checkpoints_own_data_by_default(self):
        """Without --dataset, the data its manifest names: the same numbers as naming it."""
        own = os.path.join(self.tmp, "own")
        shutil.copytree(self.ckpt, own)
        with open(os.path.join(own, "manifest.json")) as f:
            manifest = json.load(f)
        manifest["dataset"] = {"name": self.data, "seq_len": T}
        with open(os.path.join(own, "manifest.json"), "w") as f:
            json.dump(manifest, f)
        code, out, err, _ = fixtures.run_nfn(["eval", "--checkpoint", own, "--json", "--backend", "cpu",
                                              "--max-tokens", "45"])
        self.assertEqual(code, 0, err)
        got, want = json.loads(out), self.reference(45)
        self.assertEqual(got["dataset"], self.data)
        self.assertEqual(got["tokens"], want["tokens"])
        self.assertAlmostEqual(got["loss"], want["loss"], delta=2e-5 * want["loss"])

    def test_without_a_manifest_the_tokenizers_end_of_text(self):
        """An llm.c file alone (GPT-2's vocabulary says gpt2): its end-of-text token, the
        tokenizer's, is still left out of the bytes, so the numbers are the manifest's."""
        bare = os.path.join(self.tmp, "bare")
        os.makedirs(bare)
        for name in ("model_00000010.bin", "DONE_00000010"):
            shutil.copy(os.path.join(self.ckpt, name), bare)
        code, out, err, _ = fixtures.run_nfn(["eval", "--checkpoint", bare, "--dataset", self.data, "--json",
                                              "--backend", "cpu"])
        self.assertEqual(code, 0, err)
        got, want = json.loads(out), self.reference()
        self.assertAlmostEqual(got["bits_per_byte"], want["bits_per_byte"], delta=2e-5 * want["bits_per_byte"])

    def test_shards_another_tokenizer_made(self):
        """A shard directory whose meta.json names its tokenizer is that tokenizer's: scoring it
        with a gpt2 checkpoint is refused, even though every id fits the vocabulary."""
        other = os.path.join(self.tmp, "other_tokenizer")
        shutil.copytree(self.data, other)
        with open(os.path.join(other, "meta.json"), "w") as f:
            json.dump({"schema": 1, "tokenizer": {"name": "sp1024"}}, f)  # as a cache entry writes it
        code, _, err, _ = fixtures.run_nfn(["eval", "--checkpoint", self.ckpt, "--dataset", other, "--backend", "cpu"])
        self.assertEqual(code, 1)
        self.assertEqual(err.strip(), f"nfn eval: error: dataset {other} is tokenized with sp1024 but the "
                                      "checkpoint uses gpt2")

    def test_each_split_needs_only_its_own_shards(self):
        # The train shard holds the stream's first 40 tokens: --split train on a directory (or
        # a *_train_* file) without any val shard scores those, as the reference does.
        only_train = os.path.join(self.tmp, "only_train")
        os.makedirs(only_train)
        shutil.copy(os.path.join(self.data, "tiny_train_000000.bin"), only_train)
        only_val = os.path.join(self.tmp, "only_val")
        os.makedirs(only_val)
        shutil.copy(os.path.join(self.data, "tiny_val_000000.bin"), only_val)
        broken_val = os.path.join(self.tmp, "broken_val")  # a val shard cut short: not read for train
        shutil.copytree(only_train, broken_val)
        with open(os.path.join(broken_val, "tiny_val_000000.bin"), "wb") as f:
            f.write(b"\0" * 100)
        base = ["eval", "--checkpoint", self.ckpt, "--json", "--backend", "cpu"]
        for dataset, split, want in ((only_train, "train", self.reference(39)),
                                     (os.path.join(only_train, "tiny_train_000000.bin"), "train", self.reference(39)),
                                     (broken_val, "train", self.reference(39)),
                                     (only_val, "val", self.reference())):
            with self.subTest(dataset=dataset, split=split):
                code, out, err, _ = fixtures.run_nfn(base + ["--dataset", dataset, "--split", split])
                self.assertEqual(code, 0, err)
                got = json.loads(out)
                self.assertEqual((got["split"], got["tokens"]), (split, want["tokens"]))
                self.assertAlmostEqual(got["loss"], want["loss"], delta=2e-5 * want["loss"])
        # A split with no shards there: one line naming the directory and the split.
        for dataset, split in ((only_train, "val"), (only_val, "train")):
            with self.subTest(dataset=dataset, split=split):
                args = base[:-3] + ["--backend", "cpu", "--dataset", dataset] + (["--split", split] if split == "train"
                                                                                 else [])  # val: the default
                code, out, err, _ = fixtures.run_nfn(args)
                self.assertEqual((code, out, err), (1, "", f"nfn eval: error: {dataset}: no {split} shards "
                                                           f"(*_{split}_*.bin) in this directory\n"))

    def test_recorded_data(self):
        from nfn.infer.checkpoint import recorded_data
        text = os.path.join(self.tmp, "plays.txt")
        cases = [(None, None), ({}, None), ({"dataset": {"name": ""}}, None), ({"dataset": "x"}, None),
                 ({"dataset": {"name": "shakespeare"}}, ("dataset", "shakespeare")),
                 ({"dataset": {"name": self.data}}, ("dataset", self.data)),
                 ({"dataset": {"name": "/x/y_train_000000.bin"}}, ("dataset", "/x/y_train_000000.bin")),
                 ({"dataset": {"name": text}}, ("pretraining_file", text))]
        for manifest, want in cases:
            with self.subTest(manifest=manifest):
                self.assertEqual(recorded_data(manifest), want)

    def test_a_loss_past_exp_range(self):
        # A confidently wrong model (its final norm scaled up): about 1000 nats a token, whose
        # exp overflows a double. The loss is printed; the perplexity is inf (null in JSON).
        params = dict(self.params, lnfw=self.params["lnfw"] * 2000.0)
        ckpt = os.path.join(self.tmp, "overconfident")
        os.makedirs(ckpt)
        fixtures.write_llmc_by_hand(os.path.join(ckpt, "model_00000010.bin"), self.geom, params)
        open(os.path.join(ckpt, "DONE_00000010"), "w").close()
        shutil.copy(os.path.join(self.ckpt, "manifest.json"), ckpt)
        args = ["eval", "--checkpoint", ckpt, "--dataset", self.data, "--backend", "cpu", "--max-tokens", "40"]
        code, out, err, _ = fixtures.run_nfn(args + ["--json"])
        self.assertEqual(code, 0, err)
        got = json.loads(out)
        self.assertGreater(got["loss"], 710)
        self.assertIsNone(got["perplexity"])
        code, out, err, _ = fixtures.run_nfn(args)
        self.assertEqual(code, 0, err)
        self.assertIn("perplexity inf", out)
        # A NaN model (diverged): NaN stays NaN (null in JSON), never inf.
        params["lnfw"] = params["lnfw"] * np.nan
        fixtures.write_llmc_by_hand(os.path.join(ckpt, "model_00000010.bin"), self.geom, params)
        code, out, err, _ = fixtures.run_nfn(args)
        self.assertEqual(code, 0, err)
        self.assertIn("loss nan   perplexity nan", out)
        code, out, err, _ = fixtures.run_nfn(args + ["--json"])
        self.assertEqual(code, 0, err)
        self.assertEqual((json.loads(out)["loss"], json.loads(out)["perplexity"]), (None, None))

    def test_bad_input(self):
        wide = os.path.join(self.tmp, "wide")
        os.makedirs(wide)
        write_shard(os.path.join(wide, "x_train_000000.bin"), [1, 2, 3])
        with open(os.path.join(wide, "x_val_000000.bin"), "wb") as f:  # uint32 ids beyond the vocabulary
            f.write(struct.pack("<3i", 20240801, 7, 3) + bytes(1012) + np.array([1, 60000, 2], "<u4").tobytes())
        past = os.path.join(self.tmp, "past_int32")  # an id int32 cannot hold is named as itself
        shutil.copytree(wide, past)
        with open(os.path.join(past, "x_val_000000.bin"), "wb") as f:
            f.write(struct.pack("<3i", 20240801, 7, 3) + bytes(1012) + np.array([1, 2**32 - 2, 2], "<u4").tobytes())
        cases = [
            (["--checkpoint", self.ckpt], "--dataset is required: " + self.ckpt),
            (["--checkpoint", self.ckpt, "--dataset", ""], "--dataset: empty"),
            (["--checkpoint", self.ckpt, "--dataset", wide], "token id 60000 is outside the checkpoint's vocabulary"),
            (["--checkpoint", self.ckpt, "--dataset", past], "token id 4294967294 is outside the checkpoint's vocab"),
            (["--checkpoint", self.ckpt, "--dataset", self.data, "--tokenizer", "sp1024"], "tokenizer sp1024"),
            (["--checkpoint", os.path.join(self.tmp, "missing"), "--dataset", self.data], "not a file"),
        ]
        for args, needle in cases:
            with self.subTest(args=args):
                code, out, err, _ = fixtures.run_nfn(["eval"] + args + ["--backend", "cpu"])
                self.assertEqual(code, 1, err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                self.assertTrue(err.startswith("nfn eval: error: "), err)
                self.assertIn(needle, err)


if __name__ == "__main__":
    unittest.main()
