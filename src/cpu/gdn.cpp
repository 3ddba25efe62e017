// CPU backend of the GDN intra-chunk ops: fp32 compute, the stage decomposition of the CUDA backend. Each chunk of
// each head is computed by two routines, kkt_chunk (the strictly lower kkt matrix into an fp32 [BT, BT] scratch)
// and solve_chunk (forward substitution on such a scratch). The fused op runs both on one scratch; the unfused
// solve_tril loads its input into the same kind of scratch first, so with an f32 A the two paths run the same
// instructions on the same values and are bitwise identical.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common/gdn_chunks.h"
#include "cpu/gdn_cpu.h"
#include "cuda/device_error.h"
#include "fuseops/error.h"
#include "ops/gdn_impl.h"

namespace fuseops::detail::cpu {
namespace {

/// The fp32 Gram matrix of one key head over the chunk's L valid rows: gram[i * BT + j] = <k_i, k_j> for j < i,
/// summed in order of the head dim.
void gram_chunk(const KktArgs& a, int64_t b, int64_t t0, int64_t L, int64_t hk, std::vector<float>& krows,
                std::vector<float>& gram) {
  const int64_t K = a.geo.K, BT = a.geo.BT;
  krows.resize(static_cast<std::size_t>(L * K));
  for (int64_t i = 0; i < L; ++i) {
    const int64_t base = offset(a.k, b, t0 + i, hk);
    for (int64_t c = 0; c < K; ++c) krows[i * K + c] = load(a.k.data, a.k.dtype, base + c);
  }
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < i; ++j) {
      float s = 0.0f;
      for (int64_t c = 0; c < K; ++c) s += krows[i * K + c] * krows[j * K + c];
      gram[i * BT + j] = s;
    }
  }
}

/// The kkt matrix of value head hv into A ([BT, BT] row-major): A_ij = <k_i, k_j> * exp(g_i - g_j) * beta_i for
/// j < i < L, 0 everywhere else. The exponential is evaluated only where j < i (a select, never a multiply by 0 of
/// a possibly infinite value); its argument is <= 0 for valid (non-increasing) g.
void kkt_chunk(const KktArgs& a, int64_t b, int64_t t0, int64_t L, int64_t hv, const std::vector<float>& gram,
               float* A) {
  const int64_t BT = a.geo.BT;
  std::fill(A, A + BT * BT, 0.0f);
  for (int64_t i = 0; i < L; ++i) {
    const float beta = a.beta.data ? load(a.beta.data, a.beta.dtype, offset(a.beta, b, t0 + i, hv)) : 1.0f;
    const float gi = a.g.data ? load(a.g.data, DType::f32, offset(a.g, b, t0 + i, hv)) : 0.0f;
    for (int64_t j = 0; j < i; ++j) {
      float v = gram[i * BT + j];
      if (a.g.data) v *= std::exp(gi - load(a.g.data, DType::f32, offset(a.g, b, t0 + j, hv)));
      A[i * BT + j] = v * beta;
    }
  }
}

/// X = (I + A)^{-1} of the valid L x L block of A ([BT, BT] row-major, only its strictly lower part is read) by
/// forward substitution in fp32: X_ij = -(A_ij + sum_{j<m<i} A_im X_mj), X_ii = 1, 0 above the diagonal and in
/// columns >= L.
void solve_chunk(const float* A, int64_t L, int64_t BT, float* X) {
  std::fill(X, X + BT * BT, 0.0f);
  for (int64_t i = 0; i < L; ++i) {
    for (int64_t j = 0; j < i; ++j) {
      float s = A[i * BT + j];
      for (int64_t m = j + 1; m < i; ++m) s += A[i * BT + m] * X[m * BT + j];
      X[i * BT + j] = -s;
    }
    X[i * BT + i] = 1.0f;
  }
}

/// Stores the L valid rows of M ([BT, BT]) to rows t0 .. t0 + L - 1 of head h of `out` (all BT columns).
void store_rows(const GdnOut& out, int64_t b, int64_t t0, int64_t L, int64_t h, int64_t BT, const float* M) {
  for (int64_t i = 0; i < L; ++i) {
    const int64_t base = offset(out, b, t0 + i, h);
    for (int64_t j = 0; j < BT; ++j) store(out.data, out.dtype, base + j, M[i * BT + j]);
  }
}

/// kkt of every chunk and value head; `emit(b, t0, L, hv, A)` consumes each fp32 [BT, BT] matrix. The Gram matrix
/// of a key head is computed once per chunk and shared by its HV / H value heads.
template <typename Emit>
void kkt_all(const KktArgs& a, Emit emit) {
  const int64_t BT = a.geo.BT, group = a.geo.HV / a.geo.H;
  std::vector<float> krows, gram(static_cast<std::size_t>(BT * BT), 0.0f), A(gram.size());
  for_each_chunk(a.geo, [&](int64_t b, int64_t t0, int64_t L) {
    for (int64_t hk = 0; hk < a.geo.H; ++hk) {
      gram_chunk(a, b, t0, L, hk, krows, gram);
      for (int64_t hv = hk * group; hv < (hk + 1) * group; ++hv) {
        kkt_chunk(a, b, t0, L, hv, gram, A.data());
        emit(b, t0, L, hv, A.data());
      }
    }
  });
}

}  // namespace

void chunk_local_cumsum(const CumsumArgs& a) {
  const float scale = static_cast<float>(a.has_scale ? a.scale : 1.0);
  for_each_chunk(a.geo, [&](int64_t b, int64_t t0, int64_t L) {
    for (int64_t h = 0; h < a.geo.HV; ++h) {
      float s = 0.0f;
      for (int64_t r = 0; r < L; ++r) {
        const int64_t i = a.reverse ? L - 1 - r : r;
        s += load(a.g.data, a.g.dtype, offset(a.g, b, t0 + i, h));
        static_cast<float*>(a.out.data)[offset(a.out, b, t0 + i, h)] = a.has_scale ? s * scale : s;
      }
    }
  });
}

void chunk_scaled_dot_kkt_fwd(const KktArgs& args, const GdnOut& A) {
  kkt_all(args, [&](int64_t b, int64_t t0, int64_t L, int64_t hv, const float* M) {
    store_rows(A, b, t0, L, hv, args.geo.BT, M);
  });
}

void solve_tril(const GdnGeometry& geo, const GdnIn& A, const GdnOut& Ai) {
  const int64_t BT = geo.BT;
  std::vector<float> a(static_cast<std::size_t>(BT * BT), 0.0f), x(a.size());
  for_each_chunk(geo, [&](int64_t b, int64_t t0, int64_t L) {
    for (int64_t h = 0; h < geo.HV; ++h) {
      std::fill(a.begin(), a.end(), 0.0f);
      for (int64_t i = 0; i < L; ++i) {
        const int64_t base = offset(A, b, t0 + i, h);
        for (int64_t j = 0; j < i; ++j) a[i * BT + j] = load(A.data, A.dtype, base + j);
      }
      solve_chunk(a.data(), L, BT, x.data());
      store_rows(Ai, b, t0, L, h, BT, x.data());
    }
  });
}

void chunk_gated_delta_rule_fwd_kkt_solve(const KktArgs& args, const GdnOut& Ai) {
  const int64_t BT = args.geo.BT;
  std::vector<float> x(static_cast<std::size_t>(BT * BT));
  kkt_all(args, [&](int64_t b, int64_t t0, int64_t L, int64_t hv, const float* M) {
    solve_chunk(M, L, BT, x.data());
    store_rows(Ai, b, t0, L, hv, BT, x.data());
  });
}

}  // namespace fuseops::detail::cpu
