#!/bin/sh
# The GPU rank's checks on the device host, in one go: build everything, then ctest -L gpu (the
# CUDA kernels, the stage against the CPU engine, the CPU + GPU pipeline in-process and with the
# GPU rank under mpirun) and ctest -L kernels (AMX tiles there). Outputs in $OUT (or ./out).
# Usage: tests/bench/device_gpu.sh [build-dir]
B=${1:-/tmp/b}
OUT=${OUT:-./out}
mkdir -p "$OUT"
{ nvidia-smi -L; lscpu | grep -E 'Model name|^CPU\(s\)|NUMA'; } > "$OUT/machine.txt" 2>&1
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DNM_WERROR=OFF > "$OUT/cmake.txt" 2>&1
cmake --build "$B" -j"$(nproc)" > "$OUT/build.txt" 2>&1 || { tail -30 "$OUT/build.txt"; exit 1; }
(cd "$B" && timeout ${TG:-400} ctest -L gpu -j4 --output-on-failure) > "$OUT/ctest_gpu.txt" 2>&1
grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest_gpu.txt" | tail -25
(cd "$B" && timeout 150 ctest -L kernels -j4 --output-on-failure) > "$OUT/ctest_kernels.txt" 2>&1
grep -E "tests passed|Failed|\*\*\*" "$OUT/ctest_kernels.txt" | tail -5
