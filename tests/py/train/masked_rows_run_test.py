"""The trainer binary on masked-row shards (nfn sft's format, written here by the test's own
writer from the documented layout) and warm starts from a checkpoint (--init-from,
--init-optimizer), on a tiny GPT: a step's loss and the final validation loss are the means over
the learned targets of the rows the test expects (file order within a file, the seed's file order
each epoch; validation every row once), computed here under the same weights; the trained-target
count, the data position and a bitwise resume; the warm start's geometry, weights and moments;
and bad input in one line."""
import json
import os
import shutil
import struct
import subprocess
import tempfile
import unittest

import numpy as np

from nfn import _native

TRAINER = os.path.abspath(os.environ["NFN_TRAINER"])
DISPATCHER = os.path.abspath(os.environ["NFN_DISPATCHER"])
EMULATED_LIB = os.path.abspath(os.environ["NFN_EMULATED_CUDA_OPS_LIB"])
VOCAB, BOS, T, B, LAYERS, HEADS, C = 64, 1, 16, 4, 2, 2, 32
SEED, ACCUM, STEPS = 5, 2, 6
MAGIC = 20261215


def write_rows(path, rows, bos=BOS, magic=MAGIC, row_tokens=T + 1):
    """A masked-row shard by the layout docs/data.md gives: 256 int32 (magic, version, R, width,
    BOS, 0, rows as int64), then each row's R uint16 ids and R mask bytes."""
    header = struct.pack("<6iq", magic, 1, row_tokens, 2, bos, 0, len(rows)) + bytes(1024 - 32)
    with open(path, "wb") as f:
        f.write(header)
        for ids, mask in rows:
            f.write(np.asarray(ids, dtype="<u2").tobytes() + bytes(mask))


def make_rows(rng, count):
    """Rows of conversation-like pieces: BOS, a prompt (mask 0), an answer that continues the
    prompt's count (mask 1); then BOS padding (mask 0)."""
    rows = []
    for _ in range(count):
        ids, mask = [], []
        while True:
            prompt, answer = int(rng.integers(1, 4)), int(rng.integers(1, 5))
            if len(ids) + 1 + prompt + answer > T + 1:
                break
            start = int(rng.integers(2, 60))
            ids += [BOS] + [2 + (start - 2 + i) % 61 for i in range(prompt + answer)]
            mask += [0] * (1 + prompt) + [1] * answer
        ids += [BOS] * (T + 1 - len(ids))
        mask += [0] * (T + 1 - len(mask))
        rows.append((ids, mask))
    return rows


def write_weights(path):
    rng = np.random.default_rng(4)
    params = rng.standard_normal(_native.NativeGPT(T, VOCAB, LAYERS, HEADS, C).num_parameters) * 0.5
    for name, shape, offset in _native.gpt_param_layout(T, VOCAB, LAYERS, HEADS, C):
        if name in ("ln1w", "ln2w", "lnfw"):
            params[offset: offset + int(np.prod(shape))] += 1.0
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *([20240326, 3, T, VOCAB, LAYERS, HEADS, C, 128] + [0] * 248)))
        f.write(params.astype("<f4").tobytes())


def read_weights(path):
    return np.fromfile(path, dtype="<f4", offset=1024)


def batches(rows):
    """(inputs, targets) of B rows at a time: targets -1 where the target's own mask is 0."""
    out = []
    for i in range(0, len(rows), B):
        chunk = rows[i: i + B]
        x = np.array([r[0][:-1] for r in chunk])
        y = np.array([[t if m else -1 for t, m in zip(r[0][1:], r[1][1:])] for r in chunk])
        out.append((x, y))
    return out


def masked_mean(params, batch_list):
    """Sum of the learned targets' losses over their count, on the CPU op library in f32."""
    model = _native.NativeGPT(T, VOCAB, LAYERS, HEADS, C)
    model.set_parameters(params.astype(np.float32))
    total = sum(model.forward_backward(x, y, False, 0.0) * x.size for x, y in batch_list)
    return total / sum(int((y >= 0).sum()) for _, y in batch_list)


def run(args, check=True, binary=TRAINER):
    proc = subprocess.run([binary] + args, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"trainer failed ({proc.returncode}): {proc.stderr}")
    return proc


def read_json(path):
    with open(path) as f:
        return json.load(f)


def state_header(path):
    with open(path, "rb") as f:
        return f.read(1024)


def state_position(path):
    header = state_header(path)
    get = lambda i: struct.unpack("<q", header[4 * i: 4 * i + 8])[0]  # noqa: E731
    return get(34), get(30), get(32)


def moments(path, parameters):
    data = np.fromfile(path, dtype="<f4", offset=1024)
    return data[:parameters], data[parameters: 2 * parameters]


class MaskedRowsRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)
        rng = np.random.default_rng(3)
        cls.files = {"sft_train_000000.bin": make_rows(rng, 9), "sft_train_000001.bin": make_rows(rng, 6),
                     "sft_val_000000.bin": make_rows(rng, 7)}
        for name, rows in cls.files.items():
            write_rows(os.path.join(cls.data, name), rows)
        cls.weights = os.path.join(cls.tmp, "start.bin")
        write_weights(cls.weights)
        cls.schedule = ["--batch-size", str(B), "--train-batch-tokens", str(ACCUM * B * T), "--max-steps",
                        str(STEPS), "--warmup-steps", "2", "--learning-rate", "3e-3", "--eval-every-steps", "3",
                        "--eval-batches", "4", "--checkpoint-every", "3", "--seed", str(SEED), "--eot-token",
                        str(BOS), "--sample-tokens", "0"]
        cls.run_flags = cls.schedule + ["--backend", "cpu", "--threads", "1", "--matmul", "f32"]
        cls.geometry = ["--vocab-size", str(VOCAB), "--num-layers", str(LAYERS), "--num-heads", str(HEADS),
                        "--model-dim", str(C), "--train-seq-len", str(T)]
        cls.common = ["--train-data", cls.data] + cls.geometry + cls.run_flags + ["--weights", cls.weights]
        cls.full = os.path.join(cls.tmp, "full")
        cls.report = json.loads(run(cls.common + ["--output-dir", cls.full, "--json"]).stdout)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def train_rows(self, count):
        """The first `count` training rows: each epoch the files in the seed's order, each file's
        rows in order."""
        names = sorted(n for n in self.files if "_train_" in n)
        out, epoch = [], 0
        while len(out) < count:
            for i in _native.shard_order(len(names), SEED, epoch):
                out += self.files[names[i]]
            epoch += 1
        return out[:count]

    def test_losses_are_means_over_the_learned_targets(self):
        first = self.train_rows(ACCUM * B)
        want = masked_mean(read_weights(self.weights), batches(first))
        self.assertAlmostEqual(self.report["train_losses"][0][1], want, delta=2e-5 * want)
        # The mean over every target would be another number.
        everything = [(ids, [1] * len(ids)) for ids, _ in first]
        self.assertGreater(abs(masked_mean(read_weights(self.weights), batches(everything)) - want), 1e-2)
        # Validation: every row of the split once (7 rows in 2 batches of 4, the last filled up
        # with rows that learn nothing), under the final weights.
        final = read_weights(os.path.join(self.full, f"model_{STEPS:08d}.bin"))
        want_val = masked_mean(final, batches(self.files["sft_val_000000.bin"]))
        self.assertAlmostEqual(self.report["final_validation_loss"], want_val, delta=2e-5 * want_val)
        # The trained targets: the learned ones of every row the steps read.
        rows = self.train_rows(STEPS * ACCUM * B)
        self.assertEqual(self.report["train_targets"], sum(sum(m[1:]) for _, m in rows))
        self.assertEqual(self.report["train_tokens"], STEPS * ACCUM * B * T)
        with open(os.path.join(self.full, "log.jsonl")) as f:
            log = [json.loads(line) for line in f]
        steps = [line for line in log if "train_loss" in line]
        self.assertEqual(sum(line["targets"] for line in steps), self.report["train_targets"])
        self.assertEqual(self.report["op_library"]["graphs"], False)

    def test_checkpoints_hold_the_row_position(self):
        names = sorted(n for n in self.files if "_train_" in n)
        for step in (3, 6):
            consumed, epoch = step * ACCUM * B, 0
            while True:  # (epoch, index in the epoch's order, row) of the next row
                order = _native.shard_order(len(names), SEED, epoch)
                for k, i in enumerate(order):
                    n = len(self.files[names[i]])
                    if consumed < n:
                        want = (epoch, k, consumed)
                        break
                    consumed -= n
                else:
                    epoch += 1
                    continue
                break
            self.assertEqual(state_position(os.path.join(self.full, f"state_{step:08d}_00000.bin")), want)

    def copy_at_step_3(self, name):
        out = os.path.join(self.tmp, name)
        shutil.copytree(self.full, out)
        for f in ["model_00000006.bin", "state_00000006_00000.bin", "DONE_00000006", "report.json"]:
            os.remove(os.path.join(out, f))
        return out

    def test_resume_is_bitwise_the_uninterrupted_run(self):
        out = self.copy_at_step_3("resumed")
        report = json.loads(run(self.common + ["--output-dir", out, "--resume", "auto", "--json"]).stdout)
        self.assertEqual(report["train_losses"], self.report["train_losses"][3:])
        self.assertEqual(report["final_validation_loss"], self.report["final_validation_loss"])
        for name in ["model_00000006.bin", "state_00000006_00000.bin"]:
            with open(os.path.join(out, name), "rb") as a, open(os.path.join(self.full, name), "rb") as b:
                self.assertEqual(a.read(), b.read(), name)

    def test_the_cuda_library_trains_the_same_rows_op_by_op(self):
        # Under the CUDA emulator (the CUDA library's kernels on the CPU), in f32: the same losses
        # to rounding; graphs off, since each step's gradient scale is its own; --graphs on refused.
        cuda = ["--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", "f32"]
        flags = ["--train-data", self.data, "--weights", self.weights] + self.geometry + self.schedule
        report = json.loads(run(flags + cuda + ["--output-dir", os.path.join(self.tmp, "emulated"), "--json"]).stdout)
        np.testing.assert_allclose([x for _, x in report["train_losses"]], [x for _, x in self.report["train_losses"]],
                                   rtol=1e-5)
        self.assertAlmostEqual(report["final_validation_loss"], self.report["final_validation_loss"], delta=1e-5)
        self.assertEqual(report["train_targets"], self.report["train_targets"])
        self.assertFalse(report["op_library"]["graphs"])
        self.assertIn("masked rows scale each step's gradients", report["op_library"]["graphs_note"])
        proc = run(flags + cuda + ["--graphs", "on", "--output-dir", os.path.join(self.tmp, "graphs")], check=False)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--graphs on: masked rows scale each step's gradients", proc.stderr)

    def test_warm_start_takes_the_checkpoints_geometry_and_weights(self):
        out = os.path.join(self.tmp, "warm")
        # No geometry flags: the checkpoint's; the data's vocabulary must agree with it.
        report = json.loads(run(["--train-data", self.data, "--init-from", self.full, "--vocab-size", str(VOCAB),
                                 "--output-dir", out, "--json"] + self.run_flags, binary=DISPATCHER).stdout)
        self.assertEqual(report["geometry"], self.report["geometry"])
        start = read_weights(os.path.join(self.full, f"model_{STEPS:08d}.bin"))
        want = masked_mean(start, batches(self.train_rows(ACCUM * B)))
        self.assertAlmostEqual(report["train_losses"][0][1], want, delta=2e-5 * want)
        marker = read_json(os.path.join(out, f"DONE_{STEPS:08d}"))
        self.assertEqual(marker["training"]["init_from"], os.path.join(self.full, f"model_{STEPS:08d}.bin"))
        self.assertFalse(marker["training"]["init_optimizer"])
        self.assertNotIn("moment_steps", marker["training"])
        self.assertEqual(report["config"]["init_from"]["state_file"], None)

    def test_init_optimizer_restores_the_moments(self):
        parameters = _native.NativeGPT(T, VOCAB, LAYERS, HEADS, C).num_parameters
        base = ["--train-data", self.data, "--init-from", self.full, "--max-steps", "1", "--batch-size", str(B),
                "--train-batch-tokens", str(ACCUM * B * T), "--learning-rate", "3e-3", "--warmup-steps", "0",
                "--eval-batches", "0",
                "--backend", "cpu", "--threads", "1", "--matmul", "f32", "--seed", str(SEED), "--sample-tokens", "0"]
        fresh, warm = os.path.join(self.tmp, "fresh_moments"), os.path.join(self.tmp, "warm_moments")
        run(base + ["--output-dir", fresh])
        proc = run(base + ["--output-dir", warm, "--init-optimizer"])
        self.assertIn("and its optimizer moments (6 steps)", proc.stderr)
        m0, v0 = moments(os.path.join(self.full, f"state_{STEPS:08d}_00000.bin"), parameters)
        m_fresh, v_fresh = moments(os.path.join(fresh, "state_00000001_00000.bin"), parameters)
        m_warm, v_warm = moments(os.path.join(warm, "state_00000001_00000.bin"), parameters)
        # The same weights and batch give the same gradient g: m = beta1 m0 + (1 - beta1) g.
        self.assertGreater(np.abs(m0).max(), 1e-4)
        np.testing.assert_allclose(m_warm - m_fresh, 0.9 * m0, atol=1e-7)
        np.testing.assert_allclose(v_warm - v_fresh, 0.95 * v0, atol=1e-10)
        marker = read_json(os.path.join(warm, "DONE_00000001"))
        self.assertEqual((marker["training"]["init_optimizer"], marker["training"]["moment_steps"]), (True, STEPS))
        # AdamW's bias correction counts the restored steps (t = 7, not 1), checked on the final
        # LayerNorm's bias, which does not decay: p1 = p0 - lr m/(1 - 0.9^t) / (sqrt(v/(1 - 0.95^t)) + eps).
        with open(os.path.join(warm, "log.jsonl")) as f:
            lr = json.loads(f.readline())["lr"]
        _, shape, offset = next(t for t in _native.gpt_param_layout(T, VOCAB, LAYERS, HEADS, C) if t[0] == "lnfb")
        at = slice(offset, offset + int(np.prod(shape)))
        p0 = read_weights(os.path.join(self.full, f"model_{STEPS:08d}.bin"))[at].astype(np.float64)
        p1 = read_weights(os.path.join(warm, "model_00000001.bin"))[at]
        m, v = m_warm[at].astype(np.float64), v_warm[at].astype(np.float64)

        def after(t):
            return p0 - lr * (m / (1 - 0.9 ** t)) / (np.sqrt(v / (1 - 0.95 ** t)) + 1e-8)

        np.testing.assert_allclose(p1, after(STEPS + 1), atol=1e-6)
        self.assertGreater(np.abs(after(1) - p1).max(), 1e-4)

    def test_bad_input_is_one_line(self):
        def fails(args, code, *parts, binary=TRAINER, reading=False):
            """One line; a row found bad while training (reading) follows the run's first line."""
            proc = run(args, check=False, binary=binary)
            lines = proc.stderr.strip().splitlines()
            self.assertEqual((proc.returncode, len(lines)), (code, 2 if reading else 1), proc.stderr)
            for part in parts:
                self.assertIn(part, lines[-1])

        out = os.path.join(self.tmp, "bad")
        flags = self.geometry + self.run_flags + ["--output-dir", out]

        def data_with(name, **kw):
            d = os.path.join(self.tmp, name)
            os.makedirs(d)
            rows = kw.pop("rows", self.files["sft_train_000000.bin"])
            write_rows(os.path.join(d, "x_train_000000.bin"), rows, **kw)
            return d

        neither = data_with("neither", magic=7)
        fails(["--train-data", neither] + flags, 1, "x_train_000000.bin: bad magic 7 (expected 20240520 for uint16 or "
              "20240801 for uint32 tokens; masked-row shards have 20261215)")
        mixed = data_with("mixed")
        with open(os.path.join(mixed, "y_train_000001.bin"), "wb") as f:
            f.write(struct.pack("<3i", 20240520, 1, 40) + bytes(1012) + bytes(80))
        fails(["--train-data", mixed] + flags, 1, "y_train_000001.bin: bad magic 20240520 (a masked-row shard has")
        rows = [(list(ids), list(mask)) for ids, mask in self.files["sft_train_000000.bin"]]
        rows[2][0][0] = 5
        fails(["--train-data", data_with("no_bos", rows=rows)] + flags, 1, "row 2 starts with 5, not the BOS id 1",
              reading=True)
        rows[2][0][0], rows[1][1][3] = BOS, 2
        fails(["--train-data", data_with("mask_2", rows=rows)] + flags, 1, "row 1, token 3: mask byte 2 (0 or 1)",
              reading=True)
        short = data_with("short")
        with open(os.path.join(short, "x_train_000000.bin"), "r+b") as f:
            f.truncate(1024 + 10)
        fails(["--train-data", short] + flags, 1, "truncated: file is 1034 bytes, header says 9 rows of 17 tokens")
        fails(["--train-data", self.data] + flags + ["--train-seq-len", "8"], 1,
              "rows of 17 tokens, but this run's rows are --train-seq-len + 1 = 9")
        fails(["--train-data", self.data] + flags + ["--packing", "bestfit"], 1,
              "--packing bestfit: " + self.data + " holds masked rows, packed already")
        # Warm starts.
        run_flags = ["--train-data", self.data, "--output-dir", out] + self.run_flags
        fails(run_flags + ["--model-family", "nanochat", "--init-from", self.full], 2,
              f"model_{STEPS:08d}.bin: holds a gpt model, not nanochat", binary=DISPATCHER)
        fails(run_flags + ["--init-from", self.full, "--num-layers", "3"], 2,
              "--num-layers 3 contradicts the --init-from checkpoint's 2")
        fails(run_flags + ["--init-from", self.full, "--weights", self.weights], 2,
              "--init-from takes the model from its checkpoint; drop --weights")
        fails(run_flags + ["--init-optimizer"] + self.geometry, 2, "--init-optimizer restores the moments of the "
              "--init-from checkpoint: name it")
        fails(run_flags + ["--init-from", self.weights, "--init-optimizer"], 2,
              "--init-optimizer: " + self.weights + " has no optimizer state beside it")
        fails(run_flags + ["--init-from", os.path.join(self.tmp, "nowhere")], 2, "--init-from: checkpoint ")


if __name__ == "__main__":
    unittest.main()
