// Device code of grouped_topk with sigmoid scoring for groups of exactly 32 experts (DeepSeek-V3: 256 experts in 8
// groups): L = n_group lanes per token and 32 / L tokens per warp; lane s of a token holds its group s (experts
// [32 s, 32 s + 32)). The keys are formed 4 at a time into the warp's shared scratch while running pairs give the
// group's top two (no shuffles); the surviving groups come from the ranks of the L group keys (one gather of L
// shuffles, no sequential rounds); with topk_group = L / 2, as DeepSeek-V3, the surviving groups' halves are read
// back onto the token's lanes, 16 keys each (else every lane reads its own 32). Each of the k picks is a max over the
// token's L lanes of (key, lowest expert) in log2(L) xor steps, after which the winning lane takes its next best from
// a cache of its 3 best (a tree over its remaining keys only once they are used up). Weights are recomputed at the
// end from the logits of the picked experts (one cached load each) instead of being carried through the picks.
//
// Results are bitwise those of route_token (moe_topk.cuh), which moe_route's fused path runs: the same keys and
// the same total order (highest key, then lowest expert), the same score expression, and the renormalisation sum adds
// the same pairs in the same tree as route_token's warp butterfly (weight_sum32).
#pragma once

#include <type_traits>

#include "cuda/moe_launch.h"
#include "cuda/moe_threshold.cuh"
#include "cuda/moe_topk.cuh"

namespace fuseops::detail::cuda {

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
/// Shared scratch of one warp: the order keys of its lanes' groups, 32 per lane.
constexpr int kGroups32HalvesWords = 32 * 32;

/// Position of bias entry e in the block's shared memory: group g = e / 32 keeps its 8 chunks of 4 entries, chunk c
/// at chunk (c + g) mod 8 of the group, so that the 8 lanes of a quarter warp, which read chunk c of groups g .. g + 7
/// in the key forming, hit 8 different banks (unswizzled, the groups' 128-byte rows put every lane's chunk c in the
/// same 4 banks: 32 wavefronts per 16-byte load instead of 4, the kernel's most loaded shared-memory instruction).
__device__ __forceinline__ int bias32_slot(int e) { return (e & ~31) | ((((e >> 2) + (e >> 5)) & 7) << 2) | (e & 3); }

/// The sanitised bias in the block's shared memory (`bias_sh`, kGroups32MaxExperts floats, 16-byte aligned, entry e
/// at bias32_slot(e)), read by every token of the block: a contiguous fp32 bias (groups32_lanes checks it). Ends
/// with a barrier of the block.
__device__ __forceinline__ void stage_bias32(const RouteParams& p, float* bias_sh) {
#pragma unroll
  for (int r = 0; r < kGroups32MaxExperts / (kRouteWarps * 32); ++r) {  // blocks of kRouteWarps warps
    const int i = static_cast<int>(threadIdx.x) + r * kRouteWarps * 32;
    if (i < p.E) bias_sh[bias32_slot(i)] = moe_sanitize(static_cast<const float*>(p.bias)[i]);
  }
  __syncthreads();
}

/// The lane's best kPickCache keys, best first (lane_best rounds, each key zeroed in `uk` once taken): the heads of its
/// next picks, so that a lane's rescan runs only after it has given kPickCache picks.
constexpr int kPickCache = 3;

template <int N>
__device__ __forceinline__ void take_best(uint32_t (&uk)[N], uint32_t& key, int& at) {
  lane_best<N>(uk, key, at);
#pragma unroll
  for (int i = 0; i < N; ++i) uk[i] = i == at ? 0u : uk[i];
}

/// The k picks of a token from its L lanes' keys: lane s holds N keys of experts [first, first + N) (lanes ascend
/// with experts). Each pick is the max of (key, lowest expert) over the L lanes' heads in log2(L) xor steps; the
/// winning lane's next head is its next cached key (kPickCache of them, taken in order by lane_best: the same keys,
/// ties to the lower position), and only a lane whose cache ran out rescans its remaining keys (DeepSeek-V3 rows: a
/// rescan in about one warp in two, against one per pick without the cache). Output j = q L + s goes to out_id[q]
/// of lane s. The lanes hold at least k keys above 0 (k <= topk_group * 32), so every pick is a real expert.
template <int L, int N>
__device__ __forceinline__ void pick_experts(const RouteParams& p, uint32_t (&uk)[N], int first, int s,
                                             int (&out_id)[32 / L]) {
  constexpr int M = 32 / L;
  uint32_t hk[kPickCache];
  int hi[kPickCache];
#pragma unroll
  for (int d = 0; d + 1 < kPickCache; ++d) take_best<N>(uk, hk[d], hi[d]);
  lane_best<N>(uk, hk[kPickCache - 1], hi[kPickCache - 1]);
  int unzeroed = hi[kPickCache - 1];  // the last cached key leaves `uk` only when a rescan needs it to (rarely)
#pragma unroll
  for (int q = 0; q < M; ++q) out_id[q] = 0;
  for (int j = 0; j < p.k; ++j) {
    uint32_t bk = hk[0];
    int bid = first + hi[0];
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) {
      const uint32_t ok = __shfl_xor_sync(kFullMask, bk, o);
      const int oid = __shfl_xor_sync(kFullMask, bid, o);
      if (ok > bk || (ok == bk && oid < bid)) {
        bk = ok;
        bid = oid;
      }
    }
    if (bid - first >= 0 && bid - first < N) {  // this lane's head was taken: the next cached key, or a rescan
#pragma unroll
      for (int d = 0; d + 1 < kPickCache; ++d) {
        hk[d] = hk[d + 1];
        hi[d] = hi[d + 1];
      }
      hk[kPickCache - 1] = 0u;
      if (hk[0] == 0u && j + 1 < p.k) {
#pragma unroll
        for (int i = 0; i < N; ++i) uk[i] = i == unzeroed ? 0u : uk[i];
        unzeroed = -1;
        take_best<N>(uk, hk[0], hi[0]);
      }
    }
#pragma unroll
    for (int q = 0; q < M; ++q) {
      if (j == q * L + s) out_id[q] = bid;
    }
  }
}

/// The score of a logit as route_token computes it, moe_sigmoid(moe_sanitize(x)) bit for bit with one instruction
/// of sanitising: moe_sigmoid gives the same bits for +inf as for FLT_MAX (1) and for -0 as for +0 (1/2), so only NaN
/// (and -inf, which gives 0 either way) is mapped, to -FLT_MAX.
__device__ __forceinline__ float sigmoid32(float x) { return moe_sigmoid(fmaxf(x, -FLT_MAX)); }

/// Most candidates of a token in rank_candidates32 (a warp with a token above it takes pick_experts).
constexpr int kGroups32MaxCandidates = 32;
/// rank_candidates32's words of one token: the candidates as (key, ~expert) pairs, one more pair of zeros past the
/// last (the pairs are read two at a time), padded to 16 bytes; then the experts by rank.
constexpr int kGroups32CandWords = 2 * (kGroups32MaxCandidates + 2);
constexpr int kGroups32SegWords = kGroups32CandWords + 32;
/// Candidate words of one warp (32 / L tokens, at most 4), beside the keys' scratch (which the stores read).
constexpr int kGroups32CandWarpWords = 4 * kGroups32SegWords;
static_assert(kGroups32SegWords % 4 == 0, "16-byte aligned segments");

/// c += ((hi_a, lo_a) > (hi_b, lo_b)) as 64-bit unsigned values: two compares and a predicated add.
__device__ __forceinline__ void add_if_above64(int& c, uint32_t hi_a, uint32_t lo_a, uint32_t hi_b, uint32_t lo_b) {
  asm("{\n\t.reg .pred p;\n\t.reg .b64 a, b;\n\tmov.b64 a, {%2, %1};\n\tmov.b64 b, {%4, %3};\n\t"
      "setp.gt.u64 p, a, b;\n\t@p add.s32 %0, %0, 1;\n\t}"
      : "+r"(c)
      : "r"(hi_a), "r"(lo_a), "r"(hi_b), "r"(lo_b));
}

/// Stores the pair (k, e) at shared address `to` and advances it by 8 bytes when `bit` is set in m (store_if_bit's
/// form: a bit test, a predicated store and a predicated add).
__device__ __forceinline__ void store_pair_if_bit(uint32_t& to, uint32_t k, uint32_t e, uint32_t m, uint32_t bit) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t.reg .b32 t;\n\tand.b32 t, %3, %4;\n\tsetp.ne.u32 p, t, 0;\n\t"
      "@p st.shared.v2.u32 [%0], {%1, %2};\n\t@p add.u32 %0, %0, 8;\n\t}"
      : "+r"(to)
      : "r"(k), "r"(e), "r"(m), "r"(bit)
      : "memory");
}

/// The k outputs of a token from the surviving groups' keys (HALVES: lane s holds the 16 keys `half` of experts
/// [first, first + 16), lanes ascending with experts) without sequential picks, for k <= L: tau, the smallest second
/// key of the surviving groups (each group's top two, known from the key forming), is at most the token's k-th key
/// (the L = 2 topk_group keys of the surviving groups' top twos are >= tau), so the top k are among the candidates,
/// the keys >= tau (DeepSeek-V3 rows: about 11 of 128, by a host simulation). Each lane marks its candidates in a
/// mask; the candidates go to the warp's candidate scratch as (key, ~expert) pairs in expert order (a scan of the
/// lanes' counts; each lane stores the keys of its mask by one predicated store each); each lane takes candidates s
/// and s + L (then s + 2L, s + 3L) and counts the candidates above them as 64-bit values (higher key, then lower
/// expert: the routers' total order); rank j < k is output j, which lane j of the token returns (its expert and
/// score; 0 past k). Returns false, warp-uniform and having written nothing, when a token of the warp has more than
/// kGroups32MaxCandidates candidates. `second`: the order key of this lane's group's second key; `cand`: the warp's
/// kGroups32CandWarpWords words.
template <typename T, int L, bool BIAS>
__device__ __forceinline__ bool rank_candidates32(const RouteParams& p, const uint32_t (&half)[16], int first,
                                                  bool kept, uint32_t second, int lane, uint32_t* cand,
                                                  const T* row, int& out_id, float& w) {
  const int s = lane & (L - 1);
  uint32_t tau = kept ? second : ~0u;
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) tau = min(tau, __shfl_xor_sync(kFullMask, tau, o));
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < 16; ++i) or_if_at_least(m, half[i], tau, 1u << i);
  const int c = __popc(m);
  int at = c;  // inclusive scan of the counts over the token's lanes
#pragma unroll
  for (int o = 1; o < L; o <<= 1) {
    const int y = __shfl_up_sync(kFullMask, at, o, L);
    if (s >= o) at += y;
  }
  const int C = __shfl_sync(kFullMask, at, L - 1, L);
  if (!__all_sync(kFullMask, C <= kGroups32MaxCandidates)) return false;
  at -= c;
  uint32_t* seg = cand + (lane / L) * kGroups32SegWords;
  uint32_t to = static_cast<uint32_t>(__cvta_generic_to_shared(seg)) + 8u * static_cast<uint32_t>(at);
  const uint32_t nfirst = ~static_cast<uint32_t>(first);  // ~(first + i) == ~first - i
  // One predicated store per key of `half` (measured faster than a loop over the mask's bits reading each key back
  // from the keys' scratch: 4.76 against 4.92 us at 4096 DeepSeek-V3 tokens, level at 16384).
#pragma unroll
  for (int i = 0; i < 16; ++i) store_pair_if_bit(to, half[i], nfirst - static_cast<uint32_t>(i), m, 1u << i);
  if (s == 0) {  // below every candidate (keys are above 0): pads an odd count for the pairwise reads
    seg[2 * C] = 0u;
    seg[2 * C + 1] = 0u;
  }
  __syncwarp();
  const uint2* pairs = reinterpret_cast<const uint2*>(seg);
  uint32_t* by_rank = seg + kGroups32CandWords;  // the expert of rank j (< k <= 16), its score 16 words on
  float* score_by_rank = reinterpret_cast<float*>(by_rank) + 16;
  for (int r0 = s; r0 < C; r0 += 2 * L) {
    const int r1 = r0 + L;
    const uint2 a = pairs[r0];
    const uint2 b = r1 < C ? pairs[r1] : make_uint2(0u, 0u);
    // The candidates' logits, loaded before the ranks so that the load's latency is off the chain: the owner of the
    // candidate of rank j < k computes output j's score (the same expression on the same value as the key's score).
    const T xa = row[~a.y];  // widened where used: a conversion placed at the load stalled on it before the ranks
    const T xb = r1 < C ? row[~b.y] : T{};
    int ra = 0, rb = 0;
    for (int q = 0; q < C; q += 2) {
      const uint4 o = reinterpret_cast<const uint4*>(seg)[q / 2];
      add_if_above64(ra, o.x, o.y, a.x, a.y);
      add_if_above64(ra, o.z, o.w, a.x, a.y);
      add_if_above64(rb, o.x, o.y, b.x, b.y);
      add_if_above64(rb, o.z, o.w, b.x, b.y);
    }
    if (ra < p.k) {
      by_rank[ra] = ~a.y;
      score_by_rank[ra] = sigmoid32(to_float(xa));
    }
    if (r1 < C && rb < p.k) {
      by_rank[rb] = ~b.y;
      score_by_rank[rb] = sigmoid32(to_float(xb));
    }
  }
  __syncwarp();
  const bool out = s < p.k;  // output s (k <= L: one per lane)
  out_id = out ? static_cast<int>(by_rank[s]) : 0;
  w = out ? score_by_rank[s] : 0.0f;
  return true;  // the next token's stores into `cand` wait at its first __syncwarp
}

/// Routes token t (E == 32 * L, n_group == L) with the L-lane segment of the calling (full) warp that holds `lane`.
/// Segments with t >= T compute on row 0 and store nothing (every lane takes part in the shuffles).
/// `bias_sh`: the sanitised bias (stage_bias32) when BIAS; `halves`: the warp's kGroups32HalvesWords words, 16-byte
/// aligned (the keys, read back by the picks).
/// One lane's group of 32 logits in their own dtype (16 registers for bf16 / f16), widened where the keys are formed.
template <typename T>
struct Group32Logits {
  static constexpr int CH = 16 / static_cast<int>(sizeof(T));
  StorageVec<T, CH> raw[32 / CH];
  /// Element i (a constant after unrolling); bf16 widened by a shift or a mask of its 32-bit word (the conversion of
  /// an odd element is otherwise a byte permute and a shift).
  __device__ __forceinline__ float get(int i) const {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      const uint4 r = raw[i / CH].u.raw;
      const int j = (i % CH) / 2;
      const uint32_t w = j == 0 ? r.x : j == 1 ? r.y : j == 2 ? r.z : r.w;
      return (i & 1) ? __uint_as_float(w & 0xffff0000u) : __uint_as_float(w << 16);
    } else {
      return raw[i / CH].get(i % CH);
    }
  }
};

/// The row of token t (row 0 for t >= T: those segments compute and store nothing).
template <typename T>
__device__ __forceinline__ const T* group32_row(const RouteParams& p, int t) {
  return static_cast<const T*>(p.logits) + static_cast<int64_t>(t < p.T ? t : 0) * p.logits_stride;
}

/// Loads lane `lane`'s group of token t: 16-byte loads on aligned rows, else one load per logit.
template <typename T, int L>
__device__ __forceinline__ void load_group32(const RouteParams& p, int t, int lane, Group32Logits<T>& g) {
  constexpr int CH = Group32Logits<T>::CH;
  const T* row = group32_row<T>(p, t);
  const int base = 32 * (lane & (L - 1));
  if (reinterpret_cast<uintptr_t>(row) % 16 == 0) {
#pragma unroll
    for (int c = 0; c < 32 / CH; ++c) g.raw[c].load(row + base + c * CH);
  } else {
#pragma unroll
    for (int i = 0; i < 32; ++i) g.raw[i / CH].u.elems[i % CH] = row[base + i];
  }
}

/// HALVES: topk_group == L / 2 (the surviving groups' halves are picked from; groups32_halves), a kernel of its own:
/// the other path's 32-key tree would set the registers of both (75 instead of 64 at DeepSeek-V3's shape).
/// `g`: this lane's logits (load_group32), loaded by the caller ahead of the bias staging and the previous token.
template <typename T, int L, bool BIAS, bool HALVES>
__device__ __forceinline__ void route_groups32(const RouteParams& p, int t, int lane, const float* bias_sh,
                                               uint32_t* halves, uint32_t* cand, const Group32Logits<T>& g) {
  constexpr int M = 32 / L;
  const int s = lane & (L - 1), base = 32 * s;
  const bool live = t < p.T;
  const T* row = group32_row<T>(p, t);
  // Selection keys, 4 at a time: sigmoid score + bias (the score as route_token computes it), or the logit without a
  // bias. Each goes to the warp's scratch as its order key (lane l's row of 8 16-byte chunks, chunk c at c ^ (l & 7):
  // the 8 lanes of a quarter warp store to different banks) while running top-two pairs over the keys i = j mod 4
  // give the group's top two (top_two32's selects, in another order: the same multiset). Only 4 keys are live.
  uint32_t a[2], b[2];  // running top-two order keys over the key pairs (j, j + 1), j = 0, 2
  uint32_t* mine = halves + 32 * lane;
  __syncwarp();  // the previous tokens' reads of the scratch are done
#pragma unroll
  for (int c = 0; c < 8; ++c) {
    uint32_t key[4];
    [[maybe_unused]] float bias4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (BIAS) {  // one 16-byte shared load per 4 keys (16-byte aligned chunks; bias32_slot's order)
      const float4 b4 = reinterpret_cast<const float4*>(bias_sh + base)[(c + s) & 7];
      bias4[0] = b4.x;
      bias4[1] = b4.y;
      bias4[2] = b4.z;
      bias4[3] = b4.w;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float v = g.get(4 * c + j);
      key[j] = moe_order_key(BIAS ? sigmoid32(v) + bias4[j] : moe_sanitize(v));
    }
#pragma unroll
    for (int j = 0; j < 4; j += 2) {  // top two of {a, b, key j, key j + 1}: 3-input min / max (VIMNMX3)
      const uint32_t hi = max(key[j], key[j + 1]), lo = min(key[j], key[j + 1]);
      if (c == 0) {
        a[j / 2] = hi;
        b[j / 2] = lo;
      } else {
        b[j / 2] = max(max(b[j / 2], min(a[j / 2], hi)), lo);
        a[j / 2] = max(a[j / 2], hi);
      }
    }
    reinterpret_cast<uint4*>(mine)[c ^ (lane & 7)] = make_uint4(key[0], key[1], key[2], key[3]);
  }
  bool kept = true;
  [[maybe_unused]] uint32_t second = 0;  // the order key of the group's second key (HALVES)
  if (p.topk_group < p.n_group) {
    b[0] = max(max(b[0], min(a[0], a[1])), b[1]);  // the group's top two (a[0], b[0])
    a[0] = max(a[0], a[1]);
    const uint32_t gk = BIAS ? moe_order_key(moe_key_float(a[0]) + moe_key_float(b[0])) : a[0];
    if constexpr (HALVES) second = b[0];
    // Rank of this group among the token's L groups (higher key first, then the lower group).
    int rank = 0;
#pragma unroll
    for (int g = 0; g < L; ++g) {  // (key, ~group) as 64-bit values
      add_if_above64(rank, __shfl_sync(kFullMask, gk, g, L), ~static_cast<uint32_t>(g), gk, ~static_cast<uint32_t>(s));
    }
    kept = rank < p.topk_group;
  }
  __syncwarp();
  int out_id[M];
  float w[M];
  bool ranked = false;  // rank_candidates32 gave the outputs and their scores (slot 0 only: k <= L)
  if constexpr (HALVES) {
    // The topk_group = L/2 surviving groups, 16 keys per lane: lane s takes half s & 1 of the (s >> 1)-th kept group
    // (lanes still ascend with experts), so that every pick rescans 16 keys instead of 32.
    // The kept groups by rank as 4-bit fields (L / 2 <= 8 of them, groups < 16): each kept lane puts its group in
    // field (its rank among the kept groups), an or over the token's lanes gathers them.
    const unsigned km = (__ballot_sync(kFullMask, kept) >> (lane & ~(L - 1))) & ((1u << L) - 1u);
    uint32_t by_rank = kept ? static_cast<uint32_t>(s) << (4 * __popc(km & ((1u << s) - 1u))) : 0u;
#pragma unroll
    for (int o = L / 2; o > 0; o >>= 1) by_rank |= __shfl_xor_sync(kFullMask, by_rank, o);
    const int src = static_cast<int>((by_rank >> (4 * (s >> 1))) & 15u);
    const int h = s & 1, from = (lane & ~(L - 1)) + src;
    uint32_t half[16];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint4 v = reinterpret_cast<const uint4*>(halves + 32 * from)[(4 * h + j) ^ (from & 7)];
      half[4 * j] = v.x;
      half[4 * j + 1] = v.y;
      half[4 * j + 2] = v.z;
      half[4 * j + 3] = v.w;
    }
    ranked = p.ranks && p.k <= L &&
             rank_candidates32<T, L, BIAS>(p, half, 32 * src + 16 * h, kept, second, lane, cand, row, out_id[0],
                                           w[0]);
    if (!ranked) pick_experts<L, 16>(p, half, 32 * src + 16 * h, s, out_id);
  } else {
    uint32_t uk[32];
#pragma unroll
    for (int c = 0; c < 8; ++c) {
      const uint4 v = reinterpret_cast<const uint4*>(mine)[c ^ (lane & 7)];
      uk[4 * c] = kept ? v.x : 0u;
      uk[4 * c + 1] = kept ? v.y : 0u;
      uk[4 * c + 2] = kept ? v.z : 0u;
      uk[4 * c + 3] = kept ? v.w : 0u;
    }
    pick_experts<L, 32>(p, uk, base, s, out_id);
  }
  // Weights: the score of each picked expert, from its logit (the same expression on the same value as the key's
  // score, and as route_token's weight).
  if (!ranked) {
#pragma unroll
    for (int q = 0; q < M; ++q) w[q] = q * L + s < p.k ? sigmoid32(to_float(row[out_id[q]])) : 0.0f;
  }
  if (p.k <= L) {  // one output per lane (output s in slot 0; warp-uniform): the tail below without the other slots
    float w0 = w[0];
    if (p.renormalize) {  // weight_sum32's sum when the other slots hold zeros (the weights are >= +0)
      const float tot = segment_sum<L>(w0);
      if (s < p.k) w0 = tot > 0 ? w0 / tot : p.inv_k;
    }
    if (live && s < p.k) {
      const int64_t ti = t;
      p.weights[ti * p.weights_stride + s] = __fmul_rn(w0, p.scale);
      if (p.ids_i64) static_cast<int64_t*>(p.ids)[ti * p.ids_stride + s] = out_id[0];
      else static_cast<int32_t*>(p.ids)[ti * p.ids_stride + s] = out_id[0];
      if (p.src_rows) p.src_rows[ti * p.src_stride + s] = s * p.T + t;
    }
    return;
  }
  if (p.renormalize) {
    const float tot = weight_sum32<L>(w);
#pragma unroll
    for (int q = 0; q < M; ++q) {  // outputs past k are not divided (store_token says why)
      if (q * L + s < p.k) w[q] = tot > 0 ? w[q] / tot : p.inv_k;
    }
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

/// Whether route_groups32 picks from the surviving groups' halves (topk_group = n_group / 2).
inline bool groups32_halves(const RouteParams& p) { return 2 * p.topk_group == p.n_group; }

inline int groups32_lanes(const RouteParams& p) {
  const bool shape = p.n_group > 0 && p.E == 32 * p.n_group && (p.n_group == 8 || p.n_group == 16);
  const bool bias = p.bias == nullptr || (p.bias_dtype == static_cast<int>(DType::f32) && p.bias_stride == 1 &&
                                          reinterpret_cast<uintptr_t>(p.bias) % 16 == 0);
  return shape && !p.softmax && bias ? p.n_group : 0;
}

}  // namespace fuseops::detail::cuda
