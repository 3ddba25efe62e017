// Device code of the group-warps router: grouped_topk with sigmoid scoring and groups of exactly 32 experts
// (DeepSeek-V3: 256 experts in 8 groups), one block per token and one warp per group, lane l of warp g holding expert
// 32 g + l. Nothing is picked one by one: every expert's rank in its group (how many of the group's keys beat it:
// higher key, or equal key and lower expert) comes from 32 independent shuffles, and the experts ranked below
// max(k, 2) go to shared memory; after one barrier, warp 0 takes the group scores from the two best of each group,
// the surviving groups from their ranks, and the topk_group * k candidates (one per lane: the k best of each
// surviving group, which hold the token's top k) are ranked once more against each other; rank j is output j.
//
// Results are bitwise those of route_token (moe_topk.cuh): the same keys (score + bias, or the logit without a
// bias), group scores (top two summed with a bias, else the top one), group ranks, total order and weights, and the
// renormalisation sum is store_token's warp butterfly over the weights in output order.
#pragma once

#include "cuda/moe_topk.cuh"

namespace fuseops::detail::cuda {

/// Shared memory of one token: the best max(k, 2) experts of each group (order key, score, expert) in rank order.
struct GroupWarpsScratch {
  uint32_t key[32][32];
  float score[32][32];
  int expert[32][32];
  float out_w[32];
  int out_id[32];
};

/// Whether the group-warps router takes a router call (warp-uniform, host and device): groups of 32 experts, two
/// or more groups of which some are excluded, sigmoid scoring, and the candidates (k per surviving group) fitting
/// one warp.
__host__ __device__ inline bool group_warps_shape(int E, int n_group, int topk_group, int k, bool softmax) {
  return n_group >= 2 && n_group <= 32 && E == 32 * n_group && topk_group < n_group && !softmax &&
         topk_group * k <= 32;
}

/// First half of routing token t with a block of n_group warps (warp = the group, lane = the expert within it): every
/// group's best max(k, 2) experts into the scratch. A barrier of the block, then route_group_warps_select on warp 0.
template <typename T, bool BIAS>
__device__ __forceinline__ void route_group_warps_rank(const RouteParams& p, int t, GroupWarpsScratch& sh, int warp,
                                                       int lane) {
  const int e = 32 * warp + lane;
  const T* row = static_cast<const T*>(p.logits) + static_cast<int64_t>(t) * p.logits_stride;
  const float x = moe_sanitize(to_float(row[e]));
  float key = x;
  const float s = moe_sigmoid(x);
  if constexpr (BIAS) key = s + moe_sanitize(load_any_float(p.bias, p.bias_dtype, e * p.bias_stride));
  const uint32_t ok = moe_order_key(key);
  // Rank in the group: lanes with a higher key, or the same key and a lower lane (expert).
  int rank = 0;
#pragma unroll
  for (int src = 0; src < 32; ++src) {
    const uint32_t o = __shfl_sync(kFullMask, ok, src);
    rank += (o > ok || (o == ok && src < lane)) ? 1 : 0;
  }
  if (rank < max(p.k, 2)) {
    sh.key[warp][rank] = ok;
    sh.score[warp][rank] = s;
    sh.expert[warp][rank] = e;
  }
}

/// Second half, on one warp: the surviving groups, the ranks of the candidates and the token's outputs.
template <bool BIAS>
__device__ __forceinline__ void route_group_warps_select(const RouteParams& p, int t, GroupWarpsScratch& sh,
                                                         int lane) {
  // Group scores (lane h: group h) and the surviving groups, as route_token's group_key and ranks.
  uint32_t gk = 0;
  if (lane < p.n_group) {
    const float t1 = moe_key_float(sh.key[lane][0]), t2 = moe_key_float(sh.key[lane][1]);
    gk = moe_order_key(BIAS ? t1 + t2 : t1);
  }
  int grank = 0;
  for (int h = 0; h < p.n_group; ++h) {
    const uint32_t o = __shfl_sync(kFullMask, gk, h);
    grank += o > gk || (o == gk && h < lane);
  }
  const uint32_t kept = __ballot_sync(kFullMask, lane < p.n_group && grank < p.topk_group);
  // Candidate c = q k + r: the r-th best expert of the q-th surviving group (ascending group order).
  const int C = p.topk_group * p.k;
  uint32_t ck = 0;
  int ce = 1 << 30;
  float cs = 0;
  if (lane < C) {
    const int q = lane / p.k, r = lane - q * p.k;
    uint32_t m = kept;
    for (int i = 0; i < q; ++i) m &= m - 1;  // drop the q lowest surviving groups
    const int g = __ffs(m) - 1;
    ck = sh.key[g][r];
    cs = sh.score[g][r];
    ce = sh.expert[g][r];
  }
  int rank = 0;
#pragma unroll
  for (int src = 0; src < 32; ++src) {
    const uint32_t o = __shfl_sync(kFullMask, ck, src);
    const int oe = __shfl_sync(kFullMask, ce, src);
    rank += (o > ck || (o == ck && oe < ce)) ? 1 : 0;
  }
  if (lane < C && rank < p.k) {
    sh.out_w[rank] = cs;
    sh.out_id[rank] = ce;
  }
  __syncwarp();
  const float my_w = lane < p.k ? sh.out_w[lane] : 0.0f;
  const int my_id = lane < p.k ? sh.out_id[lane] : 0;
  store_token(p, t, lane, my_w, my_id);
}

}  // namespace fuseops::detail::cuda
