#!/usr/bin/env bash
# Builds everything tools/device_check.sh runs on the GPU machine (which has no Bazel and no
# network) and copies it into .device/ (git-ignored). Then call the device tool with
#   carry: [".device"]   command: tools/device_check.sh
# Contents of .device/ (about 20 MiB; libraries over 4 MiB travel xz-compressed):
#   bin/ops_parity_test            CUDA-vs-CPU op parity (tests/cuda)
#   bin/nfn_{gpt,nanochat,llama}_native_train   the trainers, when //cc/bin builds
#   bin/bench_ops                  per-op timings of an op library (tools/bench_ops.cc)
#   lib/libnfn_native_train_tile_ops.so, lib/libnfn_native_train_cpu_ops.so
#   lib/*.so*                      non-system libraries they load (oneDNN, OpenBLAS, libgomp, cudart)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
"$root/tools/bootstrap.sh"
. "$root/tools/thunderkittens_env.sh"
targets=(//cuda/ops:libnfn_native_train_tile_ops.so //cc/ops:libnfn_native_train_cpu_ops.so
         //tests/cuda:ops_parity_test //tools:bench_ops)
have_trainer=0
trainers=(nfn_gpt_native_train nfn_nanochat_native_train nfn_llama_native_train)
if bazel query //cc/bin:nfn_gpt_native_train >/dev/null 2>&1; then
  for t in "${trainers[@]}"; do targets+=("//cc/bin:$t"); done
  have_trainer=1
fi
bazel build "${targets[@]}"
bin=$(bazel info bazel-bin 2>/dev/null)
rm -rf .device
mkdir -p .device/bin .device/lib
cp "$bin/cuda/ops/libnfn_native_train_tile_ops.so" "$bin/cc/ops/libnfn_native_train_cpu_ops.so" .device/lib/
cp "$bin/tests/cuda/ops_parity_test" "$bin/tools/bench_ops" .device/bin/
if [ "$have_trainer" = 1 ]; then for t in "${trainers[@]}"; do cp "$bin/cc/bin/$t" .device/bin/; done; fi
# Libraries outside the base system that the binaries load (the device image has its own
# libc, libstdc++ and driver; CUDA's runtime is copied too in case its toolkit differs).
missing=$(for f in .device/lib/*.so .device/bin/*; do ldd "$f" | awk -v f="$f" '/not found/ {print f ": " $1}'; done)
if [ -n "$missing" ]; then
  echo "prepare_device: unresolved libraries (link the target statically):"; echo "$missing"; exit 1
fi
for f in .device/lib/*.so .device/bin/*; do
  ldd "$f" | awk '/=> \// {print $3}'
done | sort -u | while read -r dep; do
  case "$dep" in
    */libc.so*|*/libm.so*|*/libstdc++.so*|*/libgcc_s.so*|*/libdl.so*|*/libpthread.so*|*/librt.so*|*/ld-linux*) ;;
    *) cp -L "$dep" .device/lib/ ;;
  esac
done
chmod -R u+w .device
for f in .device/lib/*; do
  if [ "$(stat -c %s "$f")" -gt 4194304 ]; then xz -T2 -6 "$f"; fi
done
du -sh .device
find .device -type f | sort
