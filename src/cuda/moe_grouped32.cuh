// Device code of grouped_topk with sigmoid scoring for groups of exactly 32 experts (DeepSeek-V3: 256 experts in 8
// groups): L = n_group lanes per token and 32 / L tokens per warp; lane s of a token holds its group s (experts
// [32 s, 32 s + 32)) in registers. The group's top two keys come from a register tree (no shuffles); the surviving
// groups from the ranks of the L group keys (one gather of L shuffles, no sequential rounds); each of the k picks is a
// max over the token's L lanes of (key, lowest expert) in log2(L) xor steps, after which the winning lane takes its
// expert out and finds its next best (a tree over its keys; with topk_group = L / 2, as DeepSeek-V3, the surviving
// groups are first moved onto 16 keys per lane, so that half as many keys are rescanned). Weights are recomputed at
// the end from the logits of the picked experts (one cached load each) instead of being carried through the picks.
//
// Results are bitwise those of route_token (moe_topk.cuh), which moe_route's fused path runs: the same keys and
// the same total order (highest key, then lowest expert), the same score expression, and the renormalisation sum adds
// the same pairs in the same tree as route_token's warp butterfly (weight_sum32).
#pragma once

#include "cuda/moe_topk.cuh"

namespace fuseops::detail::cuda {

/// Merges pairs of top-two lists: (a, b)[i] = top two of (a, b)[2i] and (a, b)[2i + 1], i < N: max(a1, a2) and
/// max(min(a1, a2), max(b1, b2)).
template <int N>
__device__ __forceinline__ void merge_top_two(float (&a)[16], float (&b)[16]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const float a1 = a[2 * i], a2 = a[2 * i + 1];
    a[i] = fmaxf(a1, a2);
    b[i] = fmaxf(fminf(a1, a2), fmaxf(b[2 * i], b[2 * i + 1]));
  }
}

/// Top two of the 32 keys as a multiset (t1 >= t2): a tree of pairwise merges, 5 levels deep.
__device__ __forceinline__ void top_two32(const float (&key)[32], float& t1, float& t2) {
  float a[16], b[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    a[i] = fmaxf(key[2 * i], key[2 * i + 1]);
    b[i] = fminf(key[2 * i], key[2 * i + 1]);
  }
  merge_top_two<8>(a, b);
  merge_top_two<4>(a, b);
  merge_top_two<2>(a, b);
  merge_top_two<1>(a, b);
  t1 = a[0];
  t2 = b[0];
}

/// Sum of the k weights as route_token's warp_sum adds them: output j = m L + s sits in slot m of lane s (zeros
/// past k); offsets 16 .. L of the butterfly flip m (pairs of this lane's slots), L/2 .. 1 flip s (shuffles).
template <int L>
__device__ __forceinline__ float weight_sum32(const float (&w)[32 / L]) {
  constexpr int M = 32 / L;
  float a[M];
#pragma unroll
  for (int q = 0; q < M; ++q) a[q] = w[q];
#pragma unroll
  for (int o = M / 2; o > 0; o /= 2) {
#pragma unroll
    for (int q = 0; q < o; ++q) a[q] += a[q + o];
  }
  return segment_sum<L>(a[0]);
}

/// Maximum experts of the groups-of-32 router (16 groups of 32).
constexpr int kGroups32MaxExperts = 512;

/// The sanitised bias in the block's shared memory (`bias_sh`, kGroups32MaxExperts floats, 16-byte aligned), read by
/// every token of the block: a contiguous fp32 bias (groups32_lanes checks it). Ends with a barrier of the block.
__device__ __forceinline__ void stage_bias32(const RouteParams& p, float* bias_sh) {
  for (int i = static_cast<int>(threadIdx.x); i < p.E; i += static_cast<int>(blockDim.x)) {
    bias_sh[i] = moe_sanitize(static_cast<const float*>(p.bias)[i]);
  }
  __syncthreads();
}

/// The k picks of a token from its L lanes' keys: lane s holds N keys of experts [first, first + N) (lanes ascend
/// with experts). Each pick is the max of (key, lowest expert) over the L lanes in log2(L) xor steps; the winning
/// lane zeroes the key and reruns its N-key tree. Output j = q L + s goes to out_id[q] of lane s. The lanes hold at
/// least k keys above 0 (k <= topk_group * 32), so every pick is a real expert.
template <int L, int N>
__device__ __forceinline__ void pick_experts(const RouteParams& p, uint32_t (&uk)[N], int first, int s,
                                             int (&out_id)[32 / L]) {
  constexpr int M = 32 / L;
  uint32_t lb;
  int li;
  lane_best<N>(uk, lb, li);
#pragma unroll
  for (int q = 0; q < M; ++q) out_id[q] = 0;
  for (int j = 0; j < p.k; ++j) {
    uint32_t bk = lb;
    int bid = first + li;
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) {
      const uint32_t ok = __shfl_xor_sync(kFullMask, bk, o);
      const int oid = __shfl_xor_sync(kFullMask, bid, o);
      if (ok > bk || (ok == bk && oid < bid)) {
        bk = ok;
        bid = oid;
      }
    }
    if (bid - first >= 0 && bid - first < N) {  // this lane's best was taken
#pragma unroll
      for (int i = 0; i < N; ++i) uk[i] = i == li ? 0u : uk[i];
      lane_best<N>(uk, lb, li);
    }
#pragma unroll
    for (int q = 0; q < M; ++q) {
      if (j == q * L + s) out_id[q] = bid;
    }
  }
}

/// Routes token t (E == 32 * L, n_group == L) with the L-lane segment of the calling (full) warp that holds `lane`.
/// Segments with t >= T compute on row 0 and store nothing (every lane takes part in the shuffles).
/// `bias_sh`: the sanitised bias (stage_bias32) when BIAS.
template <typename T, int L, bool BIAS>
__device__ __forceinline__ void route_groups32(const RouteParams& p, int t, int lane, const float* bias_sh) {
  constexpr int M = 32 / L;
  const int s = lane & (L - 1), base = 32 * s;
  const bool live = t < p.T;
  const T* row = static_cast<const T*>(p.logits) + static_cast<int64_t>(live ? t : 0) * p.logits_stride;
  float x[32];
  load_logits<T, 32>(row, base, p.E, x);
  // Selection keys: sigmoid score + bias (the score as route_token computes it), or the logit without a bias.
  float key[32];
  if constexpr (BIAS) {
#pragma unroll
    for (int i = 0; i < 32; ++i) key[i] = moe_sigmoid(x[i]) + bias_sh[base + i];
  } else {
#pragma unroll
    for (int i = 0; i < 32; ++i) key[i] = x[i];
  }
  bool kept = true;
  if (p.topk_group < p.n_group) {
    float t1, t2;
    top_two32(key, t1, t2);
    const uint32_t gk = moe_order_key(BIAS ? t1 + t2 : t1);
    // Rank of this group among the token's L groups (higher key first, then the lower group).
    int rank = 0;
#pragma unroll
    for (int g = 0; g < L; ++g) {
      const uint32_t o = __shfl_sync(kFullMask, gk, g, L);
      rank += (o > gk || (o == gk && g < s)) ? 1 : 0;
    }
    kept = rank < p.topk_group;
  }
  uint32_t uk[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) uk[i] = kept ? moe_order_key(key[i]) : 0u;
  int out_id[M];
  if (2 * p.topk_group == L) {  // uniform
    // The topk_group = L/2 surviving groups, 16 keys per lane: lane s takes half s & 1 of the (s >> 1)-th kept group
    // (lanes still ascend with experts), so that every pick rescans 16 keys instead of 32.
    const unsigned km = (__ballot_sync(kFullMask, kept) >> (lane & ~(L - 1))) & ((1u << L) - 1u);
    int src = 0;
#pragma unroll
    for (int g = 0, r = 0; g < L; ++g) {
      if ((km >> g) & 1u) {
        if (r == (s >> 1)) src = g;
        ++r;
      }
    }
    const int h = s & 1;
    uint32_t half[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t lo = __shfl_sync(kFullMask, uk[i], src, L), hi = __shfl_sync(kFullMask, uk[16 + i], src, L);
      half[i] = h ? hi : lo;
    }
    pick_experts<L, 16>(p, half, 32 * src + 16 * h, s, out_id);
  } else {
    pick_experts<L, 32>(p, uk, base, s, out_id);
  }
  // Weights: the score of each picked expert, from its logit (the same expression on the same value as the key's
  // score, and as route_token's weight).
  float w[M];
#pragma unroll
  for (int q = 0; q < M; ++q) {
    w[q] = 0.0f;
    if (q * L + s < p.k) {
      const float xv = moe_sanitize(to_float(row[out_id[q]]));
      w[q] = moe_sigmoid(xv);
    }
  }
  if (p.renormalize) {
    const float tot = weight_sum32<L>(w);
#pragma unroll
    for (int q = 0; q < M; ++q) w[q] = tot > 0 ? w[q] / tot : 1.0f / static_cast<float>(p.k);
  }
  if (!live) return;
#pragma unroll
  for (int q = 0; q < M; ++q) {
    const int j = q * L + s;
    if (j < p.k) {
      const int64_t ti = t;
      p.weights[ti * p.weights_stride + j] = __fmul_rn(w[q], p.scale);
      if (p.ids_i64) static_cast<int64_t*>(p.ids)[ti * p.ids_stride + j] = out_id[q];
      else static_cast<int32_t*>(p.ids)[ti * p.ids_stride + j] = out_id[q];
      if (p.src_rows) p.src_rows[ti * p.src_stride + j] = j * p.T + t;
    }
  }
}

/// Lanes per token of route_groups32 for a router call: groups of exactly 32 experts, 8 or 16 of them, sigmoid
/// scoring, and no bias or a contiguous fp32 one aligned to 16 bytes; 0 when the call takes the general router.
/// Batches from this many tokens take the groups-of-32 router; smaller ones one warp per token. Measured on the H200
/// (DeepSeek-V3 shape, CUDA-graph replay): one warp per token 4.5-4.8 us at 1-64 tokens and 11.9 us at 4096, the
/// groups-of-32 router 6.3-7.0 us at 1-64 and 8.9 us at 4096 (slopes 1.7 and 0.46 us per 1000 tokens: even near
/// 1800 tokens). Both give the same bits for a token (tests/cpp/test_moe.cpp).
constexpr int64_t kGroups32MinTokens = 2048;

inline int groups32_lanes(const RouteParams& p) {
  const bool shape = p.n_group > 0 && p.E == 32 * p.n_group && (p.n_group == 8 || p.n_group == 16);
  const bool bias = p.bias == nullptr || (p.bias_dtype == static_cast<int>(DType::f32) && p.bias_stride == 1 &&
                                          reinterpret_cast<uintptr_t>(p.bias) % 16 == 0);
  return shape && !p.softmax && bias ? p.n_group : 0;
}

}  // namespace fuseops::detail::cuda
