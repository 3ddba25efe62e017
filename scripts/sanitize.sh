#!/usr/bin/env bash
# The host code under AddressSanitizer and UndefinedBehaviorSanitizer: a CPU-only build in
# ${FUSEOPS_BUILD_DIR:-build-asan} (no CUDA, no Python extension), then the C++ tests, the CLI tests and
# `fuseops check` on every built-in case set at 16 rows per case. Any report fails the run (halt_on_error). CI runs it
# after scripts/test.sh; the device side has compute-sanitizer (scripts/gpu.sh sanitizer).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${FUSEOPS_BUILD_DIR:-build-asan}
# Build type None: asserts on (no NDEBUG), and line tables only (-g1): reports still name file and line, and the
# build takes ~7 instead of ~11 minutes on 2 cores (full -g of the Debug type).
flags="-fsanitize=address,undefined -fno-omit-frame-pointer"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=None -DFUSEOPS_WITH_CUDA=OFF -DFUSEOPS_BUILD_TESTS=ON \
  -DFUSEOPS_TIME_COMPILE=OFF -DFUSEOPS_BUILD_TORCH=OFF -DCMAKE_CXX_FLAGS="$flags -O1 -g1" \
  -DCMAKE_EXE_LINKER_FLAGS="$flags" -DCMAKE_SHARED_LINKER_FLAGS="$flags"
cmake --build "$build" --parallel "$(nproc)" --target fuseops_tests fuseops_cli_tests fuseops_cli
export ASAN_OPTIONS=detect_leaks=0:halt_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
"$build/tests/cpp/fuseops_tests" --gtest_brief=1
"$build/tools/fuseops/tests/fuseops_cli_tests" --gtest_brief=1
"$build/tools/fuseops/fuseops" check --backend cpu --quiet --cpu-rows 16 > "$build/check.log"
tail -n 1 "$build/check.log"
