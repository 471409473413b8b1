"""nfn rl's data and bookkeeping: the held-out questions are never among those trained on (GSM8K's
shipped problems and the arithmetic task), rewards are exact matches, a group's training rows
learn exactly the sampled tokens with the sample's advantage, and the state file is the
trainer's layout (cc/ckpt/checkpoint.cc's offsets) and reads back what was written."""
import os
import tempfile
import unittest

import numpy as np

from nfn.errors import UserError
from nfn.rl import checkpoint, sampler, tasks
from nfn.rl.run import training_rows


class SplitTest(unittest.TestCase):
    def test_gsm8k_held_out_questions_are_never_trained_on(self):
        train, held = tasks.load("gsm8k", "train"), tasks.load("gsm8k", "held_out")
        self.assertEqual((len(train), len(held)), (1000, 319))
        train_q = {train[i]["question"] for i in range(len(train))}
        held_q = {held[i]["question"] for i in range(len(held))}
        self.assertEqual(len(held_q), 319)
        self.assertFalse(train_q & held_q)
        from nfn.tasks.gsm8k import GSM8K
        self.assertEqual(held[0]["question"], GSM8K()[1000]["messages"][0]["content"])

    def test_arithmetic_parts_are_disjoint_and_cover_every_question(self):
        train, held = tasks.load("arithmetic", "train"), tasks.load("arithmetic", "held_out")
        train_q = [train[i]["question"] for i in range(len(train))]
        held_q = [held[i]["question"] for i in range(len(held))]
        self.assertEqual(len(train_q) + len(held_q), 10 * 10 * 2)
        self.assertFalse(set(train_q) & set(held_q))
        self.assertGreater(len(held_q), 20)
        for row in (train[i] for i in range(len(train))):
            a, op, b = row["question"][0], row["question"][1], row["question"][2:]
            self.assertEqual(int(row["answer"]), int(a) + int(b) if op == "+" else int(a) - int(b))

    def test_unknown_task_is_one_line(self):
        with self.assertRaises(UserError) as cm:
            tasks.load("nope", "train")
        self.assertIn("gsm8k, arithmetic", str(cm.exception))

    def test_reward_is_the_exact_answer(self):
        row = tasks.arithmetic_row(3, 5, "-")
        self.assertEqual(tasks.reward(row, "so #### -2<|assistant_end|>"), 1.0)
        self.assertEqual(tasks.reward(row, "#### 2"), 0.0)
        self.assertEqual(tasks.reward(row, "-2"), 0.0)  # no "#### "
        self.assertEqual(tasks.reward(row, "#### 7 then #### -2"), 1.0)  # the last one counts


class RowsTest(unittest.TestCase):
    def test_rows_learn_the_sampled_tokens_with_their_advantage(self):
        # prompt [1, 2, 3], sampled 4, fed 5 6 (a tool's answer), sampled 7, 8
        a = sampler.Sample([1, 2, 3, 4, 5, 6, 7, 8], [0, 0, 0, 1, 0, 0, 1, 1], "", "stop_token")
        b = sampler.Sample([1, 2, 3, 9], [0, 0, 0, 1], "", "stop_token")
        inputs, targets, weights = training_rows([a, b], np.array([0.5, -0.5], np.float32), pad=0)
        self.assertEqual(inputs.tolist(), [[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 0, 0, 0, 0]])
        self.assertEqual(targets.tolist(), [[-1, -1, 4, -1, -1, 7, 8], [-1, -1, 9, -1, -1, -1, -1]])
        self.assertTrue((weights[0] == 0.5).all() and (weights[1] == -0.5).all())
        self.assertEqual((a.sampled, b.sampled), (3, 1))

    def test_splitmix64_is_the_reference_sequence(self):
        # splitmix64 from state 0: the first outputs of Vigna's reference implementation
        state, first = sampler.splitmix64(0)
        _, second = sampler.splitmix64(state)
        self.assertEqual((first, second), (0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4))


class StateFileTest(unittest.TestCase):
    def test_the_trainers_layout_round_trips(self):
        with tempfile.TemporaryDirectory(dir=os.environ.get("TEST_TMPDIR")) as d:
            path = os.path.join(d, checkpoint.state_file_name(7))
            m, v = np.arange(5, dtype=np.float32), -np.arange(5, dtype=np.float32)
            checkpoint.write_state(path, 7, (1 << 63) + 5, 2, 41, m, v)
            header = np.fromfile(path, dtype=np.int32, count=256)
            # cc/ckpt/checkpoint.cc: magic, version, 1, the step at [10], rng [20:22], shard [30:32],
            # offset [32:34], epoch [34:36], parameters [40:42]
            self.assertEqual(header[:3].tolist(), [20240527, 1, 1])
            self.assertEqual(header[10], 7)
            self.assertEqual(header[20:22].view(np.uint64)[0], (1 << 63) + 5)
            self.assertEqual(header[32:34].view(np.uint64)[0], 41)
            self.assertEqual(header[34:36].view(np.uint64)[0], 2)
            self.assertEqual(header[40:42].view(np.uint64)[0], 5)
            self.assertEqual(os.path.getsize(path), 1024 + 40)
            s = checkpoint.read_state(path, 5)
            self.assertEqual((s["step"], s["rng_state"], s["epoch"], s["offset"]), (7, (1 << 63) + 5, 2, 41))
            self.assertEqual((s["m"].tolist(), s["v"].tolist()), (m.tolist(), v.tolist()))
            with self.assertRaises(UserError) as cm:
                checkpoint.read_state(path, 6)
            self.assertIn("holds 5 parameters", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
