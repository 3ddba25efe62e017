// Device code of the MoE routers (topk_softmax, grouped_topk, the routing half of moe_route): one warp routes one
// token. Lane l holds the VPT consecutive experts [l*VPT, l*VPT + VPT) in registers (vector loads); maxima are warp
// reductions of order-preserving 32-bit keys (redux.sync) and every argmax takes the lowest lane holding the
// maximum (ballot; lanes ascend with experts, a lane's best is its first position of the key), so ties go to the
// lower expert. Group scores: the top two keys of each lane merged by shuffles over the group's lanes (or, for
// groups not made of whole lanes, scanned by one lane per group from the warp's keys in shared memory). Included
// by moe_topk.cu and moe_route.cu, which must produce identical results.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/moe_math.h"
#include "cuda/vec.cuh"
#include "fuseops/tensor.h"

namespace fuseops::detail::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

/// Kernel parameters of a router (see RouteArgs).
struct RouteParams {
  const void* logits;
  int64_t logits_stride;
  const void* bias;  ///< nullptr when absent
  int64_t bias_stride;
  int bias_dtype;    ///< DType of the bias
  int prefetch;      ///< the routers' L2 prefetch of their first rows before the PDL wait (prefetch_rows_l2)
  float* weights;
  int64_t weights_stride;
  void* ids;
  int64_t ids_stride;
  int ids_i64;
  int ranks;  ///< groups-of-32 router: rank the candidates above a bound instead of k picks (rank_candidates32)
  int32_t* src_rows;  ///< nullptr when absent
  int64_t src_stride;
  int T, E, k, n_group, topk_group, softmax, renormalize;
  float scale;
  float inv_k;  ///< 1 / k (fp32, correctly rounded as on the device): the weights of a renormalised row whose sum is 0
};

__device__ __forceinline__ float load_any_float(const void* p, int dtype, int64_t i) {
  if (dtype == static_cast<int>(DType::f16)) return __half2float(static_cast<const __half*>(p)[i]);
  if (dtype == static_cast<int>(DType::bf16)) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

/// Hints the L2 to fetch `rows` rows of `row_bytes` bytes, `stride_bytes` apart from `row0`: rows that are contiguous
/// as one prefetch per 128-byte line over the lanes when they span at most 32 lines (a few instructions; the bulk
/// prefetch's operands go through uniform registers in a loop of ~20), else, 16-byte aligned, as one bulk prefetch
/// from lane 0 (cp.async.bulk.prefetch.L2), else one prefetch per 128 bytes of each row over the lanes. The routers
/// issue it for their first token(s) before pdl_wait_and_release, so that the DRAM latency of the logits runs while
/// the previous kernel finishes. It reads nothing into the SM: the L2 is the point of coherence, so a line that the
/// previous kernel writes after the prefetch is still read as written after the wait (the loads go through L1, which
/// the prefetch does not fill).
__device__ __forceinline__ void prefetch_rows_l2(const void* row0, int64_t stride_bytes, int row_bytes, int rows,
                                                 int lane) {
  const char* r = static_cast<const char*>(row0);
  if (rows == 1 || stride_bytes == row_bytes) {
    const uintptr_t first = reinterpret_cast<uintptr_t>(r) & ~uintptr_t{127};
    const uintptr_t last = (reinterpret_cast<uintptr_t>(r) + static_cast<uintptr_t>(rows * row_bytes) - 1) &
                           ~uintptr_t{127};
    if (last - first < 32 * 128) {
      const uintptr_t line = first + 128 * static_cast<uintptr_t>(lane);
      if (line <= last) asm volatile("prefetch.global.L2 [%0];" ::"l"(line));
      return;
    }
  }
  if ((rows == 1 || stride_bytes == row_bytes) &&
      ((reinterpret_cast<uintptr_t>(r) | static_cast<uintptr_t>(row_bytes)) & 15) == 0) {
    if (lane == 0) {
      asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(__cvta_generic_to_global(r)),
                   "r"(rows * row_bytes)
                   : "memory");
    }
    return;
  }
  for (int q = 0; q < rows; ++q, r += stride_bytes) {
    for (int c = 128 * lane; c < row_bytes; c += 32 * 128) asm volatile("prefetch.L2 [%0];" ::"l"(r + c));
  }
}

/// prefetch_rows_l2 of the logits rows [t, t + tokens) that exist, when the call asks for it (RouteParams::prefetch).
template <typename T>
__device__ __forceinline__ void prefetch_logits_l2(const RouteParams& p, int t, int tokens, int lane) {
  if (!p.prefetch || t >= p.T) return;
  const int64_t stride = p.logits_stride * static_cast<int64_t>(sizeof(T));
  prefetch_rows_l2(static_cast<const char*>(p.logits) + t * stride, stride, p.E * static_cast<int>(sizeof(T)),
                   min(tokens, p.T - t), lane);
}

/// prefetch_rows_l2 of a contiguous bias, when the call asks for it (RouteParams::prefetch): a bias that is not in
/// the L2 (in a model it is read once per layer) is otherwise a DRAM load after the PDL wait, beside the logits'.
__device__ __forceinline__ void prefetch_bias_l2(const RouteParams& p, int lane) {
  if (!p.prefetch || p.bias == nullptr || p.bias_stride != 1) return;
  const int size = p.bias_dtype == static_cast<int>(DType::f32) ? 4 : 2;
  prefetch_rows_l2(p.bias, 0, p.E * size, 1, lane);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);  // a + b == b + a: every lane agrees
  return v;
}

/// Lane `base`'s VPT logits, sanitised (-FLT_MAX past E): vector loads of up to 16 bytes when the lane's range is
/// inside the row and the row is aligned, else one load per element. SANITIZE false: the values as loaded (0 past
/// E), for callers that order them by moe_wide16_key and check the row's maximum.
template <typename T, int VPT, bool SANITIZE = true>
__device__ __forceinline__ void load_logits(const T* row, int base, int E, float (&x)[VPT]) {
  constexpr int CH = VPT * static_cast<int>(sizeof(T)) > 16 ? 16 / static_cast<int>(sizeof(T)) : VPT;
  if (base + VPT <= E && reinterpret_cast<uintptr_t>(row) % (CH * sizeof(T)) == 0) {
#pragma unroll
    for (int c = 0; c < VPT; c += CH) {
      FloatVec<T, CH> v;
      v.load(row + base + c);
#pragma unroll
      for (int i = 0; i < CH; ++i) x[c + i] = SANITIZE ? moe_sanitize(v.v[i]) : v.v[i];
    }
  } else {
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      const float v = base + i < E ? to_float(row[base + i]) : 0.0f;
      x[i] = !SANITIZE ? v : base + i < E ? moe_sanitize(v) : -FLT_MAX;
    }
  }
}

/// One level of lane_best's tree: pair i (< N) of the previous level becomes entry i (the lower half of a pair holds
/// the lower positions, so it wins ties). A template per level, so that every index is a constant (a loop over
/// the levels with a halving bound is not always unrolled, and the arrays then go to local memory).
template <int N, int VPT>
__device__ __forceinline__ void lane_best_level(uint32_t (&k)[VPT], int (&at)[VPT]) {
  if constexpr (N >= 1) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const bool hi = k[2 * i + 1] > k[2 * i];
      k[i] = hi ? k[2 * i + 1] : k[2 * i];
      at[i] = hi ? at[2 * i + 1] : at[2 * i];
    }
    lane_best_level<N / 2, VPT>(k, at);
  }
}

/// The lane's highest key and its first (lowest) position: a tree over adjacent pairs, log2(VPT) steps deep.
template <int VPT>
__device__ __forceinline__ void lane_best(const uint32_t (&uk)[VPT], uint32_t& lb, int& li) {
  uint32_t k[VPT];
  int at[VPT];
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    k[i] = uk[i];
    at[i] = i;
  }
  lane_best_level<VPT / 2, VPT>(k, at);
  lb = k[0];
  li = at[0];
}

/// Group of every lane and the group's score key (0 for lanes past the groups); `stride`: lane g * stride holds group
/// g's key. When a group spans a power of two of whole lanes (E/n_group a multiple of VPT), every lane takes the
/// top two of its keys and the group's lanes merge them with shuffles (all of them hold the key; stride = lanes per
/// group); otherwise the keys go to the warp's shared scratch and lane g scans group g (stride 1).
template <int VPT, bool BIAS>
__device__ __forceinline__ uint32_t group_key(const RouteParams& p, const float (&key)[VPT], float* keys, int lane,
                                              int& group, int& stride) {
  const int G = p.E / p.n_group, base = lane * VPT;
  const int lpg = G / VPT;  // lanes per group when aligned
  float top1 = -INFINITY, top2 = -INFINITY;
  auto take = [&](float v) {
    if (v > top1) {
      top2 = top1;
      top1 = v;
    } else if (v > top2) {
      top2 = v;
    }
  };
  if (G % VPT == 0 && (lpg & (lpg - 1)) == 0) {  // warp-uniform
    group = lane / lpg;
    stride = lpg;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (base + i < p.E) take(key[i]);
    }
    for (int o = 1; o < lpg; o <<= 1) {
      const float b1 = __shfl_xor_sync(kFullMask, top1, o), b2 = __shfl_xor_sync(kFullMask, top2, o);
      // top two of {top1, top2, b1, b2} as a multiset (top1 >= top2, b1 >= b2)
      if (top1 >= b1) {
        top2 = fmaxf(top2, b1);
      } else {
        top2 = fmaxf(top1, b2);
        top1 = b1;
      }
    }
  } else {
    group = lane;
    stride = 1;
    __syncwarp();
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      if (base + i < p.E) keys[base + i] = key[i];
    }
    __syncwarp();
    if (lane < p.n_group) {
      for (int e = lane * G; e < lane * G + G; ++e) take(keys[e]);
    }
  }
  if (group >= p.n_group) return 0u;
  return moe_order_key(!BIAS ? top1 : G == 1 ? top1 : top1 + top2);
}

/// The end of a token routed by one warp: lane j < k holds pick j's weight and expert; renormalises the weights over
/// the k lanes (warp_sum), scales them and stores the token's outputs.
__device__ __forceinline__ void store_token(const RouteParams& p, int t, int lane, float my_w, int my_id) {
  if (p.renormalize) {
    const float sum = warp_sum(lane < p.k ? my_w : 0.0f);
    // Only the k lanes divide: the division's range check sends a zero dividend (the other lanes') to its slow path,
    // a subroutine call of ~30 instructions for the warp.
    if (lane < p.k) my_w = sum > 0 ? my_w / sum : p.inv_k;
  }
  my_w = __fmul_rn(my_w, p.scale);
  if (lane < p.k) {
    p.weights[static_cast<int64_t>(t) * p.weights_stride + lane] = my_w;
    if (p.ids_i64) static_cast<int64_t*>(p.ids)[static_cast<int64_t>(t) * p.ids_stride + lane] = my_id;
    else static_cast<int32_t*>(p.ids)[static_cast<int64_t>(t) * p.ids_stride + lane] = my_id;
    if (p.src_rows) p.src_rows[static_cast<int64_t>(t) * p.src_stride + lane] = lane * p.T + t;
  }
}

/// Floats of a warp's shared scratch in route_token: the keys of group_key's shared path, then the scores (with a
/// bias), 32 * VPT; the picks' experts, 32.
__host__ __device__ constexpr int route_scratch_floats(int vpt) { return 32 * vpt + 32; }

/// Routes token t with the calling (full) warp; `keys` is this warp's shared scratch of route_scratch_floats(VPT)
/// floats. BIAS: the router has a bias (p.bias set). Without one the key is the logit, so a pick's weight is
/// recomputed from its key (the same expression on the same value as the score array, which is then not kept:
/// fewer registers).
template <typename T, int VPT, bool BIAS>
__device__ __forceinline__ void route_token(const RouteParams& p, int t, float* keys, int lane) {
  const T* row = static_cast<const T*>(p.logits) + static_cast<int64_t>(t) * p.logits_stride;
  const int base = lane * VPT;
  float x[VPT], b[VPT];
  load_logits<T, VPT>(row, base, p.E, x);
  if constexpr (BIAS) {  // issued with the logits' loads, before any math waits on them
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      b[i] = base + i < p.E ? load_any_float(p.bias, p.bias_dtype, (base + i) * p.bias_stride) : 0.0f;
    }
  }
  float s[VPT];
  float m = 0, sum = 1;
  // Without a bias the softmax sum only serves the weights: its butterfly (warp_sum's five xor steps, in the same
  // order) runs inside the picks' loop, one step per pick from the second, off their dependent chain; `part` holds
  // it meanwhile.
  const bool sum_in_picks = !BIAS && p.softmax;
  float part = 0;
  if (p.softmax) {
    uint32_t mk = 0;
#pragma unroll
    for (int i = 0; i < VPT; ++i) mk = max(mk, moe_order_key(x[i]));
    m = moe_key_float(__reduce_max_sync(kFullMask, mk));
    float local = 0;
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      s[i] = base + i < p.E ? expf(x[i] - m) : 0.0f;
      local += s[i];
    }
    if constexpr (BIAS) {
      sum = warp_sum(local);
#pragma unroll
      for (int i = 0; i < VPT; ++i) s[i] = s[i] / sum;
    } else {
      part = local;
    }
  } else {
#pragma unroll
    for (int i = 0; i < VPT; ++i) s[i] = moe_sigmoid(x[i]);
  }
  // Selection keys: score + bias, or the logit itself (same order as the score) without a bias.
  float key[VPT];
#pragma unroll
  for (int i = 0; i < VPT; ++i) {
    key[i] = x[i];
    if constexpr (BIAS) {
      if (base + i < p.E) key[i] = s[i] + moe_sanitize(b[i]);
    }
  }
  uint32_t kept = kFullMask;  // surviving groups
  const int G = p.E / p.n_group;
  if (p.topk_group < p.n_group) {
    int group, stride;
    const uint32_t gk = group_key<VPT, BIAS>(p, key, keys, lane, group, stride);
    // The surviving groups: those whose rank among the n_group keys (higher key first, then the lower group) is
    // below topk_group. One gather of n_group independent shuffles instead of topk_group dependent rounds.
    int rank = 0;
#pragma unroll 8
    for (int h = 0; h < p.n_group; ++h) {
      const uint32_t o = __shfl_sync(kFullMask, gk, h * stride);
      rank += o > gk || (o == gk && h < group);
    }
    kept = __reduce_or_sync(kFullMask, group < p.n_group && rank < p.topk_group ? 1u << group : 0u);
  }
  float* scores = keys;                                    // [32 * VPT], with a bias
  int* pick_id = reinterpret_cast<int*>(keys + 32 * VPT);  // [32]
  __syncwarp();  // the scratch is free: group_key's reads and the previous token's are done
  if constexpr (BIAS) {
#pragma unroll
    for (int i = 0; i < VPT; ++i) scores[base + i] = s[i];
  }
  uint32_t uk[VPT];
  if (kept == kFullMask) {
#pragma unroll
    for (int i = 0; i < VPT; ++i) uk[i] = base + i < p.E ? moe_order_key(key[i]) : 0u;
  } else {
    int g = base / G, r = base - g * G;  // group of expert base + i, stepped without a division per expert
#pragma unroll
    for (int i = 0; i < VPT; ++i) {
      uk[i] = base + i < p.E && ((kept >> g) & 1u) ? moe_order_key(key[i]) : 0u;
      if (++r == G) {
        r = 0;
        ++g;
      }
    }
  }
  // k rounds: the highest key of the warp, the lowest lane holding it (lanes ascend with experts; a lane's best is
  // its first position of that key), which takes it out and finds its next best. Only the selection is on this
  // loop's dependent chain: every lane sees the pick's key (the redux result) and the winning lane stores the
  // expert in the warp's scratch (a store does not hold up the next round); the weights are computed after the
  // loop by lanes 0..k-1 in parallel, from the same values with the same expressions (with a bias: the score,
  // stored by its lane before the loop, read back at the expert's index).
  uint32_t lb;
  int li;
  lane_best<VPT>(uk, lb, li);
  uint32_t my_key = 0;
  for (int j = 0; j < p.k; ++j) {
    const uint32_t best = __reduce_max_sync(kFullMask, lb);
    // Step j - 1 of the softmax butterfly (warp-uniform), from the second pick: the exps have landed by then.
    const bool step = sum_in_picks && j >= 1 && j <= 5;
    float y = 0;
    if (step) y = __shfl_xor_sync(kFullMask, part, 16 >> (j - 1));
    const int wl = __ffs(__ballot_sync(kFullMask, lb == best)) - 1;
    if (lane == j) my_key = best;
    if (lane == wl) {
      pick_id[j] = base + li;
#pragma unroll
      for (int i = 0; i < VPT; ++i) uk[i] = i == li ? 0u : uk[i];
      lane_best<VPT>(uk, lb, li);
    }
    if (step) part += y;
  }
  if (sum_in_picks) {
    for (int st = min(p.k - 1, 5); st < 5; ++st) part += __shfl_xor_sync(kFullMask, part, 16 >> st);
    sum = part;
  }
  __syncwarp();
  float my_w = 0;
  int my_id = 0;
  if (lane < p.k) {
    my_id = pick_id[lane];
    if constexpr (BIAS) {
      my_w = scores[my_id];
    } else {
      const float xv = moe_key_float(my_key);  // the logit of the pick, bit for bit
      my_w = p.softmax ? expf(xv - m) / sum : moe_sigmoid(xv);
    }
  }
  store_token(p, t, lane, my_w, my_id);
}

/// Max and sum over the L lanes of a segment: xor butterflies with offsets L/2 .. 1. For the lanes of a token these
/// are the additions warp_sum makes when the lanes past the token's hold zeros (adding +0 is exact), so the weights
/// equal route_token's bit for bit.
template <int L>
__device__ __forceinline__ uint32_t segment_max(uint32_t v) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

template <int L>
__device__ __forceinline__ float segment_sum(float v) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

/// Routes token t (E <= L, no group selection) with the L-lane segment of the calling (full) warp that holds
/// `lane`: one expert per lane, 32 / L tokens per warp. Same selection and arithmetic as route_token with VPT 1.
/// Segments with t >= T compute and store nothing.
template <typename T, int L>
__device__ __forceinline__ void route_token_lanes(const RouteParams& p, int t, int lane) {
  const int sub = lane & (L - 1);
  const bool on = t < p.T && sub < p.E;
  const T* row = static_cast<const T*>(p.logits) + static_cast<int64_t>(t < p.T ? t : 0) * p.logits_stride;
  const float x = on ? moe_sanitize(to_float(row[sub])) : -FLT_MAX;
  const float b = on && p.bias ? load_any_float(p.bias, p.bias_dtype, sub * p.bias_stride) : 0.0f;
  float s;
  if (p.softmax) {
    const float m = moe_key_float(segment_max<L>(moe_order_key(x)));
    s = sub < p.E ? expf(x - m) : 0.0f;
    s = s / segment_sum<L>(s);
  } else {
    s = moe_sigmoid(x);
  }
  const float key = p.bias && sub < p.E ? s + moe_sanitize(b) : x;
  uint32_t uk = sub < p.E ? moe_order_key(key) : 0u;
  const unsigned segment = (L == 32 ? kFullMask : (1u << L) - 1u) << (lane & ~(L - 1));
  float my_w = 0;
  int my_id = 0;
  for (int j = 0; j < p.k; ++j) {
    const uint32_t best = segment_max<L>(uk);
    const int wl = __ffs(__ballot_sync(kFullMask, uk == best) & segment) - 1;  // lowest expert holding it
    const float wv = __shfl_sync(kFullMask, s, wl);
    if (sub == j) {
      my_w = wv;
      my_id = wl & (L - 1);
    }
    if (lane == wl) uk = 0;
  }
  if (p.renormalize) {
    const float sum = segment_sum<L>(sub < p.k ? my_w : 0.0f);
    if (sub < p.k) my_w = sum > 0 ? my_w / sum : p.inv_k;  // as store_token
  }
  my_w = __fmul_rn(my_w, p.scale);
  if (t < p.T && sub < p.k) {
    p.weights[static_cast<int64_t>(t) * p.weights_stride + sub] = my_w;
    if (p.ids_i64) static_cast<int64_t*>(p.ids)[static_cast<int64_t>(t) * p.ids_stride + sub] = my_id;
    else static_cast<int32_t*>(p.ids)[static_cast<int64_t>(t) * p.ids_stride + sub] = my_id;
    if (p.src_rows) p.src_rows[static_cast<int64_t>(t) * p.src_stride + sub] = sub * p.T + t;
  }
}

/// The registers-per-lane bucket for E experts: the smallest power of two VPT with 32 * VPT >= E.
inline int route_vpt(int64_t E) {
  int vpt = 1;
  while (32 * vpt < E) vpt *= 2;
  return vpt;
}

/// Calls f(TypeTag<T>{}, std::integral_constant<int, VPT>{}, std::bool_constant<BIAS>{}) for the logits dtype, E and
/// whether there is a bias.
template <typename T>
struct TypeTag {
  using type = T;
};
template <typename F>
void dispatch_route(DType dtype, int64_t E, bool bias, F&& f) {
  auto by_vpt = [&](auto tag, auto has_bias) {
    switch (route_vpt(E)) {
      case 1: f(tag, std::integral_constant<int, 1>{}, has_bias); break;
      case 2: f(tag, std::integral_constant<int, 2>{}, has_bias); break;
      case 4: f(tag, std::integral_constant<int, 4>{}, has_bias); break;
      case 8: f(tag, std::integral_constant<int, 8>{}, has_bias); break;
      case 16: f(tag, std::integral_constant<int, 16>{}, has_bias); break;
      default: f(tag, std::integral_constant<int, 32>{}, has_bias); break;
    }
  };
  auto by_bias = [&](auto tag) {
    if (bias) by_vpt(tag, std::true_type{});
    else by_vpt(tag, std::false_type{});
  };
  switch (dtype) {
    case DType::f16: by_bias(TypeTag<__half>{}); break;
    case DType::bf16: by_bias(TypeTag<__nv_bfloat16>{}); break;
    default: by_bias(TypeTag<float>{}); break;
  }
}

}  // namespace fuseops::detail::cuda
