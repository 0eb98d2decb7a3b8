#!/usr/bin/env bash
# kivi vs mlx-lm on the same machine and the same weights: decode speed with the full
# cache and with quantized caches at equal bits (mlx-lm's kv_bits=4 and 2), and
# perplexity of both engines on the same windows. On demand, not in CI (minutes of CPU).
#
#   scripts/compare-mlx-lm.sh            # defaults below; override with the variables
#   CONTEXTS=512,2k REPEATS=1 WINDOWS=1 scripts/compare-mlx-lm.sh
#
# Needs the project's virtual environment (.venv with mlx-lm, from scripts/setup.sh) and a
# release build of kivi (KIVI_BIN, default target/release/kivi, built if missing).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
MODEL="${KIVI_MODEL:-$ROOT/.data/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
TEXT="${TEXT:-$ROOT/.data/texts/moby-dick.txt}"
OUT="${OUT:-$ROOT/target/compare-mlx-lm}"
CONTEXTS="${CONTEXTS:-512,1k,2k,4k}"
REPEATS="${REPEATS:-3}"
DECODE_TOKENS="${DECODE_TOKENS:-32}"
WINDOWS="${WINDOWS:-4}"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
KIVI_BIN="${KIVI_BIN:-$TARGET_DIR/release/kivi}"

[ -x "$PY" ] || { echo "no $PY: run scripts/setup.sh first" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "no model at $MODEL: run scripts/setup.sh data" >&2; exit 1; }
if [ ! -x "$KIVI_BIN" ]; then
    (cd "$ROOT" && cargo build --release -p kivi-cli)
fi
mkdir -p "$OUT"

# The same weights for mlx-lm: Q4_1 blocks as MLX-quantized triplets, bit-identical.
MLX_DIR="$OUT/$(basename "$MODEL" .gguf)-mlx"
if [ ! -f "$MLX_DIR/config.json" ]; then
    "$PY" "$ROOT/scripts/gguf_to_mlx.py" --format exact "$MODEL" "$MLX_DIR"
fi

echo "== decode and prefill speed (contexts $CONTEXTS, $REPEATS rounds)"
"$KIVI_BIN" bench --model "$MODEL" --text "$TEXT" --contexts "$CONTEXTS" \
    --repeats "$REPEATS" --decode-tokens "$DECODE_TOKENS" \
    --configs full,k4v4-g32-r128,k2v2-g32-r128 --json "$OUT/kivi-bench.json"
"$PY" "$ROOT/scripts/compare_mlx_lm.py" bench "$MLX_DIR" --text "$TEXT" \
    --contexts "$CONTEXTS" --repeats "$REPEATS" --decode-tokens "$DECODE_TOKENS" \
    --out "$OUT/mlx-bench.json"

echo "== perplexity ($WINDOWS windows of 2048, last 1024 scored, 128-token chunks)"
"$KIVI_BIN" ppl --model "$MODEL" --text "$TEXT" --windows "$WINDOWS" \
    --configs full,k4v4-g32-r128,k2v2-g32-r128 \
    --json "$OUT/kivi-ppl.json" --dump-tokens "$OUT/windows.json"
"$PY" "$ROOT/scripts/compare_mlx_lm.py" ppl "$MLX_DIR" --tokens "$OUT/windows.json" \
    --out "$OUT/mlx-ppl.json"

"$PY" "$ROOT/scripts/compare_mlx_lm.py" report \
    --kivi-bench "$OUT/kivi-bench.json" --mlx-bench "$OUT/mlx-bench.json" \
    --kivi-ppl "$OUT/kivi-ppl.json" --mlx-ppl "$OUT/mlx-ppl.json"
