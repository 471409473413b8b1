"""Inspect the op libraries: which ops exist where, how fast they run, and how to call them.

  nfn kernels list [--json]     the op registry, from metadata only (no library is loaded)
  nfn kernels doctor [--json]   the CUDA toolchain, driver and GPU found here, which op
                                library `--backend auto` would load and whether each one
                                opens (answered by nfn_op_probe, which decides with the
                                trainers' own code), the cuBLASLt and cuDNN the CUDA one
                                would open, whether its ThunderKittens attention runs here,
                                and the CPU: its GEMM features and whether `--matmul bf16`
                                runs on it
  nfn kernels bench [--json]    each op timed at model shapes: median ms, GFLOP/s or GB/s, and
                                the fraction of the device's peak where a datasheet gives one
  nfn kernels examples [--write --output-dir DIR]
                                a runnable C++ example a category of ops, calling the op ABI;
                                lists them, or writes them with a Makefile to DIR
"""
import json
import os
import sys

from nfn.cli.common import add_command

PROBE = "nfn_op_probe"


def run_list(args):
    from nfn.kernels import registry

    reg = registry.load()
    return _print(reg, args.json, registry.format_table)


def _print(report, as_json, format_text):
    """The report as JSON, or as format_text makes it; 0 (the command's exit code)."""
    if as_json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_text(report))
    return 0


def _run(cmd, env):
    """stdout of cmd, or None when it is missing or fails."""
    import subprocess

    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def find_nvcc(env):
    import shutil

    for var in ("NFN_CUDA_PATH", "CUDA_PATH"):
        if env.get(var) and os.access(os.path.join(env[var], "bin", "nvcc"), os.X_OK):
            return os.path.join(env[var], "bin", "nvcc")
    found = shutil.which("nvcc", path=env.get("PATH", ""))
    if found:
        return found
    return "/usr/local/cuda/bin/nvcc" if os.access("/usr/local/cuda/bin/nvcc", os.X_OK) else None


def toolchain(env):
    nvcc = find_nvcc(env)
    if not nvcc:
        return {"nvcc": None, "version": None}
    out = _run([nvcc, "--version"], env) or ""
    release = [line.split("release", 1)[1].split(",")[0].strip() for line in out.splitlines() if "release" in line]
    return {"nvcc": nvcc, "version": release[0] if release else None}


def gpus_from_nvidia_smi(env):
    import shutil

    smi = shutil.which("nvidia-smi", path=env.get("PATH", ""))
    if not smi:
        return None
    out = _run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"], env)
    if out is None:
        return {"source": "nvidia-smi", "driver": None, "devices": [], "error": "nvidia-smi failed"}
    devices, driver = [], None
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            devices.append({"name": parts[0], "memory": parts[2]})
            driver = parts[1]
    return {"source": "nvidia-smi", "driver": driver, "devices": devices}


def gpus_from_libcuda(libname="libcuda.so.1"):
    """The driver API through ctypes: works where nvidia-smi is absent (containers)."""
    import ctypes

    try:
        cuda = ctypes.CDLL(libname)
    except OSError as e:
        return {"source": "libcuda", "driver": None, "devices": [], "error": f"cannot load {libname}: {e}"}
    if cuda.cuInit(0) != 0:
        return {"source": "libcuda", "driver": None, "devices": [], "error": "cuInit failed (no usable GPU)"}
    version, count = ctypes.c_int(0), ctypes.c_int(0)
    cuda.cuDriverGetVersion(ctypes.byref(version))
    cuda.cuDeviceGetCount(ctypes.byref(count))
    devices = []
    for i in range(count.value):
        dev, name = ctypes.c_int(0), ctypes.create_string_buffer(256)
        if cuda.cuDeviceGet(ctypes.byref(dev), i) == 0 and cuda.cuDeviceGetName(name, 256, dev) == 0:
            devices.append({"name": name.value.decode(errors="replace"), "memory": None})
    v = version.value
    return {"source": "libcuda", "driver": f"CUDA {v // 1000}.{v % 1000 // 10}", "devices": devices}


CPU_FEATURES = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_info(cpuinfo="/proc/cpuinfo"):
    """The CPU's model name and which of CPU_FEATURES it has (Linux; unknown elsewhere)."""
    model, flags = "unknown", set()
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and model == "unknown":
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    return {"model": model, "features": [f for f in CPU_FEATURES if f in flags]}


def probe_op_libraries(env):
    """What the trainers find when they choose an op library, asked of nfn_op_probe, which
    decides with their code (cc/ops/backend.h): its report, or {"error": why} where it is
    not built or fails."""
    import subprocess
    from nfn import native_bin

    path = native_bin.find(PROBE, env)
    if path is None:
        return {"error": f"{PROBE} is not built; run through `bazel run //py:nfn` or point "
                         f"${native_bin.BINARY_ENV} at a directory holding it"}
    try:
        proc = subprocess.run([path], capture_output=True, text=True, timeout=120, env=env)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": f"{path}: {e}"}
    if proc.returncode != 0:
        return {"error": f"{path} exited with {proc.returncode}: {proc.stderr.strip()}"}
    try:
        return json.loads(proc.stdout)
    except ValueError:
        return {"error": f"{path} printed no JSON report"}


def _unknown(why):
    """The probe's keys where it could not answer: nothing known, and why."""
    library = {"path": None, "opens": False, "reason": why}
    return {"op_libraries": {"cuda": library, "cpu": library},
            "auto_backend": {"would_load": None, "reason": why},
            "thunderkittens": {"available": None, "reason": why},
            "bf16_matmul": {"supported": None, "reason": why, "bf16_units": None, "trainer_default": False}}


def doctor_report(env=None, libcuda="libcuda.so.1", cpuinfo="/proc/cpuinfo"):
    from nfn import cuda_runtime

    env = dict(os.environ if env is None else env)
    gpus = gpus_from_nvidia_smi(env) or gpus_from_libcuda(libcuda)
    probe = probe_op_libraries(cuda_runtime.child_env(env))  # as `nfn train` starts a trainer
    if "error" in probe:
        probe = _unknown(probe["error"])
    return {
        "toolchain": toolchain(env),
        "gpu": gpus,
        "op_libraries": probe["op_libraries"],
        "auto_backend": probe["auto_backend"],
        "runtime_libraries": {name: cuda_runtime.probe(name, env) for name in cuda_runtime.LIBRARIES},
        "thunderkittens": probe["thunderkittens"],
        "cpu": dict(cpu_info(cpuinfo), bf16_matmul=probe["bf16_matmul"]),
    }


def _library_line(lib):
    """An op library's path and whether it opens, with why not (its path said once)."""
    if not lib["path"]:
        return "not found"
    if lib["opens"]:
        return f"{lib['path']} (opens" + (f": {lib['device']})" if lib.get("device") else ")")
    why = lib["reason"]
    return f"{lib['path']} (does not open: {why[len(lib['path']) + 2:] if why.startswith(lib['path'] + ': ') else why})"


def format_report(r):
    tc, gpu, libs, auto, cpu = r["toolchain"], r["gpu"], r["op_libraries"], r["auto_backend"], r["cpu"]
    rt = r["runtime_libraries"]

    def runtime(lib):
        return f"{lib['version']} ({lib['path']})" if lib["path"] else lib["error"]

    devices = ", ".join(d["name"] for d in gpu["devices"]) or gpu.get("error", "none")
    bf16, tk = cpu["bf16_matmul"], r["thunderkittens"]
    bf16_text = {True: "yes", False: "no", None: "unknown"}[bf16["supported"]]
    if bf16["supported"]:
        bf16_text += (", the CPU trainer's default here" if bf16["trainer_default"]
                      else ", emulated (no bf16 units): the CPU trainer's default stays f32")
    return "\n".join([
        f"nvcc         {tc['nvcc'] or 'not found'}" + (f" (CUDA {tc['version']})" if tc["version"] else ""),
        f"driver       {gpu['driver'] or 'not found'} (via {gpu['source']})",
        f"GPUs         {devices}",
        f"cuda ops     {_library_line(libs['cuda'])}",
        f"cpu ops      {_library_line(libs['cpu'])}",
        f"auto loads   {auto['would_load'] or 'nothing'}: {auto['reason']}",
        f"cuBLASLt     {runtime(rt['cublaslt'])}",
        f"cuDNN        {runtime(rt['cudnn'])} (attention=cudnn: the default where cuDNN loads, else flash_mma)",
        f"tk attention {'available' if tk['available'] else tk['reason']} (attention=thunderkittens)",
        f"cpu          {cpu['model']} ({' '.join(cpu['features']) or 'none of ' + ' '.join(CPU_FEATURES)})",
        f"bf16 matmul  {bf16_text}" + (f" ({bf16['reason']})" if bf16["reason"] else ""),
    ])


def run_doctor(args):
    return _print(doctor_report(), args.json, format_report)


def run_bench(args):
    from nfn.kernels import bench

    return _print(bench.report(args, cpu_info()), args.json, bench.format_report)


def run_examples(args):
    from nfn.errors import UserError
    from nfn.kernels import examples

    if bool(args.write) != bool(args.output_dir):
        raise UserError("--write and --output-dir DIR go together (without them: the list)")
    bundle = examples.load()
    if not args.write:
        print(examples.format_list(bundle))
        return 0
    examples.write(bundle, args.output_dir)
    lib = examples.cpu_library() or "/path/to/libnfn_native_train_cpu_ops.so"
    print(f"wrote {len(bundle['examples'])} examples, the loader, the ABI headers and a Makefile to "
          f"{args.output_dir}\n  build: make -C {args.output_dir}\n  run:   make -C {args.output_dir} run LIB={lib}")
    return 0


BENCH_EPILOG = """\
rate: GFLOP/s for the compute-bound ops (linears, attention, the LM head), GB/s for the others,
counting each element an op must read or write once. % peak: of the device's dense bf16 peak or
memory bandwidth where cc/train/mfu.h's datasheet table names the GPU (bf16 storage for the
compute peak); none on CPUs. Defaults take seconds on a GPU and under a minute on 2 CPU cores.
"""


def add_bench_parser(actions):
    import argparse

    p = actions.add_parser("bench", help="each op timed at model shapes: ms, GFLOP/s or GB/s, %% of peak",
                           description="Times each op of an op library at the shapes a GPT's training\n"
                                       "step calls it with (nfn_kernels_bench).",
                           epilog=BENCH_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda", "auto"), default="auto",
                   help="the op library, found as the trainers find it (auto: CUDA where it opens)")
    p.add_argument("--tile-ops-lib", metavar="PATH", help="this op library instead")
    p.add_argument("--ops", metavar="NAME,...", help="only these ops (names as `nfn kernels list` gives)")
    p.add_argument("--shapes", metavar="NAME[:BATCH],...",
                   help="of tiny, small, demo, gpt2, each with an optional micro-batch (default demo,gpt2:1 "
                        "on the CPU, demo,gpt2 on CUDA)")
    p.add_argument("--iterations", type=int, default=5, metavar="N", help="samples a median is taken of (5)")
    p.add_argument("--dtype", choices=("f32", "bf16"), help="storage dtype (default bf16 on CUDA, f32 on CPU)")
    p.add_argument("--configure", action="append", metavar="KEY=VALUE",
                   help="a context option, e.g. matmul=bf16 (CPU), attention=cudnn (CUDA); repeatable")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.set_defaults(run=run_bench)


def register(sub):
    p = add_command(sub, "kernels", __doc__)
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    lst = actions.add_parser("list", help="the op registry: ops, backends, dtypes")
    lst.add_argument("--json", action="store_true", help="print the registry as JSON")
    lst.set_defaults(run=run_list)
    doc = actions.add_parser("doctor", help="toolchain, driver, GPU, the op library auto would load, "
                                            "and the CPU's GEMM features")
    doc.add_argument("--json", action="store_true", help="print the report as JSON")
    doc.set_defaults(run=run_doctor)
    add_bench_parser(actions)
    ex = actions.add_parser("examples", help="a runnable C++ example a category of ops: list, or write")
    ex.add_argument("--write", action="store_true", help="write the examples, the loader, the ABI "
                                                         "headers and a Makefile to --output-dir")
    ex.add_argument("--output-dir", metavar="DIR", help="where --write writes (a new or empty directory)")
    ex.set_defaults(run=run_examples)
