#!/usr/bin/env bash
# --config=remote-cache against a real HTTP cache: nginx with WebDAV PUT on 127.0.0.1, and Bazel
# run here on a small workspace of four C++ targets written below, which uses nfn's own .bazelrc
# (where the remote-cache configs live) and nfn's tools/local_config.bzl and tools/cuda.bzl.
#   1. a clean output base builds everything and uploads it (no hits; the cache fills);
#   2. a second clean output base gets every compile and link as a remote cache hit, as Bazel's
#      process summary counts them, with the same bytes;
#   3. a changed source file there reruns exactly its compile and its dependents' links;
#   4. the read-only config (CI) reads hits and writes nothing to the cache;
#   5. an unreachable cache: the build completes locally with Bazel's warning;
#   6. the nvcc action's key (bazel aquery) changes with the CUDA toolkit's version at the same
#      nvcc path and with the target architectures, and not otherwise (a fake nvcc: no GPU or
#      CUDA needed).
# A Bazel test tagged local and exclusive: it starts Bazel itself (--batch, own output bases
# and HOME in the test's temporary folder) and nginx, so it runs unsandboxed and alone.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }
# The source tree, through the runfiles' link to its .bazelrc: the third_party/ stubs, nested
# repositories, are no runfiles.
here=$(cd "$(dirname "$0")/../.." && pwd)
src=$(dirname "$(realpath "$here/.bazelrc")")
tmp=${TEST_TMPDIR:-$(mktemp -d)}
export HOME=$tmp/home
mkdir -p "$HOME"
unset NFN_DISABLE_CUDA NFN_CUDA_PATH CUDA_PATH NFN_REMOTE_CACHE
bazel=$(command -v bazel) || fail "no bazel on PATH"
nginx=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$nginx" ] || fail "no nginx (tools/bootstrap.sh installs Debian's nginx)"

# --- nginx: a WebDAV cache folder on a free port --------------------------------------------
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
web=$tmp/nginx
mkdir -p "$web/cache" "$web/tmp"
cat > "$web/nginx.conf" <<EOF
daemon off;
user root;
worker_processes 1;
pid $web/nginx.pid;
error_log $web/error.log;
events {}
http {
  access_log $web/access.log;
  client_body_temp_path $web/tmp/body;
  proxy_temp_path $web/tmp/proxy;
  fastcgi_temp_path $web/tmp/fastcgi;
  uwsgi_temp_path $web/tmp/uwsgi;
  scgi_temp_path $web/tmp/scgi;
  server {
    listen 127.0.0.1:$port;
    location / {
      root $web/cache;
      dav_methods PUT;
      create_full_put_path on;
      client_max_body_size 1g;
    }
  }
}
EOF
"$nginx" -c "$web/nginx.conf" -p "$web" &
nginx_pid=$!
trap 'kill "$nginx_pid" 2>/dev/null || true' EXIT
for _ in $(seq 50); do
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
  sleep 0.1
done
cache=http://127.0.0.1:$port
cache_files() { find "$web/cache" -type f | wc -l; }

# --- the workspace --------------------------------------------------------------------------
ws=$tmp/ws
mkdir -p "$ws/tools" "$ws/lib" "$ws/app"
cp "$src/.bazelrc" "$ws/.bazelrc"
cp "$src/tools/workspace_status.sh" "$src/tools/local_config.bzl" "$src/tools/cuda.bzl" "$ws/tools/"
cp -r "$src/third_party" "$ws/third_party"
sed -n '/^local_repository/p' "$src/WORKSPACE" > "$ws/WORKSPACE"
touch "$ws/tools/BUILD"
cat > "$ws/lib/BUILD" <<'EOF'
cc_library(name = "a", srcs = ["a.cc"], hdrs = ["a.h"], visibility = ["//visibility:public"])
cc_library(name = "b", srcs = ["b.cc"], hdrs = ["b.h"], deps = [":a"], visibility = ["//visibility:public"])
cc_library(name = "c", srcs = ["c.cc"], hdrs = ["c.h"], visibility = ["//visibility:public"])
EOF
printf 'int a();\n' > "$ws/lib/a.h"
printf '#include "lib/a.h"\nint a() { return 1; }\n' > "$ws/lib/a.cc"
printf 'int b();\n' > "$ws/lib/b.h"
printf '#include "lib/b.h"\n#include "lib/a.h"\nint b() { return a() + 1; }\n' > "$ws/lib/b.cc"
printf 'int c();\n' > "$ws/lib/c.h"
printf '#include "lib/c.h"\nint c() { return 3; }\n' > "$ws/lib/c.cc"
cat > "$ws/app/BUILD" <<'EOF'
cc_binary(name = "with_b", srcs = ["with_b.cc"], deps = ["//lib:b"])
cc_binary(name = "with_c", srcs = ["with_c.cc"], deps = ["//lib:c"])
EOF
printf '#include "lib/b.h"\nint main() { return b() == 2 ? 0 : 1; }\n' > "$ws/app/with_b.cc"
printf '#include "lib/c.h"\nint main() { return c() == 3 ? 0 : 1; }\n' > "$ws/app/with_c.cc"

# run BASE LOG ARGS...: a bazel command in output base BASE, stderr kept in LOG
run() {
  local base=$1 log=$2
  shift 2
  (cd "$ws" && "$bazel" --batch --output_user_root="$tmp/root" --output_base="$tmp/$base" "$@" \
     2> "$log") || { cat "$log" >&2; fail "bazel $* (output base $base)"; }
}
build() {  # build BASE NAME FLAGS...: the two binaries; NAME.log and NAME.exec.json
  local base=$1 name=$2
  shift 2
  run "$base" "$tmp/$name.log" build --jobs=2 --noshow_progress "$@" --execution_log_json_file="$tmp/$name.exec.json" //app:all
}
# hits NAME: the remote cache hits in the process summary ("N processes: M remote cache hit, ...")
hits() { grep ' processes: ' "$tmp/$1.log" | tail -n 1 | grep -o '[0-9]* remote cache hit' | cut -d ' ' -f 1; }
# spawns NAME: "HIT|RUN first-output" for every action that ran or was fetched
spawns() {
  python3 - "$tmp/$1.exec.json" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
dec, i, rows = json.JSONDecoder(), 0, []
while i < len(text):
    while i < len(text) and text[i].isspace():
        i += 1
    if i == len(text):
        break
    obj, i = dec.raw_decode(text, i)
    out = [o["path"] for o in obj.get("actualOutputs", []) if not o["path"].endswith(".d")]
    rows.append(("HIT " if obj.get("remoteCacheHit") else "RUN ") + (out[0].split("/bin/", 1)[-1] if out else "?"))
print("\n".join(sorted(rows)))
EOF
}

# 1. clean output base, empty cache: everything runs here and is uploaded.
build base1 first --config=remote-cache --remote_cache="$cache"
spawns first > "$tmp/first.spawns"
n=$(wc -l < "$tmp/first.spawns")
[ "$n" -ge 7 ] || fail "the first build ran $n actions; expected 5 compiles and 2 links"
! grep -q '^HIT' "$tmp/first.spawns" || fail "the first build hit an empty cache: $(cat "$tmp/first.spawns")"
[ "${hits_first:=$(hits first)}" = "" ] || [ "$hits_first" = 0 ] || fail "remote cache hits on an empty cache"
uploaded=$(cache_files)
[ "$uploaded" -ge "$n" ] || fail "the cache holds $uploaded files after $n actions ran"

# 2. a second clean output base: every action is a remote cache hit, and the bytes match.
build base2 second --config=remote-cache --remote_cache="$cache"
spawns second > "$tmp/second.spawns"
[ "$(hits second)" = "$n" ] || fail "second build: $(hits second) remote cache hits, expected $n: $(grep processes "$tmp/second.log")"
[ "$(sed 's/^RUN /HIT /' "$tmp/first.spawns")" = "$(cat "$tmp/second.spawns")" ] ||
  fail "second build's actions differ: $(diff "$tmp/first.spawns" "$tmp/second.spawns")"
for bin in with_b with_c; do
  cmp "$tmp/base1/execroot/__main__/bazel-out/k8-fastbuild/bin/app/$bin" \
      "$tmp/base2/execroot/__main__/bazel-out/k8-fastbuild/bin/app/$bin" || fail "app/$bin differs"
done

# 3. a changed source file reruns only what depends on it: c.cc's compile, c's archive and
#    with_c's link; nothing of a, b or with_b.
printf '#include "lib/c.h"\nint c() { return 4; }\n' > "$ws/lib/c.cc"
build base2 changed --config=remote-cache --remote_cache="$cache"
got=$(spawns changed | sed 's/ .*\/_objs\/c\/c\.pic\.o$/ c.o/; s/ .*lib\/libc\.a$/ libc.a/; s/ .*_objs\/c\/c\.o$/ c.o/')
echo "$got" | grep -q '^RUN' || fail "the change ran nothing: $got"
! echo "$got" | grep -qE '/(a|b|with_b)(\.|$)|_objs/(a|b|with_b)/' || fail "the change reran actions of a, b or with_b: $got"
echo "$got" | grep -q 'c/c\.\(pic\.\)\{0,1\}o$\|c\.o$' || fail "c.cc was not recompiled: $got"
echo "$got" | grep -q 'app/with_c$' || fail "with_c was not relinked: $got"
[ "$(echo "$got" | grep -c '^HIT')" = 0 ] || fail "a changed file's actions hit the cache: $got"

# 4. read-only (CI): hits are read, nothing is written.
printf '#include "lib/c.h"\nint c() { return 5; }\n' > "$ws/lib/c.cc"
before=$(cache_files)
build base3 readonly --config=remote-cache-readonly --remote_cache="$cache"
[ "$(cache_files)" = "$before" ] || fail "the read-only build wrote $(( $(cache_files) - before )) files to the cache"
[ "$(hits readonly)" -ge 4 ] || fail "the read-only build got $(hits readonly) hits: $(grep processes "$tmp/readonly.log")"

# 5. an unreachable cache: the build goes on locally, and Bazel says why.
closed=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
build base4 unreachable --config=remote-cache --remote_cache=http://127.0.0.1:"$closed"
grep -qi 'warning.*remote cache' "$tmp/unreachable.log" || fail "no warning about the unreachable cache: $(cat "$tmp/unreachable.log")"

# 6. CUDA: the nvcc action's key follows the toolkit's version and the architectures.
fake=$tmp/cuda
mkdir -p "$fake/bin" "$fake/include" "$fake/lib64" "$ws/k"
echo 13.0.88 > "$fake/version"
cat > "$fake/bin/nvcc" <<EOF
#!/bin/sh
case "\$*" in
  *--dryrun*) echo "#\\\$ TOP=$fake/bin/.." >&2 ;;
  *--version*) echo "Cuda compilation tools, release 13.0, V\$(cat $fake/version)"; echo "Build fake" ;;
esac
EOF
chmod +x "$fake/bin/nvcc"
cat >> "$ws/WORKSPACE" <<'EOF'
load("//tools:local_config.bzl", "local_cuda")
local_cuda(name = "local_cuda")
EOF
printf 'load("//tools:cuda.bzl", "cuda_library")\ncuda_library(name = "k", srcs = ["k.cu"])\n' > "$ws/k/BUILD"
printf '__global__ void k() {}\n' > "$ws/k/k.cu"
export NFN_CUDA_PATH=$fake
key() {  # the ActionKey of the nvcc genrule
  run base5 "$tmp/aquery.log" sync --only=local_cuda
  (cd "$ws" && "$bazel" --batch --output_user_root="$tmp/root" --output_base="$tmp/base5" aquery \
     'mnemonic("Genrule", //k:all)' --output=text 2>> "$tmp/aquery.log") | sed -n 's/^ *ActionKey: //p'
}
k1=$(key)
[ -n "$k1" ] || fail "no ActionKey in bazel aquery's output: $(tail -n 20 "$tmp/aquery.log")"
[ "$(key)" = "$k1" ] || fail "the same toolkit and architectures gave another key"
echo 13.1.80 > "$fake/version"
k2=$(key)
[ "$k2" != "$k1" ] || fail "another CUDA toolkit version at the same nvcc path kept the action key"
echo 13.0.88 > "$fake/version"
[ "$(key)" = "$k1" ] || fail "the first toolkit version back did not give the first key"
sed -i 's/code=sm_120"/code=sm_100"/' "$ws/tools/cuda.bzl"
grep -q 'code=sm_100"' "$ws/tools/cuda.bzl" || fail "tools/cuda.bzl no longer names sm_120; update this test"
k3=$(key)
[ "$k3" != "$k1" ] || fail "other target architectures kept the action key"

echo "PASS: $n actions uploaded; $(hits second) remote cache hits; read-only wrote nothing; CUDA keys $k1 $k2 $k3"
