#include "reference/gdn_forward.h"

#include <cmath>
#include <algorithm>
#include <string>
#include <utility>

#include "fuseops/error.h"
#include "reference/gdn.h"
#include "testing/parallel.h"

namespace fuseops::reference {
namespace {

using testing::HostTensor;

[[noreturn]] void fail(const std::string& what) {
  throw Error(ErrorKind::invalid_argument, "reference gated_delta_rule_recurrence: " + what);
}

/// Row (b, t, h) of a compact [B, T, heads, dim] tensor in double, optionally l2-normalised (and rounded).
std::vector<double> row(const HostTensor& x, int64_t b, int64_t t, int64_t h, bool l2norm, bool round) {
  const int64_t T = x.shape()[1], heads = x.shape()[2], dim = x.shape()[3];
  std::vector<double> r(static_cast<std::size_t>(dim));
  for (int64_t c = 0; c < dim; ++c) r[c] = x.get((b * T + t) * heads + h, c);
  if (l2norm) {
    double s = 0;
    for (double e : r) s += e * e;
    const double d = std::sqrt(s + 1e-6);
    HostTensor one(x.dtype(), {1});
    for (double& e : r) {
      e /= d;
      if (round) {
        one.set(0, 0, static_cast<float>(e));
        e = one.get(0, 0);
      }
    }
  }
  return r;
}

}  // namespace

std::vector<double> values_of(const HostTensor& t) { return t.to_double(); }

int64_t chunk_slot_count(int64_t T, int64_t chunk_size, const std::vector<int64_t>& cu_seqlens) {
  const int64_t per_row = (T + chunk_size - 1) / chunk_size;
  return cu_seqlens.empty() ? per_row : static_cast<int64_t>(cu_seqlens.size()) - 1 + per_row;
}

int64_t chunk_slot(int64_t n, int64_t bos, int64_t t0, int64_t chunk_size, const std::vector<int64_t>& cu_seqlens) {
  if (cu_seqlens.empty()) return (t0 - bos) / chunk_size;
  const int64_t N = static_cast<int64_t>(cu_seqlens.size()) - 1;
  return t0 == bos ? n : N + (t0 - 1) / chunk_size;
}

std::vector<bool> chunk_slots_used(int64_t B, int64_t T, int64_t chunk_size, const std::vector<int64_t>& cu_seqlens) {
  const int64_t NS = chunk_slot_count(T, chunk_size, cu_seqlens);
  if (cu_seqlens.empty()) return std::vector<bool>(static_cast<std::size_t>(B * NS), true);
  std::vector<bool> used(static_cast<std::size_t>(NS), false);
  for (std::size_t n = 0; n + 1 < cu_seqlens.size(); ++n) {
    for (int64_t t = cu_seqlens[n]; t < cu_seqlens[n + 1]; t += chunk_size) {
      used[static_cast<std::size_t>(chunk_slot(static_cast<int64_t>(n), cu_seqlens[n], t, chunk_size, cu_seqlens))] =
          true;
    }
  }
  return used;
}

RecurrenceGolden gated_delta_rule_recurrence(const RecurrenceInputs& in) {
  if (!in.q || !in.k || !in.v) fail("q, k and v are required");
  const int64_t B = in.q->shape()[0], T = in.q->shape()[1], H = in.q->shape()[2], K = in.q->shape()[3];
  const int64_t HV = in.v->shape()[2], V = in.v->shape()[3], G = HV / H;
  const int64_t beta_size = B * T * HV * (in.beta_per_channel ? V : 1);
  if (!in.beta.empty() && static_cast<int64_t>(in.beta.size()) != beta_size) {
    fail(std::string("beta must hold ") + (in.beta_per_channel ? "B T HV V" : "B T HV") + " values");
  }
  // sequences: (batch, bos, eos)
  std::vector<int64_t> starts, ends, batches;
  if (in.cu_seqlens.empty()) {
    for (int64_t b = 0; b < B; ++b) {
      batches.push_back(b);
      starts.push_back(0);
      ends.push_back(T);
    }
  } else {
    if (B != 1) fail("cu_seqlens needs B == 1");
    if (in.cu_seqlens.front() != 0 || in.cu_seqlens.back() != T) fail("cu_seqlens must start at 0 and end at T");
    for (std::size_t n = 0; n + 1 < in.cu_seqlens.size(); ++n) {
      if (in.cu_seqlens[n + 1] < in.cu_seqlens[n]) fail("cu_seqlens must not decrease");
      batches.push_back(0);
      starts.push_back(in.cu_seqlens[n]);
      ends.push_back(in.cu_seqlens[n + 1]);
    }
  }
  const int64_t N = static_cast<int64_t>(starts.size()), KV = K * V;
  RecurrenceGolden out;
  out.o.assign(static_cast<std::size_t>(B * T * HV * V), 0.0);
  out.final_state.assign(static_cast<std::size_t>(N * HV * KV), 0.0);
  if (in.keep_token_states) out.token_states.assign(static_cast<std::size_t>(B * T * HV * KV), 0.0);
  const int64_t BT = in.chunk_size;
  const int64_t NS = BT <= 0 ? 0 : chunk_slot_count(T, BT, in.cu_seqlens);
  if (BT > 0) out.chunk_states.assign(static_cast<std::size_t>(B * NS * HV * KV), 0.0);
  testing::parallel_chunks(N * HV, 1, [&](int64_t, int64_t begin, int64_t end) {
    std::vector<double> S(static_cast<std::size_t>(KV)), sk(static_cast<std::size_t>(V));
    for (int64_t w = begin; w < end; ++w) {
      const int64_t n = w / HV, h = w % HV, hk = h / G, b = batches[n];
      if (!in.heads.empty() && std::find(in.heads.begin(), in.heads.end(), h) == in.heads.end()) continue;
      for (int64_t e = 0; e < KV; ++e) S[e] = in.h0 ? in.h0->get((n * HV + h) * K + e / V, e % V) : 0.0;
      for (int64_t t = starts[n]; t < ends[n]; ++t) {
        if (BT > 0 && (t - starts[n]) % BT == 0) {  // a chunk starts: its slot gets the state before its tokens
          const int64_t slot = chunk_slot(n, starts[n], t, BT, in.cu_seqlens);
          std::copy(S.begin(), S.end(), out.chunk_states.begin() + ((b * NS + slot) * HV + h) * KV);
        }
        const std::vector<double> q = row(*in.q, b, t, hk, in.l2norm, in.round_normalized);
        const std::vector<double> k = row(*in.k, b, t, hk, in.l2norm, in.round_normalized);
        std::vector<double> v = row(*in.v, b, t, h, false, false);
        const int64_t gi = (b * T + t) * HV + h;
        const double decay = std::exp(in.g.empty() ? 0.0 : in.g[gi]);
        for (double& e : S) e *= decay;
        for (int64_t c = 0; c < V; ++c) {
          double s = 0;
          for (int64_t r = 0; r < K; ++r) s += S[r * V + c] * k[r];
          sk[c] = s;
        }
        for (int64_t c = 0; c < V; ++c) {
          const double beta = in.beta.empty() ? 1.0 : in.beta_per_channel ? in.beta[gi * V + c] : in.beta[gi];
          v[c] = beta * (v[c] - sk[c]);
        }
        for (int64_t r = 0; r < K; ++r)
          for (int64_t c = 0; c < V; ++c) S[r * V + c] += k[r] * v[c];
        for (int64_t c = 0; c < V; ++c) {
          double s = 0;
          for (int64_t r = 0; r < K; ++r) s += S[r * V + c] * q[r];
          out.o[static_cast<std::size_t>(gi * V + c)] = in.scale * s;
        }
        if (in.keep_token_states) {
          for (int64_t e = 0; e < KV; ++e) out.token_states[static_cast<std::size_t>(gi * KV + e)] = S[e];
        }
      }
      for (int64_t e = 0; e < KV; ++e) out.final_state[static_cast<std::size_t>((n * HV + h) * KV + e)] = S[e];
    }
  });
  return out;
}

namespace {
struct StageChunk {
  int64_t n, b, bos, t0, len;
};
std::vector<StageChunk> stage_chunks(const StageInputs& s, std::vector<std::pair<int64_t, int64_t>>* seqs) {
  std::vector<StageChunk> out;
  const int64_t N = s.cu_seqlens.empty() ? s.B : static_cast<int64_t>(s.cu_seqlens.size()) - 1;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t b = s.cu_seqlens.empty() ? n : 0;
    const int64_t bos = s.cu_seqlens.empty() ? 0 : s.cu_seqlens[n], eos = s.cu_seqlens.empty() ? s.T : s.cu_seqlens[n + 1];
    if (seqs) seqs->push_back({bos, eos});
    for (int64_t t0 = bos; t0 < eos; t0 += s.BT) out.push_back({n, b, bos, t0, std::min(s.BT, eos - t0)});
  }
  return out;
}
double gate(const StageInputs& s, int64_t b, int64_t t, int64_t h) {
  return s.g.empty() ? 0.0 : s.g[static_cast<std::size_t>((b * s.T + t) * s.HV + h)];
}
int64_t slot_of(const StageInputs& s, const StageChunk& c) { return chunk_slot(c.n, c.bos, c.t0, s.BT, s.cu_seqlens); }
int64_t num_slots(const StageInputs& s) { return chunk_slot_count(s.T, s.BT, s.cu_seqlens); }
}  // namespace

void recompute_w_u_golden(const StageInputs& s, const std::vector<double>& A, const std::vector<double>& k,
                          const std::vector<double>& v, const std::vector<double>& beta, std::vector<double>& w,
                          std::vector<double>& u) {
  const int64_t G = s.HV / s.H;
  w.assign(static_cast<std::size_t>(s.B * s.T * s.HV * s.K), 0.0);
  u.assign(static_cast<std::size_t>(s.B * s.T * s.HV * s.V), 0.0);
  for (const StageChunk& c : stage_chunks(s, nullptr)) {
    for (int64_t h = 0; h < s.HV; ++h) {
      for (int64_t i = 0; i < c.len; ++i) {
        const int64_t ti = (c.b * s.T + c.t0 + i) * s.HV + h;
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t tj = (c.b * s.T + c.t0 + j) * s.HV + h;
          const double a = A[static_cast<std::size_t>(ti * s.BT + j)];
          const double fk = a * beta[tj] * std::exp(gate(s, c.b, c.t0 + j, h)), fv = a * beta[tj];
          const int64_t kj = ((c.b * s.T + c.t0 + j) * s.H + h / G) * s.K;
          for (int64_t x = 0; x < s.K; ++x) w[ti * s.K + x] += fk * k[kj + x];
          for (int64_t x = 0; x < s.V; ++x) u[ti * s.V + x] += fv * v[tj * s.V + x];
        }
      }
    }
  }
}

void fwd_h_golden(const StageInputs& s, const std::vector<double>& k, const std::vector<double>& w,
                  const std::vector<double>& u, const std::vector<double>& h0, std::vector<double>& h,
                  std::vector<double>& v_new, std::vector<double>& final_state) {
  const int64_t G = s.HV / s.H, KV = s.K * s.V, NS = num_slots(s);
  std::vector<std::pair<int64_t, int64_t>> seqs;
  const std::vector<StageChunk> chunks = stage_chunks(s, &seqs);
  const int64_t N = static_cast<int64_t>(seqs.size());
  h.assign(static_cast<std::size_t>(s.B * NS * s.HV * KV), 0.0);
  v_new.assign(static_cast<std::size_t>(s.B * s.T * s.HV * s.V), 0.0);
  final_state.assign(static_cast<std::size_t>(N * s.HV * KV), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t hv = 0; hv < s.HV; ++hv) {
      std::vector<double> S(static_cast<std::size_t>(KV), 0.0);
      if (!h0.empty()) std::copy(h0.begin() + (n * s.HV + hv) * KV, h0.begin() + (n * s.HV + hv + 1) * KV, S.begin());
      for (const StageChunk& c : chunks) {
        if (c.n != n) continue;
        std::copy(S.begin(), S.end(), h.begin() + ((c.b * NS + slot_of(s, c)) * s.HV + hv) * KV);
        const double gl = gate(s, c.b, c.t0 + c.len - 1, hv);
        std::vector<double> next(S.size());
        for (int64_t e = 0; e < KV; ++e) next[e] = std::exp(gl) * S[e];
        for (int64_t i = 0; i < c.len; ++i) {
          const int64_t ti = (c.b * s.T + c.t0 + i) * s.HV + hv, ki = ((c.b * s.T + c.t0 + i) * s.H + hv / G) * s.K;
          const double f = std::exp(gl - gate(s, c.b, c.t0 + i, hv));
          for (int64_t x = 0; x < s.V; ++x) {
            double d = u[ti * s.V + x];
            for (int64_t r = 0; r < s.K; ++r) d -= w[ti * s.K + r] * S[r * s.V + x];
            v_new[ti * s.V + x] = d;
            for (int64_t r = 0; r < s.K; ++r) next[r * s.V + x] += k[ki + r] * f * d;
          }
        }
        S = next;
      }
      std::copy(S.begin(), S.end(), final_state.begin() + (n * s.HV + hv) * KV);
    }
  }
}

void fwd_o_golden(const StageInputs& s, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v_new, const std::vector<double>& h, double scale,
                  std::vector<double>& o) {
  const int64_t G = s.HV / s.H, KV = s.K * s.V, NS = num_slots(s);
  o.assign(static_cast<std::size_t>(s.B * s.T * s.HV * s.V), 0.0);
  for (const StageChunk& c : stage_chunks(s, nullptr)) {
    for (int64_t hv = 0; hv < s.HV; ++hv) {
      const int64_t hb = ((c.b * NS + slot_of(s, c)) * s.HV + hv) * KV;
      for (int64_t i = 0; i < c.len; ++i) {
        const int64_t ti = (c.b * s.T + c.t0 + i) * s.HV + hv, qi = ((c.b * s.T + c.t0 + i) * s.H + hv / G) * s.K;
        const double gi = gate(s, c.b, c.t0 + i, hv);
        std::vector<double> p(static_cast<std::size_t>(i + 1));  // (q_i . k_j) exp(g_i - g_j)
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t kj = ((c.b * s.T + c.t0 + j) * s.H + hv / G) * s.K;
          double qk = 0;
          for (int64_t r = 0; r < s.K; ++r) qk += q[qi + r] * k[kj + r];
          p[static_cast<std::size_t>(j)] = qk * std::exp(gi - gate(s, c.b, c.t0 + j, hv));
        }
        for (int64_t x = 0; x < s.V; ++x) {
          double acc = 0;
          for (int64_t r = 0; r < s.K; ++r) acc += q[qi + r] * h[hb + r * s.V + x];
          acc *= std::exp(gi);
          for (int64_t j = 0; j <= i; ++j) {
            const int64_t tj = (c.b * s.T + c.t0 + j) * s.HV + hv;
            acc += p[static_cast<std::size_t>(j)] * v_new[tj * s.V + x];
          }
          o[ti * s.V + x] = scale * acc;
        }
      }
    }
  }
}

double gdn_forward_rel_rms_limit(DType input_dtype) { return input_dtype == DType::f32 ? 1e-4 : 5e-3; }

ForwardCheck gdn_forward_check(const HostTensor& out, const std::vector<double>& ref, DType input_dtype,
                               double limit_override) {
  ForwardCheck r;
  r.limit = limit_override > 0 ? limit_override : gdn_forward_rel_rms_limit(input_dtype);
  const RmsSums s = rms_sums(out, ref, [](std::size_t) { return true; });
  r.nonfinite = s.nonfinite;
  r.rel_rms_error = s.rel_rms_error();
  r.max_abs_error = s.max_abs;
  r.pass = r.nonfinite == 0 && static_cast<int64_t>(ref.size()) == out.numel() &&
           std::sqrt(s.err2) <= r.limit * std::sqrt(s.ref2) + 1e-12 * std::sqrt(static_cast<double>(ref.size()));
  return r;
}

}  // namespace fuseops::reference
