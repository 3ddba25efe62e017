// Device code of the threshold router: the packed router's cases (16-bit logits, no bias, every group kept) from
// VPT 16 (E > 256) with k <= kThresholdMaxK, from kThresholdMinTokens tokens; one warp per token, lane l holding
// experts [l*VPT, l*VPT + VPT) as packed keys (moe_packed_key_raw: no sanitising; a row whose maximum is not finite
// takes the packed router). Nothing is sorted and nothing is picked one at a time:
// - tau, the k-th largest of the 32 lane maxima (k rounds of redux.sync max, each removing the round's lane), is at
//   most the row's k-th largest key (the k lanes above it hold k distinct keys >= tau), so the row's top k are among
//   the candidates, the keys >= tau; the first round is the row's maximum (the softmax maximum, as in the packed
//   router), so the exps are issued while the other rounds run;
// - the candidates (k + a few on ordinary rows: tau is about the row's 12th-16th key at E 512, k 10) go to the
//   warp's shared scratch at their lane's offset (a warp scan of the lanes' counts); lane c takes candidate c and
//   counts the candidates above it (broadcast reads): that count is its rank, and rank j < k is output j (keys are
//   unique, so the ranks are 0 .. C-1);
// - more than 32 candidates (rows whose top keys crowd into few lanes, e.g. logits rising with the expert) or a
//   row maximum that is NaN, +inf or -inf: the token is routed by route_token_packed instead (decided before
//   anything is written, warp-uniform).
// Results are bitwise those of route_token_packed and so of route_token: the same keys and order for every finite
// value (-inf orders below them and weighs 0, as the sanitised -FLT_MAX does), the same softmax maximum, exps summed
// in the same order (each lane in expert order, then warp_sum's butterfly) and the same weight expressions.
#pragma once

#include "cuda/moe_packed.cuh"

namespace fuseops::detail::cuda {

/// Largest k and smallest VPT of the threshold router (at VPT 8 and below the packed router's sort and picks cost
/// about as much as the rounds, the scan and the ranks; k above 16 leaves few rows with at most 32 candidates).
constexpr int kThresholdMaxK = 16;
constexpr int kThresholdMinVpt = 16;
/// Tokens from which the threshold router runs: below, the packed router's chain (sort, k picks) measured shorter than
/// the k rounds, the scan and the ranks (H200, E 512 k 10: 2.57-3.04 against 2.65-3.08 us cold at 1-64 tokens;
/// 8.40 against 7.18 at 4096).
constexpr int64_t kThresholdMinTokens = 256;
/// Shared scratch of one warp, in 32-bit words: the candidates [32], the outputs by rank [32].
constexpr int kThresholdScratchWords = 64;
/// Shared words of one warp's raw logits (route_token_threshold), 16-byte aligned.
template <int VPT>
constexpr int kThresholdRawWords = 16 * VPT;

template <typename T, int VPT, bool BIAS>
__host__ __device__ constexpr bool threshold_route_type() {
  return packed_route_type<T, VPT, BIAS>() && VPT >= kThresholdMinVpt;
}

/// Whether a router call takes the threshold router (it also needs packed_route_call).
inline bool threshold_route_call(const RouteParams& p, DType dtype) {
  return packed_route_call(p, dtype) && p.k <= kThresholdMaxK && route_vpt(p.E) >= kThresholdMinVpt &&
         p.T >= kThresholdMinTokens;
}

/// c += (k > v): a compare and a predicated add (the compiler's form of the sum is a compare, an add and a select).
__device__ __forceinline__ void add_if_above(int& c, uint32_t k, uint32_t v) {
  asm("{\n\t.reg .pred p;\n\tsetp.gt.u32 p, %1, %2;\n\t@p add.s32 %0, %0, 1;\n\t}" : "+r"(c) : "r"(k), "r"(v));
}

/// m |= bit when k >= tau: a compare and a predicated or.
__device__ __forceinline__ void or_if_at_least(uint32_t& m, uint32_t k, uint32_t tau, uint32_t bit) {
  asm("{\n\t.reg .pred p;\n\tsetp.ge.u32 p, %1, %2;\n\t@p or.b32 %0, %0, %3;\n\t}"
      : "+r"(m)
      : "r"(k), "r"(tau), "r"(bit));
}

/// Stores k at shared address `to` and advances it by one word when `bit` is set in m: a bit test, a predicated store
/// and a predicated add (a store through the generic pointer recomputed its shared address for every key; a second
/// compare with tau was merged by ptxas with the count's into predicates kept in a register, ≈ 7 instructions a key).
__device__ __forceinline__ void store_if_bit(uint32_t& to, uint32_t k, uint32_t m, uint32_t bit) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t.reg .b32 t;\n\tand.b32 t, %2, %3;\n\tsetp.ne.u32 p, t, 0;\n\t"
      "@p st.shared.u32 [%0], %1;\n\t@p add.u32 %0, %0, 4;\n\t}"
      : "+r"(to)
      : "r"(k), "r"(m), "r"(bit)
      : "memory");
}

/// m |= bit when x >= tau (floats): a compare and a predicated or.
__device__ __forceinline__ void or_if_at_least_f(uint32_t& m, float x, float tau, uint32_t bit) {
  asm("{\n\t.reg .pred p;\n\tsetp.ge.f32 p, %1, %2;\n\t@p or.b32 %0, %0, %3;\n\t}"
      : "+r"(m)
      : "f"(x), "f"(tau), "r"(bit));
}

/// Raw 16-bit logits, two per word (element 2j in the low half of word j).
template <typename T>
struct Raw16 {
  static_assert(sizeof(T) == 2, "16-bit logits");
  /// The bits of -inf: the padding past E (below every finite value, and the maximum of a lane only if all of its
  /// values are -inf too).
  static constexpr uint16_t kNegInf = std::is_same_v<T, __nv_bfloat16> ? 0xff80u : 0xfc00u;
  static __device__ __forceinline__ float lo(uint32_t w) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(w << 16);
    else return __half2float(__ushort_as_half(static_cast<unsigned short>(w & 0xffffu)));
  }
  static __device__ __forceinline__ float hi(uint32_t w) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) return __uint_as_float(w & 0xffff0000u);
    else return __half2float(__ushort_as_half(static_cast<unsigned short>(w >> 16)));
  }
  static __device__ __forceinline__ float get(uint32_t h) { return lo(h); }
};

/// max.NaN (MAX) or min.NaN of two pairs of 16-bit T: a NaN in either operand gives NaN.
template <typename T, bool MAX>
__device__ __forceinline__ uint32_t minmax_nan2(uint32_t x, uint32_t y) {
  uint32_t d;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    if constexpr (MAX) asm("max.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(y));
    else asm("min.NaN.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(y));
  } else {
    if constexpr (MAX) asm("max.NaN.f16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(y));
    else asm("min.NaN.f16x2 %0, %1, %2;" : "=r"(d) : "r"(x), "r"(y));
  }
  return d;
}

/// Lane `base`'s VPT raw logits as VPT / 2 words: 16-byte loads when the lane's range is inside the row and the row is
/// 16-byte aligned, else one load per element, with -inf past E.
template <typename T, int VPT>
__device__ __forceinline__ void load_raw16(const T* row, int base, int E, uint32_t (&w)[VPT / 2]) {
  static_assert(VPT % 8 == 0, "whole 16-byte chunks");
  if (base + VPT <= E && reinterpret_cast<uintptr_t>(row) % 16 == 0) {
#pragma unroll
    for (int c = 0; c < VPT / 8; ++c) {
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(row + base) + c);
      w[4 * c] = v.x;
      w[4 * c + 1] = v.y;
      w[4 * c + 2] = v.z;
      w[4 * c + 3] = v.w;
    }
  } else {
    const uint16_t* r = reinterpret_cast<const uint16_t*>(row);
#pragma unroll
    for (int j = 0; j < VPT / 2; ++j) {
      const uint32_t a = base + 2 * j < E ? r[base + 2 * j] : Raw16<T>::kNegInf;
      const uint32_t b = base + 2 * j + 1 < E ? r[base + 2 * j + 1] : Raw16<T>::kNegInf;
      w[j] = a | (b << 16);
    }
  }
}

/// The order key of a 16-bit logit x widened to fp32 with -0 as +0 (moe_packed_key_raw's value part before the
/// mask): a compare, an or and a predicated not.
__device__ __forceinline__ uint32_t order_key_raw(float x) {
  uint32_t s;
  asm("set.lt.u32.f32 %0, %1, 0f00000000;" : "=r"(s) : "f"(x));
  return (__float_as_uint(x) | 0x80000000u) ^ s;
}

/// The value of an order_key_raw key whose 13 low bits carry something else (16-bit values widened to fp32 have them
/// zero).
__device__ __forceinline__ float order_key_raw_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffe000u) : (~k & 0xffffe000u));
}

/// Routes token t with the calling warp and returns true, or returns false having written nothing (the caller then
/// runs route_token_packed). `sh`: this warp's kThresholdScratchWords words, 16-byte aligned; `raw_sh`: this warp's
/// 16 * VPT words (kThresholdRawWords: the lanes' raw logits, each read back by its own lane for its candidates).
///
/// Only the candidates get a packed key: the lane maximum is a max.NaN of the raw pairs (a NaN anywhere gives NaN,
/// whose key is above +inf's, so such a row falls back as before), its order key carries the lane (31 - lane) in its
/// 5 low bits (zero in a widened 16-bit value) so that the lane maxima are distinct, tau's value bounds the
/// candidates as floats (x >= tau: the same set as the keys >= tau, plus the values equal to tau's past its expert,
/// which only adds candidates), and each lane forms moe_packed_key_raw for its candidates from the raw logits it
/// stored. Ranks, outputs and weights are computed from those keys as before, so the results are the same bits.
template <typename T, int VPT>
__device__ __forceinline__ bool route_token_threshold(const RouteParams& p, int t, int lane, uint32_t* sh,
                                                      uint32_t* raw_sh) {
  const T* row = static_cast<const T*>(p.logits) + static_cast<int64_t>(t) * p.logits_stride;
  const int base = lane * VPT;
  uint32_t w[VPT / 2];
  load_raw16<T, VPT>(row, base, p.E, w);
  float xs[VPT];  // widened once, held for the exps and the candidate test
#pragma unroll
  for (int j = 0; j < VPT / 2; ++j) {
    xs[2 * j] = Raw16<T>::lo(w[j]);
    xs[2 * j + 1] = Raw16<T>::hi(w[j]);
  }
  auto x = [&](int i) { return xs[i]; };
  const bool full = base + VPT <= p.E;  // no expert past E on this lane: no bound checks per expert
  uint32_t mw = w[0];
#pragma unroll
  for (int j = 1; j < VPT / 2; ++j) mw = minmax_nan2<T, true>(mw, w[j]);
  float lmv;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(lmv) : "f"(Raw16<T>::lo(mw)), "f"(Raw16<T>::hi(mw)));
  // Distinct lane maxima: the lane in the 5 low bits (0 for lanes past E: below every key).
  const uint32_t lm = base < p.E ? (order_key_raw(lmv) & ~31u) | static_cast<uint32_t>(31 - lane) : 0u;
  uint32_t b = __reduce_max_sync(kFullMask, lm);
  const float m = order_key_raw_value(b);
  if (!(fabsf(m) <= FLT_MAX)) return false;  // NaN, +inf or -inf at the top: the sanitising router
  float part = 0;
  if (p.softmax) {  // route_token_packed's sum, term for term (x past E is not read)
    if (full) {
#pragma unroll
      for (int i = 0; i < VPT; ++i) part += expf(x(i) - m);
    } else {
#pragma unroll
      for (int i = 0; i < VPT; ++i) part += base + i < p.E ? expf(x(i) - m) : 0.0f;
    }
  }
  // tau: the k-th largest lane maximum (a lane past E only when fewer than k lanes hold an expert: then the count
  // below sends the token to the fallback).
  uint32_t r = lm;
  for (int j = 1; j < p.k; ++j) {
    r = r == b ? 0u : r;
    b = __reduce_max_sync(kFullMask, r);
  }
  const float tau = b != 0u ? order_key_raw_value(b) : -INFINITY;
  uint32_t cm = 0;  // the lane's candidates, bit i for value i
#pragma unroll
  for (int i = 0; i < VPT; ++i) or_if_at_least_f(cm, x(i), tau, 1u << i);
  if (!full) cm &= base < p.E ? (1u << (p.E - base)) - 1u : 0u;
  const int c = __popc(cm);
  const int total = static_cast<int>(__reduce_add_sync(kFullMask, static_cast<uint32_t>(c)));
  if (total > 32) return false;
  int at = c;  // inclusive scan of the counts over the lanes
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(kFullMask, at, o);
    if (lane >= o) at += y;
  }
  at -= c;
  // The lane's raw logits for its candidates' keys: 16-byte chunk c of lane l at chunk c * 32 + l of the warp's area
  // (conflict-free stores); only this lane reads them back, so no barrier.
  const uint32_t raw_at = static_cast<uint32_t>(__cvta_generic_to_shared(raw_sh)) + 16u * static_cast<uint32_t>(lane);
#pragma unroll
  for (int j = 0; j < VPT / 2; j += 4) {
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(raw_at + 128u * j), "r"(w[j]), "r"(w[j + 1]),
                 "r"(w[j + 2]), "r"(w[j + 3])
                 : "memory");
  }
  __syncwarp();  // the previous token's reads of the scratch are done
  uint32_t to = static_cast<uint32_t>(__cvta_generic_to_shared(sh)) + 4u * static_cast<uint32_t>(at);
  for (uint32_t mm = cm; mm != 0; mm &= mm - 1) {
    const int i = __ffs(static_cast<int>(mm)) - 1;
    uint16_t h;
    const uint32_t at_i = raw_at + 512u * static_cast<uint32_t>(i >> 3) + 2u * static_cast<uint32_t>(i & 7);
    asm volatile("ld.shared.u16 %0, [%1];" : "=h"(h) : "r"(at_i) : "memory");
    const uint32_t key = moe_packed_key_raw(Raw16<T>::get(h), base + i);
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(to), "r"(key) : "memory");
    to += 4u;
  }
  if (lane >= total) sh[lane] = 0u;  // below every key: counts for no rank
  __syncwarp();
  const uint32_t mine = sh[lane];
  int rank = 0;
  for (int q = 0; q < total; q += 4) {
    const uint4 o = *reinterpret_cast<const uint4*>(sh + q);
    add_if_above(rank, o.x, mine);
    add_if_above(rank, o.y, mine);
    add_if_above(rank, o.z, mine);
    add_if_above(rank, o.w, mine);
  }
  if (lane < total && rank < p.k) sh[32 + rank] = mine;
  float sum = 1;
  if (p.softmax) sum = warp_sum(part);
  __syncwarp();
  float my_w = 0;
  int my_id = 0;
  if (lane < p.k) {
    const uint32_t my_key = sh[32 + lane];
    my_id = moe_packed_expert(my_key);
    const float xv = moe_packed_value(my_key);
    my_w = p.softmax ? expf(xv - m) / sum : moe_sigmoid(xv);
  }
  store_token(p, t, lane, my_w, my_id);
  return true;
}

}  // namespace fuseops::detail::cuda
