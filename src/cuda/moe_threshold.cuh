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

/// Routes token t with the calling warp and returns true, or returns false having written nothing (the caller then
/// runs route_token_packed). `sh`: this warp's kThresholdScratchWords words, 16-byte aligned.
template <typename T, int VPT>
__device__ __forceinline__ bool route_token_threshold(const RouteParams& p, int t, int lane, uint32_t* sh) {
  const T* row = static_cast<const T*>(p.logits) + static_cast<int64_t>(t) * p.logits_stride;
  const int base = lane * VPT;
  // The logits widened once (held for the keys, then the exps; a 16-bit copy widened twice cost more instructions
  // than the registers it saved under the kernel's cap).
  float xs[VPT];
  load_logits<T, VPT, false>(row, base, p.E, xs);
  auto x = [&](int i) { return xs[i]; };
  uint32_t ck[VPT];
  const bool full = base + VPT <= p.E;  // no expert past E on this lane: no bound checks per expert
  if (full) {
#pragma unroll
    for (int i = 0; i < VPT; ++i) ck[i] = moe_packed_key_raw(x(i), base + i);
  } else {
#pragma unroll
    for (int i = 0; i < VPT; ++i) ck[i] = base + i < p.E ? moe_packed_key_raw(x(i), base + i) : 0u;
  }
  uint32_t lm = ck[0];
#pragma unroll
  for (int i = 1; i < VPT; ++i) lm = max(lm, ck[i]);
  uint32_t b = __reduce_max_sync(kFullMask, lm);
  const float m = moe_packed_value(b);
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
  // tau: the k-th largest lane maximum (0 when fewer than k lanes hold an expert: then every key counts, and the
  // count below sends the token to the fallback).
  uint32_t r = lm;
  for (int j = 1; j < p.k; ++j) {
    r = r == b ? 0u : r;
    b = __reduce_max_sync(kFullMask, r);
  }
  const uint32_t tau = b;
  uint32_t cm = 0;  // the lane's candidates, bit i for key i
#pragma unroll
  for (int i = 0; i < VPT; ++i) or_if_at_least(cm, ck[i], tau, 1u << i);
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
  __syncwarp();  // the previous token's reads of the scratch are done
  uint32_t to = static_cast<uint32_t>(__cvta_generic_to_shared(sh)) + 4u * static_cast<uint32_t>(at);
#pragma unroll
  for (int i = 0; i < VPT; ++i) store_if_bit(to, ck[i], cm, 1u << i);
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
