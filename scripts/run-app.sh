#!/usr/bin/env bash
# Starts the desktop app (the optimized build `make run` makes) on the offline default model.
# Without a display (a server, CI) it starts one with Xvfb, so the app still runs and can be
# screenshotted.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export KIVI_MODEL=${KIVI_MODEL:-$ROOT/.data/models/SmolLM2-135M-Instruct.Q4_1.gguf}
APP=${KIVI_APP:-target/release/kivi-chat}
[ -x "$APP" ] || { echo "run-app: $APP is not built (make run builds it)" >&2; exit 1; }
if [ -z "${DISPLAY:-}" ] && [ -z "${WAYLAND_DISPLAY:-}" ] && [ "$(uname -s)" = Linux ]; then
  echo "run-app: no display found; starting the app on a virtual display (Xvfb)." >&2
  echo "run-app: screenshot it with: DISPLAY=:89 import -window root shot.png" >&2
  export WEBKIT_DISABLE_COMPOSITING_MODE=1 WEBKIT_DISABLE_DMABUF_RENDERER=1
  exec xvfb-run -n 89 -s "-screen 0 1400x900x24" "$APP"
fi
exec "$APP"
