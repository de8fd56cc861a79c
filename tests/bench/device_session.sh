#!/bin/sh
# One device call for this session's work (issues 15 and 16) on the GPU host: build with CUDA;
# the GPU label (every type on the CUDA device against the plain-C references, the stage and the
# -ngl pipeline); llama.cpp's 34 files with -ngl 99 --strict against its logits; the kernel and
# batch-invariance tests with AMX; bench_batch (batched decode of 1..64 sequences) and bench_gpu
# layers for the block types. Needs ../shared/data/quant. Outputs in $OUT (or ./out).
B=${1:-/tmp/bs}
OUT=${OUT:-./out}
mkdir -p "$OUT"
{ nvidia-smi -L; lscpu | grep -E 'Model name|^CPU\(s\)'; } > "$OUT/machine.txt" 2>&1
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.txt" 2>&1 ||
  cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release > "$OUT/cmake.txt" 2>&1
cmake --build "$B" -j"$(nproc)" > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
echo "built at $(date +%T)"
(cd "$B" && timeout 200 ctest -L gpu -j4 --output-on-failure) > "$OUT/ctest_gpu.txt" 2>&1
grep -E "tests passed|\*\*\*Failed|Timeout" "$OUT/ctest_gpu.txt" | tail -12
(cd "$B" && timeout 100 ctest -R "test_kernels_fast|test_kernels_packed|batch_invariance_tiny-(llama|qwen3moe)_(q4_0|q4_k|bf16|iq2_xxs)$" -j8 --output-on-failure) > "$OUT/ctest_amx.txt" 2>&1
grep -E "tests passed|\*\*\*Failed" "$OUT/ctest_amx.txt" | tail -6
for f in ../shared/data/quant/*.gguf; do
  n=$(basename "$f" .gguf)
  NM_QUANT_HUB_NGL=99 timeout 60 python3 tests/model/quant_hub.py "$B/numallm" ../shared/data/quant "$n" /tmp/qh/$n >> "$OUT/quant_hub_ngl.txt" 2>&1 || echo "FAILED $n"
done
grep -c "quant_hub: PASS" "$OUT/quant_hub_ngl.txt"
echo "tests done at $(date +%T)"
timeout 120 "$B/bench_batch" qwen2.5-0.5b q4_0 /tmp/bm 16 > "$OUT/bench_batch.txt" 2>&1; cat "$OUT/bench_batch.txt" | tail -9
timeout 90 "$B/bench_gpu" layers q4_0 q5_0 q2_k q3_k iq4_xs iq2_xxs iq3_s iq1_m > "$OUT/bench_gpu.txt" 2>&1; tail -14 "$OUT/bench_gpu.txt"
