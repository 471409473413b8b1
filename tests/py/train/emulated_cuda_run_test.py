"""The trainer on the CUDA backend, its kernels run on the CPU by the CUDA emulator
(//cuda/ops:libnfn_native_train_tile_ops_emulated.so): the loss curve of a tiny GPT tracks the
CPU backend's from the same seed (f32 tightly; bf16 with each attention path within bf16
tolerance), the report names the attention path, a resumed bf16 run is bitwise identical
to an uninterrupted one (bf16 weights, f32 master weights and moments round-trip through the
checkpoint), and, from the emulator's trace of runtime calls, a steady-state step allocates
nothing and is issued without waiting for the device (the host reads each step's loss once
the next is queued). With graphs (--graphs auto, the default, turns them on here), the
forward/backward is recorded once, after the first step, and replayed: bitwise the same run,
one graph launch where the ops were; the resumed run, with graphs, is bitwise the run without;
with --overlap on (a second stream for the weight and bias gradients, inside the graph) and
--pdl on (every kernel a programmatic dependent launch) the run is bitwise the same again, and
so it is with --recompute all (each layer's activations but its output rerun in the backward)
and with --stage-timing (events between the stages, so the step runs op by op). Best-fit rows
(--packing bestfit, int32 uploads) track the CPU's as contiguous windows do.
tools/device_check.sh makes the comparison on a real GPU."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import numpy as np
from shards import write_shard

TRAINER = os.path.abspath(os.environ["NFN_TRAINER"])
CPU_LIB = os.path.abspath(os.environ["NFN_CPU_OPS_LIB"])
EMULATED_LIB = os.path.abspath(os.environ["NFN_EMULATED_CUDA_OPS_LIB"])
VOCAB = 128
STEPS = 4


def run(args, env=None):
    proc = subprocess.run([TRAINER] + args, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, **(env or {})))
    if proc.returncode != 0:
        raise AssertionError(f"trainer failed ({proc.returncode}): {proc.stderr}")
    return json.loads(proc.stdout)


def losses(report):
    return np.array([loss for _, loss in report["train_losses"]])


class EmulatedCudaRunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        data = os.path.join(cls.tmp, "data")
        os.makedirs(data)
        rng = np.random.default_rng(3)
        succ = rng.integers(0, VOCAB, size=VOCAB)  # a learnable stream: noisy successor table
        tokens = [0]
        for _ in range(6000):
            tokens.append(int(succ[tokens[-1]]) if rng.random() > 0.1 else int(rng.integers(VOCAB)))
        write_shard(os.path.join(data, "tiny_train_000000.bin"), tokens[:5000])
        write_shard(os.path.join(data, "tiny_val_000000.bin"), tokens[5000:])
        cls.frequent = int(np.bincount(tokens[:5000]).argmax())  # a BOS id for --packing bestfit
        # Head size 64 and one 64-row tile: the tensor-core attention runs (not its fallback).
        cls.common = ["--train-data", data, "--vocab-size", str(VOCAB), "--num-layers", "2",
                      "--num-heads", "2", "--model-dim", "128", "--train-seq-len", "64", "--batch-size", "2",
                      "--train-batch-tokens", "256", "--max-steps", str(STEPS), "--warmup-steps", "1",
                      "--learning-rate", "3e-3", "--eval-every-steps", str(STEPS), "--eval-batches", "1",
                      "--checkpoint-every", "2", "--seed", "11", "--sample-tokens", "40", "--json"]
        # The reference: the CPU library's f32 GEMMs (not the bf16 ones the trainer takes by
        # default on a CPU with bf16 units).
        cls.cpu = run(cls.common + ["--backend", "cpu", "--tile-ops-lib", CPU_LIB, "--threads", "2",
                                    "--matmul", "f32", "--output-dir", os.path.join(cls.tmp, "cpu")])
        cls.cuda = {}
        cls.trace = os.path.join(cls.tmp, "trace.txt")
        for dtype, attention in (("f32", "flash"), ("bf16", "flash"), ("bf16", "flash_mma")):
            out = os.path.join(cls.tmp, f"{dtype}_{attention}")
            traced = {"NFN_EMU_TRACE": cls.trace} if attention == "flash_mma" else None
            cls.cuda[dtype, attention] = run(cls.common + [
                "--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", dtype,
                "--attention", attention, "--graphs", "off", "--output-dir", out], traced)
        cls.graph_trace = os.path.join(cls.tmp, "graph_trace.txt")
        cls.graphs = run(cls.common + ["--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", "bf16",
                                       "--attention", "flash_mma",  # --graphs auto, the default: on
                                       "--output-dir", os.path.join(cls.tmp, "graphs")],
                         {"NFN_EMU_TRACE": cls.graph_trace})
        # --overlap on: each linear backward's weight and bias gradients on a second stream,
        # forked and joined inside the recorded graph too; --pdl on: every kernel launched as a
        # programmatic dependent launch (the emulator runs them in order, and checks each kernel
        # calls pdl_begin first).
        cls.overlap = run(cls.common + ["--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", "bf16",
                                        "--attention", "flash_mma", "--overlap", "on", "--pdl", "on",
                                        "--output-dir", os.path.join(cls.tmp, "overlap")])
        # --recompute all: each layer's backward reruns its forward but for the output, inside
        # the recorded graph too.
        cls.recompute = run(cls.common + ["--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", "bf16",
                                          "--attention", "flash_mma", "--recompute", "all",
                                          "--output-dir", os.path.join(cls.tmp, "recompute")])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_loss_curves_track_the_cpu(self):
        reference = losses(self.cpu)
        self.assertLess(reference[-1], reference[0] - 0.2)  # it learns, so the curves say something
        for (dtype, attention), report in self.cuda.items():
            with self.subTest(dtype=dtype, attention=attention):
                bound = 1e-5 if dtype == "f32" else 1e-2
                worst = np.max(np.abs(losses(report) - reference) / reference)
                self.assertLess(worst, bound, f"{losses(report)} vs cpu {reference}")
                val = report["final_validation_loss"]
                self.assertLess(abs(val - self.cpu["final_validation_loss"]) / val, bound)

    def test_gpt3_large_head_size_tracks_the_cpu(self):
        # Head size 96 (GPT-3 Large's). f32: flash_simt's 128-wide kernels with the tail masked,
        # at the same bound as the widths they are built for. bf16 with flash_mma: its own
        # 96-wide tensor-core kernels (told apart in the trace by their shared memory: two
        # buffers of 64-row K and V tiles at 96 + 8 bf16 a row in the forward; the 64 keys'
        # K and V and two buffers of 32 queries' Q and dO, and their lse and delta, in dkdv;
        # Q, dO and two buffers of K and V in dq), within bf16 tolerance.
        geometry = ["--model-dim", "192", "--eval-batches", "0", "--sample-tokens", "0", "--checkpoint-every", "0"]
        cpu = run(self.common + geometry + ["--backend", "cpu", "--tile-ops-lib", CPU_LIB, "--threads", "2",
                                            "--matmul", "f32", "--output-dir", os.path.join(self.tmp, "cpu96")])
        cuda = run(self.common + geometry + ["--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", "f32",
                                             "--graphs", "off", "--output-dir", os.path.join(self.tmp, "cuda96")])
        worst = np.max(np.abs(losses(cuda) - losses(cpu)) / losses(cpu))
        self.assertLess(worst, 1e-5, f"{losses(cuda)} vs cpu {losses(cpu)}")
        trace = os.path.join(self.tmp, "trace96.txt")
        mma = run(self.common + geometry + ["--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", "bf16",
                                            "--attention", "flash_mma", "--graphs", "off",
                                            "--output-dir", os.path.join(self.tmp, "mma96")], {"NFN_EMU_TRACE": trace})
        self.assertTrue(mma["op_library"]["attention"].startswith("flash_mma"))
        worst = np.max(np.abs(losses(mma) - losses(cpu)) / losses(cpu))
        self.assertLess(worst, 1e-2, f"{losses(mma)} vs cpu {losses(cpu)}")
        row = 2 * (96 + 8)  # bytes of a shared row
        with open(trace) as f:
            launched = {(line.split()[4], int(line.split()[3])) for line in f if line.startswith("launch")}
        attention = {name: smem for name, smem in launched if "kernel<HD" in name}
        self.assertEqual(attention, {"forward_kernel<HD>": 4 * 64 * row, "dkdv_kernel<HD>": (2 * 64 + 4 * 32) * row
                                     + 4 * 4 * 32, "dq_kernel<HD,": 6 * 64 * row}, launched)

    def test_sample_through_the_kv_cache(self):
        # f32 logits agree with the CPU's to ~1e-6, so the same seeded draws pick the same
        # tokens; bf16 may pick others, but must still produce them all.
        self.assertEqual(len(self.cpu["sample_tokens"]), 40)
        self.assertEqual(self.cuda["f32", "flash"]["sample_tokens"], self.cpu["sample_tokens"])
        for key in (("bf16", "flash"), ("bf16", "flash_mma")):
            tokens = self.cuda[key]["sample_tokens"]
            self.assertEqual(len(tokens), 40, key)
            self.assertTrue(all(0 <= t < VOCAB for t in tokens), key)

    def test_report_names_the_backend_and_attention_path(self):
        for (dtype, attention), report in self.cuda.items():
            lib = report["op_library"]
            self.assertEqual((lib["backend"], lib["dtype"], lib["path"]), ("cuda", dtype, EMULATED_LIB))
            # The device as CUDA names it; no MFU, for no peak is known for it.
            self.assertEqual(lib["device"], "nfn CUDA emulator")
            self.assertEqual(lib["gemm_tune"], "off")  # the library's default
            self.assertIsNone(report["mfu"])
            self.assertTrue(lib["attention"].startswith("flash_mma" if attention == "flash_mma" else "flash_simt"),
                            lib["attention"])
            # bf16 asks cuBLASLt for the fused epilogues (the emulator's GEMM has them all, and
            # every width here is a multiple of 8): fcproj's backward for DGELU_BGRAD, which also
            # sums fc's bias gradient; f32 never does.
            if dtype == "f32":
                self.assertEqual(lib["fused_epilogues"], "")
            else:
                counts = re.fullmatch(r"gelu_aux_bias (\d+)/(\d+), dgelu_bgrad (\d+)/(\d+) fused",
                                      lib["fused_epilogues"])
                self.assertIsNotNone(counts, lib["fused_epilogues"])
                pairs = [int(n) for n in counts.groups()]
                self.assertTrue(all(n > 0 for n in pairs) and pairs[0::2] == pairs[1::2], lib["fused_epilogues"])

    @staticmethod
    def traced_steps(path):
        """The emulator's trace of a run, one (before, issue) pair per optimizer step. Every
        step ends by queueing the copy of its loss and gradient norm and recording an event
        ("event record"); cut there, each piece starts with what the host did between two
        steps (waiting for a step's event, asking whether one is done, checkpoint
        downloads and their synchronize) and then issues the step: `issue` is the piece
        after the last wait, query or synchronize, `before` the rest."""
        with open(path) as f:
            events = [line.strip() if line.startswith("event") else
                      " ".join(line.split()[:2]) if line.startswith(("copy", "replay memset")) else line.split()[0]
                      for line in f]
        pieces, current = [], []
        for e in events:
            current.append(e)
            if e == "event record":
                pieces.append(current)
                current = []
        pieces.append(current)  # after the last step: its wait, the final checkpoint, validation
        steps = []
        for piece in pieces[:-1]:
            cut = max([i + 1 for i, e in enumerate(piece) if e == "sync" or e.startswith("event wait")
                       or e.startswith("event query")] + [0])
            steps.append((piece[:cut], piece[cut:]))
        return steps, pieces[-1]

    def test_steps_are_issued_without_waiting_for_the_device(self):
        steps, after = self.traced_steps(self.trace)
        self.assertEqual(len(steps), STEPS)
        issue = [i for _, i in steps]
        self.assertEqual(issue[1], issue[2])  # steady state: the same calls every step
        self.assertEqual(issue[2], issue[3])
        for ops in issue[1:]:
            self.assertEqual(ops.count("copy host_to_device"), 2)  # a token window a micro-step
            self.assertNotIn("malloc", ops)
            self.assertNotIn("free", ops)
            self.assertNotIn("sync", ops)
            # The one read, queued at the end: loss and gradient sum of squares in one copy.
            self.assertEqual(ops[-2:], ["copy device_to_host", "event record"])
            self.assertEqual(ops.count("copy device_to_host"), 1)
        # The host learns a step's values after issuing the next one: step 2 went out while
        # step 1 was still running (the emulated GPU is always behind), and so did step 4
        # after step 3. Step 2 is read before step 3 is issued, for the checkpoint at step 2;
        # step 4, the last, before the final checkpoint.
        self.assertEqual(steps[1][0], ["event query busy"])
        self.assertEqual(steps[2][0][:3], ["event wait", "event query busy", "event wait"])
        self.assertEqual((steps[2][0][3], steps[2][0][-1]), ("copy device_to_host", "sync"))  # the checkpoint
        self.assertEqual(steps[3][0], ["event query busy"])
        self.assertEqual(after[:3], ["event wait", "event query busy", "event wait"])

    def assert_same_run(self, report, out):
        """report (its checkpoints in out) is bitwise the op-by-op bf16 flash_mma run."""
        eager = self.cuda["bf16", "flash_mma"]
        self.assertEqual(report["train_losses"], eager["train_losses"])
        self.assertEqual(report["final_validation_loss"], eager["final_validation_loss"])
        last = f"model_{STEPS:08d}.bin"
        with open(os.path.join(self.tmp, out, last), "rb") as a, \
                open(os.path.join(self.tmp, "bf16_flash_mma", last), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_graphs_replay_the_step_bitwise(self):
        eager = self.cuda["bf16", "flash_mma"]
        self.assert_same_run(self.graphs, "graphs")
        lib = self.graphs["op_library"]
        self.assertEqual((lib["graphs"], lib["graph_recordings"]), (True, 1))
        self.assertEqual((eager["op_library"]["graphs"], eager["op_library"]["graph_recordings"]), (False, 0))

        eager_steps = [ops for _, ops in self.traced_steps(self.trace)[0]]
        graph_steps = [ops for _, ops in self.traced_steps(self.graph_trace)[0]]
        self.assertEqual(len(graph_steps), STEPS)
        # The first step runs op by op (its segment may also hold the context's setup).
        launched = lambda step: [e for e in step if e in ("launch", "replay", "graph")]
        self.assertEqual(launched(graph_steps[0]), launched(eager_steps[0]))
        # The second records the forward/backward and launches the recording; every later
        # step launches it again. Only the rest (zeroing, token widening, the optimizer)
        # is launched op by op, and the kernels and memsets that run are the same as without graphs.
        self.assertEqual([e for e in graph_steps[1] if e == "capture"], ["capture"])
        ran = lambda step: sum(step.count(e) for e in ("launch", "memset", "replay", "replay memset"))
        launches = ran(eager_steps[1])
        for step in graph_steps[1:]:
            self.assertEqual(step.count("graph"), 2)  # a launch per micro-step: 256 tokens of 2 x 64
            self.assertEqual(ran(step), launches)
            self.assertLess(step.count("launch"), 10)
            self.assertNotIn("malloc", step)
            self.assertNotIn("free", step)
            self.assertNotIn("sync", step)
        self.assertEqual(graph_steps[2], graph_steps[3])

    def test_overlap_is_the_same_run(self):
        # A second stream changes when the weight and bias gradients run, not what they are;
        # the graph holds the fork and the join (the emulator refuses a capture that would
        # end with the side stream's work not rejoined).
        self.assert_same_run(self.overlap, "overlap")
        lib = self.overlap["op_library"]
        self.assertEqual((lib["graphs"], lib["graph_recordings"], "graphs_note" in lib), (True, 1, False))
        self.assertEqual(lib["options"], {"attention": "flash_mma", "overlap": "on", "pdl": "on"})

    def test_recompute_is_the_same_run_in_less_memory(self):
        # The recomputed activations are the forward's bit for bit (the same kernels on the same
        # inputs), so the gradients are, and the run is the op-by-op bf16 run that kept them all;
        # its sample too.
        self.assert_same_run(self.recompute, "recompute")
        eager = self.cuda["bf16", "flash_mma"]
        self.assertEqual(self.recompute["sample_tokens"], eager["sample_tokens"])
        lib = self.recompute["op_library"]
        self.assertEqual((lib["graphs"], lib["graph_recordings"]), (True, 1))
        # Two layers: one layer's copy of everything but each layer's output is kept, not two.
        self.assertLess(self.recompute["activation_bytes"], eager["activation_bytes"])
        self.assertEqual(self.recompute["memory_bytes"] - self.recompute["activation_bytes"],
                         eager["memory_bytes"] - eager["activation_bytes"])

    def test_best_fit_rows_track_the_cpu(self):
        # --packing bestfit: rows go up as int32 inputs and targets from the page-locked buffers,
        # queued, two sets alternating by step, with the micro-step replayed as a graph.
        packing = ["--packing", "bestfit", "--packing-buffer", "8", "--eot-token", str(self.frequent),
                   "--eval-batches", "0", "--sample-tokens", "0", "--checkpoint-every", "0"]
        cpu = run(self.common + packing + ["--backend", "cpu", "--tile-ops-lib", CPU_LIB, "--threads", "2",
                                           "--matmul", "f32", "--output-dir", os.path.join(self.tmp, "cpu_fit")])
        cuda = run(self.common + packing + ["--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", "f32",
                                            "--output-dir", os.path.join(self.tmp, "cuda_fit")])
        self.assertEqual(cuda["op_library"]["graph_recordings"], 1)
        self.assertLess(np.max(np.abs(losses(cuda) - losses(cpu)) / losses(cpu)), 1e-5)
        self.assertGreater(np.max(np.abs(losses(cpu) - losses(self.cpu))), 1e-3)  # other rows than contiguous

    def test_stage_timing_runs_op_by_op_and_changes_nothing(self):
        # --graphs auto would record the step here; the timing events cannot be recorded in a
        # graph, so the step runs op by op (the run says so) and is bitwise the op-by-op run.
        proc = subprocess.run([TRAINER] + self.common + ["--backend", "cuda", "--tile-ops-lib", EMULATED_LIB,
                                                         "--dtype", "bf16", "--attention", "flash_mma",
                                                         "--stage-timing", "--output-dir",
                                                         os.path.join(self.tmp, "stage_timing")],
                              capture_output=True, text=True, timeout=600)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        report = json.loads(proc.stdout)
        self.assert_same_run(report, "stage_timing")
        self.assertIn(", --stage-timing (graphs off)", proc.stderr.splitlines()[0])
        lib = report["op_library"]
        self.assertEqual((lib["graphs"], lib["graph_recordings"]), (False, 0))
        self.assertIn("--stage-timing", lib["graphs_note"])
        t = report["stage_timing"]
        self.assertEqual((t["clock"], t["timed_steps"]), ("cuda events", STEPS - 1))
        self.assertEqual(len(t["stage_ms"]), 8)
        self.assertTrue(all(ms > 0 for ms in t["stage_ms"].values()), t["stage_ms"])
        self.assertLessEqual(t["total_ms"], t["step_ms"])
        self.assertIn("nfn: stage timing (cuda events): median of 3 steps", proc.stderr)

    def test_graphs_on_the_cpu_library_fail_up_front(self):
        proc = subprocess.run([TRAINER] + self.common + ["--backend", "cpu", "--tile-ops-lib", CPU_LIB,
                                                         "--graphs", "on", "--output-dir",
                                                         os.path.join(self.tmp, "cpu_graphs")],
                              capture_output=True, text=True, timeout=120)
        self.assertNotEqual(proc.returncode, 0)
        lines = proc.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, proc.stderr)
        self.assertIn("--graphs on: graph_begin: the CPU library runs each op as it is issued", lines[0])
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "cpu_graphs", "report.json")))
        # Where --graphs auto, the default, ran the CPU: op by op, and nothing to say about it.
        lib = self.cpu["op_library"]
        self.assertEqual((lib["graphs"], lib["graph_recordings"], "graphs_note" in lib), (False, 0, False))

    def test_check_asks_the_library_for_the_geometry(self):
        # --check (what `nfn train` runs before preparing data) finds what the first step would,
        # and a run finds it before its first step: the CUDA library has no attention kernels past
        # head size 128 (the CPU library has), nor grids of more than 65535 rows and heads; head
        # sizes below 128 that are not 16, 32 or 64 (48 here) run flash_simt.
        def trainer(backend, lib, heads, channels, *more):
            out = os.path.join(self.tmp, "checked" if "--check" in more else "ran")  # --check writes nothing
            geometry = ["--num-heads", str(heads), "--model-dim", str(channels), "--output-dir", out]
            return subprocess.run([TRAINER] + self.common + ["--backend", backend, "--tile-ops-lib", lib, *geometry,
                                                             *more], capture_output=True, text=True, timeout=120)
        for more in (["--check"], []):
            proc = trainer("cuda", EMULATED_LIB, 2, 512, *more)
            self.assertEqual((proc.returncode, proc.stderr), (2, "nfn_gpt_native_train: error: the model (2 heads of "
                             "512 channels, micro-batch 2): attention_forward: head dim HD=256 exceeds 128\n"),
                             more)
        for more in (["--check"], ["--train-seq-len", "1", "--eval-batches", "0"]):  # a run: one position a row
            seq = int(more[1]) if len(more) > 1 else 64
            proc = trainer("cuda", EMULATED_LIB, 32, 2048, "--batch-size", "2048", "--train-batch-tokens",
                           str(2048 * seq), *more)
            self.assertEqual(proc.returncode, 2, proc.stderr)
            self.assertIn("micro-batch 2048): attention_forward: B*NH=65536 exceeds 65535", proc.stderr)
        for backend, lib, heads, channels in [("cuda", EMULATED_LIB, 2, 128), ("cuda", EMULATED_LIB, 2, 96),
                                              ("cpu", CPU_LIB, 2, 512)]:
            proc = trainer(backend, lib, heads, channels, "--check")
            self.assertEqual((proc.returncode, proc.stderr), (0, ""), (backend, heads, channels))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "checked")))

    def test_bf16_resume_is_bitwise_identical(self):
        full = os.path.join(self.tmp, "bf16_flash_mma")
        out = os.path.join(self.tmp, "resumed")
        shutil.copytree(full, out)
        last = f"{STEPS:08d}"
        for f in [f"model_{last}.bin", f"state_{last}_00000.bin", f"DONE_{last}", "report.json"]:
            os.remove(os.path.join(out, f))
        report = run(self.common + ["--backend", "cuda", "--tile-ops-lib", EMULATED_LIB, "--dtype", "bf16",
                                    "--attention", "flash_mma", "--output-dir", out, "--resume", "auto"])
        self.assertEqual(report["resumed_from"], os.path.join(out, "model_00000002.bin"))
        self.assertEqual(report["train_losses"], self.cuda["bf16", "flash_mma"]["train_losses"][2:])
        for f in [f"model_{last}.bin", f"state_{last}_00000.bin"]:
            with open(os.path.join(out, f), "rb") as a, open(os.path.join(full, f), "rb") as b:
                self.assertEqual(a.read(), b.read(), f)


if __name__ == "__main__":
    unittest.main()
