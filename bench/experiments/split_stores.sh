#!/usr/bin/env bash
# Device A/B for branch split-stores: stores the compiler split into 4-byte pieces, made whole (store_global_whole).
# Needs, built here with scripts/build-carry.sh and carried (carry [".pack"]):
#   .pack/bin.tar.xz       this branch's fuseops + fuseops_tests (scripts/build-carry.sh packs it)
#   .pack/fuseops-base.xz  main's fuseops, stripped: strip -o /tmp/b build-carry/tools/fuseops/fuseops && xz -c /tmp/b
# Runs: the tests of the changed kernels, memcheck of a reduced set, check on CUDA of the affected sets, then
# bench A/B (2 runs each, binaries alternating; bench/ab.py medians) of the sets whose kernels changed.
set -uo pipefail
cd "$(dirname "$0")/../.."
rm -rf .carry && mkdir -p .carry && tar xJf .pack/bin.tar.xz -C .carry
B=.carry/bin
xz -dc .pack/fuseops-base.xz > /tmp/fuseops-base && chmod +x /tmp/fuseops-base
t0=$SECONDS
timeout 150 $B/fuseops_tests --gtest_color=no \
  --gtest_filter='*Activation*:*Norm*:*Rope*:Backends/GdnForward.*L2Norm*' > $OUT/tests.log 2>&1
echo "tests rc=$? $((SECONDS-t0)) s"; grep -E "^\[  (PASSED|FAILED) \]|FAILED  " $OUT/tests.log | head
timeout 90 compute-sanitizer --tool memcheck --error-exitcode 3 $B/fuseops_tests --gtest_color=no \
  --gtest_filter='All/ActivationMasked.*cuda_bf16:All/NormAccuracy.*cuda_bf16:All/RopeAccuracy.*cuda_bf16*' \
  > $OUT/memcheck.log 2>&1; echo "memcheck rc=$?"; tail -1 $OUT/memcheck.log
timeout 90 $B/fuseops check --backend cuda --quiet --set norm --set llama3-8b --set flagos --set moe-masked \
  > $OUT/check.log 2>&1; echo "check rc=$?"; tail -2 $OUT/check.log
t0=$SECONDS
sets="--set norm --set moe-masked --set flagos --set llama3-8b --set gdn-prefill"
for r in 1 2; do
  timeout 100 /tmp/fuseops-base bench --quiet $sets --md /tmp/base$r.md > /dev/null 2>&1
  timeout 100 $B/fuseops bench --quiet $sets --md /tmp/new$r.md > /dev/null 2>&1
done
python3 bench/ab.py $OUT/ab.md base=/tmp/base1.md base=/tmp/base2.md new=/tmp/new1.md new=/tmp/new2.md
echo "ab $((SECONDS-t0)) s"; cut -d'|' -f2-4,7,9,10 $OUT/ab.md
