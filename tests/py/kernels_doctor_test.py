"""`nfn kernels doctor`: what it finds, from fake nvcc/nvidia-smi programs, the real op libraries
and the real nfn_op_probe, checked against what the trainer itself does with the same files."""
import ctypes
import importlib
import json
import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import unittest

from nfn import cuda_runtime
from nfn.cli import kernels
from nfn.kernels import registry

CUDA_LIB = "libnfn_native_train_tile_ops.so"
CPU_LIB = "libnfn_native_train_cpu_ops.so"
EMULATED_AUTO = f"{CUDA_LIB} loads and makes a context on device 0 (nfn CUDA emulator)"


def _loaded_path(name):
    """The file the loader opens for `name` (a library of this process: libc, through Python)."""
    ctypes.CDLL(name)
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip().endswith(name) or f"/{name}" in line:
                return line.split()[-1]
    raise AssertionError(f"{name} not found in /proc/self/maps")


def _cpu_flags():
    with open("/proc/cpuinfo") as f:
        return next((set(line.partition(":")[2].split()) for line in f if line.startswith("flags")), set())


def script(path, text):
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


class DoctorTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.bin = os.path.join(self.tmp.name, "bin")
        self.libs = os.path.join(self.tmp.name, "libs")
        # The probe alone in a folder of its own: no op library beside it, no runfiles, so it
        # finds only what NFN_TILE_OPS_DIR holds.
        self.probe_dir = os.path.join(self.tmp.name, "probe")
        for d in (self.bin, self.libs, self.probe_dir):
            os.makedirs(d)
        shutil.copy(os.environ["NFN_OP_PROBE"], os.path.join(self.probe_dir, kernels.PROBE))

    def tearDown(self):
        self.tmp.cleanup()

    def env(self):
        return {"PATH": self.bin, "NFN_TILE_OPS_DIR": self.libs, "NFN_NATIVE_BIN_DIR": self.probe_dir}

    def library(self, name, kind):
        """Put an op library named `name` in the libraries folder: the real CPU one, the emulated
        CUDA one, one built for another ABI version, an empty file, or a shared library that is
        no op library."""
        path = os.path.join(self.libs, name)
        if kind == "empty":
            open(path, "w").close()
        elif kind == "not ops":
            shutil.copy(_loaded_path("libc.so.6"), path)
        else:
            shutil.copy(os.environ[{"cpu": "NFN_CPU_OPS_LIB", "emulated": "NFN_EMULATED_CUDA_OPS_LIB",
                                    "stale": "NFN_STALE_ABI_OPS_LIB"}[kind]], path)
        return path

    def trainer(self, *flags):
        """(the report's op_library, stderr) of a one-step run of the trainer with the same
        folder; (None, stderr) where it refuses."""
        data = os.path.join(self.tmp.name, "data")
        if not os.path.isdir(data):
            os.makedirs(data)
            for split, n in (("train", 600), ("val", 100)):
                with open(os.path.join(data, f"t_{split}_000000.bin"), "wb") as f:
                    f.write(struct.pack("<3i", 20240520, 1, n) + bytes(1012) + bytes(2 * n))
        out = os.path.join(self.tmp.name, "out")
        shutil.rmtree(out, ignore_errors=True)
        proc = subprocess.run([os.environ["NFN_TRAINER"], "--train-data", data, "--vocab-size", "64", "--num-layers",
                               "1", "--num-heads", "2", "--model-dim", "64", "--train-seq-len", "32", "--batch-size",
                               "1", "--train-batch-tokens", "32", "--max-steps", "1", "--eval-every-steps", "0",
                               "--output-dir", out, "--json", *(flags or ("--backend", "auto"))],
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, NFN_TILE_OPS_DIR=self.libs))
        if proc.returncode != 0:
            return None, proc.stderr.strip()
        return json.loads(proc.stdout)["op_library"], proc.stderr

    def doctor(self, **kwargs):
        return kernels.doctor_report(self.env(), libcuda="libnfn-no-such-libcuda.so", **kwargs)

    def test_auto_is_what_the_trainer_loads(self):
        # Asked of the libraries by the trainer's own code, not from whether a GPU shows: the
        # emulated CUDA library under the CUDA library's name makes a context with no GPU here;
        # a file that does not load, or loads but is no op library, is passed over.
        cases = [("emulated", "cpu", "cuda", EMULATED_AUTO),
                 ("empty", "cpu", "cpu", ": cannot load op library: "),
                 ("not ops", "cpu", "cpu", ": missing symbol nfn_abi_version"),
                 ("emulated", "empty", "cuda", "(nfn CUDA emulator)"),
                 ("empty", "empty", None, "; and ")]
        for i, (cuda, cpu, want, reason) in enumerate(cases):
            with self.subTest(cuda=cuda, cpu=cpu):
                self.libs = os.path.join(self.tmp.name, f"libs{i}")
                os.makedirs(self.libs)
                self.library(CUDA_LIB, cuda)
                self.library(CPU_LIB, cpu)
                auto = self.doctor()["auto_backend"]
                self.assertEqual(auto["would_load"], want)
                self.assertIn(reason, auto["reason"])
                lib, err = self.trainer()
                if want is None:  # the trainer refuses, saying what the doctor says
                    self.assertIsNone(lib)
                    self.assertIn(auto["reason"], err)
                else:  # and the trainer's report notes the same reason
                    self.assertEqual((lib["backend"], lib["note"]), (want, "auto: " + auto["reason"]))
        r = self.doctor()
        self.assertIn(f"auto loads   nothing: {r['auto_backend']['reason']}", kernels.format_report(r))
        self.library(CUDA_LIB, "emulated")
        self.library(CPU_LIB, "cpu")
        text = kernels.format_report(self.doctor())
        self.assertIn(f"auto loads   cuda: {EMULATED_AUTO}", text)
        self.assertIn(f"cuda ops     {os.path.join(self.libs, CUDA_LIB)} (opens: nfn CUDA emulator)", text)

    def test_a_library_built_for_another_abi_version_is_passed_over(self):
        # Named by its version, as the trainer refuses it; the version this build expects is
        # the header's, which the registry records.
        expected = registry.load()["abi_version"]
        self.assertIsInstance(expected, int)
        self.library(CUDA_LIB, "stale")
        self.library(CPU_LIB, "stale")
        r = self.doctor()
        self.assertIsNone(r["auto_backend"]["would_load"])  # both libraries are the other version
        for name, key in ((CUDA_LIB, "cuda"), (CPU_LIB, "cpu")):
            why = f"{os.path.join(self.libs, name)}: op ABI version {expected + 1}, this build expects {expected}"
            self.assertIn(why, r["auto_backend"]["reason"])
            self.assertEqual(r["op_libraries"][key], {"path": os.path.join(self.libs, name), "opens": False,
                                                      "reason": why})
        self.assertEqual(r["thunderkittens"]["available"], None)
        lib, err = self.trainer()
        self.assertIsNone(lib)
        self.assertIn(f"op ABI version {expected + 1}, this build expects {expected}", err)

    def test_doctor_json_keys_and_light_imports(self):
        # The libraries are asked in nfn_op_probe: no numpy, no native module; the keys stay.
        from nfn_probe import run_nfn
        self.library(CUDA_LIB, "emulated")
        self.library(CPU_LIB, "cpu")
        code, out, err, modules = run_nfn(["kernels", "doctor", "--json"], env=self.env())
        self.assertEqual(code, 0, err)
        r = json.loads(out)
        self.assertEqual(sorted(r), ["auto_backend", "cpu", "gpu", "op_libraries", "runtime_libraries",
                                     "thunderkittens", "toolchain"])
        self.assertEqual(r["auto_backend"], {"would_load": "cuda", "reason": EMULATED_AUTO})
        self.assertEqual(r["op_libraries"]["cuda"], {"path": os.path.join(self.libs, CUDA_LIB), "opens": True,
                                                     "backend": "cuda", "device": "nfn CUDA emulator"})
        self.assertNotIn("numpy", modules)
        self.assertNotIn("nfn._native", modules)

    def test_a_listed_gpu_with_a_cuda_library_that_does_not_load_is_cpu(self):
        script(os.path.join(self.bin, "nvcc"), "echo 'Cuda compilation tools, release 13.0, V13.0.88'\n")
        script(os.path.join(self.bin, "nvidia-smi"), "echo 'NVIDIA H200, 580.159.03, 143771 MiB'\n")
        cuda = self.library(CUDA_LIB, "empty")
        self.library(CPU_LIB, "cpu")
        r = self.doctor()
        self.assertEqual(r["toolchain"], {"nvcc": os.path.join(self.bin, "nvcc"), "version": "13.0"})
        self.assertEqual(r["gpu"]["driver"], "580.159.03")
        self.assertEqual([d["name"] for d in r["gpu"]["devices"]], ["NVIDIA H200"])
        self.assertEqual((r["op_libraries"]["cuda"]["path"], r["op_libraries"]["cuda"]["opens"]), (cuda, False))
        self.assertEqual(r["auto_backend"]["would_load"], "cpu")  # as the trainer: the library does not load
        self.assertTrue(r["auto_backend"]["reason"].startswith(cuda + ": cannot load op library: "), r["auto_backend"])
        text = kernels.format_report(r)
        self.assertIn("NVIDIA H200", text)
        self.assertIn(f"cuda ops     {cuda} (does not open: cannot load op library: ", text)

    def test_no_cuda_library_is_cpu_and_no_library_is_nothing(self):
        self.library(CPU_LIB, "cpu")
        self.assertEqual(self.doctor()["auto_backend"], {"would_load": "cpu", "reason": "no CUDA op library built"})
        os.remove(os.path.join(self.libs, CPU_LIB))
        r = self.doctor()
        self.assertEqual([r["op_libraries"][k]["path"] for k in ("cuda", "cpu")], [None, None])
        self.assertIsNone(r["auto_backend"]["would_load"])
        self.assertTrue(r["auto_backend"]["reason"].startswith(f"no CUDA op library built; and no {CPU_LIB} "),
                        r["auto_backend"])
        self.assertIn("cpu ops      not found", kernels.format_report(r))

    def test_a_cuda_library_alone_that_does_not_load_loads_nothing(self):
        self.library(CUDA_LIB, "empty")
        r = self.doctor()
        self.assertIsNone(r["op_libraries"]["cpu"]["path"])
        self.assertIsNone(r["auto_backend"]["would_load"])  # as the trainer's auto fails there
        self.assertIn(": cannot load op library: ", r["auto_backend"]["reason"])
        self.assertIn(f"; and no {CPU_LIB} ", r["auto_backend"]["reason"])

    def test_failing_nvidia_smi_is_reported_not_raised(self):
        script(os.path.join(self.bin, "nvidia-smi"), "echo 'NVIDIA-SMI has failed' >&2; exit 9\n")
        self.library(CPU_LIB, "cpu")
        r = self.doctor()
        self.assertEqual(r["gpu"]["error"], "nvidia-smi failed")
        self.assertEqual(r["auto_backend"]["would_load"], "cpu")

    def test_a_failing_probe_is_reported_not_raised(self):
        script(os.path.join(self.probe_dir, kernels.PROBE), "echo 'it broke' >&2; exit 3\n")
        r = self.doctor()
        why = f"{os.path.join(self.probe_dir, kernels.PROBE)} exited with 3: it broke"
        self.assertEqual(r["auto_backend"], {"would_load": None, "reason": why})
        self.assertEqual(r["thunderkittens"], {"available": None, "reason": why})
        self.assertIsNone(r["cpu"]["bf16_matmul"]["supported"])
        self.assertIn(f"auto loads   nothing: {why}", kernels.format_report(r))

    def test_the_probe_takes_no_arguments(self):
        probe = os.path.join(self.probe_dir, kernels.PROBE)
        self.assertIn("usage: nfn_op_probe", subprocess.run([probe, "--help"], capture_output=True, text=True).stdout)
        proc = subprocess.run([probe, "--json"], capture_output=True, text=True)
        self.assertEqual((proc.returncode, proc.stdout), (2, ""))
        self.assertEqual(proc.stderr, "nfn_op_probe: error: unknown argument --json (it takes none; see --help)\n")

    def test_cpu_model_and_gemm_features_from_cpuinfo(self):
        cpuinfo = os.path.join(self.tmp.name, "cpuinfo")
        with open(cpuinfo, "w") as f:
            f.write("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse avx2 fma avx512f avx512_bf16\n\n"
                    "processor\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n")
        self.assertEqual(kernels.cpu_info(cpuinfo),
                         {"model": "Test CPU 9000", "features": ["avx2", "fma", "avx512f", "avx512_bf16"]})
        self.assertEqual(kernels.cpu_info(os.path.join(self.tmp.name, "missing")), {"model": "unknown", "features": []})
        r = self.doctor(cpuinfo=cpuinfo)
        self.assertIn("cpu          Test CPU 9000 (avx2 fma avx512f avx512_bf16)", kernels.format_report(r))
        # The CPU library names the same model as its device.
        self.library(CPU_LIB, "cpu")
        self.assertEqual(self.doctor()["op_libraries"]["cpu"]["device"], kernels.cpu_info()["model"])

    def test_the_cpu_trainers_gemm_default(self):
        # bf16 where the library offers it and the CPU has bf16 units (the flags the kernel
        # lists); offered without them (oneDNN emulates on plain AVX-512), f32. The trainer
        # run without --matmul takes what the doctor says.
        self.library(CPU_LIB, "cpu")
        bf16 = self.doctor()["cpu"]["bf16_matmul"]
        units = bool({"avx512_bf16", "amx_bf16"} & _cpu_flags())
        self.assertEqual(bf16["bf16_units"], units)
        self.assertEqual(bf16["trainer_default"], bool(bf16["supported"]) and units)
        lib, err = self.trainer("--backend", "cpu")
        self.assertIsNotNone(lib, err)
        self.assertEqual(lib["matmul"], "bf16" if bf16["trainer_default"] else "f32")
        # How the report words each answer.
        r = self.doctor()
        yes = {"supported": True, "reason": ""}
        r["cpu"]["bf16_matmul"] = dict(yes, bf16_units=False, trainer_default=False)
        self.assertIn("bf16 matmul  yes, emulated (no bf16 units): the CPU trainer's default stays f32",
                      kernels.format_report(r))
        r["cpu"]["bf16_matmul"] = dict(yes, bf16_units=True, trainer_default=True)
        self.assertIn("bf16 matmul  yes, the CPU trainer's default here", kernels.format_report(r))

    def test_bf16_matmul_is_asked_of_the_cpu_library(self):
        # A file that is no library: unknown, with the reason.
        open(os.path.join(self.libs, CPU_LIB), "w").close()
        r = self.doctor()
        self.assertIsNone(r["cpu"]["bf16_matmul"]["supported"])
        self.assertIn("cannot load", r["cpu"]["bf16_matmul"]["reason"])
        # The real library answers yes, or no with its one-line reason, and the trainer agrees.
        os.remove(os.path.join(self.libs, CPU_LIB))
        self.library(CPU_LIB, "cpu")
        real = self.doctor()["cpu"]["bf16_matmul"]
        self.assertIn(real["supported"], (True, False))
        lib, err = self.trainer("--backend", "cpu", "--matmul", "bf16")
        if real["supported"]:
            self.assertEqual(real["reason"], "")
            self.assertEqual(lib["matmul"], "bf16")
        else:
            self.assertEqual(real["reason"], "configure: matmul=bf16 is not supported by oneDNN on this CPU")
            self.assertIsNone(lib)
            self.assertIn(real["reason"], err)

    def test_thunderkittens_is_asked_of_the_cuda_library(self):
        r = self.doctor()
        self.assertEqual(r["thunderkittens"], {"available": None, "reason": f"no {CUDA_LIB} found"})
        open(os.path.join(self.libs, CUDA_LIB), "w").close()  # a file that is no library
        r = self.doctor()
        self.assertIsNone(r["thunderkittens"]["available"])
        self.assertIn("cannot load", r["thunderkittens"]["reason"])
        # The emulated CUDA library (same bridge as a library built without a tree) says why not.
        os.remove(os.path.join(self.libs, CUDA_LIB))
        self.library(CUDA_LIB, "emulated")
        emulated = self.doctor()["thunderkittens"]
        self.assertEqual(emulated, {"available": False, "reason": "ThunderKittens is unavailable: the CUDA "
                                                                  "emulator runs only the kernels nfn writes itself"})
        self.assertIn("tk attention ThunderKittens is unavailable", kernels.format_report(
            dict(r, thunderkittens=emulated)))

    def test_runtime_libraries_the_cuda_library_would_open(self):
        # cuBLASLt from the nvidia-cublas wheel (tools/bootstrap.sh installs it where nvcc
        # exists): the real library, opened as the CUDA op library would, with its version.
        if cuda_runtime.wheel_copy("cublaslt"):
            found = cuda_runtime.probe("cublaslt", {})
            self.assertEqual(found["path"], cuda_runtime.wheel_copy("cublaslt"))
            self.assertRegex(found["version"], r"^13\.\d+\.\d+$")
        # A variable naming a file that is no library: the error names what was tried.
        bogus = os.path.join(self.tmp.name, "libcudnn.so.9")
        open(bogus, "w").close()
        r = kernels.doctor_report(dict(self.env(), NFN_CUDNN_PATH=bogus), libcuda="libnfn-no-such-libcuda.so")
        cudnn = r["runtime_libraries"]["cudnn"]
        if cudnn["path"] is None:  # no libcudnn.so.9 on this machine's loader path either
            self.assertIn(f"tried {bogus}: ", cudnn["error"])  # with why it did not load
            self.assertIn("; libcudnn.so.9: ", cudnn["error"])
            self.assertIn("set NFN_CUDNN_PATH", kernels.format_report(r))
        else:
            self.assertEqual(cudnn["path"], "libcudnn.so.9")

    def test_child_env_points_at_the_wheels_copy_unless_set(self):
        root = os.path.join(self.tmp.name, "site")
        lib = os.path.join(root, "nvidia", "cudnn", "lib")
        os.makedirs(lib)
        open(os.path.join(lib, "libcudnn.so.9"), "w").close()
        sys.path.insert(0, root)
        importlib.invalidate_caches()
        try:
            self.assertEqual(cuda_runtime.child_env({})["NFN_CUDNN_PATH"], os.path.join(lib, "libcudnn.so.9"))
            self.assertEqual(cuda_runtime.child_env({"NFN_CUDNN_PATH": "/mine"})["NFN_CUDNN_PATH"], "/mine")
        finally:
            sys.path.remove(root)
            importlib.invalidate_caches()


if __name__ == "__main__":
    unittest.main()
