"""Batched generation (generate_batch, forward_slots): sequences of different lengths share
each forward's GEMMs, one cache slot each. For the dense GPT, nanochat and llama, each sequence
of a batch generates (greedy) exactly what it generates alone, stopping where it would alone
(stop token, full context), and the batched logits equal the one-sequence engine's within
2e-5 of their scale (the GEMMs run over more rows, so sums may be ordered differently) and,
for nanochat and llama, the float64 PyTorch reference's of each whole sequence. With
NFN_EMULATED_CUDA_OPS_LIB set, the CUDA op library runs the same checks under the emulator."""
import os
import tempfile
import unittest

import numpy as np
import torch

from nfn import _native
from decoder_reference import llama_logits, nanochat_logits, random_weights, split
from decoder_engine_test import LLAMA, NANOCHAT, op_libraries, write_weights

LENGTHS = (3, 7, 1, 5)
NEW = 6
GPT = dict(max_seq_len=16, vocab_size=64, num_layers=2, num_heads=2, channels=16, padded_vocab_size=128)


class BatchEngineTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.libraries = op_libraries()

    def check(self, make, V, T, reference=None):
        """make(library) opens an engine; reference(seq) gives a sequence's float64 logits (T, V)."""
        rng = np.random.default_rng(21)
        prompts = [[int(t) for t in rng.integers(0, V, n)] for n in LENGTHS]
        for library in self.libraries:
            with self.subTest(library=library or "cpu"):
                alone, batch = make(library), make(library)
                want = [alone.generate(p, NEW, temperature=0.0)["tokens"] for p in prompts]
                out = batch.generate_batch(prompts, NEW, temperature=0.0)
                self.assertEqual([s["tokens"] for s in out["sequences"]], want)
                self.assertEqual({s["stop_reason"] for s in out["sequences"]}, {"max_new_tokens"})
                self.assertEqual((out["decode_forwards"], out["decoded_tokens"]), (NEW - 1, len(prompts) * (NEW - 1)))
                self.assertEqual(batch.slots, len(prompts))

                # A stop token for sequence 0 and a prompt that fills the context: those two stop
                # as they would alone, the others go on in a smaller batch.
                stop = want[0][1]
                long = [int(t) for t in rng.integers(0, V, T - 2)]
                some = prompts + [long]
                want = [alone.generate(p, NEW, temperature=0.0, stop_token=stop) for p in some]
                out = batch.generate_batch(some, NEW, temperature=0.0, stop_token=stop)
                self.assertEqual([s["tokens"] for s in out["sequences"]], [w["tokens"] for w in want])
                self.assertEqual([s["stop_reason"] for s in out["sequences"]], [w["stop_reason"] for w in want])
                self.assertEqual(out["sequences"][0]["stop_reason"], "stop_token")
                self.assertEqual(out["sequences"][-1]["stop_reason"], "context")

                # Logits: the prompts in one forward, then steps of a few slots in any order,
                # one of them a block of several tokens, against each sequence run alone.
                seqs = [list(p) for p in prompts]
                batch.set_slots(len(prompts))
                steps = [(list(range(len(prompts))), seqs), ([2, 0], [[5], [9]]), ([3, 1, 0], [[1, 2, 3], [4], [7]])]
                for slots, tokens in steps:
                    if tokens is not seqs:
                        for s, t in zip(slots, tokens):
                            seqs[s] += t
                    got = batch.forward_slots(slots, tokens)
                    self.assertEqual(got.shape, (len(slots), V))
                    for row, s in enumerate(slots):
                        alone.reset()
                        one = alone.forward(np.array(seqs[s], np.int32))[0]
                        scale = np.abs(one).max()
                        np.testing.assert_allclose(got[row], one, atol=2e-5 * scale, rtol=0,
                                                   err_msg=f"slot {s} after {len(seqs[s])} tokens")
                        if reference is not None:
                            np.testing.assert_allclose(got[row], reference(seqs[s])[-1], atol=2e-5 * scale, rtol=0)

                with self.assertRaisesRegex(RuntimeError, "slot 0 is given twice"):
                    batch.forward_slots([0, 0], [[1], [2]])
                with self.assertRaisesRegex(RuntimeError, r"slot 9 is outside \[0, 4\)"):
                    batch.forward_slots([9], [[1]])
                with self.assertRaisesRegex(RuntimeError, r"do not fit the context of"):
                    batch.forward_slots([1], [[1] * T])
                with self.assertRaisesRegex(RuntimeError, "prompt 1: empty"):
                    batch.generate_batch([[1], []], 2)
                with self.assertRaisesRegex(RuntimeError, "slots must be >= 1, got 0"):
                    batch.set_slots(0)

    def decoder(self, cfg, reference_logits):
        layout = _native.NativeDecoder(**cfg).layout()
        flat = random_weights(layout, np.random.default_rng(3))
        path = os.path.join(self.dir.name, f"{cfg['family']}.safetensors")
        write_weights(path, cfg, layout, flat)
        p = split(torch.tensor(flat, dtype=torch.float64), layout)
        V = cfg["vocab_size"]

        def reference(seq):
            return reference_logits(p, torch.tensor([seq]).long(), cfg)[0, :, :V].numpy()
        self.check(lambda library: _native.InferenceEngine(weights_file=path, library=library), V,
                   cfg["max_seq_len"], reference)

    def test_gpt(self):
        params = _native.gpt_random_parameters(GPT["max_seq_len"], GPT["vocab_size"], GPT["num_layers"],
                                               GPT["num_heads"], GPT["channels"], 1)
        self.check(lambda library: _native.InferenceEngine(params, **GPT, library=library), GPT["vocab_size"],
                   GPT["max_seq_len"])

    def test_nanochat(self):
        self.decoder(NANOCHAT, nanochat_logits)

    def test_llama(self):
        self.decoder(LLAMA, llama_logits)


if __name__ == "__main__":
    unittest.main()
