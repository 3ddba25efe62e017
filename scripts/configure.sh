#!/usr/bin/env bash
# Configures ${FUSEOPS_BUILD_DIR:-build} the one way scripts/build.sh and scripts/test.sh share, so that running one
# after the other rebuilds nothing. A new build directory gets Ninja (when found), Release, the tests, per-file compile
# times (FUSEOPS_TIME_COMPILE), FUSEOPS_CUDA_ARCHS=90a and the CUDA backend when nvcc is found (on the PATH or in
# /usr/local/cuda/bin); an existing one keeps its cache. Either way FUSEOPS_WITH_CUDA=OFF or ON and FUSEOPS_PYTHON in
# the environment and extra arguments (e.g. -DFUSEOPS_CUDA_ARCHS="80;90a") are applied.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d /usr/local/cuda/bin ] && export PATH="/usr/local/cuda/bin:$PATH"
build=${FUSEOPS_BUILD_DIR:-build}
cuda=()
[ -n "${FUSEOPS_WITH_CUDA:-}" ] && cuda=(-DFUSEOPS_WITH_CUDA="$FUSEOPS_WITH_CUDA")
# FUSEOPS_PYTHON: the interpreter whose torch the extension builds against and whose pytest runs tests/python (ctest
# fuseops_python_tests); the extension is then required (a configure error where it cannot be built, never a quiet
# skip); unset: python3 on the PATH, the extension and its tests only where it imports torch and torch's CMake package
# is found
[ -n "${FUSEOPS_PYTHON:-}" ] &&
  cuda+=(-DFUSEOPS_PYTHON="$FUSEOPS_PYTHON" -DFUSEOPS_BUILD_TORCH=ON -DFUSEOPS_REQUIRE_TORCH=ON)
if [ ! -f "$build/CMakeCache.txt" ]; then
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  detected=OFF
  command -v nvcc >/dev/null && detected=ON
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DFUSEOPS_WITH_CUDA="$detected" \
    -DFUSEOPS_CUDA_ARCHS=90a -DFUSEOPS_BUILD_TESTS=ON -DFUSEOPS_TIME_COMPILE=ON "${cuda[@]}" "$@"
elif [ $# -gt 0 ] || [ ${#cuda[@]} -gt 0 ]; then
  cmake "$build" "${cuda[@]}" "$@"
fi
