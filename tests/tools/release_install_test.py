"""The release tarball (`bazel build //:release`), installed by tools/install.sh into a temporary
prefix and run from there the way a user without Bazel runs it: in a mount namespace (bwrap)
where the source tree, Bazel's output folders and the bazel command are empty or gone, from an
empty folder, with PATH holding only PREFIX/bin and no runfiles or PYTHONPATH variables. The demo
training runs a few steps, `nfn infer` reads its checkpoint, `nfn kernels doctor` finds the
installed op library. Bad input: a tarball whose checksum fails, files that fail the manifest,
a read-only prefix, each one line and a non-zero exit with nothing written. --uninstall leaves
the prefix as it was.

The install's environment is made with --system-site-packages, so pip finds nfn's dependencies
already installed for the interpreter that builds nfn and needs no index here.
"""
import hashlib
import io
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

import bundled_linkage

RELEASE = [p for p in os.environ["NFN_RELEASE"].split() if p.endswith(".tar.gz")][0]
INSTALL = os.path.abspath(os.environ["NFN_INSTALL"])
HAS_CUDA = os.environ["NFN_HAS_CUDA"] == "1"
NAME = os.path.basename(RELEASE)
TOP = NAME[:-len(".tar.gz")]
VERSION = TOP[len("nfn-"):-len("-linux-x86_64")]
TOOLS_PATH = "/usr/bin:/bin"


def run(argv, env, cwd, timeout=600):
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def output_root(path):
    """The Bazel folder a built file lives in: .../execroot/<workspace>/bazel-out."""
    real = os.path.realpath(path)
    return real[:real.index("/bazel-out/") + len("/bazel-out")]


class ReleaseInstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.dist = os.path.join(cls.tmp, "dist")
        os.makedirs(cls.dist)
        for path in (RELEASE, RELEASE + ".sha256"):
            shutil.copy(path, cls.dist)
        cls.tarball = os.path.join(cls.dist, NAME)
        cls.prefix = os.path.join(cls.tmp, "prefix")
        os.makedirs(os.path.join(cls.prefix, "bin"))
        with open(os.path.join(cls.prefix, "bin", "other-tool"), "w") as f:
            f.write("not nfn's\n")
        cls.before = cls.tree(cls.prefix)
        cls.install_env = {"PATH": os.path.dirname(sys.executable) + ":" + TOOLS_PATH, "HOME": cls.tmp,
                           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INDEX": "1", "LANG": "C.UTF-8"}
        code, out, err = run([INSTALL, "--prefix", cls.prefix, "--tarball", cls.tarball], cls.install_env, cls.tmp)
        assert code == 0, f"install.sh: {out}{err}"
        cls.install_out = out
        cls.package = os.path.join(cls.prefix, "lib", "nfn", "python", "nfn")
        cls.native_bin = os.path.join(cls.package, "_native_bin")
        cls.cwd = os.path.join(cls.tmp, "empty")
        os.makedirs(cls.cwd)
        cls.env = {"PATH": os.path.join(cls.prefix, "bin"), "HOME": os.path.join(cls.tmp, "home"),
                   "TMPDIR": cls.tmp, "LANG": "C.UTF-8",
                   "NFN_ARTIFACTS_DIR": os.path.join(cls.tmp, "artifacts"),
                   "NFN_DATASETS_DIR": os.path.join(cls.tmp, "datasets"),
                   "NFN_TOKENIZERS_DIR": os.path.join(cls.tmp, "tokenizers")}
        # What must be out of sight: the source tree (where install.sh really lives), Bazel's
        # output folders and the bazel command. The temporary folder may sit under the output
        # base, so only folders that do not hold it are hidden.
        cls.workspace = os.path.dirname(os.path.dirname(os.path.realpath(INSTALL)))
        output_base = output_root(RELEASE).split("/execroot/")[0]
        hidden = [cls.workspace, output_root(RELEASE), os.path.join(output_base, "external")]
        cls.hidden = [h for h in hidden if os.path.isdir(h) and not (cls.tmp + "/").startswith(h + "/")]
        cls.bwrap = ["bwrap", "--dev-bind", "/", "/"] + [a for h in cls.hidden for a in ("--tmpfs", h)]
        bazel = shutil.which("bazel", path=TOOLS_PATH + ":/usr/local/bin")
        if bazel:
            cls.bwrap += ["--ro-bind", "/dev/null", os.path.realpath(bazel)]
        cls.bwrap = [shutil.which("bwrap", path=TOOLS_PATH)] + cls.bwrap[1:]

    @staticmethod
    def tree(root):
        out = {}
        for folder, dirs, files in os.walk(root):
            for name in dirs + files:
                path = os.path.join(folder, name)
                with open(path, "rb") if os.path.isfile(path) else io.BytesIO(b"/") as f:
                    out[os.path.relpath(path, root)] = f.read()
        return out

    def nfn(self, *args, timeout=600):
        code, out, err = run(self.bwrap + ["nfn"] + list(args), self.env, self.cwd, timeout)
        self.assertEqual(code, 0, f"nfn {' '.join(args)}:\n{err}")
        return out

    def test_sandbox_hides_bazel_and_the_source_tree(self):
        self.assertIn(self.workspace, self.hidden)
        self.assertTrue(os.path.isfile(os.path.join(self.workspace, "WORKSPACE")))
        probe = ("import os, shutil, sys; print(json.dumps([os.path.exists(sys.argv[1]), "
                 "shutil.which('bazel', path='/usr/bin:/bin:/usr/local/bin'), "
                 "sorted(k for k in os.environ if 'RUNFILES' in k or k.startswith(('TEST_', 'PYTHON')))]))")
        python = os.path.join(self.prefix, "lib", "nfn", "venv", "bin", "python")
        code, out, err = run(self.bwrap + [python, "-c", "import json; " + probe,
                                           os.path.join(self.workspace, "WORKSPACE")], self.env, self.cwd)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out), [False, None, []])

    def test_version_prints_the_stamped_commit(self):
        line = self.nfn("--version").strip()
        match = re.fullmatch(r"nfn (\S+) \(commit ([0-9a-f]{40}(-dirty)?)\)", line)
        self.assertIsNotNone(match, line)
        self.assertEqual(match.group(1), VERSION)
        with open(os.path.join(self.prefix, "share", "nfn", "release.json")) as f:
            self.assertEqual(json.load(f)["commit"], match.group(2))
        head = subprocess.run(["git", "-C", self.workspace, "rev-parse", "HEAD"], capture_output=True, text=True,
                              env={"PATH": TOOLS_PATH})
        if head.returncode == 0:  # built from this checkout
            self.assertEqual(match.group(2).split("-")[0], head.stdout.strip())

    def test_tarball_layout_manifest_and_licenses(self):
        with open(RELEASE + ".sha256") as f:
            self.assertEqual(f.read(), f"{hashlib.sha256(open(RELEASE, 'rb').read()).hexdigest()}  {NAME}\n")
        with tarfile.open(RELEASE) as t:
            files = {m.name[len(TOP) + 1:]: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}
            self.assertTrue(all(m.name.startswith(TOP + "/") for m in t.getmembers()))
        manifest = files.pop("share/nfn/MANIFEST.sha256").decode().splitlines()
        self.assertEqual(sorted(line.split("  ", 1)[1] for line in manifest), sorted(files))
        for line in manifest:
            digest, path = line.split("  ", 1)
            self.assertEqual(hashlib.sha256(files[path]).hexdigest(), digest, path)
        native = sorted(p.rsplit("/", 1)[1] for p in files if p.startswith("lib/nfn/python/nfn/_native_bin/"))
        for family in ("gpt", "nanochat", "llama"):
            self.assertIn(f"nfn_{family}_native_train", native)
        for name in ("nfn_native_train", "nfn_op_probe", "libnfn_native_train_cpu_ops.so"):
            self.assertIn(name, native)
        self.assertEqual("libnfn_native_train_tile_ops.so" in native, HAS_CUDA)
        self.assertIn("lib/nfn/python/nfn/_native.so", files)
        self.assertTrue(files["bin/nfn"].startswith(b"#!"))
        licenses = {p.split("/")[3] for p in files if p.startswith("share/nfn/licenses/")}
        wanted = {"nanobind"} | {c for lib, c in [("libdnnl", "onednn"), ("libscipy_openblas", "openblas"),
                                                  ("libgomp", "libgomp"), ("libcudart", "cuda")]
                                 if any(n.startswith(lib) for n in native)}
        self.assertEqual(licenses, wanted)
        requirements = files["share/nfn/requirements.txt"].decode().split()
        self.assertIn("numpy>=1.26", requirements)

    def test_native_files_load_only_bundled_and_system_libraries(self):
        searched = []
        for path in bundled_linkage.native_files(self.package, self.native_bin):
            bundled_linkage.check(self, path, self.native_bin, self.cwd)
            code, out, err = run(["readelf", "-d", path], {"PATH": TOOLS_PATH}, self.cwd)
            self.assertEqual(code, 0, err)
            # A search path, where a file has one, is relative to the file: never the build's.
            paths = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[(.*)\]", out)
            self.assertTrue(all(p.startswith("$ORIGIN") for p in paths), f"{path}: {paths}")
            searched += [os.path.basename(path)] if paths else []
        self.assertIn("_native.so", searched)
        self.assertIn("libnfn_native_train_cpu_ops.so", searched)

    def test_demo_training_then_infer_and_doctor(self):
        run_dir = os.path.join(self.tmp, "demo")
        report = json.loads(self.nfn("train", "--max-steps", "3", "--eval-batches", "1", "--sample-tokens", "4",
                                     "--backend", "cpu", "--output-dir", run_dir, "--json"))
        self.assertEqual([step for step, _ in report["train_losses"]], [1, 2, 3])
        for _, loss in report["train_losses"]:
            self.assertTrue(math.isfinite(loss) and 0 < loss < 20, report["train_losses"])
        self.assertTrue(report["config"]["data"]["train"].startswith(self.env["NFN_DATASETS_DIR"]))
        out = json.loads(self.nfn("infer", "--checkpoint", run_dir, "--prompt", "To be", "--max-new-tokens", "6",
                                  "--backend", "cpu", "--json"))
        self.assertEqual(out["checkpoint"], os.path.join(run_dir, "model_00000003.bin"))
        self.assertEqual(len(out["generated_tokens"]), 6)
        doctor = json.loads(self.nfn("kernels", "doctor", "--json"))
        cpu = doctor["op_libraries"]["cpu"]
        self.assertTrue(cpu["opens"], cpu)
        self.assertEqual(cpu["path"], os.path.join(self.native_bin, "libnfn_native_train_cpu_ops.so"))

    def install_fails(self, tarball, prefix, wrap=()):
        code, out, err = run(list(wrap) + [INSTALL, "--prefix", prefix, "--tarball", tarball], self.install_env,
                             self.tmp)
        self.assertEqual(code, 1, out + err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertTrue(err.startswith("install.sh: error: "), err)
        return err

    def test_bad_checksums_and_a_read_only_prefix_write_nothing(self):
        bad = os.path.join(self.tmp, "bad")
        os.makedirs(bad)
        tampered = os.path.join(bad, NAME)
        shutil.copy(RELEASE + ".sha256", bad)
        with open(RELEASE, "rb") as f, open(tampered, "wb") as g:
            data = bytearray(f.read())
            data[len(data) // 2] ^= 1
            g.write(data)
        err = self.install_fails(tampered, os.path.join(bad, "p1"))
        self.assertIn("does not match", err)
        # A consistent tarball and .sha256 whose files differ from the manifest inside.
        repacked = os.path.join(bad, "repack")
        with tarfile.open(RELEASE) as t:
            t.extractall(repacked)
        with open(os.path.join(repacked, TOP, "lib/nfn/python/nfn/__init__.py"), "a") as f:
            f.write("# changed\n")
        with tarfile.open(tampered, "w:gz") as t:
            t.add(os.path.join(repacked, TOP), TOP)
        with open(tampered, "rb") as f, open(tampered + ".sha256", "w") as g:
            g.write(f"{hashlib.sha256(f.read()).hexdigest()}  {NAME}\n")
        err = self.install_fails(tampered, os.path.join(bad, "p2"))
        self.assertIn("MANIFEST.sha256", err)
        readonly = os.path.join(bad, "readonly")
        os.makedirs(readonly)
        err = self.install_fails(self.tarball, readonly,
                                 [self.bwrap[0], "--dev-bind", "/", "/", "--ro-bind", readonly, readonly])
        self.assertIn(f"cannot write to {readonly}", err)
        for name in ("p1", "p2"):
            self.assertFalse(os.path.exists(os.path.join(bad, name)), name)
        self.assertEqual(os.listdir(readonly), [])

    def test_z_uninstall_leaves_the_prefix_as_it_was(self):  # last: the other tests use the install
        self.assertNotEqual(self.tree(self.prefix), self.before)
        code, out, err = run([INSTALL, "--uninstall", "--prefix", self.prefix], self.install_env, self.tmp)
        self.assertEqual(code, 0, err)
        self.assertEqual(out, f"install.sh: removed nfn {VERSION} from {self.prefix}\n")
        self.assertEqual(self.tree(self.prefix), self.before)
        code, out, err = run([INSTALL, "--uninstall", "--prefix", self.prefix], self.install_env, self.tmp)
        self.assertEqual((code, err.count("\n")), (1, 1), err)


if __name__ == "__main__":
    unittest.main()
