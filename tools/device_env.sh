# Sourced by tools/device_check.sh on the GPU machine, with
# $root (the checkout) and $out (results) set: unpacks the carried .device/ under /tmp, puts
# the op libraries and the PyTorch venv's cuBLASLt, cuDNN and NVRTC on the loader path, turns
# the libraries' own error logs on (into $logs, which pack_logs folds into $out/logs.tgz: the
# device tool brings back 8 files at most), and sets work, cpu_lib, cuda_lib, gpu.
logs=/tmp/nfn-device-logs
rm -rf "$logs" && mkdir -p "$logs"
pack_logs() { tar czf "$out/logs.tgz" -C "$logs" . 2>/dev/null; }
trap pack_logs EXIT
if [ ! -d "$root/.device" ]; then
  echo "$(basename "$0"): no .device/ (run tools/prepare_device.sh here and carry .device)"; exit 1
fi
work=/tmp/nfn-device
rm -rf "$work" && cp -r "$root/.device" "$work" && chmod -R u+w "$work"
for f in "$work"/lib/*.xz; do [ -e "$f" ] && xz -d "$f"; done
# cuBLASLt and cuDNN from the PyTorch venv's nvidia wheels (the op library opens them at run
# time; cuDNN's own engine libraries are found on the loader path too), and NVRTC, which
# cuDNN's SDPA engines need to compile their kernels.
wheel_dir() {
  python3 - "$@" <<'PY'
import glob, site, sys
for d in site.getsitepackages() + [site.getusersitepackages()]:
    for pattern in sys.argv[1:]:
        for hit in glob.glob(d + pattern):
            print(hit.rsplit("/", 1)[0]); sys.exit(0)
PY
}
cublas_dir=$(wheel_dir "/nvidia/cu13/lib/libcublasLt.so.13*" "/nvidia/cublas/lib/libcublasLt.so.13*")
cudnn_dir=$(wheel_dir "/nvidia/cudnn/lib/libcudnn.so.9*")
nvrtc_found=$(wheel_dir "/nvidia/cu13/lib/libnvrtc.so.13*" "/nvidia/cuda_nvrtc/lib/libnvrtc.so.13*")
nvrtc_dir=$([ "$nvrtc_found" != "$cublas_dir" ] && echo "$nvrtc_found")
export LD_LIBRARY_PATH="$work/lib${cublas_dir:+:$cublas_dir}${cudnn_dir:+:$cudnn_dir}${nvrtc_dir:+:$nvrtc_dir}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# The libraries' own logs, for a failure the one-line message does not explain: cuBLASLt's
# errors (a file per process), cuDNN's errors (on each step's stderr, before nfn's own line),
# and cudnn-frontend's account of each graph it builds (a file per step, cudnn_frontend_*.log;
# each process rewrites its file, so a step of several processes keeps its last).
export CUBLASLT_LOG_LEVEL=1 CUBLASLT_LOG_FILE=$logs/cublaslt.%i.log
export CUDNN_LOGLEVEL_DBG=1 CUDNN_LOGDEST_DBG=stderr
export CUDNN_FRONTEND_LOG_INFO=1
frontend_log() { export CUDNN_FRONTEND_LOG_FILE=$logs/cudnn_frontend_$1.log; }
cpu_lib=$work/lib/libnfn_native_train_cpu_ops.so
cuda_lib=$work/lib/libnfn_native_train_tile_ops.so
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)
