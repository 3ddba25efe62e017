// Internal interface between the GDN intra-chunk ops (validation, ops/gdn.cpp) and their backends.
// All element strides are in elements; every pointer may be read only at valid (batch, token, head) positions.
#pragma once

#include <cstdint>

#include "fuseops/tensor.h"

namespace fuseops::detail {

/// Sequences and chunks. Fixed length (cu_seqlens == nullptr): N = B sequences of T tokens, sequence b at batch
/// row b. Varlen: B == 1, sequence n = tokens [cu[n], cu[n+1]) of batch row 0, read from `cu_seqlens` (on the
/// op's device). A malformed cu_seqlens is handled by sequence_bounds() (common/gdn_chunks.h) and recorded against
/// `cu_site` (cuda/device_error.h, record_host_error).
struct GdnGeometry {
  int64_t B = 0, T = 0, H = 0, HV = 0, K = 0, BT = 64;
  const void* cu_seqlens = nullptr;
  DType cu_dtype = DType::i64;
  int64_t N = 0;  ///< number of sequences (B without cu_seqlens)
  uint32_t cu_site = 0;
  /// cu_seqlens[N] may be < T (the decode pool forms, as vLLM's CUDA-graph padded steps): tokens [cu_seqlens[N], T)
  /// belong to no sequence and their o rows are written as 0. Elsewhere cu_seqlens[N] must be T.
  bool cu_tail = false;
};

/// The geometry of B x T tokens, H key heads, HV value heads, head dim K and chunk BT, without cu_seqlens (N = B;
/// attach_cu_seqlens sets the varlen fields).
inline GdnGeometry gdn_geometry(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t BT) {
  GdnGeometry g;
  g.B = B;
  g.T = T;
  g.H = H;
  g.HV = HV;
  g.K = K;
  g.BT = BT;
  g.N = B;
  return g;
}

/// A read-only strided tensor [B, T, heads(, inner)].
struct GdnIn {
  const void* data = nullptr;  ///< null: absent (g: no gating; beta: all ones)
  DType dtype = DType::f32;
  int64_t stride_b = 0, stride_t = 0, stride_h = 0;  ///< the innermost stride is 1 for 4-D tensors
};

/// A contiguous output [B, T, HV, BT] (A or its inverse) or [B, T, HV] (cumsum: any strides).
struct GdnOut {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t stride_b = 0, stride_t = 0, stride_h = 0;
};

/// An output read by a later stage, as an input view of the same bytes.
inline GdnIn as_in(const GdnOut& o) { return GdnIn{o.data, o.dtype, o.stride_b, o.stride_t, o.stride_h}; }

struct KktArgs {
  GdnGeometry geo;
  GdnIn k;     ///< [B, T, H, K]
  GdnIn g;     ///< [B, T, HV] f32, natural-log chunk-local cumsum; optional
  GdnIn beta;  ///< [B, T, HV]; optional
};

struct CumsumArgs {
  GdnGeometry geo;  ///< HV = heads of g; H, K unused
  GdnIn g;
  GdnOut out;
  bool reverse = false;
  bool has_scale = false;
  float scale = 1.f;  ///< validated in fp32 (fp32_argument)
};

namespace cpu {
void chunk_local_cumsum(const CumsumArgs& args);
/// A (f32 / f16 / bf16): the strictly lower kkt matrix of every chunk.
void chunk_scaled_dot_kkt_fwd(const KktArgs& args, const GdnOut& A);
/// Ai = (I + A)^{-1} per chunk; A is [B, T, HV, BT] with innermost stride 1.
void solve_tril(const GdnGeometry& geo, const GdnIn& A, const GdnOut& Ai);
/// The fused stage (same result as chunk_scaled_dot_kkt_fwd into f32, then solve_tril).
void chunk_gated_delta_rule_fwd_kkt_solve(const KktArgs& args, const GdnOut& Ai);
}  // namespace cpu

#if defined(FUSEOPS_WITH_CUDA)
namespace cuda {
void chunk_local_cumsum(const CumsumArgs& args, int device, void* stream);
void chunk_scaled_dot_kkt_fwd(const KktArgs& args, const GdnOut& A, int device, void* stream);
void solve_tril(const GdnGeometry& geo, const GdnIn& A, const GdnOut& Ai, int device, void* stream);
void chunk_gated_delta_rule_fwd_kkt_solve(const KktArgs& args, const GdnOut& Ai, int device, void* stream);
/// Tests only: which kernel the fused launches that follow take where the warp kernel (gdn_intra_warp.cu) can run:
/// the launch rule, always the warp kernel (also on grids of one wave), or never (the block kernels, as
/// FUSEOPS_GDN_KKT_WARP=0 does). Same bytes in every mode.
enum class KktWarpForTesting { rule, always, never };
void set_kkt_warp_for_testing(KktWarpForTesting mode);
/// Tests only: how many launches of this process took the warp kernel.
int64_t kkt_warp_launches_for_testing();
/// Tests only: where the warp kernel runs, whether it takes its pair-per-unit kernel (two warps per unit): the rule
/// (grids of at most 8 units per SM, unless FUSEOPS_GDN_KKT_PAIR=0), `always` (on every grid where the kernel can
/// run, also on grids of one wave and against FUSEOPS_GDN_KKT_WARP=0) or `never` (the one-warp kernel). Same bytes in
/// every mode.
void set_kkt_pair_for_testing(KktWarpForTesting mode);
/// Tests only: how many launches of this process took the pair-per-unit kernel.
int64_t kkt_pair_launches_for_testing();
}  // namespace cuda
#endif

}  // namespace fuseops::detail
