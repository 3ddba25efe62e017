// The masked expert-major activations (silu_and_mul_masked, gelu_and_mul_masked) against the float64 golden on the
// valid rows r < min(masked_m[e], T_max), on the CPU backend always and on CUDA when present: masked_m all zeros,
// all full, uneven, and out of range (> T_max, < 0: clamped and recorded for check_errors()). Outputs are poisoned
// first; every element outside the valid rows (rows past masked_m, padding) must stay untouched, and inputs too.
#include <ostream>
#include <string>
#include <vector>

#include "test_util.h"

namespace fuseops_test {
namespace {

using fuseops::GeluApproximate;
using fuseops::detail::Act;

struct MaskedParam {
  Where where;
  DType dtype;
};

std::string masked_name(const ::testing::TestParamInfo<MaskedParam>& info) {
  return std::string(where_name(info.param.where)) + "_" + fuseops::dtype_name(info.param.dtype);
}
void PrintTo(const MaskedParam& p, std::ostream* os) { *os << where_name(p.where) << "_" << fuseops::dtype_name(p.dtype); }

enum class Counts { zeros, full, uneven, out_of_range, sparse };

const char* counts_name(Counts c) {
  switch (c) {
    case Counts::zeros: return "zeros";
    case Counts::full: return "full";
    case Counts::uneven: return "uneven";
    case Counts::out_of_range: return "out_of_range";
    case Counts::sparse: return "sparse";
  }
  return "?";
}

void run_masked(Act act, const TensorView& out, const TensorView& in, const TensorView& m) {
  if (act == Act::silu) fuseops::silu_and_mul_masked(out, in, m);
  else fuseops::gelu_and_mul_masked(out, in, m, act == Act::gelu ? GeluApproximate::none : GeluApproximate::tanh);
}

/// One case: checks the valid rows against the golden, that nothing else changed, and the error record.
void check_masked(Where where, DType dtype, Act act, int64_t E, int64_t T_max, int64_t d, Counts counts, bool pitched,
                  DType mdtype, std::mt19937_64& rng) {
  SCOPED_TRACE(std::string(where_name(where)) + " " + fuseops::dtype_name(dtype) + " act " +
               std::to_string(static_cast<int>(act)) + " E=" + std::to_string(E) + " T_max=" + std::to_string(T_max) +
               " d=" + std::to_string(d) + " counts=" + counts_name(counts) + (pitched ? " pitched" : "") +
               ", FUSEOPS_SEED=" + std::to_string(run_seed()));
  std::vector<int64_t> m(E);
  int64_t first_bad = -1;
  for (int64_t e = 0; e < E; ++e) {
    switch (counts) {
      case Counts::zeros: m[e] = 0; break;
      case Counts::full: m[e] = T_max; break;
      case Counts::uneven: m[e] = e % 3 == 0 ? 0 : static_cast<int64_t>(rng() % (T_max + 1)); break;
      case Counts::sparse:  // rows in every 37th expert and the last, long runs of empty experts between
        m[e] = (e % 37 == 36 || e == E - 1) && T_max > 0 ? 1 + static_cast<int64_t>(rng() % T_max) : 0;
        break;
      case Counts::out_of_range:
        m[e] = e % 4 == 1 ? T_max + 1 + static_cast<int64_t>(rng() % 5) : e % 4 == 3 ? -3 : static_cast<int64_t>(rng() % (T_max + 1));
        break;
    }
    if ((m[e] < 0 || m[e] > T_max) && first_bad < 0) first_bad = e;
  }
  Workspace ws(where, dtype), wm(where, mdtype);
  const int64_t in_pitch = pitched ? 2 * d + 16 : 2 * d, out_pitch = pitched ? d + 8 : d;
  const Region rin = ws.region({E, T_max, 2 * d}, pitched ? 3 : 0, in_pitch);
  const Region rout = ws.region({E, T_max, d}, 0, out_pitch);
  const Region rm = wm.region({E});
  HostTensor input(dtype, {E, T_max, 2 * d}), mh(mdtype, {E});
  ft::fill_random(input, ft::Fill::normal, rng);
  for (int64_t e = 0; e < E; ++e) {
    if (mdtype == DType::i32) static_cast<int32_t*>(mh.data())[e] = static_cast<int32_t>(m[e]);
    else static_cast<int64_t*>(mh.data())[e] = m[e];
  }
  ws.write(rin, input);
  wm.write(rm, mh);
  ws.upload();
  wm.upload();
  fuseops::clear_errors();
  run_masked(act, ws.view(rout), ws.view(rin), wm.view(rm));
  ws.download();
  if (first_bad >= 0) {
    const std::string msg = take_device_error();
    EXPECT_NE(msg.find("_masked: masked_m: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("at index " + std::to_string(first_bad) + " ("), std::string::npos) << msg;
  }
  EXPECT_NO_THROW(fuseops::check_errors());

  // The valid rows of each expert, compared with the golden; nothing else may change.
  const HostTensor out = ws.read(rout);
  std::vector<Region> valid;
  const ft::Tolerance tol = ft::Tolerance::for_dtype(dtype, 16);
  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = m[e] < 0 ? 0 : m[e] > T_max ? T_max : m[e];
    if (n == 0) continue;
    valid.push_back(Region{rout.buffer, rout.offset + e * T_max * out_pitch, {n, d}, out_pitch});
    std::vector<double> ref, sens, flush;
    HostTensor got(dtype, {n, d});
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        const int64_t row = e * T_max + r;
        const auto v = fuseops::reference::act_and_mul_at(act, input.get(row, c), input.get(row, d + c));
        ref.push_back(v.value);
        sens.push_back(v.sensitivity);
        flush.push_back(v.flush_scale);
        got.set(r, c, static_cast<float>(out.get(row, c)));
      }
    }
    const ft::Comparison cmp = ft::compare(got, ref, sens, tol, flush);
    EXPECT_TRUE(cmp.pass) << "expert " << e << ": " << cmp.detail;
  }
  EXPECT_TRUE(ws.unchanged_outside(valid)) << "written outside the valid rows (or an input changed)";
  EXPECT_TRUE(wm.unchanged_outside({})) << "masked_m changed";
}

class ActivationMasked : public ::testing::TestWithParam<MaskedParam> {};

TEST_P(ActivationMasked, MatchesGoldenOnValidRowsOnly) {
  const auto [where, dtype] = GetParam();
  FUSEOPS_SKIP_UNLESS_RUNNABLE(where);
  std::mt19937_64 rng = test_rng();
  struct Shape {
    int64_t E, T_max, d;
  };
  const Shape shapes[] = {{1, 1, 1}, {3, 5, 7}, {8, 16, 64}, {64, 4, 8}, {130, 3, 24}, {2, 3, 3420}, {5, 0, 8}};
  for (const Shape& s : shapes) {
    for (Counts c : {Counts::zeros, Counts::full, Counts::uneven, Counts::out_of_range, Counts::sparse}) {
      for (Act act : {Act::silu, Act::gelu, Act::gelu_tanh}) {
        const bool pitched = act == Act::gelu;
        check_masked(where, dtype, act, s.E, s.T_max, s.d, c, pitched, act == Act::gelu_tanh ? DType::i64 : DType::i32,
                     rng);
        if (HasFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, ActivationMasked,
                         ::testing::Values(MaskedParam{Where::cpu, DType::f32}, MaskedParam{Where::cpu, DType::bf16},
                                           MaskedParam{Where::cuda, DType::f32}, MaskedParam{Where::cuda, DType::f16},
                                           MaskedParam{Where::cuda, DType::bf16}),
                         masked_name);

// The benchmark's shape at reduced T_max: 8 busy experts of 64, the rest empty; and every expert busy with the
// grid-stride loop running several times (more valid rows than the grid holds).
TEST(ActivationMaskedLarge, FewBusyExpertsAndManyRows) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng = test_rng();
  check_masked(Where::cuda, DType::bf16, Act::silu, 64, 512, 256, Counts::uneven, false, DType::i32, rng);
  check_masked(Where::cuda, DType::bf16, Act::silu, 16, 8192, 64, Counts::full, false, DType::i32, rng);
  check_masked(Where::cuda, DType::f16, Act::gelu, 4096, 3, 8, Counts::uneven, true, DType::i32, rng);
  // a decode step's few rows over many experts (each thread's rows cross long runs of empty experts)
  check_masked(Where::cuda, DType::bf16, Act::silu, 512, 2, 512, Counts::sparse, false, DType::i32, rng);
  check_masked(Where::cuda, DType::bf16, Act::silu, 4096, 64, 128, Counts::sparse, false, DType::i64, rng);
}

// Validation errors name the op and the argument.
TEST(ActivationMaskedErrors, EveryArgument) {
  std::vector<float> a(1 << 12), b(1 << 12);
  std::vector<int32_t> m(64);
  const fuseops::Device cpu = fuseops::Device::cpu();
  auto in = [&](std::initializer_list<int64_t> s, DType t = DType::f32) { return TensorView(a.data(), t, cpu, s); };
  auto out = [&](std::initializer_list<int64_t> s, DType t = DType::f32) { return TensorView(b.data(), t, cpu, s); };
  auto mm = [&](std::initializer_list<int64_t> s, DType t = DType::i32) { return TensorView(m.data(), t, cpu, s); };
  const char* op = "silu_and_mul_masked";
  EXPECT_NO_THROW(fuseops::silu_and_mul_masked(out({4, 8, 16}), in({4, 8, 32}), mm({4})));
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(out({4, 8, 16}), in({4, 8, 32}, DType::i32), mm({4})), op, "input");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(out({4, 8, 16}, DType::bf16), in({4, 8, 32}), mm({4})), op, "out");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(out({32, 16}), in({32, 32}), mm({4})), op, "input", "rank 3");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(out({4, 8, 16}), in({4, 8, 31}), mm({4})), op, "input", "even");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(out({4, 8, 15}), in({4, 8, 32}), mm({4})), op, "out", "[4, 8, 16]");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(out({4, 7, 16}), in({4, 8, 32}), mm({4})), op, "out");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(out({4, 8, 16}), in({4, 8, 32}), mm({5})), op, "masked_m", "[4]");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(out({4, 8, 16}), in({4, 8, 32}), mm({4}, DType::f32)), op,
                   "masked_m", "i32 | i64");
  EXPECT_ARG_ERROR(
      fuseops::silu_and_mul_masked(out({4, 8, 16}), TensorView(a.data(), DType::f32, cpu, {4, 8, 32}, {512, 64, 2}),
                                   mm({4})),
      op, "input", "innermost stride 1");
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(in({4, 8, 16}), in({4, 8, 32}), mm({4})), op, "out", "overlap",
                   "(their address ranges are compared), got overlapping address ranges");
  // masked_m inside out (an input as well): expert 0's rows would overwrite expert 1's count
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(out({4, 8, 16}), in({4, 8, 32}),
                                                TensorView(b.data() + 1, DType::i32, cpu, {4})),
                   op, "out", "no overlap with masked_m");
  EXPECT_ARG_ERROR(fuseops::gelu_and_mul_masked(out({4, 8, 16}), in({4, 8, 32}),
                                                TensorView(b.data() + 1, DType::i32, cpu, {4})),
                   "gelu_and_mul_masked", "out", "no overlap with masked_m");
  // out rows or experts sharing elements: rows 2 apart at d = 4, or one row block for every expert
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(TensorView(b.data(), DType::f32, cpu, {1, 2, 4}, {16, 2, 1}),
                                                in({1, 2, 8}), mm({1})),
                   op, "out", "do not share memory");
  EXPECT_ARG_ERROR(fuseops::gelu_and_mul_masked(TensorView(b.data(), DType::f32, cpu, {2, 2, 4}, {0, 4, 1}),
                                                in({2, 2, 8}), mm({2})),
                   "gelu_and_mul_masked", "out", "do not share memory");
  TensorView mc = mm({4});
  mc.device = fuseops::Device::cuda(0);
  EXPECT_ARG_ERROR(fuseops::silu_and_mul_masked(out({4, 8, 16}), in({4, 8, 32}), mc), op, "masked_m", "device");
  std::vector<int32_t> many(4097);
  EXPECT_ARG_ERROR(fuseops::gelu_and_mul_masked(out({4097, 0, 2}), in({4097, 0, 4}),
                                                TensorView(many.data(), DType::i32, cpu, {4097})),
                   "gelu_and_mul_masked", "input", "at most 4096 experts");
}

}  // namespace
}  // namespace fuseops_test
