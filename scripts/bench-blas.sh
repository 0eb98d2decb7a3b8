#!/usr/bin/env bash
# Compares MLX's bundled BLAS with the system OpenBLAS, interleaved in one run.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY="$ROOT/.venv/bin/python"
found=(/usr/lib/*/libopenblas.so.0)
OPENBLAS=${found[0]}
[ -e "$OPENBLAS" ] || { echo "libopenblas-dev is not installed (make setup)" >&2; exit 1; }
for round in 1 2; do
  echo "--- round $round: bundled reference BLAS"
  "$PY" "$ROOT/scripts/bench_blas.py"
  echo "--- round $round: OpenBLAS ($OPENBLAS)"
  LD_PRELOAD="$OPENBLAS" "$PY" "$ROOT/scripts/bench_blas.py"
done
