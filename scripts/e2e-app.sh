#!/usr/bin/env bash
# End-to-end tests of the real desktop app (ui/tests/app/): the built kivi-chat on a virtual
# display, driven by WebDriver (tauri-driver + WebKitWebDriver), on a fresh data folder and
# hub cache. Screenshots land in artifacts/screenshots/app-*.png, logs in artifacts/.
#
#   scripts/e2e-app.sh            (after `cd ui && npm run build` and `cargo build -p kivi-chat`)
#
# KIVI_APP overrides the binary (default: $CARGO_TARGET_DIR or target, then debug/kivi-chat);
# KIVI_E2E_SPEC the test file (default tests/app/app.test.ts).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
APP=${KIVI_APP:-$TARGET/debug/kivi-chat}
[ -x "$APP" ] || { echo "e2e-app: $APP is not built (cd ui && npm run build; cargo build -p kivi-chat)" >&2; exit 1; }
command -v tauri-driver >/dev/null || { echo "e2e-app: tauri-driver is missing (cargo install tauri-driver --locked)" >&2; exit 1; }
command -v WebKitWebDriver >/dev/null || { echo "e2e-app: WebKitWebDriver is missing (apt-get install webkit2gtk-driver)" >&2; exit 1; }
[ -d ui/node_modules/webdriverio ] || (cd ui && npm ci)

mkdir -p artifacts/screenshots
work=$(mktemp -d)
# KIVI_E2E_BUILTIN=none: no built-in model, as an installed app without it starts (the
# package test adds the model through the app itself).
if [ "${KIVI_E2E_BUILTIN:-}" = none ]; then
  unset KIVI_MODEL
  export KIVI_TEST_PICK_MODEL=${KIVI_TEST_PICK_MODEL:-$ROOT/.data/models/SmolLM2-135M-Instruct.Q4_1.gguf}
else
  export KIVI_MODEL=${KIVI_MODEL:-$ROOT/.data/models/SmolLM2-135M-Instruct.Q4_1.gguf}
fi
export KIVI_DATA_DIR=$work/data HF_HOME=$work/huggingface
# WebDriver cannot reach the native open dialog: the app answers it with this file.
export KIVI_TEST_PICK_FILES=${KIVI_TEST_PICK_FILES:-$ROOT/.data/texts/moby-dick/chapter_107.txt}
# No session bus: the keychain reports "not available" at once instead of auto-launching one.
export DBUS_SESSION_BUS_ADDRESS=unix:path=/nonexistent NO_AT_BRIDGE=1

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=${TAURI_DRIVER_PORT:-$(free_port)}
native_port=$(free_port)
display=:$((100 + RANDOM % 100))

xvfb="" driver=""
cleanup() {
  # SIGTERM, never SIGKILL: tauri-driver then stops WebKitWebDriver, which would otherwise
  # keep its port and hang later runs.
  if [ -n "$driver" ]; then
    kill -TERM "$driver" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$driver" 2>/dev/null || break; sleep 0.1; done
  fi
  [ -n "$xvfb" ] && kill -TERM "$xvfb" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

Xvfb "$display" -screen 0 1400x900x24 -nolisten tcp >artifacts/e2e-xvfb.log 2>&1 &
xvfb=$!
export DISPLAY=$display
# WebKitGTK's GPU paths do not exist on a virtual display.
export WEBKIT_DISABLE_COMPOSITING_MODE=1 WEBKIT_DISABLE_DMABUF_RENDERER=1 LIBGL_ALWAYS_SOFTWARE=1
for _ in $(seq 1 50); do xwininfo -root >/dev/null 2>&1 && break; sleep 0.1; done

tauri-driver --port "$port" --native-port "$native_port" >artifacts/e2e-tauri-driver.log 2>&1 &
driver=$!
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$port/status" >/dev/null 2>&1 && break
  kill -0 "$driver" 2>/dev/null || { echo "e2e-app: tauri-driver exited:" >&2; cat artifacts/e2e-tauri-driver.log >&2; exit 1; }
  sleep 0.1
done

echo "e2e-app: $APP on $DISPLAY, tauri-driver on port $port, data in $work"
(cd ui && KIVI_APP="$APP" TAURI_DRIVER_PORT="$port" KIVI_SCREENSHOTS="$ROOT/artifacts/screenshots" \
  npx vitest run -c vitest.app.config.ts "${KIVI_E2E_SPEC:-tests/app/app.test.ts}")
