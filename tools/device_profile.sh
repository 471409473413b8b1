#!/usr/bin/env bash
# Where a GPT-2 124M training step's GPU time goes, kernel by kernel, on the device machine:
#   1. bench_ops at GPT-2 124M's geometry (bf16, cudnn attention), with each linear backward's
#      products timed alone (input gradient, weight gradient, weight + bias gradient)
#   2. Nsight Compute (ncu, the image's) over 3 training steps of nfn_gpt_native_train (B=16,
#      T=1024, random tokens): every kernel's duration (one metric, one pass; clocks and
#      caches left alone), then the second step's kernels summed by name (cuBLASLt's and
#      cuDNN's kernel names say their tile shapes and split-K), the sum, and every kernel in order
# Build and carry as for device_check.sh (tools/prepare_device.sh; carry [".device"]; timeout_s
# 300: the steps stop by 250 s). Results in $OUT: profile.txt (the step's kernels), bench_ops.txt,
# logs.tgz (ncu.csv, the trainer's output); a short table last.
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-/tmp/nfn-device-out}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
. "$root/tools/device_env.sh"
echo "device_profile: $(date -u +%F) GPU: $gpu"

timeout 50 "$work/bin/bench_ops" --lib "$cuda_lib" --geometry gpt2 --dtype bf16 --reps 10 \
  --configure attention=cudnn > "$out/bench_ops.txt" 2>&1 || echo "bench_ops failed" >> "$out/bench_ops.txt"

ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
data=/tmp/nfn-profile-data
mkdir -p "$data"
python3 - "$data" <<'PY'
import array, random, sys
rng = random.Random(0)
for name, n in (("profile_train_000000.bin", 16 * 1024 * 4 + 1), ("profile_val_000000.bin", 16 * 1024 + 1)):
    h = array.array("i", [0] * 256); h[0], h[1], h[2] = 20240520, 1, n
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        h.tofile(f); array.array("H", (rng.randrange(50257) for _ in range(n))).tofile(f)
PY
if [ -z "$ncu" ]; then
  echo "no ncu on this machine" > "$out/profile.txt"
else
  timeout 180 "$ncu" --metrics gpu__time_duration.sum --csv --clock-control none --cache-control none \
    --log-file "$logs/ncu.csv" "$work/bin/nfn_gpt_native_train" --template-name gpt2-124m --backend cuda \
    --tile-ops-lib "$cuda_lib" --dtype bf16 --train-data "$data" --train-seq-len 1024 --batch-size 16 \
    --train-batch-tokens 16384 --max-steps 3 --eval-every-steps 100 --eval-batches 0 \
    --output-dir /tmp/nfn-profile-out > "$logs/profile_train.out" 2>&1
  echo "ncu exit $?" >> "$logs/profile_train.out"
  python3 - "$logs/ncu.csv" > "$out/profile.txt" <<'PY'
import collections, csv, sys
lines = [l for l in open(sys.argv[1]) if l.startswith('"')]
rows = []
for r in csv.DictReader(lines):
    if r.get("Metric Name") == "gpu__time_duration.sum":
        unit = r.get("Metric Unit", "")
        scale = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0}.get(unit)
        if scale is not None:
            rows.append((r["Kernel Name"], float(r["Metric Value"].replace(",", "")) * scale))  # name, ms
starts = [i for i, (name, _) in enumerate(rows) if "embedding_forward_kernel" in name]
if len(starts) < 3:
    print(f"{len(rows)} kernels profiled; {len(starts)} step starts (embedding_forward) found, 3 wanted"); sys.exit()
step = rows[starts[-2]:starts[-1]]  # the second step (the first sets up), embedding to embedding
total = sum(ms for _, ms in step)
def short(name):
    name = name.replace("(anonymous namespace)::", "").replace("void ", "")
    return name.split("(")[0][:110]
by = collections.defaultdict(lambda: [0, 0.0])
for name, ms in step:
    by[short(name)][0] += 1
    by[short(name)][1] += ms
print(f"step 2: {len(step)} kernels, {total:.2f} ms of kernel time ({len(rows)} kernels profiled, {len(starts)} steps)")
print(f"{'ms':>8} {'calls':>5}  kernel")
for name, (n, ms) in sorted(by.items(), key=lambda kv: -kv[1][1]):
    print(f"{ms:8.3f} {n:5d}  {name}")
print("\nthe step's kernels in order (ms):")
for name, ms in step:
    print(f"{ms:8.3f}  {short(name)}")
PY
fi
echo
echo "== device_profile $(date -u +%FT%TZ) on ${gpu%%,*}"
grep -E "^ops per micro-step|^linear_backward .*: " "$out/bench_ops.txt"
head -n 16 "$out/profile.txt"
