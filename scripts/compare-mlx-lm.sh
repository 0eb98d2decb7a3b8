#!/usr/bin/env bash
# kivi against mlx-lm on the same machine, the same weights and the same tokens: decode and
# prefill speed and peak memory of mlx-lm's full and quantized caches (kv_bits 4 and 2),
# of the engine's MLX backend (the Mac's graph, here in float32 on the CPU) and of its host
# backend, with the full, K4V4 and K2V2 caches; then perplexity of both engines on the same
# windows. On demand, not in CI (an hour of CPU with the defaults).
#
#   scripts/compare-mlx-lm.sh            # defaults below; override with the variables
#   CONTEXTS=512,2k REPEATS=1 WINDOWS=0 scripts/compare-mlx-lm.sh
#
# The three engines run in rounds, each round in another order (rotated), every
# measurement in its own process; the report gives medians over rounds and medians of
# per-round ratios. Needs the project's virtual environment (.venv with mlx-lm, from
# scripts/setup.sh) and a release build of kivi (KIVI_BIN, default target/release/kivi,
# built if missing).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
MODEL="${KIVI_MODEL:-$ROOT/.data/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
TEXT="${TEXT:-$ROOT/.data/texts/moby-dick.txt}"
OUT="${OUT:-$ROOT/target/compare-mlx-lm}"
CONTEXTS="${CONTEXTS:-512,2k,4k,8k}"
REPEATS="${REPEATS:-2}"
DECODE_TOKENS="${DECODE_TOKENS:-32}"
WINDOWS="${WINDOWS:-4}"
CONFIGS=full,k4v4-g32-r128,k2v2-g32-r128
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
KIVI_BIN="${KIVI_BIN:-$TARGET_DIR/release/kivi}"
# MLX's CPU back end calls BLAS; the engine links Debian's OpenBLAS (scripts/mlx-sys), and
# mlx-lm gets the same library preloaded, so that neither runs the wheel's reference BLAS.
OPENBLAS="${OPENBLAS:-$(ldconfig -p | awk '/libopenblas\.so\.0/ {print $NF; exit}')}"

[ -x "$PY" ] || { echo "no $PY: run scripts/setup.sh first" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "no model at $MODEL: run scripts/setup.sh data" >&2; exit 1; }
[ -n "$OPENBLAS" ] || { echo "no libopenblas.so.0: run scripts/setup.sh apt" >&2; exit 1; }
if [ ! -x "$KIVI_BIN" ]; then
    (cd "$ROOT" && cargo build --release -p kivi-cli)
fi
mkdir -p "$OUT"

# The same weights for mlx-lm: Q4_1 blocks as MLX-quantized triplets, bit-identical.
MLX_DIR="$OUT/$(basename "$MODEL" .gguf)-mlx"
if [ ! -f "$MLX_DIR/config.json" ]; then
    "$PY" "$ROOT/scripts/gguf_to_mlx.py" --format exact "$MODEL" "$MLX_DIR"
fi

run_engine() {
    local engine=$1 dir=$2
    case "$engine" in
        mlx-lm)
            LD_PRELOAD="$OPENBLAS" "$PY" "$ROOT/scripts/compare_mlx_lm.py" bench "$MLX_DIR" \
                --text "$TEXT" --contexts "$CONTEXTS" --decode-tokens "$DECODE_TOKENS" \
                --out "$dir/mlx-bench.json" ;;
        kivi-mlx | kivi-host)
            local backend=mlx-cpu-f32
            [ "$engine" = kivi-host ] && backend=host
            "$KIVI_BIN" bench --backend "$backend" --model "$MODEL" --text "$TEXT" \
                --contexts "$CONTEXTS" --repeats 1 --decode-tokens "$DECODE_TOKENS" \
                --configs "$CONFIGS" --json "$dir/$engine.json" ;;
    esac
}

engines=(mlx-lm kivi-mlx kivi-host)
for round in $(seq 1 "$REPEATS"); do
    dir="$OUT/round-$round"
    mkdir -p "$dir"
    shift_by=$(( (round - 1) % ${#engines[@]} ))
    order=("${engines[@]:$shift_by}" "${engines[@]:0:$shift_by}")
    for engine in "${order[@]}"; do
        echo "== round $round: $engine (contexts $CONTEXTS)"
        run_engine "$engine" "$dir"
    done
done

ppl_args=()
if [ "$WINDOWS" -gt 0 ]; then
    echo "== perplexity ($WINDOWS windows of 2048, last 1024 scored, 128-token chunks)"
    "$KIVI_BIN" ppl --model "$MODEL" --text "$TEXT" --windows "$WINDOWS" \
        --configs "$CONFIGS" --json "$OUT/kivi-ppl.json" --dump-tokens "$OUT/windows.json"
    "$PY" "$ROOT/scripts/compare_mlx_lm.py" ppl "$MLX_DIR" --tokens "$OUT/windows.json" \
        --out "$OUT/mlx-ppl.json"
    ppl_args=(--kivi-ppl "$OUT/kivi-ppl.json" --mlx-ppl "$OUT/mlx-ppl.json")
fi

"$PY" "$ROOT/scripts/compare_mlx_lm.py" report \
    --mlx-bench "$OUT/round-*/mlx-bench.json" --kivi-mlx "$OUT/round-*/kivi-mlx.json" \
    --kivi-host "$OUT/round-*/kivi-host.json" "${ppl_args[@]}" | tee "$OUT/report.md"
