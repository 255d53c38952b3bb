#!/usr/bin/env bash
# The pinned Python virtual environment of CI (python/requirements-ci.txt: vllm 0.33.0 with its
# torch and transformers, maturin, pytest, ruff, numpy, blake3), created once and reused while
# the requirements' hash is unchanged. Prints the venv's path on stdout; progress on stderr.
#
#   KVFABRIC_VENV   the venv (default ~/.cache/kvfabric/venv-<requirements hash>, so a fresh
#                   clone reuses it; removed and rebuilt when its stamp does not match)
#   PYTHON          the interpreter that creates it (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."

req=python/requirements-ci.txt
hash=$(sha256sum "$req" | cut -c1-16)
venv=${KVFABRIC_VENV:-$HOME/.cache/kvfabric/venv-$hash}
stamp="$venv/.kvfabric-requirements-$hash"
py=${PYTHON:-python3}

if [ ! -f "$stamp" ]; then
  echo "python venv: installing $req into $venv (a fresh install downloads ~4 GB)" >&2
  start=$(date +%s)
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  if ! "$py" -m venv "$venv" 2>/dev/null; then
    apt-get update -qq >&2 && apt-get install -y -qq python3-venv >&2
    "$py" -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install -q --no-deps -r "$req" >&2
  touch "$stamp"
  echo "python venv: installed in $(( $(date +%s) - start )) s" >&2
else
  echo "python venv: reusing $venv" >&2
fi
echo "$venv"
