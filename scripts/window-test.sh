#!/usr/bin/env bash
# Starts the built desktop app on a virtual display, waits for its window, takes a
# screenshot (artifacts/screenshots/window.png) and fails if the window never appears or
# shows nothing.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
APP=${APP:-${CARGO_TARGET_DIR:-target}/debug/kivi-chat}
OUT=artifacts/screenshots
mkdir -p "$OUT"
[ -x "$APP" ] || { echo "window-test: $APP is not built (cargo build -p kivi-chat)" >&2; exit 1; }

display=:$((90 + RANDOM % 9))
Xvfb "$display" -screen 0 1400x900x24 -nolisten tcp >artifacts/xvfb.log 2>&1 &
xvfb=$!
app=""
cleanup() {
  [ -n "$app" ] && kill "$app" 2>/dev/null || true
  kill "$xvfb" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT
export DISPLAY=$display
# WebKitGTK's GPU paths do not exist on a virtual display.
export WEBKIT_DISABLE_COMPOSITING_MODE=1 WEBKIT_DISABLE_DMABUF_RENDERER=1 LIBGL_ALWAYS_SOFTWARE=1
export KIVI_DATA_DIR=${KIVI_DATA_DIR:-$(mktemp -d)}
sleep 1

"$APP" >artifacts/window-app.log 2>&1 &
app=$!

for _ in $(seq 1 120); do
  # Captured, then matched: under pipefail `xwininfo | grep -q` can fail on SIGPIPE.
  if grep -q '"KIVI Chat"' <<<"$(xwininfo -root -tree 2>/dev/null || true)"; then
    break
  fi
  kill -0 "$app" 2>/dev/null || { echo "window-test: the app exited early:" >&2; cat artifacts/window-app.log >&2; exit 1; }
  sleep 0.5
done
grep -q '"KIVI Chat"' <<<"$(xwininfo -root -tree 2>/dev/null || true)" || { echo "window-test: no KIVI Chat window after 60 s" >&2; cat artifacts/window-app.log >&2; exit 1; }

# Give the webview time to load and render the UI.
sleep "${WINDOW_SETTLE_SECONDS:-8}"
import -window root "$OUT/window.png"
# A window that rendered something has more than one colour.
colours=$(convert "$OUT/window.png" -format '%k' info:)
if [ "$colours" -lt 8 ]; then
  echo "window-test: the screenshot is blank ($colours colours)" >&2
  exit 1
fi
echo "window-test: KIVI Chat window opened; screenshot $OUT/window.png ($colours colours)"
