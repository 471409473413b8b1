#!/usr/bin/env bash
# Idempotent set-up of a fresh machine: Bazel (Debian's bazel-bootstrap) and the Python
# requirements. Prints nothing when there is nothing to do; the second run takes ~1 s.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${PYTHON_BIN_PATH:-python3}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

apt_install() {
  echo "bootstrap: installing $* with apt" >&2
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq "$@" >/dev/null
}

command -v bazel >/dev/null 2>&1 || apt_install bazel-bootstrap
command -v g++ >/dev/null 2>&1 || apt_install g++
command -v bwrap >/dev/null 2>&1 || apt_install bubblewrap  # the Python tool's sandbox

# pip runs again only when requirements.txt or the interpreter changed.
stamp_dir=${XDG_CACHE_HOME:-$HOME/.cache}/nfn/bootstrap
key=$( { cat "$root/requirements.txt" "$root/requirements-nodeps.txt"; command -v "$python"; "$python" --version; } | sha256sum | cut -c1-16)
if [ ! -f "$stamp_dir/$key" ] || ! "$python" -c "import numpy, nanobind" 2>/dev/null; then
  echo "bootstrap: installing Python requirements" >&2
  "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore -r "$root/requirements.txt" >&2
  "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-deps \
    -r "$root/requirements-nodeps.txt" >&2
  mkdir -p "$stamp_dir"
  touch "$stamp_dir/$key"
fi

# cuBLASLt headers for the CUDA op library (tools/cuda_libs.bzl), only where nvcc exists and
# CUDA is on; the 444 MB wheel is cached by pip, so a fresh environment reinstalls offline.
if [ "${NFN_DISABLE_CUDA:-0}" = 0 ] && { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; } &&
   ! "$python" -c "import importlib.util as u, os, sys; s = u.find_spec('nvidia'); sys.exit(not any(os.path.exists(os.path.join(p, 'cu13', 'include', 'cublasLt.h')) for p in (s.submodule_search_locations if s else [])))" 2>/dev/null; then
  echo "bootstrap: installing nvidia-cublas==13.0.* (cuBLASLt headers)" >&2
  "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore "nvidia-cublas==13.0.*" >&2
fi
