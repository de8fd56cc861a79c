#!/bin/sh
# Issue 17 on the device host (AMX): where prompt and batched-decode time goes, for one or more
# source trees side by side (each measurement runs every variant in turn, so a noisy host hits
# them alike). Per tree: a Release build without CUDA. Then
#   - with CHECK=1: the kernel tests (real and emulated tiles against the plain-C twins) and
#     batch invariance with the real tiles; with HUB=1 also every one of llama.cpp's files
#     (tests/model/quant_hub.py, needs ../shared/data/quant) with NM_AMX_BF16_MIN_M=16 so that
#     their 28-token prompts take the bf16 tiles (HUB_NP2=N: the first N on 2 ranks too);
#   - bench_gemm at m = 512 on llama-3-8b's shapes for $THREADS (int8 and bf16 TOP/s, % of peak);
#   - the whole model: NM_PROFILE=1 numallm bench -p 512 (each phase's share, how busy the
#     threads were) for every VARIANT, "TREE[:ENV=VALUE]" (default: each tree as it is);
#   - bench_batch (B = 1..16 sequences, one row each) per tree.
#   - with BLOCK_TYPES=q5_0,iq4_xs,...: bench_gemv for them (GEMV, GEMM on VNNI and bf16 tiles).
# Usage: OUT=dir [VARIANTS="1 2 2:NM_AMX_BF16=0"] [MODEL_TYPES="q4_0 llama-3.2-1b:iq4_xs"]
#        tests/bench/device_amx.sh SRC_TREE...
# Outputs in $OUT (./out).
OUT=${OUT:-./out}
mkdir -p "$OUT"
[ $# -gt 0 ] || set -- .
{ lscpu; lscpu -e; } > "$OUT/machine.txt" 2>&1
grep -E 'Model name|^CPU\(s\)|Thread|L2|L3' "$OUT/machine.txt"
i=0
for src in "$@"; do
  i=$((i + 1))
  (cmake -S "$src" -B /tmp/amx-b$i -G Ninja -DCMAKE_BUILD_TYPE=Release -DNM_CUDA=OFF > "$OUT/cmake$i.txt" 2>&1 &&
   cmake --build /tmp/amx-b$i -j8 --target numallm bench_gemm bench_gemv bench_batch test_kernels_packed test_kernels_fast \
     test_kernels_layout test_batch \
     > "$OUT/build$i.txt" 2>&1 || tail -30 "$OUT/build$i.txt") &
done
wait
echo "built at $(date +%T)"
n=$i
if [ "${CHECK:-0}" = 1 ]; then
  i=0
  for src in "$@"; do
    i=$((i + 1))
    (cd /tmp/amx-b$i && timeout 200 ctest -R "test_kernels_packed|test_kernels_fast|test_kernels_layout|batch_invariance_tiny-(llama|qwen3moe)_(q4_0|q4_k|q6_k)$" \
       -j8 --output-on-failure) > "$OUT/check$i.txt" 2>&1
    echo "tree $i checks: $(grep -E 'tests passed' "$OUT/check$i.txt")"; grep -E '\*\*\*Failed|Timeout|FAIL' "$OUT/check$i.txt" | head
  done
fi
if [ "${HUB:-0}" = 1 ]; then # every file of llama.cpp's mixes, on 1 rank (and 2 for the first HUB_NP2)
  k=0
  for g in ../shared/data/quant/*.gguf; do
    nm=$(basename "$g" .gguf)
    k=$((k + 1))
    mpi=; [ $k -le ${HUB_NP2:-0} ] && mpi="mpirun --oversubscribe --allow-run-as-root"
    NM_AMX_BF16_MIN_M=16 timeout 90 python3 "$1/tests/model/quant_hub.py" /tmp/amx-b$n/numallm ../shared/data/quant $nm /tmp/qh/$nm $mpi \
      > "$OUT/hub_$nm.txt" 2>&1 || { echo "FAILED $nm"; tail -5 "$OUT/hub_$nm.txt"; }
  done
  cat "$OUT"/hub_*.txt > "$OUT/hub.txt"; rm -f "$OUT"/hub_*.txt
  echo "hub (bf16 tiles from 16 rows): $(grep -c 'quant_hub: PASS' "$OUT/hub.txt") passed of $k"
fi
if [ -n "${BLOCK_TYPES:-}" ]; then # the block types' GEMV and GEMM, int8/VNNI and the bf16 tiles
  i=0
  for src in "$@"; do
    i=$((i + 1))
    echo "== tree $i" >> "$OUT/blocks.txt"
    timeout 200 /tmp/amx-b$i/bench_gemv -t 16 -r 3 -T $BLOCK_TYPES -S 4096x14336 >> "$OUT/blocks.txt" 2>&1
  done
  grep -vE '^#|^$' "$OUT/blocks.txt"
fi
for t in ${THREADS:-2 16}; do
  i=0
  for src in "$@"; do
    i=$((i + 1))
    echo "== tree $i, threads $t" >> "$OUT/gemm.txt"
    timeout 120 /tmp/amx-b$i/bench_gemm -t $t -m 512 -r ${GREPS:-3} -x 0 -T ${TYPES:-q4_0,q4_k} -S ${SHAPES:-4096x14336,14336x4096} -c ${CHUNK:-256} \
      >> "$OUT/gemm.txt" 2>&1
  done
done
grep -E "^==|^##|^q|chunked" "$OUT/gemm.txt"
echo "kernels done at $(date +%T)"
mkdir -p /tmp/m
# MODEL_TYPES: TYPE (llama-3-8b) or PRESET:TYPE
for mt in ${MODEL_TYPES:-q4_0}; do
  pr=llama-3-8b; ty=$mt; [ "${mt#*:}" = "$mt" ] || { pr=${mt%%:*}; ty=${mt#*:}; }
  [ -f /tmp/m/${pr}_$ty.gguf ] ||
    /tmp/amx-b1/numallm mkmodel --preset $pr --type $ty -o /tmp/m/${pr}_$ty.gguf -t 16 > /dev/null 2>&1
done
echo "models made at $(date +%T)"
variants=${VARIANTS:-$(seq 1 $n)}
for round in $(seq 1 ${ROUNDS:-1}); do
  for mt in ${MODEL_TYPES:-q4_0}; do
    pr=llama-3-8b; ty=$mt; [ "${mt#*:}" = "$mt" ] || { pr=${mt%%:*}; ty=${mt#*:}; }
    for v in $variants; do
      tree=${v%%:*}
      envs=; [ "$tree" = "$v" ] || envs=${v#*:}
      echo "== round $round, variant $v, $pr $ty" >> "$OUT/model.txt"
      env $envs NM_PROFILE=1 timeout 150 /tmp/amx-b$tree/numallm bench -m /tmp/m/${pr}_$ty.gguf -p 512 -n 0 -r 2 \
        -t ${MTHREADS:-16} >> "$OUT/model.txt" 2>&1
    done
  done
done
grep -E '^==|^\| [a-z]|profile' "$OUT/model.txt" | grep -v -- '---\|model  '
for ty in ${BATCH_TYPES-q4_0}; do
  i=0
  for src in "$@"; do
    i=$((i + 1))
    echo "== tree $i, $ty" >> "$OUT/batch.txt"
    NM_PROFILE=1 timeout 100 /tmp/amx-b$i/bench_batch llama-3-8b $ty /tmp/m 16 ${MAXB:-16} >> "$OUT/batch.txt" 2>&1
  done
done
grep -E '^==|^\| [0-9]|profile' "$OUT/batch.txt"
echo "done at $(date +%T)"
