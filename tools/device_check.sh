#!/usr/bin/env bash
# Every GPU check in one call on the device machine (no Bazel, no network there). Build and
# copy first, here: tools/prepare_device.sh; then run with carry [".device"]:
#   1. the op parity suite, CUDA library against the CPU library (every attention path the
#      library can run: thunderkittens where prepare_device.sh built it with a tree)
#   2. a short training run of a tiny GPT (head size 64) on cuda (f32, bf16, bf16 with each
#      tensor-core attention: flash_mma, cudnn, thunderkittens) against the same run on cpu, and the
#      flash_mma run again with --graphs on, with --graphs on --overlap on, with --graphs on
#      --pdl on, with all three (PDL kernels after a second stream's join, in a graph), and with
#      --stage-timing (events between the stages; its table in logs.tgz), and with --graphs on
#      --recompute all (activations rerun in the backward): the same losses bit
#      for bit, and the step time against op by op (skipped, and said so, when
#      .device/bin/nfn_gpt_native_train is absent); (2b) nanochat and llama (GQA, nanochat's
#      sliding window, value embeddings, Muon) on cuda f32 and bf16 against cpu, and with
#      --graphs on against op by op; (2c) QLoRA adapters over that llama (a q8_0 base) on cuda
#      against cpu
#   3. bench_ops: each op's time at GPT-2 124M's geometry (bf16, seq 1024, micro-batch 16),
#      again with gemm_tune=on, attention on all four paths (and cudnn with deterministic=off),
#      the linear backwards with overlap=on, and the LM head at four chunk sizes: where a
#      step's time goes
#   4. tools/bench_train.py: GPT-2 124M with nfn (cudnn attention and graphs; with and without
#      gemm_tune, deterministic=off, overlap=on and pdl=on) and with the PyTorch reference,
#      tokens/s, MFU and the ratio of nfn's fastest, with the SM clock and the board's power
#      sampled meanwhile (each run's median clock under load beside its tokens/s); then (4b)
#      nfn's fastest mode and the reference again as llm.c trains GPT-2: micro-batch 64, 8
#      micro-batches an optimizer step (524,288 tokens), so the GEMMs are 4x taller and the
#      optimizer's step is paid once in 8 micro-steps of 65,536 tokens
#   5. Nsight Compute over a GPT-2 124M step: every kernel's time (profile.txt)
# Results go to $OUT (or /tmp/nfn-device-out): table.txt (the short table, kept as it grows,
# so a run stopped early still returns its rows), parity.log, bench_ops.txt, bench.json,
# profile.txt, and logs.tgz (every step's output and the libraries' logs, ncu.csv;
# tools/device_env.sh). Each step has its own time limit (bench_train writes each finished
# run to its stderr as it goes, so step 4 stopped by its limit still has a row of what
# finished); steps 4b and 5 run only where they would still end by 590 s, so give the device
# tool timeout_s 600 (steps 1 to 4 take 111-139 s on an H200; 4b and 5 add about 70 s and
# 15 s).
# --quick runs steps 1 and 2 only (280 s at worst): a rerun after a fix, when device time is short.
set -uo pipefail
quick=$([ "${1:-}" = --quick ] && echo 1)
if [ -n "${1:-}" ] && [ -z "$quick" ]; then echo "usage: device_check.sh [--quick]"; exit 2; fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${OUT:-/tmp/nfn-device-out}
mkdir -p "$out" && : > "$out/table.txt"
export PYTHONUNBUFFERED=1
declare -a rows

# Whether a step that may take $1 s still ends inside the device tool's 600 s (with margin);
# else its row says it was skipped.
time_for() {
  if [ $((SECONDS + $1)) -le 590 ]; then return 0; fi
  row "$2" "SKIP" "no time left for it (${SECONDS} s gone, up to $1 s needed)"
  return 1
}

row() {
  rows+=("$(printf '%-40s %-6s %s' "$1" "$2" "$3")")
  printf '%s\n' "${rows[-1]}" >> "$out/table.txt"
}

# A row whose verdict and text come from tools/device_rows.py KIND FILES... (its first word is
# the verdict).
summary_row() {
  local name=$1 line
  shift
  line=$(python3 "$root/tools/device_rows.py" "$@")
  row "$name" "${line%% *}" "${line#* }"
}

. "$root/tools/device_env.sh"
echo "device_check: $(date -u +%F) GPU: $gpu; cuBLASLt from ${cublas_dir:-nowhere}; cuDNN from ${cudnn_dir:-nowhere}; NVRTC from ${nvrtc_found:-nowhere}"

# 1. op parity
frontend_log parity
start=$SECONDS
timeout 60 "$work/bin/ops_parity_test" "$cpu_lib" "$cuda_lib" 2>&1 | tee "$out/parity.log"
status=${PIPESTATUS[0]}
summary=$(tail -n 1 "$out/parity.log")
verdict=$([ "$status" = 0 ] && echo PASS || echo FAIL)
case "$summary" in SKIP*) verdict=SKIP ;; esac
row "op parity" "$verdict" "$summary ($((SECONDS - start)) s)"

# 2. short training run: cuda (f32, bf16) against cpu (f32) from the same seed
trainer=$work/bin/nfn_gpt_native_train
if [ ! -x "$trainer" ]; then
  row "training cpu vs cuda" "SKIP" "no nfn_gpt_native_train in .device/bin"
else
  data=/tmp/nfn-device-data
  mkdir -p "$data"
  python3 - "$root/tools" "$data" <<'PY'
import random, sys
sys.path.insert(0, sys.argv[1])
from bench_train import successor_tokens, write_shard_tokens
rng = random.Random(7)
succ = [rng.randrange(512) for _ in range(512)]
write_shard_tokens(sys.argv[2] + "/tiny_train_000000.bin", successor_tokens(200000, succ, rng))
write_shard_tokens(sys.argv[2] + "/tiny_val_000000.bin", successor_tokens(20000, succ, rng))
PY
  # Head size 64 (128 channels, 2 heads), so the tensor-core paths run rather than fall back.
  common=(--num-layers 2 --num-heads 2 --model-dim 128 --vocab-size 512 --train-data "$data"
          --train-seq-len 64 --batch-size 8 --train-batch-tokens 1024 --max-steps 30
          --learning-rate 1e-3 --warmup-steps 3 --eval-every-steps 30 --eval-batches 2 --seed 1337 --json)
  # The reference in f32 GEMMs, also on a CPU with bf16 units (where the trainer's default is bf16).
  timeout 40 "$trainer" "${common[@]}" --backend cpu --tile-ops-lib "$cpu_lib" --matmul f32 --output-dir /tmp/nfn-cpu \
    > "$logs/train_cpu.json" 2> "$logs/train_cpu.err"
  for run in f32:flash bf16:flash bf16:flash_mma bf16:cudnn bf16:thunderkittens bf16:flash_mma:graphs \
             bf16:flash_mma:graphs+overlap bf16:flash_mma:graphs+pdl bf16:flash_mma:graphs+overlap+pdl \
             bf16:flash_mma:timing bf16:flash_mma:graphs+recompute; do
    IFS=: read -r dt attn extras <<< "$run"
    name=${dt}_$attn${extras:+_${extras//+/_}}
    frontend_log "train_$name"
    timeout 20 "$trainer" "${common[@]}" --backend cuda --tile-ops-lib "$cuda_lib" --dtype "$dt" --attention "$attn" \
      --graphs "$([[ "$extras" == *graphs* ]] && echo on || echo off)" \
      --overlap "$([[ "$extras" == *overlap* ]] && echo on || echo off)" \
      --pdl "$([[ "$extras" == *pdl* ]] && echo on || echo off)" --output-dir "/tmp/nfn-cuda-$name" \
      $([[ "$extras" == *timing* ]] && echo --stage-timing) \
      $([[ "$extras" == *recompute* ]] && echo --recompute all) \
      > "$logs/train_cuda_$name.json" 2> "$logs/train_cuda_$name.err"
    status=$?
    bound=$([ "$dt" = f32 ] && echo 0.002 || echo 0.03)
    summary_row "train cuda $dt $attn${extras:+ ${extras//+/ }} vs cpu" \
      train "$logs/train_cpu.json" "$logs/train_cuda_$name.json" "$bound" "$status"
  done
  # Graphs replay the same kernels on the same buffers, overlap runs them on two streams, and
  # PDL starts each kernel's blocks early (they wait for the writes before theirs), and stage
  # timing only records events between the ops, and recompute reruns the same forward ops in
  # the backward: the losses must agree bit for bit.
  for extras in graphs graphs_overlap graphs_pdl graphs_overlap_pdl timing graphs_recompute; do
    summary_row "train ${extras//_/+} vs op by op" \
      same "$logs/train_cuda_bf16_flash_mma.json" "$logs/train_cuda_bf16_flash_mma_$extras.json"
  done
fi

# 2b. the decoder families (GQA 2:1, nanochat's sliding window on its first layer) on cuda
# against cpu, and a recorded step against op by op; each run samples through the KV-cached
# decoder runtime (cc/infer/decoder_runtime.h) on its backend.
for family in nanochat llama; do
  dtrainer=$work/bin/nfn_${family}_native_train
  if [ ! -x "$dtrainer" ] || [ ! -d "${data:-}" ]; then
    row "train $family cpu vs cuda" "SKIP" "no nfn_${family}_native_train in .device/bin"
    continue
  fi
  dcommon=(--num-layers 2 --num-heads 2 --num-kv-heads 1 --model-dim 128 --vocab-size 512 --train-data "$data"
           --train-seq-len 64 --batch-size 8 --max-steps 30 --eval-every-steps 30 --eval-batches 2 --seed 1337
           --sample-tokens 8 --json)
  timeout 60 "$dtrainer" "${dcommon[@]}" --backend cpu --tile-ops-lib "$cpu_lib" --matmul f32 \
    --output-dir "/tmp/nfn-$family-cpu" > "$logs/train_${family}_cpu.json" 2> "$logs/train_${family}_cpu.err"
  for run in f32:off bf16:off bf16:on; do
    IFS=: read -r dt graphs <<< "$run"
    name=${family}_${dt}_graphs_$graphs
    timeout 30 "$dtrainer" "${dcommon[@]}" --backend cuda --tile-ops-lib "$cuda_lib" --dtype "$dt" --graphs "$graphs" \
      --output-dir "/tmp/nfn-$name" > "$logs/train_$name.json" 2> "$logs/train_$name.err"
    status=$?
    bound=$([ "$dt" = f32 ] && echo 0.002 || echo 0.03)
    summary_row "train $family cuda $dt graphs $graphs vs cpu" \
      train "$logs/train_${family}_cpu.json" "$logs/train_$name.json" "$bound" "$status"
  done
  summary_row "train $family graphs vs op by op" same "$logs/train_${family}_bf16_graphs_off.json" \
    "$logs/train_${family}_bf16_graphs_on.json"
done
# 2c. QLoRA: rank-4 adapters over the cpu llama run above (its base quantized to q8_0, dequantized
# before each GEMM) on cuda f32 and bf16 against cpu (the emulated library passes both).
if [ -x "$work/bin/nfn_llama_native_train" ] && [ -d "/tmp/nfn-llama-cpu" ]; then
  lcommon=(--init-from /tmp/nfn-llama-cpu --lora-rank 4 --quantize-base q8_0 --train-data "$data" --train-seq-len 64
           --batch-size 8 --max-steps 20 --eval-every-steps 20 --eval-batches 2 --seed 1337 --sample-tokens 8 --json)
  timeout 60 "$work/bin/nfn_llama_native_train" "${lcommon[@]}" --backend cpu --tile-ops-lib "$cpu_lib" --matmul f32 \
    --output-dir /tmp/nfn-qlora-cpu > "$logs/train_qlora_cpu.json" 2> "$logs/train_qlora_cpu.err"
  for dt in f32 bf16; do
    timeout 30 "$work/bin/nfn_llama_native_train" "${lcommon[@]}" --backend cuda --tile-ops-lib "$cuda_lib" \
      --dtype "$dt" --output-dir "/tmp/nfn-qlora-$dt" > "$logs/train_qlora_$dt.json" 2> "$logs/train_qlora_$dt.err"
    status=$?
    summary_row "train llama QLoRA cuda $dt vs cpu" train "$logs/train_qlora_cpu.json" "$logs/train_qlora_$dt.json" \
      "$([ "$dt" = f32 ] && echo 0.002 || echo 0.03)" "$status"
  done
else
  row "train llama QLoRA cuda vs cpu" "SKIP" "no llama cpu run to adapt"
fi

if [ -n "$quick" ]; then
  echo
  echo "== device_check --quick $(date -u +%FT%TZ) on ${gpu%%,*}"
  printf '%s\n' "${rows[@]}"
  exit 0
fi

# 3. per-op times at GPT-2 124M's geometry
ops_log=$out/bench_ops.txt
frontend_log bench_ops
echo "== attention=cudnn" > "$ops_log"
timeout 40 "$work/bin/bench_ops" --lib "$cuda_lib" --geometry gpt2 --dtype bf16 --reps 10 \
  --configure attention=cudnn --lm-head-rows 1024,2048,4096,8192 >> "$ops_log" 2>&1
ops_status=$?
# The same ops with gemm_tune=on (each GEMM shape's fastest of cuBLASLt's first 8 picks).
echo "== attention=cudnn gemm_tune=on" >> "$ops_log"
timeout 40 "$work/bin/bench_ops" --lib "$cuda_lib" --geometry gpt2 --dtype bf16 --reps 10 \
  --configure attention=cudnn --configure gemm_tune=on >> "$ops_log" 2>&1 || echo "bench_ops gemm_tune=on failed" >> "$ops_log"
# Attention alone on the other paths (a path that cannot run says why in the log), and cuDNN's
# backward with atomic dQ (deterministic=off).
for attn in flash flash_mma thunderkittens "cudnn --configure deterministic=off"; do
  echo "== attention=$attn" >> "$ops_log"
  timeout 15 "$work/bin/bench_ops" --lib "$cuda_lib" --geometry gpt2 --dtype bf16 --reps 10 \
    --configure attention=$attn --only attention >> "$ops_log" 2>&1 || echo "bench_ops attention=$attn failed" >> "$ops_log"
done
# The linear backwards with overlap=on (weight and bias gradients on a second stream).
echo "== attention=cudnn overlap=on" >> "$ops_log"
timeout 20 "$work/bin/bench_ops" --lib "$cuda_lib" --geometry gpt2 --dtype bf16 --reps 10 \
  --configure attention=cudnn --configure overlap=on --only linear_backward >> "$ops_log" 2>&1 \
  || echo "bench_ops overlap=on failed" >> "$ops_log"
ops=$(python3 "$root/tools/device_rows.py" ops "$ops_log")
row "ops gpt2 bf16 (bench_ops)" "$([ "$ops_status" = 0 ] && echo "${ops%% *}" || echo FAIL)" "${ops#* }"

# 4. throughput against the PyTorch reference, with the SM clock and the board's power sampled
# every 250 ms meanwhile (is a sustained step slowed by its clocks? docs/performance.md)
frontend_log bench_train
smi_fields=clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$smi_fields --format=csv,noheader,nounits > /dev/null 2>&1 || smi_fields=clocks.sm,power.draw,temperature.gpu
# Each sample is stamped with the time it arrived, so each benchmark run's samples are its own.
nvidia-smi --query-gpu=$smi_fields --format=csv,noheader,nounits -lms 250 2>&1 |
  { LC_NUMERIC=C; while IFS= read -r line; do printf '%s, %s\n' "${EPOCHREALTIME:-}" "$line"; done; } > "$logs/smi.csv" &
smi_pid=$!
timeout 250 python3 "$root/tools/bench_train.py" --json --steps 20 --timeout 100 --trainer "$trainer" --tile-ops-lib "$cuda_lib" \
  --modes cudnn+graphs,cudnn+graphs+tune,cudnn+graphs+nondet,cudnn+graphs+overlap,cudnn+graphs+pdl,cudnn+graphs+tune+nondet+overlap,cudnn+graphs+tune+nondet+overlap+pdl \
  > "$out/bench.json" 2> "$logs/bench.err"
summary_row "gpt2-124m nfn vs torch" bench "$out/bench.json" "$logs/bench.err" "$logs/smi.csv"

# 4b. the same as llm.c trains GPT-2 124M (-b 64, 524,288 tokens an optimizer step): micro-batch
# 64, 8 micro-batches, on both sides, nfn in step 4's fastest mode. Against step 4 it shows what
# 4x taller GEMMs and an optimizer step (about 1.1 ms with the gradient norm and zeroing) paid once
# in 8 micro-steps buy.
best=$(python3 "$root/tools/device_rows.py" best "$out/bench.json" "$logs/bench.err")
if [ -z "$best" ]; then
  row "gpt2-124m at B=64, 0.5M tokens a step" "SKIP" "step 4 gave no nfn mode"
elif time_for 150 "gpt2-124m at B=64, 0.5M tokens a step"; then
  timeout 150 python3 "$root/tools/bench_train.py" --json --batch-size 64 --accum 8 --steps 5 --timeout 70 \
    --trainer "$trainer" --tile-ops-lib "$cuda_lib" --modes "$best" > "$logs/bench_b64.json" 2> "$logs/bench_b64.err"
  summary_row "gpt2-124m at B=64, 0.5M tokens a step" bench "$logs/bench_b64.json" "$logs/bench_b64.err" \
    "$logs/smi.csv"
fi
# The sampler stops when its loop does (nvidia-smi then ends at its next write).
kill "$smi_pid" 2> /dev/null; wait "$smi_pid" 2> /dev/null
summary_row "gpt2-124m clocks and power (steps 4, 4b)" clocks "$logs/smi.csv"

# 5. every kernel of a GPT-2 124M step, timed by Nsight Compute (one metric, one pass; clocks
# and caches left alone): the second of three steps (op by op), in step 4's fastest mode
# (its attention path, gemm_tune and deterministic; overlap and pdl change when kernels run,
# not which, and Nsight Compute runs them one at a time anyway), summed by name into $out/profile.txt
# (cuBLASLt's and cuDNN's kernel names say their tile shapes and split-K)
ncu=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -z "$ncu" ]; then
  row "gpt2-124m step profile (ncu)" "SKIP" "no ncu on this machine"
elif [ ! -x "$trainer" ]; then
  row "gpt2-124m step profile (ncu)" "SKIP" "no nfn_gpt_native_train in .device/bin"
elif time_for 45 "gpt2-124m step profile (ncu)"; then
  data=/tmp/nfn-profile-data
  mkdir -p "$data"
  python3 - "$root/tools" "$data" <<'PY'
import random, sys
sys.path.insert(0, sys.argv[1])
from bench_train import write_shard  # uniform tokens of GPT-2's vocabulary, as bench_train's
rng = random.Random(0)
write_shard(sys.argv[2] + "/profile_train_000000.bin", 16 * 1024 * 4 + 1, rng)
write_shard(sys.argv[2] + "/profile_val_000000.bin", 16 * 1024 + 1, rng)
PY
  frontend_log profile
  mode=${best:-cudnn}
  timeout 40 "$ncu" --metrics gpu__time_duration.sum --csv --clock-control none --cache-control none \
    --log-file "$logs/ncu.csv" "$trainer" --template-name gpt2-124m --backend cuda --tile-ops-lib "$cuda_lib" \
    --dtype bf16 --train-data "$data" --train-seq-len 1024 --batch-size 16 --train-batch-tokens 16384 \
    --attention "${mode%%+*}" --gemm-tune "$([[ "$mode" == *+tune* ]] && echo on || echo off)" \
    --deterministic "$([[ "$mode" == *+nondet* ]] && echo off || echo on)" \
    --max-steps 3 --eval-every-steps 100 --eval-batches 0 --graphs off --output-dir /tmp/nfn-profile-out \
    > "$logs/profile_train.out" 2>&1
  echo "ncu exit $?" >> "$logs/profile_train.out"
  summary_row "gpt2-124m step profile (ncu, $mode op by op)" profile "$logs/ncu.csv" "$out/profile.txt"
fi

echo
echo "== device_check $(date -u +%FT%TZ) on ${gpu%%,*}"
printf '%s\n' "${rows[@]}"
