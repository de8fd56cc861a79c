#!/bin/sh
# Reproduces the collectives figures of tests/bench/RESULTS.md on this machine: machine facts,
# a Release build of bench_coll and test_coll, a correctness run with the most ranks, then
# bench_coll for each rank count (one log each, bound to cores).
# Usage: tests/collectives/bench_coll.sh OUTDIR [RANKS...]        (default ranks: 2 4 8)
# Environment: BENCH_ARGS (default "-t shm,shm:64,shm:0,mpi -i 0.5"), BUILD (build directory,
# default /tmp/numallm-bench-coll), MPIRUN_ARGS (default "--bind-to core --map-by core"),
# TEST_TIMEOUT and BENCH_TIMEOUT (seconds per run, default 60 and 100).
set -u
out=$1
shift
ranks=${*:-2 4 8}
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-/tmp/numallm-bench-coll}
args=${BENCH_ARGS:--t shm,shm:64,shm:0,mpi -i 0.5}
mkdir -p "$out"

{
    echo "== $(date -u)"
    uname -a
    lscpu
    command -v numactl >/dev/null && numactl -H
    echo "NUMA nodes online: $(cat /sys/devices/system/node/online 2>/dev/null)"
    free -g
    df -h /dev/shm
    mpirun --version
} >"$out/machine.txt" 2>&1

root=""
[ "$(id -u)" = 0 ] && root="--allow-run-as-root"
mpirun="mpirun $root ${MPIRUN_ARGS:---bind-to core --map-by core}"

# The whole project; if it does not configure here (a module in progress elsewhere), only what
# the benchmark needs.
if ! cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DNM_WERROR=OFF >"$out/cmake.log" 2>&1; then
    min=$build-min
    mkdir -p "$min"
    cat >"$min/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.18)
project(numallm_coll_bench C)
set(CMAKE_C_STANDARD 11)
set(CMAKE_C_EXTENSIONS ON)
set(CMAKE_C_FLAGS_RELEASE "-O2 -g")
find_package(Threads REQUIRED)
find_package(MPI COMPONENTS C REQUIRED)
find_library(NUMA_LIB numa)
find_path(NUMA_INC numa.h)
include($src/kernels/kernels.cmake)
include($src/collectives/collectives.cmake)
add_executable(bench_coll $src/tests/bench/bench_coll.c)
target_link_libraries(bench_coll PRIVATE nm_collectives)
add_executable(test_coll $src/tests/collectives/test_coll.c)
target_link_libraries(test_coll PRIVATE nm_collectives)
EOF
    build=$min/build
    cmake -S "$min" -B "$build" -DCMAKE_BUILD_TYPE=Release >>"$out/cmake.log" 2>&1 ||
        { tail -30 "$out/cmake.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" --target bench_coll test_coll >"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; exit 1; }

most=$(echo $ranks | tr ' ' '\n' | sort -n | tail -1)
for t in shm mpi; do
    NM_COLL=$t timeout ${TEST_TIMEOUT:-60} $mpirun -np "$most" "$build/test_coll" --max-mib 4 --expect $t \
        >"$out/test_np${most}_$t.txt" 2>&1
    echo "test_coll np $most $t: status $? ($(tail -1 "$out/test_np${most}_$t.txt"))"
done
for n in $ranks; do
    echo "$mpirun -np $n bench_coll $args" >"$out/bench_np$n.txt"
    timeout ${BENCH_TIMEOUT:-100} $mpirun -np "$n" "$build/bench_coll" $args >>"$out/bench_np$n.txt" 2>&1
    echo "bench_coll np $n: status $?"
done
