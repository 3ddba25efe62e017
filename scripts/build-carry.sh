#!/usr/bin/env bash
# Builds the binaries the GPU machine runs (its image lacks GoogleTest, CLI11 and nlohmann-json) into
# .carry/bin (git-ignored): `fuseops` and `fuseops_tests`, for the architectures in $1 (default 90a). Also packs them
# (stripped, xz) with .baselines when present into .pack/ (git-ignored): the binaries and the baselines together pass
# the device machine's 64 MiB carry limit unpacked; scripts/gpu.sh unpacks .pack/ when .carry/bin is absent.
set -euo pipefail
cd "$(dirname "$0")/.."
archs=${1:-90a}
FUSEOPS_BUILD_DIR=build-carry scripts/build.sh -DFUSEOPS_CUDA_ARCHS="$archs" -DFUSEOPS_TIME_COMPILE=OFF
mkdir -p .carry/bin
cp build-carry/tools/fuseops/fuseops build-carry/tests/cpp/fuseops_tests .carry/bin/
strip .carry/bin/fuseops .carry/bin/fuseops_tests
mkdir -p .pack
tar cf - -C .carry bin | xz -6 -T0 > .pack/bin.tar.xz
[ -d .baselines ] && tar cf - .baselines | xz -6 -T0 > .pack/baselines.tar.xz
ls -la .carry/bin .pack
