#!/usr/bin/env bash
# The Python part of CI (called by .ci/run after the Rust tests, which built target/debug/kvfabric):
# a pinned virtual environment (python/requirements-ci.txt, reused while its hash is unchanged),
# the kvfabric package built from the checkout (maturin, release), ruff, pytest.
#
#   KVFABRIC_VENV   the venv (default ~/.cache/kvfabric/venv-<requirements hash>, so a fresh
#                   clone reuses it; removed and rebuilt when the stamp does not match)
#   KVFABRIC_BIN    the node binary the tests start (default target/debug/kvfabric)
set -euo pipefail
cd "$(dirname "$0")/.."

req=python/requirements-ci.txt
hash=$(sha256sum "$req" | cut -c1-16)
venv=${KVFABRIC_VENV:-$HOME/.cache/kvfabric/venv-$hash}
stamp="$venv/.kvfabric-requirements-$hash"
py=${PYTHON:-python3}

if [ ! -f "$stamp" ]; then
  echo "python venv: installing $req into $venv (a fresh install downloads ~4 GB)"
  start=$(date +%s)
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  if ! "$py" -m venv "$venv" 2>/dev/null; then
    apt-get update -qq && apt-get install -y -qq python3-venv
    "$py" -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install -q --no-deps -r "$req"
  touch "$stamp"
  echo "python venv: installed in $(( $(date +%s) - start )) s"
else
  echo "python venv: reusing $venv"
fi
export PATH="$venv/bin:$PATH"

echo "python: ruff"
ruff check python tools
ruff format --check python tools

echo "python: build and install the kvfabric package (maturin, release)"
python -m pip install -q --no-build-isolation --no-deps --force-reinstall .
# Tests must import the installed package, not the sources beside them.
python -c "import kvfabric, sys; assert 'site-packages' in kvfabric.__file__, kvfabric.__file__"

echo "python: pytest"
export KVFABRIC_BIN=${KVFABRIC_BIN:-$PWD/target/debug/kvfabric}
python -m pytest -q -p no:cacheprovider python/tests
