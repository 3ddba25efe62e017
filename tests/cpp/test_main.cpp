// main() of fuseops_tests: prints the random seed once (inside the run, so `--gtest_list_tests` output stays
// clean for gtest_discover_tests) and says how to replay it.
#include <gtest/gtest.h>

#include <cstdio>

#include "test_util.h"

namespace {
class SeedEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    std::printf("fuseops_tests: FUSEOPS_SEED=%llu (set FUSEOPS_SEED to replay); fuseops %s, CUDA build %s, "
                "%d CUDA device(s), FUSEOPS_DEBUG %s\n",
                static_cast<unsigned long long>(fuseops_test::run_seed()), fuseops::version(),
                fuseops::built_with_cuda() ? "yes" : "no", fuseops::cuda_device_count(),
                fuseops::debug_mode() ? "on" : "off");
    std::fflush(stdout);
  }
};
}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new SeedEnvironment);
  return RUN_ALL_TESTS();
}
