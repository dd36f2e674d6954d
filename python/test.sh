#!/usr/bin/env bash
# The Python package's tests: a virtualenv with the frameworks from PyPI,
# `pip install ./python` exactly as a user runs it (the extension compiles
# into the workspace's target directory, shared with cargo), then pytest and
# the benchmark scripts at their quick sizes (correctness, never timings).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=${SESSCTL_TEST_VENV:-$root/target/python-venv}
python=${PYTHON:-python3}

if [ ! -x "$venv/bin/python" ]; then
  "$python" -m venv "$venv" 2>/dev/null || {
    # Debian's python3 without ensurepip: python3-venv brings it.
    apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
    "$python" -m venv "$venv"
  }
fi
"$venv/bin/pip" install -q --disable-pip-version-check -r python/requirements-test.txt

echo "== pip install ./python"
CARGO_TARGET_DIR=$root/target "$venv/bin/pip" install -q --disable-pip-version-check \
  --force-reinstall --no-deps ./python

echo "== pytest python/tests"
# Run from outside python/: there its uncompiled sources would shadow the
# installed package, for pytest and for the processes the tests start.
(cd "$root/target" && "$venv/bin/pytest" -q -c "$root/python/pyproject.toml" \
  --rootdir "$root/python" "$root/python/tests" "$@")

echo "== the Python benchmarks, quick sizes (their correctness, never their timings)"
for b in python/bench/*.py; do
  "$venv/bin/python" "$b" --quick >/dev/null
done
