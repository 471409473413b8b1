"""The trainer binary's checkpoint queries (`nfn_native_train --inspect-checkpoint` and
`--inspect-geometry`), which `nfn infer`, `nfn eval` and `nfn train --resume` ask: every field
against files written byte by byte here and shapes and sizes worked out here, and bad input
as one line and a non-zero exit."""
import json
import math
import os
import shutil
import subprocess
import tempfile
import unittest

import fixtures
from nfn.native_bin import trainer_binary

T, V, L, NH, C = 16, 1000, 2, 2, 32


def ask(*args):
    """(exit code, the JSON answer or None, stderr)."""
    proc = subprocess.run([trainer_binary(), *args], capture_output=True, text=True, timeout=60)
    return proc.returncode, json.loads(proc.stdout) if proc.returncode == 0 else None, proc.stderr


class CheckpointQueryTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.geom, cls.params = fixtures.random_model(T, V, L, NH, C, seed=2)
        cls.run_dir = os.path.join(cls.tmp, "run")
        os.makedirs(cls.run_dir)
        cls.model = os.path.join(cls.run_dir, "model_00000007.bin")
        fixtures.write_llmc_by_hand(cls.model, cls.geom, cls.params, version=5)
        cls.manifest = {"format": "nfn.manifest", "version": 1, "geometry": cls.geom, "step": 7, "run_id": "r"}
        with open(os.path.join(cls.run_dir, "DONE_00000007"), "w") as f:
            json.dump(cls.manifest, f)
        shutil.copy(os.path.join(cls.run_dir, "DONE_00000007"), os.path.join(cls.run_dir, "manifest.json"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def test_a_checkpoint_directory(self):
        code, a, err = ask(f"--inspect-checkpoint={self.run_dir}", "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual((a["kind"], a["path"], a["step"]), ("llmc", self.model, 7))
        self.assertEqual(a["manifest_file"], os.path.join(self.run_dir, "DONE_00000007"))
        self.assertEqual(a["manifest"], self.manifest)
        Vp = (V + 127) // 128 * 128
        self.assertEqual(self.geom["padded_vocab_size"], Vp)
        shapes = fixtures.llmc_shapes(T, Vp, L, C)
        sizes = [2 * math.prod(s) for s in shapes]  # bf16: 2 bytes an element
        self.assertEqual(a["header"], {"magic": 20240326, "version": 5, "dtype": "bf16", **self.geom,
                                       "parameters": sum(sizes) // 2, "file_bytes": 1024 + sum(sizes)})
        self.assertEqual(a["header"]["file_bytes"], os.path.getsize(self.model))
        offsets = [1024 + sum(sizes[:i]) for i in range(len(sizes))]
        self.assertEqual(a["tensors"], [{"name": n, "shape": list(s), "dtype": "bf16", "offset": o, "bytes": b}
                                        for n, s, o, b in zip(fixtures.NAMES, shapes, offsets, sizes)])
        # --resolve-only reads no model file: the same choice, without header or tensors.
        code, r, err = ask(f"--inspect-checkpoint={self.run_dir}", "--resolve-only", "--json")
        self.assertEqual(code, 0, err)
        self.assertEqual(r, {k: a[k] for k in ("kind", "path", "step", "manifest_file", "manifest")})
        # A resume needs the step's state file, which this directory lacks.
        code, _, err = ask(f"--inspect-checkpoint={self.run_dir}", "--for-resume", "--json")
        self.assertEqual((code, err.strip()),
                         (1, f"nfn_gpt_native_train: error: {self.run_dir}: incomplete checkpoint: model_00000007.bin "
                             "has no state_00000007_00000.bin (a resume needs the optimizer's state)"))

    def test_names_an_artifact_a_file_a_home_path_and_a_hugging_face_directory(self):
        code, a, err = ask("--inspect-checkpoint=run", f"--artifacts-dir={self.tmp}", "--json")
        self.assertEqual((code, a and a["path"]), (0, self.model), err)
        relative = os.path.relpath(self.model)
        code, a, err = ask(f"--inspect-checkpoint={relative}", "--json")
        self.assertEqual((code, a and a["path"]), (0, self.model), err)
        env = dict(os.environ, HOME=self.tmp)
        proc = subprocess.run([trainer_binary(), "--inspect-checkpoint=~/run/../run/model_00000007.bin",
                               "--resolve-only"], capture_output=True, text=True, env=env)
        self.assertEqual(json.loads(proc.stdout)["path"], self.model, proc.stderr)
        hf = os.path.join(self.tmp, "hf")
        os.makedirs(hf)
        for name in ("config.json", "model.safetensors", "model_00000001.bin"):
            open(os.path.join(hf, name), "w").close()
        code, a, err = ask(f"--inspect-checkpoint={hf}", "--json")
        self.assertEqual((code, a), (0, {"kind": "hf", "path": hf, "step": None, "manifest_file": None,
                                         "manifest": None}), err)

    def test_a_geometry(self):
        for vocab, padded in ((50257, 50304), (1024, 1024), (1025, 1152)):
            code, a, err = ask("--inspect-geometry", "--max-seq-len=8", f"--vocab-size={vocab}", "--num-layers=3",
                               "--num-heads=4", "--channels=16", "--json")
            self.assertEqual(code, 0, err)
            self.assertEqual(a["geometry"], {"max_seq_len": 8, "vocab_size": vocab, "num_layers": 3, "num_heads": 4,
                                             "channels": 16, "padded_vocab_size": padded})
            shapes = fixtures.llmc_shapes(8, padded, 3, 16)
            counts = [math.prod(s) for s in shapes]
            self.assertEqual(a["parameters"], sum(counts))
            self.assertEqual(a["tensors"], [{"name": n, "shape": list(s), "elements": k,
                                             "element_offset": sum(counts[:i])}
                                            for i, (n, s, k) in enumerate(zip(fixtures.NAMES, shapes, counts))])
        code, a, err = ask("--inspect-geometry", "--max-seq-len=8", "--vocab-size=100", "--num-layers=1",
                           "--num-heads=1", "--channels=4", "--padded-vocab-size=200", "--json")
        self.assertEqual((code, a and a["geometry"]["padded_vocab_size"]), (0, 200), err)

    def test_bad_input_is_one_line(self):
        bad_magic = os.path.join(self.tmp, "bad_magic.bin")
        fixtures.write_llmc_by_hand(bad_magic, self.geom, self.params, magic=7)
        geometry = ["--inspect-geometry", "--max-seq-len=8", "--vocab-size=100", "--num-layers=1", "--channels=6"]
        for args, code_want, says in [
                ([f"--inspect-checkpoint={bad_magic}"], 1, f"{bad_magic}: bad magic 7"),
                ([f"--inspect-checkpoint={self.tmp}/absent", f"--artifacts-dir={self.tmp}"], 1,
                 f"checkpoint {self.tmp}/absent: not a file, a directory, or an artifact name under {self.tmp}"),
                (geometry + ["--num-heads=4"], 1,
                 "geometry: channels (6) must be a positive multiple of num_heads (4)"),
                (geometry, 1, "--inspect-geometry needs --num-heads"),
                (geometry + ["--num-heads=x"], 2, "--num-heads: 'x' is not an integer"),
                ([f"--inspect-checkpoint={self.run_dir}", "--inspect-geometry"], 2, "two questions"),
                (["--inspect-geometry", "--bogus"], 2, "unknown flag --bogus")]:
            with self.subTest(args=args):
                code, _, err = ask(*args)
                self.assertEqual((code, len(err.strip().splitlines())), (code_want, 1), err)
                self.assertIn(says, err)


if __name__ == "__main__":
    unittest.main()
