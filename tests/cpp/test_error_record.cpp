// The device error record (include/fuseops/error.h): fuseops::detail::check_index_range records bad
// values without raising; check_errors() raises Error(device_value) naming the op, the argument and the FIRST bad
// index, then clears; clear_errors() drops the record. FUSEOPS_DEBUG=1 makes the op itself raise; debug_mode() is
// read once per process, so that is tested by running this binary again with the variable set.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/index_check.h"
#include "fuseops/activation.h"
#include "fuseops/gdn_forward.h"
#include "test_util.h"

namespace fuseops_test {
namespace {

using fuseops::Device;
using fuseops::ErrorKind;

#define SKIP_IN_DEBUG_MODE() \
  if (fuseops::debug_mode()) GTEST_SKIP() << "FUSEOPS_DEBUG is set: ops raise at once (see DebugMode.*)"

TEST(ErrorRecord, CpuReportsOpArgumentAndFirstBadIndex) {
  SKIP_IN_DEBUG_MODE();
  fuseops::clear_errors();
  std::vector<int32_t> ids = {0, 3, 1, 2, 4, -1, 3, 99, -7};  // bound 4: bad at 4, 5, 7, 8
  fuseops::detail::check_index_range("test_op", "expert_ids", TensorView(ids.data(), DType::i32, Device::cpu(), {9}), 4);
  const std::string msg = take_device_error();
  EXPECT_NE(msg.find("test_op: expert_ids: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("at index 4 ("), std::string::npos) << msg;
  EXPECT_NO_THROW(fuseops::check_errors());  // the record was cleared by the first check
}

TEST(ErrorRecord, StridedViewReportsLogicalIndex) {
  SKIP_IN_DEBUG_MODE();
  fuseops::clear_errors();
  std::vector<int64_t> ids = {0, -1, 1, -1, 2, -1, 7, -1, 1, -1};  // stride 2: values 0 1 2 7 1
  fuseops::detail::check_index_range("test_op", "positions",
                                     TensorView(ids.data(), DType::i64, Device::cpu(), {5}, {2}), 3);
  const std::string msg = take_device_error();
  EXPECT_NE(msg.find("test_op: positions: value out of range at index 3 ("), std::string::npos) << msg;
}

TEST(ErrorRecord, FirstSiteWinsAndSmallestIndexIsKept) {
  SKIP_IN_DEBUG_MODE();
  fuseops::clear_errors();
  std::vector<int32_t> a = {0, 0, 0, 0, 0, 9}, b = {9, 0, 0, 9, 0, 0}, c = {9, 0, 0, 0, 0, 0};
  auto view = [](std::vector<int32_t>& v) { return TensorView(v.data(), DType::i32, Device::cpu(), {6}); };
  fuseops::detail::check_index_range("op_a", "ids", view(a), 4);  // site (op_a, ids): index 5
  fuseops::detail::check_index_range("op_b", "ids", view(c), 4);  // another site: ignored, the first site wins
  fuseops::detail::check_index_range("op_a", "ids", view(b), 4);  // same site: index 0 is smaller
  const std::string msg = take_device_error();
  EXPECT_NE(msg.find("op_a: ids: value out of range at index 0 ("), std::string::npos) << msg;
}

TEST(ErrorRecord, ClearErrorsDropsTheRecord) {
  SKIP_IN_DEBUG_MODE();
  std::vector<int32_t> ids = {5};
  fuseops::detail::check_index_range("test_op", "ids", TensorView(ids.data(), DType::i32, Device::cpu(), {1}), 4);
  fuseops::clear_errors();
  EXPECT_NO_THROW(fuseops::check_errors());
}

TEST(ErrorRecord, ArgumentValidation) {
  std::vector<float> f(4);
  std::vector<int32_t> i(4);
  auto expect = [](const std::function<void()>& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "did not throw";
    } catch (const fuseops::Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect([&] { fuseops::detail::check_index_range("op", "ids", TensorView(f.data(), DType::f32, Device::cpu(), {4}), 4); },
         "op: ids: expected dtype i32 | i64");
  expect([&] { fuseops::detail::check_index_range("op", "ids", TensorView(i.data(), DType::i32, Device::cpu(), {2, 2}), 4); },
         "op: ids: expected rank 1");
  EXPECT_NO_THROW(fuseops::detail::check_index_range("op", "ids", TensorView(nullptr, DType::i32, Device::cpu(), {0}), 4));
  EXPECT_NO_THROW(fuseops::check_errors());
  // the device argument: -1 (every device) or an ordinal; below -1 was read as -1
  expect([&] { fuseops::check_errors(-7); }, "check_errors: device: expected -1 (every device that ran an op) or a "
                                             "CUDA device ordinal >= 0, got -7");
  expect([&] { fuseops::clear_errors(-2); }, "clear_errors: device: expected -1");
}

TEST(ErrorRecord, CudaReportsFirstBadIndexAcrossThreads) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  SKIP_IN_DEBUG_MODE();
  fuseops::clear_errors();
  const int64_t n = (1 << 20) + 17;
  HostTensor ids(DType::i32, {n});
  for (int64_t k = 0; k < n; ++k) ids.set(0, k, static_cast<float>(k % 1000));
  for (int64_t bad : std::initializer_list<int64_t>{777777, 123457, 1000000, n - 1}) ids.set(0, bad, 1000.0f + static_cast<float>(bad % 7));
  ids.set(0, 200000, -3.0f);
  ft::DeviceTensor dev(ids);
  fuseops::detail::check_index_range("test_op", "token_ids", dev.view(), 1000);
  const std::string msg = take_device_error(0);
  EXPECT_NE(msg.find("test_op: token_ids: value out of range at index 123457 ("), std::string::npos) << msg;
  EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
  EXPECT_NO_THROW(fuseops::check_errors());
  // Recorded again, then cleared without raising.
  fuseops::detail::check_index_range("test_op", "token_ids", dev.view(), 1000);
  fuseops::clear_errors(0);
  EXPECT_NO_THROW(fuseops::check_errors(0));
  // Clean values record nothing.
  HostTensor clean(DType::i64, {n});
  for (int64_t k = 0; k < n; ++k) clean.set(0, k, static_cast<float>(k % 1000));
  ft::DeviceTensor clean_dev(clean);
  fuseops::detail::check_index_range("test_op", "token_ids", clean_dev.view(), 1000);
  EXPECT_NO_THROW(fuseops::check_errors());
}

// ---------------------------------------------------------------------------------------------------------------
// FUSEOPS_DEBUG. The first test runs only in a process started with FUSEOPS_DEBUG=1 (the second test starts one);
// FUSEOPS_TEST_EXPECT_DEBUG=1 makes it fail, instead of skip, when debug mode did not turn on.

// The FUSEOPS_DEBUG values that turn debug mode on: "a non-zero value" (error.h), so every spelling of zero is off.
TEST(DebugMode, ValueParsing) {
  for (const char* off : {"", " ", "0", "00", "+0", "-0", "0.0", ".0", "0.", " 0", "0 ", "0e3", "0E-7", "false",
                          "False", "OFF", "no"}) {
    EXPECT_FALSE(fuseops::detail::debug_value_on(off)) << "'" << off << "'";
  }
  for (const char* on : {"1", "01", " 1 ", "2", "-1", "0.5", "1e-400", "true", "on", "yes", "debug", "0x0", "0 0",
                         "nan", "inf", ".", "+", "0e", "0,0", "e0"}) {
    EXPECT_TRUE(fuseops::detail::debug_value_on(on)) << "'" << on << "'";
  }
}

TEST(DebugMode, OpRaisesAtTheOp) {
  if (!fuseops::debug_mode()) {
    const char* expect = std::getenv("FUSEOPS_TEST_EXPECT_DEBUG");
    if (expect && std::string(expect) == "1") FAIL() << "FUSEOPS_DEBUG is set but debug_mode() is false";
    GTEST_SKIP() << "runs with FUSEOPS_DEBUG=1 only (started by DebugMode.SubprocessWithFuseopsDebug)";
  }
  fuseops::clear_errors();
  std::vector<int32_t> ids = {0, 1, 8, 2, 9};
  try {
    fuseops::detail::check_index_range("test_op", "ids", TensorView(ids.data(), DType::i32, Device::cpu(), {5}), 4);
    ADD_FAILURE() << "check_index_range did not raise in debug mode";
  } catch (const fuseops::Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::device_value);
    EXPECT_NE(std::string(e.what()).find("test_op: ids: value out of range at index 2 ("), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(fuseops::check_errors());
  // Ops whose CPU kernels record a bad device value raise it themselves: a masked activation (masked_m past T_max)
  // and the pool-form decode (a pool index past S).
  const auto raises_at_op = [](const char* what, const auto& call, const std::string& message) {
    try {
      call();
      ADD_FAILURE() << what << " did not raise in debug mode";
    } catch (const fuseops::Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::device_value) << what;
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(fuseops::check_errors()) << what;
  };
  {
    std::vector<float> in(2 * 2 * 8, 0.5f), out(2 * 2 * 4, 0.f);
    std::vector<int32_t> m = {3, 1};
    raises_at_op(
        "silu_and_mul_masked",
        [&] {
          fuseops::silu_and_mul_masked(TensorView(out.data(), DType::f32, Device::cpu(), {2, 2, 4}),
                                       TensorView(in.data(), DType::f32, Device::cpu(), {2, 2, 8}),
                                       TensorView(m.data(), DType::i32, Device::cpu(), {2}));
        },
        "silu_and_mul_masked: masked_m: value out of range at index 0 (the index is the expert e: expected a count "
        "in [0, T_max]; it is clamped to that range)");
  }
  {
    std::vector<float> q(2 * 4, 0.25f), v(2 * 4, 1.f), o(2 * 4, 0.f), pool(1 * 4 * 4, 0.f);
    std::vector<int64_t> idx = {0, 5};
    raises_at_op(
        "fused_recurrent_gated_delta_rule_update",
        [&] {
          const TensorView qv(q.data(), DType::f32, Device::cpu(), {2, 1, 1, 4});
          fuseops::fused_recurrent_gated_delta_rule_update(
              TensorView(o.data(), DType::f32, Device::cpu(), {2, 1, 1, 4}),
              TensorView(pool.data(), DType::f32, Device::cpu(), {1, 1, 4, 4}), qv, qv,
              TensorView(v.data(), DType::f32, Device::cpu(), {2, 1, 1, 4}), nullptr, nullptr, std::nullopt,
              TensorView(idx.data(), DType::i64, Device::cpu(), {2}));
        },
        "fused_recurrent_gated_delta_rule_update: ssm_state_indices: value out of range at index 1 (");
  }
  if (cuda_available()) {
    HostTensor host(DType::i64, {5});
    for (int k = 0; k < 5; ++k) host.set(0, k, static_cast<float>(ids[k]));
    ft::DeviceTensor dev(host);
    try {
      fuseops::detail::check_index_range("test_op", "ids", dev.view(), 4);
      ADD_FAILURE() << "check_index_range on CUDA did not raise in debug mode";
    } catch (const fuseops::Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::device_value);
      EXPECT_NE(std::string(e.what()).find("at index 2 ("), std::string::npos) << e.what();
    }
    // A clean op still runs (and synchronises) in debug mode.
    std::mt19937_64 rng = test_rng();
    check_op(all_ops()[0], Where::cuda, DType::bf16, {33}, 100, Layout::pitched, ft::Fill::adversarial, rng);
  }
}

TEST(DebugMode, SubprocessWithFuseopsDebug) {
  if (fuseops::debug_mode()) GTEST_SKIP() << "already in debug mode";
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0) GTEST_SKIP() << "cannot find this executable through /proc/self/exe";
  exe[len] = '\0';
  const std::string log = ::testing::TempDir() + "fuseops_debug_" + std::to_string(getpid()) + ".log";
  auto run = [&](const std::string& debug, const std::string& expect) {
    const std::string cmd = "FUSEOPS_DEBUG=" + debug + " FUSEOPS_TEST_EXPECT_DEBUG=" + expect +
                            " FUSEOPS_SEED=" + std::to_string(run_seed()) + " '" + exe +
                            "' --gtest_filter=DebugMode.OpRaisesAtTheOp > '" + log + "' 2>&1";
    const int status = std::system(cmd.c_str());
    std::ifstream in(log);
    std::stringstream out;
    out << in.rdbuf();
    std::remove(log.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << cmd << "\n" << out.str();
    return out.str();
  };
  const std::string on = run("1", "1");
  EXPECT_NE(on.find("[       OK ] DebugMode.OpRaisesAtTheOp"), std::string::npos) << on;
  EXPECT_NE(on.find("FUSEOPS_DEBUG on"), std::string::npos) << on;
  const std::string off = run("0", "0");  // "0" means off
  EXPECT_NE(off.find("[  SKIPPED ] DebugMode.OpRaisesAtTheOp"), std::string::npos) << off;
}

}  // namespace
}  // namespace fuseops_test
