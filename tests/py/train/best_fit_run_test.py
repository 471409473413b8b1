"""The trainer binary with --packing bestfit on a tiny model: its training and validation rows
are those of nanochat's best-fit packing written in Python (tests/py/data/best_fit_reference.py:
a step's loss and the final validation loss equal the losses of the reference's rows under the
same weights), its checkpoints hold the reference's buffer and stream position, a resume is
bitwise the uninterrupted run, and bad input is one line."""
import json
import os
import shutil
import struct
import subprocess
import tempfile
import unittest

import numpy as np
from best_fit_reference import ReferenceBestFit
from shards import write_shard

from nfn import _native

TRAINER = os.path.abspath(os.environ["NFN_TRAINER"])
VOCAB, BOS, T, B, LAYERS, HEADS, C = 64, 1, 16, 4, 2, 2, 32
BUFFER, SEED, ACCUM = 5, 5, 2


def make_documents(rng, count):
    """Learnable documents: BOS, then a run counting up from a random id (ids 2..62; 63 never
    appears, so it is a BOS id missing from the data)."""
    docs = []
    for _ in range(count):
        start, length = int(rng.integers(2, 63)), int(rng.integers(0, 40))
        docs.append([BOS] + [2 + (start - 2 + i) % 61 for i in range(length)])
    return docs


def make_data(root):
    rng = np.random.default_rng(3)
    shards = {"docs_train_000000.bin": make_documents(rng, 60), "docs_train_000001.bin": make_documents(rng, 45),
              "docs_val_000000.bin": make_documents(rng, 20)}
    data = {}
    for name, docs in shards.items():
        tokens = np.array(sum(docs, []), dtype=np.int64)
        write_shard(os.path.join(root, name), tokens)
        data[name] = tokens
    return [data["docs_train_000000.bin"], data["docs_train_000001.bin"]], [data["docs_val_000000.bin"]]


def write_weights(path):
    """An llm.c model file (version 3) of weights large enough that rows' losses differ."""
    rng = np.random.default_rng(4)
    params = (rng.standard_normal(_native.NativeGPT(T, VOCAB, LAYERS, HEADS, C).num_parameters) * 0.5)
    for name, shape, offset in _native.gpt_param_layout(T, VOCAB, LAYERS, HEADS, C):
        if name in ("ln1w", "ln2w", "lnfw"):
            params[offset: offset + int(np.prod(shape))] += 1.0
    header = [20240326, 3, T, VOCAB, LAYERS, HEADS, C, 128] + [0] * 248
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(params.astype("<f4").tobytes())


def read_weights(path):
    return np.fromfile(path, dtype="<f4", offset=1024)


def mean_loss(params, batches):
    """Mean loss of (inputs, targets) batches under params, on the CPU op library in f32."""
    model = _native.NativeGPT(T, VOCAB, LAYERS, HEADS, C)
    model.set_parameters(params.astype(np.float32))
    return float(np.mean([model.forward_backward(x, y, False, 0.0) for x, y in batches]))


def read_packing_file(path):
    """(header ints, [(shard, offset, length)]) of a packing state file, by its documented layout."""
    with open(path, "rb") as f:
        raw = f.read()
    header = struct.unpack("<256i", raw[:1024])
    count = struct.unpack("<Q", raw[22 * 4: 24 * 4])[0]
    records = struct.unpack(f"<{3 * count}q", raw[1024:])
    return header, [tuple(records[i: i + 3]) for i in range(0, len(records), 3)], len(raw)


def state_position(path):
    """The state file's data position as (epoch, shard, offset): int64 at ints 34, 30, 32."""
    with open(path, "rb") as f:
        header = f.read(1024)
    get = lambda i: struct.unpack("<q", header[4 * i: 4 * i + 8])[0]  # noqa: E731
    return get(34), get(30), get(32)


def run(args, check=True):
    proc = subprocess.run([TRAINER] + args, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"trainer failed ({proc.returncode}): {proc.stderr}")
    return proc


class BestFitRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)
        cls.train_tokens, cls.val_tokens = make_data(cls.data)
        cls.weights = os.path.join(cls.tmp, "start.bin")
        write_weights(cls.weights)
        cls.common = ["--train-data", cls.data, "--vocab-size", str(VOCAB), "--num-layers", str(LAYERS),
                      "--num-heads", str(HEADS), "--model-dim", str(C), "--train-seq-len", str(T),
                      "--batch-size", str(B), "--train-batch-tokens", str(ACCUM * B * T), "--max-steps", "6",
                      "--warmup-steps", "2", "--learning-rate", "3e-3", "--eval-every-steps", "3",
                      "--eval-batches", "2", "--checkpoint-every", "3", "--backend", "cpu", "--threads", "2",
                      "--matmul", "f32", "--seed", str(SEED), "--eot-token", str(BOS), "--weights", cls.weights]
        cls.packing = ["--packing", "bestfit", "--packing-buffer", str(BUFFER)]
        cls.full = os.path.join(cls.tmp, "full")
        cls.report = json.loads(run(cls.common + cls.packing + ["--output-dir", cls.full, "--json"]).stdout)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def reference(self, batches):
        ref = ReferenceBestFit(self.train_tokens, B, T, SEED, BOS, BUFFER)
        return ref, [ref.batch() for _ in range(batches)]

    def copy_at_step_3(self, name):
        """The full run's directory as a crash after step 3's checkpoint would leave it."""
        out = os.path.join(self.tmp, name)
        shutil.copytree(self.full, out)
        for f in ["model_00000006.bin", "state_00000006_00000.bin", "packing_00000006_00000.bin", "DONE_00000006",
                  "report.json"]:
            os.remove(os.path.join(out, f))
        return out

    def test_training_and_validation_rows_are_the_reference_rows(self):
        _, batches = self.reference(ACCUM)
        start = read_weights(self.weights)
        want = mean_loss(start, batches)
        self.assertAlmostEqual(self.report["train_losses"][0][1], want, delta=2e-5 * want)
        # Other rows of the same tokens (the stream's first contiguous windows) give another loss.
        stream = self.train_tokens[0]
        windows = [stream[i * B * T: i * B * T + B * T + 1] for i in range(ACCUM)]
        other = mean_loss(start, [(w[:-1].reshape(B, T), w[1:].reshape(B, T)) for w in windows])
        self.assertGreater(abs(other - want), 1e-2)
        # Validation: the first best-fit batches of the validation split from its start, seed 0.
        val = ReferenceBestFit(self.val_tokens, B, T, 0, BOS, BUFFER)
        count = min(2, len(self.val_tokens[0]) // (B * (T + 1)))
        self.assertEqual(count, 2)
        final = read_weights(os.path.join(self.full, "model_00000006.bin"))
        want_val = mean_loss(final, [val.batch() for _ in range(count)])
        self.assertAlmostEqual(self.report["final_validation_loss"], want_val, delta=2e-5 * want_val)

    def test_checkpoints_hold_the_reference_buffer_and_position(self):
        for step in (3, 6):
            ref, _ = self.reference(step * ACCUM)
            header, documents, size = read_packing_file(os.path.join(self.full, f"packing_{step:08d}_00000.bin"))
            self.assertEqual(header[:7], (20261208, 1, 1, 0, 1, BOS, T + 1))
            self.assertEqual(header[10], step)
            self.assertEqual(struct.unpack("<Q", struct.pack("<2i", *header[20:22]))[0], BUFFER)
            self.assertEqual(documents, [tuple(map(int, d)) for d in ref.buffer])
            self.assertEqual(size, 1024 + 24 * len(documents))
            self.assertEqual(state_position(os.path.join(self.full, f"state_{step:08d}_00000.bin")), ref.position)
        manifest = json.loads(open(os.path.join(self.full, "manifest.json")).read())
        self.assertEqual((manifest["training"]["packing"], manifest["training"]["packing_buffer"]), ("bestfit", BUFFER))
        self.assertEqual((self.report["config"]["data"]["packing"], self.report["config"]["data"]["packing_buffer"]),
                         ("bestfit", BUFFER))

    def test_resume_is_bitwise_the_uninterrupted_run(self):
        # Without --packing: the resumed run packs as its checkpoint's run did.
        out = self.copy_at_step_3("resumed")
        proc = run(self.common + ["--output-dir", out, "--resume", "auto", "--json"])
        self.assertNotIn("--packing", proc.stderr)
        report = json.loads(proc.stdout)
        self.assertEqual(report["resumed_from"], os.path.join(out, "model_00000003.bin"))
        self.assertEqual(report["train_losses"], self.report["train_losses"][3:])
        self.assertEqual(report["final_validation_loss"], self.report["final_validation_loss"])
        for name in ["model_00000006.bin", "state_00000006_00000.bin", "packing_00000006_00000.bin"]:
            with open(os.path.join(out, name), "rb") as a, open(os.path.join(self.full, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_another_packing_on_resume_is_told_and_reads_on(self):
        out = self.copy_at_step_3("to_contiguous")
        proc = run(self.common + ["--output-dir", out, "--resume", "auto", "--packing", "contiguous"])
        self.assertIn("resuming a --packing bestfit run's checkpoint with --packing contiguous: contiguous windows "
                      f"from its data position on; the {BUFFER - 1} documents", proc.stderr)
        # A contiguous checkpoint: no packing file, a marker without packing.
        self.assertFalse(os.path.exists(os.path.join(out, "packing_00000006_00000.bin")))
        self.assertNotIn("packing", json.loads(open(os.path.join(out, "DONE_00000006")).read())["training"])
        proc = run(self.common + ["--output-dir", out, "--resume", os.path.join(out, "model_00000003.bin"),
                                  "--max-steps", "4", "--packing-buffer", "7"])
        self.assertIn("resuming with --packing-buffer 7, its run's was 5", proc.stderr)

    def test_bad_input_is_one_line(self):
        def fails(args, code, *parts):
            proc = run(args, check=False)
            self.assertEqual((proc.returncode, len(proc.stderr.strip().splitlines())), (code, 1), proc.stderr)
            for part in parts:
                self.assertIn(part, proc.stderr)

        out = os.path.join(self.tmp, "bad")
        fails(self.common + self.packing + ["--output-dir", out, "--eot-token", "63"], 1,
              "no document start: BOS id 63 is in none of the 2 shards")
        fails(self.common + ["--output-dir", out, "--packing", "bestfit", "--packing-buffer", "0"], 2,
              "--packing-buffer")
        damaged = self.copy_at_step_3("damaged")
        packing = os.path.join(damaged, "packing_00000003_00000.bin")
        with open(packing, "r+b") as f:
            f.write(struct.pack("<i", 7))
        fails(self.common + ["--output-dir", damaged, "--resume", "auto"], 1, packing + ": bad magic 7")
        with open(packing, "r+b") as f:
            f.write(struct.pack("<i", 20261208))
            f.truncate(1024 + 10)
        fails(self.common + ["--output-dir", damaged, "--resume", "auto"], 1, packing + ": size 1034 bytes")
        os.remove(packing)
        fails(self.common + ["--output-dir", damaged, "--resume", "auto"], 1, packing + ": ")
        other_bos = self.copy_at_step_3("other_bos")
        fails(self.common + ["--output-dir", other_bos, "--resume", "auto", "--eot-token", "2"], 1,
              "packing_00000003_00000.bin: BOS id 1, but this run's --eot-token is 2")


if __name__ == "__main__":
    unittest.main()
