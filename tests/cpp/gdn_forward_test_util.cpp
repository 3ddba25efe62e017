#include "gdn_forward_test_util.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>

namespace fuseops_test::gdn_forward {

namespace ref = fuseops::reference;
using gdn::Placed;

std::string Spec::describe() const {
  std::ostringstream os;
  os << "B=" << B << " T=" << T << " H=" << H << " HV=" << HV << " K=" << K << " V=" << V << " BT=" << BT;
  if (varlen()) os << " seqlens=" << gdn::seqlens_text(seqlens);
  os << " " << fuseops::dtype_name(dtype) << " gates " << fuseops::dtype_name(gate_dtype)
     << (beta_per_channel ? " beta per channel" : "") << " h0 "
     << (has_h0 ? fuseops::dtype_name(h0_dtype) : "none") << " decay " << gdn::decay_name(decay)
     << (l2norm ? " l2norm" : "") << (padded ? " padded" : "") << (aligned ? " aligned" : "")
     << (o_guard >= 0 ? " o_guard " + std::to_string(o_guard) : "")
     << (state_guard >= 0 ? " state_guard " + std::to_string(state_guard) : "")
     << (h_guard >= 0 ? " h_guard " + std::to_string(h_guard) : "");
  if (scale) os << " scale " << *scale;
  os << ", FUSEOPS_SEED=" << run_seed();
  return os.str();
}

Spec fixed(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V, DType dtype) {
  Spec s;
  s.B = B;
  s.T = T;
  s.H = H;
  s.HV = HV;
  s.K = K;
  s.V = V;
  s.dtype = dtype;
  return s;
}

Spec varlen(std::vector<int64_t> seqlens, int64_t H, int64_t HV, int64_t K, int64_t V, DType dtype) {
  Spec s = fixed(1, 0, H, HV, K, V, dtype);
  for (int64_t l : seqlens) s.T += l;
  s.seqlens = std::move(seqlens);
  return s;
}

Inputs make_inputs(const Spec& s, std::mt19937_64& rng) {
  Inputs in;
  std::normal_distribution<double> normal(0.0, 1.0);
  in.q = HostTensor(s.dtype, {s.B, s.T, s.H, s.K});
  in.k = HostTensor(s.dtype, {s.B, s.T, s.H, s.K});
  in.v = HostTensor(s.dtype, {s.B, s.T, s.HV, s.V});
  std::vector<double> row(static_cast<std::size_t>(s.K));
  for (int64_t r = 0; r < in.q.rows(); ++r) {
    for (int64_t c = 0; c < s.K; ++c) in.q.set(r, c, static_cast<float>(normal(rng)));
    double n2 = 0;
    for (double& x : row) {
      x = normal(rng);
      n2 += x * x;
    }
    const double f = s.l2norm ? 1.0 : 1.0 / std::sqrt(n2);  // unit keys unless the op normalises
    for (int64_t c = 0; c < s.K; ++c) in.k.set(r, c, static_cast<float>(row[c] * f));
  }
  for (int64_t r = 0; r < in.v.rows(); ++r) {
    for (int64_t c = 0; c < s.V; ++c) in.v.set(r, c, static_cast<float>(normal(rng)));
  }
  in.g = HostTensor(s.gate_dtype, {s.B, s.T, s.HV});
  std::vector<int64_t> beta_shape{s.B, s.T, s.HV};
  if (s.beta_per_channel) beta_shape.push_back(s.V);
  in.beta = HostTensor(s.gate_dtype, beta_shape);
  const int64_t betas = s.beta_per_channel ? s.V : 1;  // per token and value head
  for (int64_t r = 0; r < in.g.rows(); ++r) {
    for (int64_t h = 0; h < s.HV; ++h) {
      in.g.set(r, h, static_cast<float>(gdn::draw_decay(s.decay, h, rng)));
      for (int64_t c = 0; c < betas; ++c) {
        const float b = static_cast<float>(1.0 / (1.0 + std::exp(-normal(rng))));
        if (s.beta_per_channel) {
          in.beta.set(r * s.HV + h, c, b);
        } else {
          in.beta.set(r, h, b);
        }
      }
    }
  }
  if (s.has_h0) {
    in.h0 = HostTensor(s.h0_dtype, {s.N(), s.HV, s.K, s.V});
    for (int64_t r = 0; r < in.h0.rows(); ++r) {
      for (int64_t c = 0; c < s.V; ++c) in.h0.set(r, c, static_cast<float>(0.5 * normal(rng)));
    }
  } else {
    in.h0 = HostTensor(DType::f32, {0});
  }
  if (s.varlen()) in.cu = gdn::cu_seqlens_of(s.seqlens);
  return in;
}

HostTensor beta_over_columns(const HostTensor& beta, int64_t V) {
  const std::vector<int64_t>& d = beta.shape();
  HostTensor out(beta.dtype(), {d[0], d[1], d[2], V});
  for (int64_t r = 0; r < beta.rows(); ++r) {
    for (int64_t h = 0; h < beta.cols(); ++h) {
      for (int64_t c = 0; c < V; ++c) out.set(r * beta.cols() + h, c, static_cast<float>(beta.get(r, h)));
    }
  }
  return out;
}

ref::RecurrenceGolden golden(const Spec& s, const Inputs& in, bool round_normalized, bool keep_token_states,
                             bool chunk_states) {
  ref::RecurrenceInputs r;
  r.q = &in.q;
  r.k = &in.k;
  r.v = &in.v;
  r.g = in.g.to_double();
  r.beta = in.beta.to_double();
  r.beta_per_channel = in.beta.shape().size() == 4;
  r.h0 = s.has_h0 ? &in.h0 : nullptr;
  r.scale = s.scale.value_or(1.0 / std::sqrt(static_cast<double>(s.K)));
  r.l2norm = s.l2norm;
  // the chunked op rounds the normalised q, k to its intermediate dtype: the input dtype, or f32 at small head dims
  r.round_normalized = round_normalized && fuseops::chunk_gated_delta_rule_intermediate_dtype(s.dtype, s.K, s.V) == s.dtype;
  r.cu_seqlens = in.cu;
  r.keep_token_states = keep_token_states;
  r.chunk_size = chunk_states ? s.BT : 0;
  return ref::gated_delta_rule_recurrence(r);
}

namespace {

/// Guard elements before and after each placed tensor: 8 keeps 16-byte alignment (2- and 4-byte dtypes), 5 breaks it.
int64_t guard(const Spec& s) { return s.aligned ? 8 : 5; }

/// Placed inputs and outputs of one run.
struct Run {
  Placed q, k, v, g, beta;
  std::unique_ptr<Placed> h0, cu;
  Placed o, ht;
  Run(Where w, const Spec& s, const Inputs& in)
      : q(w, in.q, s.padded ? (s.aligned ? 8 : 3) : 0, guard(s)),
        k(w, in.k, s.padded ? (s.aligned ? 8 : 5) : 0, guard(s)),
        v(w, in.v, s.padded ? (s.aligned ? 8 : 2) : 0, guard(s)),
        g(w, in.g, 0, guard(s)),
        beta(w, in.beta, 0, guard(s)),
        o(w, s.dtype, {s.B, s.T, s.HV, s.V}, s.o_guard >= 0 ? s.o_guard : guard(s)),
        ht(w, DType::f32, {s.N(), s.HV, s.K, s.V}, s.state_guard >= 0 ? s.state_guard : guard(s)) {
    if (s.has_h0) h0 = std::make_unique<Placed>(w, in.h0, 0, s.state_guard >= 0 ? s.state_guard : guard(s));
    if (s.varlen()) cu = std::make_unique<Placed>(w, ft::index_tensor(s.cu_dtype, in.cu), 0, 0);
    for (Placed* p : {&q, &k, &v, &g, &beta, &o, &ht}) p->upload();
    if (h0) h0->upload();
    if (cu) cu->upload();
  }
  void finish(Outputs& out) {
    for (Placed* p : {&q, &k, &v, &g, &beta, &o, &ht}) p->download();
    if (h0) h0->download();
    for (Placed* p : {&q, &k, &v, &g, &beta}) EXPECT_TRUE(p->untouched_outside(false));
    if (h0) {
      EXPECT_TRUE(h0->untouched_outside(false));
    }
    EXPECT_TRUE(o.untouched_outside(true));
    EXPECT_TRUE(ht.untouched_outside(true));
    out.o = o.read();
    out.final_state = ht.read();
  }
};

}  // namespace

Outputs run_chunk(Where where, const Spec& s, const Inputs& in, bool with_states) {
  Run r(where, s, in);
  TensorView h0v, cuv, htv = r.ht.view();
  if (r.h0) h0v = r.h0->view();
  if (r.cu) cuv = r.cu->view();
  const TensorView qv = r.q.view(), vv = r.v.view();
  const std::size_t bytes =
      fuseops::chunk_gated_delta_rule_workspace_size(qv, vv, r.cu ? &cuv : nullptr, s.l2norm, s.BT, with_states);
  Outputs out;
  if (!with_states) {
    Placed ws(where, DType::f32, {static_cast<int64_t>(bytes / 4 + 1)}, 0);
    ws.upload();
    fuseops::chunk_gated_delta_rule(r.o.view(), &htv, qv, r.k.view(), vv, r.g.view(), r.beta.view(), s.scale,
                                    r.h0 ? &h0v : nullptr, s.l2norm, r.cu ? &cuv : nullptr, ws.view(), s.BT);
    r.finish(out);
    return out;
  }
  // the workspace exactly as large as the query says (in whole floats), behind guards of 4 floats (16-byte aligned)
  Placed ws(where, DType::f32, {static_cast<int64_t>((bytes + 3) / 4)}, 4);
  const int64_t NS = fuseops::gdn_chunk_slots(s.T, s.N(), s.BT, s.varlen());
  Placed h(where, fuseops::chunk_gated_delta_rule_intermediate_dtype(s.dtype, s.K, s.V), {s.B, NS, s.HV, s.K, s.V},
           s.h_guard >= 0 ? s.h_guard : guard(s));
  ws.upload();
  h.upload();
  fuseops::chunk_gated_delta_rule_with_states(r.o.view(), h.view(), &htv, qv, r.k.view(), vv, r.g.view(),
                                              r.beta.view(), s.scale, r.h0 ? &h0v : nullptr, s.l2norm,
                                              r.cu ? &cuv : nullptr, ws.view(), s.BT);
  ws.download();
  h.download();
  EXPECT_TRUE(ws.untouched_outside(true)) << "workspace";
  EXPECT_TRUE(h.untouched_outside(true)) << "h";
  r.finish(out);
  out.h = h.read();
  out.h_aligned16 = reinterpret_cast<std::uintptr_t>(h.view().data) % 16 == 0;
  return out;
}

Outputs run_recurrent(Where where, const Spec& s, const Inputs& in) {
  Run r(where, s, in);
  TensorView h0v, cuv, htv = r.ht.view();
  if (r.h0) h0v = r.h0->view();
  if (r.cu) cuv = r.cu->view();
  const TensorView gv = r.g.view(), bv = r.beta.view();
  fuseops::fused_recurrent_gated_delta_rule(r.o.view(), &htv, r.q.view(), r.k.view(), r.v.view(), &gv, &bv,
                                            s.scale, r.h0 ? &h0v : nullptr, s.l2norm,
                                            r.cu ? &cuv : nullptr);
  Outputs out;
  r.finish(out);
  return out;
}

::testing::AssertionResult matches(const HostTensor& out, const std::vector<double>& ref, DType input_dtype,
                                   const std::string& what, double limit) {
  const ref::ForwardCheck c = ref::gdn_forward_check(out, ref, input_dtype, limit);
  if (c.pass) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": relative RMS error " << c.rel_rms_error << " (limit " << c.limit
                                       << "), " << c.nonfinite << " non-finite elements";
}

double max_abs_cumsum(const Spec& s, const Inputs& in) {
  double m = 0;
  for (const ref::GdnChunk& c : ref::gdn_chunks(s.B, s.T, s.BT, in.cu)) {
    for (int64_t h = 0; h < s.HV; ++h) {
      double sum = 0;
      for (int64_t i = 0; i < c.len; ++i) {
        sum += in.g.get(c.batch * s.T + c.row0 + i, h);
        m = std::max(m, std::fabs(sum));
      }
    }
  }
  return m;
}

double forward_limit(const Spec& s, const Inputs& in) {
  return ref::gdn_forward_rel_rms_limit(s.dtype) + std::ldexp(max_abs_cumsum(s, in), -24);
}

HostTensor tokens(const HostTensor& x, int64_t t0, int64_t t1) {
  std::vector<int64_t> shape = x.shape();
  const int64_t T = shape[1];
  shape[1] = t1 - t0;
  HostTensor out(x.dtype(), shape);
  const int64_t per_token = x.rows() / (shape[0] * T);  // rows of one token
  for (int64_t b = 0; b < shape[0]; ++b) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t r = 0; r < per_token; ++r) {
        for (int64_t c = 0; c < x.cols(); ++c) {
          out.set((b * (t1 - t0) + t - t0) * per_token + r, c,
                  static_cast<float>(x.get((b * T + t) * per_token + r, c)));
        }
      }
    }
  }
  return out;
}

Inputs tokens(const Inputs& in, int64_t t0, int64_t t1) {
  Inputs out;
  out.q = tokens(in.q, t0, t1);
  out.k = tokens(in.k, t0, t1);
  out.v = tokens(in.v, t0, t1);
  out.g = tokens(in.g, t0, t1);
  out.beta = tokens(in.beta, t0, t1);
  return out;
}

void check_split_run(Where where, const Spec& s, int64_t T1, std::mt19937_64& rng) {
  SCOPED_TRACE(s.describe() + " split at " + std::to_string(T1));
  const DType dt = s.dtype;
  const int64_t T2 = s.T - T1;
  const Inputs in = make_inputs(s, rng);
  const ref::RecurrenceGolden gold = golden(s, in, true);
  Spec s1 = s, s2 = s;
  s1.T = T1;
  s2.T = T2;
  Inputs in1 = tokens(in, 0, T1), in2 = tokens(in, T1, s.T);
  in1.h0 = in.h0;
  const Outputs o1 = run_chunk(where, s1, in1);
  in2.h0 = o1.final_state;
  s2.h0_dtype = DType::f32;
  const Outputs o2 = run_chunk(where, s2, in2);
  HostTensor o(dt, {s.B, s.T, s.HV, s.V});
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t t = 0; t < s.T; ++t) {
      for (int64_t h = 0; h < s.HV; ++h) {
        for (int64_t c = 0; c < s.V; ++c) {
          const double x = t < T1 ? o1.o.get((b * T1 + t) * s.HV + h, c) : o2.o.get((b * T2 + t - T1) * s.HV + h, c);
          o.set((b * s.T + t) * s.HV + h, c, static_cast<float>(x));
        }
      }
    }
  }
  EXPECT_TRUE(matches(o, gold.o, dt, "split o"));
  EXPECT_TRUE(matches(o2.final_state, gold.final_state, dt, "split final_state"));
}

}  // namespace fuseops_test::gdn_forward
