#!/usr/bin/env bash
# Configures (scripts/configure.sh: the same options as scripts/test.sh, so either may run first without a rebuild)
# and builds fuseops into ${FUSEOPS_BUILD_DIR:-build} (CUDA backend when nvcc is found; FUSEOPS_WITH_CUDA=OFF or ON in
# the environment decides instead). Extra arguments go to cmake's configure step, e.g. -DFUSEOPS_CUDA_ARCHS="80;90a".
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
scripts/configure.sh "$@"
cmake --build "${FUSEOPS_BUILD_DIR:-build}" --parallel "$(nproc)"
