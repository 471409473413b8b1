"""tools/build_wheel.py on the real CPU op library and dispatcher: what it bundles, the search
path it writes (read back by readelf, an independent reader), byte-identical output from the
same inputs, and each input it refuses with one line naming the cause."""
import os
import subprocess
import sys
import tempfile
import unittest
import zipfile

TOOL = os.path.abspath(os.environ["NFN_BUILD_WHEEL"])
CPU_LIB = os.path.abspath(os.environ["NFN_CPU_OPS_LIB"])
DISPATCHER = os.path.abspath(os.environ["NFN_DISPATCHER"])
RUNTIME = [os.path.abspath(p) for p in os.environ["NFN_RUNTIME_LIBS"].split()]
TAG = "cp%d%d-cp%d%d-linux_x86_64" % (sys.version_info[:2] * 2)


def dynamic(path):
    """readelf's NEEDED sonames and RUNPATH of a file."""
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    needed = [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(NEEDED)" in l]
    runpath = [l.split("[")[1].rstrip("]") for l in out.splitlines() if "(RUNPATH)" in l]
    return needed, runpath


class BuildWheelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        os.makedirs(os.path.join(cls.tmp, "py", "nfn"))
        with open(os.path.join(cls.tmp, "py", "nfn", "__init__.py"), "w") as f:
            f.write('"""nfn for the test."""\n__version__ = "9.9.9"\n')
        with open(os.path.join(cls.tmp, "requirements.txt"), "w") as f:
            f.write("# pinned\nnumpy>=1.26\nrustbpe==0.1.0  # chat\n")

    def build(self, name, version="9.9.9", requires=("numpy",), candidates=RUNTIME):
        out = os.path.join(self.tmp, name, f"nfn-{version}-{TAG}.whl")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        argv = [TOOL, "--out", out, "--init", "py/nfn/__init__.py", "--requirements", "requirements.txt",
                "--bin-dir", "bazel-out/bin", "--package-root", "py", "--console-script", "nfn=nfn.cli.main:main",
                "--extra", "chat=rustbpe", "--package-files", "py/nfn/__init__.py",
                "--native-files", DISPATCHER, CPU_LIB, "--bundle-candidates", *candidates]
        for r in requires:
            argv += ["--requires", r]
        proc = subprocess.run(argv, cwd=self.tmp, capture_output=True, text=True)
        return proc.returncode, proc.stderr, out

    def test_bundles_what_the_op_library_needs_and_points_it_at_itself(self):
        code, err, wheel = self.build("a")
        self.assertEqual(code, 0, err)
        with zipfile.ZipFile(wheel) as z:
            native = sorted(n for n in z.namelist() if n.startswith("nfn/_native_bin/"))
            self.assertEqual([n.split("/")[-1] for n in native],
                             ["libdnnl.so.3", "libgomp.so.1", "libnfn_native_train_cpu_ops.so",
                              "libscipy_openblas.so", "nfn_native_train"])
            self.assertEqual(z.getinfo("nfn/_native_bin/nfn_native_train").external_attr >> 16, 0o100755)
            self.assertIn('Requires-Dist: rustbpe==0.1.0; extra == "chat"',
                          z.read("nfn-9.9.9.dist-info/METADATA").decode())
            z.extractall(os.path.join(self.tmp, "a", "x"))
        lib = os.path.join(self.tmp, "a", "x", "nfn", "_native_bin", "libnfn_native_train_cpu_ops.so")
        self.assertEqual(dynamic(lib), (dynamic(CPU_LIB)[0], ["$ORIGIN"]))
        with open(DISPATCHER, "rb") as f, open(lib.replace("libnfn_native_train_cpu_ops.so", "nfn_native_train"),
                                               "rb") as g:
            self.assertEqual(f.read(), g.read())  # needs nothing outside the system: left as built
        code, err, again = self.build("b")
        self.assertEqual(code, 0, err)
        with open(wheel, "rb") as f, open(again, "rb") as g:
            self.assertEqual(f.read(), g.read())

    def test_refuses_a_library_it_cannot_bundle(self):
        code, err, _ = self.build("c", candidates=[p for p in RUNTIME if "openblas" in p])
        self.assertEqual(code, 1)
        self.assertIn("libnfn_native_train_cpu_ops.so needs libdnnl.so.3, which is neither a system "
                      "library nor among the libraries to bundle", err)

    def test_refuses_a_stale_version_and_an_unpinned_dependency(self):
        code, err, _ = self.build("d", version="1.0.0")
        self.assertEqual(code, 1)
        self.assertIn("version 1.0.0, but py/nfn/__init__.py says 9.9.9", err)
        code, err, _ = self.build("e", requires=("numpy", "tiktoken"))
        self.assertEqual(code, 1)
        self.assertIn("tiktoken: not in requirements.txt", err)


if __name__ == "__main__":
    unittest.main()
