#!/bin/bash
# numallm against llama.cpp on this machine's CPU, side by side: for each type in turn,
# llama-bench then numallm bench on the same file, ROUNDS rounds, so slow phases of a shared
# host hit both. Prints one line per (round, type) with pp and tg of each.
#
#   tests/bench/cpu_vs_llamacpp.sh LLAMA_BIN_DIR MODEL_DIR [THREADS] [ROUNDS] [TYPES]
#
# MODEL_DIR holds llama-3.2-1b_T.gguf for each type T in TYPES (default "bf16 f16 q4_0 q4_k"),
# made with: build/numallm mkmodel --preset llama-3.2-1b --type T -o MODEL_DIR/llama-3.2-1b_T.gguf
set -euo pipefail
LB=${1:?llama.cpp bin directory (llama-bench)}; MD=${2:?model directory}
T=${3:-2}; R=${4:-3}; TYPES=${5:-bf16 f16 q4_0 q4_k}
NM=${NUMALLM:-$(dirname "$0")/../../build/numallm}
for round in $(seq 1 "$R"); do
    for t in $TYPES; do
        m=$MD/llama-3.2-1b_$t.gguf
        l=$("$LB/llama-bench" -m "$m" -p 512 -n 32 -t "$T" -r 2 2>/dev/null | grep -E '^\| llama' |
            awk -F'|' '{gsub(/ +/, " "); printf "%s %s;", $7, $8}')
        n=$("$NM" bench -m "$m" -p 512 -n 32 -t "$T" -r 2 --bw-size 0 2>/dev/null | grep -E '^\| llama' |
            awk -F'|' '{gsub(/ +/, " "); printf "%s %s;", $8, $9}')
        echo "round $round $t | llama.cpp:$l | numallm:$n"
    done
done
