#!/usr/bin/env bash
# Creates or reuses .venv with requirements-dev.txt installed.
# The venv lives in a cache keyed on the hash of requirements*.txt, so a clean clone
# (or CI on a machine that kept its cache) reuses it; .venv is a link to it.
# Runs sharing the cache may run at once: a venv is created under a lock on the cache (scripts/lib/cache.sh), and
# a run that finds one being created says so, waits, and reuses it (a venv cannot be renamed: its scripts name
# their own path, so it is made in place and marked complete last).
#
#   scripts/venv.sh           # create (minutes) or reuse
#   scripts/venv.sh --check   # reuse only: link .venv when the venv is complete, else exit 1 saying so
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib/cache.sh  # cache_lock, place_link
cache="${HUBWRIGHT_CACHE:-$HOME/.cache/hubwright}"
python="${PYTHON:-python3}"
hash=$(cat requirements*.txt | "$python" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])')
venv="$cache/venvs/$hash"
complete() { [ -x "$venv/bin/python" ] && [ -f "$venv/.complete" ]; }

if complete; then
  [ "${1:-}" = --check ] || echo "venv: reusing $venv"
elif [ "${1:-}" = --check ]; then
  echo "venv: none for requirements*.txt as they are (hash $hash, $venv): ./dev setup creates it" >&2
  exit 1
else
  mkdir -p "$cache/venvs"
  cache_lock "$venv" "venv $hash"
  if complete; then
    echo "venv: reusing $venv (created by another run while this one waited)"
  else
    start=$(date +%s)
    echo "venv: creating $venv (requirements hash $hash)"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    # pip 23.2's resolver takes many minutes on this dependency set; a current pip does not.
    "$venv/bin/pip" install -q -U pip
    "$venv/bin/pip" install -q -r requirements-dev.txt
    touch "$venv/.complete"
    echo "venv: ready in $(( $(date +%s) - start ))s"
  fi
  cache_unlock "$venv"
fi
if [ "$(readlink .venv 2>/dev/null)" != "$venv" ]; then
  [ -L .venv ] || rm -rf .venv  # a folder of its own (not a link to the cache): replaced by the link
  place_link "$venv" .venv
fi
