// Device code of the packed router: 16-bit logits (f16, bf16), no bias, no group selection (topk_softmax, and
// grouped_topk with every group kept), one warp per token, lane l holding experts [l*VPT, l*VPT + VPT). Every
// expert's value and index are one packed 32-bit key (moe_packed_key, common/moe_math.h) whose unsigned order is the
// routers' total order, so each lane sorts its VPT keys once (bitonic networks; two lists of VPT / 2 from VPT 16) and
// each of the k picks is one redux.sync max of the lanes' heads, after which the list holding it (the only one: keys
// are unique) shifts by one; no index selects, no ballot, no rescans. The pick's key gives back value and expert.
//
// Results are bitwise those of route_token (moe_topk.cuh): the same sanitised values and order, the softmax maximum
// (the first pick's value), the same sum (each lane adds its exps in expert order, then
// warp_sum's five xor steps in the same order) and the same weight expressions.
#pragma once

#include "cuda/moe_topk.cuh"
#include "fuseops/moe.h"

namespace fuseops::detail::cuda {

static_assert(kMaxRouterExperts <= int64_t{kMoePackedExpertMask} + 1, "experts fit the packed key");

/// Whether the packed router takes the calls of route_token<T, VPT, BIAS> (warp-uniform).
template <typename T, int VPT, bool BIAS>
__host__ __device__ constexpr bool packed_route_type() {
  return !BIAS && sizeof(T) == 2 && VPT >= 2;
}

/// Whether a router call takes the packed router (the kernel's type test, at run time).
inline bool packed_route_call(const RouteParams& p, DType dtype) {
  return (dtype == DType::bf16 || dtype == DType::f16) && p.bias == nullptr && p.topk_group >= p.n_group &&
         route_vpt(p.E) >= 2;
}

template <typename T, int VPT>
__device__ __forceinline__ void route_token_packed(const RouteParams& p, int t, int lane) {
  const T* row = static_cast<const T*>(p.logits) + static_cast<int64_t>(t) * p.logits_stride;
  const int base = lane * VPT;
  float x[VPT];
  load_logits<T, VPT>(row, base, p.E, x);
  // The lane's keys as H sorted lists of S (H = 2 from VPT 16: two sorts of VPT / 2 cost fewer compare-exchanges
  // than one of VPT, for one more max per pick).
  constexpr int H = VPT >= 16 ? 2 : 1, S = VPT / H;
  uint32_t ck[H][S];
#pragma unroll
  for (int i = 0; i < VPT; ++i) ck[i / S][i % S] = base + i < p.E ? moe_packed_key(x[i], base + i) : 0u;
#pragma unroll
  for (int h = 0; h < H; ++h) moe_sort_desc<S>(ck[h]);
  // k picks: the warp max of the lanes' heads, which the list holding it (the only one: keys are unique) pops.
  auto head = [&]() {
    uint32_t v = ck[0][0];
#pragma unroll
    for (int h = 1; h < H; ++h) v = max(v, ck[h][0]);
    return v;
  };
  auto pop = [&](uint32_t b) {
#pragma unroll
    for (int h = 0; h < H; ++h) {
      const bool won = ck[h][0] == b;
#pragma unroll
      for (int i = 0; i + 1 < S; ++i) ck[h][i] = won ? ck[h][i + 1] : ck[h][i];
      ck[h][S - 1] = won ? 0u : ck[h][S - 1];
    }
  };
  uint32_t best = __reduce_max_sync(kFullMask, head());
  uint32_t my_key = lane == 0 ? best : 0u;
  pop(best);
  // The first pick is the row's maximum (route_token's softmax maximum, bit for bit): the lane's exps, summed in
  // expert order, and the sum's butterfly (warp_sum's five xor steps, in its order), one step per pick, as
  // route_token adds them. Up to VPT 8 the exps are issued before the picks' loop and the butterfly starts with the
  // second pick. At VPT 16 the next kSpread picks are unrolled and each issues VPT / kSpread of the exps, so that
  // they fill the issue slots while the picks wait on their reductions (such a pick past k - 1 changes no output),
  // and the butterfly follows them (measured 0.3 us faster at E 512; at VPT 4 slightly slower, and at VPT 32 the
  // logits' longer life spills in moe_route's 64-register kernel).
  constexpr int kSpread = VPT == 16 ? 4 : 0;
  float m = 0, part = 0, sum = 1;
  const bool full = base + VPT <= p.E;  // no expert past E on this lane: no bound checks per expert
  if (p.softmax) m = moe_packed_value(best);
  if constexpr (kSpread == 0) {
    if (p.softmax) {
      if (full) {
#pragma unroll
        for (int i = 0; i < VPT; ++i) part += expf(x[i] - m);
      } else {
#pragma unroll
        for (int i = 0; i < VPT; ++i) part += base + i < p.E ? expf(x[i] - m) : 0.0f;
      }
    }
  } else {
#pragma unroll
    for (int j = 1; j <= kSpread; ++j) {
      best = __reduce_max_sync(kFullMask, head());
      if (p.softmax) {
#pragma unroll
        for (int i = (j - 1) * (VPT / kSpread); i < j * (VPT / kSpread); ++i) {
          const float e = expf(x[i] - m);
          part += full || base + i < p.E ? e : 0.0f;
        }
      }
      if (lane == j) my_key = best;
      pop(best);
    }
  }
  for (int j = 1 + kSpread; j < p.k; ++j) {
    best = __reduce_max_sync(kFullMask, head());
    const int st = j - 1 - kSpread;
    const bool step = p.softmax && st < 5;
    float y = 0;
    if (step) y = __shfl_xor_sync(kFullMask, part, 16 >> st);
    if (lane == j) my_key = best;
    pop(best);
    if (step) part += y;
  }
  if (p.softmax) {
    for (int st = max(0, min(p.k - 1 - kSpread, 5)); st < 5; ++st) {
      part += __shfl_xor_sync(kFullMask, part, 16 >> st);
    }
    sum = part;
  }
  float my_w = 0;
  int my_id = 0;
  if (lane < p.k) {
    my_id = moe_packed_expert(my_key);
    const float xv = moe_packed_value(my_key);
    my_w = p.softmax ? expf(xv - m) / sum : moe_sigmoid(xv);
  }
  store_token(p, t, lane, my_w, my_id);
}

/// Routes token t with the calling warp: the packed router where it applies (16-bit logits, no bias, every group
/// kept), else route_token. Both give the same bits.
template <typename T, int VPT, bool BIAS>
__device__ __forceinline__ void route_token_any(const RouteParams& p, int t, float* keys, int lane) {
  if constexpr (packed_route_type<T, VPT, BIAS>()) {
    if (p.topk_group >= p.n_group) {
      route_token_packed<T, VPT>(p, t, lane);
      return;
    }
  }
  route_token<T, VPT, BIAS>(p, t, keys, lane);
}

}  // namespace fuseops::detail::cuda
