#!/bin/bash
# Bounded libFuzzer run of the GGUF reader and model loader (tests/gguf/fuzz_gguf.c).
#
#   tests/gguf/fuzz.sh SRC_DIR BUILD_DIR [SECONDS] [SEED_TOOL]
#
# Compiles the target and the sources it needs directly with clang
# (-fsanitize=fuzzer,address,undefined) into BUILD_DIR/fuzz-gguf, writes the seed corpus with
# SEED_TOOL (default BUILD_DIR/test_gguf_corrupt --write-seeds: tiny models of every preset and
# type, micro models, a vocab-only file, and the tokenizer files of SRC_DIR/../shared/data/tokenizer
# cut down to 64 entries per array), then fuzzes for SECONDS (default 30). The corpus that the
# fuzzer grows is kept in BUILD_DIR/fuzz-gguf/corpus between runs.
# Exit: 0 no crash; 1 a crash, leak, timeout or out-of-memory (the reproducer path is printed);
# 77 skipped because clang or its libFuzzer runtime is missing (ctest reports it as skipped).
set -u
SRC=$(cd "${1:?usage: fuzz.sh SRC_DIR BUILD_DIR [SECONDS] [SEED_TOOL]}" && pwd)
BUILD=$(mkdir -p "${2:?usage: fuzz.sh SRC_DIR BUILD_DIR [SECONDS] [SEED_TOOL]}" && cd "$2" && pwd)
SECS=${3:-30}
SEED_TOOL=${4:-$BUILD/test_gguf_corrupt}
OUT=$BUILD/fuzz-gguf
MAX_LEN=2097152

CC=${NM_FUZZ_CC:-}
if [ -z "$CC" ]; then
    for c in clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14; do
        if command -v "$c" >/dev/null 2>&1; then CC=$c; break; fi
    done
fi
if [ -z "$CC" ]; then
    echo "SKIP: no clang found (install the apt packages clang and libclang-rt-dev, or set NM_FUZZ_CC)"
    exit 77
fi
# The corpus the fuzzer grows starts empty on every run, so a ctest run takes the same time each
# time; NM_FUZZ_KEEP_CORPUS=1 keeps it for longer manual runs.
[ "${NM_FUZZ_KEEP_CORPUS:-0}" = 1 ] || rm -rf "$OUT/corpus"
mkdir -p "$OUT/obj" "$OUT/corpus" "$OUT/seeds" "$OUT/artifacts"
probe=$OUT/obj/probe
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }\n' >"$probe.c"
if ! "$CC" -fsanitize=fuzzer,address,undefined "$probe.c" -o "$probe" >"$probe.log" 2>&1; then
    echo "SKIP: $CC cannot link -fsanitize=fuzzer,address,undefined (install libclang-rt-dev, e.g. libclang-rt-14-dev):"
    sed 's/^/  /' "$probe.log" | head -5
    exit 77
fi
if [ ! -x "$SEED_TOOL" ]; then
    echo "SKIP: the seed writer $SEED_TOOL is not built (build the test_gguf_corrupt target)"
    exit 77
fi

# ---- build: objects are recompiled when their source or any header is newer ----
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CFLAGS="-std=gnu11 -O1 -g -w -I$SRC/kernels -I$SRC/rank/model -I$SRC/rank/engine -I$SRC/rank/text -I$SRC/collectives"
AVX512="-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mavx512bf16 -mfma -mf16c -mavx2"
AVX2="-mavx2 -mfma -mf16c"
newest_header=$(ls -t "$SRC"/kernels/*.h "$SRC"/kernels/blocks/*.h "$SRC"/kernels/x86-avx512/*.h "$SRC"/kernels/x86-avx2/*.h "$SRC"/rank/*/*.h "$SRC"/collectives/*.h 2>/dev/null | head -1)
compile() { # source object extra-flags...
    local src=$1 obj=$2
    shift 2
    if [ "$obj" -nt "$src" ] && [ "$obj" -nt "$newest_header" ]; then return 0; fi
    "$CC" $CFLAGS $SAN "$@" -c "$src" -o "$obj"
}
# Everything the loader links against goes into one archive, so that only what it needs is
# pulled in; a support file that does not compile here (a generated header, a library this
# machine lacks) is left out, and the link says if it was needed.
# They are compiled at -O0 (with the sanitizers), in parallel: at -O1, ASan and UBSan make the
# SIMD kernels take a minute each to compile.
kobjs=()
jobs_max=$(nproc 2>/dev/null || echo 2)
for f in "$SRC"/kernels/*.c "$SRC"/kernels/blocks/*.c "$SRC"/kernels/x86-avx512/*.c "$SRC"/kernels/x86-avx2/*.c \
    "$SRC"/kernels/x86-amx/*.c "$SRC"/kernels/cuda/none.c \
    "$SRC"/collectives/*.c "$SRC"/rank/*/*.c; do
    case $f in */rank/model/gguf.c | */rank/model/model.c) continue ;; esac
    dir=$(basename "$(dirname "$f")")
    o=$OUT/obj/${dir}_$(basename "$f" .c).o
    extra=(-O0)
    [ "$dir" = x86-avx512 ] && extra+=($AVX512)
    # as kernels/kernels.cmake: the one file built for AVX512_VBMI
    [ "$(basename "$f")" = dot_iq_vbmi.c ] && extra+=(-mavx512vbmi)
    [ "$dir" = x86-avx2 ] && extra+=($AVX2)
    [ "$dir" = x86-amx ] && extra+=($AVX512 -mamx-tile -mamx-int8 -mamx-bf16)
    [ "$dir" = cuda ] && extra+=(-I"$SRC/kernels/cuda")
    (compile "$f" "$o" "${extra[@]}" 2>"$o.log" || rm -f "$o") &
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    kobjs+=("$o")
done
wait
present=()
for o in "${kobjs[@]}"; do [ -f "$o" ] && present+=("$o"); done
kobjs=("${present[@]}")
rm -f "$OUT/obj/libsupport.a"
ar rcs "$OUT/obj/libsupport.a" "${kobjs[@]}"
# Coverage feedback only where the parsing happens: the reader, the loader and the target.
robjs=()
for f in "$SRC/rank/model/gguf.c" "$SRC/rank/model/model.c" "$SRC/tests/gguf/fuzz_gguf.c"; do
    o=$OUT/obj/r_$(basename "$f" .c).o
    compile "$f" "$o" -fsanitize=fuzzer-no-link || { echo "FAIL: cannot compile $f"; exit 1; }
    robjs+=("$o")
done
FUZZER=$OUT/fuzz_gguf
"$CC" -fsanitize=fuzzer,address,undefined "${robjs[@]}" "$OUT/obj/libsupport.a" -lm -lpthread -lrt -o "$FUZZER" ||
    { echo "FAIL: cannot link $FUZZER (compile logs of left-out files: $OUT/obj/*.o.log)"; exit 1; }

# ---- seeds ----
VOCAB_DIR=${NM_TOKENIZER_DATA:-$SRC/../shared/data/tokenizer}
vocab_args=()
[ -d "$VOCAB_DIR" ] && vocab_args=(--vocab-dir "$VOCAB_DIR")
rm -f "$OUT"/seeds/*
"$SEED_TOOL" --write-seeds "$OUT/seeds" --max-bytes "$MAX_LEN" "${vocab_args[@]}" ||
    { echo "FAIL: $SEED_TOOL --write-seeds failed"; exit 1; }

# ---- fuzz ----
echo "fuzzing $FUZZER for ${SECS}s (seeds $OUT/seeds, corpus $OUT/corpus)"
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
"$FUZZER" "$OUT/corpus" "$OUT/seeds" \
    -max_total_time="$SECS" -max_len=$MAX_LEN -timeout=20 -rss_limit_mb=4096 -malloc_limit_mb=2048 \
    -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$OUT/artifacts/" -print_final_stats=1 \
    >"$OUT/fuzz.log" 2>&1
rc=$?
grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|INFO: seed corpus|#[0-9]+ *DONE)' "$OUT/fuzz.log" | sed 's/^/  /'
if [ $rc -ne 0 ]; then
    tail -60 "$OUT/fuzz.log"
    echo "FAIL: the fuzzer found a problem (exit $rc); full log: $OUT/fuzz.log"
    for a in $(grep -oE "Test unit written to [^ ]+" "$OUT/fuzz.log" | sed 's/Test unit written to //'); do
        echo "  reproducer: $a"
        echo "  repro: $FUZZER $a"
    done
    exit 1
fi
echo "fuzz_gguf: no crash in ${SECS}s"
exit 0
