#!/usr/bin/env bash
# The real chat pipeline on a GPU, as nanochat's runs/speedrun.sh: nanochat's --depth recipe
# (d20 unless NFN_DEPTH says otherwise), a 65,536-token tokenizer, pretraining, CORE, SFT, RL on
# GSM8K, ChatCORE and the report card.
#   tools/speedrun.sh OUTPUT_DIR --dataset CORPUS [more nfn pipeline flags...]
# CORPUS is a UTF-8 text file or a directory of .txt files (the pretraining text; Shakespeare
# alone is far too small for d20). Rerunning continues where a run stopped.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -lt 1 ]; then
  echo "usage: tools/speedrun.sh OUTPUT_DIR --dataset CORPUS [nfn pipeline flags...]" >&2
  exit 2
fi
out=$1
shift
exec "$root/tools/nfn.sh" pipeline --depth "${NFN_DEPTH:-20}" --backend cuda --output-dir "$(realpath -m "$out")" "$@"
