// Every validation error of the gated norm: fuseops::Error (invalid_argument) whose message names the op and the
// argument. All on CPU buffers.
#include <vector>

#include "test_util.h"

namespace fuseops_test {
namespace {

using fuseops::Device;

class NormErrors : public ::testing::Test {
 protected:
  NormErrors() : x_(1 << 12), z_(1 << 12), out_(1 << 12), w_(1 << 10), b_(1 << 10), st_(1 << 10), st2_(1 << 10) {}
  TensorView v(std::vector<float>& buf, std::initializer_list<int64_t> shape, DType dt = DType::f32, int64_t off = 0) {
    return TensorView(buf.data() + off, dt, Device::cpu(), shape);
  }
  /// layer_norm_fwd on [4, 64] f32 with every optional argument, one of them replaced by the caller.
  void call(TensorView out, TensorView x, TensorView w, const TensorView* bias, const TensorView* z,
            const TensorView* mean, const TensorView* rstd, int64_t group_size = 16, double eps = 1e-6,
            bool rms = false) {
    fuseops::layer_norm_fwd(out, mean, rstd, x, w, bias, z, eps, group_size, true, rms);
  }
  std::vector<float> x_, z_, out_, w_, b_, st_, st2_;
};

TEST_F(NormErrors, EveryArgument) {
  const TensorView x = v(x_, {4, 64}), out = v(out_, {4, 64}), z = v(z_, {4, 64}), w = v(w_, {64}), b = v(b_, {64});
  const TensorView mean = v(st_, {16}), rstd = v(st2_, {16});
  EXPECT_NO_THROW(call(out, x, w, &b, &z, &mean, &rstd));
  const char* op = "layer_norm_fwd";
  // x
  EXPECT_ARG_ERROR(call(out, v(x_, {4, 64}, DType::i32), w, &b, &z, &mean, &rstd), op, "x", "got i32");
  EXPECT_ARG_ERROR(call(v(out_, {}), v(x_, {}), w, nullptr, nullptr, nullptr, nullptr, 0), op, "x", "rank");
  EXPECT_ARG_ERROR(call(v(out_, {4, 0}), v(x_, {4, 0}), v(w_, {0}), nullptr, nullptr, nullptr, nullptr, 0), op, "x",
                   "N >= 1");
  EXPECT_ARG_ERROR(call(out, TensorView(x_.data(), DType::f32, Device::cpu(), {4, 64}, {128, 2}), w, &b, &z, &mean,
                        &rstd),
                   op, "x", "innermost stride 1");
  // a malformed x (its public fields) is named before out is compared to it, and its shape is not read past its rank
  for (int how = 0; how < kMalformedWays; ++how) {
    EXPECT_ARG_ERROR(call(out, malformed(x, how, 0), w, &b, &z, &mean, &rstd), op, "x", malformed_message(how));
    const TensorView zbad = malformed(z, how, 0);
    EXPECT_ARG_ERROR(call(out, x, w, &b, &zbad, &mean, &rstd), op, "z", malformed_message(how));
  }
  {
    TensorView huge = x;
    huge.shape[0] = int64_t{1} << 62;
    EXPECT_ARG_ERROR(call(out, huge, w, &b, &z, &mean, &rstd), op, "x", "fits in 64 bits");
  }
  // out
  EXPECT_ARG_ERROR(call(v(out_, {4, 64}, DType::bf16), x, w, &b, &z, &mean, &rstd), op, "out", "got bf16");
  EXPECT_ARG_ERROR(call(v(out_, {4, 32}), x, w, &b, &z, &mean, &rstd), op, "out", "[4, 64]");
  EXPECT_ARG_ERROR(call(v(x_, {4, 64}, DType::f32, 8), x, w, &b, &z, &mean, &rstd), op, "out", "overlap");
  // z
  const TensorView z_bad = v(z_, {4, 63}), z_f16 = v(z_, {4, 64}, DType::f16);
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z_bad, &mean, &rstd), op, "z", "[4, 64]");
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z_f16, &mean, &rstd), op, "z", "got f16");
  const TensorView z_out = v(out_, {4, 64});
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z_out, &mean, &rstd), op, "out", "overlap");
  // weight, bias
  EXPECT_ARG_ERROR(call(out, x, v(w_, {32}), &b, &z, &mean, &rstd), op, "weight", "[64]");
  EXPECT_ARG_ERROR(call(out, x, v(w_, {64}, DType::i64), &b, &z, &mean, &rstd), op, "weight", "f32");
  EXPECT_ARG_ERROR(call(out, x, TensorView(w_.data(), DType::f32, Device::cpu(), {64}, {2}), &b, &z, &mean, &rstd),
                   op, "weight", "stride 1");
  const TensorView b_bad = v(b_, {64, 1}), b_f16 = v(b_, {64}, DType::f16);
  EXPECT_ARG_ERROR(call(out, x, w, &b_bad, &z, &mean, &rstd), op, "bias", "[64]");
  EXPECT_ARG_ERROR(call(out, x, w, &b_f16, &z, &mean, &rstd), op, "bias", "f32 (the dtype of weight)", "got f16");
  // f32 x: one allowed dtype, said once
  EXPECT_ARG_ERROR(call(out, x, v(w_, {64}, DType::f16), &b, &z, &mean, &rstd), op, "weight",
                   "expected dtype f32 (the dtype of x), got f16");
  // bf16 x with an f16 weight: neither f32 nor x's dtype
  std::vector<float> xb(1 << 12), ob(1 << 12);
  EXPECT_ARG_ERROR(call(v(ob, {4, 64}, DType::bf16), v(xb, {4, 64}, DType::bf16), v(w_, {64}, DType::f16), nullptr,
                        nullptr, nullptr, nullptr),
                   op, "weight", "f32 or bf16");
  // group_size, eps
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z, &mean, &rstd, 24), op, "group_size", "divisor of N = 64", "got 24");
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z, &mean, &rstd, -1), op, "group_size");
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z, &mean, &rstd, 16, -1.0), op, "eps");
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z, &mean, &rstd, 16, std::nan("")), op, "eps");
  // eps is used in fp32: above its range, or nonzero and rounding to 0 there, is an error (0 itself is valid)
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z, &mean, &rstd, 16, 1e300), op, "eps", ">= 0", "finite in fp32", "got 1e+300");
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z, &mean, &rstd, 16, 1e-50), op, "eps", "finite in fp32", "got 1e-50");
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z, &mean, &rstd, 16, -2.5e-7), op, "eps", ">= 0", "got -2.5e-07");
  EXPECT_NO_THROW(call(out, x, w, &b, &z, &mean, &rstd, 16, 0.0));
  // mean, rstd
  const TensorView st_bad = v(st_, {15}), st_f16 = v(st_, {16}, DType::f16), st_x = v(x_, {16}, DType::f32, 4);
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z, &st_bad, &rstd), op, "mean", "[16]");
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z, &mean, &st_f16), op, "rstd", "f32");
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z, &mean, &st_x), op, "rstd", "overlap");
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z, &mean, &mean), op, "rstd", "overlap");
  EXPECT_ARG_ERROR(call(out, x, w, &b, &z, &mean, &rstd, 16, 1e-6, true), op, "mean", "RMSNorm");
  // one group larger than the on-chip limit
  std::vector<float> big(2 * 16385 + 8);
  EXPECT_ARG_ERROR(fuseops::layer_norm_fwd(v(big, {1, 16385}), nullptr, nullptr, v(big, {1, 16385}, DType::f32, 16385),
                                           v(w_, {16385}, DType::f32), nullptr, nullptr),
                   op, "x", "at most 16384");
}

TEST_F(NormErrors, RmsNormGatedNamesItself) {
  EXPECT_ARG_ERROR(fuseops::rms_norm_gated(v(out_, {4, 64}), nullptr, v(x_, {4, 64}), v(w_, {63})), "rms_norm_gated",
                   "weight");
}

TEST_F(NormErrors, CudaTensorWithoutCudaOrMixedDevices) {
  const TensorView x = v(x_, {4, 64}), out = v(out_, {4, 64}), w = v(w_, {64});
  TensorView wc = w;
  wc.device = Device::cuda(0);
  EXPECT_ARG_ERROR(call(out, x, wc, nullptr, nullptr, nullptr, nullptr), "layer_norm_fwd", "weight", "device");
}

}  // namespace
}  // namespace fuseops_test
