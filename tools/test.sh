#!/usr/bin/env bash
# The project's test command: bootstrap if needed, then `bazel test //...` (extra
# arguments go to bazel test; NFN_REMOTE_CACHE adds a shared cache: tools/remote_cache_flags.sh).
# Ends with one line: "tests: N passed, N failed, N skipped".
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/tools/bootstrap.sh"
. "$root/tools/thunderkittens_env.sh"
. "$root/tools/remote_cache_flags.sh"
cd "$root"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
bazel test --test_summary=short ${remote_cache_flags[@]+"${remote_cache_flags[@]}"} "$@" //... 2>&1 | tee "$log" || status=${PIPESTATUS[0]}
passed=$(grep -cE '^//\S+ +(\(cached\) )?PASSED' "$log" || true)
failed=$(grep -cE '^//\S+ +(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$log" || true)
skipped=$(grep -cE '^//\S+ +SKIPPED' "$log" || true)
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit "$status"
