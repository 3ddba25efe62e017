// Device building blocks of the GDN intra-chunk kernels (gdn_intra.cu): chunk lookup, tile loads and stores, the
// Gram matrix K K^T of a chunk, the kkt entry, and the unit-lower-triangular inverse.
//
// Bit identity contract (include/fuseops/gdn.h): the fused op must give the same bytes as kkt (into f32) followed by
// solve_tril. Both paths therefore go through the SAME routines here, with every rounding step spelled out
// (__fmaf_rn / __fmul_rn / __fsub_rn / mma.sync, never a contractible a * b + c), so the compiler cannot evaluate them
// differently in the two kernels:
//   Gram<TK, BT>::compute        -> fp32 <k_i, k_j> in registers      (kkt kernel and fused kernel)
//   Gram<TK, BT>::kkt_tile       -> fp32 A tile in smem via kkt_entry (kkt stores it, exactly for an f32 A; fused
//                                                                      keeps it)
//   load_a_tile                  -> the same fp32 tile               (solve_tril reading that f32 A: exact)
//   invert_unit_lower<BT, kTc>   -> (I + A)^{-1} in place            (solve_tril and fused; kTc =
//                                                                      tensor_core_inverse(output dtype) in both)
//   store_tile_rows              -> rounding to the output dtype     (all three)
// All sums run in a fixed order that depends only on the chunk's own data (a sequence packed in a varlen batch gets
// the same bytes as alone): no atomics, no split reductions, no TF32 rounding of data (the tensor-core inverse of
// 16-bit outputs uses tf32 only in the error-compensated hi + lo split, ~fp32 accurate).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "common/gdn_chunks.h"
#include "cuda/device_error.cuh"
#include "cuda/mma.cuh"
#include "cuda/vec.cuh"
#include "ops/gdn_impl.h"

namespace fuseops::detail::cuda::gdn {

constexpr int kThreads = 256;  ///< every GDN kernel runs 256-thread blocks
constexpr int kWarps = kThreads / 32;

// ---------------------------------------------------------------------------------------------------------------
// fp32 tiles in shared memory

/// Row stride (floats) of a BT x BT fp32 tile. BT + 4 is 4 (mod 8) words, so 8 consecutive rows read as float4 (one
/// shared-memory phase) hit 8 distinct bank quads, and every row starts 16-byte aligned.
template <int BT>
constexpr int kTileLd = BT + 4;
template <int BT>
constexpr int kTileFloats = BT * kTileLd<BT>;
/// Scratch of the block merges of invert_unit_lower: the product P of the largest merge level, H x (H + 4) floats
/// with H = BT / 2 (BT = 64: 32 x 36; BT = 32: 16 x 20; BT = 16: none).
template <int BT>
constexpr int kScratchFloats = BT >= 32 ? (BT / 2) * (BT / 2 + 4) : 0;

// ---------------------------------------------------------------------------------------------------------------
// Chunks

/// One chunk of one sequence: batch row, first token, number of valid rows (0: the slot holds no chunk).
struct ChunkRef {
  int64_t batch;
  int64_t t0;
  int len;
};

/// The last n in [0, N] with cu_seqlens[n] <= p, found by one whole warp. Each round probes 32 evenly spaced entries
/// of the current range and keeps the gap after the last probe that passed, so it needs ceil(log32(N + 1)) rounds
/// of loads (3 for N = 2050). cu must be non-decreasing for the answer to be exact; for a malformed cu it still
/// terminates with some n whose entry is <= p (or 0), and the caller checks the bounds.
__device__ __forceinline__ int64_t warp_find_sequence(const GdnGeometry& geo, int64_t p) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  int64_t lo = 0, hi = geo.N;  // invariant: the answer lies in [lo, hi] and cu[lo] <= p (or lo == 0)
  while (lo < hi) {            // lo and hi are warp-uniform
    const int64_t step = (hi - lo + 31) >> 5;
    const int64_t q = lo + (lane + 1) * step;
    const bool pass = q <= hi && load_cu(geo, q) <= p;
    const unsigned ballot = __ballot_sync(0xffffffffu, pass);
    const int first_fail = ballot == 0xffffffffu ? 32 : __ffs(~ballot) - 1;
    lo += first_fail * step;  // the last passing probe (unchanged when probe 0 failed)
    hi = min(hi, lo + step - 1);
  }
  return lo;
}

/// How the G value heads of a key head are dealt to blocks: one block per (chunk, key head) takes them all, unless
/// the `units` = chunks x key heads cannot fill `want` blocks; then each block takes heads_per_cta of them (the
/// parts = ceil(G / heads_per_cta) blocks of a (chunk, key head) each recompute what the heads share).
struct HeadSplit {
  int heads_per_cta;
  int parts;
};
inline HeadSplit split_value_heads(int64_t units, int64_t group, int64_t want) {
  int64_t parts = 1;
  if (group > 1 && units < want) parts = std::min(group, (want + units - 1) / units);
  const int64_t per = (group + parts - 1) / parts;
  return {static_cast<int>(per), static_cast<int>((group + per - 1) / per)};
}

/// Number of chunk slots resolve_chunk() maps: fixed length B * ceil(T / BT) (exactly the chunks); varlen
/// N + ceil(T / BT) (an upper bound; fits in int64 for validated arguments, see gdn_chunk_slots).
inline int64_t chunk_slots(const GdnGeometry& geo) {
  const int64_t per_row = chunks_of(geo.T, geo.BT);
  return geo.cu_seqlens ? geo.N + per_row : geo.B * per_row;
}

/// Maps chunk slot `slot` (0 <= slot < chunk_slots(geo)) to its chunk. Called by all 32 lanes of one warp.
///
/// Fixed length: slot = b * NT + c, NT = ceil(T / BT).
/// Varlen (B = 1), with no prefix sum over the sequences: slot n < N is chunk 0 of sequence n; slot N + s is the chunk
/// c >= 1 whose previous chunk contains token p = s * BT, i.e. c = (p - bos) / BT + 1 for the sequence [bos, eos)
/// holding p, when that chunk starts before eos. Every chunk c >= 1 has exactly one such p (the one multiple of BT in
/// [bos + (c - 1) * BT, bos + c * BT)), so the N + ceil(T / BT) slots cover every chunk exactly once;
/// the rest hold none. Lookup cost: O(1) or one warp_find_sequence.
/// Malformed cu_seqlens: bounds come from sequence_bounds() (clamped); the bad sequence n is recorded once, by the
/// slot n and only when `record` is set.
template <int BT>
__device__ ChunkRef resolve_chunk(const GdnGeometry& geo, int64_t slot, DeviceErrorRecord* errors, bool record) {
  const ChunkRef none{0, 0, 0};
  if (!geo.cu_seqlens) {
    const int64_t nt = (geo.T + BT - 1) / BT;
    // 32-bit division when it fits (inline code; a 64-bit one is a subroutine call)
    const int64_t b = ((slot | nt) >> 31) != 0
                          ? slot / nt
                          : static_cast<int64_t>(static_cast<uint32_t>(slot) / static_cast<uint32_t>(nt));
    const int64_t t0 = (slot - b * nt) * BT;
    if (b >= geo.B) return none;
    return ChunkRef{b, t0, static_cast<int>(min(static_cast<int64_t>(BT), geo.T - t0))};
  }
  if (slot < geo.N) {
    const SeqBounds sb = sequence_bounds(geo, slot);
    if (sb.bad && record && (threadIdx.x & 31) == 0) record_device_error(errors, geo.cu_site, slot);
    if (sb.eos <= sb.bos) return none;
    return ChunkRef{0, sb.bos, static_cast<int>(min(static_cast<int64_t>(BT), sb.eos - sb.bos))};
  }
  const int64_t p = (slot - geo.N) * BT;
  if (p >= geo.T) return none;
  const int64_t n = warp_find_sequence(geo, p);
  if (n >= geo.N) return none;
  const SeqBounds sb = sequence_bounds(geo, n);
  if (p < sb.bos || p >= sb.eos) return none;
  const int64_t t0 = sb.bos + ((p - sb.bos) / BT + 1) * BT;
  if (t0 >= sb.eos) return none;
  return ChunkRef{0, t0, static_cast<int>(min(static_cast<int64_t>(BT), sb.eos - t0))};
}

// ---------------------------------------------------------------------------------------------------------------
// Loads and stores

/// Padding granule of K in the k tile: the Gram reads whole 16-element steps (mma) or 4-element steps (FFMA).
template <typename TK>
__host__ __device__ constexpr int k_step() {
  return sizeof(TK) == 2 ? 16 : 4;
}
/// Row stride (elements) of the k tile holding kp (padded K) columns: 4 (mod 8) 32-bit words, so the 8 rows that
/// one mma fragment load (16-bit) or one float4 phase (f32) touches hit distinct banks.
template <typename TK>
__host__ __device__ constexpr int k_tile_ld(int kp) {
  return sizeof(TK) == 2 ? kp + 8 : (kp % 8 == 0 ? kp + 4 : kp);
}

/// k rows of the chunk (key head hk) -> ks[BT][ld] in the input dtype; rows >= len and columns in [K, kp) are zero.
/// `vec`: K, the base and the strides allow 16-byte copies (then cp.async, no register staging: the copies are only
/// issued here, the caller waits with cp_async_wait_all() before its barrier, so other loads can overlap them).
/// `row_shift`: log2 of the 16-byte units per row (kp / (16 / sizeof(TK))) when that is a power of two (K = 64, 128,
/// 256: each thread then copies one fixed column of rows kThreads >> row_shift apart, with a pointer increment per
/// row), else -1 (the general walk over units).
template <typename TK, int BT>
__device__ void load_k_tile(TK* ks, int ld, int kp, const GdnIn& k, int64_t K, const ChunkRef& ch, int64_t hk,
                            bool vec, int row_shift) {
  const TK* src = static_cast<const TK*>(k.data) + ch.batch * k.stride_b + ch.t0 * k.stride_t + hk * k.stride_h;
  constexpr int kVec = 16 / sizeof(TK);
  if (vec && row_shift >= 0) {
    const int t = static_cast<int>(threadIdx.x), di = kThreads >> row_shift;
    const int col = (t & ((1 << row_shift) - 1)) * kVec;
    const bool col_ok = col < K;
    int i = t >> row_shift;
    const TK* p = src + i * k.stride_t + col;
    const int64_t step = di * k.stride_t;
    TK* d = ks + i * ld + col;
    for (; i < BT; i += di, p += step, d += di * ld) {
      const bool valid = col_ok && i < ch.len;
      cp_async_16(d, valid ? p : src, valid);
    }
  } else if (vec) {
    const int per_row = kp / kVec;  // <= 64 < kThreads
    // unit u = i * per_row + c of thread t: t, t + kThreads, ...; (i, c) advanced without a division per unit
    int i = static_cast<int>(threadIdx.x) / per_row, c = static_cast<int>(threadIdx.x) - i * per_row;
    const int di = kThreads / per_row, dc = kThreads - di * per_row;
    for (; i < BT; i += di) {
      const int col = c * kVec;
      const bool valid = i < ch.len && col < K;
      cp_async_16(ks + i * ld + col, valid ? src + i * k.stride_t + col : src, valid);
      c += dc;
      if (c >= per_row) c -= per_row, ++i;
    }
  } else {
#pragma unroll 1
    for (int u = threadIdx.x; u < BT * kp; u += kThreads) {
      const int i = u / kp, col = u - i * kp;
      ks[i * ld + col] = (i < ch.len && col < K) ? src[i * k.stride_t + col] : from_float<TK>(0.f);
    }
  }
}

/// load_k_tile's row_shift for kp padded columns of TK: log2(kp / (16 / sizeof(TK))) when a power of two, else -1.
template <typename TK>
inline int k_tile_row_shift(int kp) {
  const int per_row = kp / (16 / static_cast<int>(sizeof(TK)));
  if (per_row <= 0 || (per_row & (per_row - 1)) != 0 || per_row > kThreads) return -1;
  int shift = 0;
  while ((1 << shift) < per_row) ++shift;
  return shift;
}

/// Thread t < 2 * BT of the block: g of chunk row t (t < BT; 0 when g is absent) or beta of row t - BT (1 when
/// absent), value head hv. Rows past the chunk give 0 / 1 (they are never used: kkt_entry selects them away).
template <int BT>
__device__ float load_gate_or_beta(const KktArgs& a, const ChunkRef& ch, int64_t hv, int t) {
  if (t < BT) {
    if (!a.g.data || t >= ch.len) return 0.f;
    const int64_t off = ch.batch * a.g.stride_b + (ch.t0 + t) * a.g.stride_t + hv * a.g.stride_h;
    return static_cast<const float*>(a.g.data)[off];
  }
  const int i = t - BT;
  if (!a.beta.data || i >= ch.len) return 1.f;
  const int64_t off = ch.batch * a.beta.stride_b + (ch.t0 + i) * a.beta.stride_t + hv * a.beta.stride_h;
  switch (a.beta.dtype) {
    case DType::f16: return __half2float(static_cast<const __half*>(a.beta.data)[off]);
    case DType::bf16: return __bfloat162float(static_cast<const __nv_bfloat16*>(a.beta.data)[off]);
    default: return static_cast<const float*>(a.beta.data)[off];
  }
}

/// A rows of the chunk (value head hv, dtype TA) -> the fp32 tile: the strictly lower entries of the valid rows
/// (j < i < len) converted exactly as loaded, exact 0 everywhere else. Chunks of 16 bytes wholly on or above the
/// diagonal are not read at all; `vec`: the base and the strides allow 16-byte loads.
template <typename TA, int BT>
__device__ void load_a_tile_as(float* tile, const GdnIn& A, const ChunkRef& ch, int64_t hv, bool vec) {
  constexpr int LD = kTileLd<BT>;
  const TA* src = static_cast<const TA*>(A.data) + ch.batch * A.stride_b + ch.t0 * A.stride_t + hv * A.stride_h;
  if (vec) {
    constexpr int kVec = 16 / sizeof(TA), kPerRow = BT / kVec, kChunks = BT * kPerRow;
#pragma unroll
    for (int u0 = 0; u0 < kChunks; u0 += kThreads) {
      const int u = u0 + static_cast<int>(threadIdx.x);
      if (kChunks % kThreads == 0 || u < kChunks) {
        const int i = u / kPerRow, j = (u % kPerRow) * kVec;
        FloatVec<TA, kVec> v;
        if (i < ch.len && j < i) {
          v.load(src + i * A.stride_t + j);
        } else {
#pragma unroll
          for (int e = 0; e < kVec; ++e) v.v[e] = 0.f;
        }
#pragma unroll
        for (int q = 0; q < kVec / 4; ++q) {
          float4 f;
          f.x = j + 4 * q + 0 < i ? v.v[4 * q + 0] : 0.f;
          f.y = j + 4 * q + 1 < i ? v.v[4 * q + 1] : 0.f;
          f.z = j + 4 * q + 2 < i ? v.v[4 * q + 2] : 0.f;
          f.w = j + 4 * q + 3 < i ? v.v[4 * q + 3] : 0.f;
          *reinterpret_cast<float4*>(tile + i * LD + j + 4 * q) = f;
        }
      }
    }
  } else {
#pragma unroll 1
    for (int u = threadIdx.x; u < BT * BT; u += kThreads) {
      const int i = u / BT, j = u % BT;
      tile[i * LD + j] = (i < ch.len && j < i) ? to_float(src[i * A.stride_t + j]) : 0.f;
    }
  }
}

template <int BT>
__device__ void load_a_tile(float* tile, const GdnIn& A, const ChunkRef& ch, int64_t hv, bool vec) {
  switch (A.dtype) {
    case DType::f16: load_a_tile_as<__half, BT>(tile, A, ch, hv, vec); break;
    case DType::bf16: load_a_tile_as<__nv_bfloat16, BT>(tile, A, ch, hv, vec); break;
    default: load_a_tile_as<float, BT>(tile, A, ch, hv, vec); break;
  }
}

/// The valid rows (i < len) of the fp32 tile -> out rows t0 + i of value head hv, all BT columns, rounded once to
/// TO (round to nearest even). Rows past the chunk are never written. `vec`: 16-byte stores (out is contiguous;
/// only its base alignment matters). NT: the threads that share the stores, threadIdx.x % NT of them. kZeroUpper:
/// 16 x 16 blocks above the diagonal blocks are stored as 0 without reading the tile (whose bytes there may hold
/// scratch: invert_unit_lower_warp); for 16-bit TO with `vec` only.
template <typename TO, int BT, int NT = kThreads, bool kZeroUpper = false>
__device__ void store_rows_as(const float* tile, const GdnOut& out, const ChunkRef& ch, int64_t hv, bool vec) {
  static_assert(!kZeroUpper || sizeof(TO) == 2, "kZeroUpper: 16-bit output, 8-column pieces");
  constexpr int LD = kTileLd<BT>;
  TO* dst = static_cast<TO*>(out.data) + ch.batch * out.stride_b + ch.t0 * out.stride_t + hv * out.stride_h;
  if (vec) {
    constexpr int kVec = 16 / sizeof(TO), kPerRow = BT / kVec, kChunks = BT * kPerRow;
#pragma unroll
    for (int u0 = 0; u0 < kChunks; u0 += NT) {
      const int u = u0 + static_cast<int>(threadIdx.x % NT);
      const int i = u / kPerRow, j = (u % kPerRow) * kVec;
      if ((kChunks % NT == 0 || u < kChunks) && i < ch.len) {
        FloatVec<TO, kVec> v;
        const bool zero = kZeroUpper && j / 16 > i / 16;
#pragma unroll
        for (int q = 0; q < kVec / 4; ++q) {
          const float4 f = zero ? make_float4(0.f, 0.f, 0.f, 0.f)
                                : *reinterpret_cast<const float4*>(tile + i * LD + j + 4 * q);
          v.v[4 * q + 0] = f.x;
          v.v[4 * q + 1] = f.y;
          v.v[4 * q + 2] = f.z;
          v.v[4 * q + 3] = f.w;
        }
        v.store_whole(dst + i * out.stride_t + j);  // one 16-byte store (store() was split into four)
      }
    }
  } else {
#pragma unroll 1
    for (int u = static_cast<int>(threadIdx.x % NT); u < ch.len * BT; u += NT) {
      const int i = u / BT, j = u % BT;
      dst[i * out.stride_t + j] = from_float<TO>(tile[i * LD + j]);
    }
  }
}

template <int BT>
__device__ void store_tile_rows(const float* tile, const GdnOut& out, const ChunkRef& ch, int64_t hv, bool vec) {
  switch (out.dtype) {
    case DType::f16: store_rows_as<__half, BT>(tile, out, ch, hv, vec); break;
    case DType::bf16: store_rows_as<__nv_bfloat16, BT>(tile, out, ch, hv, vec); break;
    default: store_rows_as<float, BT>(tile, out, ch, hv, vec); break;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The kkt matrix A of one chunk, fp32, built in registers: Gram<TK, BT>::compute() forms G[i][j] = <k_i, k_j> (the
// BT x BT matrix spread over the block, each element owned by one thread), kkt_tile() turns each owned element into
// the kkt entry and writes the whole fp32 A tile to shared memory. The Gram stays in registers across a key head's
// value heads, so no Gram tile lives in shared memory.

/// log2(e) rounded to fp32.
constexpr float kLog2e = 1.44269504088896340736f;

/// e^d of a kkt entry, for the rounded difference d = g_i - g_j: ex2.approx.ftz of the rounded d * log2(e) (one FMUL
/// and MUFU.EX2 instead of IEEE expf's range reduction). A result below 2^-126 is 0: exp2f gives the same bits above
/// that and a subnormal below it, at three more instructions per entry (its range fix). Forming the difference first
/// makes the exponent err by ~2^-23 |d| as expf's does, not by 2^-24 (|g_i| + |g_j|), which strongly decayed chunks
/// with |g| in the thousands would turn into a relative error of ~1e-3; ex2.approx's <= 2 ulp is inside the kkt
/// budget of docs/ops/gdn.md "Tolerances".
__device__ __forceinline__ float kkt_exp(float d) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(__fmul_rn(d, kLog2e)));
  return e;
}

/// A[i][j] of one chunk from the Gram entry <k_i, k_j>: (gram * e^(g_i - g_j)) * beta_i for j < i < len, exactly 0
/// elsewhere (a select, computed without a branch: e^(g_i - g_j) may be inf above the diagonal, and the select drops
/// it), e^(g_i - g_j) by kkt_exp. Absent g / beta arrive as 0 / 1, which makes their factor exactly 1. THE definition
/// of a kkt entry: the kkt kernel stores it, the fused kernels invert it.
__device__ __forceinline__ float kkt_entry(float gram, int i, int j, int len, float g_i, float g_j, float beta_i) {
  const float a = __fmul_rn(__fmul_rn(gram, kkt_exp(__fsub_rn(g_i, g_j))), beta_i);
  return j < i && i < len ? a : 0.f;
}

/// f16 / bf16: tensor cores. The matrix is cut into 16 x 8 tiles (BT / 16 row blocks x BT / 8 column tiles); warp w
/// owns kTilesPerWarp consecutive tiles of one row block. Tiles with no entry below the diagonal or inside the chunk
/// are not computed (their kkt entries are 0 whatever the Gram).
template <typename TK, int BT>
struct GramMma {
  static constexpr int kColBlocks = BT / 8;
  static constexpr int kTiles = (BT / 16) * kColBlocks;
  static constexpr int kTilesPerWarp = kTiles >= kWarps ? kTiles / kWarps : 1;
  static_assert(kTilesPerWarp == 1 || kTilesPerWarp % 2 == 0, "B fragments are loaded two tiles at a time");

  float v[kTilesPerWarp][4];  ///< mma accumulator fragments: v[tile][c] (c: 0 1 -> row r, 2 3 -> row r + 8)
  int row;                    ///< this thread's first row (the second is row + 8)
  int col;                    ///< this thread's first column in the warp's first tile (the second is col + 1)
  int row_base, col_base;     ///< the warp's row block and its first tile's first column
  bool active;                ///< false: this warp owns no tile (BT = 16)

  /// Whether tile t of this warp holds an entry j < i < len, i.e. its first column is below both len and the row
  /// block's last row (warp-uniform). A warp whose first tile is not needed skips the Gram.
  __device__ __forceinline__ bool needed(int t, int len) const {
    const int c = col_base + 8 * t;
    return c < len && c < row_base + 16;
  }

  /// ks: the k tile [BT][ld] (16-bit), kp (multiple of 16) columns, zero past K and past the chunk.
  /// kAllTiles: a warp with any tile needed multiplies all its tiles (no predicated mma.sync, which costs a WARPSYNC
  /// each: fewer issued instructions, more tensor work; the products of tiles not needed are finite, the k tile being
  /// zero-filled, and never read). Measured faster for the multi-wave kkt kernel, slower for the one-wave one. The
  /// tiles that are read get the same bits either way.
  template <bool kAllTiles = false>
  __device__ void compute(const TK* ks, int ld, int kp, int len) {
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
    const int first = warp * kTilesPerWarp;
    active = first < kTiles;
    row_base = (first / kColBlocks) * 16;
    col_base = (first % kColBlocks) * 8;
    row = row_base + lane / 4;
    col = col_base + 2 * (lane % 4);
#pragma unroll
    for (int t = 0; t < kTilesPerWarp; ++t) v[t][0] = v[t][1] = v[t][2] = v[t][3] = 0.f;
    if (!active || row_base >= len || !needed(0, len)) return;  // warps whose tiles are all 0 load nothing
    // ldmatrix addresses. A (16 x 16 row-major): matrices rows 0-7 / 8-15 at K offset 0, then the same at 8.
    // B (16 x 8 "col", i.e. the column tokens' k rows): per tile its 8 tokens at K offset 0, then at 8.
    const TK* a_ptr = ks + (row_base + lane % 16) * ld + (lane / 16) * 8;
    const TK* b_ptr = kTilesPerWarp == 1 ? ks + (col_base + lane % 8) * ld + ((lane / 8) & 1) * 8
                                         : ks + (col_base + (lane / 16) * 8 + lane % 8) * ld + ((lane / 8) & 1) * 8;
#pragma unroll 2
    for (int kk = 0; kk < kp; kk += 16) {  // ascending over K
      uint32_t a[4];
      ldmatrix_x4(a, a_ptr + kk);
      if constexpr (kTilesPerWarp == 1) {
        uint32_t b0, b1;
        ldmatrix_x2(b0, b1, b_ptr + kk);
        if (kAllTiles || needed(0, len)) mma_m16n8k16<TK>(v[0], a, b0, b1);
      } else {
#pragma unroll
        for (int t = 0; t < kTilesPerWarp; t += 2) {
          uint32_t b[4];
          ldmatrix_x4(b, b_ptr + t * 8 * ld + kk);
          if (kAllTiles || needed(t, len)) mma_m16n8k16<TK>(v[t], a, b[0], b[1]);
          if (kAllTiles || needed(t + 1, len)) mma_m16n8k16<TK>(v[t + 1], a, b[2], b[3]);
        }
      }
    }
  }

  /// tile[BT][kTileLd<BT>] := the kkt matrix; gate_beta: g[0..BT) then beta[0..BT) of the chunk's rows.
  __device__ void kkt_tile(const float* gate_beta, int len, float* tile) const {
    if (!active) return;
    const float g0 = gate_beta[row], g1 = gate_beta[row + 8];
    const float b0 = gate_beta[BT + row], b1 = gate_beta[BT + row + 8];
#pragma unroll
    for (int t = 0; t < kTilesPerWarp; ++t) {
      const int c = col + 8 * t;
      float* p = tile + row * kTileLd<BT> + c;
      if (!needed(t, len)) {  // all 0 (warp-uniform): no exp
        *reinterpret_cast<float2*>(p) = make_float2(0.f, 0.f);
        *reinterpret_cast<float2*>(p + 8 * kTileLd<BT>) = make_float2(0.f, 0.f);
        continue;
      }
      const float gc0 = gate_beta[c], gc1 = gate_beta[c + 1];
      *reinterpret_cast<float2*>(p) =
          make_float2(kkt_entry(v[t][0], row, c, len, g0, gc0, b0), kkt_entry(v[t][1], row, c + 1, len, g0, gc1, b0));
      *reinterpret_cast<float2*>(p + 8 * kTileLd<BT>) = make_float2(
          kkt_entry(v[t][2], row + 8, c, len, g1, gc0, b1), kkt_entry(v[t][3], row + 8, c + 1, len, g1, gc1, b1));
    }
  }
};

/// f32: FFMA (no TF32), each thread an R x R block of elements (R = BT / 16) at rows tid % 16 + 16 a and columns
/// tid / 16 + 16 b, summed over K in ascending order with one rounding per step.
template <int BT>
struct GramFfma {
  static constexpr int R = BT / 16;
  float v[R][R];

  /// ks: the k tile [BT][ld] (f32), kp (multiple of 4) columns, zero past K and past the chunk. (Computes all
  /// rows; `len` and kAllTiles are for the interface of GramMma.)
  template <bool kAllTiles = false>
  __device__ void compute(const float* ks, int ld, int kp, int /*len*/) {
    const int ti = static_cast<int>(threadIdx.x % 16), tj = static_cast<int>(threadIdx.x / 16);
#pragma unroll
    for (int a = 0; a < R; ++a) {
#pragma unroll
      for (int b = 0; b < R; ++b) v[a][b] = 0.f;
    }
    for (int kk = 0; kk < kp; kk += 4) {
      float4 x[R], y[R];
#pragma unroll
      for (int a = 0; a < R; ++a) x[a] = *reinterpret_cast<const float4*>(ks + (ti + 16 * a) * ld + kk);
#pragma unroll
      for (int b = 0; b < R; ++b) y[b] = *reinterpret_cast<const float4*>(ks + (tj + 16 * b) * ld + kk);
#pragma unroll
      for (int a = 0; a < R; ++a) {
#pragma unroll
        for (int b = 0; b < R; ++b) {
          float s = v[a][b];
          s = __fmaf_rn(x[a].x, y[b].x, s);
          s = __fmaf_rn(x[a].y, y[b].y, s);
          s = __fmaf_rn(x[a].z, y[b].z, s);
          s = __fmaf_rn(x[a].w, y[b].w, s);
          v[a][b] = s;
        }
      }
    }
  }

  /// tile[BT][kTileLd<BT>] := the kkt matrix; gate_beta: g[0..BT) then beta[0..BT) of the chunk's rows.
  __device__ void kkt_tile(const float* gate_beta, int len, float* tile) const {
    const int ti = static_cast<int>(threadIdx.x % 16), tj = static_cast<int>(threadIdx.x / 16);
#pragma unroll
    for (int a = 0; a < R; ++a) {
      const int i = ti + 16 * a;
#pragma unroll
      for (int b = 0; b < R; ++b) {
        const int j = tj + 16 * b;
        tile[i * kTileLd<BT> + j] = kkt_entry(v[a][b], i, j, len, gate_beta[i], gate_beta[j], gate_beta[BT + i]);
      }
    }
  }
};

template <typename TK, int BT>
using Gram = std::conditional_t<sizeof(TK) == 2, GramMma<TK, BT>, GramFfma<BT>>;

// ---------------------------------------------------------------------------------------------------------------
// (I + A)^{-1} of a strictly lower triangular fp32 tile, in place
//
// Block algorithm on 16 x 16 blocks in a fixed order; FFMA here (f32 outputs: 1 + 2 log2(BT / 16) barriers), the
// merges on tensor cores further below (f16 / bf16 outputs: 1 barrier at BT = 32, 3 at BT = 64):
//  1. each diagonal block D = I + A_dd is inverted by forward substitution, one thread per column;
//  2. merges of 2 x 2 block lower triangles, h = 16 then 32: for L = [[L11, 0], [A21, L22]] with X11 = L11^{-1} and
//     X22 = L22^{-1} known, L^{-1} = [[X11, 0], [X21, X22]] with X21 = -X22 (A21 X11).
// The tile must hold A below the diagonal and exact zeros on and above it, and zero rows from `len` on
// (Gram::kkt_tile / load_a_tile guarantee it). On return rows [0, len) of the tile hold the inverse: X below the
// diagonal, 1 on it, 0 above (also in columns >= len). Rows >= len are never stored, so the work that only feeds
// them is skipped (a short chunk costs less): diagonal blocks starting at or past len, and merges whose lower half
// starts at or past len. A row < len only ever reads rows < len, so the skips do not change its value. Ends with a
// barrier.

/// Step 1 for one column c of the diagonal block whose top-left corner is blk (row stride LD):
///   x[i] = [i == c] - sum_{m < i} blk[i][m] x[m]  (i = 0..15; x[m] = 0 for m < c)
/// keeping the column in registers (rows read as float4; the threads of one block share addresses: broadcast).
template <int LD>
__device__ __forceinline__ void solve_diagonal_column(const float* blk, int c, float (&x)[16]) {
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    float row[16];
#pragma unroll
    for (int q = 0; q < (i + 3) / 4; ++q) {
      const float4 f = *reinterpret_cast<const float4*>(blk + i * LD + 4 * q);
      row[4 * q + 0] = f.x;
      row[4 * q + 1] = f.y;
      row[4 * q + 2] = f.z;
      row[4 * q + 3] = f.w;
    }
    float s = 0.f;
#pragma unroll
    for (int m = 0; m < i; ++m) s = __fmaf_rn(row[m], x[m], s);
    x[i] = i < c ? 0.f : (i == c ? 1.f : -s);
  }
}

/// Step 1. Thread t < BT solves column c = t % 16 of diagonal block t / 16 (solve_diagonal_column). The 16 threads of
/// one block are in one warp, so a warp barrier separates their reads of A from their writes.
template <int BT, bool kBarrier = true>
__device__ void invert_diagonal_blocks(float* a, int len) {
  constexpr int LD = kTileLd<BT>;
  const int t = static_cast<int>(threadIdx.x);
  if (t < BT) {
    float* blk = a + (t / 16) * 16 * (LD + 1);  // top-left corner of the diagonal block
    const int c = t % 16;
    const bool needed = (t / 16) * 16 < len;  // uniform over the block's 16 threads
    float x[16];
    if (needed) solve_diagonal_column<LD>(blk, c, x);
    __syncwarp(BT >= 32 ? 0xffffffffu : 0x0000ffffu);
    if (needed) {
#pragma unroll
      for (int i = 0; i < 16; ++i) blk[i * LD + c] = x[i];
    }
  }
  if constexpr (kBarrier) __syncthreads();
}

template <int E>
__device__ __forceinline__ void load_floats(const float* p, float (&x)[E]) {
  if constexpr (E == 4) {
    const float4 f = *reinterpret_cast<const float4*>(p);
    x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
  } else if constexpr (E == 2) {
    const float2 f = *reinterpret_cast<const float2*>(p);
    x[0] = f.x, x[1] = f.y;
  } else {
    x[0] = p[0];
  }
}

template <int E>
__device__ __forceinline__ void store_floats(float* p, const float (&x)[E]) {
  if constexpr (E == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
  } else if constexpr (E == 2) {
    *reinterpret_cast<float2*>(p) = make_float2(x[0], x[1]);
  } else {
    p[0] = x[0];
  }
}

/// Step 2 at block size H: every pair of H x H diagonal blocks starting at base = pair * 2H. Two phases of
/// E = pairs * H * H / 256 elements per thread, each sum over m ascending:
///   phase 1: P[r][c] = sum_m A21[r][m] X11[m][c]     lanes over rows r, E consecutive columns per thread; X11 is
///            lower triangular, so m starts at the float4 step holding the thread's first column (warp-uniform);
///   phase 2: X21[r][c] = -sum_m X22[r][m] P[m][c]    lanes over columns c, E consecutive rows per thread; X22 is
///            lower triangular, so m stops after the float4 step holding the thread's last row (warp-uniform).
/// X21 overwrites A21 (not read again: later levels read other off-diagonal blocks of A). A pair whose lower half
/// starts at or past len is skipped, and the whole level (barriers included: len is block-uniform) when pair 0 is.
template <int BT, int H>
__device__ void merge_level(float* a, float* p, int len) {
  if (H >= len) return;
  constexpr int LD = kTileLd<BT>, PLD = H + 4;
  constexpr int kPairs = BT / (2 * H);
  constexpr int E = kPairs * H * H / kThreads;  // BT 64: 2 (H 16), 4 (H 32); BT 32: 1
  constexpr int kGroups = H / E;                // column / row groups of E per pair
  static_assert(E >= 1 && kPairs * kGroups * H == kThreads, "merge mapping covers each element once");
  const int t = static_cast<int>(threadIdx.x);
  {
    const int r = t % H, q = t / H, pair = q / kGroups, c0 = (q % kGroups) * E, base = pair * 2 * H;
    const bool needed = base + H < len;
    const float* lhs = a + (base + H + r) * LD + base;  // A21 row r
    const float* rhs = a + base * LD + base + c0;       // X11, columns c0 .. c0 + E - 1
    float acc[E];
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = 0.f;
    for (int m = needed ? c0 & ~3 : H; m < H; m += 4) {
      const float4 l = *reinterpret_cast<const float4*>(lhs + m);
      const float lv[4] = {l.x, l.y, l.z, l.w};
#pragma unroll
      for (int mm = 0; mm < 4; ++mm) {
        float x[E];
        load_floats<E>(rhs + (m + mm) * LD, x);
#pragma unroll
        for (int e = 0; e < E; ++e) acc[e] = __fmaf_rn(lv[mm], x[e], acc[e]);
      }
    }
    if (needed) store_floats<E>(p + (pair * H + r) * PLD + c0, acc);
  }
  __syncthreads();
  {
    const int c = t % H, q = t / H, pair = q / kGroups, r0 = (q % kGroups) * E, base = pair * 2 * H;
    const bool needed = base + H < len;
    const float* x22 = a + (base + H + r0) * LD + base + H;  // X22 rows r0 .. r0 + E - 1
    const float* pc = p + pair * H * PLD + c;                // P column c
    float acc[E];
#pragma unroll
    for (int e = 0; e < E; ++e) acc[e] = 0.f;
    const int m_end = needed ? ((r0 + E - 1) | 3) + 1 : 0;
    for (int m = 0; m < m_end; m += 4) {
      const float pv[4] = {pc[(m + 0) * PLD], pc[(m + 1) * PLD], pc[(m + 2) * PLD], pc[(m + 3) * PLD]};
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float4 l = *reinterpret_cast<const float4*>(x22 + e * LD + m);
        float s = acc[e];
        s = __fmaf_rn(l.x, pv[0], s);
        s = __fmaf_rn(l.y, pv[1], s);
        s = __fmaf_rn(l.z, pv[2], s);
        s = __fmaf_rn(l.w, pv[3], s);
        acc[e] = s;
      }
    }
    if (needed) {
#pragma unroll
      for (int e = 0; e < E; ++e) a[(base + H + r0 + e) * LD + base + c] = -acc[e];
    }
  }
  __syncthreads();
}

// ---------------------------------------------------------------------------------------------------------------
// Tensor-core block merges (f16 / bf16 outputs)
//
// The same block algorithm as merge_level, with each product of the merges on mma.m16n8k8 tf32 in the
// error-compensated split form (mma_m16n8k8_split: x = hi + lo, three products, fp32 accumulation; <= 3 * 2^-22
// relative error per term, docs/ops/gdn.md "Numerics"). Order of the products: P = A21 X11, then X21 = -X22 P.
// Each warp owns one 16 x 8 output tile of a product; P goes through the scratch transposed (P^T, row stride
// H + 4), so the second product loads it with ldmatrix like the A operands.
//  - level 16: warp w merges pair w (diagonal blocks 2w, 2w + 1), which is exactly what warp w inverted in step 1;
//    so step 1 and level 16 need only warp barriers, and one block barrier ends both.
//  - level 32 (BT = 64): 8 warps, warp (rb, nt) = (w / 4, w % 4) owns rows 16 rb .. and columns 8 nt .. of P and
//    of X21; a block barrier between the products and one at the end.
// Same skips as merge_level (pairs whose lower half starts at or past len; here also row blocks of X21 starting at
// or past len, whose P rows are then never read). Fixed order, no atomics: bitwise reproducible.

/// The A operand (16 x 8) of an mma at m (fp32, row stride ld, 16-byte aligned rows), split. ldmatrix of 32-bit data:
/// lane l receives word l % 4 of row l / 4 of each 8 x 4 fp32 block, which is the tf32 A fragment when the four
/// blocks are rows 0-7 / 8-15 at columns 0-3, then the same at columns 4-7.
__device__ __forceinline__ void load_a_split(const float* m, int ld, uint32_t (&hi)[4], uint32_t (&lo)[4]) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  uint32_t r[4];
  ldmatrix_x4(r, m + (lane % 8 + 8 * ((lane / 8) & 1)) * ld + 4 * (lane / 16));
#pragma unroll
  for (int e = 0; e < 4; ++e) split_tf32(__uint_as_float(r[e]), hi[e], lo[e]);
}

/// The B operand (8 x 8, k x n) of an mma from a row-major [k][n] fp32 matrix at m (row stride ld), split.
__device__ __forceinline__ void load_b_split(const float* m, int ld, uint32_t (&hi)[2], uint32_t (&lo)[2]) {
  const int lane = static_cast<int>(threadIdx.x & 31), g = lane / 4, t = lane % 4;
  split_tf32(m[t * ld + g], hi[0], lo[0]);
  split_tf32(m[(t + 4) * ld + g], hi[1], lo[1]);
}

/// The B operands of two consecutive k steps (k 0-7, then 8-15; n 0-7) from a TRANSPOSED [n][k] fp32 matrix at mt
/// (row stride ld, 16-byte aligned rows), split: one ldmatrix_x4, blocks at k columns 0, 4, 8, 12.
__device__ __forceinline__ void load_bt2_split(const float* mt, int ld, uint32_t (&hi)[4], uint32_t (&lo)[4]) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  uint32_t r[4];
  ldmatrix_x4(r, mt + (lane % 8) * ld + 4 * (lane / 8));
#pragma unroll
  for (int e = 0; e < 4; ++e) split_tf32(__uint_as_float(r[e]), hi[e], lo[e]);
}

/// d (one 16 x 8 accumulator tile, rows r0.., columns c0..) -> pt[c][r] (transposed, row stride ld).
__device__ __forceinline__ void store_transposed(float* pt, int ld, const float (&d)[4]) {
  const int lane = static_cast<int>(threadIdx.x & 31), g = lane / 4, t = lane % 4;
  pt[(2 * t) * ld + g] = d[0];
  pt[(2 * t + 1) * ld + g] = d[1];
  pt[(2 * t) * ld + g + 8] = d[2];
  pt[(2 * t + 1) * ld + g + 8] = d[3];
}

/// -d (one 16 x 8 accumulator tile) -> m (row stride ld) at rows 0-15, columns 0-7.
__device__ __forceinline__ void store_negated(float* m, int ld, const float (&d)[4]) {
  const int lane = static_cast<int>(threadIdx.x & 31), g = lane / 4, t = lane % 4;
  *reinterpret_cast<float2*>(m + g * ld + 2 * t) = make_float2(-d[0], -d[1]);
  *reinterpret_cast<float2*>(m + (g + 8) * ld + 2 * t) = make_float2(-d[2], -d[3]);
}

/// Level 16 for NP pairs pair0 .. pair0 + NP - 1 (pair q: diagonal blocks 2 q and 2 q + 1), by one whole warp, the
/// pairs' steps interleaved (their chains are independent); warp barriers only. pt[q]: pair q's scratch for P^T (16
/// x 16, row stride PLD; its bytes are not read before they are written). A pair whose lower half starts at or past
/// len is skipped when `skip` (the block kernels: NP = 1); the warp kernel runs both pairs of a chunk always (a pair
/// past len only writes rows that are never stored and that no stored row reads). Each pair's products, in the same
/// order whatever NP: P = A21 X11 (columns 0-7 over k 0-15, columns 8-15 over k 8-15: X11 is lower triangular), then
/// X21 = -X22 P over k 0-15.
template <int BT, int PLD = 16 + 4, int NP = 1>
__device__ void merge16_tc(float* a, float* const (&pt)[NP], int len, int pair0, bool skip = true) {
  constexpr int LD = kTileLd<BT>;
  if (skip && pair0 * 32 + 16 >= len) return;  // warp-uniform (NP = 1)
  float p0[NP][4] = {}, p1[NP][4] = {};
#pragma unroll
  for (int q = 0; q < NP; ++q) {
    const int base = (pair0 + q) * 32;
    const float* x11 = a + base * LD + base;
    const float* a21 = a + (base + 16) * LD + base;
    uint32_t ah[4], al[4], bh[2], bl[2];
    load_a_split(a21, LD, ah, al);
    load_b_split(x11, LD, bh, bl);
    mma_m16n8k8_split(p0[q], ah, al, bh[0], bh[1], bl[0], bl[1]);
    load_a_split(a21 + 8, LD, ah, al);
    load_b_split(x11 + 8 * LD, LD, bh, bl);
    mma_m16n8k8_split(p0[q], ah, al, bh[0], bh[1], bl[0], bl[1]);
    load_b_split(x11 + 8 * LD + 8, LD, bh, bl);
    mma_m16n8k8_split(p1[q], ah, al, bh[0], bh[1], bl[0], bl[1]);
  }
#pragma unroll
  for (int q = 0; q < NP; ++q) {
    store_transposed(pt[q], PLD, p0[q]);
    store_transposed(pt[q] + 8 * PLD, PLD, p1[q]);
  }
  __syncwarp();  // P^T complete; every read of A21 is done (its values fed the mma above)
  float x0[NP][4] = {}, x1[NP][4] = {};
#pragma unroll
  for (int q = 0; q < NP; ++q) {
    const int base = (pair0 + q) * 32;
    const float* x22 = a + (base + 16) * LD + base + 16;
    uint32_t b0h[4], b0l[4], b1h[4], b1l[4], ah[4], al[4];
    load_bt2_split(pt[q], PLD, b0h, b0l);
    load_bt2_split(pt[q] + 8 * PLD, PLD, b1h, b1l);
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      load_a_split(x22 + 8 * s, LD, ah, al);
      mma_m16n8k8_split(x0[q], ah, al, b0h[2 * s], b0h[2 * s + 1], b0l[2 * s], b0l[2 * s + 1]);
      mma_m16n8k8_split(x1[q], ah, al, b1h[2 * s], b1h[2 * s + 1], b1l[2 * s], b1l[2 * s + 1]);
    }
  }
#pragma unroll
  for (int q = 0; q < NP; ++q) {
    float* a21 = a + ((pair0 + q) * 32 + 16) * LD + (pair0 + q) * 32;  // A21 -> X21
    store_negated(a21, LD, x0[q]);
    store_negated(a21 + 8, LD, x1[q]);
  }
}

/// Level 32 (BT = 64, one pair), all 8 warps; ends with a block barrier. Skipped whole when 32 >= len.
__device__ __forceinline__ void merge32_tc(float* a, float* p, int len) {
  constexpr int LD = kTileLd<64>, PLD = 32 + 4;
  if (32 >= len) return;  // block-uniform
  const int warp = static_cast<int>(threadIdx.x / 32), rb = warp / 4, nt = warp % 4;
  const bool needed = 32 + 16 * rb < len;  // warp-uniform
  float* a21 = a + (32 + 16 * rb) * LD;     // rows 16 rb .. of A21, then of X21
  if (needed) {
    // P[16 rb.., 8 nt..] = A21 X11: k from 8 nt (X11 is lower triangular)
    float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      if (s < nt) continue;
      uint32_t ah[4], al[4], bh[2], bl[2];
      load_a_split(a21 + 8 * s, LD, ah, al);
      load_b_split(a + (8 * s) * LD + 8 * nt, LD, bh, bl);
      mma_m16n8k8_split(d, ah, al, bh[0], bh[1], bl[0], bl[1]);
    }
    store_transposed(p + (8 * nt) * PLD + 16 * rb, PLD, d);
  }
  __syncthreads();
  if (needed) {
    // X21[16 rb.., 8 nt..] = -X22 P: k up to 16 rb + 15 (X22 is lower triangular); P rows of row blocks <= rb,
    // which were computed (needed) above
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    const float* x22 = a21 + 32;
#pragma unroll
    for (int s2 = 0; s2 < 2; ++s2) {  // pairs of k steps: k 16 s2 .. 16 s2 + 15
      if (s2 > rb) continue;
      uint32_t bh[4], bl[4];
      load_bt2_split(p + (8 * nt) * PLD + 16 * s2, PLD, bh, bl);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t ah[4], al[4];
        load_a_split(x22 + 16 * s2 + 8 * h, LD, ah, al);
        mma_m16n8k8_split(d, ah, al, bh[2 * h], bh[2 * h + 1], bl[2 * h], bl[2 * h + 1]);
      }
    }
    store_negated(a21 + 8 * nt, LD, d);
  }
  __syncthreads();
}

/// Which inverse a kernel runs, chosen by the OUTPUT dtype alone, so the fused kernel and solve_tril always agree:
/// 16-bit outputs take the tensor-core merges (their error, <= ~2^-19 relative per product, is far below the output
/// rounding and within the fp32 budget of the tolerances), f32 outputs the FFMA merges. Host side: it picks the
/// kernel variant (kTc) of both ops.
inline bool tensor_core_inverse(DType out) { return out != DType::f32; }

/// THE inverse: rows [0, len) of tile (BT x BT, row stride kTileLd<BT>) := those of (I + tile)^{-1};
/// p: kScratchFloats<BT> floats; kTc: tensor_core_inverse(output dtype) (BT = 16 has no merges: both are one path).
/// Ends with a block barrier.
template <int BT, bool kTc>
__device__ void invert_unit_lower(float* a, float* p, int len) {
  if constexpr (BT == 16 || !kTc) {
    invert_diagonal_blocks<BT>(a, len);
    if constexpr (BT >= 32) merge_level<BT, 16>(a, p, len);
    if constexpr (BT >= 64) merge_level<BT, 32>(a, p, len);
  } else {
    invert_diagonal_blocks<BT, false>(a, len);
    const int warp = static_cast<int>(threadIdx.x / 32);
    if (warp < BT / 32) {
      __syncwarp();  // the warp's two diagonal blocks are inverted
      float* const pt[1] = {p + warp * 16 * (16 + 4)};
      merge16_tc<BT>(a, pt, len, warp);
    }
    __syncthreads();
    if constexpr (BT >= 64) merge32_tc(a, p, len);
  }
}

}  // namespace fuseops::detail::cuda::gdn
