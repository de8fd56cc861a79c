#!/usr/bin/env bash
# Install numallm's dependencies from Debian/Ubuntu packages (idempotent: only what is missing),
# then configure and build into build/. Usage:
#   launcher/setup.sh            install + build (Release)
#   launcher/setup.sh --deps     install only
# Works as root or through sudo, on Debian 12 and Ubuntu 24.04.
set -euo pipefail
cd "$(dirname "$0")/.."

deps_only=0
[ "${1:-}" = "--deps" ] && deps_only=1

# Required to build and test: the compiler and build tools; Open MPI (several ranks per machine,
# and mpirun, which starts them); libnuma + numactl (memory on a rank's own node); hwloc (the
# machine's topology, for the rank plan); Python with numpy and regex (the independent reference
# implementation the tests check the engine against, and the tokenizer's pre-tokenizer test);
# libmicrohttpd and jansson (numallm serve's HTTP and JSON); curl (the server's end-to-end tests).
required=(build-essential cmake ninja-build pkg-config
          libopenmpi-dev openmpi-bin libnuma-dev numactl libhwloc-dev hwloc
          python3 python3-numpy python3-regex
          libmicrohttpd-dev libjansson-dev curl)
# Wanted, but numallm builds, runs and tests without them (CMake's "optional parts" line says
# what was left out, and the tests that need them are reported as skipped): oneDNN (a matmul
# candidate; found by its library and header, so its CMake package's OpenCL dependency is not
# needed), clang + its fuzzer runtime (the GGUF fuzz test).
optional=(libdnnl-dev clang libclang-rt-dev)

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "setup: not root and no sudo: install these packages yourself: ${required[*]}" >&2; exit 1; fi
fi

missing() {
  local out=()
  for p in "$@"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || out+=("$p"); done
  echo "${out[@]:-}"
}

need=$(missing "${required[@]}")
want=$(missing "${optional[@]}")
if [ -n "$need$want" ]; then
  # No questions (sudo drops the environment, hence env), and wait for another apt to finish.
  APT=($SUDO env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600)
  echo "setup: installing: $need $want"
  "${APT[@]}" update -qq
  # shellcheck disable=SC2086
  [ -z "$need" ] || "${APT[@]}" install -y -qq --no-install-recommends $need
  for p in $want; do
    "${APT[@]}" install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 \
      || echo "setup: optional package $p is not available here; continuing without it"
  done
else
  echo "setup: all packages present"
fi
[ $deps_only = 1 ] && exit 0

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
echo "setup: built build/numallm"
