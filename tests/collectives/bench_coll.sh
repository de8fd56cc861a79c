#!/bin/sh
# Reproduces the collectives figures of tests/bench/RESULTS.md on this machine: machine facts,
# a Release build of bench_coll and test_coll, correctness runs with the most ranks (shm with the
# default cache hints, shm with every hint, mpi, and shm with the sizes of 30-64 MiB, where the
# default nt-out hint acts), then bench_coll for each rank count (one log each, bound to
# cores).
# Usage: tests/collectives/bench_coll.sh OUTDIR [RANKS...]        (default ranks: 2 4 8)
# Environment:
#   BENCH_RUNS     bench_coll argument sets separated by ';', run one after the other for every
#                  rank count into the same log (default "-t shm,shm:64,shm:0,mpi -i 0.5");
#   BENCH_RUNS_NP<N>  the same for N ranks only (overrides BENCH_RUNS);
#   BUILD (build directory, default /tmp/numallm-bench-coll), MPIRUN_ARGS (default
#   "--bind-to core --map-by core"), TEST_HINTS (hints of the second shm test run, default
#   every one), TEST_TIMEOUT and BENCH_TIMEOUT (seconds per run, default 60 and 100).
# Waits no more than the timeouts; a run that fails or times out reports its status and the
# script goes on.
set -u
out=$1
shift
ranks=${*:-2 4 8}
src=$(cd "$(dirname "$0")/../.." && pwd)
build=${BUILD:-/tmp/numallm-bench-coll}
runs=${BENCH_RUNS:--t shm,shm:64,shm:0,mpi -i 0.5}
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
    uptime
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
add_executable(test_coll_reduce $src/tests/collectives/test_coll_reduce.c)
target_link_libraries(test_coll_reduce PRIVATE nm_collectives)
EOF
    build=$min/build
    cmake -S "$min" -B "$build" -DCMAKE_BUILD_TYPE=Release >>"$out/cmake.log" 2>&1 ||
        { tail -30 "$out/cmake.log"; exit 1; }
fi
cmake --build "$build" -j "$(nproc)" --target bench_coll test_coll test_coll_reduce >"$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; exit 1; }

"$build/test_coll_reduce" >"$out/test_reduce.txt" 2>&1
echo "test_coll_reduce: status $? ($(tail -1 "$out/test_reduce.txt"))"
most=$(echo $ranks | tr ' ' '\n' | sort -n | tail -1)
hints=${TEST_HINTS:-nt-out+nt-slot+nt-slot-mid}
for t in shm shm-hints mpi shm-big; do
    env="" sizes="--max-mib 8"
    [ $t = shm-hints ] && env="NM_COLL_SHM_HINTS=$hints"
    [ $t = shm-big ] && sizes="--min-mib 30 --max-mib 64"
    transport=${t%-*}
    env NM_COLL=$transport $env timeout ${TEST_TIMEOUT:-60} $mpirun -np "$most" "$build/test_coll" \
        $sizes --expect $transport >"$out/test_np${most}_$t.txt" 2>&1 </dev/null
    echo "test_coll np $most $t $env $sizes: status $? ($(tail -1 "$out/test_np${most}_$t.txt"))"
done
for n in $ranks; do
    eval "r=\${BENCH_RUNS_NP$n:-\$runs}"
    log="$out/bench_np$n.txt"
    : >"$log"
    echo "$r" | tr ';' '\n' | while read -r args; do
        [ -n "$args" ] || continue
        echo "\$ $mpirun -np $n bench_coll $args" >>"$log"
        timeout ${BENCH_TIMEOUT:-100} $mpirun -np "$n" "$build/bench_coll" $args >>"$log" 2>&1 </dev/null
        echo "bench_coll np $n $args: status $?"
    done
done
