// CPU backend of the GDN forward ops: fp32 compute, the stage decomposition of the CUDA backend (l2norm,
// recompute_w_u, the state recurrence across chunks, the output), and the token recurrence of the decode ops.
// Intermediates are rounded to their storage dtype exactly where the CUDA backend stores them.
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/gdn_forward_common.h"
#include "cpu/gdn_cpu.h"
#include "ops/gdn_forward_impl.h"

namespace fuseops::detail::cpu {
namespace {

/// Row (b, t, h) of a strided [B, T, heads, dim] tensor into `out` (fp32).
void load_row(const GdnIn& x, int64_t b, int64_t t, int64_t h, int64_t dim, float* out) {
  const int64_t base = offset(x, b, t, h);
  for (int64_t c = 0; c < dim; ++c) out[c] = load(x.data, x.dtype, base + c);
}

float load_scalar(const GdnIn& x, int64_t b, int64_t t, int64_t h, float absent) {
  return x.data ? load(x.data, x.dtype, offset(x, b, t, h)) : absent;
}

/// sqrt(sum x^2 + 1e-6) in fp32 (FLA's l2 norm: eps inside the root, a sum, not a mean).
float l2_root(const float* x, int64_t n) {
  float s = 0.f;
  for (int64_t c = 0; c < n; ++c) s += x[c] * x[c];
  return std::sqrt(s + 1e-6f);
}

/// x rstd, rstd = 1 / l2_root(x): FLA's l2norm_fwd (the chunked forward's q / k normalisation, and the decode's:
/// FLA's fused recurrent kernels divide by the root instead, at most an ulp or two apart).
void l2norm_row(float* x, int64_t n) {
  const float rstd = 1.0f / l2_root(x, n);
  for (int64_t c = 0; c < n; ++c) x[c] = x[c] * rstd;
}

}  // namespace

void l2norm_fwd(const L2NormArgs& a) {
  const int64_t K = a.geo.K;
  std::vector<float> row(static_cast<std::size_t>(K));
  for (int pair = 0; pair < (a.x2.data ? 2 : 1); ++pair) {
    const GdnIn& x = pair ? a.x2 : a.x;
    const GdnOut& y = pair ? a.y2 : a.y;
    for (int64_t b = 0; b < a.geo.B; ++b) {
      for (int64_t t = 0; t < a.geo.T; ++t) {
        for (int64_t h = 0; h < a.geo.H; ++h) {
          load_row(x, b, t, h, K, row.data());
          l2norm_row(row.data(), K);
          const int64_t base = offset(y, b, t, h);
          for (int64_t c = 0; c < K; ++c) store(y.data, y.dtype, base + c, row[c]);
        }
      }
    }
  }
}

void recompute_w_u_fwd(const WuArgs& a) {
  const int64_t K = a.geo.K, V = a.V, BT = a.geo.BT, group = a.geo.HV / a.geo.H;
  std::vector<float> A(static_cast<std::size_t>(BT * BT)), kb(static_cast<std::size_t>(BT * K)),
      vb(static_cast<std::size_t>(BT * V));
  for_each_chunk(a.geo, [&](int64_t b, int64_t t0, int64_t L) {
    for (int64_t hv = 0; hv < a.geo.HV; ++hv) {
      const int64_t hk = hv / group;
      for (int64_t i = 0; i < L; ++i) {
        const int64_t base = offset(a.A, b, t0 + i, hv);
        for (int64_t j = 0; j <= i; ++j) A[i * BT + j] = load(a.A.data, a.A.dtype, base + j);
        const float beta = load_scalar(a.beta, b, t0 + i, hv, 1.f);
        const float gate = a.g.data ? std::exp(load_scalar(a.g, b, t0 + i, hv, 0.f)) : 1.f;
        load_row(a.k, b, t0 + i, hk, K, &kb[i * K]);
        for (int64_t c = 0; c < K; ++c) kb[i * K + c] = kb[i * K + c] * beta * gate;
        load_row(a.v, b, t0 + i, hv, V, &vb[i * V]);
        for (int64_t c = 0; c < V; ++c) vb[i * V + c] *= beta;
      }
      for (int64_t i = 0; i < L; ++i) {
        const int64_t wb = offset(a.w, b, t0 + i, hv), ub = offset(a.u, b, t0 + i, hv);
        for (int64_t c = 0; c < K; ++c) {
          float s = 0.f;
          for (int64_t j = 0; j <= i; ++j) s += A[i * BT + j] * kb[j * K + c];
          store(a.w.data, a.w.dtype, wb + c, s);
        }
        for (int64_t c = 0; c < V; ++c) {
          float s = 0.f;
          for (int64_t j = 0; j <= i; ++j) s += A[i * BT + j] * vb[j * V + c];
          store(a.u.data, a.u.dtype, ub + c, s);
        }
      }
    }
  });
}

void chunk_gated_delta_rule_fwd_h(const FwdHArgs& a) {
  const int64_t K = a.geo.K, V = a.V, BT = a.geo.BT, HV = a.geo.HV, group = HV / a.geo.H;
  std::vector<float> S(static_cast<std::size_t>(K * V)), vn(static_cast<std::size_t>(BT * V)),
      kr(static_cast<std::size_t>(BT * K)), wr(static_cast<std::size_t>(K)), gc(static_cast<std::size_t>(BT));
  for_each_sequence(a.geo, [&](int64_t n, const SeqBounds& s) {
    for (int64_t hv = 0; hv < HV; ++hv) {
      const int64_t hk = hv / group, state0 = (n * HV + hv) * K * V;
      for (int64_t e = 0; e < K * V; ++e) S[e] = a.h0 ? load(a.h0, a.h0_dtype, state0 + e) : 0.f;
      for (int64_t t0 = s.bos; t0 < s.eos; t0 += BT) {
        const int64_t L = std::min(BT, s.eos - t0);
        const int64_t hoff = state_offset(a.h, s.batch, chunk_slot(a.geo, n, s.bos, t0), hv, HV, K * V);
        for (int64_t e = 0; e < K * V; ++e) store(a.h.data, a.h.dtype, hoff + e, S[e]);
        for (int64_t i = 0; i < L; ++i) {
          gc[i] = load_scalar(a.g, s.batch, t0 + i, hv, 0.f);
          load_row(a.k, s.batch, t0 + i, hk, K, &kr[i * K]);
          load_row(a.w, s.batch, t0 + i, hv, K, wr.data());
          load_row(a.u, s.batch, t0 + i, hv, V, &vn[i * V]);
          const int64_t vb = offset(a.v_new, s.batch, t0 + i, hv);
          for (int64_t c = 0; c < V; ++c) {
            float ws = 0.f;
            for (int64_t r = 0; r < K; ++r) ws += wr[r] * S[r * V + c];
            vn[i * V + c] -= ws;
            store(a.v_new.data, a.v_new.dtype, vb + c, vn[i * V + c]);
          }
        }
        const float glast = gc[L - 1];
        for (int64_t i = 0; i < L; ++i) {
          const float f = a.g.data ? std::exp(glast - gc[i]) : 1.f;
          for (int64_t c = 0; c < V; ++c) vn[i * V + c] *= f;
        }
        const float decay = a.g.data ? std::exp(glast) : 1.f;
        for (int64_t r = 0; r < K; ++r) {
          for (int64_t c = 0; c < V; ++c) {
            float acc = S[r * V + c] * decay;
            for (int64_t i = 0; i < L; ++i) acc += kr[i * K + r] * vn[i * V + c];
            S[r * V + c] = acc;
          }
        }
      }
      if (a.ht) {
        for (int64_t e = 0; e < K * V; ++e) a.ht[state0 + e] = S[e];
      }
    }
  });
}

void chunk_fwd_o(const FwdOArgs& a) {
  const int64_t K = a.geo.K, V = a.V, BT = a.geo.BT, HV = a.geo.HV, group = HV / a.geo.H;
  std::vector<float> qr(static_cast<std::size_t>(BT * K)), kr(static_cast<std::size_t>(BT * K)),
      vn(static_cast<std::size_t>(BT * V)), hs(static_cast<std::size_t>(K * V)), gc(static_cast<std::size_t>(BT)),
      acc(static_cast<std::size_t>(V));
  for_each_sequence(a.geo, [&](int64_t n, const SeqBounds& s) {
    for (int64_t t0 = s.bos; t0 < s.eos; t0 += BT) {
      const int64_t L = std::min(BT, s.eos - t0), slot = chunk_slot(a.geo, n, s.bos, t0);
      for (int64_t hv = 0; hv < HV; ++hv) {
        const int64_t hk = hv / group, hoff = state_offset(a.h, s.batch, slot, hv, HV, K * V);
        for (int64_t e = 0; e < K * V; ++e) hs[e] = load(a.h.data, a.h.dtype, hoff + e);
        for (int64_t i = 0; i < L; ++i) {
          load_row(a.q, s.batch, t0 + i, hk, K, &qr[i * K]);
          load_row(a.k, s.batch, t0 + i, hk, K, &kr[i * K]);
          load_row(a.v_new, s.batch, t0 + i, hv, V, &vn[i * V]);
          gc[i] = load_scalar(a.g, s.batch, t0 + i, hv, 0.f);
        }
        for (int64_t i = 0; i < L; ++i) {
          std::fill(acc.begin(), acc.end(), 0.f);
          for (int64_t r = 0; r < K; ++r) {
            for (int64_t c = 0; c < V; ++c) acc[c] += qr[i * K + r] * hs[r * V + c];
          }
          const float gi = a.g.data ? std::exp(gc[i]) : 1.f;
          for (int64_t c = 0; c < V; ++c) acc[c] *= gi;
          for (int64_t j = 0; j <= i; ++j) {
            float qk = 0.f;
            for (int64_t r = 0; r < K; ++r) qk += qr[i * K + r] * kr[j * K + r];
            if (a.g.data) qk *= std::exp(gc[i] - gc[j]);
            for (int64_t c = 0; c < V; ++c) acc[c] += qk * vn[j * V + c];
          }
          const int64_t ob = offset(a.o, s.batch, t0 + i, hv);
          for (int64_t c = 0; c < V; ++c) store(a.o.data, a.o.dtype, ob + c, a.scale * acc[c]);
        }
      }
    }
  });
}

void fused_recurrent_gated_delta_rule(const DecodeArgs& a) {
  const int64_t K = a.geo.K, V = a.V, HV = a.geo.HV, group = HV / a.geo.H, KV = K * V;
  std::vector<float> S(static_cast<std::size_t>(KV)), q(static_cast<std::size_t>(K)), k(q.size()),
      v(static_cast<std::size_t>(V)), sk(v.size());
  bool recorded = false;  // a bad pool index or accepted count
  const auto zero_o_rows = [&](int64_t batch, int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t hv = 0; hv < HV; ++hv) {
        const int64_t ob = offset(a.o, batch, t, hv);
        for (int64_t c = 0; c < V; ++c) store(a.o.data, a.o.dtype, ob + c, 0.f);
      }
    }
  };
  // tokens past cu_seqlens[N] (vLLM's padded steps) belong to no sequence: o rows 0
  if (a.geo.cu_tail) zero_o_rows(0, sequence_bounds(a.geo, a.geo.N - 1).eos, a.geo.T);
  for_each_sequence(a.geo, [&](int64_t n, const SeqBounds& s) {
    const int64_t len = s.eos - s.bos;
    int64_t start = -1;
    if (a.pool_form) {
      const PoolSeq ps = pool_sequence(a, n, len);
      if (ps.bad_site) {
        record_host_error(ps.bad_site, ps.bad_index);
        recorded = true;
      }
      start = ps.start;
      if (start < 0) {  // padding: o rows are 0, no state read or written
        zero_o_rows(s.batch, s.bos, s.eos);
        return;
      }
    }
    for (int64_t hv = 0; hv < HV; ++hv) {
      const int64_t hk = hv / group;
      if (a.pool_form) {
        for (int64_t e = 0; e < KV; ++e) S[e] = load(a.pool, a.pool_dtype, pool_offset(a, start, hv, KV) + e);
      } else {
        for (int64_t e = 0; e < KV; ++e) S[e] = a.h0 ? load(a.h0, a.h0_dtype, (n * HV + hv) * KV + e) : 0.f;
      }
      float A = 0.f, bias = 0.f;
      if (a.fused_gating) {
        A = std::exp(load(a.A_log.data, a.A_log.dtype, hv * a.A_log.stride_h));
        bias = load(a.dt_bias.data, a.dt_bias.dtype, hv * a.dt_bias.stride_h);
      }
      for (int64_t t = s.bos; t < s.eos; ++t) {
        load_row(a.q, s.batch, t, hk, K, q.data());
        load_row(a.k, s.batch, t, hk, K, k.data());
        load_row(a.v, s.batch, t, hv, V, v.data());
        if (a.l2norm) {
          l2norm_row(q.data(), K);
          l2norm_row(k.data(), K);
        }
        float g, beta;
        if (a.fused_gating) {
          g = -A * softplus_gate(load_scalar(a.a, s.batch, t, hv, 0.f) + bias, a.softplus_beta,
                                 a.softplus_threshold);
          beta = sigmoid_gate(load_scalar(a.b, s.batch, t, hv, 0.f));
        } else {
          g = load_scalar(a.g, s.batch, t, hv, 0.f);
          beta = a.beta_per_channel ? 0.f : load_scalar(a.beta, s.batch, t, hv, 1.f);  // (per channel: below)
        }
        const float decay = std::exp(g);
        for (int64_t e = 0; e < KV; ++e) S[e] *= decay;
        std::fill(sk.begin(), sk.end(), 0.f);
        for (int64_t r = 0; r < K; ++r) {
          for (int64_t c = 0; c < V; ++c) sk[c] += S[r * V + c] * k[r];
        }
        if (a.beta_per_channel) {  // beta [B, T, HV, V]: one per value column
          const int64_t bb = offset(a.beta, s.batch, t, hv);
          for (int64_t c = 0; c < V; ++c) v[c] = load(a.beta.data, a.beta.dtype, bb + c) * (v[c] - sk[c]);
        } else {
          for (int64_t c = 0; c < V; ++c) v[c] = beta * (v[c] - sk[c]);
        }
        for (int64_t r = 0; r < K; ++r) {
          for (int64_t c = 0; c < V; ++c) S[r * V + c] += k[r] * v[c];
        }
        const int64_t ob = offset(a.o, s.batch, t, hv);
        for (int64_t c = 0; c < V; ++c) {
          float o = 0.f;
          for (int64_t r = 0; r < K; ++r) o += S[r * V + c] * q[r];
          store(a.o.data, a.o.dtype, ob + c, a.scale * o);
        }
        if (a.pool_form) {
          bool bad = false;
          const int64_t slot = pool_write_slot(a, n, t - s.bos, len, &bad);
          if (bad && hv == 0) {
            record_host_error(a.idx_site, a.idx_cols > 0 ? n * a.idx_cols + (t - s.bos) : n);
            recorded = true;
          }
          if (slot >= 0) {
            for (int64_t e = 0; e < KV; ++e) store(a.pool, a.pool_dtype, pool_offset(a, slot, hv, KV) + e, S[e]);
          }
        }
      }
      if (a.ht) {
        for (int64_t e = 0; e < KV; ++e) a.ht[(n * HV + hv) * KV + e] = S[e];
      }
    }
  });
  raise_recorded_in_debug(recorded);
}

}  // namespace fuseops::detail::cpu
