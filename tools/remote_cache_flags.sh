# Sourced by tools/test.sh and tools/nfn.sh: the Bazel flags for a shared remote cache in
# remote_cache_flags (an array), from NFN_REMOTE_CACHE (the cache's URL: http(s):// or grpc(s)://)
# and NFN_REMOTE_CACHE_READONLY=1 (read the cache, upload nothing: CI). Empty where unset.
remote_cache_flags=()
if [ -n "${NFN_REMOTE_CACHE:-}" ]; then
  config=remote-cache
  [ "${NFN_REMOTE_CACHE_READONLY:-0}" = 0 ] || config=remote-cache-readonly
  remote_cache_flags=("--config=$config" "--remote_cache=$NFN_REMOTE_CACHE")
fi
