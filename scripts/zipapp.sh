#!/usr/bin/env bash
# Builds the CLI as one file, hubwright-<version>.pyz (a shiv zipapp), for CPython 3.11 on linux x86_64 (glibc 2.34
# or newer: cryptography's wheel needs it): what a pull request's CI job and a laptop run `plan` with, outside any
# checkout (docs/plan.md, "Pull requests"). `python3 hubwright-<version>.pyz plan ...` is `python -m automation plan ...`.
#
# Not a wheel: the design fixes the top-level folders automation, stacks, components and policy, and a wheel
# installing them into someone's environment would collide with other packages of those names. The zipapp installs
# nothing: on its first run it extracts its site-packages into $SHIV_ROOT (default ~/.shiv), a folder per build,
# and puts that folder first on sys.path, before PYTHONPATH and every site-packages (scripts/zipapp_preamble.py).
#
# What it holds: requirements.txt's runtime packages, their dependencies at the versions the venv has (the tested
# ones: `pip freeze` of the build's Python is the constraints), and the program as `./dev plan` runs it: the
# packages automation, stacks, components and policy (their files Git tracks or would track: no __pycache__),
# pyproject.toml (stacks.release reads the one version there, beside the packages, as in a checkout or the image)
# and requirements.txt, __main__.py and Pulumi.yaml (the plan cache's program digest covers them, so a plan cache
# is shared with a checkout of the same code). The file's name comes from stacks.release.version().
#
# The wheels come from a wheelhouse in the cache ($HUBWRIGHT_CACHE/wheels/<hash of requirements.txt, constraints
# and platform>), filled once by `pip download` (through pip's own cache); every later build installs from it with
# --no-index: no network. Deterministic where shiv allows: entries sorted, every timestamp SOURCE_DATE_EPOCH
# (default: the last commit's time), no compiled files, no console scripts (their shebangs name the build's path).
#
#   scripts/zipapp.sh [--out DIR]   # writes DIR/hubwright-<version>.pyz (default DIR: dist) and prints its path
#   PYTHON=path/to/python scripts/zipapp.sh ...   # build with that Python (shiv installed), not .venv's
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
. scripts/lib/cache.sh  # cache_build

out=dist
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=${2:?--out needs a folder}; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    -h|--help) sed -n '2,/^set /{/^set /d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "zipapp: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

if [ -z "${PYTHON:-}" ]; then
  bash scripts/venv.sh >&2
  PYTHON=$ROOT/.venv/bin/python
fi
if ! "$PYTHON" -c 'import shiv' 2>/dev/null; then
  echo "zipapp: $PYTHON has no shiv (requirements-dev.txt pins it; scripts/venv.sh installs it)" >&2
  exit 1
fi
cache=${HUBWRIGHT_CACHE:-$HOME/.cache/hubwright}
version=$("$PYTHON" -c 'from stacks.release import version; print(version())')
mkdir -p "$out"
target="$(cd "$out" && pwd)/hubwright-$version.pyz"

# The platform the wheels are for (pip lists each manylinux tag it may take), whatever machine builds.
platform=(--only-binary=:all: --implementation cp --python-version 3.11 --abi cp311 --abi abi3 --abi none
          --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
          --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64)

work=$(mktemp -d "${TMPDIR:-/tmp}/hubwright-zipapp.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m pip freeze --all 2>/dev/null | grep -E '^[A-Za-z0-9._-]+(\[[^]]*\])?==' | LC_ALL=C sort > "$work/constraints.txt"
key=$(cat requirements.txt "$work/constraints.txt" <(printf '%s\n' "${platform[@]}") \
      | "$PYTHON" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])')
wheels="$cache/wheels/$key"

start=$(date +%s%N)
download() {
  "$PYTHON" -m pip download -q --dest "$CACHE_TMP" "${platform[@]}" -r requirements.txt -c "$work/constraints.txt"
}
cache_build "$wheels" download
[ "$CACHE_BUILT" = 1 ] && echo "zipapp: wheels downloaded into $wheels" >&2

# The site-packages: the wheels (installed for the target platform, offline), then the program beside them.
site="$work/site-packages"
"$PYTHON" -m pip install -q --isolated --no-index --find-links "$wheels" "${platform[@]}" --no-compile \
    --target "$site" -r requirements.txt -c "$work/constraints.txt"
rm -rf "$site/bin"  # console scripts: their shebang is this build's Python; the zipapp runs none of them
for package in automation stacks components policy; do
  [ ! -e "$site/$package" ] || { echo "zipapp: a dependency installs a top-level $package" >&2; exit 1; }
done
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard -- automation stacks components policy \
    | while IFS= read -r -d '' file; do [ ! -f "$file" ] || printf '%s\0' "$file"; done \
    | xargs -0 cp --parents -t "$site"
else  # an export without .git (a source archive): every file but compiled ones
  find automation stacks components policy -type f ! -name '*.pyc' ! -path '*/__pycache__/*' -print0 \
    | xargs -0 cp --parents -t "$site"
fi
cp pyproject.toml requirements.txt __main__.py Pulumi.yaml "$site/"

export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 315554400)}
"$PYTHON" -m shiv --reproducible --compressed --python '/usr/bin/env python3' \
    --entry-point automation.cli:main --preamble scripts/zipapp_preamble.py \
    --site-packages "$site" --output-file "$target.tmp" >&2
mv "$target.tmp" "$target"
awk -v size="$(stat -c %s "$target")" -v ns="$(( $(date +%s%N) - start ))" -v file="$target" \
  'BEGIN { printf "zipapp: %s (%d bytes, %.1f MiB) built in %.1f s\n", file, size, size / 1048576, ns / 1e9 }' >&2
echo "$target"
