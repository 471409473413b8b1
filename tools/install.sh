#!/usr/bin/env bash
# Installs an nfn release (`bazel build //:release`) under a prefix, or removes one.
#
#   tools/install.sh [--prefix DIR] [--tarball FILE]   install; DIR defaults to ~/.local, FILE
#                                                      to the newest bazel-bin/nfn-*.tar.gz
#   tools/install.sh --uninstall [--prefix DIR]        remove exactly what the install wrote
#
# The tarball's checksum (FILE.sha256 beside it) and every file's checksum (its
# share/nfn/MANIFEST.sha256) are checked before anything lands in the prefix. It writes
# PREFIX/bin/nfn, PREFIX/lib/nfn/ (the package, and a virtual environment on the interpreter
# of the release's Python version: python3.X, or $NFN_PYTHON) and PREFIX/share/nfn/; pip
# installs share/nfn/requirements.txt into the environment (what the system interpreter already
# has is reused) and share/nfn/requirements-nodeps.txt with --no-deps. PREFIX/share/nfn/
# installed.txt lists every file and folder written; --uninstall removes those. Installing over
# an earlier install removes it first. Needs bash, tar, sha256sum and that Python only.
set -euo pipefail

die() { echo "install.sh: error: $*" >&2; exit 1; }

usage() { sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

prefix=${HOME:-}/.local tarball="" uninstall=0
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a folder"; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --tarball) [ $# -ge 2 ] || die "--tarball needs a file"; tarball=$2; shift 2 ;;
    --tarball=*) tarball=${1#*=}; shift ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -n "$prefix" ] || die "no prefix: pass --prefix DIR (HOME is unset)"
case $prefix in /*) ;; *) prefix=$PWD/$prefix ;; esac
prefix=${prefix%/}
case $prefix in *[[:space:]]*) die "prefix '$prefix' holds white space, which bin/nfn's #! line cannot" ;; esac
record=$prefix/share/nfn/installed.txt

# Removes what a record lists: files and links, then the folders it made, deepest first.
remove_recorded() {
  local list=$1 kind path dirs
  mapfile -t dirs < <(sed -n 's/^d //p' "$list" | sort -r)
  while read -r kind path; do
    [ "$kind" = f ] && rm -f -- "$prefix/$path"
  done < "$list"
  [ "$list" = "$record" ] && rm -f -- "$record"
  for path in "${dirs[@]}"; do
    rmdir -- "$prefix/$path" 2>/dev/null ||
      { [ -d "$prefix/$path" ] && echo "install.sh: kept $prefix/$path: it holds files nfn's install did not write" >&2; }
  done
  return 0
}

if [ "$uninstall" = 1 ]; then
  [ -f "$record" ] || die "no nfn install under $prefix ($record is missing)"
  [ -w "$prefix/share/nfn" ] || die "cannot write to $prefix: permission denied"
  version=$(sed -n 's/^# nfn \([^ ,]*\).*/\1/p' "$record" | head -n 1)
  remove_recorded "$record"
  echo "install.sh: removed nfn ${version:-?} from $prefix"
  exit 0
fi

if [ -z "$tarball" ]; then
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  tarball=$(ls -t "$root"/bazel-bin/nfn-*-linux-x86_64.tar.gz 2>/dev/null | head -n 1 || true)
  [ -n "$tarball" ] || die "no release tarball in $root/bazel-bin: run \`bazel build //:release\` or pass --tarball FILE"
fi
[ -f "$tarball" ] || die "$tarball: no such file"
name=$(basename "$tarball")
top=${name%.tar.gz}
version=${top#nfn-}; version=${version%-linux-x86_64}
[ "$top" = "nfn-$version-linux-x86_64" ] && [ -n "$version" ] ||
  die "$tarball: not a release name nfn-VERSION-linux-x86_64.tar.gz"
[ -f "$tarball.sha256" ] || die "$tarball.sha256: missing, so the tarball cannot be checked"
expected=$(cut -d ' ' -f 1 "$tarball.sha256")
actual=$(sha256sum "$tarball" | cut -d ' ' -f 1)
[ "$expected" = "$actual" ] || die "$tarball: checksum $actual does not match $tarball.sha256 ($expected)"

made=$prefix  # the first folder of the prefix this install creates, removed again on failure
while [ ! -d "$(dirname "$made")" ]; do made=$(dirname "$made"); done
[ -d "$prefix" ] && made=""
mkdir -p -- "$prefix" 2>/dev/null || die "cannot create $prefix: permission denied"
[ -w "$prefix" ] || die "cannot write to $prefix: permission denied"
stage=$(mktemp -d "$prefix/.nfn-install.XXXXXX" 2>/dev/null) || die "cannot write to $prefix: permission denied"
partial=$stage/installed.txt
: > "$partial"
venv=$prefix/lib/nfn/venv venv_made=""
rollback() {
  [ -z "$venv_made" ] || rm -rf -- "$venv"
  remove_recorded "$partial"
  rm -rf -- "$stage"
  local dir=$prefix
  while [ -n "$made" ] && rmdir -- "$dir" 2>/dev/null && [ "$dir" != "$made" ]; do dir=$(dirname "$dir"); done
}
trap rollback EXIT
trap 'exit 1' INT TERM

tar -xzf "$tarball" -C "$stage" || die "$tarball: cannot unpack"
src=$stage/$top
[ -f "$src/share/nfn/MANIFEST.sha256" ] || die "$tarball: no share/nfn/MANIFEST.sha256"
(cd "$src" && sha256sum --quiet --strict -c share/nfn/MANIFEST.sha256 >/dev/null 2>&1) ||
  die "$tarball: files do not match its share/nfn/MANIFEST.sha256"
py_version=$(sed -n 's/^ *"python": "\([0-9.]*\)".*/\1/p' "$src/share/nfn/release.json")
python=${NFN_PYTHON:-python$py_version}
command -v "$python" >/dev/null 2>&1 || die "nfn $version needs Python $py_version: no $python (set NFN_PYTHON)"
"$python" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$py_version'.split('.'))))" ||
  die "$python is not Python $py_version, which nfn $version's native module is built for"

if [ -f "$record" ]; then
  echo "install.sh: removing the nfn install already under $prefix" >&2
  remove_recorded "$record"
fi
for path in bin/nfn lib/nfn; do
  [ ! -e "$prefix/$path" ] && [ ! -L "$prefix/$path" ] ||
    die "$prefix/$path exists and no nfn install under $prefix lists it; not overwriting it"
done

make_dir() {  # a folder of the prefix, recording each one this install creates
  [ -d "$prefix/$1" ] && return 0
  [ "$(dirname "$1")" = . ] || make_dir "$(dirname "$1")"
  mkdir -- "$prefix/$1" || die "cannot create $prefix/$1"
  echo "d $1" >> "$partial"
}

sed -i "1s|.*|#!$venv/bin/python|" "$src/bin/nfn"
while IFS= read -r path; do
  path=${path#./}
  [ "$path" = share/nfn/installed.txt ] && die "$tarball: holds share/nfn/installed.txt"
  make_dir "$(dirname "$path")"
  [ -e "$prefix/$path" ] && die "$prefix/$path exists; not overwriting it"
  mv -- "$src/$path" "$prefix/$path"
  echo "f $path" >> "$partial"
done < <(cd "$src" && find . -type f | sort)

venv_made=1
# Without a pip of its own where the interpreter has one: the environment then uses the
# interpreter's pip and setuptools (a venv's bundled setuptools may lack bdist_wheel, which
# building the demo corpus's sdist needs).
own_pip=--without-pip
"$python" -m pip --version >/dev/null 2>&1 || own_pip=""
"$python" -m venv --system-site-packages $own_pip "$venv" || die "$python could not make a virtual environment in $venv"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$prefix/lib/nfn/python" > "$site/nfn.pth"
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
"${pip[@]}" -r "$prefix/share/nfn/requirements.txt" >&2 ||
  die "pip could not install nfn's dependencies ($prefix/share/nfn/requirements.txt)"
"${pip[@]}" --no-deps -r "$prefix/share/nfn/requirements-nodeps.txt" >&2 ||
  die "pip could not install $prefix/share/nfn/requirements-nodeps.txt"
"$venv/bin/python" -m compileall -q "$prefix/lib/nfn/python" >/dev/null ||
  die "could not compile $prefix/lib/nfn/python"
# Everything under lib/nfn/ is this install's: the environment, and the compiled modules.
(cd "$prefix" && find lib/nfn/venv \( -type f -o -type l \) -printf 'f %p\n' && find lib/nfn/venv -type d -printf 'd %p\n' &&
  find lib/nfn/python -path '*/__pycache__*' \( -type f -printf 'f %p\n' -o -type d -printf 'd %p\n' \)) >> "$partial"

{ echo "# nfn $version, installed from $name; tools/install.sh --uninstall --prefix $prefix removes it"
  sort -u "$partial"; } > "$record.tmp"
mv -- "$record.tmp" "$record"
: > "$partial"
trap - EXIT
rm -rf -- "$stage"
echo "install.sh: installed nfn $version in $prefix ($prefix/bin/nfn)"
