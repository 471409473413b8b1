"""Inspect the op libraries: which ops exist on which backend and dtype.

  nfn kernels list [--json]     the op registry, from metadata only (no library is loaded)
  nfn kernels doctor [--json]   the CUDA toolchain, driver and GPU found here, which op
                                library `--backend auto` would load (asked of the libraries
                                as the trainer asks them: each must load, have its entry
                                points, report the op ABI version this build expects and
                                make a context on device 0), the cuBLASLt and cuDNN
                                the CUDA one would open, whether its ThunderKittens attention
                                runs here, and the CPU: its GEMM features and whether
                                `--matmul bf16` runs on it
"""
import contextlib
import json
import os
import sys

from nfn.cli.common import add_command

CUDA_LIB = "libnfn_native_train_tile_ops.so"
CPU_LIB = "libnfn_native_train_cpu_ops.so"


def run_list(args):
    from nfn.kernels import registry

    reg = registry.load()
    if args.json:
        json.dump(reg, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(registry.format_table(reg))
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


def library_dirs(env):
    """Where a trainer started by nfn looks for op libraries, most specific first."""
    dirs = [env["NFN_TILE_OPS_DIR"]] if env.get("NFN_TILE_OPS_DIR") else []
    here = os.path.dirname(os.path.abspath(__file__))  # .../nfn/cli
    for up in (os.path.join(here, "..", "..", ".."), os.path.join(here, "..", "..")):
        root = os.path.normpath(up)
        dirs += [os.path.join(root, "cuda", "ops"), os.path.join(root, "cc", "ops"),
                 os.path.join(root, "nfn", "cuda", "ops"), os.path.join(root, "nfn", "cc", "ops")]
    return dirs


def find_library(name, env):
    for d in library_dirs(env):
        path = os.path.join(d, name)
        if os.path.exists(path):
            return path
    return None


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


def cpu_bf16_matmul(cpu_lib):
    """Whether the CPU op library accepts matmul=bf16 here, asked of the library itself."""
    if not cpu_lib:
        return {"supported": None, "reason": "no CPU op library found"}
    try:
        with _op_context(cpu_lib) as (lib, ctx):
            ok = lib.nfn_ctx_configure(ctx, b"matmul", b"bf16") == 0
            return {"supported": ok, "reason": "" if ok else lib.nfn_ctx_last_error(ctx).decode(errors="replace")}
    except _Refused as e:
        return {"supported": None, "reason": str(e)}


def thunderkittens(cuda_lib):
    """Whether attention=thunderkittens can run here, asked of the CUDA op library itself: its
    kernels exist only where it was built with a ThunderKittens tree, and run only on sm_90."""
    import ctypes

    if not cuda_lib:
        return {"available": None, "reason": "no CUDA op library found"}
    try:
        reason = ctypes.CDLL(cuda_lib).nfn_tk_unavailable_reason
    except (OSError, AttributeError) as e:
        return {"available": None, "reason": f"cannot load {cuda_lib}: {e}"}
    reason.restype = ctypes.c_char_p
    why = reason()
    return {"available": why is None, "reason": "" if why is None else why.decode(errors="replace")}


# What the trainer's load_op_library (cc/ops/op_library.cc) resolves before the ops themselves.
OP_TABLE_SYMBOLS = ("nfn_abi_version", "nfn_backend_name", "nfn_ctx_create", "nfn_ctx_destroy",
                    "nfn_ctx_last_error", "nfn_synchronize", "nfn_ctx_configure")


def _op_table():
    """(every entry point the trainer resolves: the table's, then each op's; the op ABI version
    it expects), from the registry, generated from the same header and table as the trainer;
    the table's symbols alone and no version where no registry was generated."""
    from nfn.errors import UserError
    from nfn.kernels import registry
    try:
        reg = registry.load()
        ops, version = [f"nfn_{op['name']}" for op in reg["ops"]], reg.get("abi_version")
    except (UserError, KeyError, TypeError, AttributeError):
        ops, version = [], None
    return list(OP_TABLE_SYMBOLS) + ops, version if isinstance(version, int) else None


class _Refused(Exception):
    """An op library the trainer would not take; the reason as the trainer words it."""


@contextlib.contextmanager
def _op_context(path, device=0):
    """(lib, ctx) of the op library at path, asked as the trainer's load_op_library and
    open_backend ask it: it loads, has every entry point, reports the op ABI version the
    registry records, and makes a context on the device (destroyed after); else _Refused."""
    import ctypes

    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise _Refused(f"{path}: cannot load op library: {e}") from None
    symbols, version = _op_table()
    for symbol in symbols:
        if not hasattr(lib, symbol):
            raise _Refused(f"{path}: missing symbol {symbol}")
    lib.nfn_abi_version.restype = ctypes.c_int
    if version is not None and lib.nfn_abi_version() != version:
        raise _Refused(f"{path}: op ABI version {lib.nfn_abi_version()}, this build expects {version}")
    lib.nfn_backend_name.restype = ctypes.c_char_p
    lib.nfn_ctx_create.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
    lib.nfn_ctx_last_error.restype = ctypes.c_char_p
    lib.nfn_ctx_last_error.argtypes = [ctypes.c_void_p]
    lib.nfn_ctx_destroy.argtypes = [ctypes.c_void_p]
    lib.nfn_ctx_configure.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    ctx = ctypes.c_void_p()
    if lib.nfn_ctx_create(device, ctypes.byref(ctx)) != 0:
        why = lib.nfn_ctx_last_error(None) or b"unknown error"
        raise _Refused(f"{path}: {why.decode(errors='replace')}")
    try:
        yield lib, ctx
    finally:
        lib.nfn_ctx_destroy(ctx)


def open_op_library(path, device=0):
    """Whether the trainer's open_backend (cc/train/backend.cc) would take the op library at
    path (_op_context): {"opens": True, "backend", "device"} (the device's name where the
    library tells it) or {"opens": False, "reason"}, the reason as the trainer words it."""
    import ctypes

    try:
        with _op_context(path, device) as (lib, ctx):
            name = getattr(lib, "nfn_cuda_device_name", None)
            if name is not None:
                name.restype, name.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
                name = (name(ctx) or b"").decode(errors="replace") or None
            return {"opens": True, "backend": (lib.nfn_backend_name() or b"").decode(errors="replace"),
                    "device": name}
    except _Refused as e:
        return {"opens": False, "reason": str(e)}


def auto_backend(cuda_lib, cpu_lib):
    """What `--backend auto` loads, decided as the trainer decides it (open_backend): the CUDA
    op library where it opens (open_op_library), else the CPU one where that opens, else nothing."""
    build_hint = "build with bazel, or set NFN_TILE_OPS_DIR"
    if cuda_lib:
        cuda = open_op_library(cuda_lib)
        if cuda["opens"]:
            on = f" ({cuda['device']})" if cuda["device"] else ""
            return {"would_load": cuda["backend"] or "cuda",
                    "reason": f"{CUDA_LIB} loads and makes a context on device 0{on}"}
        why_not_cuda = cuda["reason"]
    else:
        why_not_cuda = "no CUDA op library built"
    if not cpu_lib:
        return {"would_load": None, "reason": f"{why_not_cuda}, and no CPU op library found ({build_hint})"
                if cuda_lib else f"no op library found ({build_hint})"}
    cpu = open_op_library(cpu_lib)
    if not cpu["opens"]:
        return {"would_load": None, "reason": f"{why_not_cuda}; and {cpu['reason']}"}
    return {"would_load": cpu["backend"] or "cpu", "reason": why_not_cuda}


def doctor_report(env=None, libcuda="libcuda.so.1", cpuinfo="/proc/cpuinfo"):
    from nfn import cuda_runtime

    env = dict(os.environ if env is None else env)
    gpus = gpus_from_nvidia_smi(env) or gpus_from_libcuda(libcuda)
    cuda_lib, cpu_lib = find_library(CUDA_LIB, env), find_library(CPU_LIB, env)
    return {
        "toolchain": toolchain(env),
        "gpu": gpus,
        "op_libraries": {"cuda": cuda_lib, "cpu": cpu_lib},
        "auto_backend": auto_backend(cuda_lib, cpu_lib),
        "runtime_libraries": {name: cuda_runtime.probe(name, env) for name in cuda_runtime.LIBRARIES},
        "thunderkittens": thunderkittens(cuda_lib),
        "cpu": cpu_report(cpu_info(cpuinfo), cpu_bf16_matmul(cpu_lib)),
    }


def cpu_report(info, bf16_matmul):
    """The CPU's model, GEMM features and bf16 matmul, and whether the CPU trainer takes bf16
    GEMMs by default here: where the library offers them and the CPU has bf16 units (the
    trainer's own rule, cc/train/trainer.cc; AVX-512 alone would emulate them)."""
    units = any(f in info["features"] for f in ("avx512_bf16", "amx_bf16"))
    return dict(info, bf16_matmul=dict(bf16_matmul, trainer_default=bool(bf16_matmul["supported"]) and units))


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
        f"cuda ops     {libs['cuda'] or 'not found'}",
        f"cpu ops      {libs['cpu'] or 'not found'}",
        f"auto loads   {auto['would_load'] or 'nothing'}: {auto['reason']}",
        f"cuBLASLt     {runtime(rt['cublaslt'])}",
        f"cuDNN        {runtime(rt['cudnn'])} (attention=cudnn: the default where cuDNN loads, else flash_mma)",
        f"tk attention {'available' if tk['available'] else tk['reason']} (attention=thunderkittens)",
        f"cpu          {cpu['model']} ({' '.join(cpu['features']) or 'none of ' + ' '.join(CPU_FEATURES)})",
        f"bf16 matmul  {bf16_text}" + (f" ({bf16['reason']})" if bf16["reason"] else ""),
    ])


def run_doctor(args):
    report = doctor_report()
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(format_report(report))
    return 0


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
