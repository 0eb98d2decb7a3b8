#!/usr/bin/env bash
# kivi against llama.cpp on the same GGUF file, the same contexts and the same threads:
# decode and prefill speed (llama.cpp's float16 cache and its q4_0 value cache against the
# engine's full, K4V4 and K2V2 caches), then perplexity on llama.cpp's own protocol
# (2048-token windows, the second half scored, 512-token batches) for llama.cpp's f16, q8_0
# and q4_0 caches against KIVI K4V4, K4V2 and K2V2; last, the GGUF types: the model's F16
# copy quantized by llama-quantize (Q8_0, Q6_K, Q5_K_M, Q4_K_M, Q3_K_M, Q2_K), each file's
# perplexity in both engines with full-precision caches. On demand, not in CI.
#
#   scripts/compare-llama-cpp.sh          # defaults below; override with the variables
#   CONTEXTS=512,4k REPEATS=1 WINDOWS=0 scripts/compare-llama-cpp.sh
#
# llama.cpp comes from the PyPI sdist of llama-cpp-python (its vendored llama.cpp), built
# with cmake into .deps/llama.cpp (once; about 15 minutes on 2 cores). Both engines run in
# rounds, in alternating order, each measurement in its own process; the report gives
# medians and per-round ratios (scripts/compare_llama_cpp.py). Needs the project's .venv
# and a release build of kivi (built, or brought up to date, unless KIVI_BIN names one).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
MODEL="${KIVI_MODEL:-$ROOT/.data/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
TEXT="${TEXT:-$ROOT/.data/texts/moby-dick.txt}"
OUT="${OUT:-$ROOT/target/compare-llama-cpp}"
CONTEXTS="${CONTEXTS:-512,4k,8k}"
REPEATS="${REPEATS:-2}"
DECODE_TOKENS="${DECODE_TOKENS:-32}"
WINDOWS="${WINDOWS:-6}"
TYPES="${TYPES-Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q3_K_M,Q2_K}"
TYPE_WINDOWS="${TYPE_WINDOWS:-2}"
THREADS="${THREADS:-$(nproc)}"
CONFIGS="${CONFIGS:-full,k4v4-g32-r128,k2v2-g32-r128}"
PPL_CONFIGS="${PPL_CONFIGS:-full,k4v4-g32-r128,k4v2-g32-r128,k2v2-g32-r128,k4v2-g32-r128-s4-rot,k2v2-g32-r128-s4-rot}"
LLAMA_VERSION=0.3.36
DEPS="$ROOT/.deps/llama.cpp"
TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target}"
KIVI_BIN_GIVEN="${KIVI_BIN:-}"
KIVI_BIN="${KIVI_BIN:-$TARGET_DIR/release/kivi}"

[ -x "$PY" ] || { echo "no $PY: run scripts/setup.sh first" >&2; exit 1; }
[ -f "$MODEL" ] || { echo "no model at $MODEL: run scripts/setup.sh data" >&2; exit 1; }
[ -f "$TEXT" ] || { echo "no text at $TEXT: run scripts/setup.sh data" >&2; exit 1; }

# The CPU features llama.cpp is built for. On x86 they are named one by one from
# /proc/cpuinfo instead of GGML_NATIVE (-march=native), which would also turn on AMX:
# llama-bench's AMX int8 path (ggml_backend_amx_mul_mat) crashed as soon as a depth was
# given (`-d 512`) on a Xeon with AMX, and `--repack 0`, which avoids it, also takes away the
# repacked weights that every other CPU runs. Elsewhere (Apple silicon) GGML_NATIVE.
cpu_options() {
    if [ "$(uname -m)" != x86_64 ] || [ ! -r /proc/cpuinfo ]; then
        echo -DGGML_NATIVE=ON
        return
    fi
    local flags option feature
    flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
    echo -DGGML_NATIVE=OFF
    for option in AVX:avx AVX2:avx2 FMA:fma F16C:f16c BMI2:bmi2 AVX_VNNI:avx_vnni \
        AVX512:avx512f AVX512_VBMI:avx512vbmi AVX512_VNNI:avx512_vnni AVX512_BF16:avx512_bf16; do
        feature=${option#*:}
        if [[ "$flags" == *" $feature "* ]]; then
            echo "-DGGML_${option%%:*}=ON"
        else
            echo "-DGGML_${option%%:*}=OFF"
        fi
    done
}

# llama.cpp's tools, built once from the sdist's vendored source (again when the CPU
# options change).
build_llama_cpp() {
    local bin="$DEPS/build/bin" options
    options=$(cpu_options | tr '\n' ' ')
    if [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-perplexity" ] && [ -x "$bin/llama-quantize" ] \
        && [ -x "$bin/llama-tokenize" ] && [ "$(cat "$DEPS/build/cpu-options" 2>/dev/null)" = "$options" ]; then
        return
    fi
    mkdir -p "$DEPS"
    if [ ! -f "$DEPS/src/CMakeLists.txt" ]; then
        local tmp
        tmp=$(mktemp -d)
        "$PY" -m pip download --quiet --no-deps --no-binary :all: \
            "llama-cpp-python==$LLAMA_VERSION" -d "$tmp"
        tar xzf "$tmp"/llama_cpp_python-"$LLAMA_VERSION".tar.gz -C "$tmp"
        rm -rf "$DEPS/src"
        mv "$tmp/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp" "$DEPS/src"
        rm -rf "$tmp"
    fi
    # shellcheck disable=SC2086 # one option per word
    cmake -S "$DEPS/src" -B "$DEPS/build" -DCMAKE_BUILD_TYPE=Release $options \
        -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF >/dev/null
    cmake --build "$DEPS/build" -j "$(nproc)" \
        --target llama-bench llama-perplexity llama-quantize llama-tokenize
    echo "$options" >"$DEPS/build/cpu-options"
    echo "llama.cpp built with: $options"
}

build_llama_cpp
if [ "${BUILD_ONLY:-0}" = 1 ]; then
    exit 0
fi
# The checkout's kivi, rebuilt where the sources changed (cargo does nothing otherwise);
# a KIVI_BIN given is taken as it is.
if [ -z "${KIVI_BIN_GIVEN:-}" ]; then
    (cd "$ROOT" && cargo build --release -p kivi-cli)
fi
[ -x "$KIVI_BIN" ] || { echo "no kivi binary at $KIVI_BIN" >&2; exit 1; }
mkdir -p "$OUT"
LLAMA="$DEPS/build/bin"

# Contexts as token counts (512, 4k = 4096).
tokens_of() {
    local c=$1
    case "$c" in
        *k) echo $(( ${c%k} * 1024 )) ;;
        *) echo "$c" ;;
    esac
}

run_engine() {
    local engine=$1 dir=$2 c n
    case "$engine" in
        llama.cpp)
            # -d N at depth D: decode N tokens after D in the cache; -p D alone: prefill.
            for c in ${CONTEXTS//,/ }; do
                n=$(tokens_of "$c")
                for cache in "f16 f16" "f16 q4_0"; do
                    set -- $cache
                    "$LLAMA/llama-bench" -m "$MODEL" -t "$THREADS" -fa 1 -ctk "$1" -ctv "$2" \
                        -p 0 -n "$DECODE_TOKENS" -d "$n" -r 1 -o json \
                        > "$dir/llama-decode-$c-$1-$2.json"
                done
                "$LLAMA/llama-bench" -m "$MODEL" -t "$THREADS" -fa 1 -p "$n" -n 0 -r 1 -o json \
                    > "$dir/llama-prefill-$c.json"
            done ;;
        kivi)
            "$KIVI_BIN" bench --backend host --model "$MODEL" --text "$TEXT" \
                --contexts "$CONTEXTS" --repeats 1 --decode-tokens "$DECODE_TOKENS" \
                --configs "$CONFIGS" --json "$dir/kivi.json" ;;
    esac
}

engines=(llama.cpp kivi)
for round in $(seq 1 "$REPEATS"); do
    dir="$OUT/round-$round"
    mkdir -p "$dir"
    order=("${engines[@]}")
    if [ $(( round % 2 )) = 0 ]; then
        order=(kivi llama.cpp)
    fi
    for engine in "${order[@]}"; do
        echo "== round $round: $engine (contexts $CONTEXTS, $THREADS threads)"
        run_engine "$engine" "$dir"
    done
done

if [ "$WINDOWS" -gt 0 ]; then
    # The same tokens for both: kivi's tokenization of the text, checked against
    # llama.cpp's (llama-tokenize), and llama-perplexity reads the text itself.
    echo "== tokens: kivi against llama-tokenize"
    "$KIVI_BIN" ppl --model "$MODEL" --text "$TEXT" --window 2048 --stride 2048 \
        --scored 1024 --chunk 512 --windows "$WINDOWS" --configs "$PPL_CONFIGS" \
        --json "$OUT/kivi-ppl.json" --dump-tokens "$OUT/windows.json"
    "$LLAMA/llama-tokenize" -m "$MODEL" -f "$TEXT" --ids --log-disable --no-bos \
        > "$OUT/llama-tokens.txt" 2>/dev/null
    for cache in f16 q8_0 q4_0; do
        echo "== perplexity: llama.cpp, $cache cache"
        "$LLAMA/llama-perplexity" -m "$MODEL" -f "$TEXT" -c 2048 -b 512 --chunks "$WINDOWS" \
            -t "$THREADS" -fa on -ctk "$cache" -ctv "$cache" > "$OUT/llama-ppl-$cache.txt" 2>&1
    done
fi

if [ -n "$TYPES" ]; then
    types_dir="$OUT/types"
    mkdir -p "$types_dir"
    stem=$(basename "$MODEL" .gguf)
    stem=${stem%%.*}
    if [ ! -f "$types_dir/$stem.F16.gguf" ]; then
        "$PY" "$ROOT/scripts/reference/gguf_types.py" smollm2 "$MODEL" "$types_dir"
    fi
    for type in ${TYPES//,/ }; do
        file="$types_dir/$stem.llama-$type.gguf"
        [ -f "$file" ] || "$LLAMA/llama-quantize" "$types_dir/$stem.F16.gguf" "$file" "$type" \
            > "$types_dir/quantize-$type.txt" 2>&1
        echo "== GGUF type $type: perplexity in both engines"
        "$KIVI_BIN" ppl --model "$file" --text "$TEXT" --window 2048 --stride 2048 \
            --scored 1024 --chunk 512 --windows "$TYPE_WINDOWS" --configs full \
            --json "$types_dir/kivi-ppl-$type.json" > "$types_dir/kivi-ppl-$type.txt" 2>&1
        "$LLAMA/llama-perplexity" -m "$file" -f "$TEXT" -c 2048 -b 512 --chunks "$TYPE_WINDOWS" \
            -t "$THREADS" -fa on > "$types_dir/llama-ppl-$type.txt" 2>&1
    done
fi

"$PY" "$ROOT/scripts/compare_llama_cpp.py" "$OUT" --rounds "$REPEATS" --contexts "$CONTEXTS" \
    --types "$TYPES"
