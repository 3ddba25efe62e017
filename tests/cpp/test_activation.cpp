// Accuracy of every gated activation against the float64 golden, on the CPU backend always and on the CUDA
// backend when a device is present: every op x dtype x backend is one test that sweeps shapes, value
// distributions and memory layouts (contiguous, pitched rows, misaligned starts, halves of one fused buffer).
#include <ostream>
#include <string>
#include <vector>

#include "test_util.h"

namespace fuseops_test {
namespace {

struct Param {
  Where where;
  int op;  // index into all_ops()
  DType dtype;
};

std::string param_name(const Param& p) {
  return std::string(where_name(p.where)) + "_" + all_ops()[p.op].name + "_" + fuseops::dtype_name(p.dtype);
}
void PrintTo(const Param& p, std::ostream* os) { *os << param_name(p); }

std::vector<Param> all_params() {
  std::vector<Param> params;
  for (Where where : {Where::cpu, Where::cuda})
    for (int op = 0; op < static_cast<int>(all_ops().size()); ++op)
      for (DType dtype : {DType::f32, DType::f16, DType::bf16}) params.push_back({where, op, dtype});
  return params;
}

class ActivationAccuracy : public ::testing::TestWithParam<Param> {};

struct Shape {
  std::vector<int64_t> lead;
  int64_t d;
};

/// Rows 0, 1, 3, 64 and a 3-D [2, 3, d] for each width; the widest rows only with few rows so that a CPU case
/// stays below ~50k output elements.
std::vector<Shape> shapes() {
  std::vector<Shape> s;
  for (int64_t d : {1, 2, 3, 7, 8, 60, 100, 3420, 4096 + 8}) {
    for (int64_t rows : {0, 1, 3, 64}) {
      if (rows == 64 && d > 100) continue;
      s.push_back({{rows}, d});
    }
    s.push_back({{2, 3}, d});
  }
  return s;
}

TEST_P(ActivationAccuracy, MatchesGolden) {
  const auto [where, op_index, dtype] = GetParam();
  FUSEOPS_SKIP_UNLESS_RUNNABLE(where);
  const OpCase& op = all_ops()[op_index];
  std::mt19937_64 rng = test_rng();
  for (const Shape& shape : shapes()) {
    for (Layout layout : {Layout::contiguous, Layout::pitched, Layout::misaligned, Layout::shared}) {
      for (ft::Fill fill : {ft::Fill::normal, ft::Fill::wide, ft::Fill::adversarial}) {
        check_op(op, where, dtype, shape.lead, shape.d, layout, fill, rng);
        if (HasFailure()) return;  // one described failure per test is enough
      }
    }
  }
}

// gelu_and_mul_backward (tanh) where |gate| is so large that du/dx = sqrt(2/pi) (1 + 0.134 gate^2) overflows fp32
// (|gate| > ~5.04e19; 1e20 .. 3e38 here, 1e19 and 12 below it): the tanh factor's derivative term is 0 there and must
// stay 0 (0 x inf gave NaN), so dgate = dout up (gate > 0) or 0 (gate < 0) exactly, as for |gate| = 12 where exp
// already underflows; dup = dout gelu(gate) = gate or -0.
TEST(ActivationBackward, TanhGeluHugeGatesGiveFiniteGradients) {
  const std::vector<float> gates = {12.f, -12.f, 1e19f, -1e19f, 1e20f, -1e20f, 1e30f, -1e30f, 3e38f, -3e38f};
  const int64_t n = static_cast<int64_t>(gates.size());
  for (Where where : {Where::cpu, Where::cuda}) {
    if (where == Where::cuda && !cuda_available()) continue;
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(where_name(where)) + " " + fuseops::dtype_name(dt));
      Workspace ws(where, dt);
      const Region rdg = ws.region({1, n}), rdu = ws.region({1, n}), rdo = ws.region({1, n}), rg = ws.region({1, n}),
                   ru = ws.region({1, n});
      HostTensor g(dt, {1, n}), u(dt, {1, n}), o(dt, {1, n});
      for (int64_t i = 0; i < n; ++i) {
        g.set(0, i, gates[i]);
        u.set(0, i, 2.f);
        o.set(0, i, 1.f);
      }
      ws.write(rg, g);
      ws.write(ru, u);
      ws.write(rdo, o);
      ws.upload();
      fuseops::gelu_and_mul_backward(ws.view(rdg), ws.view(rdu), ws.view(rdo), ws.view(rg), ws.view(ru),
                                     fuseops::GeluApproximate::tanh);
      ws.download();
      const HostTensor dg = ws.read(rdg), du = ws.read(rdu);
      for (int64_t i = 0; i < n; ++i) {
        const bool pos = gates[i] > 0;
        EXPECT_EQ(dg.get(0, i), pos ? 2.0 : 0.0) << "dgate at gate " << gates[i];
        EXPECT_EQ(du.get(0, i), pos ? g.get(0, i) : 0.0) << "dup at gate " << gates[i];
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, ActivationAccuracy, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<Param>& info) { return param_name(info.param); });

// Zero rows with null data pointers is valid on every backend: nothing is read, written or launched.
TEST(ActivationEmpty, ZeroRowsWithNullDataIsANoOp) {
  for (Where where : {Where::cpu, Where::cuda}) {
    const fuseops::Device dev = where == Where::cpu ? fuseops::Device::cpu() : fuseops::Device::cuda(0);
    if (where == Where::cuda && !cuda_available()) continue;  // a CUDA view without a device is tested in errors
    for (const OpCase& op : all_ops()) {
      SCOPED_TRACE(op.name + " on " + where_name(where));
      std::vector<TensorView> views;
      for (int i = 0; i < num_args(op.form); ++i) {
        const int64_t cols = op.form == Form::fused && i == 1 ? 16 : 8;
        views.push_back(TensorView(nullptr, DType::bf16, dev, {0, cols}));
      }
      EXPECT_NO_THROW(op.call(views));
    }
  }
}

// Zero rows with real buffers: the poisoned outputs stay poisoned.
TEST(ActivationEmpty, ZeroRowsWritesNothing) {
  for (Where where : {Where::cpu, Where::cuda}) {
    if (where == Where::cuda && !cuda_available()) continue;
    for (const OpCase& op : all_ops()) {
      SCOPED_TRACE(op.name + " on " + where_name(where));
      Workspace ws(where, DType::f16);
      std::vector<Region> regions;
      for (int i = 0; i < num_args(op.form); ++i) {
        const int64_t cols = op.form == Form::fused && i == 1 ? 16 : 8;
        Region r = ws.region({4, cols});
        r.shape = {0, cols};  // a view of no rows into a real, poisoned buffer
        regions.push_back(r);
      }
      ws.upload();
      std::vector<TensorView> views;
      for (const Region& r : regions) views.push_back(ws.view(r));
      EXPECT_NO_THROW(op.call(views));
      ws.download();
      EXPECT_TRUE(ws.unchanged_outside({}));
    }
  }
}

}  // namespace
}  // namespace fuseops_test
