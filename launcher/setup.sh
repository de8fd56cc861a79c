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

# Required to build and test.
required=(build-essential cmake ninja-build pkg-config
          libopenmpi-dev openmpi-bin libnuma-dev numactl libhwloc-dev hwloc
          python3 python3-numpy python3-regex libmicrohttpd-dev libjansson-dev curl)
# Wanted, but numallm builds and runs without them (each skip is reported): oneDNN (a matmul
# candidate), clang + its fuzzer runtime (the GGUF fuzz test).
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
  export DEBIAN_FRONTEND=noninteractive
  echo "setup: installing: $need $want"
  $SUDO apt-get update -qq
  # shellcheck disable=SC2086
  [ -z "$need" ] || $SUDO apt-get install -y -qq --no-install-recommends $need
  for p in $want; do
    $SUDO apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 \
      || echo "setup: optional package $p is not available here; continuing without it"
  done
else
  echo "setup: all packages present"
fi
[ $deps_only = 1 ] && exit 0

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
echo "setup: built build/numallm"
