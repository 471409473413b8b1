#!/usr/bin/env bash
# The whole chat pipeline at toy size on a CPU, as nanochat's runs/runcpu.sh: a tokenizer, a
# 4-layer nanochat pretrained on Shakespeare, its bits per byte and CORE, SFT, RL on arithmetic,
# ChatCORE and the report card, in about a minute and a half on 2 cores.
#   tools/runcpu.sh [OUTPUT_DIR] [more nfn pipeline flags...]
# OUTPUT_DIR defaults to ~/NeuralFn/artifacts/runcpu; rerunning continues where a run stopped.
# Then: tools/nfn.sh chat --checkpoint OUTPUT_DIR/rl
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$HOME/NeuralFn/artifacts/runcpu}
exec "$root/tools/nfn.sh" pipeline --size tiny --backend cpu --output-dir "$(realpath -m "$out")" "${@:2}"
