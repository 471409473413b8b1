"""`nfn kernels doctor`: what it finds, from fake nvcc/nvidia-smi programs and op libraries."""
import importlib
import os
import stat
import sys
import tempfile
import unittest
from unittest import mock

from nfn import cuda_runtime
from nfn.cli import kernels


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

    def test_gpu_and_cuda_library_choose_cuda(self):
        script(os.path.join(self.bin, "nvcc"), "echo 'Cuda compilation tools, release 13.0, V13.0.88'\n")
        script(os.path.join(self.bin, "nvidia-smi"), "echo 'NVIDIA H200, 580.159.03, 143771 MiB'\n")
        for name in (kernels.CUDA_LIB, kernels.CPU_LIB):
            open(os.path.join(self.libs, name), "w").close()
        r = kernels.doctor_report(self.env(), libcuda="libnfn-no-such-libcuda.so")
        self.assertEqual(r["toolchain"], {"nvcc": os.path.join(self.bin, "nvcc"), "version": "13.0"})
        self.assertEqual(r["gpu"]["driver"], "580.159.03")
        self.assertEqual([d["name"] for d in r["gpu"]["devices"]], ["NVIDIA H200"])
        self.assertEqual(r["op_libraries"]["cuda"], os.path.join(self.libs, kernels.CUDA_LIB))
        self.assertEqual(r["auto_backend"]["would_load"], "cuda")
        self.assertIn("NVIDIA H200", kernels.format_report(r))

    def test_no_gpu_falls_back_to_cpu_with_the_reason(self):
        open(os.path.join(self.libs, kernels.CUDA_LIB), "w").close()
        open(os.path.join(self.libs, kernels.CPU_LIB), "w").close()
        r = kernels.doctor_report(self.env(), libcuda="libnfn-no-such-libcuda.so")
        self.assertEqual(r["gpu"]["source"], "libcuda")
        self.assertEqual(r["gpu"]["devices"], [])
        self.assertEqual(r["auto_backend"]["would_load"], "cpu")
        self.assertIn("cannot load libnfn-no-such-libcuda.so", r["auto_backend"]["reason"])

    def test_cuda_library_alone_without_a_gpu_loads_nothing(self):
        open(os.path.join(self.libs, kernels.CUDA_LIB), "w").close()
        with mock.patch.object(kernels, "library_dirs", lambda env: [self.libs]):  # not the built ones
            r = kernels.doctor_report(self.env(), libcuda="libnfn-no-such-libcuda.so")
        self.assertEqual(r["op_libraries"], {"cuda": os.path.join(self.libs, kernels.CUDA_LIB), "cpu": None})
        self.assertIsNone(r["auto_backend"]["would_load"])  # as the trainer's auto fails there
        self.assertIn("no GPU visible", r["auto_backend"]["reason"])
        self.assertIn("no CPU op library", r["auto_backend"]["reason"])

    def test_failing_nvidia_smi_is_reported_not_raised(self):
        script(os.path.join(self.bin, "nvidia-smi"), "echo 'NVIDIA-SMI has failed' >&2; exit 9\n")
        r = kernels.doctor_report(self.env(), libcuda="libnfn-no-such-libcuda.so")
        self.assertEqual(r["gpu"]["error"], "nvidia-smi failed")
        self.assertEqual(r["auto_backend"]["would_load"], "cpu" if r["op_libraries"]["cpu"] else None)


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
        r = kernels.doctor_report(self.env(), libcuda="libnfn-no-such-libcuda.so")
        self.assertEqual(r["thunderkittens"], {"available": None, "reason": "no CUDA op library found"})
        open(os.path.join(self.libs, kernels.CUDA_LIB), "w").close()  # a file that is no library
        r = kernels.doctor_report(self.env(), libcuda="libnfn-no-such-libcuda.so")
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
