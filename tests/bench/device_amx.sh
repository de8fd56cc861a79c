#!/bin/sh
# Issue 17 on the device host (AMX): where prompt and batched-decode time goes, for one or more
# source trees side by side (each measurement runs every tree in turn, so a noisy host hits them
# alike). Per tree: a Release build without CUDA; bench_gemm at m = 512 on llama-3-8b's shapes
# for 2, 4, 8 and 16 threads (int8 TOP/s, % of the tile peak); the m = 1..32 sweep at 16 threads;
# then the whole model (NM_PROFILE=1 numallm bench -p 512 at 2, 4, 8, 16 threads: each phase's
# share and how busy the threads were) and bench_batch (B = 1..16 sequences, one row each).
# With CHECK=1 first the kernel tests and batch invariance with the real tiles.
# Usage: OUT=dir tests/bench/device_amx.sh SRC_TREE... (default: .). Outputs in $OUT (./out).
OUT=${OUT:-./out}
mkdir -p "$OUT"
[ $# -gt 0 ] || set -- .
{ lscpu; lscpu -e; } > "$OUT/machine.txt" 2>&1
grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|L2|L3' "$OUT/machine.txt"
i=0
for src in "$@"; do
  i=$((i + 1))
  b=/tmp/amx-b$i
  cmake -S "$src" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DNM_CUDA=OFF > "$OUT/cmake$i.txt" 2>&1
  cmake --build "$b" -j"$(nproc)" --target numallm bench_gemm bench_batch test_kernels_packed test_kernels_fast test_batch \
    > "$OUT/build$i.txt" 2>&1 || { tail -30 "$OUT/build$i.txt"; exit 1; }
  echo "tree $i ($src): built at $(date +%T)"
done
n=$i
if [ "${CHECK:-0}" = 1 ]; then
  i=0
  for src in "$@"; do
    i=$((i + 1))
    (cd /tmp/amx-b$i && timeout 150 ctest -R "test_kernels_packed|test_kernels_fast|batch_invariance_tiny-(llama|qwen3moe)_(q4_0|q4_k|q6_k)$" \
       -j8 --output-on-failure) > "$OUT/check$i.txt" 2>&1
    echo "tree $i checks: $(grep -E 'tests passed' "$OUT/check$i.txt")"; grep -E '\*\*\*Failed|Timeout' "$OUT/check$i.txt" | head
  done
fi
# kernels: every tree per thread count
for t in ${THREADS:-2 4 8 16}; do
  i=0
  for src in "$@"; do
    i=$((i + 1))
    echo "== tree $i, threads $t" >> "$OUT/gemm.txt"
    timeout 90 /tmp/amx-b$i/bench_gemm -t $t -m 512 -r 3 -x 0 -T ${TYPES:-q4_0,q4_k} -S 4096x14336,14336x4096,4096x1024 \
      >> "$OUT/gemm.txt" 2>&1
  done
done
grep -E '^==|^##|^q' "$OUT/gemm.txt"
i=0
for src in "$@"; do
  i=$((i + 1))
  echo "== tree $i" >> "$OUT/sweep.txt"
  timeout 60 /tmp/amx-b$i/bench_gemm -t 16 -m 512 -r 3 -T q4_0,q4_k -S 4096x14336 -c 256 >> "$OUT/sweep.txt" 2>&1
done
grep -E '^==|chunked|switch' "$OUT/sweep.txt"
echo "kernels done at $(date +%T)"
mkdir -p /tmp/m
for ty in ${MODEL_TYPES:-q4_0 q4_k}; do
  [ -f /tmp/m/llama-3-8b_$ty.gguf ] ||
    /tmp/amx-b1/numallm mkmodel --preset llama-3-8b --type $ty -o /tmp/m/llama-3-8b_$ty.gguf -t 16 > /dev/null 2>&1
done
echo "models made at $(date +%T)"
for ty in ${MODEL_TYPES:-q4_0 q4_k}; do
  i=0
  for src in "$@"; do
    i=$((i + 1))
    echo "== tree $i, $ty" >> "$OUT/model.txt"
    NM_PROFILE=1 timeout 150 /tmp/amx-b$i/numallm bench -m /tmp/m/llama-3-8b_$ty.gguf -p 512 -n 0 -r 2 -t ${MTHREADS:-2,4,8,16} \
      >> "$OUT/model.txt" 2>&1
  done
done
grep -E '^==|^\| |profile' "$OUT/model.txt" | grep -v -- '---'
for ty in ${BATCH_TYPES:-q4_0}; do
  i=0
  for src in "$@"; do
    i=$((i + 1))
    echo "== tree $i, $ty" >> "$OUT/batch.txt"
    NM_PROFILE=1 timeout 120 /tmp/amx-b$i/bench_batch llama-3-8b $ty /tmp/m 16 16 >> "$OUT/batch.txt" 2>&1
  done
done
grep -E '^==|^\| [0-9]|profile' "$OUT/batch.txt"
echo "done at $(date +%T)"
