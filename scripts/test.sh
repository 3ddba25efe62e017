#!/usr/bin/env bash
# Builds fuseops and runs its tests: configures and builds ${FUSEOPS_BUILD_DIR:-build} through scripts/build.sh (the
# same configuration as a plain build: Ninja, Release, tests, per-file compile times, the CUDA backend for
# FUSEOPS_CUDA_ARCHS=90a when nvcc is found), byte-compiles python/ when it exists, then runs ctest (CUDA tests skip
# with a printed reason on a machine without a GPU). FUSEOPS_WITH_CUDA=OFF (or ON) in the environment overrides the
# nvcc detection (a CPU-only build on a machine with a CUDA toolkit). Replay a run's random inputs with
# FUSEOPS_SEED=<the seed it printed> (decimal; empty counts as unset).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${FUSEOPS_BUILD_DIR:-build}
scripts/build.sh
if [ -d python ]; then
  python3 -m compileall -q python
fi
ctest --test-dir "$build" --output-on-failure --parallel "$(nproc)"
