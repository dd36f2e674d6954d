#!/usr/bin/env bash
# The main job, on the example session this repository ships: an agent's
# conversation committed turn by turn, a fork that tries another approach
# from the middle, and the lineage as git would draw it.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet -p sessctl
# Where cargo put it (CARGO_TARGET_DIR may move target/).
bin="${CARGO_TARGET_DIR:-target}/release/sessctl"
sessctl() { "$bin" "$@"; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export SESSCTL_STORE="$work/store"
turns=examples/sessions/fix-flaky-test

sessctl init
echo "== three turns of an agent fixing a flaky test"
sessctl commit --new fix-flaky-test --title "Fix the flaky parser test" --messages $turns/turn-1.json \
  --usage '{"prompt_tokens":812,"completion_tokens":64}' --duration-ms 2100
sessctl commit --messages $turns/turn-2.json --usage '{"prompt_tokens":1460,"completion_tokens":210}' --duration-ms 4800
sessctl commit --messages $turns/turn-3.json --usage '{"prompt_tokens":2240,"completion_tokens":180}' --duration-ms 6100
echo "== a fork from the second turn that tries a property test first (only its new messages are stored)"
sessctl fork fix-flaky-test~1 --as property-test --messages $turns/retry.json
echo "== sessctl ls"
sessctl ls
echo "== sessctl log --graph --oneline --all"
sessctl log --graph --oneline --all
echo "== sessctl diff fix-flaky-test property-test (what each side has that the other does not)"
sessctl diff fix-flaky-test property-test | head -20
echo "== sessctl reflog fix-flaky-test"
sessctl reflog fix-flaky-test
echo "== sessctl fsck"
sessctl repack >/dev/null
sessctl fsck && echo "fsck: clean"
