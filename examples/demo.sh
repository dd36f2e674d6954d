#!/usr/bin/env bash
# The main job, on data this repository ships: store an agent's messages as
# content-addressed blobs, pack them, and read them back verified.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p sessctl
sessctl=target/release/sessctl
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SESSCTL_STORE="$work/store"

$sessctl init
messages=examples/sessions/fix-flaky-test.json
count=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$messages")
echo "storing the $count messages of $messages"
ids=()
for i in $(seq 0 $((count - 1))); do
  python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1]))[int(sys.argv[2])]))' "$messages" "$i" > "$work/m.json"
  ids+=("$($sessctl hash-object -w "$work/m.json")")
done
printf '  %s\n' "${ids[@]}"
echo "storing them again writes nothing new (same content, same id):"
$sessctl hash-object -w "$work/m.json"
$sessctl repack
echo "the fourth message, a tool result, read back from the pack (prefix ${ids[3]:0:8}):"
$sessctl cat-object -t "${ids[3]:0:8}"
$sessctl cat-object -p "${ids[3]:0:8}"
