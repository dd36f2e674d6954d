#!/usr/bin/env bash
# The README's test command: the Rust workspace's tests, then the Python
# package's (python/test.sh sets up its own virtualenv from PyPI).
set -euo pipefail
cd "$(dirname "$0")/.."
# The remote-store tests' servers (PostgreSQL, moto), installed if missing.
source tests/remote-servers.sh
cargo test --workspace --locked
bash python/test.sh
