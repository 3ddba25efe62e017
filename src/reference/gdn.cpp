#include "reference/gdn.h"

#include <cmath>
#include <string>

#include "fuseops/error.h"
#include "testing/parallel.h"

namespace fuseops::reference {
namespace {

using testing::HostTensor;

[[noreturn]] void fail(const std::string& what) {
  throw Error(ErrorKind::invalid_argument, "reference gdn: " + what);
}

/// Element (b, t, h) of a compact [B, T, heads] tensor, or (b, t, h, c) of a compact [B, T, heads, inner] one.
double at(const HostTensor& x, int64_t b, int64_t t, int64_t h) { return x.get(b * x.shape()[1] + t, h); }
double at(const HostTensor& x, int64_t b, int64_t t, int64_t h, int64_t c) {
  return x.get((b * x.shape()[1] + t) * x.shape()[2] + h, c);
}

/// Element index of (b, t, h, j) in a compact [B, T, HV, BT] tensor.
int64_t out_index(int64_t T, int64_t HV, int64_t BT, int64_t b, int64_t t, int64_t h, int64_t j) {
  return ((b * T + t) * HV + h) * BT + j;
}

/// Fills [B, T, HV, BT] from per-(chunk, head) L x L matrices: row i of the chunk's matrix goes to token row0 + i,
/// columns j < L; columns >= L stay 0 with sensitivity 0 (that is also the value of rows of no chunk).
template <typename ChunkFn>
GdnGolden assemble(int64_t B, int64_t T, int64_t HV, int64_t BT, const std::vector<GdnChunk>& chunks, ChunkFn fn) {
  GdnGolden out;
  out.value.assign(static_cast<std::size_t>(B * T * HV * BT), 0.0);
  out.sensitivity.assign(out.value.size(), 0.0);
  const int64_t n = static_cast<int64_t>(chunks.size()) * HV;
  testing::parallel_chunks(n, 16, [&](int64_t, int64_t begin, int64_t end) {
    std::vector<double> v, s;
    for (int64_t w = begin; w < end; ++w) {
      const GdnChunk& c = chunks[w / HV];
      const int64_t h = w % HV;
      fn(c, h, v, s);  // L x L
      for (int64_t i = 0; i < c.len; ++i) {
        for (int64_t j = 0; j < c.len; ++j) {
          const int64_t e = out_index(T, HV, BT, c.batch, c.row0 + i, h, j);
          out.value[e] = v[i * c.len + j];
          out.sensitivity[e] = s[i * c.len + j];
        }
      }
    }
  });
  return out;
}

/// X = (I + A)^{-1} of a strictly lower L x L matrix by forward substitution in double, column by column:
/// X_jj = 1, X_ij = -(A_ij + sum_{j<m<i} A_im X_mj) for i > j.
std::vector<double> unit_lower_inverse(const std::vector<double>& A, int64_t L) {
  std::vector<double> X(static_cast<std::size_t>(L * L), 0.0);
  for (int64_t j = 0; j < L; ++j) {
    X[j * L + j] = 1.0;
    for (int64_t i = j + 1; i < L; ++i) {
      double s = A[i * L + j];
      for (int64_t m = j + 1; m < i; ++m) s += A[i * L + m] * X[m * L + j];
      X[i * L + j] = -s;
    }
  }
  return X;
}

/// |X_ij| + (|X| S |X|)_ij for lower-triangular X and strictly lower S (L x L).
std::vector<double> inverse_sensitivity(const std::vector<double>& X, const std::vector<double>& S, int64_t L) {
  // Y = S |X| (strictly lower), then |X| Y.
  std::vector<double> Y(static_cast<std::size_t>(L * L), 0.0), out(static_cast<std::size_t>(L * L), 0.0);
  for (int64_t m = 0; m < L; ++m)
    for (int64_t n = 0; n < m; ++n)
      for (int64_t j = 0; j <= n; ++j) Y[m * L + j] += S[m * L + n] * std::fabs(X[n * L + j]);
  for (int64_t i = 0; i < L; ++i)
    for (int64_t m = 0; m <= i; ++m)
      for (int64_t j = 0; j < m; ++j) out[i * L + j] += std::fabs(X[i * L + m]) * Y[m * L + j];
  for (int64_t e = 0; e < L * L; ++e) out[e] += std::fabs(X[e]);
  return out;
}

}  // namespace

std::vector<int64_t> cu_seqlens_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> cu = {0};
  for (int64_t l : lengths) cu.push_back(cu.back() + l);
  return cu;
}

double log_sigmoid(double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); }

std::vector<GdnChunk> gdn_chunks(int64_t B, int64_t T, int64_t BT, const std::vector<int64_t>& cu) {
  if (BT <= 0) fail("chunk_size must be positive");
  std::vector<GdnChunk> chunks;
  auto add = [&](int64_t b, int64_t bos, int64_t eos) {
    for (int64_t t = bos; t < eos; t += BT) chunks.push_back(GdnChunk{b, t, std::min(BT, eos - t)});
  };
  if (cu.empty()) {
    for (int64_t b = 0; b < B; ++b) add(b, 0, T);
    return chunks;
  }
  if (B != 1) fail("cu_seqlens needs B == 1");
  if (cu.front() != 0 || cu.back() != T) fail("cu_seqlens must start at 0 and end at T");
  for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
    if (cu[n + 1] < cu[n]) fail("cu_seqlens must not decrease");
    add(0, cu[n], cu[n + 1]);
  }
  return chunks;
}

GdnGolden chunk_local_cumsum(const HostTensor& g, int64_t BT, const std::vector<int64_t>& cu, bool reverse,
                             double scale) {
  if (g.shape().size() != 3) fail("g must be [B, T, HV]");
  const int64_t B = g.shape()[0], T = g.shape()[1], HV = g.shape()[2];
  GdnGolden out;
  out.value.assign(static_cast<std::size_t>(B * T * HV), 0.0);
  out.sensitivity.assign(out.value.size(), 0.0);
  for (const GdnChunk& c : gdn_chunks(B, T, BT, cu)) {
    for (int64_t h = 0; h < HV; ++h) {
      for (int64_t i = 0; i < c.len; ++i) {
        // The terms of token i: [chunk start, i] forward, [i, chunk end) in reverse.
        const int64_t first = reverse ? i : 0, last = reverse ? c.len - 1 : i;
        double sum = 0, mag = 0;
        for (int64_t s = first; s <= last; ++s) {
          const double x = at(g, c.batch, c.row0 + s, h);
          sum += x;
          mag += std::fabs(x);
        }
        const int64_t e = (c.batch * T + c.row0 + i) * HV + h;
        out.value[e] = scale * sum;
        out.sensitivity[e] = std::fabs(scale * sum) + std::fabs(scale) * mag;
      }
    }
  }
  return out;
}

int64_t KktInputs::B() const { return k->shape()[0]; }
int64_t KktInputs::T() const { return k->shape()[1]; }
int64_t KktInputs::H() const { return k->shape()[2]; }
int64_t KktInputs::K() const { return k->shape()[3]; }
int64_t KktInputs::HV() const { return g ? g->shape()[2] : beta ? beta->shape()[2] : H(); }

ChunkGolden kkt_solve_chunk(const KktInputs& in, const GdnChunk& c, int64_t hv) {
  const int64_t K = in.K(), L = c.len;
  const int64_t hk = hv / (in.HV() / in.H());  // value head hv reads key head hv / (HV / H)
  ChunkGolden r;
  r.L = L;
  r.A.assign(static_cast<std::size_t>(L * L), 0.0);
  r.A_sens.assign(r.A.size(), 0.0);
  std::vector<double> k(static_cast<std::size_t>(L * K));
  for (int64_t i = 0; i < L; ++i)
    for (int64_t x = 0; x < K; ++x) k[i * K + x] = at(*in.k, c.batch, c.row0 + i, hk, x);
  for (int64_t i = 0; i < L; ++i) {
    const double beta = in.beta ? at(*in.beta, c.batch, c.row0 + i, hv) : 1.0;
    const double gi = in.g ? at(*in.g, c.batch, c.row0 + i, hv) : 0.0;
    for (int64_t j = 0; j < i; ++j) {
      double dot = 0, mag = 0;
      for (int64_t x = 0; x < K; ++x) {
        dot += k[i * K + x] * k[j * K + x];
        mag += std::fabs(k[i * K + x] * k[j * K + x]);
      }
      const double gj = in.g ? at(*in.g, c.batch, c.row0 + j, hv) : 0.0;
      const double decay = std::exp(gi - gj);
      const double a = beta * dot * decay;
      r.A[i * L + j] = a;
      r.A_sens[i * L + j] = std::fabs(a) * (1.0 + std::fabs(gi) + std::fabs(gj)) + 2.0 * std::fabs(beta) * decay * mag;
    }
  }
  r.X = unit_lower_inverse(r.A, L);
  r.X_sens = inverse_sensitivity(r.X, r.A_sens, L);
  return r;
}

namespace {
void check_kkt_inputs(const KktInputs& in) {
  if (!in.k || in.k->shape().size() != 4) fail("k must be [B, T, H, K]");
  const int64_t HV = in.HV();
  if (HV % in.H() != 0) fail("HV must be a multiple of H");
  for (const HostTensor* x : {in.g, in.beta}) {
    if (x && (x->shape().size() != 3 || x->shape()[0] != in.B() || x->shape()[1] != in.T() || x->shape()[2] != HV)) {
      fail("g and beta must be [B, T, HV]");
    }
  }
}
}  // namespace

GdnGolden chunk_scaled_dot_kkt(const KktInputs& in) {
  check_kkt_inputs(in);
  const std::vector<GdnChunk> chunks = gdn_chunks(in.B(), in.T(), in.chunk_size, in.cu_seqlens);
  return assemble(in.B(), in.T(), in.HV(), in.chunk_size, chunks,
                  [&](const GdnChunk& c, int64_t h, std::vector<double>& v, std::vector<double>& s) {
                    ChunkGolden g = kkt_solve_chunk(in, c, h);
                    v = std::move(g.A);
                    s = std::move(g.A_sens);
                  });
}

GdnGolden kkt_solve(const KktInputs& in) {
  check_kkt_inputs(in);
  const std::vector<GdnChunk> chunks = gdn_chunks(in.B(), in.T(), in.chunk_size, in.cu_seqlens);
  return assemble(in.B(), in.T(), in.HV(), in.chunk_size, chunks,
                  [&](const GdnChunk& c, int64_t h, std::vector<double>& v, std::vector<double>& s) {
                    ChunkGolden g = kkt_solve_chunk(in, c, h);
                    v = std::move(g.X);
                    s = std::move(g.X_sens);
                  });
}

GdnGolden solve_tril(const HostTensor& A, const std::vector<int64_t>& cu) {
  if (A.shape().size() != 4) fail("A must be [B, T, HV, BT]");
  const int64_t B = A.shape()[0], T = A.shape()[1], HV = A.shape()[2], BT = A.shape()[3];
  const std::vector<GdnChunk> chunks = gdn_chunks(B, T, BT, cu);
  return assemble(B, T, HV, BT, chunks, [&](const GdnChunk& c, int64_t h, std::vector<double>& v, std::vector<double>& s) {
    const int64_t L = c.len;
    std::vector<double> a(static_cast<std::size_t>(L * L), 0.0), mag(a.size(), 0.0);
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t j = 0; j < i; ++j) {
        a[i * L + j] = at(A, c.batch, c.row0 + i, h, j);
        mag[i * L + j] = std::fabs(a[i * L + j]);
      }
    }
    v = unit_lower_inverse(a, L);
    s = inverse_sensitivity(v, mag, L);
  });
}

testing::Tolerance gdn_tolerance(GdnStage stage, DType out_dtype, int64_t K, int64_t BT) {
  double ulps = 16;
  switch (stage) {
    case GdnStage::cumsum: ulps += 2.0 * BT; break;
    case GdnStage::kkt: ulps += 2.0 * K; break;
    case GdnStage::kkt_solve: ulps += 2.0 * K + 2.0 * BT; break;
    case GdnStage::solve_tril: ulps += 2.0 * BT; break;
  }
  testing::Tolerance t = testing::Tolerance::for_dtype(out_dtype, ulps);
  t.flush = 0;  // no fast-math flush in these ops (the golden's flush_scale would be 0 anyway)
  t.rel_rms = gdn_rel_rms_limit(out_dtype);  // the criterion gdn_rms_check() applies, for reports
  return t;
}

double gdn_rel_rms_limit(DType out_dtype) {
  const double u = out_dtype == DType::f32 ? std::ldexp(1.0, -24) : out_dtype == DType::f16 ? std::ldexp(1.0, -11)
                                                                                             : std::ldexp(1.0, -8);
  return u + 1e-5;
}

RmsCheck gdn_rms_check(const HostTensor& out, const std::vector<double>& ref) {
  RmsCheck r;
  r.limit = gdn_rel_rms_limit(out.dtype());
  const double atol = testing::Tolerance::for_dtype(out.dtype(), 0).atol;
  const RmsSums s = rms_sums(out, ref, [&](std::size_t e) { return std::isfinite(ref[e]); });
  r.nonfinite = s.nonfinite;
  r.rel_rms_error = s.rel_rms_error();
  r.pass = r.nonfinite == 0 &&
           std::sqrt(s.err2) <= r.limit * std::sqrt(s.ref2) + atol * std::sqrt(static_cast<double>(s.n));
  return r;
}

}  // namespace fuseops::reference
