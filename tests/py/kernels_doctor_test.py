"""`nfn kernels doctor`: what it finds, from fake nvcc/nvidia-smi programs and op libraries."""
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
from unittest import mock

from nfn import cuda_runtime
from nfn.cli import kernels


def _loaded_path(name):
    """The file the loader opens for `name` (a library of this process: libc, through Python)."""
    ctypes.CDLL(name)
    with open("/proc/self/maps") as f:
        for line in f:
            if line.rstrip().endswith(name) or f"/{name}" in line:
                return line.split()[-1]
    raise AssertionError(f"{name} not found in /proc/self/maps")


def script(path, text):
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


class DoctorTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.bin = os.path.join(self.tmp.name, "bin")
        self.libs = os.path.join(self.tmp.name, "libs")
        os.makedirs(self.bin)
        os.makedirs(self.libs)

    def tearDown(self):
        self.tmp.cleanup()

    def env(self):
        return {"PATH": self.bin, "NFN_TILE_OPS_DIR": self.libs}

    def library(self, name, kind):
        """Put an op library named `name` in the libraries folder: the real CPU one, the emulated
        CUDA one, an empty file, or a shared library that is no op library."""
        path = os.path.join(self.libs, name)
        if kind == "empty":
            open(path, "w").close()
        elif kind == "not ops":
            shutil.copy(_loaded_path("libc.so.6"), path)
        else:
            shutil.copy(os.environ["NFN_CPU_OPS_LIB" if kind == "cpu" else "NFN_EMULATED_CUDA_OPS_LIB"], path)
        return path

    def trainer_backend(self):
        """The backend the trainer's --backend auto takes with the same folder, from a one-step run."""
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
                               "--output-dir", out, "--json", "--backend", "auto"],
                              capture_output=True, text=True, timeout=300,
                              env=dict(os.environ, NFN_TILE_OPS_DIR=self.libs))
        if proc.returncode != 0:
            return None, proc.stderr.strip()
        return json.loads(proc.stdout)["op_library"]["backend"], proc.stderr

    def doctor(self, **kwargs):
        with mock.patch.object(kernels, "library_dirs", lambda env: [self.libs]):  # not the built ones
            return kernels.doctor_report(self.env(), libcuda="libnfn-no-such-libcuda.so", **kwargs)

    def test_auto_is_what_the_trainer_loads(self):
        # Asked of the libraries as the trainer asks them, not from whether a GPU shows: the
        # emulated CUDA library under the CUDA library's name makes a context with no GPU here;
        # a file that does not load, or loads but is no op library, is passed over.
        cases = [("emulated", "cpu", "cuda", "libnfn_native_train_tile_ops.so loads and makes a context on device 0 "
                                             "(nfn CUDA emulator)"),
                 ("empty", "cpu", "cpu", ": cannot load op library: "),
                 ("not ops", "cpu", "cpu", ": missing symbol nfn_abi_version"),
                 ("emulated", "empty", "cuda", "(nfn CUDA emulator)"),
                 ("empty", "empty", None, "; and ")]
        for i, (cuda, cpu, want, reason) in enumerate(cases):
            with self.subTest(cuda=cuda, cpu=cpu):
                # A folder of its own: a path this process loaded stays loaded (dlopen finds it
                # by name), and a loaded file written over in place would crash it.
                self.libs = os.path.join(self.tmp.name, f"libs{i}")
                os.makedirs(self.libs)
                self.library(kernels.CUDA_LIB, cuda)
                self.library(kernels.CPU_LIB, cpu)
                r = self.doctor()
                self.assertEqual(r["auto_backend"]["would_load"], want)
                self.assertIn(reason, r["auto_backend"]["reason"])
                self.assertEqual(self.trainer_backend()[0], want)
        emulated = os.path.join(self.tmp.name, "libs0", kernels.CUDA_LIB)
        self.assertIn("auto loads   cuda: libnfn_native_train_tile_ops.so loads", kernels.format_report(
            dict(r, auto_backend=kernels.auto_backend(emulated, None))))

    def test_a_library_built_for_another_abi_version_is_passed_over(self):
        # As the trainer's load_op_library refuses it: the registry records the header's version.
        from nfn.kernels import registry
        self.library(kernels.CUDA_LIB, "emulated")
        self.library(kernels.CPU_LIB, "cpu")
        real = registry.load()
        self.assertIsInstance(real["abi_version"], int)
        stale = dict(real, abi_version=real["abi_version"] + 1)
        with mock.patch.object(registry, "load", lambda: stale):
            r = self.doctor()
        self.assertIsNone(r["auto_backend"]["would_load"])  # both libraries are the other version
        for name in (kernels.CUDA_LIB, kernels.CPU_LIB):
            self.assertIn(f"{os.path.join(self.libs, name)}: op ABI version {real['abi_version']}, this build "
                          f"expects {real['abi_version'] + 1}", r["auto_backend"]["reason"])

    def test_doctor_json_keys_and_light_imports(self):
        # Asking the libraries goes through ctypes: no numpy, no native module; the keys stay.
        from nfn_probe import run_nfn
        self.library(kernels.CUDA_LIB, "emulated")
        self.library(kernels.CPU_LIB, "cpu")
        code, out, err, modules = run_nfn(["kernels", "doctor", "--json"], env=self.env())
        self.assertEqual(code, 0, err)
        r = json.loads(out)
        self.assertEqual(sorted(r), ["auto_backend", "cpu", "gpu", "op_libraries", "runtime_libraries",
                                     "thunderkittens", "toolchain"])
        self.assertEqual(r["auto_backend"], {"would_load": "cuda", "reason": "libnfn_native_train_tile_ops.so loads "
                                             "and makes a context on device 0 (nfn CUDA emulator)"})
        self.assertNotIn("numpy", modules)
        self.assertNotIn("nfn._native", modules)

    def test_a_listed_gpu_with_a_cuda_library_that_does_not_load_is_cpu(self):
        script(os.path.join(self.bin, "nvcc"), "echo 'Cuda compilation tools, release 13.0, V13.0.88'\n")
        script(os.path.join(self.bin, "nvidia-smi"), "echo 'NVIDIA H200, 580.159.03, 143771 MiB'\n")
        self.library(kernels.CUDA_LIB, "empty")
        self.library(kernels.CPU_LIB, "cpu")
        r = self.doctor()
        self.assertEqual(r["toolchain"], {"nvcc": os.path.join(self.bin, "nvcc"), "version": "13.0"})
        self.assertEqual(r["gpu"]["driver"], "580.159.03")
        self.assertEqual([d["name"] for d in r["gpu"]["devices"]], ["NVIDIA H200"])
        self.assertEqual(r["op_libraries"]["cuda"], os.path.join(self.libs, kernels.CUDA_LIB))
        self.assertEqual(r["auto_backend"]["would_load"], "cpu")  # as the trainer: the library does not load
        self.assertTrue(r["auto_backend"]["reason"].startswith(
            os.path.join(self.libs, kernels.CUDA_LIB) + ": cannot load op library: "), r["auto_backend"])
        self.assertIn("NVIDIA H200", kernels.format_report(r))

    def test_no_cuda_library_is_cpu_and_no_library_is_nothing(self):
        self.library(kernels.CPU_LIB, "cpu")
        self.assertEqual(self.doctor()["auto_backend"], {"would_load": "cpu", "reason": "no CUDA op library built"})
        os.remove(os.path.join(self.libs, kernels.CPU_LIB))
        self.assertEqual(self.doctor()["auto_backend"],
                         {"would_load": None, "reason": "no op library found (build with bazel, or set NFN_TILE_OPS_DIR)"})

    def test_cuda_library_alone_that_cannot_make_a_context_loads_nothing(self):
        emulated = os.path.join(self.tmp.name, "emulated", kernels.CUDA_LIB)  # not the folder below
        os.makedirs(os.path.dirname(emulated))
        shutil.copy(os.environ["NFN_EMULATED_CUDA_OPS_LIB"], emulated)
        # The emulator has one device: device 1 fails as device 0 fails where no GPU answers.
        self.assertEqual(kernels.open_op_library(emulated, device=1),
                         {"opens": False, "reason": f"{emulated}: CUDA device 1 does not exist (1 found)"})
        self.assertEqual(kernels.open_op_library(emulated),
                         {"opens": True, "backend": "cuda", "device": "nfn CUDA emulator"})
        self.library(kernels.CUDA_LIB, "empty")
        r = self.doctor()
        self.assertEqual(r["op_libraries"], {"cuda": os.path.join(self.libs, kernels.CUDA_LIB), "cpu": None})
        self.assertIsNone(r["auto_backend"]["would_load"])  # as the trainer's auto fails there
        self.assertIn(": cannot load op library: ", r["auto_backend"]["reason"])
        self.assertIn("and no CPU op library found", r["auto_backend"]["reason"])

    def test_failing_nvidia_smi_is_reported_not_raised(self):
        script(os.path.join(self.bin, "nvidia-smi"), "echo 'NVIDIA-SMI has failed' >&2; exit 9\n")
        self.library(kernels.CPU_LIB, "cpu")
        r = self.doctor()
        self.assertEqual(r["gpu"]["error"], "nvidia-smi failed")
        self.assertEqual(r["auto_backend"]["would_load"], "cpu")


    def test_cpu_model_and_gemm_features_from_cpuinfo(self):
        cpuinfo = os.path.join(self.tmp.name, "cpuinfo")
        with open(cpuinfo, "w") as f:
            f.write("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse avx2 fma avx512f avx512_bf16\n\n"
                    "processor\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n")
        self.assertEqual(kernels.cpu_info(cpuinfo),
                         {"model": "Test CPU 9000", "features": ["avx2", "fma", "avx512f", "avx512_bf16"]})
        self.assertEqual(kernels.cpu_info(os.path.join(self.tmp.name, "missing")), {"model": "unknown", "features": []})
        r = kernels.doctor_report(self.env(), libcuda="libnfn-no-such-libcuda.so", cpuinfo=cpuinfo)
        self.assertIn("cpu          Test CPU 9000 (avx2 fma avx512f avx512_bf16)", kernels.format_report(r))

    def test_the_cpu_trainers_gemm_default(self):
        # bf16 where the library offers it and the CPU has bf16 units; offered without them
        # (oneDNN emulates on plain AVX-512), f32.
        yes, no = {"supported": True, "reason": ""}, {"supported": False, "reason": "not here"}
        for features, offered, default in ((["avx512f", "avx512_bf16"], yes, True), (["amx_bf16"], yes, True),
                                           (["avx512f"], yes, False), (["avx512_bf16"], no, False)):
            cpu = kernels.cpu_report({"model": "m", "features": features}, offered)
            self.assertEqual(cpu["bf16_matmul"]["trainer_default"], default, features)
        r = kernels.doctor_report(self.env(), libcuda="libnfn-no-such-libcuda.so")
        r["cpu"] = kernels.cpu_report({"model": "m", "features": ["avx512f"]}, yes)
        self.assertIn("bf16 matmul  yes, emulated (no bf16 units): the CPU trainer's default stays f32",
                      kernels.format_report(r))
        r["cpu"] = kernels.cpu_report({"model": "m", "features": ["avx512_bf16"]}, yes)
        self.assertIn("bf16 matmul  yes, the CPU trainer's default here", kernels.format_report(r))

    def test_bf16_matmul_is_asked_of_the_cpu_library(self):
        # A file that is no library: unknown, with the reason.
        open(os.path.join(self.libs, kernels.CPU_LIB), "w").close()
        r = kernels.doctor_report(self.env(), libcuda="libnfn-no-such-libcuda.so")
        self.assertIsNone(r["cpu"]["bf16_matmul"]["supported"])
        self.assertIn("cannot load", r["cpu"]["bf16_matmul"]["reason"])
        # The real library answers yes, or no with its one-line reason.
        real = kernels.cpu_bf16_matmul(os.environ["NFN_CPU_OPS_LIB"])
        self.assertIn(real["supported"], (True, False))
        if real["supported"]:
            self.assertEqual(real["reason"], "")
        else:
            self.assertEqual(real["reason"], "configure: matmul=bf16 is not supported by oneDNN on this CPU")

    def test_thunderkittens_is_asked_of_the_cuda_library(self):
        r = self.doctor()
        self.assertEqual(r["thunderkittens"], {"available": None, "reason": "no CUDA op library found"})
        open(os.path.join(self.libs, kernels.CUDA_LIB), "w").close()  # a file that is no library
        r = self.doctor()
        self.assertIsNone(r["thunderkittens"]["available"])
        self.assertIn("cannot load", r["thunderkittens"]["reason"])
        # The emulated CUDA library (same bridge as a library built without a tree) says why not.
        emulated = kernels.thunderkittens(os.environ["NFN_EMULATED_CUDA_OPS_LIB"])
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
