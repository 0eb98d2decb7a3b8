#!/usr/bin/env bash
# Builds what is stale for a `cargo test` and prints one line per test executable:
#   scripts/test-executables.sh [cargo test arguments]   ->   NAME<TAB>PATH
# NAME is the test target's name (`mac_path`, or `kivi_engine` for a crate's unit tests).
#
# Stages that re-run tests in another configuration run these executables directly:
# `cargo test -p kivi-engine` would resolve dependency features for the engine alone, unlike
# the workspace build the rust stage made, and compile mlx-rs, tokio and the engine again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cargo test "$@" --no-run --message-format=json | python3 -c '
import json, sys
for line in sys.stdin:
    if not line.startswith("{"):
        continue
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["name"] + "\t" + m["executable"])
'
