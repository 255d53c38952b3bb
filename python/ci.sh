#!/usr/bin/env bash
# The Python part of CI (called by .ci/run after the Rust tests, which built target/debug/kvfabric):
# the pinned virtual environment of python/venv.sh (reused while its requirements are unchanged),
# the kvfabric package built from the checkout (maturin, release), ruff, pytest.
#
#   KVFABRIC_BIN    the node binary the tests start (default target/debug/kvfabric)
set -euo pipefail
cd "$(dirname "$0")/.."

venv=$(bash python/venv.sh)
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
