// Accuracy of the gated norm (layer_norm_fwd) against the float64 golden, on the CPU backend always and on the CUDA
// backend when a device is present: every dtype x weight dtype x backend is one test that sweeps RMS / LayerNorm,
// the three gate modes, bias, group sizes (one group, many groups, groups past a warp and past 1024 vectors), value
// distributions and layouts (contiguous, pitched rows, misaligned starts that force the scalar path). Outputs and
// statistics are poisoned with NaN first, and padding between output rows must stay untouched.
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "reference/norm.h"
#if defined(FUSEOPS_WITH_CUDA)
#include "cuda/launch.h"
#include "ops/norm_impl.h"
#endif
#include "test_util.h"

namespace fuseops_test {
namespace {

using fuseops::reference::NormGate;

struct Param {
  Where where;
  DType dtype;
  bool f32_weight;
};

std::string param_name(const Param& p) {
  return std::string(where_name(p.where)) + "_" + fuseops::dtype_name(p.dtype) + (p.f32_weight ? "_w32" : "");
}
void PrintTo(const Param& p, std::ostream* os) { *os << param_name(p); }

std::vector<Param> all_params() {
  std::vector<Param> v;
  for (Where where : {Where::cpu, Where::cuda}) {
    for (DType t : {DType::f32, DType::f16, DType::bf16}) {
      v.push_back({where, t, false});
      if (t != DType::f32) v.push_back({where, t, true});
    }
  }
  return v;
}

struct NormCase {
  int64_t rows, N, G;  // G = 0: one group
  NormGate gate;
  bool rms, bias, stats;
  bool misaligned = false, pitched = false;
  ft::Fill fill = ft::Fill::normal;
  double eps = 1e-6;
};

std::string describe(const NormCase& c) {
  const char* gate = c.gate == NormGate::none ? "none" : c.gate == NormGate::after_norm ? "after" : "before";
  return std::string(c.rms ? "rms" : "layer") + " [" + std::to_string(c.rows) + ", " + std::to_string(c.N) +
         "] G=" + std::to_string(c.G) + " gate=" + gate + (c.bias ? " bias" : "") + (c.stats ? " stats" : "") +
         (c.misaligned ? " misaligned" : "") + (c.pitched ? " pitched" : "") + " fill=" + ft::fill_name(c.fill);
}

/// What a case wrote: out, and mean / rstd (the workspace's NaN poison where not requested).
struct NormOutputs {
  HostTensor out, mean, rstd;
};

/// Runs one case, records gtest failures and returns what it wrote.
NormOutputs check_norm(const Param& p, const NormCase& c, std::mt19937_64& rng) {
  SCOPED_TRACE(param_name(p) + ": " + describe(c) + ", FUSEOPS_SEED=" + std::to_string(run_seed()));
  const DType wdt = p.f32_weight ? DType::f32 : p.dtype;
  const int64_t off = c.misaligned ? 1 : 0, pitch = c.pitched ? c.N + 16 : c.misaligned ? c.N + 1 : 0;
  const bool gated = c.gate != NormGate::none;
  Workspace ws(p.where, p.dtype), wsw(p.where, wdt), wss(p.where, DType::f32);
  const Region rx = ws.region({c.rows, c.N}, off, pitch), rout = ws.region({c.rows, c.N}, off, pitch);
  const Region rz = ws.region({c.rows, c.N}, off, pitch);
  const Region rw = wsw.region({c.N}, off), rb = wsw.region({c.N}, off);
  const int64_t nstat = (c.G == 0 ? 1 : c.N / c.G) * c.rows;
  const Region rmean = wss.region({nstat}), rrstd = wss.region({nstat});

  HostTensor x(p.dtype, {c.rows, c.N}), z(p.dtype, {c.rows, c.N}), w(wdt, {c.N}), b(wdt, {c.N});
  ft::fill_random(x, c.fill, rng);
  ft::fill_random(z, c.fill == ft::Fill::adversarial ? ft::Fill::adversarial : ft::Fill::normal, rng);
  ft::fill_random(w, ft::Fill::normal, rng);
  ft::fill_random(b, ft::Fill::normal, rng);
  ws.write(rx, x);
  ws.write(rz, z);
  wsw.write(rw, w);
  wsw.write(rb, b);
  ws.upload();
  wsw.upload();
  wss.upload();
  const TensorView vz = ws.view(rz), vb = wsw.view(rb), vmean = wss.view(rmean), vrstd = wss.view(rrstd);
  fuseops::layer_norm_fwd(ws.view(rout), c.stats && !c.rms ? &vmean : nullptr, c.stats ? &vrstd : nullptr,
                          ws.view(rx), wsw.view(rw), c.bias ? &vb : nullptr, gated ? &vz : nullptr, c.eps, c.G,
                          c.gate != NormGate::before_norm, c.rms);
  ws.download();
  wss.download();

  const auto gold = fuseops::reference::layer_norm_fwd(x, gated ? &z : nullptr, w, c.bias ? &b : nullptr, c.eps, c.G,
                                                       c.gate, c.rms);
  const double ulps = fuseops::reference::kNormMathUlps;
  const ft::Comparison co =
      ft::compare(ws.read(rout), gold.out, gold.out_sens, ft::Tolerance::for_dtype(p.dtype, ulps), gold.out_flush);
  EXPECT_TRUE(co.pass) << "out: " << co.detail;
  EXPECT_TRUE(ws.unchanged_outside({rout})) << "x, z or the padding of out changed";
  std::vector<Region> stats_written;
  if (c.stats) {
    const ft::Tolerance t32 = ft::Tolerance::for_dtype(DType::f32, ulps);
    const ft::Comparison cr = ft::compare(wss.read(rrstd), gold.rstd, gold.rstd_sens, t32);
    EXPECT_TRUE(cr.pass) << "rstd: " << cr.detail;
    stats_written.push_back(rrstd);
    if (!c.rms) {
      const ft::Comparison cm = ft::compare(wss.read(rmean), gold.mean, gold.mean_sens, t32);
      EXPECT_TRUE(cm.pass) << "mean: " << cm.detail;
      stats_written.push_back(rmean);
    }
  }
  EXPECT_TRUE(wss.unchanged_outside(stats_written)) << "a statistic that was not requested was written";
  return {ws.read(rout), wss.read(rmean), wss.read(rrstd)};
}

class NormAccuracy : public ::testing::TestWithParam<Param> {};

TEST_P(NormAccuracy, MatchesGolden) {
  const Param p = GetParam();
  FUSEOPS_SKIP_UNLESS_RUNNABLE(p.where);
  std::mt19937_64 rng = test_rng();
  const NormGate gates[] = {NormGate::none, NormGate::after_norm, NormGate::before_norm};
  // (rows, N, G): one group, Qwen3-Next's 128-wide heads, odd widths, > 32 and > 1024 vectors per group; the wide
  // variant of the CUDA kernel (aligned groups of 2048-8192 16-bit / 1024-8192 f32 elements; 16 or 32 elements per
  // thread, a partly filled last vector slot at 6144): 4096, 8192, 6144, 2048, and 1024 for f32.
  const std::vector<std::array<int64_t, 3>> shapes = {
      {0, 64, 0}, {1, 1, 0}, {3, 7, 0}, {5, 128, 0}, {2, 512, 128}, {3, 60, 20}, {2, 1000, 500}, {1, 4096, 0},
      {2, 2048, 1024}, {2, 8192, 0}, {3, 6144, 0}, {2, 4096, 2048}};
  for (const auto& [rows, N, G] : shapes) {
    for (bool rms : {true, false}) {
      for (NormGate gate : gates) {
        for (int variant = 0; variant < 2; ++variant) {
          NormCase c{rows, N, G, gate, rms, variant == 1, variant == 0};
          c.fill = variant == 0 ? ft::Fill::normal : ft::Fill::wide;
          c.pitched = variant == 1;
          c.misaligned = variant == 0 && N == 128;
          check_norm(p, c, rng);
          if (HasFailure()) return;
        }
      }
    }
  }
  // Adversarial values (inf, NaN, huge, tiny) propagate as IEEE arithmetic does in the golden.
  for (NormGate gate : gates) {
    check_norm(p, NormCase{4, 96, 32, gate, false, true, true, false, false, ft::Fill::adversarial}, rng);
    check_norm(p, NormCase{4, 96, 0, gate, true, false, true, false, false, ft::Fill::adversarial}, rng);
  }
  // eps matters: small values whose variance is below eps; eps = 0.
  check_norm(p, NormCase{3, 256, 64, NormGate::after_norm, true, false, true, false, false, ft::Fill::wide, 1e-2}, rng);
  check_norm(p, NormCase{3, 256, 64, NormGate::none, false, true, true, false, false, ft::Fill::normal, 0.0}, rng);
}

INSTANTIATE_TEST_SUITE_P(All, NormAccuracy, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<Param>& info) { return param_name(info.param); });

// The largest group (16384 elements) on every path: 16-byte vectors with two vectors per thread, and the scalar path
// (misaligned rows) with sixteen elements per thread. CUDA only: the CPU path is the same loop as every other case.
TEST(NormLargeGroup, BothVectorPaths) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng = test_rng();
  for (DType t : {DType::bf16, DType::f32}) {
    for (bool misaligned : {false, true}) {
      NormCase c{3, 16384, 0, NormGate::after_norm, false, true, true};
      c.misaligned = misaligned;
      check_norm(Param{Where::cuda, t, false}, c, rng);
      c.rms = true;
      c.gate = NormGate::before_norm;
      check_norm(Param{Where::cuda, t, true}, c, rng);
    }
  }
}

// Many rows of Qwen3-Next's shape (groups of 128 = 8 threads of a warp each, two 16-byte vectors per thread).
TEST(NormLargeGroup, ManyRows) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng = test_rng();
  check_norm(Param{Where::cuda, DType::bf16, false},
             NormCase{4096, 4096, 128, NormGate::after_norm, true, false, true}, rng);
}

// Whole-row norms of the bench (the wide variant) over many rows: LayerNorm with bias and gate, RMSNorm without.
TEST(NormLargeGroup, WideRows) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng = test_rng();
  check_norm(Param{Where::cuda, DType::bf16, false},
             NormCase{4096, 4096, 0, NormGate::after_norm, false, true, true}, rng);
  check_norm(Param{Where::cuda, DType::bf16, true}, NormCase{2048, 8192, 0, NormGate::none, true, false, true}, rng);
  check_norm(Param{Where::cuda, DType::f32, false},
             NormCase{512, 8192, 4096, NormGate::before_norm, false, true, true}, rng);
}

struct FormCase {
  Param p;
  NormCase c;
};

/// Sets `name` to "0" for its lifetime, then restores the earlier value (or its absence).
class SwitchedOff {
 public:
  explicit SwitchedOff(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) before_ = v;
    setenv(name, "0", 1);
  }
  ~SwitchedOff() {
    if (before_) {
      setenv(name_, before_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  SwitchedOff(const SwitchedOff&) = delete;
  SwitchedOff& operator=(const SwitchedOff&) = delete;

 private:
  const char* name_;
  std::optional<std::string> before_;
};

/// Runs each case with the default launch and with the switch `env` = 0 (same seed) and expects the same bytes of
/// out, mean and rstd; both runs are also checked against the golden by check_norm.
void expect_same_bytes_without(const char* env, std::initializer_list<FormCase> cases) {
  const std::mt19937_64 seeded = test_rng();
  for (const auto& k : cases) {
    SCOPED_TRACE(param_name(k.p) + ": " + describe(k.c) + ", " + env + "=0");
    std::mt19937_64 rng = seeded;
    const NormOutputs on = check_norm(k.p, k.c, rng);
    const NormOutputs off = [&] {
      const SwitchedOff scope(env);
      rng = seeded;
      return check_norm(k.p, k.c, rng);
    }();
    EXPECT_TRUE(same_bytes(on.out, off.out)) << "out";
    EXPECT_TRUE(same_bytes(on.mean, off.mean)) << "mean";
    EXPECT_TRUE(same_bytes(on.rstd, off.rstd)) << "rstd";
  }
}

// The wide variant's storage form (16-bit x held as stored, 32 elements per thread; docs/ops/norm.md) gives the same
// bytes as x held as floats (FUSEOPS_NORM_RAW=0): whole rows of 4104-8192 elements (threads holding 3 or 4 vectors),
// groups of 8192, every gate but the one before the norm (which always holds floats), both weight dtypes.
TEST(NormWide, StorageFormSameBytes) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  expect_same_bytes_without(
      "FUSEOPS_NORM_RAW",
      {{{Where::cuda, DType::bf16, true}, {64, 8192, 0, NormGate::none, true, false, true}},
       {{Where::cuda, DType::f16, false}, {33, 5000, 0, NormGate::after_norm, false, true, true}},
       {{Where::cuda, DType::bf16, false}, {17, 16384, 8192, NormGate::after_norm, true, false, true}},
       {{Where::cuda, DType::bf16, false}, {9, 4104, 0, NormGate::none, false, true, true}}});
}

#if defined(FUSEOPS_WITH_CUDA)
struct RuledCase {
  FormCase k;
  bool taken;  ///< whether the default run takes the form that `env` = 0 turns off
};

/// expect_same_bytes_without(env, ...) per case, and that `launches` (a launch counter of the form) counted exactly
/// one launch where the case says the form is taken (the run with `env` = 0 never takes it), none elsewhere.
void expect_same_bytes_where_ruled(const char* env, int64_t (*launches)(), std::initializer_list<RuledCase> cases) {
  for (const auto& c : cases) {
    const bool on = !fuseops::detail::env_switched_off(env);
    const int64_t before = launches();
    expect_same_bytes_without(env, {c.k});
    EXPECT_EQ(launches() - before, on && c.taken ? 1 : 0) << param_name(c.k.p) << ": " << describe(c.k.c);
  }
}

// Weight and bias staged in shared memory (launches of one wave: at most one block per SM; docs/ops/norm.md) give the
// same bytes as read at their use (FUSEOPS_NORM_STAGE=0), on the wide variant's few-row launches: both weight dtypes
// with and without bias (f32 weight and bias of 8192 elements are past the staging bound: both runs read them at
// their use), 2-4 vectors per thread, several groups per row (each item stages its own group's columns), every gate,
// f32 x, and groups of 16384 (the per-item kernel's 1024-thread segments); each run stages exactly where it should.
TEST(NormWide, StagedWeightSameBytes) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  expect_same_bytes_where_ruled("FUSEOPS_NORM_STAGE", fuseops::detail::cuda::norm_staged_launches_for_testing, {
      {{{Where::cuda, DType::bf16, false}, {64, 8192, 0, NormGate::none, true, false, true}}, true},
      {{{Where::cuda, DType::bf16, true}, {40, 8192, 0, NormGate::after_norm, false, true, true}}, false},
      {{{Where::cuda, DType::bf16, true}, {20, 4096, 0, NormGate::none, true, true, true}}, true},
      {{{Where::cuda, DType::f16, false}, {33, 4096, 0, NormGate::after_norm, false, true, true}}, true},
      {{{Where::cuda, DType::bf16, false}, {17, 16384, 4096, NormGate::before_norm, false, true, true}}, true},
      {{{Where::cuda, DType::bf16, false}, {9, 5000, 0, NormGate::after_norm, false, true, false}}, true},
      {{{Where::cuda, DType::f32, false}, {12, 8192, 2048, NormGate::after_norm, false, true, true}}, true},
      {{{Where::cuda, DType::bf16, false}, {3, 16384, 0, NormGate::after_norm, false, false, true}}, true},
  });
}

// The row-pipelined kernel (docs/ops/norm.md: x and z of a segment's next item copied into shared memory while the
// current one is normalised; a persistent grid) gives the bytes of the per-item kernels (FUSEOPS_NORM_PIPE=0), and runs
// exactly where its rule says: more blocks than one wave, 16-byte vectors, no gate before the norm. Cases: whole rows
// (RMSNorm 8192, LayerNorm 4096 with gate and bias), Qwen3-Next's groups of 128 (f32 weight too), groups whose count
// does not divide a block's segments (3 groups of 256: the grid's item stride a multiple of 3), 3 groups of 2048 (one
// block per item), f16 groups of 40 (5 vectors: one per thread), f32 rows of 2048 and 4096 (4 vectors per thread), 5
// groups of 256 (a grid of a multiple of 5 blocks: 525 of 528 on an H200), rows of 5000 (the last of 3 vectors per
// thread partly filled); not taken: a gate before the norm, few rows, shared memory past its bound (f32 weight and bias
// on groups of 128; rows of 5000 with a bias, laid out for 4 vectors per thread), 1009 groups of 8 per row (a grid
// stride that keeps each segment's group would need more blocks than a wave), more blocks than SMs but fewer than a
// wave.
TEST(NormPipelined, SameBytesWhereTaken) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  const int64_t sms = fuseops::detail::sm_count(0);
  // two launches per case (golden-checked on, off): the first takes the kernel where the rule says, the second never
  expect_same_bytes_where_ruled("FUSEOPS_NORM_PIPE", fuseops::detail::cuda::norm_pipelined_launches_for_testing, {
      {{{Where::cuda, DType::bf16, false}, {2048, 8192, 0, NormGate::none, true, false, true}}, true},
      {{{Where::cuda, DType::bf16, false}, {2048, 4096, 0, NormGate::after_norm, false, true, true}}, true},
      {{{Where::cuda, DType::bf16, false}, {1200, 4096, 128, NormGate::after_norm, true, false, true}}, true},
      {{{Where::cuda, DType::bf16, true}, {1200, 4096, 128, NormGate::after_norm, false, false, true}}, true},
      {{{Where::cuda, DType::bf16, false}, {12000, 768, 256, NormGate::after_norm, false, true, true}}, true},
      {{{Where::cuda, DType::f16, false}, {700, 6144, 2048, NormGate::none, false, false, true}}, true},
      {{{Where::cuda, DType::f16, true}, {40000, 80, 40, NormGate::after_norm, true, true, true}}, true},
      {{{Where::cuda, DType::f32, false}, {3000, 2048, 0, NormGate::after_norm, false, true, true}}, true},
      {{{Where::cuda, DType::bf16, false}, {2048, 8192, 0, NormGate::before_norm, true, false, true}}, false},
      {{{Where::cuda, DType::bf16, false}, {64, 8192, 0, NormGate::none, true, false, true}}, false},
      {{{Where::cuda, DType::bf16, true}, {1200, 4096, 128, NormGate::after_norm, false, true, true}}, false},
      {{{Where::cuda, DType::bf16, false}, {3000, 1280, 256, NormGate::after_norm, true, false, true}}, true},
      {{{Where::cuda, DType::bf16, false}, {2000, 5000, 0, NormGate::none, false, false, true}}, true},
      {{{Where::cuda, DType::bf16, false}, {2000, 5000, 0, NormGate::none, false, true, true}}, false},
      {{{Where::cuda, DType::f32, false}, {1500, 4096, 0, NormGate::none, true, false, true}}, true},
      {{{Where::cuda, DType::bf16, false}, {200, 8072, 8, NormGate::none, true, false, true}}, false},
      {{{Where::cuda, DType::bf16, false}, {sms + 8, 8192, 0, NormGate::none, true, false, true}}, false},
  });
}

#endif

// Repeated runs give the same bits (fixed reduction order), and a row's result does not depend on the other rows.
TEST(NormDeterminism, BitwiseRepeatableAndRowIndependent) {
  for (Where where : {Where::cpu, Where::cuda}) {
    if (where == Where::cuda && !cuda_available()) continue;
    std::mt19937_64 rng = test_rng();
    const int64_t rows = 64, N = 1024;
    HostTensor x(DType::bf16, {rows, N}), z(DType::bf16, {rows, N}), w(DType::bf16, {N});
    for (HostTensor* t : {&x, &z, &w}) ft::fill_random(*t, ft::Fill::normal, rng);
    auto run = [&](int64_t nrows) {
      Workspace ws(where, DType::bf16);
      const Region rx = ws.region({nrows, N}), rz = ws.region({nrows, N}), ro = ws.region({nrows, N}),
                   rw = ws.region({N});
      HostTensor xs(DType::bf16, {nrows, N}), zs(DType::bf16, {nrows, N});
      for (int64_t r = 0; r < nrows; ++r) {
        for (int64_t c = 0; c < N; ++c) {
          xs.set(r, c, static_cast<float>(x.get(r, c)));
          zs.set(r, c, static_cast<float>(z.get(r, c)));
        }
      }
      ws.write(rx, xs);
      ws.write(rz, zs);
      ws.write(rw, w);
      ws.upload();
      const TensorView vz = ws.view(rz);
      fuseops::layer_norm_fwd(ws.view(ro), nullptr, nullptr, ws.view(rx), ws.view(rw), nullptr, &vz, 1e-6, 256);
      ws.download();
      return ws.read(ro);
    };
    const HostTensor a = run(rows), b = run(rows), one = run(1);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.bytes()), 0) << where_name(where) << ": repeated runs differ";
    EXPECT_EQ(std::memcmp(a.data(), one.data(), one.bytes()), 0) << where_name(where) << ": row 0 depends on the batch";
  }
}

/// An output's starting value that no op result below equals and that is not NaN (Workspace poisons with NaN).
HostTensor finite_sentinel(DType dt, const std::vector<int64_t>& shape) {
  HostTensor t(dt, shape);
  for (int64_t r = 0; r < t.rows(); ++r) {
    for (int64_t c = 0; c < t.cols(); ++c) t.set(r, c, 7.0f);
  }
  return t;
}

// Edge values documented in docs/ops/norm.md: eps = 0 on a zero-variance group gives rstd = Inf and NaN outputs (as
// FLA); the SiLU gate of z = -Inf is NaN, of z = +Inf is +Inf, of finite z of any magnitude finite.
TEST(NormEdgeValues, EpsZeroAndInfiniteGates) {
  const float inf = std::numeric_limits<float>::infinity();
  for (Where where : {Where::cpu, Where::cuda}) {
    if (where == Where::cuda && !cuda_available()) continue;
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE(std::string(where_name(where)) + " " + fuseops::dtype_name(dt));
      const int64_t N = 8;
      for (bool rms : {true, false}) {  // eps = 0, one all-zero (RMS) / constant (LayerNorm) row, one ordinary row
        Workspace ws(where, dt), wss(where, DType::f32);
        const Region rx = ws.region({2, N}), ro = ws.region({2, N}), rw = ws.region({N});
        const Region rrstd = wss.region({2});
        HostTensor x(dt, {2, N}), w(dt, {N});
        for (int64_t c = 0; c < N; ++c) {
          x.set(0, c, rms ? 0.0f : 3.0f);
          x.set(1, c, static_cast<float>(c) - 2.5f);
          w.set(0, c, 1.0f);
        }
        ws.write(rx, x);
        ws.write(rw, w);
        ws.write(ro, finite_sentinel(dt, {2, N}));  // not the NaN poison: the NaNs below must be the op's
        ws.upload();
        wss.upload();
        const TensorView vr = wss.view(rrstd);
        fuseops::layer_norm_fwd(ws.view(ro), nullptr, &vr, ws.view(rx), ws.view(rw), nullptr, nullptr, 0.0, 0, true,
                                rms);
        ws.download();
        wss.download();
        const HostTensor out = ws.read(ro), rstd = wss.read(rrstd);
        EXPECT_EQ(static_cast<float>(rstd.get(0, 0)), inf) << (rms ? "rms" : "layer");
        EXPECT_TRUE(std::isfinite(static_cast<float>(rstd.get(0, 1))));
        for (int64_t c = 0; c < N; ++c) {
          EXPECT_TRUE(std::isnan(static_cast<float>(out.get(0, c)))) << c;
          EXPECT_TRUE(std::isfinite(static_cast<float>(out.get(1, c)))) << c;
        }
      }
      // gates after the norm: z = -Inf, +Inf, -1e30, 1e30 (bf16 holds both), 0 on a row of ones (normalised: 1)
      Workspace ws(where, dt);
      const Region rx = ws.region({1, 5}), rz = ws.region({1, 5}), ro = ws.region({1, 5}), rw = ws.region({5});
      HostTensor x(dt, {1, 5}), z(dt, {1, 5}), w(dt, {5});
      const float zs[5] = {-inf, inf, -1e30f, 1e30f, 0.0f};
      for (int64_t c = 0; c < 5; ++c) {
        x.set(0, c, 1.0f);
        z.set(0, c, zs[c]);
        w.set(0, c, 1.0f);
      }
      ws.write(rx, x);
      ws.write(rz, z);
      ws.write(rw, w);
      ws.write(ro, finite_sentinel(dt, {1, 5}));
      ws.upload();
      const TensorView vz = ws.view(rz);
      fuseops::layer_norm_fwd(ws.view(ro), nullptr, nullptr, ws.view(rx), ws.view(rw), nullptr, &vz, 1e-6, 0, true,
                              true);
      ws.download();
      const HostTensor out = ws.read(ro);
      EXPECT_TRUE(std::isnan(static_cast<float>(out.get(0, 0))));
      EXPECT_EQ(static_cast<float>(out.get(0, 1)), inf);
      EXPECT_EQ(static_cast<float>(out.get(0, 2)), 0.0f);  // -1e30 x sigmoid(-1e30) = -0
      EXPECT_TRUE(std::isfinite(static_cast<float>(out.get(0, 3))));
      EXPECT_EQ(static_cast<float>(out.get(0, 4)), 0.0f);
    }
  }
}

}  // namespace
}  // namespace fuseops_test
