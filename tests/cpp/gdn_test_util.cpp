#include "gdn_test_util.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "common/gdn_chunks.h"

namespace fuseops_test::gdn {

namespace ref = fuseops::reference;

const char* decay_name(Decay d) {
  switch (d) {
    case Decay::realistic: return "realistic";
    case Decay::none: return "none";
    case Decay::zero: return "zero";
    case Decay::strong: return "strong";
    case Decay::extreme: return "extreme";
    case Decay::mixed: return "mixed";
  }
  return "?";
}

std::string seqlens_text(const std::vector<int64_t>& seqlens) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < seqlens.size(); ++i) os << (i ? "," : "") << seqlens[i];
  os << "]";
  return os.str();
}

std::string Spec::describe() const {
  std::ostringstream os;
  os << "B=" << B << " T=" << T << " H=" << H << " HV=" << HV << " K=" << K << " BT=" << BT;
  if (varlen()) os << " seqlens=" << seqlens_text(seqlens) << " cu " << fuseops::dtype_name(cu_dtype);
  os << " k " << fuseops::dtype_name(k_dtype) << " beta " << (has_beta ? fuseops::dtype_name(beta_dtype) : "none")
     << " out " << fuseops::dtype_name(out_dtype) << " decay " << decay_name(decay)
     << (keys == Keys::wide ? " wide keys" : "") << (strided ? " strided" : "") << (aligned ? " aligned" : "")
     << ", FUSEOPS_SEED=" << run_seed();
  return os.str();
}

Spec fixed(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t BT) {
  Spec s;
  s.B = B;
  s.T = T;
  s.H = H;
  s.HV = HV;
  s.K = K;
  s.BT = BT;
  return s;
}

Spec varlen(std::vector<int64_t> seqlens, int64_t H, int64_t HV, int64_t K, int64_t BT) {
  Spec s = fixed(1, 0, H, HV, K, BT);
  for (int64_t l : seqlens) s.T += l;
  s.seqlens = std::move(seqlens);
  return s;
}

double draw_decay(Decay d, int64_t hv, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  switch (d) {
    case Decay::realistic: return log_sigmoid(normal(rng) + 2.0 * static_cast<double>(hv % 3 - 1));
    case Decay::none:
    case Decay::zero: return 0.0;
    case Decay::strong: return -100.0 - 100.0 * uni(rng);
    case Decay::extreme: return -std::pow(10.0, 2.0 + 28.0 * uni(rng));
    case Decay::mixed: {
      const double p = uni(rng);
      if (p < 0.2) return 0.0;
      if (p < 0.35) return -1e-3;
      if (p < 0.6) return log_sigmoid(normal(rng));
      if (p < 0.75) return -30.0;
      if (p < 0.9) return -100.0;
      return -1e4;
    }
  }
  return 0.0;
}

Inputs make_inputs(const Spec& s, std::mt19937_64& rng) {
  Inputs in;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  in.k = HostTensor(s.k_dtype, {s.B, s.T, s.H, s.K});
  std::vector<double> row(static_cast<std::size_t>(s.K));
  for (int64_t r = 0; r < in.k.rows(); ++r) {
    double norm2 = 0;
    for (double& x : row) {
      x = normal(rng);
      norm2 += x * x;
    }
    const double target = s.keys == Keys::wide ? std::pow(10.0, -3.0 + 4.5 * uni(rng)) : 1.0;
    const double f = norm2 > 0 ? target / std::sqrt(norm2) : 0.0;
    for (int64_t c = 0; c < s.K; ++c) in.k.set(r, c, static_cast<float>(row[c] * f));
  }
  if (s.varlen()) in.cu = cu_seqlens_of(s.seqlens);
  if (s.has_g()) {
    in.g = HostTensor(DType::f32, {s.B, s.T, s.HV});
    for (const ref::GdnChunk& c : ref::gdn_chunks(s.B, s.T, s.BT, in.cu)) {
      for (int64_t h = 0; h < s.HV; ++h) {
        double sum = 0;  // the chunk-local cumsum, in double
        for (int64_t i = 0; i < c.len; ++i) {
          sum += draw_decay(s.decay, h, rng);
          in.g.set(c.batch * s.T + c.row0 + i, h, static_cast<float>(sum));
        }
      }
    }
  } else {
    in.g = HostTensor(DType::f32, {0});
  }
  if (s.has_beta) {
    in.beta = HostTensor(s.beta_dtype, {s.B, s.T, s.HV});
    for (int64_t r = 0; r < in.beta.rows(); ++r) {
      for (int64_t h = 0; h < s.HV; ++h) in.beta.set(r, h, static_cast<float>(1.0 / (1.0 + std::exp(-normal(rng)))));
    }
  } else {
    in.beta = HostTensor(s.beta_dtype, {0});
  }
  return in;
}

ref::KktInputs Inputs::golden_inputs(const Spec& s) const {
  ref::KktInputs r;
  r.k = &k;
  r.g = s.has_g() ? &g : nullptr;
  r.beta = s.has_beta ? &beta : nullptr;
  r.chunk_size = s.BT;
  r.cu_seqlens = cu;
  return r;
}

// ---------------------------------------------------------------------------------------------------------------

Placed::Placed(Where where, const HostTensor& compact, int64_t pad, int64_t guard) : ws_(where, compact.dtype()) {
  region_.shape = compact.shape();
  region_.pitch = region_.cols() + pad;
  region_.offset = guard;
  region_.buffer = ws_.buffer(region_.end() + guard);
  ws_.write(region_, compact);
}

Placed::Placed(Where where, DType dtype, std::vector<int64_t> shape, int64_t guard) : ws_(where, dtype) {
  region_.shape = std::move(shape);
  region_.pitch = region_.cols();
  region_.offset = guard;
  region_.buffer = ws_.buffer(region_.end() + guard);
}

::testing::AssertionResult Placed::untouched_outside(bool is_output) const {
  if (is_output) return ws_.unchanged_outside({region_});
  return ws_.unchanged_outside({});
}

::testing::AssertionResult Placed::untouched_outside_tokens(const std::vector<std::pair<int64_t, int64_t>>& ranges) const {
  // One token of batch row 0 spans shape[2] rows of the region (heads; the inner dim is the row).
  const bool rank4 = region_.shape.size() == 4;
  const int64_t rows_per_token = rank4 ? region_.shape[2] : 1;
  std::vector<Region> written;
  for (auto [begin, end] : ranges) {
    if (end <= begin) continue;
    Region r = region_;
    r.offset = region_.offset + begin * rows_per_token * region_.pitch;
    r.shape = rank4 ? std::vector<int64_t>{end - begin, rows_per_token, region_.cols()}
                    : std::vector<int64_t>{end - begin, region_.cols()};
    written.push_back(r);
  }
  return ws_.unchanged_outside(written);
}

// ---------------------------------------------------------------------------------------------------------------

::testing::AssertionResult matches_golden(const HostTensor& out, const ref::GdnGolden& gold, ref::GdnStage stage,
                                          int64_t K, int64_t BT) {
  const ft::Tolerance tol = ref::gdn_tolerance(stage, out.dtype(), K, BT);
  const ft::Comparison c = ft::compare(out, gold.value, gold.sensitivity, tol);
  const ref::RmsCheck rms = ref::gdn_rms_check(out, gold.value);
  if (c.pass && rms.pass) return ::testing::AssertionSuccess();
  auto f = ::testing::AssertionFailure();
  if (!c.pass) {
    f << c.violations << " of " << c.count << " elements outside " << tol.describe() << "; first: " << c.detail
      << "; ";
  }
  if (rms.nonfinite) f << rms.nonfinite << " non-finite elements; ";
  f << "rel rms " << rms.rel_rms_error << " (limit " << rms.limit << "), max abs err " << c.max_abs_error;
  return f;
}

Results run_all(Where where, const Spec& s, const Inputs& in) {
  const int64_t pad = s.strided ? 3 : 0, guard = s.aligned ? 8 : 5;
  Placed k(where, in.k, s.strided ? 8 : 0, guard);
  // g and beta: [B, T, HV] with rows of HV (+ pad) per token.
  std::unique_ptr<Placed> g, beta, cu;
  if (s.has_g()) g = std::make_unique<Placed>(where, in.g, pad, guard);
  if (s.has_beta) beta = std::make_unique<Placed>(where, in.beta, pad, guard);
  if (s.varlen()) {
    cu = std::make_unique<Placed>(where, ft::index_tensor(s.cu_dtype, in.cu), 0, guard);
  }
  const std::vector<int64_t> shape = {s.B, s.T, s.HV, s.BT};
  Placed A(where, s.out_dtype, shape, guard), A32(where, DType::f32, shape, guard),
      Ai_unfused(where, s.out_dtype, shape, guard), Ai_fused(where, s.out_dtype, shape, guard),
      Ai_from_A(where, s.out_dtype, shape, guard), Ai_again(where, s.out_dtype, shape, guard);
  std::vector<Placed*> inputs = {&k}, outputs = {&A, &A32, &Ai_unfused, &Ai_fused, &Ai_from_A, &Ai_again};
  for (auto* p : {g.get(), beta.get(), cu.get()}) {
    if (p) inputs.push_back(p);
  }
  for (Placed* p : inputs) p->upload();
  for (Placed* p : outputs) p->upload();

  const TensorView kv = k.view();
  TensorView gv, bv, cv;
  if (g) gv = g->view();
  if (beta) bv = beta->view();
  if (cu) cv = cu->view();
  const TensorView* gp = g ? &gv : nullptr;
  const TensorView* bp = beta ? &bv : nullptr;
  const TensorView* cp = cu ? &cv : nullptr;
  fuseops::chunk_scaled_dot_kkt_fwd(A.view(), kv, gp, bp, s.BT, cp);
  fuseops::chunk_scaled_dot_kkt_fwd(A32.view(), kv, gp, bp, s.BT, cp);
  fuseops::solve_tril(Ai_unfused.view(), A32.view(), cp);
  fuseops::chunk_gated_delta_rule_fwd_kkt_solve(Ai_fused.view(), kv, gp, bp, s.BT, cp);
  fuseops::solve_tril(Ai_from_A.view(), A.view(), cp);
  fuseops::chunk_gated_delta_rule_fwd_kkt_solve(Ai_again.view(), kv, gp, bp, s.BT, cp);

  for (Placed* p : inputs) p->download();
  for (Placed* p : outputs) p->download();
  for (Placed* p : inputs) EXPECT_TRUE(p->untouched_outside(false)) << "an input was modified";
  for (Placed* p : outputs) EXPECT_TRUE(p->untouched_outside(true)) << "written outside an output";
  return Results{A.read(), A32.read(), Ai_unfused.read(), Ai_fused.read(), Ai_from_A.read(), Ai_again.read()};
}

void check_spec(Where where, const Spec& s, std::mt19937_64& rng, bool check_inverse) {
  SCOPED_TRACE(std::string(where_name(where)) + ": " + s.describe());
  const Inputs in = make_inputs(s, rng);
  const Results r = run_all(where, s, in);
  const ref::KktInputs gi = in.golden_inputs(s);
  const ref::GdnGolden A = ref::chunk_scaled_dot_kkt(gi);
  EXPECT_TRUE(matches_golden(r.A, A, ref::GdnStage::kkt, s.K, s.BT)) << "A";
  EXPECT_TRUE(matches_golden(r.A32, A, ref::GdnStage::kkt, s.K, s.BT)) << "A (f32)";
  if (!check_inverse) return;
  EXPECT_TRUE(matches_golden(r.Ai_fused, ref::kkt_solve(gi), ref::GdnStage::kkt_solve, s.K, s.BT)) << "Ai (fused)";
  EXPECT_TRUE(same_bytes(r.Ai_fused, r.Ai_unfused)) << "fused != solve_tril(kkt in f32)";
  EXPECT_TRUE(same_bytes(r.Ai_fused, r.Ai_fused_again)) << "the fused op is not deterministic";
  EXPECT_TRUE(matches_golden(r.Ai_from_A, ref::solve_tril(r.A, in.cu), ref::GdnStage::solve_tril, s.K, s.BT))
      << "solve_tril(A in " << fuseops::dtype_name(s.out_dtype) << ")";
}

const std::vector<BadCu>& bad_cus() {
  static const std::vector<BadCu> cases = {
      {"decreasing", {0, 20, 10, 50}, 70, 1},
      {"first != 0", {5, 40, 70}, 70, 0},
      {"last < T", {0, 30, 60}, 70, 1},
      {"last > T", {0, 30, 90}, 70, 1},
      {"negative", {0, -5, -3}, 70, 0},
      {"beyond T in the middle", {0, 100, 70}, 70, 0},
      {"all zero with T > 0", {0, 0, 0}, 70, 1},
      {"huge", {0, int64_t{1} << 40, 70}, 70, 0},
      {"last > T = 0", {0, 3}, 0, 0},
      {"negative with T = 0", {0, -1, 0}, 0, 0},
  };
  return cases;
}

Clamped clamped_ranges(const std::vector<int64_t>& cu, int64_t T) {
  fuseops::detail::GdnGeometry geo;
  geo.B = 1;
  geo.T = T;
  geo.cu_seqlens = cu.data();
  geo.cu_dtype = DType::i64;
  geo.N = static_cast<int64_t>(cu.size()) - 1;
  Clamped c;
  for (int64_t n = 0; n < geo.N; ++n) {
    const fuseops::detail::SeqBounds b = fuseops::detail::sequence_bounds(geo, n);
    c.ranges.emplace_back(b.bos, b.eos);
    if (b.bad && c.first_bad < 0) c.first_bad = n;
  }
  return c;
}

void expect_malformed_outcome(const std::string& msg, const std::string& op, const Clamped& clamped,
                              const std::vector<Placed*>& inputs, Placed& out) {
  EXPECT_NE(msg.find(op + ": cu_seqlens: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("at index " + std::to_string(clamped.first_bad) + " ("), std::string::npos) << msg;
  // the index is a sequence: the message says which entries and what they must satisfy
  const std::string rule = "(the index is a sequence n: expected 0 = cu_seqlens[0] <= cu_seqlens[n] <=";
  EXPECT_NE(msg.find(rule), std::string::npos) << msg;
  for (Placed* p : inputs) p->download();
  out.download();
  for (Placed* p : inputs) EXPECT_TRUE(p->untouched_outside(false)) << "an input was modified";
  EXPECT_TRUE(out.untouched_outside(true));
  EXPECT_TRUE(out.untouched_outside_tokens(clamped.ranges)) << "written outside every sequence's range";
  EXPECT_NO_THROW(fuseops::check_errors());
}

WarpMode::WarpMode([[maybe_unused]] KktWarpForTesting mode) {
#if defined(FUSEOPS_WITH_CUDA)
  fuseops::detail::cuda::set_kkt_warp_for_testing(mode);
#endif
}
WarpMode::~WarpMode() {
#if defined(FUSEOPS_WITH_CUDA)
  fuseops::detail::cuda::set_kkt_warp_for_testing(KktWarpForTesting::rule);
#endif
}

int64_t warp_launches() {
#if defined(FUSEOPS_WITH_CUDA)
  return fuseops::detail::cuda::kkt_warp_launches_for_testing();
#else
  return 0;
#endif
}

}  // namespace fuseops_test::gdn
