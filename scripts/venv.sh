#!/usr/bin/env bash
# Creates or reuses .venv with requirements-dev.txt installed.
# The venv lives in a cache keyed on the hash of requirements*.txt, so a clean clone
# (or CI on a machine that kept its cache) reuses it; .venv is a link to it.
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${HUBWRIGHT_CACHE:-$HOME/.cache/hubwright}"
python="${PYTHON:-python3}"
hash=$(cat requirements*.txt | "$python" -c 'import hashlib,sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:16])')
venv="$cache/venvs/$hash"

if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.complete" ]; then
  start=$(date +%s)
  echo "venv: creating $venv (requirements hash $hash)"
  rm -rf "$venv"
  mkdir -p "$cache/venvs"
  "$python" -m venv "$venv"
  # pip 23.2's resolver takes many minutes on this dependency set; a current pip does not.
  "$venv/bin/pip" install -q -U pip
  "$venv/bin/pip" install -q -r requirements-dev.txt
  touch "$venv/.complete"
  echo "venv: ready in $(( $(date +%s) - start ))s"
else
  echo "venv: reusing $venv"
fi
if [ "$(readlink .venv 2>/dev/null)" != "$venv" ]; then
  rm -rf .venv
  ln -s "$venv" .venv
fi
