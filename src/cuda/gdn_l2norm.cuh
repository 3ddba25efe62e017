// The l2 normalisation of one row spread over L consecutive lanes (FLA's l2norm_fwd: y = x rstd, rstd = 1 / sqrt(sum
// x^2 + 1e-6)), shared by the forward's prologue kernels (gdn_recompute.cu, vector form) and the warp intra kernel's
// prologue form (gdn_intra_fwd_warp.cu): each lane sums the squares of its elements in order, the row's lanes then add
// their sums by xor shuffles (a fixed tree: every lane gets the same bits), each operation rounded once. Whichever
// kernel runs it, a row gets the same bytes.
#pragma once

namespace fuseops::detail::cuda::gdn {

/// s plus the squares of the lane's E values, in order (one fused multiply-add each).
template <int E>
__device__ __forceinline__ float l2_squares(const float (&v)[E], float s) {
#pragma unroll
  for (int i = 0; i < E; ++i) s = __fmaf_rn(v[i], v[i], s);
  return s;
}

/// rstd of the row whose partial sums `s` its L lanes hold (L a power of two <= 32; the row's lanes are L-aligned):
/// the sums added over the lanes by xor shuffles (offsets L / 2 .. 1), then 1 / sqrt(sum + 1e-6), correctly rounded
/// at each step. Every lane of the warp must call it.
template <int L>
__device__ __forceinline__ float l2_rstd(float s) {
#pragma unroll
  for (int m = L / 2; m > 0; m >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, m));
  return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(s, 1e-6f)));
}

}  // namespace fuseops::detail::cuda::gdn
