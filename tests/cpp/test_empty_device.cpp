// Empty tensors on a CUDA device this build or machine cannot run: the same error as with elements (`unsupported`
// without a CUDA build or device, `invalid_argument` naming the device past the last one), never a silent return
// because there is nothing to compute, and always under the name of the op called.
#include <functional>
#include <optional>
#include <string>

#include "test_util.h"

namespace fuseops_test {
namespace {

using fuseops::Device;
constexpr DType f32 = DType::f32, i32 = DType::i32, i64 = DType::i64;

TEST(EmptyTensors, OnACudaDeviceThatCannotRunAreAnError) {
  // cuda:N with N = the number of devices never exists. Views with elements point at host memory and are never read.
  const int n = fuseops::cuda_device_count();
  const Device dev = Device::cuda(n);
  const std::string name = "cuda:" + std::to_string(n);
  static float host[64];
  auto e = [&](std::initializer_list<int64_t> shape, DType dt = f32) { return TensorView(host, dt, dev, shape); };
  auto expect_device_error = [&](const char* op, const std::function<void()>& run) {
    SCOPED_TRACE(op);
    if (!fuseops::built_with_cuda()) {
      EXPECT_TRUE(raises(run, fuseops::ErrorKind::unsupported, {std::string(op) + ": ", name, "no CUDA backend"}));
    } else if (n == 0) {
      EXPECT_TRUE(raises(run, fuseops::ErrorKind::unsupported, {std::string(op) + ": ", name, "no CUDA device"}));
    } else {
      EXPECT_ARG_ERROR(run(), op, "device", "got " + name);
    }
  };
  expect_device_error("silu_and_mul", [&] { fuseops::silu_and_mul(e({0, 4}), e({0, 8})); });
  expect_device_error("silu_and_mul_backward", [&] {
    fuseops::silu_and_mul_backward(e({0, 4}), e({0, 4}), e({0, 4}), e({0, 4}), e({0, 4}));
  });
  expect_device_error("silu_and_mul_masked",
                      [&] { fuseops::silu_and_mul_masked(e({0, 2, 4}), e({0, 2, 8}), e({0}, i32)); });
  expect_device_error("layer_norm_fwd",
                      [&] { fuseops::layer_norm_fwd(e({0, 8}), nullptr, nullptr, e({0, 8}), e({8})); });
  expect_device_error("rotary_embedding",
                      [&] { fuseops::rotary_embedding(e({0}, i64), e({0, 8}), nullptr, 8, e({4, 8}), true); });
  expect_device_error("topk_softmax", [&] {
    fuseops::topk_softmax(e({0, 2}), e({0, 2}, i32), e({0, 2}, i32), e({0, 8}), false);
  });
  expect_device_error("chunk_local_cumsum", [&] { fuseops::chunk_local_cumsum(e({1, 0, 2}), e({1, 0, 2}), 16); });
  expect_device_error("chunk_scaled_dot_kkt_fwd", [&] {
    fuseops::chunk_scaled_dot_kkt_fwd(e({1, 0, 1, 16}), e({1, 0, 1, 16}), nullptr, nullptr, 16);
  });
  expect_device_error("solve_tril", [&] { fuseops::solve_tril(e({1, 0, 1, 16}), e({1, 0, 1, 16})); });
  // T = 0 with one sequence: its cu_seqlens is still checked, by chunk_local_cumsum's chunk walk (whose name the error
  // had borne).
  const TensorView cu = e({2}, i32);
  expect_device_error("fused_recurrent_gated_delta_rule", [&] {
    fuseops::fused_recurrent_gated_delta_rule(e({1, 0, 1, 4}), nullptr, e({1, 0, 1, 4}), e({1, 0, 1, 4}),
                                              e({1, 0, 1, 4}), nullptr, nullptr, std::nullopt, nullptr, false, &cu);
  });
  // No sequences in the pool form.
  expect_device_error("fused_recurrent_gated_delta_rule_update", [&] {
    fuseops::fused_recurrent_gated_delta_rule_update(e({0, 1, 1, 4}), e({2, 1, 4, 4}), e({0, 1, 1, 4}),
                                                     e({0, 1, 1, 4}), e({0, 1, 1, 4}), nullptr, nullptr, std::nullopt,
                                                     e({0}, i32));
  });
}

}  // namespace
}  // namespace fuseops_test
