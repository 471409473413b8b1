#!/usr/bin/env bash
# Run the nfn command line: bootstrap if needed, then `bazel run //py:nfn -- ARGS...` (with
# NFN_REMOTE_CACHE: tools/remote_cache_flags.sh).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/tools/bootstrap.sh"
. "$root/tools/remote_cache_flags.sh"
cd "$root"
exec bazel run --ui_event_filters=-info,-stdout,-stderr --noshow_progress \
  ${remote_cache_flags[@]+"${remote_cache_flags[@]}"} //py:nfn -- "$@"
