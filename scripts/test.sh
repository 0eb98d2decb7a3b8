#!/usr/bin/env bash
# Runs the test suite. `make test` runs every stage after set-up; a stage can be run alone:
#   scripts/test.sh [setup] [shell] [lint] [rust] [mac] [fuzz] [ui] [app] [package]
# Artifacts (screenshots, logs) land in artifacts/.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export KIVI_MODEL=${KIVI_MODEL:-$ROOT/.data/models/SmolLM2-135M-Instruct.Q4_1.gguf}
mkdir -p artifacts

# Clippy's lints run inside the test build: clippy-driver compiles the workspace's own crates
# (cargo hands it only those), rustc the dependencies, once. `cargo clippy` would check every
# dependency a second time, in check mode, before the build (271 s on a fresh target dir on
# 2 quiet cores). Every stage builds with the same wrapper, so none of them compiles the
# crates again.
export RUSTC_WORKSPACE_WRAPPER=clippy-driver
export CLIPPY_ARGS=-Dwarnings

stage() { printf '\n\033[1;35m==> %s\033[0m\n' "$*"; }

stage_setup() {
  stage "setup: a second run installs nothing"
  local log
  log=$(scripts/setup.sh 2>&1) || { echo "$log"; return 1; }
  echo "$log"
  if grep -q "installing:" <<<"$log"; then
    echo "setup is not idempotent: the second run installed something (above)" >&2
    return 1
  fi
}

stage_shell() {
  stage "shell: scripts/setup.sh's macOS branch on stand-in tools (scripts/tests/setup-macos.sh)"
  bash scripts/tests/setup-macos.sh
  # Under pipefail, `cmd | grep -q` (or `grep -m`, `head`) fails at random: the reader exits
  # early and the writer dies of SIGPIPE. Scripts capture a command's output, then match it.
  if grep -nE '^[^#]*\|[[:space:]]*(grep[[:space:]]+-[a-zA-Z]*[qm]|head)\b' scripts/*.sh scripts/tests/*.sh .ci/run; then
    echo "shell: the pipes above into an early-exiting reader can fail under pipefail" >&2
    return 1
  fi
}

stage_lint() {
  stage "lint: cargo fmt, import circles, clippy (every target, as the test build compiles)"
  cargo fmt --all -- --check
  python3 scripts/import_cycles.py kernels/src engine/src cli/src src-tauri/src
  # The app embeds ui/dist at compile time.
  [ -f ui/dist/index.html ] || (cd ui && npm run build)
  # Benches and examples too, as `cargo clippy --all-targets` would lint them.
  cargo test --workspace --all-targets --no-run
}

stage_rust() {
  stage "rust: unit, integration and model tests"
  [ -f ui/dist/index.html ] || (cd ui && npm run build)
  # KIVI_FUZZ_SEEDS: engine/tests/reliability_fuzz_seeds.rs also writes the fuzz corpus's
  # seeds from real files there, for the fuzz stage.
  KIVI_FUZZ_SEEDS="$ROOT/fuzz/corpus" cargo test --workspace --no-fail-fast
}

stage_mac() {
  stage "mac: the Mac's configuration (MLX's operations, float16 compute and storage) on the CPU"
  # The same tests scripts/gpu-check.sh runs on a GPU: the tiny models against mlx-lm,
  # SmolLM2 against the float32 host backend (mac_path.rs), the pipelined decode loop against
  # a step-by-step one (decode_loop.rs), and the KIVI cache against the
  # reference quantizer bit for bit with float16 storage. Debug builds: the GPU-stream
  # guard (engine/src/gpu_rules.rs) checks every array the model makes.
  # The rust stage's executables, run directly (scripts/test-executables.sh says why).
  local exes
  exes=$(scripts/test-executables.sh --workspace)
  mac_test() {
    local exe
    exe=$(awk -F'\t' -v name="$1" '$1 == name { print $2 }' <<<"$exes")
    [ -x "$exe" ] || { echo "mac: cargo built no test executable '$1'" >&2; return 1; }
    shift
    echo "mac: $(basename "$exe") $*"
    (cd engine && KIVI_BACKEND=mlx-cpu-f16 "$exe" "$@")
  }
  mac_test tiny_models
  mac_test mac_path
  mac_test decode_loop
  mac_test prompt_chunks every_setting window_and_global_layers
  mac_test kivi_engine the_quantized_history_is_the_reference_quantizer_bit_for_bit
}

stage_fuzz() {
  stage "fuzz: each fuzz target for 60 s (scripts/fuzz.sh 600 runs them longer)"
  # The fuzz targets' own workspace builds with instrumentation flags, not linted.
  env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS scripts/fuzz.sh "${KIVI_FUZZ_SECONDS:-60}"
}

stage_ui() {
  stage "ui: type check, unit tests, browser tests"
  (cd ui && npm run build && npm test && npm run test:browser)
}

stage_app() {
  stage "app: the desktop window under Xvfb, then the real app driven by WebDriver"
  (cd ui && npm run build)
  # The workspace's targets, not `-p kivi-chat`: cargo resolves dependency features for
  # the packages and targets it is asked for, and `-p kivi-chat` alone gave mlx-rs, the
  # engine and tauri other features than the rust stage's build, so all of them compiled
  # again (3 min 17 s); after the rust stage this builds the app's binary alone (38 s).
  cargo build --workspace --all-targets
  scripts/window-test.sh
  scripts/e2e-app.sh
}

stage_package() {
  stage "package: the .deb installed, started with no built-in model, a model added, an answer"
  scripts/e2e-package.sh
}

if [ $# -gt 0 ]; then
  stages=("$@")
elif [ "$(uname -s)" = Darwin ]; then
  # The app stage needs Xvfb and WebKitGTK's WebDriver: macOS has no WebDriver for WKWebView.
  stages=(setup shell lint rust mac fuzz ui)
  echo "test: macOS: the app stage (WebDriver end-to-end) runs on Linux only" >&2
else
  stages=(setup shell lint rust mac fuzz ui app package)
fi
# Each stage's wall time, printed at the end (and when a stage fails), so that a CI run says
# where its minutes went.
times=()
report_times() { [ ${#times[@]} -eq 0 ] || printf '\033[1;35m==> stage times:\033[0m %s\n' "${times[*]}"; }
trap report_times EXIT
for s in "${stages[@]}"; do
  started=$SECONDS
  case "$s" in
    setup) stage_setup ;;
    shell) stage_shell ;;
    lint) stage_lint ;;
    rust) stage_rust ;;
    mac) stage_mac ;;
    fuzz) stage_fuzz ;;
    ui) stage_ui ;;
    app) stage_app ;;
    package) stage_package ;;
    *) echo "unknown stage '$s' (setup shell lint rust mac fuzz ui app package)" >&2; exit 2 ;;
  esac
  times+=("$s $((SECONDS - started)) s")
done
stage "all requested stages passed: ${stages[*]}"
