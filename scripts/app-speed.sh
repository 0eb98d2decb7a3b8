#!/usr/bin/env bash
# The app `make run` starts against the engine: decode tok/s of the optimized app (WebDriver,
# ui/tests/app/speed.test.ts) answering about a ~2k-token document, next to `kivi bench` at
# 2k tokens of context with the same cache, in alternating rounds; prints each figure and
# the ratio of the medians. On demand (Linux; needs what `make test` installs).
#
#   scripts/app-speed.sh [ROUNDS]      (default 2)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
rounds=${1:-2}
doc=${KIVI_SPEED_DOC:-$ROOT/.data/texts/moby-dick/chapter_102.txt}
tokens=${KIVI_SPEED_TOKENS:-64}
cache=${KIVI_SPEED_CACHE:-k4v2-g32-r128-s4-rot}
[ -f ui/dist/index.html ] || (cd ui && npm run build)
cargo build --release -p kivi-chat -p kivi-cli
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
app=() bench=()
for r in $(seq 1 "$rounds"); do
  KIVI_APP="$ROOT/target/release/kivi-chat" KIVI_E2E_SPEC=tests/app/speed.test.ts \
    KIVI_SPEED_DOC="$doc" KIVI_SPEED_TOKENS="$tokens" scripts/e2e-app.sh >"$out/app$r.log" 2>&1 \
    || { cat "$out/app$r.log"; exit 1; }
  # The follow-up's answer: the document is in the cache, as in kivi bench.
  a=$(grep -o 'APP_DECODE [0-9.]*' "$out/app$r.log" | tail -1 | cut -d' ' -f2)
  target/release/kivi bench --model "${KIVI_MODEL:-$ROOT/.data/models/SmolLM2-135M-Instruct.Q4_1.gguf}" \
    --configs "$cache" --contexts 2k --repeats 1 --decode-tokens "$tokens" --json "$out/bench$r.json" \
    >"$out/bench$r.log" 2>&1 || { cat "$out/bench$r.log"; exit 1; }
  b=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["entries"][0]["decode_tokens_per_s"]["median"])' "$out/bench$r.json")
  echo "round $r: app decode $a tok/s, kivi bench decode $b tok/s"
  app+=("$a") bench+=("$b")
done
python3 - "${app[*]}" "${bench[*]}" <<'PY'
import statistics, sys
app = [float(x) for x in sys.argv[1].split()]
bench = [float(x) for x in sys.argv[2].split()]
a, b = statistics.median(app), statistics.median(bench)
print(f"median: app {a:.1f} tok/s, kivi bench {b:.1f} tok/s, app/bench {a / b:.2f}x")
PY
