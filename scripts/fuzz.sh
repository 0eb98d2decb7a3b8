#!/usr/bin/env bash
# Runs each fuzz target (fuzz/fuzz_targets) for a bounded time:
#   scripts/fuzz.sh [seconds per target, default 60] [target ...]
# CI runs `scripts/fuzz.sh 60`; run it longer on demand (`scripts/fuzz.sh 600`).
#
# Seeds come from real files (the offline model's GGUF header, cache files saved from real
# caches), written into fuzz/corpus/<target>/ by an engine test; the corpus grows there
# between runs and is git-ignored, as are the crash inputs in fuzz/artifacts/<target>/.
# A crash fails the script and prints the command that reproduces it; turn each into a
# regression test with the input as bytes.
#
# cargo fuzz needs nightly compiler flags: on the stable toolchain RUSTC_BOOTSTRAP=1
# allows them. No sanitizer: the fuzzed code is safe Rust, built with debug assertions and
# overflow checks (cargo fuzz's default), and MLX's library is not instrumented anyway.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(gguf_metadata cache_file prompt_chunks)

# The test suite's rust stage writes the seeds too (it sets KIVI_FUZZ_SEEDS), which spares
# this script a build of the engine's tests with another feature set.
if [ -n "$(ls -A fuzz/corpus/gguf_metadata 2>/dev/null)" ] && [ -n "$(ls -A fuzz/corpus/cache_file 2>/dev/null)" ]; then
  echo "==> seeds: fuzz/corpus is already seeded"
else
  echo "==> seeds from real files"
  KIVI_FUZZ_SEEDS="$ROOT/fuzz/corpus" cargo test -p kivi-engine --test reliability_fuzz_seeds -q >/dev/null
fi

export RUSTC_BOOTSTRAP=1
# The fuzz crate is its own workspace with its own target dir (fuzz/target).
unset CARGO_TARGET_DIR
echo "==> building the fuzz targets"
cargo fuzz build -s none

# The targets run side by side: libFuzzer runs one process on one core, and a machine
# with more than one would otherwise sit idle for all but the first target's time.
declare -A logs pids
for target in "${TARGETS[@]}"; do
  echo "==> fuzzing $target for ${SECONDS_PER_TARGET}s"
  mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
  logs[$target]=$(mktemp)
  cargo fuzz run -s none "$target" "fuzz/corpus/$target" -- \
    -max_total_time="$SECONDS_PER_TARGET" -timeout=20 -rss_limit_mb=4096 \
    -print_final_stats=1 >"${logs[$target]}" 2>&1 &
  pids[$target]=$!
done

status=0
summary=()
for target in "${TARGETS[@]}"; do
  wait "${pids[$target]}" || true
  log=${logs[$target]}
  echo "==> $target"
  grep -E "^#[0-9]+.*(pulse|DONE)|ERROR|panicked|SUMMARY" "$log" || true
  if grep -q "^Done [0-9]* runs" "$log" && ! grep -qE "^==[0-9]+== ERROR|deadly signal|panicked at" "$log"; then
    runs=$(grep -o "^Done [0-9]* runs in [0-9]* second" "$log" | tail -1)
    summary+=("$target: ok, $runs(s), corpus $(ls "fuzz/corpus/$target" | wc -l) inputs")
  else
    status=1
    summary+=("$target: FAILED (see fuzz/artifacts/$target/; reproduce with: RUSTC_BOOTSTRAP=1 cargo fuzz run -s none $target <crash file>)")
    tail -40 "$log"
  fi
  rm -f "$log"
done

echo "==> fuzzing summary"
printf '  %s\n' "${summary[@]}"
exit $status
