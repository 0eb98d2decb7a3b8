#!/usr/bin/env bash
# Builds KIVI Chat's installers with the Tauri CLI (ui/node_modules/.bin/tauri):
#   Linux: a .deb and an AppImage (target/release/bundle/{deb,appimage}/)
#   macOS: KIVI Chat.app and a .dmg (target/release/bundle/{macos,dmg}/)
#
#   scripts/bundle.sh [--debug] [BUNDLES]   (BUNDLES: e.g. deb; default: every one above)
#
# `--debug` packs the debug build (the end-to-end test of the installed package uses it).
# On Linux MLX is the PyPI wheel's shared library: it and the libraries the wheel carries are
# staged into target/bundle-libs and installed to /usr/lib/kivi-chat, where the app's rpath
# looks first (scripts/build/mlx_link.rs). On macOS MLX is linked statically.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

profile=release flag=()
if [ "${1:-}" = --debug ]; then
  profile=debug flag=(--debug)
  shift
fi
tauri="$ROOT/ui/node_modules/.bin/tauri"
[ -x "$tauri" ] || { echo "bundle: the Tauri CLI is missing (scripts/setup.sh installs ui's npm packages)" >&2; exit 1; }
[ -f ui/dist/index.html ] || (cd ui && npm run build)

if [ "$(uname -s)" = Darwin ]; then
  (cd src-tauri && "$tauri" build "${flag[@]}" --bundles "${1:-app,dmg}")
  ls -l "target/$profile/bundle/macos" "target/$profile/bundle/dmg"
  exit 0
fi

# Stage MLX's shared library with the wheel's own layout: libmlx.so finds its BLAS and
# LAPACK through the rpath $ORIGIN/../../mlx_cpu.libs.
site=$(.venv/bin/python -c 'import mlx, os; print(os.path.dirname(list(mlx.__path__)[0]))')
stage="$ROOT/target/bundle-libs"
rm -rf "$stage"
mkdir -p "$stage/mlx/lib" "$stage/mlx_cpu.libs"
cp "$site/mlx/lib/libmlx.so" "$stage/mlx/lib/"
cp "$site"/mlx_cpu.libs/*.so* "$stage/mlx_cpu.libs/"

if [ "$profile" = debug ]; then
  # The debug package is the test stages' build: the workspace's targets, as the app stage
  # builds them (`tauri build` would build kivi-chat alone, whose dependency features differ,
  # and compile tokio, tauri, mlx-rs and the engine again), then `tauri bundle` packs it.
  cargo build --workspace --all-targets
  build() { (cd src-tauri && "$tauri" bundle --debug --bundles "$1"); }
else
  build() { (cd src-tauri && "$tauri" build --bundles "$1"); }
fi
if [ $# -gt 0 ]; then
  build "$1"
else
  build deb
  # The AppImage tools (linuxdeploy and its plugins) are downloaded from GitHub by the CLI
  # on first use; without that network the .deb is still made.
  build appimage || echo "bundle: the AppImage was not made (the Tauri CLI could not fetch its AppImage tools; see above)" >&2
fi
ls -l "target/$profile/bundle"/*/ 2>/dev/null
