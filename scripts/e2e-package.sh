#!/usr/bin/env bash
# The installed package, end to end: builds the .deb (of the debug build, which the `app`
# stage has built: `scripts/bundle.sh --debug deb`), installs it with dpkg, starts the
# installed binary under Xvfb with a fresh data folder and no built-in model, adds the
# offline SmolLM2 GGUF through the app's own "Add model file" command, and gets a streamed
# answer (ui/tests/app/package.test.ts, WebDriver); the package is removed after.
# Linux, as root or with sudo.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo

scripts/bundle.sh --debug deb
# Every listing is captured before it is matched: under pipefail, `cmd | grep -q` (or
# `grep -m1`, `head`) fails at random when the matcher exits and the writer gets SIGPIPE.
debs=$(ls -t target/debug/bundle/deb/*.deb)
deb=${debs%%$'\n'*}
echo "e2e-package: installing $deb"
# A package left by an interrupted run goes first.
$sudo dpkg -r kivi-chat >/dev/null 2>&1 || true
$sudo dpkg -i "$deb"
trap '$sudo dpkg -r kivi-chat >/dev/null || true' EXIT
files=$(dpkg -L kivi-chat)
app=$(grep -m1 '^/usr/bin/' <<<"$files")
lib=$(grep -m1 '/usr/lib/kivi-chat/mlx/lib/libmlx.so' <<<"$files")
echo "e2e-package: installed $app; MLX from $lib"
# The installed binary loads the packaged MLX, not the checkout's.
libs=$(ldd "$app" 2>&1) || true  # what it printed is checked below
grep -Eq "libmlx.so => /usr/(bin/\.\./)?lib/kivi-chat/mlx/lib/libmlx.so" <<<"$libs" \
  || { echo "e2e-package: $app does not load the packaged libmlx.so:" >&2; echo "$libs" >&2; exit 1; }
KIVI_APP="$app" KIVI_E2E_SPEC=tests/app/package.test.ts KIVI_E2E_BUILTIN=none scripts/e2e-app.sh
