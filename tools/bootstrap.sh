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
command -v make >/dev/null 2>&1 || apt_install make  # builds the written op examples
# nginx with WebDAV: the HTTP cache tests/tools:remote_cache_test serves on 127.0.0.1.
{ command -v nginx || [ -x /usr/sbin/nginx ]; } >/dev/null 2>&1 || apt_install nginx
# The web chat page's browser test (tests/py/chat:web_browser_test) drives headless chromium.
{ command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || apt_install chromium chromium-driver

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

# cuobjdump and nvdisasm (5.5 MB; the toolkit here has neither) for tests/cuda's check of the
# library's machine code (pdl_sass_test), only where nvcc exists and CUDA is on.
if [ "${NFN_DISABLE_CUDA:-0}" = 0 ] && { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; } &&
   ! "$python" -c "import importlib.util as u, os, sys; s = u.find_spec('nvidia'); sys.exit(not any(all(os.path.exists(os.path.join(p, 'cu13', 'bin', t)) for t in ('cuobjdump', 'nvdisasm')) for p in (s.submodule_search_locations if s else [])))" 2>/dev/null; then
  echo "bootstrap: installing cuobjdump and nvdisasm 13.2.86" >&2
  "$python" -m pip install -q --disable-pip-version-check --root-user-action=ignore \
    "nvidia-cuda-cuobjdump==13.2.86" "nvidia-cuda-nvdisasm==13.2.86" >&2
fi

# cuDNN and cudnn-frontend headers for the CUDA op library's attention=cudnn path
# (tools/cuda_libs.bzl), only where nvcc exists and CUDA is on. Only the headers are kept
# (4 MB, extracted from the wheels; the library opens the GPU machine's libcudnn.so.9 at run
# time), plus libcudnn.so.9 itself, cuDNN's 140 KB dispatcher, for tests/cuda's loading test;
# in a folder stamped with the versions, written whole or not at all. cuDNN 9.19.0.56
# is what PyTorch 2.11's CUDA 13 wheels pin (the GPU machines' runtime); frontend 1.16 is the
# last without NVRTC glue, whose header the toolkit here lacks.
cudnn_version=9.19.0.56 frontend_version=1.16.0 layout=2
cudnn_dir=${XDG_CACHE_HOME:-$HOME/.cache}/nfn/cudnn-headers
if [ "${NFN_DISABLE_CUDA:-0}" = 0 ] && { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; } &&
   [ "$(cat "$cudnn_dir/VERSION" 2>/dev/null)" != "$cudnn_version $frontend_version $layout" ]; then
  echo "bootstrap: fetching cuDNN $cudnn_version and cudnn-frontend $frontend_version headers" >&2
  tmp=$(mktemp -d)
  # Optional: without the headers attention=cudnn compiles to a reason, so a failed fetch
  # warns and the rest goes on (the next run tries again).
  if "$python" -m pip download -q --disable-pip-version-check --no-deps -d "$tmp/wheels" \
       "nvidia-cudnn-cu13==$cudnn_version" "nvidia-cudnn-frontend==$frontend_version" >&2 &&
     "$python" - "$tmp/wheels" "$tmp/new" <<'PY'
import glob, os, sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
# cudnn: nvidia/cudnn/include/*.h and the dispatcher; frontend: include/** (subfolders kept)
wanted = {"nvidia/cudnn/include/": "include/", "include/": "include/",
          "nvidia/cudnn/lib/libcudnn.so.9": "lib/libcudnn.so.9"}
for wheel in glob.glob(os.path.join(wheels, "*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            for prefix, to in wanted.items():
                if name.startswith(prefix) and not name.endswith("/"):
                    dest = os.path.join(out, to + name[len(prefix):])
                    os.makedirs(os.path.dirname(dest), exist_ok=True)
                    with open(dest, "wb") as f:
                        f.write(z.read(name))
PY
  then
    echo "$cudnn_version $frontend_version $layout" > "$tmp/new/VERSION"
    mkdir -p "$(dirname "$cudnn_dir")"
    rm -rf "$cudnn_dir" && mv "$tmp/new" "$cudnn_dir"
  else
    echo "bootstrap: could not fetch the cuDNN headers; attention=cudnn will say it was not built" >&2
  fi
  rm -rf "$tmp"
fi

# ThunderKittens (header-only, MIT) for the optional attention=thunderkittens path: the copy
# of its include/ tree inside ttt-tk 0.2.0's source distribution, the one ThunderKittens
# tree a package registry holds (1.3 MB of headers, checked against a pinned SHA-256). Only
# fetched here: the library is built against it where NFN_THUNDERKITTENS_DIR names it, which
# tools/test.sh and tools/prepare_device.sh do when it is present (docs/cuda.md). pip cannot
# download this sdist (its setup.py needs PyTorch to describe itself), so it is read from the
# index pip uses, by its PEP 503 page.
tk_version="ttt-tk 0.2.0" tk_sha256=4e9c9433ae89bc7548830a55599c40a5eb71d3799a85567250686621321e37d5
tk_dir=${XDG_CACHE_HOME:-$HOME/.cache}/nfn/thunderkittens
if [ "${NFN_DISABLE_CUDA:-0}" = 0 ] && { command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; } &&
   [ "$(cat "$tk_dir/VERSION" 2>/dev/null)" != "$tk_version" ]; then
  echo "bootstrap: fetching the ThunderKittens headers ($tk_version)" >&2
  if ! "$python" - "$tk_dir" "$tk_version" "$tk_sha256" <<'PY'
import hashlib, html, io, os, re, shutil, sys, tarfile, tempfile, urllib.parse, urllib.request
from pip._internal.models.index import PyPI

dest, version, sha256 = sys.argv[1], sys.argv[2], sys.argv[3]
name, number = version.split()
page_url = (os.environ.get("PIP_INDEX_URL") or PyPI.simple_url).rstrip("/") + f"/{name}/"
page = urllib.request.urlopen(page_url, timeout=60).read().decode()
archive = f"{name.replace('-', '_')}-{number}.tar.gz"
link = re.search(r'href="([^"]*/' + re.escape(archive) + r'[^"]*)"', page)
if not link:
    sys.exit(f"{page_url}: no {archive}")
data = urllib.request.urlopen(urllib.parse.urljoin(page_url, html.unescape(link.group(1))), timeout=300).read()
if hashlib.sha256(data).hexdigest() != sha256:
    sys.exit(f"{archive}: SHA-256 {hashlib.sha256(data).hexdigest()}, expected {sha256}")
os.makedirs(os.path.dirname(dest), exist_ok=True)
tmp = tempfile.mkdtemp(dir=os.path.dirname(dest))  # beside dest: the rename below is atomic
top = archive[:-len(".tar.gz")] + "/"
with tarfile.open(fileobj=io.BytesIO(data)) as t:
    for m in t.getmembers():
        rel = m.name[len(top):] if m.name.startswith(top) else ""
        if m.isfile() and (rel.startswith("include/") or rel == "LICENSE") and ".." not in rel.split("/"):
            out = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "wb") as f:
                f.write(t.extractfile(m).read())
if not os.path.isfile(os.path.join(tmp, "include", "kittens.cuh")):
    sys.exit(f"{archive}: no include/kittens.cuh")
with open(os.path.join(tmp, "VERSION"), "w") as f:
    f.write(version + "\n")
shutil.rmtree(dest, ignore_errors=True)
os.rename(tmp, dest)
PY
  then
    echo "bootstrap: could not fetch the ThunderKittens headers; attention=thunderkittens will say it was not built" >&2
  fi
fi
