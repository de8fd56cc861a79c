#!/bin/sh
# The block types' checks and measurements on the device host (AVX-512 + AMX Xeon), in one go:
# build (CPU only), the kernel tests (test_kernels_fast compares every AVX-512 kernel with its
# plain-C twin, bit-for-bit batch invariance included), llama.cpp's files in the quantization
# mixes (tests/model/quant_hub.py, 1 and 2 ranks, batched and -b 1; needs ../shared/data/quant),
# then bench_gemv: GEMV GB/s next to the stream read and GEMM GFLOP/s at m = 512 for every block
# type at llama-3-8b shapes, with 2 and 16 threads. Outputs in $OUT (or ./out).
# Usage: tests/bench/device_blocks.sh [build-dir] [bench threads list, default 2,16]
B=${1:-/tmp/bb}
TL=${2:-2,16}
OUT=${OUT:-./out}
mkdir -p "$OUT"
{ lscpu | grep -E 'Model name|^CPU\(s\)|NUMA|Flags' | cut -c1-400; } > "$OUT/machine.txt" 2>&1
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNM_CUDA=OFF > "$OUT/cmake.txt" 2>&1 ||
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DNM_CUDA=OFF > "$OUT/cmake.txt" 2>&1
cmake --build "$B" -j"$(nproc)" > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
(cd "$B" && timeout 200 ctest -L kernels -j8 --output-on-failure) > "$OUT/ctest_kernels.txt" 2>&1
grep -E "tests passed|Failed|\*\*\*|worst" "$OUT/ctest_kernels.txt" | tail -40
(cd "$B" && timeout 200 ctest -R quant_hub -j8 --output-on-failure) > "$OUT/ctest_quant_hub.txt" 2>&1
grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest_quant_hub.txt" | tail -10
"$B/numallm" run -m ../shared/data/quant/q-llama-hub-IQ2_M.gguf --tokens 1,2,3 -n 2 2>&1 | grep "layouts" | head -8
T=q4_0,q4_k,q5_0,q5_1,q2_k,q3_k,iq4_nl,iq4_xs,iq2_xxs,iq2_xs,iq2_s,iq3_xxs,iq3_s,iq1_s,iq1_m
timeout ${TB:-300} "$B/bench_gemv" -t "$TL" -T "$T" -S 4096x14336,14336x4096 -r 5 > "$OUT/bench_gemv.txt" 2>&1
cat "$OUT/bench_gemv.txt"
