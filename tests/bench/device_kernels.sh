#!/bin/sh
# Issue 4 kernel checks and figures on a machine with AMX, in one go (the device host):
# build the kernel tests and benchmarks, run ctest -L kernels (test_kernels_amx runs the real
# tiles there), then bench_gemm for 2 threads and all threads. Outputs go to $OUT (or ./out).
# Usage: tests/bench/device_kernels.sh [build-dir]
B=${1:-/tmp/b}
OUT=${OUT:-./out}
mkdir -p "$OUT"
{ lscpu | head -20; grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E 'amx|avx512_bf16|avx512_vnni' | tr '\n' ' '; echo; } > "$OUT/machine.txt" 2>&1
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DNM_WERROR=OFF > "$OUT/cmake.txt" 2>&1
cmake --build "$B" -j"$(nproc)" --target test_kernels_types test_kernels_dequant test_kernels_quant test_kernels_fast \
    test_kernels_matmul test_kernels_checker test_kernels_layout test_kernels_packed test_kernels_attn_queries bench_gemm bench_stream > "$OUT/build.txt" 2>&1
tail -3 "$OUT/build.txt"
(cd "$B" && timeout 120 ctest -L kernels --output-on-failure) > "$OUT/ctest.txt" 2>&1
tail -15 "$OUT/ctest.txt"
timeout 60 "$B/test_kernels_packed" --amx-only > "$OUT/test_amx.txt" 2>&1; echo "test_amx rc=$?"; tail -12 "$OUT/test_amx.txt"
# 2 threads: every type on the large shapes and qwen2.5-0.5b's, the chunked path (chunks of 256
# columns, as ffn_down runs) and the GEMV/GEMM switch sweep; then all threads without the sweep
timeout ${T2:-110} "$B/bench_gemm" -t 2 -r 3 -T q4_0,q8_0,q4_k,q6_k,bf16,f16 -S 4096x14336,4864x896,896x4864,896x896,896x128 -c 256 > "$OUT/bench_gemm_t2.txt" 2>&1; echo "bench t2 rc=$?"
timeout ${TA:-110} "$B/bench_gemm" -t all -r 3 -T q4_0,q8_0,q4_k,q6_k,bf16 -S 4096x14336 -x 0 > "$OUT/bench_gemm_tall.txt" 2>&1; echo "bench tall rc=$?"
cat "$OUT/bench_gemm_t2.txt" "$OUT/bench_gemm_tall.txt"
# GEMV software-prefetch distance (NM_PK_PREFETCH bytes ahead in the group stream) and hint
# (NM_PK_PF_HINT 0 = T0, 1 = T1); -m 1 skips the GEMM part
for T in 2 all; do for PF in 2048 4096 8192; do for H in 0 1; do
  echo "== prefetch $PF hint $H threads $T"; NM_PK_PREFETCH=$PF NM_PK_PF_HINT=$H timeout 30 "$B/bench_gemm" -t $T -T q4_0,q4_k,q6_k,f16 -S 4096x14336 -x 0 -m 1 -r 5 | grep -E '^(q|f|##)'
done; done; done > "$OUT/prefetch.txt" 2>&1
cat "$OUT/prefetch.txt"
