#!/usr/bin/env bash
# Build numallm and run the whole test suite: a Release build and an address +
# undefined-behaviour sanitizer build, both with warnings as errors, each under ctest. Installs missing packages first.
# Usage: tests/run.sh [extra ctest args, e.g. -L kernels]
set -euo pipefail
cd "$(dirname "$0")/.."
launcher/setup.sh --deps
jobs=$(nproc)

# Configure quietly, but say which optional parts were found and which were left out.
optional_line() { sed -n 's/^-- \(numallm: optional parts: .*\)/\1/p'; }
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DNM_WERROR=ON | optional_line
cmake --build build -j "$jobs"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DNM_SANITIZE=ON -DNM_WERROR=ON >/dev/null
cmake --build build-asan -j "$jobs"

status=0
echo "== Release build =="
(cd build && ctest --output-on-failure -j "$jobs" "$@") || status=1
echo "== Sanitizer build (address, undefined) =="
# The fuzzer builds its own instrumented binary and benchmarks are not tests: run them once. The
# sanitizer build also leaves out the tests labelled slow (the block types' whole-model tests and
# most of llama.cpp's files: their decoders' own tests run here) and tp (1-4 ranks under mpirun, the
# same code paths as one rank plus the collectives, whose own tests run here): both run above.
(cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j "$jobs" -LE 'fuzz|slow|tp' "$@") || status=1
exit $status
