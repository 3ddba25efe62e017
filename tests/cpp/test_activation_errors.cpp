// Every validation error of the gated activations: fuseops::Error of the right kind whose message names the
// op and the argument ("<op>: <arg>: expected ..., got ..."). All on CPU buffers; a view labelled cuda:N points at
// host memory, so nothing can be touched if validation wrongly passed it on to a backend... except by a crash.
#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

namespace fuseops_test {
namespace {

using fuseops::Device;
using fuseops::ErrorKind;
using fuseops::GeluApproximate;



constexpr DType f32 = DType::f32;
const Device cpu = Device::cpu();

class ActivationErrors : public ::testing::Test {
 protected:
  ActivationErrors() : buf_(1 << 14, 0.0f), other_(1 << 14, 0.0f) {}
  /// Views into two separate host buffers; p(i) and q(i) are element i of each, as f32.
  float* p(int64_t i = 0) { return buf_.data() + i; }
  float* q(int64_t i = 0) { return other_.data() + i; }
  TensorView v(void* data, std::initializer_list<int64_t> shape, DType dtype = f32, Device dev = cpu) {
    return TensorView(data, dtype, dev, shape);
  }
  TensorView s(void* data, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides) {
    return TensorView(data, f32, cpu, shape, strides);
  }
  std::vector<float> buf_, other_;
  std::vector<float> b3_ = std::vector<float>(1 << 12), b4_ = std::vector<float>(1 << 12),
                     b5_ = std::vector<float>(1 << 12);
};

TEST_F(ActivationErrors, WrongDtype) {
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}, DType::i32), v(q(), {4, 8}, DType::i32)), "silu_and_mul",
                   "input", "f32 | f16 | bf16", "got i32");
  EXPECT_ARG_ERROR(fuseops::gelu_and_mul_split(v(p(), {4, 4}), v(q(), {4, 4}, DType::i64), v(q(64), {4, 4})),
                   "gelu_and_mul_split", "gate", "got i64");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_backward(v(p(), {4}), v(p(8), {4}), v(q(), {4}, DType::i32), v(q(8), {4}),
                                                  v(q(16), {4})),
                   "silu_and_mul_backward", "dout");
}

TEST_F(ActivationErrors, MixedDtypes) {
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}, DType::f16), v(q(), {4, 8})), "silu_and_mul", "out",
                   "f32 (the dtype of input)", "got f16");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_split(v(p(), {4}), v(q(), {4}), v(q(8), {4}, DType::bf16)),
                   "silu_and_mul_split", "up");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_split(v(p(), {4}, DType::bf16), v(q(), {4}), v(q(8), {4})),
                   "silu_and_mul_split", "out");
  const char* names[] = {"dgate", "dup", "gate", "up"};
  for (int bad = 0; bad < 4; ++bad) {
    auto dt = [&](int i) { return i == bad ? DType::f16 : f32; };
    EXPECT_ARG_ERROR(fuseops::gelu_and_mul_backward(v(p(), {4}, dt(0)), v(p(8), {4}, dt(1)), v(q(), {4}),
                                                    v(q(8), {4}, dt(2)), v(q(16), {4}, dt(3))),
                     "gelu_and_mul_backward", names[bad], "got f16");
  }
}

TEST_F(ActivationErrors, FusedLastDimOddOrZero) {
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 3}), v(q(), {4, 7})), "silu_and_mul", "input",
                   "even last dim", "got 7");
  EXPECT_ARG_ERROR(fuseops::gelu_tanh_and_mul(v(p(), {4, 0}), v(q(), {4, 0})), "gelu_tanh_and_mul", "input", "got 0");
  EXPECT_ARG_ERROR(fuseops::gelu_and_mul(v(p(), {0}), v(q(), {1})), "gelu_and_mul", "input", "got 1");
}

TEST_F(ActivationErrors, ShapeMismatch) {
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 3}), v(q(), {4, 8})), "silu_and_mul", "out", "[4, 4]", "[4, 3]");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {5, 4}), v(q(), {4, 8})), "silu_and_mul", "out");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {16}), v(q(), {4, 8})), "silu_and_mul", "out");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {2, 2, 4}), v(q(), {4, 8})), "silu_and_mul", "out");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_split(v(p(), {4, 4}), v(q(), {4, 4}), v(q(64), {4, 5})),
                   "silu_and_mul_split", "up");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_split(v(p(), {3, 4}), v(q(), {4, 4}), v(q(64), {4, 4})),
                   "silu_and_mul_split", "out");
  const char* names[] = {"dgate", "dup", "gate", "up"};
  for (int bad = 0; bad < 4; ++bad) {
    auto at = [&](float* data, int i) {  // [3, 4], or [3, 5] for the bad argument
      return i == bad ? v(data, {3, 5}) : v(data, {3, 4});
    };
    EXPECT_ARG_ERROR(fuseops::silu_and_mul_backward(at(p(), 0), at(p(64), 1), v(q(), {3, 4}), at(q(64), 2),
                                                    at(q(128), 3)),
                     "silu_and_mul_backward", names[bad]);
  }
}

TEST_F(ActivationErrors, RankZero) {
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {}), v(q(), {})), "silu_and_mul", "input", "rank");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {}), v(q(), {4, 8})), "silu_and_mul", "out");
  EXPECT_ARG_ERROR(fuseops::gelu_and_mul_split(v(p(), {}), v(q(), {}), v(q(8), {})), "gelu_and_mul_split", "gate",
                   "rank");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_backward(v(p(), {}), v(p(8), {}), v(q(), {}), v(q(8), {}), v(q(16), {})),
                   "silu_and_mul_backward", "dout", "rank");
}

// Empty views whose leading dims alone overflow int64: no row count is formed by wrapping (UBSan: signed overflow).
// With a zero leading dim there are no rows; with only the last dim zero the rows do not fit and are refused.
TEST_F(ActivationErrors, EmptyViewsWithHugeLeadingDims) {
  constexpr int64_t big = int64_t{1} << 40;
  EXPECT_NO_THROW(fuseops::silu_and_mul(v(p(), {big, big, 0, 2}), v(q(), {big, big, 0, 4})));
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_backward(v(p(), {big, big, 0}), v(p(1), {big, big, 0}),
                                                  v(q(), {big, big, 0}), v(q(1), {big, big, 0}),
                                                  v(q(2), {big, big, 0})),
                   "silu_and_mul_backward", "dgate", "leading dims whose product fits in 64 bits");
}

TEST_F(ActivationErrors, InnermostStrideNotOne) {
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}), s(q(), {4, 8}, {16, 2})), "silu_and_mul", "input",
                   "innermost stride 1");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(s(p(), {4, 4}, {8, 2}), v(q(), {4, 8})), "silu_and_mul", "out");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_split(v(p(), {4, 4}), v(q(), {4, 4}), s(q(64), {4, 4}, {4, -1})),
                   "silu_and_mul_split", "up");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_backward(v(p(), {4, 4}), s(p(64), {4, 4}, {1, 4}), v(q(), {4, 4}),
                                                  v(q(64), {4, 4}), v(q(128), {4, 4})),
                   "silu_and_mul_backward", "dup");
  // A size-1 innermost dim may have any stride.
  EXPECT_NO_THROW(fuseops::silu_and_mul_split(s(p(), {4, 1}, {1, 7}), v(q(), {4, 1}), v(q(64), {4, 1})));
}

TEST_F(ActivationErrors, LeadingDimsNotOneRowStride) {
  // [2, 3, 8] whose outer stride is not 3 * 8: the rows are not evenly spaced.
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {2, 3, 4}), s(q(), {2, 3, 8}, {100, 8, 1})), "silu_and_mul", "input",
                   "one row stride");
  // A transposed view of the leading dims.
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(s(p(), {3, 2, 4}, {4, 12, 1}), v(q(), {3, 2, 8})), "silu_and_mul", "out",
                   "one row stride");
  // Rows closer together than their width overlap.
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}), s(q(), {4, 8}, {4, 1})), "silu_and_mul", "input",
                   "must not overlap");
  // Size-1 dims and a padded outer stride that still nests are fine.
  EXPECT_NO_THROW(fuseops::silu_and_mul(s(p(), {2, 1, 3, 4}, {36, 999, 12, 1}), s(q(), {2, 1, 3, 8}, {48, 5, 16, 1})));
}

TEST_F(ActivationErrors, OutputOverlapsInput) {
  // Same start.
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}), v(p(), {4, 8})), "silu_and_mul", "out",
                   "no overlap with input");
  // Partial: out starts inside the last row of input.
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(30), {4, 4}), v(p(), {4, 8})), "silu_and_mul", "out");
  // Interleaved rows of one buffer (pitch 12): out in input's padding is fine, one column into input is not.
  EXPECT_NO_THROW(fuseops::silu_and_mul(s(p(8), {4, 4}, {12, 1}), s(p(), {4, 8}, {12, 1})));
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(s(p(7), {4, 4}, {12, 1}), s(p(), {4, 8}, {12, 1})), "silu_and_mul", "out");
  EXPECT_NO_THROW(fuseops::silu_and_mul(s(p(), {4, 4}, {12, 1}), s(p(4), {4, 8}, {12, 1})));
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(s(p(), {4, 4}, {12, 1}), s(p(3), {4, 8}, {12, 1})), "silu_and_mul", "out");
  // Split: out over gate, out over up; gate and up may overlap each other (both are read only).
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_split(v(p(), {4, 4}), v(p(), {4, 4}), v(q(), {4, 4})), "silu_and_mul_split",
                   "out", "no overlap with gate");
  EXPECT_ARG_ERROR(fuseops::gelu_and_mul_split(v(p(2), {4, 4}), v(q(), {4, 4}), v(p(), {4, 4})), "gelu_and_mul_split",
                   "out", "no overlap with up");
  EXPECT_NO_THROW(fuseops::silu_and_mul_split(v(p(), {4, 4}), v(q(), {4, 4}), v(q(), {4, 4})));
  // Proven overlap (equal row strides) reads "overlapping memory"; with unequal row strides the test is the address
  // ranges', and the message says so (out's rows [8, 12) and [48, 52) share no element with input's [0, 8) and
  // [24, 32), but their ranges meet).
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}), v(p(), {4, 8})), "silu_and_mul", "out", "got overlapping memory");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(s(p(8), {2, 4}, {40, 1}), s(p(), {2, 8}, {24, 1})), "silu_and_mul", "out",
                   "overlapping address ranges (row strides 40 and 24 elements; the test is exact for equal row "
                   "strides, conservative otherwise)");
}

TEST_F(ActivationErrors, GradientsOverlap) {
  float* dout = b3_.data();
  float* gate = b4_.data();
  float* up = b5_.data();
  auto bwd = [&](float* dg, float* du, float* d, float* g, float* u) {
    fuseops::silu_and_mul_backward(v(dg, {4, 4}), v(du, {4, 4}), v(d, {4, 4}), v(g, {4, 4}), v(u, {4, 4}));
  };
  EXPECT_ARG_ERROR(bwd(gate, q(), dout, gate, up), "silu_and_mul_backward", "dgate", "no overlap with gate");
  EXPECT_ARG_ERROR(bwd(p(), dout + 3, dout, gate, up), "silu_and_mul_backward", "dup", "no overlap with dout");
  EXPECT_ARG_ERROR(bwd(p(), up, dout, gate, up), "silu_and_mul_backward", "dup", "no overlap with up");
  EXPECT_ARG_ERROR(bwd(p(), p(15), dout, gate, up), "silu_and_mul_backward", "dup", "no overlap with dgate");
  EXPECT_ARG_ERROR(bwd(p(), p(), dout, gate, up), "silu_and_mul_backward", "dup", "no overlap with dgate");
  EXPECT_NO_THROW(bwd(p(), p(16), dout, gate, up));  // adjacent, not overlapping
}

TEST_F(ActivationErrors, MixedDevices) {
  // Checked before any backend is chosen, so the message is about the device on every build and machine.
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}), v(q(), {4, 8}, f32, Device::cuda(0))), "silu_and_mul",
                   "input", "expected device cpu (the device of out)", "got cuda:0");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}, f32, Device::cuda(0)), v(q(), {4, 8})), "silu_and_mul",
                   "input", "expected device cuda:0", "got cpu");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}, f32, Device::cuda(0)), v(q(), {4, 8}, f32, Device::cuda(1))),
                   "silu_and_mul", "input", "got cuda:1");
  EXPECT_ARG_ERROR(fuseops::gelu_and_mul_backward(v(p(), {4}), v(p(8), {4}), v(q(), {4}), v(q(8), {4}),
                                                  v(q(16), {4}, f32, Device::cuda(0))),
                   "gelu_and_mul_backward", "up", "got cuda:0");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}, f32, Device::cuda(-1)), v(q(), {4, 8}, f32, Device::cuda(-1))),
                   "silu_and_mul", "out", "device index >= 0");
}

TEST_F(ActivationErrors, CudaDeviceThatDoesNotExist) {
  // cuda:N with N = the number of devices never exists: without a CUDA build, or on a machine without a GPU, that
  // is `unsupported`; with GPUs it is `invalid_argument` naming the device. Never a silent pass.
  const int n = fuseops::cuda_device_count();
  const Device dev = Device::cuda(n);
  const std::string name = "cuda:" + std::to_string(n);
  auto run = [&] { fuseops::silu_and_mul(v(p(), {4, 4}, f32, dev), v(q(), {4, 8}, f32, dev)); };
  const bool no_gpu = !fuseops::built_with_cuda() || n == 0;
  if (!fuseops::built_with_cuda()) {
    EXPECT_TRUE(raises(run, ErrorKind::unsupported, {"silu_and_mul", name, "no CUDA backend"}));
  } else if (n == 0) {
    EXPECT_TRUE(raises(run, ErrorKind::unsupported, {"silu_and_mul", name, "no CUDA device"}));
  } else {
    EXPECT_ARG_ERROR(run(), "silu_and_mul", "device", "got " + name);
  }
  auto bwd = [&] {
    fuseops::gelu_and_mul_backward(v(p(), {4}, f32, dev), v(p(8), {4}, f32, dev), v(q(), {4}, f32, dev),
                                   v(q(8), {4}, f32, dev), v(q(16), {4}, f32, dev), GeluApproximate::tanh);
  };
  EXPECT_TRUE(raises(bwd, no_gpu ? ErrorKind::unsupported : ErrorKind::invalid_argument, {"gelu_and_mul_backward", name}));
}

TEST_F(ActivationErrors, GeluApproximate) {
  EXPECT_EQ(fuseops::parse_gelu_approximate("none"), GeluApproximate::none);
  EXPECT_EQ(fuseops::parse_gelu_approximate("tanh"), GeluApproximate::tanh);
  for (const char* bad : {"", "Tanh", "erf", "none "}) {
    EXPECT_TRUE(raises([&] { fuseops::parse_gelu_approximate(bad); }, ErrorKind::invalid_argument,
                       {"approximate", std::string("\"") + bad + "\""}));
  }
  // bytes a message cannot print are escaped: a NUL (which cut a C-string print short), a newline, a quote
  EXPECT_TRUE(raises([&] { fuseops::parse_gelu_approximate(std::string("tanh\0x\n\"", 8)); },
                     ErrorKind::invalid_argument, {"approximate", "got \"tanh\\x00x\\n\\\"\""}));
  const auto bad = static_cast<GeluApproximate>(7);
  EXPECT_TRUE(raises([&] { fuseops::gelu_and_mul(v(p(), {4, 4}), v(q(), {4, 8}), bad); },
                     ErrorKind::invalid_argument, {"approximate", "7"}));
  EXPECT_TRUE(raises([&] { fuseops::gelu_and_mul_split(v(p(), {4}), v(q(), {4}), v(q(8), {4}), bad); },
                     ErrorKind::invalid_argument, {"approximate"}));
}

TEST_F(ActivationErrors, NullDataWithElements) {
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}), v(nullptr, {4, 8})), "silu_and_mul", "input", "null");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(nullptr, {4, 4}), v(q(), {4, 8})), "silu_and_mul", "out", "null");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_split(v(p(), {4}), v(q(), {4}), v(nullptr, {4})), "silu_and_mul_split",
                   "up", "null");
  EXPECT_ARG_ERROR(fuseops::gelu_and_mul_backward(v(p(), {4}), v(nullptr, {4}), v(q(), {4}), v(q(8), {4}),
                                                  v(q(16), {4})),
                   "gelu_and_mul_backward", "dup", "null");
}

// A data pointer that is not a multiple of the element size is refused, naming the argument (kernels read whole
// elements; on CUDA such an access faults).
TEST_F(ActivationErrors, MisalignedData) {
  const auto off = [](float* x, int bytes) { return reinterpret_cast<char*>(x) + bytes; };
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}), v(off(q(), 2), {4, 8})), "silu_and_mul", "input",
                   "aligned to its element size (4 bytes for f32)", "2 modulo 4");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(off(p(), 1), {4, 4}), v(q(), {4, 8})), "silu_and_mul", "out",
                   "1 modulo 4");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}, DType::bf16), v(off(q(), 1), {4, 8}, DType::bf16)),
                   "silu_and_mul", "input", "2 bytes for bf16", "1 modulo 2");
  // no elements: any address
  EXPECT_NO_THROW(fuseops::silu_and_mul(v(off(p(), 1), {0, 4}), v(off(q(), 3), {0, 8})));
}

// A first input whose fields are corrupt (rank 9 or -1, a negative dim) is named itself, never read past its arrays,
// and never reported against a valid argument compared with its dims (common_device() checks every layout first).
TEST_F(ActivationErrors, MalformedFirstInputNamedItself) {
  std::vector<int32_t> m(4, 0);
  for (int bad = 0; bad < kMalformedWays; ++bad) {
    SCOPED_TRACE(bad);
    auto corrupt = [bad](TensorView t) { return malformed(t, bad, 0); };
    const std::string got = malformed_message(bad);
    EXPECT_ARG_ERROR(fuseops::silu_and_mul(v(p(), {4, 4}), corrupt(v(q(), {4, 8}))), "silu_and_mul", "input", got);
    EXPECT_ARG_ERROR(fuseops::silu_and_mul_split(v(p(), {4, 4}), corrupt(v(q(), {4, 4})), v(q(64), {4, 4})),
                     "silu_and_mul_split", "gate", got);
    EXPECT_ARG_ERROR(fuseops::silu_and_mul_backward(v(p(), {4}), v(p(8), {4}), corrupt(v(q(), {4})), v(q(8), {4}),
                                                    v(q(16), {4})),
                     "silu_and_mul_backward", "dout", got);
    EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(v(p(), {4, 2, 4}), corrupt(v(q(), {4, 2, 8})),
                                                  v(m.data(), {4}, DType::i32)),
                     "silu_and_mul_masked", "input", got);
  }
}

TEST_F(ActivationErrors, ErrorsWriteNothing) {
  std::vector<float> out(16, -7.0f);
  EXPECT_ANY_THROW(fuseops::silu_and_mul(v(out.data(), {4, 4}), v(q(), {4, 7})));
  EXPECT_ANY_THROW(fuseops::silu_and_mul(v(out.data(), {4, 4}), v(out.data(), {2, 8})));
  for (float x : out) EXPECT_EQ(x, -7.0f);
}

}  // namespace
}  // namespace fuseops_test

namespace fuseops_test {
namespace {

// Layouts a caller can describe but no op reads: negative strides, extents past 2^63, bad devices; and empty
// tensors with a zero in any dim, which are valid.
TEST(ActivationLayout, NegativeStridesOverflowAndBadDevicesAreErrors) {
  std::vector<float> x(64), o(64);
  const fuseops::Device cpu = fuseops::Device::cpu();
  auto run = [&](fuseops::TensorView out, fuseops::TensorView in) { fuseops::silu_and_mul(out, in); };
  auto expect = [](const std::function<void()>& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no error for " << what;
    } catch (const fuseops::Error& e) {
      EXPECT_EQ(e.kind(), fuseops::ErrorKind::invalid_argument) << e.what();
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect([&] { run({o.data(), DType::f32, cpu, {2, 4}}, {x.data() + 8, DType::f32, cpu, {2, 8}, {-8, 1}}); },
         "non-negative strides");
  expect([&] { run({o.data() + 4, DType::f32, cpu, {2, 4}, {-4, 1}}, {x.data(), DType::f32, cpu, {2, 8}}); },
         "non-negative strides");
  expect([&] { run({o.data(), DType::f32, cpu, {int64_t{1} << 62, 1}}, {x.data(), DType::f32, cpu, {int64_t{1} << 62, 2}}); },
         "fits in 64 bits");
  expect([&] { run({o.data(), DType::f32, cpu, {4, 4}, {int64_t{1} << 62, 1}}, {x.data(), DType::f32, cpu, {4, 8}}); },
         "fits in 64 bits");
  fuseops::Device bad_kind{static_cast<fuseops::Device::Kind>(5), 0};
  expect([&] { run({o.data(), DType::f32, bad_kind, {2, 4}}, {x.data(), DType::f32, bad_kind, {2, 8}}); },
         "device kind");
  fuseops::Device cpu3{fuseops::Device::Kind::cpu, 3};
  expect([&] { run({o.data(), DType::f32, cpu3, {2, 4}}, {x.data(), DType::f32, cpu3, {2, 8}}); }, "cpu device index 0");
  // Empty tensors with a zero in a middle dim are valid and write nothing.
  std::fill(o.begin(), o.end(), -7.0f);
  EXPECT_NO_THROW(run({o.data(), DType::f32, cpu, {3, 0, 4}}, {x.data(), DType::f32, cpu, {3, 0, 8}}));
  EXPECT_NO_THROW(run({nullptr, DType::f32, cpu, {2, 3, 0, 4}}, {nullptr, DType::f32, cpu, {2, 3, 0, 8}}));
  EXPECT_EQ(o[0], -7.0f);
}

// Shapes without rows whose extents past 64 bits are never checked (there is nothing to address) are no-ops: the
// up half's offset d * element size and a masked expert's offset e * stride * element size are not formed there
// (they wrapped: UBSan in scripts/sanitize.sh).
TEST(ActivationLayout, NoRowsWithHugeWidthsOrStridesAreNoOps) {
  static float buf[1024];
  static int32_t m[2] = {0, 0};
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_NO_THROW(fuseops::silu_and_mul(TensorView(buf, DType::f32, cpu, {0, int64_t{1} << 61}),
                                        TensorView(buf + 512, DType::f32, cpu, {0, int64_t{1} << 62})));
  EXPECT_NO_THROW(fuseops::silu_and_mul_masked(TensorView(buf, DType::f32, cpu, {2, 0, 4}, {big, big, 1}),
                                               TensorView(buf + 512, DType::f32, cpu, {2, 0, 8}, {big, big, 1}),
                                               TensorView(m, DType::i32, cpu, {2})));
  EXPECT_NO_THROW(fuseops::check_errors());
}

}  // namespace
}  // namespace fuseops_test
