// Every validation error of the GDN intra-chunk ops (src/ops/gdn.cpp): fuseops::Error of kind invalid_argument
// whose message names the op and the argument ("<op>: <arg>: expected ..., got ..."). All on CPU buffers; a view
// labelled cuda:N points at host memory, so nothing is touched if validation wrongly passed it to a backend...
// except by a crash.
#include <limits>
#include <tuple>
#include <utility>
#include <string>
#include <vector>

#include "test_util.h"

namespace fuseops_test {
namespace {

using fuseops::Device;
using fuseops::ErrorKind;



constexpr DType f32 = DType::f32, bf16 = DType::bf16, i32 = DType::i32, i64 = DType::i64;
const Device cpu = Device::cpu();
constexpr const char* kkt = "chunk_scaled_dot_kkt_fwd";
constexpr const char* fused = "chunk_gated_delta_rule_fwd_kkt_solve";
constexpr const char* solve = "solve_tril";
constexpr const char* cumsum = "chunk_local_cumsum";

/// Views into separate host buffers. Shapes: B = 1, T = 8, H = 2, HV = 4, K = 16, BT = 16.
class GdnErrors : public ::testing::Test {
 protected:
  float* buf(int i) { return bufs_[i].data(); }
  TensorView v(int i, std::initializer_list<int64_t> shape, DType dtype = f32, Device dev = cpu) {
    return TensorView(buf(i), dtype, dev, shape);
  }
  TensorView s(int i, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides, DType dt = f32) {
    return TensorView(buf(i), dt, cpu, shape, strides);
  }
  TensorView k() { return v(0, {1, 8, 2, 16}); }
  TensorView g() { return v(1, {1, 8, 4}); }
  TensorView beta() { return v(2, {1, 8, 4}); }
  TensorView out() { return v(3, {1, 8, 4, 16}); }
  TensorView cu(std::initializer_list<int64_t> shape = {3}, DType dt = i32) { return v(4, shape, dt); }
  std::vector<std::vector<float>> bufs_ = std::vector<std::vector<float>>(6, std::vector<float>(1 << 13, 0.0f));
};

/// Both kkt-shaped ops (the same validation) with the output named per op.
struct KktOp {
  const char* name;
  const char* out;
  void (*call)(TensorView, TensorView, const TensorView*, const TensorView*, int64_t, const TensorView*,
               fuseops::Stream);
};
const KktOp kKktOps[] = {{kkt, "A", fuseops::chunk_scaled_dot_kkt_fwd},
                         {fused, "Ai", fuseops::chunk_gated_delta_rule_fwd_kkt_solve}};

// An output whose elements share memory (a broadcast or interleaved view) is refused, naming it: each element would be
// written by several tokens (on CUDA a write race). A view whose rank its arrays cannot hold (the field is public) or
// with a negative dim is refused too, never read past its arrays.
TEST_F(GdnErrors, SelfOverlappingOutputAndBadRankAreErrors) {
  const TensorView gv = g();
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(s(3, {1, 8, 4}, {0, 0, 1}), gv, 16), cumsum, "out",
                   "do not share memory", "strides [0, 0, 1]");
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(s(3, {1, 8, 4}, {32, 1, 1}), gv, 16), cumsum, "out",
                   "do not share memory");
  EXPECT_NO_THROW(fuseops::chunk_local_cumsum(s(3, {1, 8, 4}, {32, 1, 8}), gv, 16));  // transposed: distinct
  EXPECT_NO_THROW(fuseops::chunk_local_cumsum(s(3, {1, 8, 4}, {0, 4, 1}), gv, 16));   // stride 0 on a dim of 1
  TensorView bad = v(3, {1, 8, 4});
  for (int rank : {100000, 9, -5}) {
    bad.rank = rank;
    EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(bad, gv, 16), cumsum, "out", "rank in [0, 8]",
                     "got " + std::to_string(rank));
  }
  TensorView neg = v(1, {1, 8, 4});
  neg.shape[1] = -5;
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {1, 8, 4}), neg, 16), cumsum, "g", "non-negative dims");
}

// A first input whose fields are corrupt (rank 9 or -1, a negative dim) is named itself, never read past its arrays,
// and never reported against a valid argument compared with its dims (a k with T = -4 made the kkt ops name g, an A
// with B = -4 made solve_tril name Ai: "expected shape [-4, 8, 4, 16] (the shape of A)").
TEST_F(GdnErrors, MalformedFirstInputNamedItself) {
  const TensorView gv = g(), bv = beta();
  for (int bad = 0; bad < kMalformedWays; ++bad) {
    SCOPED_TRACE(bad);
    auto corrupt = [bad](TensorView t, int dim) { return malformed(t, bad, dim); };
    const std::string got = malformed_message(bad);
    for (const KktOp& op : kKktOps) {
      EXPECT_ARG_ERROR(op.call(out(), corrupt(k(), 1), &gv, &bv, 16, nullptr, {}), op.name, "k", got);
    }
    EXPECT_ARG_ERROR(fuseops::solve_tril(v(5, {1, 8, 4, 16}), corrupt(out(), 0)), solve, "A", got);
    EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {1, 8, 4}), corrupt(g(), 1), 16), cumsum, "g", got);
  }
}

TEST_F(GdnErrors, ValidCallsPass) {
  const TensorView kv = k(), gv = g(), bv = beta();
  for (const KktOp& op : kKktOps) {
    EXPECT_NO_THROW(op.call(out(), kv, &gv, &bv, 16, nullptr, {})) << op.name;
    EXPECT_NO_THROW(op.call(out(), kv, nullptr, &bv, 16, nullptr, {})) << op.name;
    EXPECT_NO_THROW(op.call(v(3, {1, 8, 2, 16}), kv, nullptr, nullptr, 16, nullptr, {})) << op.name;
  }
  EXPECT_NO_THROW(fuseops::solve_tril(out(), v(5, {1, 8, 4, 16})));
  EXPECT_NO_THROW(fuseops::chunk_local_cumsum(v(3, {1, 8, 4}), gv, 16));
}

TEST_F(GdnErrors, ChunkSize) {
  const TensorView kv = k(), gv = g(), bv = beta();
  for (const KktOp& op : kKktOps) {
    for (int64_t bad : {48, 0, -64, 128, 8}) {
      EXPECT_ARG_ERROR(op.call(v(3, {1, 8, 4, bad > 0 ? bad : 16}), kv, &gv, &bv, bad, nullptr, {}), op.name,
                       "chunk_size", "16, 32 or 64", "got " + std::to_string(bad));
    }
  }
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {1, 8, 4}), gv, 48), cumsum, "chunk_size", "got 48");
  // solve_tril takes BT from A's last dim.
  EXPECT_ARG_ERROR(fuseops::solve_tril(v(3, {1, 8, 4, 48}), v(5, {1, 8, 4, 48})), solve, "A", "last dim BT",
                   "[1, 8, 4, 48]");
}

TEST_F(GdnErrors, KeyShape) {
  const TensorView gv = g(), bv = beta();
  for (const KktOp& op : kKktOps) {
    EXPECT_ARG_ERROR(op.call(out(), v(0, {1, 8, 2, 257}), &gv, &bv, 16, nullptr, {}), op.name, "k",
                     "head dim K in [1, 256]", "257");
    EXPECT_ARG_ERROR(op.call(out(), v(0, {1, 8, 2, 0}), &gv, &bv, 16, nullptr, {}), op.name, "k", "head dim K");
    EXPECT_ARG_ERROR(op.call(out(), v(0, {8, 2, 16}), &gv, &bv, 16, nullptr, {}), op.name, "k", "rank 4");
    EXPECT_ARG_ERROR(op.call(out(), v(0, {1, 8, 0, 16}), &gv, &bv, 16, nullptr, {}), op.name, "k", "at least one head");
    EXPECT_ARG_ERROR(op.call(out(), v(0, {1, 8, 2, 16}, i32), &gv, &bv, 16, nullptr, {}), op.name, "k",
                     "f32 | f16 | bf16", "got i32");
    EXPECT_ARG_ERROR(op.call(out(), s(0, {1, 8, 2, 16}, {512, 64, 32, 2}), &gv, &bv, 16, nullptr, {}), op.name, "k",
                     "innermost stride 1");
    EXPECT_ARG_ERROR(op.call(out(), s(0, {1, 8, 2, 16}, {256, -32, 16, 1}), &gv, &bv, 16, nullptr, {}), op.name, "k",
                     "non-negative strides");
  }
}

TEST_F(GdnErrors, GateAndBeta) {
  const TensorView kv = k(), gv = g(), bv = beta();
  for (const KktOp& op : kKktOps) {
    // HV not a multiple of H (H = 2), named after the tensor HV comes from.
    const TensorView g3 = v(1, {1, 8, 3}), b3 = v(2, {1, 8, 3}), g1 = v(1, {1, 8, 1});
    EXPECT_ARG_ERROR(op.call(v(3, {1, 8, 3, 16}), kv, &g3, &b3, 16, nullptr, {}), op.name, "g",
                     "a multiple of H = 2", "got 3");
    EXPECT_ARG_ERROR(op.call(v(3, {1, 8, 3, 16}), kv, nullptr, &b3, 16, nullptr, {}), op.name, "beta",
                     "a multiple of H = 2", "got 3");
    EXPECT_ARG_ERROR(op.call(v(3, {1, 8, 1, 16}), kv, &g1, nullptr, 16, nullptr, {}), op.name, "g", "got 1");
    // HV = 0 heads: refused as H = 0 is (0 is a multiple of H, so the message says "at least H").
    const TensorView g0 = v(1, {1, 8, 0}), b0 = v(2, {1, 8, 0});
    EXPECT_ARG_ERROR(op.call(v(3, {1, 8, 0, 16}), kv, &g0, &b0, 16, nullptr, {}), op.name, "g", "at least H", "got 0");
    // g: f32 only; shape [B, T, HV].
    const TensorView gb = v(1, {1, 8, 4}, bf16), gt = v(1, {1, 7, 4}), gr = v(1, {8, 4}), gB = v(1, {2, 8, 4});
    EXPECT_ARG_ERROR(op.call(out(), kv, &gb, &bv, 16, nullptr, {}), op.name, "g", "dtype f32", "got bf16");
    EXPECT_ARG_ERROR(op.call(out(), kv, &gt, &bv, 16, nullptr, {}), op.name, "g", "[1, 7, 4]");
    // a [T, HV] g (or beta when g is absent): the rank is what is wrong, not a head count
    EXPECT_ARG_ERROR(op.call(out(), kv, &gr, &bv, 16, nullptr, {}), op.name, "g", "expected rank 3 [B, T, HV]",
                     "got [8, 4]");
    const TensorView br = v(2, {8, 4});
    EXPECT_ARG_ERROR(op.call(out(), kv, nullptr, &br, 16, nullptr, {}), op.name, "beta", "expected rank 3 [B, T, HV]",
                     "got [8, 4]");
    EXPECT_ARG_ERROR(op.call(out(), kv, &gB, &bv, 16, nullptr, {}), op.name, "g", "[2, 8, 4]");
    // beta: float dtypes, the heads of g.
    const TensorView bi = v(2, {1, 8, 4}, i64), b2 = v(2, {1, 8, 2}), bt = v(2, {1, 9, 4});
    EXPECT_ARG_ERROR(op.call(out(), kv, &gv, &bi, 16, nullptr, {}), op.name, "beta", "got i64");
    EXPECT_ARG_ERROR(op.call(out(), kv, &gv, &b2, 16, nullptr, {}), op.name, "beta", "[1, 8, 4]", "got [1, 8, 2]");
    EXPECT_ARG_ERROR(op.call(out(), kv, &gv, &bt, 16, nullptr, {}), op.name, "beta", "got [1, 9, 4]");
    EXPECT_ARG_ERROR(op.call(out(), kv, nullptr, &bt, 16, nullptr, {}), op.name, "beta", "got [1, 9, 4]");
  }
}

TEST_F(GdnErrors, Output) {
  const TensorView kv = k(), gv = g(), bv = beta();
  for (const KktOp& op : kKktOps) {
    EXPECT_ARG_ERROR(op.call(v(3, {1, 8, 4, 16}, i32), kv, &gv, &bv, 16, nullptr, {}), op.name, op.out, "got i32");
    EXPECT_ARG_ERROR(op.call(v(3, {1, 8, 4, 32}), kv, &gv, &bv, 16, nullptr, {}), op.name, op.out,
                     "[B, T, HV, BT] = [1, 8, 4, 16]", "got [1, 8, 4, 32]");
    EXPECT_ARG_ERROR(op.call(v(3, {1, 8, 2, 16}), kv, &gv, &bv, 16, nullptr, {}), op.name, op.out, "got [1, 8, 2, 16]");
    EXPECT_ARG_ERROR(op.call(v(3, {1, 9, 4, 16}), kv, &gv, &bv, 16, nullptr, {}), op.name, op.out);
    EXPECT_ARG_ERROR(op.call(v(3, {8, 4, 16}), kv, &gv, &bv, 16, nullptr, {}), op.name, op.out);
    // Non-contiguous outputs: padded rows, padded tokens, transposed heads.
    EXPECT_ARG_ERROR(op.call(s(3, {1, 8, 4, 16}, {640, 80, 20, 1}), kv, &gv, &bv, 16, nullptr, {}), op.name, op.out,
                     "a contiguous tensor");
    EXPECT_ARG_ERROR(op.call(s(3, {1, 8, 4, 16}, {1024, 128, 16, 1}), kv, &gv, &bv, 16, nullptr, {}), op.name,
                     op.out, "a contiguous tensor");
    EXPECT_ARG_ERROR(op.call(s(3, {1, 8, 4, 16}, {512, 16, 128, 1}), kv, &gv, &bv, 16, nullptr, {}), op.name,
                     op.out, "a contiguous tensor");
  }
}

TEST_F(GdnErrors, SolveTril) {
  const TensorView A = v(5, {1, 8, 4, 16});
  EXPECT_ARG_ERROR(fuseops::solve_tril(out(), v(5, {1, 8, 4, 16}, i32)), solve, "A", "got i32");
  EXPECT_ARG_ERROR(fuseops::solve_tril(out(), v(5, {8, 4, 16})), solve, "A", "rank 4");
  EXPECT_ARG_ERROR(fuseops::solve_tril(v(3, {1, 8, 4, 8}), v(5, {1, 8, 4, 8})), solve, "A", "BT in {16, 32, 64}");
  EXPECT_ARG_ERROR(fuseops::solve_tril(out(), s(5, {1, 8, 4, 16}, {1024, 128, 32, 2})), solve, "A",
                   "innermost stride 1");
  EXPECT_ARG_ERROR(fuseops::solve_tril(v(3, {1, 8, 4, 16}, DType::i64), A), solve, "Ai", "got i64");
  EXPECT_ARG_ERROR(fuseops::solve_tril(v(3, {1, 8, 4, 32}), A), solve, "Ai", "shape [1, 8, 4, 16]");
  EXPECT_ARG_ERROR(fuseops::solve_tril(v(3, {1, 8, 2, 16}), A), solve, "Ai", "got [1, 8, 2, 16]");
  EXPECT_ARG_ERROR(fuseops::solve_tril(s(3, {1, 8, 4, 16}, {640, 80, 20, 1}), A), solve, "Ai", "a contiguous tensor");
  // A strided input is fine (innermost stride 1).
  EXPECT_NO_THROW(fuseops::solve_tril(out(), s(5, {1, 8, 4, 16}, {1024, 128, 32, 1})));
  // In place, or partly overlapping.
  EXPECT_ARG_ERROR(fuseops::solve_tril(A, A), solve, "Ai", "no overlap with A");
  EXPECT_ARG_ERROR(fuseops::solve_tril(TensorView(buf(5) + 100, f32, cpu, {1, 8, 4, 16}), A), solve, "Ai",
                   "no overlap with A");
}

TEST_F(GdnErrors, Cumsum) {
  const TensorView gv = g();
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {1, 8, 4}), v(1, {1, 8, 4}, i32), 16), cumsum, "g", "got i32");
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {8, 4}), v(1, {8, 4}), 16), cumsum, "g", "rank 3");
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {1, 8, 4}), v(1, {1, 8, 4}), 16, nullptr, false,
                                               std::numeric_limits<double>::quiet_NaN()),
                   cumsum, "scale", "finite");
  // scale is applied in fp32: outside its range or rounding to 0 there is an error, not inf / 0 outputs
  for (const auto& [bad, text] : {std::pair<double, const char*>{1e39, "got 1e+39"}, {-1e300, "got -1e+300"},
                                   {1e-300, "got 1e-300"}}) {
    EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {1, 8, 4}), v(1, {1, 8, 4}), 16, nullptr, false, bad), cumsum,
                     "scale", "finite in fp32", text);
  }
  EXPECT_NO_THROW(fuseops::chunk_local_cumsum(v(3, {1, 8, 4}), v(1, {1, 8, 4}), 16, nullptr, false, 0.0));
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {1, 8, 4}, bf16), gv, 16), cumsum, "out", "dtype f32",
                   "got bf16");
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {1, 8, 5}), gv, 16), cumsum, "out", "[1, 8, 4]", "got [1, 8, 5]");
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {1, 7, 4}), gv, 16), cumsum, "out", "got [1, 7, 4]");
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(gv, gv, 16), cumsum, "out", "no overlap with g");
  // Strided g and out are fine.
  EXPECT_NO_THROW(fuseops::chunk_local_cumsum(s(3, {1, 8, 4}, {64, 8, 1}), s(1, {1, 8, 4}, {64, 8, 2}), 16));
}

TEST_F(GdnErrors, CuSeqlens) {
  const TensorView kv = k(), gv = g(), bv = beta(), A = v(5, {1, 8, 4, 16});
  const TensorView bad_dtype = cu({3}, f32), rank2 = cu({1, 3}), empty = cu({0}), strided = s(4, {3}, {2}, i32);
  struct Bad {
    const TensorView* view;
    const char* expect;
  };
  const Bad bads[] = {{&bad_dtype, "dtype i32 | i64"}, {&rank2, "rank 1 [N+1]"}, {&empty, "rank 1 [N+1]"},
                      {&strided, "a contiguous tensor"}};
  for (const Bad& b : bads) {
    for (const KktOp& op : kKktOps) {
      EXPECT_ARG_ERROR(op.call(out(), kv, &gv, &bv, 16, b.view, {}), op.name, "cu_seqlens", b.expect);
    }
    EXPECT_ARG_ERROR(fuseops::solve_tril(out(), A, b.view), solve, "cu_seqlens", b.expect);
    EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {1, 8, 4}), gv, 16, b.view), cumsum, "cu_seqlens", b.expect);
  }
  // B != 1 with cu_seqlens.
  const TensorView c = cu({3}, i64), k2 = v(0, {2, 8, 2, 16}), g2 = v(1, {2, 8, 4}), b2 = v(2, {2, 8, 4});
  for (const KktOp& op : kKktOps) {
    EXPECT_ARG_ERROR(op.call(v(3, {2, 8, 4, 16}), k2, &g2, &b2, 16, &c, {}), op.name, "cu_seqlens",
                     "batch B = 1 with cu_seqlens", "got B = 2");
  }
  EXPECT_ARG_ERROR(fuseops::solve_tril(v(3, {2, 8, 4, 16}), v(5, {2, 8, 4, 16}), &c), solve, "cu_seqlens", "got B = 2");
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {2, 8, 4}), g2, 16, &c), cumsum, "cu_seqlens", "got B = 2");
  // A one-element cu_seqlens (N = 0) may have any stride; int32 and int64 both pass.
  const TensorView one = s(4, {1}, {5}, i64), ok32 = cu({3}, i32);
  EXPECT_NO_THROW(fuseops::chunk_local_cumsum(v(3, {1, 0, 4}), v(1, {1, 0, 4}), 16, &one));
  EXPECT_NO_THROW(fuseops::solve_tril(v(3, {1, 0, 4, 16}), v(5, {1, 0, 4, 16}), &ok32));
}

TEST_F(GdnErrors, MixedDevices) {
  const Device gpu = Device::cuda(0);
  const TensorView kv = k(), gv = g(), bv = beta();
  const TensorView kc = v(0, {1, 8, 2, 16}, f32, gpu), gc = v(1, {1, 8, 4}, f32, gpu), bc = v(2, {1, 8, 4}, f32, gpu);
  const TensorView cc = v(4, {3}, i32, gpu), cc_cpu = cu({3}, i32);
  for (const KktOp& op : kKktOps) {
    EXPECT_ARG_ERROR(op.call(out(), kc, &gv, &bv, 16, nullptr, {}), op.name, "k", "device cpu", "got cuda:0");
    EXPECT_ARG_ERROR(op.call(out(), kv, &gc, &bv, 16, nullptr, {}), op.name, "g", "device cpu", "got cuda:0");
    EXPECT_ARG_ERROR(op.call(out(), kv, &gv, &bc, 16, nullptr, {}), op.name, "beta", "device cpu", "got cuda:0");
    EXPECT_ARG_ERROR(op.call(out(), kv, &gv, &bv, 16, &cc, {}), op.name, "cu_seqlens", "device cpu", "got cuda:0");
    EXPECT_ARG_ERROR(op.call(v(3, {1, 8, 4, 16}, f32, gpu), kc, &gc, &bc, 16, &cc_cpu, {}), op.name, "cu_seqlens",
                     "device cuda:0", "got cpu");
  }
  EXPECT_ARG_ERROR(fuseops::solve_tril(out(), v(5, {1, 8, 4, 16}, f32, gpu)), solve, "A", "got cuda:0");
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {1, 8, 4}), gc, 16), cumsum, "g", "got cuda:0");
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(v(3, {1, 8, 4}), gv, 16, &cc), cumsum, "cu_seqlens", "got cuda:0");
}

TEST_F(GdnErrors, NullData) {
  const TensorView kv = k(), gv = g(), bv = beta();
  const TensorView gnull(nullptr, f32, cpu, {1, 8, 4});
  for (const KktOp& op : kKktOps) {
    EXPECT_ARG_ERROR(op.call(out(), TensorView(nullptr, f32, cpu, {1, 8, 2, 16}), &gv, &bv, 16, nullptr, {}), op.name,
                     "k", "null");
    EXPECT_ARG_ERROR(op.call(out(), kv, &gnull, &bv, 16, nullptr, {}), op.name, "g", "null");
    EXPECT_ARG_ERROR(op.call(TensorView(nullptr, f32, cpu, {1, 8, 4, 16}), kv, &gv, &bv, 16, nullptr, {}), op.name,
                     op.out, "null");
  }
}

TEST_F(GdnErrors, CudaDeviceThatDoesNotExist) {
  const int n = fuseops::cuda_device_count();
  const Device dev = Device::cuda(n);
  const std::string name = "cuda:" + std::to_string(n);
  const TensorView kd = v(0, {1, 8, 2, 16}, f32, dev), od = v(3, {1, 8, 4, 16}, f32, dev);
  const TensorView gd = v(1, {1, 8, 4}, f32, dev);
  // No CUDA build or no GPU: `unsupported`; with GPUs, cuda:N (N = the device count) is `invalid_argument`.
  const ErrorKind kind = fuseops::built_with_cuda() && n > 0 ? ErrorKind::invalid_argument : ErrorKind::unsupported;
  EXPECT_TRUE(raises([&] { fuseops::chunk_gated_delta_rule_fwd_kkt_solve(od, kd, &gd, nullptr, 16); }, kind, {fused, name}));
  EXPECT_TRUE(raises([&] { fuseops::chunk_scaled_dot_kkt_fwd(od, kd, &gd, nullptr, 16); }, kind, {kkt, name}));
  EXPECT_TRUE(raises([&] { fuseops::solve_tril(od, v(5, {1, 8, 4, 16}, f32, dev)); }, kind, {solve, name}));
  EXPECT_TRUE(raises([&] { fuseops::chunk_local_cumsum(v(3, {1, 8, 4}, f32, dev), gd, 16); }, kind, {cumsum, name}));
}

TEST_F(GdnErrors, ErrorsWriteNothing) {
  std::vector<float> o(8 * 4 * 16, -7.0f);
  const TensorView kv = k(), gv = g(), bad_beta = v(2, {1, 8, 3});
  EXPECT_ANY_THROW(fuseops::chunk_gated_delta_rule_fwd_kkt_solve(TensorView(o.data(), f32, cpu, {1, 8, 4, 16}), kv,
                                                                 &gv, &bad_beta, 16));
  EXPECT_ANY_THROW(fuseops::chunk_scaled_dot_kkt_fwd(TensorView(o.data(), f32, cpu, {1, 8, 4, 16}), kv, &gv, nullptr, 48));
  for (float x : o) ASSERT_EQ(x, -7.0f);
}

}  // namespace
}  // namespace fuseops_test

namespace {

// The output of kkt / the fused op may not overlap k, g or beta.
TEST(GdnErrorsOverlap, OutputOverlappingAnInputIsAnError) {
  std::vector<float> buf(1 << 16);
  const fuseops::Device cpu = fuseops::Device::cpu();
  const fuseops::TensorView k(buf.data(), fuseops::DType::f32, cpu, {1, 16, 1, 8});
  const fuseops::TensorView A_over(buf.data() + 64, fuseops::DType::f32, cpu, {1, 16, 1, 16});
  const fuseops::TensorView g(buf.data() + 4096, fuseops::DType::f32, cpu, {1, 16, 1});
  const fuseops::TensorView A_on_g(buf.data() + 4096, fuseops::DType::f32, cpu, {1, 16, 1, 16});
  for (int fused = 0; fused < 2; ++fused) {
    auto run = [&](fuseops::TensorView A, const fuseops::TensorView* gp) {
      if (fused) {
        fuseops::chunk_gated_delta_rule_fwd_kkt_solve(A, k, gp, nullptr, 16);
      } else {
        fuseops::chunk_scaled_dot_kkt_fwd(A, k, gp, nullptr, 16);
      }
    };
    for (auto [A, gp, what] : {std::tuple{A_over, (const fuseops::TensorView*)nullptr, "no overlap with k"},
                               std::tuple{A_on_g, &g, "no overlap with g"}}) {
      try {
        run(A, gp);
        ADD_FAILURE() << "no error: " << what;
      } catch (const fuseops::Error& e) {
        EXPECT_EQ(e.kind(), fuseops::ErrorKind::invalid_argument);
        EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      }
    }
  }
}

}  // namespace

namespace {

// A cu_seqlens view without data (or on a bad device) is an error naming cu_seqlens, never a fixed-length run.
TEST(GdnErrorsCuSeqlens, NullDataAndBadDeviceAreErrors) {
  std::vector<float> k(37 * 4, 0.1f), A(37 * 64);
  const fuseops::Device cpu = fuseops::Device::cpu();
  const fuseops::TensorView kv(k.data(), fuseops::DType::f32, cpu, {1, 37, 1, 4});
  const fuseops::TensorView Av(A.data(), fuseops::DType::f32, cpu, {1, 37, 1, 16});
  const fuseops::TensorView null_cu(nullptr, fuseops::DType::i64, cpu, {5});
  EXPECT_ARG_ERROR(fuseops::chunk_scaled_dot_kkt_fwd(Av, kv, nullptr, nullptr, 16, &null_cu),
                   "chunk_scaled_dot_kkt_fwd", "cu_seqlens", "data pointer");
  std::vector<int64_t> cu = {0, 37};
  const fuseops::TensorView bad_device(cu.data(), fuseops::DType::i64, fuseops::Device{fuseops::Device::Kind::cpu, 3}, {2});
  EXPECT_ARG_ERROR(fuseops::solve_tril(Av, Av, &bad_device), "solve_tril", "cu_seqlens", "cpu device index 0");
}

}  // namespace
