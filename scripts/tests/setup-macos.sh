#!/usr/bin/env bash
# Runs scripts/setup.sh's macOS branch on any machine: `uname` says Darwin, and every tool
# the branch touches (xcrun, cmake, node, npm, cargo, rustc, python3, pip, brew, apt-get...)
# is a small stand-in that logs its calls. No Mac runs the test suite, and a broken check
# there would otherwise be found by a new Mac user.
#
# Works on copies in a temporary folder (setup.sh, its requirements files, the mlx-sys
# overlay, ui/package*.json, Makefile, run-app.sh) with its own HOME and CARGO_HOME, so the
# repository's .venv, .deps, .data, ui/node_modules and ~/.cargo are never touched. PATH holds
# only the stand-ins and links to basic utilities, so the machine's own cmake, node or
# python cannot answer for a missing one. Bash 3.2 compatible: on a Mac it runs under
# macOS's bash, as setup.sh does there.
#
#   scripts/tests/setup-macos.sh        one PASS/FAIL line per case; exits 1 on any FAIL
set -euo pipefail

REAL_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/kivi-setup-macos.XXXXXX")
trap 'chmod -R u+w "$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT

failures=0
pass() { printf 'PASS  %s\n' "$1"; }
skip() { printf 'SKIP  %s\n' "$1"; }

# --- basic utilities, nothing else -------------------------------------------------------
CORE=$WORK/core
mkdir -p "$CORE"
for tool in bash sh env dirname basename cat cmp cp cut chmod find sort xargs mkdir touch \
  rm mv mktemp grep sed tar head tail tr id ls wc gzip make; do
  path=$(command -v "$tool" 2>/dev/null || true)
  case "$path" in /*) ln -s "$path" "$CORE/$tool" ;; esac
done
[ -x "$CORE/bash" ] || { echo "setup-macos: bash not found" >&2; exit 2; }
# The real hash tool for the `shasum` stand-in. sha256sum itself stays off PATH: the Mac
# branch must work with shasum alone.
if command -v sha256sum >/dev/null 2>&1; then REAL_SHA=$(command -v sha256sum)
else REAL_SHA="$(command -v shasum) -a 256"; fi

# --- a minimal mlx-sys 0.7.0 as cargo would unpack it ------------------------------------
# The lines that matter are upstream's own (mlx-sys 0.7.0 build.rs); the `real build.rs`
# case below checks them against the real crate when cargo has fetched it.
CRATE=$WORK/crate/mlx-sys-0.7.0
mkdir -p "$CRATE/src"
cat >"$CRATE/Cargo.toml" <<'EOF'
[package]
name = "mlx-sys"
version = "0.7.0"
links = "mlx"
EOF
cat >"$CRATE/build.rs" <<'EOF'
fn build_and_link_mlx_c() {
    let mlx_c_root = Path::new("src/mlx-c");
    let mut config = Config::new(mlx_c_root);

    #[cfg(debug_assertions)]
    {
        config.define("CMAKE_BUILD_TYPE", "Debug");
    }

    #[cfg(not(debug_assertions))]
    {
        config.define("CMAKE_BUILD_TYPE", "Release");
    }
}
EOF
echo "// bindings" >"$CRATE/src/lib.rs"
# The registry's files are read-only, as cargo unpacks them.
chmod -R a-w "$CRATE"

# --- stand-ins ---------------------------------------------------------------------------
TEMPLATES=$WORK/templates
mkdir -p "$TEMPLATES"
# python3 is macOS's own 3.9 unless FAKE_PY says otherwise; python3.X is version 3.X.
# `-m venv DIR` makes DIR/bin/python and DIR/bin/pip stand-ins of the same version.
cat >"$TEMPLATES/python" <<'EOF'
#!/bin/sh
name=$(basename "$0")
version=${name#python}
[ "$name" = python3 ] && version=${FAKE_PY:-3.9}
echo "$name $*" >>"$FAKE_LOG"
case "$1" in
  -c) echo "$version ${FAKE_PY_ARCH:-arm64}" ;;
  -m) [ "$2" = venv ] || exit 1
      mkdir -p "$3/bin"
      echo "$version" >"$3/bin/.version"
      cp "$FAKE_TEMPLATES/venv-python" "$3/bin/python"
      cp "$FAKE_TEMPLATES/venv-pip" "$3/bin/pip"
      chmod +x "$3/bin/python" "$3/bin/pip" ;;
  *) echo "python stand-in: unexpected: $*" >&2; exit 1 ;;
esac
EOF
cat >"$TEMPLATES/venv-python" <<'EOF'
#!/bin/sh
venv=$(cd "$(dirname "$0")/.." && pwd)
echo "venv-python $*" >>"$FAKE_LOG"
case "$1" in
  -c) echo "$(cat "$venv/bin/.version") arm64" ;;
  # setup.sh's pin check: the script on stdin, the requirements file as its argument.
  -) cat >/dev/null
     cmp -s "$2" "$venv/.fake-installed" || { echo "not as pinned (stand-in)" >&2; exit 1; } ;;
  *) echo "venv python stand-in: unexpected: $*" >&2; exit 1 ;;
esac
EOF
cat >"$TEMPLATES/venv-pip" <<'EOF'
#!/bin/sh
venv=$(cd "$(dirname "$0")/.." && pwd)
echo "pip $*" >>"$FAKE_LOG"
[ "$1" = install ] || { echo "pip stand-in: unexpected: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  [ "$1" = -r ] && cp "$2" "$venv/.fake-installed"
  shift
done
exit 0
EOF
cat >"$TEMPLATES/uname" <<'EOF'
#!/bin/sh
case "$1" in -m) echo "${FAKE_ARCH:-arm64}" ;; *) echo "${FAKE_OS:-Darwin}" ;; esac
EOF
cat >"$TEMPLATES/sw_vers" <<'EOF'
#!/bin/sh
echo "${FAKE_MACOS:-14.5}"
EOF
cat >"$TEMPLATES/xcrun" <<'EOF'
#!/bin/sh
echo "xcrun $*" >>"$FAKE_LOG"
if [ "${FAKE_METAL:-1}" = 1 ]; then echo "Apple metal version 32023.155"; exit 0; fi
echo 'xcrun: error: unable to find utility "metal", not a developer tool or in PATH' >&2
exit 72
EOF
cat >"$TEMPLATES/cmake" <<'EOF'
#!/bin/sh
echo "cmake version 3.31.6"
EOF
cat >"$TEMPLATES/node" <<'EOF'
#!/bin/sh
echo "v${FAKE_NODE:-22.11.0}"
EOF
cat >"$TEMPLATES/npm" <<'EOF'
#!/bin/sh
echo "npm $* (in $(pwd))" >>"$FAKE_LOG"
case "$1" in
  --version) echo 10.9.0 ;;
  ci) mkdir -p node_modules ;;
  *) echo "npm stand-in: unexpected: $*" >&2; exit 1 ;;
esac
EOF
cat >"$TEMPLATES/rustc" <<'EOF'
#!/bin/sh
echo "rustc ${FAKE_RUST:-1.90.0} (1159e78c4 2025-09-14)"
EOF
# `cargo fetch` unpacks FAKE_CRATE where cargo would put mlx-sys; `cargo install cargo-fuzz`
# makes `cargo fuzz --version` answer.
cat >"$TEMPLATES/cargo" <<'EOF'
#!/bin/sh
echo "cargo $*" >>"$FAKE_LOG"
case "$1" in
  --version) echo "cargo ${FAKE_RUST:-1.90.0} (840b83a10 2025-07-30)" ;;
  fuzz) [ -f "$CARGO_HOME/.fake-cargo-fuzz" ] || { echo "error: no such command: fuzz" >&2; exit 101; }
        echo "cargo-fuzz 0.13.2" ;;
  install) case " $* " in *" cargo-fuzz "*) touch "$CARGO_HOME/.fake-cargo-fuzz" ;; esac ;;
  fetch) mkdir -p "$CARGO_HOME/registry/src/index.crates.io-x"
         cp -R "$FAKE_CRATE" "$CARGO_HOME/registry/src/index.crates.io-x/mlx-sys-0.7.0" ;;
  *) echo "cargo stand-in: unexpected: $*" >&2; exit 1 ;;
esac
EOF
cat >"$TEMPLATES/shasum" <<EOF
#!/bin/sh
echo "shasum \$*" >>"\$FAKE_LOG"
[ "\$1 \$2" = "-a 256" ] || { echo "shasum stand-in: expected -a 256, got \$*" >&2; exit 2; }
shift 2
exec $REAL_SHA "\$@"
EOF
# Installers and Linux tools that the macOS branch must never call.
for tool in brew apt-get apt dpkg-query sudo xvfb-run; do
  printf '#!/bin/sh\necho "%s $*" >>"$FAKE_LOG"\nexit 1\n' "$tool" >"$TEMPLATES/$tool"
done
cp "$TEMPLATES/python" "$TEMPLATES/python3"
cp "$TEMPLATES/python" "$TEMPLATES/python3.12"
STANDINS="uname sw_vers xcrun cmake node npm rustc cargo python3 python3.12 shasum brew apt-get apt dpkg-query sudo xvfb-run"

# --- one case = one fresh copy of the repository's set-up files ---------------------------
# new_case NAME [STAND-IN-TO-LEAVE-OUT...]: makes the case's folder, sets DIR to it.
new_case() {
  DIR=$WORK/$1
  shift
  local omit=" $* " f tool
  mkdir -p "$DIR/root/scripts" "$DIR/root/ui" "$DIR/home" "$DIR/cargo" "$DIR/tmp" "$DIR/bin"
  for f in scripts/setup.sh scripts/run-app.sh scripts/requirements.txt \
    scripts/requirements-macos.txt ui/package.json ui/package-lock.json Makefile; do
    cp "$REAL_ROOT/$f" "$DIR/root/$f"
  done
  cp -R "$REAL_ROOT/scripts/mlx-sys" "$DIR/root/scripts/mlx-sys"
  : >"$DIR/calls.log"
  for tool in $STANDINS; do
    case "$omit" in *" $tool "*) continue ;; esac
    cp "$TEMPLATES/$tool" "$DIR/bin/$tool"
    chmod +x "$DIR/bin/$tool"
  done
}

# run_in "VAR=value ..." COMMAND...: runs in $DIR/root; sets OUT (stdout and stderr) and RC.
# Nothing of this shell's environment leaks in (a caller's PYTHON or CARGO_HOME, say).
run_in() {
  local knobs=$1
  shift
  set +e
  # shellcheck disable=SC2086 # knobs: space-separated VAR=value words
  OUT=$(cd "$DIR/root" && env -i PATH="$DIR/bin:$CORE" HOME="$DIR/home" CARGO_HOME="$DIR/cargo" \
    TMPDIR="$DIR/tmp" FAKE_LOG="$DIR/calls.log" FAKE_TEMPLATES="$TEMPLATES" FAKE_CRATE="$CRATE" \
    $knobs "$@" 2>&1)
  RC=$?
  set -e
}
setup_in() {
  local knobs=$1
  shift
  run_in "$knobs" "$CORE/bash" "$DIR/root/scripts/setup.sh" "$@"
}

# Failed checks of the current case, one per line.
WHY=""
check() {
  local reason=$1
  shift
  "$@" || WHY="$WHY$reason
"
}
has() { grep -qF -- "$2" <<<"$1"; }
lacks() { ! grep -qF -- "$2" <<<"$1"; }
installs() {
  grep -E '^(pip |brew |apt|dpkg-query |sudo |npm ci|cargo install|cargo fetch|python3[.0-9]* -m venv)' \
    "$DIR/calls.log" || true
}
nothing_installed() {
  local calls
  calls=$(installs)
  check "nothing should have been installed, but: $(tr '\n' ';' <<<"$calls")" test -z "$calls"
  check "no .venv should exist" test ! -e "$DIR/root/.venv"
  check "no .deps/mlx-sys should exist" test ! -e "$DIR/root/.deps/mlx-sys"
}
verdict() {
  if [ -z "$WHY" ]; then
    pass "$1"
  else
    printf 'FAIL  %s\n' "$1"
    printf '%s' "$WHY" | sed 's/^/      - /'
    printf '%s\n' "$OUT" | sed 's/^/      | /'
    failures=$((failures + 1))
  fi
  WHY=""
}

# --- cases -------------------------------------------------------------------------------
STEPS="apt venv mlx-sys tools"

new_case missing-tools cmake
setup_in "FAKE_METAL=0 FAKE_NODE=18.19.0 FAKE_RUST=1.80.1" $STEPS
check "exit status should be non-zero, was $RC" test "$RC" -ne 0
check "names the Metal toolchain" has "$OUT" "Metal toolchain"
check "gives xcodebuild -downloadComponent MetalToolchain" has "$OUT" "xcodebuild -downloadComponent MetalToolchain"
check "gives xcode-select -s /Applications/Xcode.app" has "$OUT" "xcode-select -s /Applications/Xcode.app"
check "names cmake with brew install cmake" has "$OUT" "brew install cmake"
check "names Node 20 with brew install node" has "$OUT" "brew install node"
check "names Rust 1.89 with rustup update" has "$OUT" "Rust 1.89 or newer (found 1.80.1)"
check "one error message for everything" test "$(grep -c 'error:' <<<"$OUT")" = 1
check "Python 3.12 on PATH is good enough, not named" lacks "$OUT" "Python 3.11 to"
check "no apt-get or dpkg-query" test -z "$(grep -E '^(apt|dpkg-query)' "$DIR/calls.log" || true)"
nothing_installed
verdict "missing Metal toolchain, cmake, old Node and Rust: one message naming each fix, nothing installed"

new_case no-rust cargo rustc
setup_in "" $STEPS
check "exit status should be non-zero, was $RC" test "$RC" -ne 0
check "points at rustup.rs" has "$OUT" "https://rustup.rs"
nothing_installed
verdict "no Rust: points at rustup.rs"

new_case intel
setup_in "FAKE_ARCH=x86_64" $STEPS
check "exit status should be non-zero, was $RC" test "$RC" -ne 0
check "says Intel Macs are not supported" has "$OUT" "Intel Macs are not supported"
check "says Apple silicon is needed" has "$OUT" "Apple silicon"
nothing_installed
check "stops before any check" test ! -s "$DIR/calls.log"
verdict "Intel Mac: refused before anything runs"

new_case python-3.9 python3.12
setup_in "FAKE_PY=3.9" $STEPS
check "exit status should be non-zero, was $RC" test "$RC" -ne 0
check "names the Python versions needed" has "$OUT" "Python 3.11 to 3.14"
check "names what it found" has "$OUT" "python3 is Python 3.9 arm64"
check "says brew install python@3.12" has "$OUT" "brew install python@3.12"
check "says how to point set-up at it (PYTHON=)" has "$OUT" "PYTHON=/opt/homebrew/bin/python3.12"
nothing_installed
setup_in "FAKE_PY=3.9" venv
check "the venv step alone refuses too (exit $RC)" test "$RC" -ne 0
check "the venv step names the Python versions" has "$OUT" "Python 3.11 to 3.14"
nothing_installed
verdict "only Python 3.9: refused, naming Python 3.11 to 3.14 and brew install python@3.12"

new_case python-variable python3.12
mkdir -p "$DIR/brew-python"
cp "$TEMPLATES/python" "$DIR/brew-python/python3.13"
chmod +x "$DIR/brew-python/python3.13"
setup_in "FAKE_PY=3.9 PYTHON=$DIR/brew-python/python3.13" apt venv
check "exit status should be 0, was $RC" test "$RC" -eq 0
check "made .venv with \$PYTHON" grep -q "^python3.13 -m venv" "$DIR/calls.log"
check "never made .venv with python3 3.9" test -z "$(grep '^python3 -m venv' "$DIR/calls.log" || true)"
verdict "PYTHON=/path/to/python3.13 is used for .venv"

new_case ready
texts=""
if [ -f "$REAL_ROOT/.data/texts/moby-dick.txt" ] && [ -d "$REAL_ROOT/.data/texts/sotu" ]; then
  # The data step's sha256 check, on the real text (read, copied into the case's .data).
  mkdir -p "$DIR/root/.data/models" "$DIR/root/.data/texts/moby-dick" "$DIR/root/.data/texts/sotu"
  cp "$REAL_ROOT/.data/texts/moby-dick.txt" "$DIR/root/.data/texts/"
  : >"$DIR/root/.data/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  : >"$DIR/root/.data/models/.verified"
  : >"$DIR/root/.data/models/Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf"
  : >"$DIR/root/.data/models/.verified-Qwen2.5-Coder-0.5B-Instruct-Q4_K_M.gguf"
  : >"$DIR/root/.data/models/gemma-3-270m-Q4_K_M.gguf"
  : >"$DIR/root/.data/models/.verified-gemma-3-270m-Q4_K_M.gguf"
  texts=data
fi
setup_in "" apt venv mlx-sys $texts ui tools
first=$OUT
check "exit status should be 0, was $RC" test "$RC" -eq 0
check "never calls apt-get, dpkg-query, brew or sudo" \
  test -z "$(grep -E '^(apt|dpkg-query|brew|sudo)' "$DIR/calls.log" || true)"
check "pip installs scripts/requirements-macos.txt" \
  grep -q "^pip install .*-r $DIR/root/scripts/requirements-macos.txt" "$DIR/calls.log"
check "pip never sees requirements.txt" test -z "$(grep 'scripts/requirements.txt' "$DIR/calls.log" || true)"
check "pip never installs mlx[cpu]" test -z "$(grep -F 'mlx[cpu]' "$DIR/calls.log" || true)"
check "requirements-macos.txt has no mlx[cpu]" test -z "$(grep -F 'mlx[cpu]' "$DIR/root/scripts/requirements-macos.txt" || true)"
check ".venv made with python3.12 (found on PATH), not macOS's python3 3.9" \
  grep -q "^python3.12 -m venv $DIR/root/.venv" "$DIR/calls.log"
check "fetches mlx-sys when cargo's registry is empty" grep -q "^cargo fetch" "$DIR/calls.log"
BUILD_RS=$DIR/root/.deps/mlx-sys/build.rs
check "build.rs builds MLX Release in debug builds too" \
  test "$(grep -c 'config.define("CMAKE_BUILD_TYPE", "Release");' "$BUILD_RS" 2>/dev/null)" = 2
check "build.rs has no Debug build type left" lacks "$(cat "$BUILD_RS" 2>/dev/null || echo '"Debug"')" '"Debug"'
check "build.rs otherwise upstream's" \
  test "$(diff "$CRATE/build.rs" "$BUILD_RS" 2>/dev/null | grep -c '^[<>]')" = 2
check "no Linux overlay: include/" test ! -e "$DIR/root/.deps/mlx-sys/include"
check "no Linux overlay: src/mach_time.c" test ! -e "$DIR/root/.deps/mlx-sys/src/mach_time.c"
check "the stamp is macOS's" grep -qs "^Darwin 0.7.0 " "$DIR/root/.deps/mlx-sys/.kivi-overlay"
check "tauri-driver skipped, saying the WebDriver test runs on Linux" \
  has "$OUT" "tauri-driver skipped: it has no macOS support (there is no WebDriver for WKWebView); the app's WebDriver end-to-end test runs on Linux"
check "tauri-driver not installed" test -z "$(grep 'cargo install.*tauri-driver' "$DIR/calls.log" || true)"
check "cargo-fuzz installed" grep -q "^cargo install .*cargo-fuzz" "$DIR/calls.log"
check "ui: npm ci in ui/" grep -q "^npm ci .*(in $DIR/root/ui)" "$DIR/calls.log"
check "hashes with shasum -a 256 (no sha256sum on a Mac)" grep -q "^shasum -a 256" "$DIR/calls.log"
[ -z "$texts" ] || check "data: model and texts found, sha256 checked with shasum" \
  has "$OUT" "ok: texts: Moby-Dick and State of the Union present"
installed_before=$(installs | wc -l)
setup_in "" apt venv mlx-sys $texts ui tools
check "second run: exit status should be 0, was $RC" test "$RC" -eq 0
check "second run: no installing: line" lacks "$OUT" "installing:"
check "second run: only ok: lines" test -z "$(grep -v 'ok:' <<<"$OUT" || true)"
check "second run: installs nothing" test "$(installs | wc -l)" = "$installed_before"
OUT="first run:
$first
second run:
$OUT"
verdict "everything present: installs the macOS set, Release MLX, no apt, no tauri-driver; second run only ok:"
[ -n "$texts" ] || skip "data step (no .data/texts in the repository yet: run scripts/setup.sh first)"

new_case upstream-changed
mkdir -p "$DIR/crate"
cp -R "$CRATE" "$DIR/crate/mlx-sys-0.7.0"
chmod -R u+w "$DIR/crate"
sed 's/"Debug"/"RelWithDebInfo"/' "$CRATE/build.rs" >"$DIR/crate/mlx-sys-0.7.0/build.rs"
mkdir -p "$DIR/cargo/registry/src/index.crates.io-x"
cp -R "$DIR/crate/mlx-sys-0.7.0" "$DIR/cargo/registry/src/index.crates.io-x/"
setup_in "" mlx-sys
check "exit status should be non-zero, was $RC" test "$RC" -ne 0
check "names the build.rs line it looks for" has "$OUT" 'config.define("CMAKE_BUILD_TYPE", "Debug");'
check "leaves no .deps/mlx-sys" test ! -e "$DIR/root/.deps/mlx-sys"
check "leaves no half-made copy" test ! -e "$DIR/root/.deps/mlx-sys.tmp"
verdict "an mlx-sys whose build.rs lacks the Debug line: set-up stops, saying so"

found=("${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/mlx-sys-0.7.0/build.rs)
REAL_BUILD_RS=${found[0]}
if [ -e "$REAL_BUILD_RS" ]; then
  OUT=$(grep -n 'CMAKE_BUILD_TYPE' "$REAL_BUILD_RS" || true)
  check "the real build.rs has the Debug line once" \
    test "$(grep -cF 'config.define("CMAKE_BUILD_TYPE", "Debug");' "$REAL_BUILD_RS")" = 1
  check "the real build.rs has the Release line once" \
    test "$(grep -cF 'config.define("CMAKE_BUILD_TYPE", "Release");' "$REAL_BUILD_RS")" = 1
  verdict "the stand-in crate's lines are the real mlx-sys 0.7.0 build.rs's ($REAL_BUILD_RS)"
else
  skip "real mlx-sys 0.7.0 build.rs (cargo has not fetched it here)"
fi

new_case make-run
if [ -x "$CORE/make" ]; then
  run_in "" make -n run
  check "make run on a Mac builds the release app" has "$OUT" "cargo build --release -p kivi-chat"
  check "make run on a Mac builds no debug app" lacks "$OUT" "cargo build -p kivi-chat"
  mac=$OUT
  run_in "FAKE_OS=Linux" make -n run
  check "make run on Linux builds the release app too" has "$OUT" "cargo build --release -p kivi-chat"
  check "make run on Linux builds no debug app" lacks "$OUT" "cargo build -p kivi-chat"
  OUT="$mac
$OUT"
fi
mkdir -p "$DIR/root/target/release"
printf '#!/bin/sh\necho "release app, model $KIVI_MODEL"\n' >"$DIR/root/target/release/kivi-chat"
chmod +x "$DIR/root/target/release/kivi-chat"
run_in "" "$CORE/bash" scripts/run-app.sh
check "run-app.sh starts target/release/kivi-chat (exit $RC)" has "$OUT" "release app, model $DIR/root/.data/models/"
check "run-app.sh uses no Xvfb on a Mac" test -z "$(grep '^xvfb-run' "$DIR/calls.log" || true)"
verdict "make run / run-app.sh on a Mac: the release build, no Xvfb"

if [ "$failures" -gt 0 ]; then
  echo "setup-macos: $failures case(s) failed"
  exit 1
fi
echo "setup-macos: all cases passed"
