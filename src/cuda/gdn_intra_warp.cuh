// Device routines of the warp-per-unit kernels of the intra-chunk stage at chunk 64: one warp takes a whole (chunk,
// value head) unit, from its k rows to the inverse, with no block barrier. Shared by the fused kkt + inverse
// (gdn_intra_warp.cu) and the forward's kkt + inverse + w / u (gdn_intra_fwd_warp.cu). Their arithmetic is that of
// gdn_intra.cuh's block routines element by element (GramMma tiles over K ascending, kkt_entry,
// solve_diagonal_column, merge16_tc, merge32_tc's fragments and order), so the bytes are those of the block kernels.
#pragma once

#include <atomic>
#include <cstdint>

#include "cuda/bulk_copy.cuh"
#include "cuda/gdn_forward.cuh"
#include "cuda/gdn_intra.cuh"

namespace fuseops::detail::cuda::gdn::warp_unit {

constexpr int kBT = 64;
constexpr int kMaxWarps = 4;     ///< warps per block (each on its own units)
constexpr int kBlocksPerSm = 3;  ///< blocks per SM: 12 warps, 215 KB of shared memory (kWarpBytes each)
constexpr int kLd = kTileLd<kBT>;
/// Per warp: a tile region of kTileBytes for a 16-bit row tile (k, v, w or u rows of K, V <= 128: two swizzled boxes
/// [64][64], SwizzledRows), which is also the fp32 A tile [64][68] once the rows are dead; g / beta of the chunk's rows
/// (kGateBytes); the mbarrier of the rows' copies. (UnitRegion places them: kWarpBytes per warp in all.)
constexpr std::size_t kTileBytes = std::size_t{kBT} * kLd * sizeof(float);
static_assert(kTileBytes >= 2 * 64 * 128, "the A tile's bytes hold a row tile of <= 128 columns");
static_assert(kTileBytes % 1024 == 0, "every row tile is 1024-byte aligned (128-byte swizzle)");
constexpr std::size_t kGateBytes = 2 * kBT * sizeof(float);
constexpr std::size_t kWarpBytes = kTileBytes + kGateBytes + 16;

/// Byte offsets in a 16-bit row tile of the warp kernels: element (r, c) at row(r) + col(r % 8, c), in the layout of
/// the tensor-map copies (tensor_map.h): boxes [64][64] (columns 0-63, then 64-127) of 128-byte rows, 16-byte group g
/// of row r stored at group g ^ (r % 8).
struct SwizzledRows {
  static constexpr uint32_t kBoxBytes = 64 * 128;
  __device__ __forceinline__ uint32_t row(int r) const { return static_cast<uint32_t>(r * 128); }
  __device__ __forceinline__ uint32_t col(int rr, int c) const {
    return static_cast<uint32_t>((c >> 6) * kBoxBytes + ((((c >> 3) & 7) ^ rr) << 4) + (c & 7) * 2);
  }
};

/// One unit's region of a warp kernel's shared memory (1024-byte aligned base, no static shared memory): with `n`
/// regions, region `i`'s row tile (kTileBytes, 1024-byte aligned for the 128-byte swizzle) is the i-th of the n tiles
/// at the start, which is also its fp32 A tile once the rows are dead; its g then beta rows (kGateBytes) follow all the
/// tiles, and its mbarrier all the g / beta rows (n kWarpBytes in all).
template <typename TK>
struct UnitRegion {
  __device__ UnitRegion(unsigned char* smem, int n, int i)
      : region(smem + static_cast<std::size_t>(i) * kTileBytes),
        ks(reinterpret_cast<TK*>(region)),
        tile(reinterpret_cast<float*>(region)),
        gate_beta(reinterpret_cast<float*>(smem + n * kTileBytes) + i * 2 * kBT),
        bar(reinterpret_cast<uint64_t*>(smem + n * (kTileBytes + kGateBytes)) + i) {}
  unsigned char* region;
  TK* ks;
  float* tile;  ///< in the row tile's bytes
  float* gate_beta;
  uint64_t* bar;
};

/// Issues the copies of the chunk's rows of a tensor map's head `head` into X (SwizzledRows; `boxes` boxes of 64
/// columns), completing on `bar`: lane 0 of the calling warp posts the phase's bytes and issues one tensor-map copy
/// per box. The map fills zeros past the tensor's inner dimension (columns past K or V) and past T. The region's
/// earlier generic accesses must be fenced to the async proxy and ordered by a barrier before the call.
__device__ __forceinline__ void issue_tile(unsigned char* X, const CUtensorMap* map, int boxes, const ChunkRef& ch,
                                           int64_t head, uint64_t* bar) {
  if (threadIdx.x % 32 == 0) {
    mbar_arrive_expect(bar, static_cast<uint32_t>(boxes) * SwizzledRows::kBoxBytes);
    for (int box = 0; box < boxes; ++box) {
      tma_load_4d(smem_addr(X + box * SwizzledRows::kBoxBytes), map, 64 * box, static_cast<int>(head),
                  static_cast<int>(ch.t0), static_cast<int>(ch.batch), bar);
    }
  }
}

/// Waits for issue_tile's copies, then zeros rows [len, 64) of X, which hold the next sequence's rows or the map's
/// zero fill, by `threads` threads (t the caller's index among them; whole 128-byte rows of each box). The caller
/// orders the zeros before other threads' reads (a warp or pair barrier).
__device__ __forceinline__ void land_tile(unsigned char* X, int boxes, int len, uint64_t* bar, uint32_t& parity, int t,
                                          int threads) {
  mbar_wait(bar, parity);
  parity ^= 1u;
  if (len < kBT) {  // uniform over the callers
    const int per_row = 8 * boxes;
    for (int e = t; e < (kBT - len) * per_row; e += threads) {
      const int r = len + e / per_row, g = e % per_row;
      *reinterpret_cast<uint4*>(X + (g / 8) * SwizzledRows::kBoxBytes + r * 128 + (g % 8) * 16) =
          make_uint4(0u, 0u, 0u, 0u);
    }
  }
}

/// issue_tile, then land_tile by the calling warp: X holds the chunk's rows, zero past the chunk.
__device__ __forceinline__ void load_tile(unsigned char* X, const CUtensorMap* map, int boxes, const ChunkRef& ch,
                                          int64_t head, uint64_t* bar, uint32_t& parity) {
  issue_tile(X, map, boxes, ch, head, bar);
  land_tile(X, boxes, ch.len, bar, parity, static_cast<int>(threadIdx.x % 32), 32);
  __syncwarp();
}

/// The chunk's rows [0, len) of X (cols elements each, a multiple of 8) -> rows t0 .. of head `head` of `dst`, by NT
/// threads (threadIdx.x % NT): one tensor-map store by the first where every row of the box past len lies past the
/// tensor's T (whole chunks and the last chunk of T: the store writes only the chunk's rows), else 16-byte stores by
/// all (a sequence's partial last chunk inside a varlen batch). X's generic writes must be ordered before the call by a
/// barrier of the NT threads, and fenced to the async proxy before it (for the tensor-map store), unless kFence (one
/// warp: the fence and a warp barrier here, on that path).
template <typename TK, int NT = 32, bool kFence = false>
__device__ __forceinline__ void store_box_rows(const unsigned char* X, const CUtensorMap* map, const GdnOut& dst,
                                               int boxes, int cols, const ChunkRef& ch, int64_t head, int64_t T) {
  static_assert(!kFence || NT == 32, "kFence: one warp");
  const int t = static_cast<int>(threadIdx.x % NT);
  if (ch.len == kBT || ch.t0 + ch.len == T) {
    if constexpr (kFence) {
      fence_proxy_async_shared();
      __syncwarp();
    }
    if (t == 0) {
      for (int box = 0; box < boxes; ++box) {
        tma_store_4d(map, 64 * box, static_cast<int>(head), static_cast<int>(ch.t0), static_cast<int>(ch.batch),
                     smem_addr(X + box * SwizzledRows::kBoxBytes));
      }
      bulk_commit();
    }
    return;
  }
  const SwizzledRows lay;
  const int per_row = cols / 8;
  TK* const base = static_cast<TK*>(dst.data) + at(dst, ch.batch, ch.t0, head);
  for (int e = t; e < ch.len * per_row; e += NT) {
    const int r = e / per_row, c = 8 * (e % per_row);
    store_global_whole(reinterpret_cast<uint4*>(base + r * dst.stride_t + c),
                       *reinterpret_cast<const uint4*>(X + lay.row(r) + lay.col(r % 8, c)));
  }
}

/// The unit's inverse in the fp32 tile (row stride kLd) -> a 16-bit row box (SwizzledRows, 64 columns) in the tile's
/// first 8 KB: each element rounded once to TO as store_rows_as rounds it, the 16 x 16 blocks above the diagonal
/// blocks 0 (the merges' scratch lies there; store_rows_as<.., kZeroUpper>). By NT threads (32: a warp, 64: a pair),
/// thread t taking rows t, t + NT, ..., one pass of NT rows at a time: each pass reads its rows into registers, meets
/// (sync), then writes them. A pass writes box bytes [4096 p, 4096 (p + 1)), which hold fp32 rows no later pass reads.
/// Ends with the writes fenced to the async proxy and a meeting, so that store_box_rows may follow.
template <typename TO, int NT, typename Sync>
__device__ __forceinline__ void inverse_to_box(float* tile, Sync sync) {
  static_assert(NT == 32 || NT == 64, "a warp or a pair");
  const int t = static_cast<int>(threadIdx.x % NT);
  unsigned char* const box = reinterpret_cast<unsigned char*>(tile);
  const SwizzledRows lay;
#pragma unroll
  for (int p = 0; p < kBT / NT; ++p) {
    const int r = p * NT + t;
    uint32_t w[32];
#pragma unroll
    for (int g = 0; g < 8; ++g) {  // 8-column groups
      const bool zero = g / 2 > r / 16;
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        const float4 f =
            zero ? make_float4(0.f, 0.f, 0.f, 0.f) : *reinterpret_cast<const float4*>(tile + r * kLd + 8 * g + 4 * q);
        w[4 * g + 2 * q] = pack2<TO>(f.x, f.y);
        w[4 * g + 2 * q + 1] = pack2<TO>(f.z, f.w);
      }
    }
    sync();  // every thread's rows of this pass are read
#pragma unroll
    for (int g = 0; g < 8; ++g) {
      *reinterpret_cast<uint4*>(box + lay.row(r) + lay.col(r % 8, 8 * g)) =
          make_uint4(w[4 * g], w[4 * g + 1], w[4 * g + 2], w[4 * g + 3]);
    }
  }
  fence_proxy_async_shared();
  sync();
}

/// Gram tiles of one chunk that hold entries below the diagonal, for the row blocks rb (16 rows) whose bit is set in
/// kRows, in one warp: row block rb has column tiles ct = 0 .. 2 rb + 1 (8 columns), 4 accumulators per lane each.
/// Each tile is GramMma's: A fragments of rows 16 rb.., B fragments of the 8 column tokens, mma over K ascending from
/// 0. All four row blocks (GramWarp): 20 tiles, 80 accumulators, tile index rb (rb + 1) + ct.
template <typename TK, int kRows>
struct GramTiles {
  __host__ __device__ static constexpr bool has(int rb) { return ((kRows >> rb) & 1) != 0; }
  /// Index of row block rb's first tile.
  __host__ __device__ static constexpr int first(int rb) {
    return (rb > 0 && has(0) ? 2 : 0) + (rb > 1 && has(1) ? 4 : 0) + (rb > 2 && has(2) ? 6 : 0) +
           (rb > 3 && has(3) ? 8 : 0);
  }
  static constexpr int kTiles = first(4);
  static constexpr int kCols = has(3) ? 8 : has(2) ? 6 : has(1) ? 4 : 2;  ///< column tiles read
  float v[kTiles][4];

  /// ks: k tile [64][..] in layout `lay` (SwizzledRows), kp (multiple of 16, <= 128) columns, zero past
  /// K and past the chunk.
  template <typename Layout>
  __device__ void compute(const TK* ks, Layout lay, int kp) {
    const int lane = static_cast<int>(threadIdx.x % 32), rr = lane % 8;  // every lane row below is rr modulo 8
#pragma unroll
    for (int t = 0; t < kTiles; ++t) v[t][0] = v[t][1] = v[t][2] = v[t][3] = 0.f;
    const char* const a_row = reinterpret_cast<const char*>(ks) + lay.row(lane % 16);
    const char* const b_row = reinterpret_cast<const char*>(ks) + lay.row((lane / 16) * 8 + lane % 8);
    const int a_col = (lane / 16) * 8, b_col = ((lane / 8) & 1) * 8;
#pragma unroll 1
    for (int kk = 0; kk < kp; kk += 16) {  // ascending over K
      const char* const a_ptr = a_row + lay.col(rr, kk + a_col);
      const char* const b_ptr = b_row + lay.col(rr, kk + b_col);
      uint32_t b[kCols][2];
#pragma unroll
      for (int ct = 0; ct < kCols; ct += 2) {
        uint32_t q[4];
        ldmatrix_x4(q, reinterpret_cast<const TK*>(b_ptr + lay.row(ct * 8)));
        b[ct][0] = q[0], b[ct][1] = q[1], b[ct + 1][0] = q[2], b[ct + 1][1] = q[3];
      }
#pragma unroll
      for (int rb = 0; rb < 4; ++rb) {
        if (!has(rb)) continue;
        uint32_t a[4];
        ldmatrix_x4(a, reinterpret_cast<const TK*>(a_ptr + lay.row(rb * 16)));
#pragma unroll
        for (int ct = 0; ct <= 2 * rb + 1; ++ct) mma_m16n8k16<TK>(v[first(rb) + ct], a, b[ct][0], b[ct][1]);
      }
    }
  }

  /// The kkt entries of the tiles -> tile (row stride kLd); gate_beta: g[0..64) then beta[0..64). Tiles past the
  /// chunk get kkt_entry's exact 0 (j >= len > i), as GramMma::kkt_tile writes for tiles it skips. The 16 x 16 blocks
  /// above the diagonal blocks are not written (the inverse never reads them; the store writes them as 0).
  __device__ void kkt_tile(const float* gate_beta, int len, float* tile) const {
    const int lane = static_cast<int>(threadIdx.x % 32);
#pragma unroll
    for (int rb = 0; rb < 4; ++rb) {
      if (!has(rb)) continue;
      const int row = 16 * rb + lane / 4;
      const float g0 = gate_beta[row], g1 = gate_beta[row + 8];
      const float b0 = gate_beta[kBT + row], b1 = gate_beta[kBT + row + 8];
#pragma unroll
      for (int ct = 0; ct <= 2 * rb + 1; ++ct) {
        const int c = 8 * ct + 2 * (lane % 4);
        const float(&d)[4] = v[first(rb) + ct];
        const float gc0 = gate_beta[c], gc1 = gate_beta[c + 1];
        float* p = tile + row * kLd + c;
        *reinterpret_cast<float2*>(p) =
            make_float2(kkt_entry(d[0], row, c, len, g0, gc0, b0), kkt_entry(d[1], row, c + 1, len, g0, gc1, b0));
        *reinterpret_cast<float2*>(p + 8 * kLd) = make_float2(kkt_entry(d[2], row + 8, c, len, g1, gc0, b1),
                                                              kkt_entry(d[3], row + 8, c + 1, len, g1, gc1, b1));
      }
    }
  }
};

/// The 20 Gram tiles of a chunk in one warp.
template <typename TK>
using GramWarp = GramTiles<TK, 0xF>;

/// merge32_tc's level-32 merge by one warp: its 8 output tiles (rb, nt), each with merge32_tc's fragments and mma in
/// merge32_tc's order (P: k steps s = nt..3 ascending; X21: k 0 .. 16 rb + 15 ascending). The two row blocks run
/// interleaved, and a fragment that both (or all 4 column tiles) use is loaded once. pt: P^T (32 x 32, row stride
/// kLd). Both row blocks always run (merge32_tc skips a row block at or past len: rows never stored, read by no stored
/// row).
inline __device__ void merge32_warp(float* a, float* pt, int len) {
  if (32 >= len) return;  // warp-uniform
  {
    float d[2][4][4] = {};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t ah[2][4], al[2][4];
#pragma unroll
      for (int rb = 0; rb < 2; ++rb) load_a_split(a + (32 + 16 * rb) * kLd + 8 * s, kLd, ah[rb], al[rb]);
#pragma unroll
      for (int nt = 0; nt <= s; ++nt) {
        uint32_t bh[2], bl[2];
        load_b_split(a + (8 * s) * kLd + 8 * nt, kLd, bh, bl);
#pragma unroll
        for (int rb = 0; rb < 2; ++rb) mma_m16n8k8_split(d[rb][nt], ah[rb], al[rb], bh[0], bh[1], bl[0], bl[1]);
      }
    }
#pragma unroll
    for (int rb = 0; rb < 2; ++rb) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) store_transposed(pt + (8 * nt) * kLd + 16 * rb, kLd, d[rb][nt]);
    }
  }
  __syncwarp();  // P^T complete
  {
    float d[2][4][4] = {};
    uint32_t xh[3][2][4], xl[3][2][4];  // X22 fragments: (rb 0, s2 0), (rb 1, s2 0), (rb 1, s2 1); h = 0, 1
#pragma unroll
    for (int f = 0; f < 3; ++f) {
      const int rb = f == 0 ? 0 : 1, s2 = f == 2 ? 1 : 0;
#pragma unroll
      for (int h = 0; h < 2; ++h)
        load_a_split(a + (32 + 16 * rb) * kLd + 32 + 16 * s2 + 8 * h, kLd, xh[f][h], xl[f][h]);
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
      for (int s2 = 0; s2 < 2; ++s2) {
        uint32_t bh[4], bl[4];
        load_bt2_split(pt + (8 * nt) * kLd + 16 * s2, kLd, bh, bl);
#pragma unroll
        for (int rb = s2; rb < 2; ++rb) {
          const int f = rb + s2;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            mma_m16n8k8_split(d[rb][nt], xh[f][h], xl[f][h], bh[2 * h], bh[2 * h + 1], bl[2 * h], bl[2 * h + 1]);
          }
        }
      }
    }
#pragma unroll
    for (int rb = 0; rb < 2; ++rb) {
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) store_negated(a + (32 + 16 * rb) * kLd + 8 * nt, kLd, d[rb][nt]);
    }
  }
  __syncwarp();
}

/// invert_unit_lower<64, true> by one warp: rows [0, len) of tile := those of (I + tile)^{-1}, the same bytes.
/// Lane l solves column l % 16 of diagonal blocks l / 16 and l / 16 + 2 (always: a block past len only writes rows
/// that are never stored). The merges' P^T scratch lies in the tile's blocks above the diagonal blocks, which no step
/// reads: level 16 pair 0 in rows 0-15 / columns 16-31, pair 1 in rows 32-47 / columns 48-63, level 32 in rows 0-31 /
/// columns 32-63 (so the store must write those blocks as 0).
inline __device__ void invert_unit_lower_warp(float* a, int len) {
  const int lane = static_cast<int>(threadIdx.x % 32), c = lane % 16;
  float* blk0 = a + (lane / 16) * 16 * (kLd + 1);
  float* blk1 = blk0 + 32 * (kLd + 1);
  float x0[16], x1[16];
  solve_diagonal_column<kLd>(blk0, c, x0);
  solve_diagonal_column<kLd>(blk1, c, x1);
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    blk0[i * kLd + c] = x0[i];
    blk1[i * kLd + c] = x1[i];
  }
  __syncwarp();
  float* const pt[2] = {a + 16, a + 32 * kLd + 48};
  merge16_tc<kBT, kLd, 2>(a, pt, len, 0, /*skip=*/false);
  __syncwarp();
  merge32_warp(a, a + 32, len);
}

// ---------------------------------------------------------------------------------------------------------------
// Pair-per-unit routines: two warps (H = 0, 1) of one block take a unit together and meet at pair_sync. Each element
// keeps the fragments, mma and order of the warp routines above, so the bytes are theirs; only the warp that runs an
// element's chain differs.

/// The row blocks of the unit's 64 rows that warp H of a pair takes: {0, 3} and {1, 2} (10 of the 20 Gram tiles and
/// 5 of the 10 lower blocks of a product each).
template <int H>
struct PairRows {
  static constexpr int r0 = H == 0 ? 0 : 1;
  static constexpr int r1 = H == 0 ? 3 : 2;
};

/// Barrier of the 64 threads of a pair (named barrier 1; the pair kernels run one pair per block). The two warps reach
/// it from different instructions (each runs its own PairRows instantiation), each warp converged, as the producer and
/// consumer warps of gdn_fwd_o_wgmma.cu (and CUTLASS's named barriers) reach theirs. PTX's letter asks the whole CTA
/// to execute the same `bar.sync` (= barrier.sync.aligned); the non-aligned `barrier.sync` made the pair kernels 3-8%
/// longer in SASS (sm_90a), so the aligned form stays until a measurement says otherwise.
__device__ __forceinline__ void pair_sync() { asm volatile("bar.sync 1, 64;" ::: "memory"); }

/// GramWarp's tiles of warp H's row blocks r0 and r1 (PairRows<H>) only: 10 tiles, 40 accumulators per lane.
template <typename TK, int H>
using GramPair = GramTiles<TK, (1 << PairRows<H>::r0) | (1 << PairRows<H>::r1)>;

/// A pair's Gram and kkt entries: warp H's GramPair tiles from the k tile `x` (layout `lay`), then, once both warps
/// have read the k tile (pair_sync), their entries into the A tile in the same bytes. g / beta in gate_beta.
template <typename TK, int H, typename Layout>
__device__ __forceinline__ void gram_entries_pair(unsigned char* x, Layout lay, int kp, const float* gate_beta,
                                                  int len) {
  GramPair<TK, H> gram;
  gram.compute(reinterpret_cast<const TK*>(x), lay, kp);
  pair_sync();  // both warps' k-tile reads are done: the A tile takes the bytes
  gram.kkt_tile(gate_beta, len, reinterpret_cast<float*>(x));
}

/// merge32_warp's row block H (its 4 output tiles, the same fragments and mma order), the pair meeting between the
/// products P = A21 X11 and X21 = -X22 P. Skipped by both warps when 32 >= len.
template <int H>
__device__ void merge32_pair(float* a, float* pt, int len) {
  if (32 >= len) return;  // uniform over the pair
  {
    float d[4][4] = {};
#pragma unroll
    for (int s = 0; s < 4; ++s) {
      uint32_t ah[4], al[4];
      load_a_split(a + (32 + 16 * H) * kLd + 8 * s, kLd, ah, al);
#pragma unroll
      for (int nt = 0; nt <= s; ++nt) {
        uint32_t bh[2], bl[2];
        load_b_split(a + (8 * s) * kLd + 8 * nt, kLd, bh, bl);
        mma_m16n8k8_split(d[nt], ah, al, bh[0], bh[1], bl[0], bl[1]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) store_transposed(pt + (8 * nt) * kLd + 16 * H, kLd, d[nt]);
  }
  pair_sync();  // P^T complete; every read of A21 is done
  float d[4][4] = {};
  uint32_t xh[H + 1][2][4], xl[H + 1][2][4];  // X22 fragments (row block H, k steps s2 <= H)
#pragma unroll
  for (int s2 = 0; s2 <= H; ++s2) {
#pragma unroll
    for (int h = 0; h < 2; ++h) load_a_split(a + (32 + 16 * H) * kLd + 32 + 16 * s2 + 8 * h, kLd, xh[s2][h], xl[s2][h]);
  }
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) {
#pragma unroll
    for (int s2 = 0; s2 <= H; ++s2) {
      uint32_t bh[4], bl[4];
      load_bt2_split(pt + (8 * nt) * kLd + 16 * s2, kLd, bh, bl);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mma_m16n8k8_split(d[nt], xh[s2][h], xl[s2][h], bh[2 * h], bh[2 * h + 1], bl[2 * h], bl[2 * h + 1]);
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < 4; ++nt) store_negated(a + (32 + 16 * H) * kLd + 8 * nt, kLd, d[nt]);
}

/// invert_unit_lower_warp by a pair: warp H solves diagonal blocks 2H and 2H + 1 (lane l: column l % 16 of block 2H +
/// l / 16), merges level-16 pair H, then both take merge32_pair. The kkt entries of both warps must be in the tile
/// (pair_sync before the call); the caller meets the other warp (pair_sync) before it reads rows the other warp wrote.
template <int H>
__device__ void invert_unit_lower_pair(float* a, int len) {
  const int lane = static_cast<int>(threadIdx.x % 32), c = lane % 16;
  float* const blk = a + (2 * H + lane / 16) * 16 * (kLd + 1);
  float x[16];
  solve_diagonal_column<kLd>(blk, c, x);
  __syncwarp();
#pragma unroll
  for (int i = 0; i < 16; ++i) blk[i * kLd + c] = x[i];
  __syncwarp();
  float* const pt[1] = {H == 0 ? a + 16 : a + 32 * kLd + 48};
  merge16_tc<kBT, kLd, 1>(a, pt, len, H, /*skip=*/false);
  pair_sync();  // X11 and X22 complete
  merge32_pair<H>(a, a + 32, len);
}

/// A warp kernel's testing mode (set_*_warp_for_testing) and launch counter (*_warp_launches_for_testing).
struct TestingHooks {
  std::atomic<KktWarpForTesting> mode{KktWarpForTesting::rule};
  std::atomic<int64_t> launches{0};
  void set(KktWarpForTesting m) { mode.store(m, std::memory_order_relaxed); }
  KktWarpForTesting get() const { return mode.load(std::memory_order_relaxed); }
  void count() { launches.fetch_add(1, std::memory_order_relaxed); }
  int64_t count_so_far() const { return launches.load(std::memory_order_relaxed); }
};

}  // namespace fuseops::detail::cuda::gdn::warp_unit
