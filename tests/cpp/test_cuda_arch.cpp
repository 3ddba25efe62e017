// cuda_code_arch (common/cuda_arch.h): which compiled code runs on a device, the rule that gates clusters and PDL.
#include <gtest/gtest.h>

#include "common/cuda_arch.h"

namespace fuseops_test {
namespace {

using fuseops::detail::cuda_code_arch;
using fuseops::detail::cuda_code_is_sm90a;

TEST(CudaArch, BinaryOfTheDeviceWins) {
  EXPECT_EQ(cuda_code_arch("90a", 9, 0), 90);       // the default build on an H100 / H200
  EXPECT_EQ(cuda_code_arch("80;90a", 9, 0), 90);
  EXPECT_EQ(cuda_code_arch("80,90a", 9, 0), 90);
  EXPECT_EQ(cuda_code_arch("80;90a;100a", 10, 0), 100);
  EXPECT_EQ(cuda_code_arch("80", 8, 6), 80);        // sm_80 runs on later minors of major 8
  EXPECT_EQ(cuda_code_arch("80;86", 8, 9), 86);
}

TEST(CudaArch, OlderPtxIsCompiledWhereNoBinaryRuns) {
  EXPECT_EQ(cuda_code_arch("80", 9, 0), 80);        // compute_80 PTX on an H200: no clusters in that code
  EXPECT_EQ(cuda_code_arch("80;90a", 10, 0), 80);   // sm_90a / compute_90a run on 9.0 only
  EXPECT_EQ(cuda_code_arch("80-real;90", 10, 0), 90);
  EXPECT_EQ(cuda_code_arch("90-virtual", 9, 0), 90);
  EXPECT_EQ(cuda_code_arch("90", 10, 0), 90);
}

TEST(CudaArch, NothingRunsOrUnreadable) {
  EXPECT_EQ(cuda_code_arch("90a", 10, 0), 0);
  EXPECT_EQ(cuda_code_arch("90a", 8, 0), 0);
  EXPECT_EQ(cuda_code_arch("80-real", 9, 0), 0);
  EXPECT_EQ(cuda_code_arch("100", 9, 0), 0);
  EXPECT_EQ(cuda_code_arch("native", 9, 0), -1);
  EXPECT_EQ(cuda_code_arch("all-major", 9, 0), -1);
  EXPECT_EQ(cuda_code_arch("", 9, 0), -1);
  EXPECT_EQ(cuda_code_arch("90-fat", 9, 0), -1);
}

TEST(CudaArch, FamilyCode) {
  EXPECT_EQ(cuda_code_arch("100f", 10, 3), 100);
  EXPECT_EQ(cuda_code_arch("100f", 12, 0), 0);
}

// wgmma kernels run only where the driver picks sm_90a code: 9.0 devices, a "90a" entry, no plain sm_90 code of the
// same kind beside it (the driver's choice between the two is not documented).
TEST(CudaArch, Sm90aCode) {
  EXPECT_TRUE(cuda_code_is_sm90a("90a", 9, 0));
  EXPECT_TRUE(cuda_code_is_sm90a("80;90a", 9, 0));
  EXPECT_TRUE(cuda_code_is_sm90a("80;90a;100a", 9, 0));
  EXPECT_TRUE(cuda_code_is_sm90a("80-real;90a-virtual", 9, 0));  // compute_90a PTX compiled by the driver
  EXPECT_FALSE(cuda_code_is_sm90a("90", 9, 0));
  EXPECT_FALSE(cuda_code_is_sm90a("90;90a", 9, 0));
  EXPECT_FALSE(cuda_code_is_sm90a("90-real;90a-virtual", 9, 0));  // sm_90 SASS runs, not the 90a PTX
  EXPECT_FALSE(cuda_code_is_sm90a("80", 9, 0));
  EXPECT_FALSE(cuda_code_is_sm90a("90a", 10, 0));
  EXPECT_FALSE(cuda_code_is_sm90a("90a", 8, 0));
  EXPECT_FALSE(cuda_code_is_sm90a("native", 9, 0));
}

}  // namespace
}  // namespace fuseops_test
