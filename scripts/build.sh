#!/usr/bin/env bash
# Configures and builds fuseops into ${FUSEOPS_BUILD_DIR:-build} (CUDA backend when nvcc is found;
# FUSEOPS_WITH_CUDA=OFF or ON in the environment decides instead, as for scripts/test.sh).
# Extra arguments go to cmake's configure step, e.g. -DFUSEOPS_CUDA_ARCHS="80;90a".
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
build=${FUSEOPS_BUILD_DIR:-build}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cuda=()
[ -n "${FUSEOPS_WITH_CUDA:-}" ] && cuda=(-DFUSEOPS_WITH_CUDA="$FUSEOPS_WITH_CUDA")
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" "$@"
elif [ $# -gt 0 ] || [ ${#cuda[@]} -gt 0 ]; then
  cmake "$build" "${cuda[@]}" "$@"
fi
cmake --build "$build" --parallel "$(nproc)"
