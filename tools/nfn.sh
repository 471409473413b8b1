#!/usr/bin/env bash
# Run the nfn command line: bootstrap if needed, then `bazel run //py:nfn -- ARGS...`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/tools/bootstrap.sh"
cd "$root"
exec bazel run --ui_event_filters=-info,-stdout,-stderr --noshow_progress //py:nfn -- "$@"
