#!/usr/bin/env bash
# Builds the binaries the GPU machine runs (its image lacks GoogleTest, CLI11 and nlohmann-json) into
# .carry/bin (git-ignored): `fuseops` and `fuseops_tests`, for the architectures in $1 (default 90a).
set -euo pipefail
cd "$(dirname "$0")/.."
archs=${1:-90a}
FUSEOPS_BUILD_DIR=build-carry scripts/build.sh -DFUSEOPS_CUDA_ARCHS="$archs" -DFUSEOPS_TIME_COMPILE=OFF
mkdir -p .carry/bin
cp build-carry/tools/fuseops/fuseops build-carry/tests/cpp/fuseops_tests .carry/bin/
ls -la .carry/bin
