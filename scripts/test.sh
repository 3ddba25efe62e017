#!/usr/bin/env bash
# Builds fuseops and runs its tests: configures ${FUSEOPS_BUILD_DIR:-build} (Ninja, CUDA backend for
# FUSEOPS_CUDA_ARCHS=90a when nvcc is found), builds with every core, byte-compiles python/ when it exists, then
# runs ctest (CUDA tests skip with a printed reason on a machine without a GPU). FUSEOPS_WITH_CUDA=OFF (or ON) in
# the environment overrides the nvcc detection (a CPU-only build on a machine with a CUDA toolkit). Replay a run's
# random inputs with FUSEOPS_SEED=<the seed it printed>.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
build=${FUSEOPS_BUILD_DIR:-build}
cuda=OFF
command -v nvcc >/dev/null && cuda=ON
cuda=${FUSEOPS_WITH_CUDA:-$cuda}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFUSEOPS_WITH_CUDA="$cuda" -DFUSEOPS_CUDA_ARCHS=90a \
  -DFUSEOPS_BUILD_TESTS=ON -DFUSEOPS_TIME_COMPILE=ON
cmake --build "$build" --parallel "$(nproc)"
if [ -d python ]; then
  python3 -m compileall -q python
fi
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)"
