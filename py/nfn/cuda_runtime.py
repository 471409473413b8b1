"""The libraries the CUDA op library opens at run time: cuBLASLt (every GEMM) and cuDNN
(attention=cudnn). It looks at an environment variable first, then the loader's path; where
neither names the library, `nfn train` points the variable at the copy in this interpreter's
NVIDIA wheels (those of a PyTorch install), so a machine with PyTorch needs no set-up.

Import-light: the standard library only, and ctypes only in `probe`.
"""
import importlib.util
import os

# name -> (environment variable, file name, folder under the `nvidia` namespace package,
# version function)
LIBRARIES = {
    "cublaslt": ("NFN_CUBLASLT_PATH", "libcublasLt.so.13", "cu13/lib", "cublasLtGetVersion"),
    "cudnn": ("NFN_CUDNN_PATH", "libcudnn.so.9", "cudnn/lib", "cudnnGetVersion"),
}


def wheel_copy(name):
    """The library's file in this interpreter's NVIDIA wheels, or None."""
    _, filename, folder, _ = LIBRARIES[name]
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(root, folder, filename)
        if os.path.exists(path):
            return path
    return None


def child_env(env=None):
    """`env` (default: this process's) with each library's variable pointed at the wheel's
    copy, where the variable is unset and the wheels have one."""
    out = dict(os.environ if env is None else env)
    for name, (var, _, _, _) in LIBRARIES.items():
        if not out.get(var):
            found = wheel_copy(name)
            if found:
                out[var] = found
    return out


def _version(number):
    """cuBLAS and cuDNN 9 both number versions major * 10000 + minor * 100 + patch."""
    return f"{number // 10000}.{number // 100 % 100}.{number % 100}"


def probe(name, env=None):
    """Where the op library started with child_env(env) would find the library, and its
    version: {"path", "version"} or {"path": None, "error"}. Loads it into this process."""
    import ctypes

    var, filename, _, version_fn = LIBRARIES[name]
    env = child_env(env)
    tried = []
    for path in [p for p in (env.get(var), filename) if p]:
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:  # "<path>: <why>"; keep the why
            tried.append(f"{path}: {str(e).rsplit(': ', 1)[-1]}")
            continue
        fn = getattr(lib, version_fn, None)
        if fn is None:
            return {"path": path, "version": None}
        fn.restype = ctypes.c_size_t
        return {"path": path, "version": _version(int(fn()))}
    return {"path": None, "version": None,
            "error": f"cannot open {filename} (tried {'; '.join(tried)}; set {var} or LD_LIBRARY_PATH)"}
