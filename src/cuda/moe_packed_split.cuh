// Device code of the split packed router: the packed router (moe_packed.cuh) for 257-512 experts with two warps per
// token, for many tokens, where one warp per token is bound by the length of each warp's own chain (every warp
// routes one token; ~1 300 issued instructions in sequence at 4096 x 512). Warp h of the pair holds experts
// [256 h, 256 h + 256), 8 per lane (lane l: [256 h + 8 l, + 8)), as one sorted list; each warp takes its own k best
// (k redux picks over 8 keys per lane), and after a barrier of the pair, warp 0 ranks the two sorted lists against
// each other (the top k of their union: k independent shuffles per list) and finishes the token.
//
// Results are bitwise those of route_token (one warp, 16 experts per lane): the same keys and order; the softmax
// maximum (the larger warp maximum); the same sum: lanes 2 j and 2 j + 1 of warp h hold the 16 experts of
// route_token's lane L = 16 h + j, so lane 2 j + 1 continues lane 2 j's sequential sum, and warp_sum's butterfly over
// L is its xor-16 step across the pair (shared memory) and then xor 16, 8, 4, 2 over the odd lanes; the same weight
// expressions and store_token.
#pragma once

#include "cuda/moe_packed.cuh"

namespace fuseops::detail::cuda {

/// Tokens from which a router call with 257-512 experts takes the split packed router (fewer: one warp per token,
/// whose single chain is shorter).
constexpr int64_t kPackedSplitMinTokens = 1024;

/// Shared memory of one pair of warps.
struct PackedSplitScratch {
  uint32_t top[2][32];  ///< each warp's k best keys, descending
  uint32_t max_key[2];  ///< each warp's best key
  float lane_sum[32];   ///< route_token's lane totals (lane L), before the butterfly
  uint32_t out[32];     ///< the token's k keys in output order
};

__device__ __forceinline__ void pair_barrier(int pair) {
  asm volatile("bar.sync %0, 64;" ::"r"(1 + pair) : "memory");
}

/// Whether a router call takes the split packed router.
inline bool packed_split_call(const RouteParams& p, DType dtype) {
  return packed_route_call(p, dtype) && p.E > 256 && p.E <= 512 && p.T >= kPackedSplitMinTokens;
}

/// Routes token t with the pair of warps `pair` (h: this warp's half).
template <typename T>
__device__ __forceinline__ void route_token_split(const RouteParams& p, int t, PackedSplitScratch& sh, int pair,
                                                  int h, int lane) {
  constexpr int N = 8;
  const T* row = static_cast<const T*>(p.logits) + static_cast<int64_t>(t) * p.logits_stride;
  const int base = 256 * h + N * lane;
  float x[N];
  load_logits<T, N>(row, base, p.E, x);
  uint32_t ck[N];
#pragma unroll
  for (int i = 0; i < N; ++i) ck[i] = base + i < p.E ? moe_packed_key(x[i], base + i) : 0u;
  moe_sort_desc<N>(ck);
  // This warp's k best (0 once its keys run out: below every key).
  uint32_t mine = 0;
  for (int j = 0; j < p.k; ++j) {
    const uint32_t best = __reduce_max_sync(kFullMask, ck[0]);
    if (lane == j) mine = best;
    if (j == 0 && lane == 0) sh.max_key[h] = best;
    const bool won = ck[0] == best;
#pragma unroll
    for (int i = 0; i + 1 < N; ++i) ck[i] = won ? ck[i + 1] : ck[i];
    ck[N - 1] = won ? 0u : ck[N - 1];
  }
  if (lane < p.k) sh.top[h][lane] = mine;
  pair_barrier(pair);
  float m = 0, sum = 1;
  if (p.softmax) {
    m = moe_packed_value(max(sh.max_key[0], sh.max_key[1]));
    float s[N];
#pragma unroll
    for (int i = 0; i < N; ++i) s[i] = base + i < p.E ? expf(x[i] - m) : 0.0f;
    // route_token's lane L = 16 h + lane / 2 adds its 16 exps in order: the even lane the first 8, then the odd lane.
    float first = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) first += s[i];
    float v = __shfl_sync(kFullMask, first, lane & ~1);
#pragma unroll
    for (int i = 0; i < N; ++i) v += s[i];
    const int L = 16 * h + (lane >> 1);
    if (lane & 1) sh.lane_sum[L] = v;
    pair_barrier(pair);
    v += sh.lane_sum[L ^ 16];  // warp_sum's xor-16 step over L
#pragma unroll
    for (int o = 16; o > 1; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);  // its xor 8, 4, 2, 1 over L
    sum = __shfl_sync(kFullMask, v, 1);
  }
  if (h == 0) {
    // The top k of the two sorted lists: a key's rank is its position plus the keys of the other list above it.
    const uint32_t a = lane < p.k ? sh.top[0][lane] : 0u, b = lane < p.k ? sh.top[1][lane] : 0u;
    int ra = lane, rb = lane;
    for (int i = 0; i < p.k; ++i) {
      ra += __shfl_sync(kFullMask, b, i) > a ? 1 : 0;
      rb += __shfl_sync(kFullMask, a, i) > b ? 1 : 0;
    }
    if (lane < p.k && ra < p.k) sh.out[ra] = a;
    if (lane < p.k && rb < p.k) sh.out[rb] = b;
    __syncwarp();
    float my_w = 0;
    int my_id = 0;
    if (lane < p.k) {
      const uint32_t key = sh.out[lane];
      my_id = moe_packed_expert(key);
      const float xv = moe_packed_value(key);
      my_w = p.softmax ? expf(xv - m) / sum : moe_sigmoid(xv);
    }
    store_token(p, t, lane, my_w, my_id);
  }
  pair_barrier(pair);  // the scratch is free for the pair's next token
}

}  // namespace fuseops::detail::cuda
