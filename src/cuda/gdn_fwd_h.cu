// CUDA backend of chunk_gated_delta_rule_fwd_h: the state recurrence across chunks (include/fuseops/gdn_forward.h;
// FLA `fla/ops/common/chunk_delta_h.py`). Two kernels, both one block per (sequence, value head, block of V columns), sequential over
// the sequence's chunks (the blocks of one (sequence, head) split V for parallelism). Per chunk:
//   1. h[slot] = S (rounded to h's dtype);
//   2. v_new = u - w S (stored ungated);
//   3. S = exp(g_last) S + k^T (v_new * exp(g_last - g_i)).
//
// fwd_h_mma_kernel (k, w, u, h, v_new all f16 or all bf16; every K, V in [1, 256] and every chunk size): tensor cores.
// The state slice S [KP][BV] (K padded to KP = 128 or 256) stays in fp32 mma accumulators; warp w owns rows
// [w KP / 8, (w + 1) KP / 8). Per chunk S is rounded once into shared memory, where it is both h[slot] (written out
// with 16-byte stores) and the B operand of w S; the gated v_new is rounded into a second tile as the B operand of
// k^T v_new (k^T through ldmatrix.trans). The w, k, u tiles of the chunks ahead are prefetched with cp.async into NS
// buffers while the current chunk is computed; two block barriers per chunk. Tiles are zero past K, V and the chunk's
// rows. TMA variant (K 64 or 128, BT 64, 16-byte rows; FUSEOPS_GDN_FWD_H_TMA=0 turns it off): the w and k tiles of
// whole chunks arrive by 4-D tensor-map copies (two boxes [64 rows][64] per tile, 128-byte swizzle, the ldmatrix
// addresses swizzled alike), issued by one thread of the last warp and completing on one mbarrier per buffer; the
// last chunk of a sequence (rows past it must be zero) and u keep cp.async. Measured 0.965-0.995x the cp.async
// kernel's forward on the gdn-prefill cases (the first form, issued by thread 0 behind a proxy fence, was level).
// The chunk step is bound by its chain of instructions (few blocks, each walking its chunks in order), so everything
// that does not change from one chunk to the next is computed once per unit: each thread's cp.async source / shared
// destination offsets, its h and v_new row offsets (pointers advanced by BT rows, h by one slot, per chunk; no
// division and no 64-bit multiply per element or chunk), and the gate table exp(g_last - g_i), exp(g_last) (computed
// once per row, during the previous chunk, by the BT threads that loaded g); after barrier A the w S mma are
// issued first and the g loads, the h stores and (NS > 2) the cp.async of a later chunk run in their shadow (with
// NS = 2 the next chunk's cp.async go first, to have the whole step to land). Instructions per warp and chunk step
// (sm_90a SASS of bf16, K = V = 128, BT = 64, BV = 16, NS = 4, by source step; docs/ops/gdn-log.md "fwd_h and
// recompute_w_u kernels" for the method; estimates): tile loads ~560 -> ~145, h store and its slot ~140 -> ~15, gates
// ~30 -> ~10 (~60 in the two warps holding the rows), S to shared memory ~17 -> ~9, w S ~100 -> ~45, v_new epilogue
// ~140 -> ~62, k^T v_new ~115 -> ~120 (unchanged), loop ~50 -> ~50: ~1150 -> ~460.
//
// wgmma variant of the TMA kernel (K = 128 on sm_90a code; FUSEOPS_GDN_FWD_H_WGMMA=0 turns it off): the two products
// by warpgroup mma. w S: A = the w tile as the tensor map left it (K-major, 128-byte swizzle), B = S^T, written each
// chunk by stmatrix.trans from the accumulators into two K-major boxes (state rows 0-63, 64-127); warpgroup g computes
// columns [g BV / 2, (g + 1) BV / 2) of all 64 rows. k^T v_new: A = box g of the k tile read as an M-major operand,
// B = the gated v_new^T, written by stmatrix.trans into one K-major box; warpgroup g updates state rows [64 g, 64 g +
// 64) (the same rows its warps own as mma.sync accumulators, so S's registers need no reshuffle). The S tile for h is
// written by stmatrix. Every thread fences the
// generic and async proxies before the barrier that precedes a wgmma reading what it wrote (S^T, v_new^T, and a last
// chunk's w rows copied by cp.async). Measured 0.87-0.94x the mma.sync TMA kernel's whole forward (docs/ops/gdn-log.md).
//
// Intra-first variant of the wgmma kernel (RDY; chunk_gated_delta_rule_intra_first_blocks says where): launched while
// the intra-chunk kernel is still producing w and u, it waits per chunk for that chunk's ready flag instead of for the
// whole previous grid (docs/ops/gdn-log.md, "the intra-first form"). Same arithmetic, same bytes. With FwdHArgs::o_ready
// (the output-beside form) it also counts each chunk's stored h and v_new rows, 8 chunks per fence, for chunk_fwd_o
// running beside it; the counters are indexed by the chunk within the sequence, chunk_fwd_o's chunk slot in this form
// (B = 1, no cu_seqlens).
//
// Fused-output variant of the wgmma kernel (FO; chunk_gated_delta_rule_fwd_h_o, the forward's grids of 64-column
// blocks, and of 32-column blocks that fit one per SM): chunk_fwd_o inside the chunk step, so h and v_new never leave
// the block. The q tile arrives with w and k; after barrier A warpgroup g issues, behind w S, q S (its columns, the
// same S^T operand) and its 32 columns of q k^T; the epilogue also writes the ungated v_new^T box; P = (q k^T) exp(g_i
// - g_j) (masked) goes by stmatrix into a shared tile, so that each warpgroup computes half of the scores (computing
// all 64 x 64 in both measured 0.98x the staged forward where this measures 0.84x); O = exp(g_i) q S; after barrier B,
// P v_new joins k^T v_new; o = scale O is stored (at 64 columns through each warp's staging tile, in 16-byte row
// segments; else from registers in pairs). Three tile buffers. The products, roundings and order
// of sums are those of chunk_fwd_o's wgmma kernel: same bytes as fwd_h + chunk_fwd_o where that kernel is the staged
// output stage (V a multiple of 128); with V = 64 / 192 the staged path takes the mma.sync kernel, whose sums skip the
// zero blocks.
//
// fwd_h_ffma_kernel (f32 inputs and any mix of dtypes): S [K][32] in shared memory, fp32 FFMA (no TF32); thread
// (rg = tid / 32, c = tid % 32) owns column c and the rows rg, rg + 8, ... of S and of the chunk.
// All sums run in a fixed order: results do not depend on the batch around a sequence.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "cuda/bulk_copy.cuh"
#include "cuda/device_error.cuh"
#include "cuda/gdn_forward.cuh"
#include "cuda/gdn_fwd_h_ws.h"
#include "cuda/gdn_fwd_o.cuh"
#include "cuda/tensor_map.h"
#include "cuda/wgmma.cuh"
#include "fuseops/error.h"

namespace fuseops::detail::cuda {
namespace {

using gdn::kThreads;
constexpr int kBV = 32;
constexpr int kRowGroups = kThreads / kBV;  // 8

template <int BT>
__global__ void __launch_bounds__(kThreads) fwd_h_ffma_kernel(const FwdHArgs a, int64_t vblocks, int64_t units,
                                                         DeviceErrorRecord* errors) {
  pdl_wait_and_release();
  extern __shared__ float smem[];
  const int K = static_cast<int>(a.geo.K);
  float* S = smem;                 // [K][kBV]
  float* ws = S + K * kBV;         // [BT][K]
  float* ks = ws + BT * K;         // [BT][K]
  float* vn = ks + BT * K;         // [BT][kBV]
  __shared__ float gs[BT];
  const int tid = static_cast<int>(threadIdx.x), c = tid % kBV, rg = tid / kBV;
  const int64_t HV = a.geo.HV, V = a.V, KV = static_cast<int64_t>(K) * V, group = HV / a.geo.H;

  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64_t vb = unit % vblocks, nh = unit / vblocks, hv = nh % HV, n = nh / HV, hk = hv / group;
    const int64_t col = vb * kBV + c;
    const bool col_ok = col < V;
    const SeqBounds sb = sequence_bounds(a.geo, n);
    if (sb.bad && hv == 0 && vb == 0 && tid == 0) record_device_error(errors, a.geo.cu_site, n);
    const int64_t state0 = (n * HV + hv) * KV;
    __syncthreads();  // the previous unit is done with S
    for (int r = rg; r < K; r += kRowGroups) {
      S[r * kBV + c] = (a.h0 && col_ok) ? gdn::load_f(a.h0, a.h0_dtype, state0 + r * V + col) : 0.f;
    }
    for (int64_t t0 = sb.bos; t0 < sb.eos; t0 += BT) {
      const int L = static_cast<int>(min(static_cast<int64_t>(BT), sb.eos - t0));
      const int64_t hoff = state_offset(a.h, sb.batch, chunk_slot(a.geo, n, sb.bos, t0), hv, HV, KV);
      __syncthreads();  // the previous chunk is done with the staged rows
      if (col_ok) {
        for (int r = rg; r < K; r += kRowGroups) gdn::store_f(a.h.data, a.h.dtype, hoff + r * V + col, S[r * kBV + c]);
      }
      for (int e = tid; e < L * K; e += kThreads) {
        const int i = e / K, x = e % K;
        ws[e] = gdn::load_f(a.w.data, a.w.dtype, gdn::at(a.w, sb.batch, t0 + i, hv) + x);
        ks[e] = gdn::load_f(a.k.data, a.k.dtype, gdn::at(a.k, sb.batch, t0 + i, hk) + x);
      }
      for (int i = rg; i < L; i += kRowGroups) {
        vn[i * kBV + c] = col_ok ? gdn::load_f(a.u.data, a.u.dtype, gdn::at(a.u, sb.batch, t0 + i, hv) + col) : 0.f;
      }
      if (tid < L) gs[tid] = a.g.data ? static_cast<const float*>(a.g.data)[gdn::at(a.g, sb.batch, t0 + tid, hv)] : 0.f;
      __syncthreads();
      const float glast = gs[L - 1];
      for (int i = rg; i < L; i += kRowGroups) {
        float d = 0.f;
        for (int r = 0; r < K; ++r) d = fmaf(ws[i * K + r], S[r * kBV + c], d);
        const float v = vn[i * kBV + c] - d;
        if (col_ok) gdn::store_f(a.v_new.data, a.v_new.dtype, gdn::at(a.v_new, sb.batch, t0 + i, hv) + col, v);
        vn[i * kBV + c] = a.g.data ? v * expf(glast - gs[i]) : v;
      }
      __syncthreads();
      const float decay = a.g.data ? expf(glast) : 1.f;
      for (int r = rg; r < K; r += kRowGroups) {
        float acc = S[r * kBV + c] * decay;
        for (int i = 0; i < L; ++i) acc = fmaf(ks[i * K + r], vn[i * kBV + c], acc);
        S[r * kBV + c] = acc;
      }
    }
    if (a.ht && col_ok) {
      for (int r = rg; r < K; r += kRowGroups) a.ht[state0 + r * V + col] = S[r * kBV + c];
    }
  }
}

template <int BT>
void launch_fwd_h_ffma(const FwdHArgs& a, int device, cudaStream_t s) {
  const char* op = "chunk_gated_delta_rule_fwd_h";
  const int64_t vblocks = (a.V + kBV - 1) / kBV;
  const int64_t units = a.geo.N * a.geo.HV * vblocks;
  const std::size_t smem =
      (static_cast<std::size_t>(a.geo.K) * kBV + 2 * static_cast<std::size_t>(BT) * a.geo.K + BT * kBV) * sizeof(float);
  auto kernel = fwd_h_ffma_kernel<BT>;
  allow_smem(kernel, smem, op);
  DeviceErrorRecord* errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  launch_kernel(kernel, dim3(gdn::grid_x(units)), dim3(kThreads), smem, s, device, a, vblocks, units, errors);
}


// ---------------------------------------------------------------------------------------------------------------
// Tensor-core kernel (f16 / bf16)

/// Which tensors move as 16-byte rows (cp.async / vector stores) and whether v_new takes 4-byte pair stores.
struct FwdHVec {
  bool w, k, u, h, v_new_pairs, q, h0_pairs, ht_pairs, o;
};

/// The w and k tensors as 4-D tensor maps (K, heads, T, B) with boxes of 64 x 1 x BT x 1 and 128-byte swizzle.
struct FwdHMaps {
  CUtensorMap w, k, q;  ///< q: the fused-output variant only
};

/// Compile-time shape: state rows KP (K padded: 128 or 256), chunk BT, V block BV, NS buffers of the w, k, u tiles
/// (the chunks in flight: NS - 1 are loading while one is computed). TMA: the w and k tiles of whole chunks arrive
/// by tensor-map copies (KP = 128): each tile is then two boxes [BT][64] with 128-byte swizzle (16-byte group g of
/// row r at group g ^ (r % 8)) instead of rows padded to KP + 8. RDY: the w / u of a chunk are produced by the intra
/// kernel running beside (chunk_gated_delta_rule_fwd_intra in its intra-first form); a chunk's copies wait for its
/// ready flag. FO (fused output, WG only): the q tile of each chunk arrives beside w and k, and o is computed from the
/// chunk's S^T, v_new and P in shared memory (chunk_gated_delta_rule_fwd_h_o); h and v_new are not written.
template <typename TK, int KP, int BT, int BV, int NS, bool TMA = false, bool WG = false, bool RDY = false,
          bool FO = false>
struct FwdHMma {
  static constexpr int kLdK = TMA ? 64 : KP + 8;  ///< row stride of the w / k tiles (of a box with TMA)
  static constexpr int kLdV = BV + 8;  ///< row stride of the u and S / v_new tiles
  static constexpr int kMT = KP / 16 / gdn::kWarps;  ///< 16-row tiles of S per warp
  static constexpr int kNV = BV / 8;                 ///< 8-column tiles of S and v_new
  static constexpr int kVT = (BT / 16) * kNV;        ///< 16 x 8 tiles of v_new
  static constexpr int kNPW = kVT >= gdn::kWarps ? kVT / gdn::kWarps : 1;  ///< v_new tiles per warp (one row block)
  static constexpr int kWTile = TMA ? BT * KP : BT * kLdK, kUTile = BT * kLdV, kSTile = FO ? 0 : KP * kLdV;
  /// FO: NS q tiles after the k tiles (as the w / k tiles), the ungated v_new^T box (the B operand of P v_new) after
  /// the gated one, then the tile of P [BT][64] (the K-major A operand of P v_new)
  static constexpr int kQTile = FO ? kWTile : 0, kVuTile = FO ? BV * 64 : 0, kPTile = FO ? BT * 64 : 0;
  static constexpr int kBoxBytes = BT * 128;  ///< one swizzled box (TMA)
  /// WG (wgmma): S^T as the B operand of w S, two K-major 128-byte-swizzled boxes [BV][64] (state rows 0-63,
  /// 64-127), and the gated v_new^T as the B operand of k^T v_new, one box [BV][64]; both after the k tiles (1024-byte
  /// aligned), in elements. Without WG the gated v_new is a padded tile [BT][kLdV] after the S tile.
  static constexpr int kStTile = WG ? 2 * BV * 64 : 0, kVtTile = WG ? BV * 64 : 0;
  /// WG with 16 columns (the grids of few heads, where one block's chain of chunk steps is the whole time): u and the
  /// gates of the epilogue loaded before the wait for w S, h's rows loaded before the later chunk's copies are issued
  /// (with four buffers; with two those go right after barrier A), v_new stored after the epilogue's proxy fence, and
  /// the gate table kept by warps 5-6 (warps 0-3 copy u, the last issues the tensor-map copies) instead of 0-1.
  /// Measured 3-4% faster there; with 32 or 64 columns 2-7% slower.
  static constexpr bool kNarrow = WG && BV == 16;
  static constexpr int kUOffset = NS * (2 * kWTile + kQTile) + kStTile + kVtTile + kVuTile + kPTile;  ///< u tiles
  static constexpr int kVTile = WG ? 0 : kUTile;
  /// FO: each warp's 16 rows x BV / 2 columns of o, rows padded by 16 bytes (conflict-free stmatrix), staged so that
  /// the rows leave in 16-byte stores: 8 4-byte pair stores per thread and chunk held the load-store queue, and the
  /// proxy fence that starts the next chunk waits for them (ncu at 2/8 [8 x 1024])
  static constexpr bool kOStaged = FO && BV == 64;  ///< with 32 columns: 1.01-1.02x the forward's time (not kept)
  static constexpr int kOLd = BV / 2 + 8, kOTile = kOStaged ? gdn::kWarps * 16 * kOLd : 0;
  /// w, k (, q, S^T, v_new^T) and u in NS buffers, the S tile, the gated v_new tile, the gate table double-buffered
  /// (FO: then the raw g of the chunk's rows, double-buffered), the mbarriers of the tensor-map copies (one per buffer)
  static constexpr int kGateFloats = 2 * (BT + 1) + (FO ? 2 * BT : 0);
  static constexpr std::size_t kBarOffset =
      ((kUOffset + NS * kUTile + kSTile + kVTile + kOTile) * sizeof(TK) + kGateFloats * sizeof(float) + 7) / 8 * 8;
  /// RDY: NS 16-byte slots of ready flags (slot j % NS holds flags j & ~3 .. (j & ~3) + 3, those of chunk j's group)
  static constexpr std::size_t kFlagOffset = (kBarOffset + (TMA ? NS * sizeof(uint64_t) : 0) + 15) / 16 * 16;
  static constexpr std::size_t kSmem = RDY ? kFlagOffset + NS * 16 : kBarOffset + (TMA ? NS * sizeof(uint64_t) : 0);
  static_assert(NS >= 2, "at least double buffering");
  static_assert(kSmem <= 227 * 1024, "shared memory of a block (sm_90)");
  static_assert(!TMA || KP == 128, "tensor-map tiles: K <= 128");
  static_assert(!WG || (TMA && BT == 64 && kMT == 1 && BV >= 16), "wgmma: tensor-map tiles, BT 64, K 128");
  static_assert(!FO || (WG && !RDY && BV >= 32), "fused output: the wgmma variant");
  static_assert(!RDY || WG, "ready flags and the output-beside counters: the wgmma variant (counted in its branch)");
  static_assert(kMT >= 1 && kNV % 2 == 0 && kNV % kNPW == 0 && (kNPW == 1 || kNPW % 2 == 0), "tile split");
};

__device__ __forceinline__ void st_pair(void* p, uint32_t v) { *static_cast<uint32_t*>(p) = v; }

/// v_new columns col, col + 1 of a row (those < vcols): one 4-byte store where `pairs` allows it.
template <typename TK>
__device__ __forceinline__ void store_v_pair(TK* vrow, int col, float v0, float v1, int vcols, bool pairs) {
  if (pairs && col + 1 < vcols) {
    st_pair(vrow + col, pack2<TK>(v0, v1));
  } else {
    if (col < vcols) vrow[col] = from_float<TK>(v0);
    if (col + 1 < vcols) vrow[col + 1] = from_float<TK>(v1);
  }
}

/// f(row, col, element) for every element of this thread's state fragments S[m][j][e]: warp w owns the row tiles
/// w MT .. w MT + MT - 1 of 16 rows; element e of an mma accumulator sits at row lane / 4 (+ 8 for e >= 2) and
/// column 2 (lane % 4) + e % 2 of its 16 x 8 tile.
template <int MT, int NV, typename F>
__device__ __forceinline__ void for_each_state(float (&S)[MT][NV][4], int warp, int lane, F&& f) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int j = 0; j < NV; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        f((warp * MT + m) * 16 + lane / 4 + (e >= 2 ? 8 : 0), j * 8 + 2 * (lane % 4) + (e & 1), S[m][j][e]);
      }
    }
  }
}

/// f(row, col, S[m][j][2 hr], S[m][j][2 hr + 1]) for every pair of this thread's state fragments: elements 2 hr and
/// 2 hr + 1 of a fragment are the adjacent columns col, col + 1 of one row (for_each_state's layout).
template <int MT, int NV, typename F>
__device__ __forceinline__ void for_each_state_pair(float (&S)[MT][NV][4], int warp, int lane, F&& f) {
#pragma unroll
  for (int m = 0; m < MT; ++m) {
#pragma unroll
    for (int j = 0; j < NV; ++j) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        f((warp * MT + m) * 16 + lane / 4 + 8 * hr, j * 8 + 2 * (lane % 4), S[m][j][2 * hr], S[m][j][2 * hr + 1]);
      }
    }
  }
}

/// S := the initial state h0 (a.h0 in a.h0_dtype; 0 at rows >= K and at columns >= vcols) at this thread's fragments,
/// `base` being h0's element (0, col0) of the unit's state, for h0 aligned to two elements and V even (so vcols is
/// even too): each fragment pair is one load; the dtype is dispatched once, outside the loops, and every load is
/// issued before any is used. The values of the per-element load (gdn::load_f), which put a dtype branch and a
/// dependent conversion on each element (ncu at 2/8 [8 x 1024], 16 chunks per unit: ~6% of the fused-output kernel's
/// stall samples).
template <typename TP, int MT, int NV>
__device__ __forceinline__ void load_state_pairs(float (&S)[MT][NV][4], const TP* h0, int64_t V, int K, int vcols,
                                                 int warp, int lane) {
  for_each_state_pair(S, warp, lane, [&](int row, int col, float& x0, float& x1) {
    float2 x = make_float2(0.f, 0.f);
    if (row < K && col < vcols) {
      if constexpr (std::is_same_v<TP, float>) {
        x = *reinterpret_cast<const float2*>(h0 + row * V + col);
      } else {
        x = unpack2<TP>(*reinterpret_cast<const uint32_t*>(h0 + row * V + col));
      }
    }
    x0 = x.x;
    x1 = x.y;
  });
}
template <int MT, int NV>
__device__ __forceinline__ void load_state_pairs(float (&S)[MT][NV][4], const FwdHArgs& a, int64_t base, int K,
                                                 int vcols, int warp, int lane) {
  switch (a.h0_dtype) {
    case DType::bf16:
      load_state_pairs(S, static_cast<const __nv_bfloat16*>(a.h0) + base, a.V, K, vcols, warp, lane);
      break;
    case DType::f16: load_state_pairs(S, static_cast<const __half*>(a.h0) + base, a.V, K, vcols, warp, lane); break;
    default: load_state_pairs(S, static_cast<const float*>(a.h0) + base, a.V, K, vcols, warp, lane); break;
  }
}

/// A thread's units of a 16-byte-vector copy between global rows and a shared tile of ROWS rows x PCOLS columns (a
/// multiple of 8): unit u = tid + j kThreads is row u / kPerRow, columns 8 (u % kPerRow) ... Since kPerRow divides
/// kThreads, all of a thread's units sit in one column c, on rows i0 + j kRowStep: their global addresses are a fixed
/// per-thread offset plus j times a fixed step from the row pointer of the chunk, which moves by BT rows per chunk (no
/// division, no 64-bit multiply per unit and chunk).
template <int ROWS, int PCOLS>
struct TileUnits {
  static constexpr int kPerRow = PCOLS / 8;
  static constexpr int kRowStep = kThreads / kPerRow;
  static constexpr int kUnits = (ROWS + kRowStep - 1) / kRowStep;  ///< per thread (the last one may be past ROWS)
  static_assert(PCOLS % 8 == 0 && kThreads % kPerRow == 0, "unit split");
  int i0, c;
  __device__ __forceinline__ explicit TileUnits(int tid) : i0(tid / kPerRow), c((tid % kPerRow) * 8) {}
  /// whether unit j is a row of the tile (always, when kRowStep divides ROWS)
  __device__ __forceinline__ bool in_tile(int j) const { return ROWS % kRowStep == 0 || i0 + j * kRowStep < ROWS; }
};

/// This thread's cp.async units of one chunk's tile (TileUnits<BT, PCOLS>): `dst` the shared byte address of its first
/// unit, `src` its first unit's global element (row i0, column c of the chunk), `step` kRowStep rows in elements;
/// units in a column < `pcols` are copied, from global where the row is < `rows` and the column < `cols`, else zero.
template <int BT, int PCOLS, typename TK>
__device__ __forceinline__ void cp_tile(const TileUnits<BT, PCOLS>& tu, uint32_t dst, int ld, const TK* src,
                                        int64_t step, int rows, int pcols, int cols, const void* any) {
  using U = TileUnits<BT, PCOLS>;
  if (tu.c >= pcols) return;
  const bool col_ok = tu.c < cols;
  const int rows_left = rows - tu.i0;
#pragma unroll
  for (int j = 0; j < U::kUnits; ++j) {
    if (tu.in_tile(j)) {
      const bool ok = col_ok && j * U::kRowStep < rows_left;
      cp_async_16(dst + static_cast<uint32_t>(j * U::kRowStep * ld * sizeof(TK)), ok ? src + j * step : any, ok);
    }
  }
}


/// Blocks per SM the register budget is set for: two where the shared memory of K <= 128 and BV <= 32 lets two
/// blocks share an SM (grids of more blocks than SMs take two buffers and then run two blocks per SM), else one (and
/// always one in the fused-output form, whose q, P and v_new^T tiles fill the SM's shared memory).
template <int KP, int BV, bool FO>
constexpr int fwd_h_min_blocks() { return KP == 128 && BV <= 32 && !FO ? 2 : 1; }

/// The output-beside form (FwdHArgs::o_ready): chunks are counted kOReadyGroup at a time, by one thread of the block,
/// after a block barrier that follows every thread's h and v_new stores of them; one fence releases the group at GPU
/// scope. A fence on a chunk step's chain costs ~0.4 us (fence.sc / fence.acq_rel / red.release alike, by any thread):
/// one per chunk made the forward 1.20x slower at 2/8 [8192], one per 8 chunks 0.96x the time of the staged output.
constexpr int64_t kOReadyGroup = 8;
/// V block of the intra-first (RDY) variant: each chunk's counter reaches the V blocks of a value head, (V + 15) / 16.
constexpr int kRdyBV = 16;
__device__ __forceinline__ void count_o_ready(unsigned* counters, int64_t count) {
  __threadfence();
  for (int64_t i = 0; i < count; ++i) atomicAdd(counters + i, 1u);
}

/// The body of fwd_h_mma_kernel, force-inlined (written in the kernel itself, the 3-buffer fused-output kernels
/// compile to another branch layout around the h0 loads).
template <typename TK, int KP, int BT, int BV, int NS, bool TMA, bool WG, bool RDY, bool FO>
__device__ __forceinline__ void fwd_h_mma_body(const FwdHArgs& a, int64_t vblocks, int64_t units, const FwdHVec& vec,
                                               DeviceErrorRecord* errors, const FwdHMaps& maps) {
  using C = FwdHMma<TK, KP, BT, BV, NS, TMA, WG, RDY, FO>;
  using TW = TileUnits<BT, KP>;  // w, k tiles
  using TU = TileUnits<BT, BV>;  // u tile
  using TH = TileUnits<KP, BV>;  // S tile -> h
  // RDY: no wait for the intra kernel (launched before, still running); what the kernels before it wrote was complete
  // when this grid launched (every intra block releases its dependents after its own wait)
  if constexpr (RDY) {
    pdl_release();
  } else {
    pdl_wait_and_release();
  }
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  TK* const wsm = reinterpret_cast<TK*>(smem_raw);  // [NS][BT][kLdK] (TMA: [NS][2][BT][64], swizzled)
  TK* const ksm = wsm + NS * C::kWTile;             // [NS][BT][kLdK]
  TK* const usm = wsm + C::kUOffset;                // [NS][BT][kLdV]
  TK* const ssm = usm + NS * C::kUTile;             // S [KP][kLdV]
  TK* const vsm = ssm + C::kSTile;                  // the gated v_new [BT][kLdV] (not WG)
  TK* const osm = vsm + C::kVTile;                  // FO: the o rows of each warp [kWarps][16][kOLd]
  float* const gsm = reinterpret_cast<float*>(osm + C::kOTile);  // [2][BT + 1]: exp(g_last - g_i), exp(g_last)
  float* const grw = gsm + 2 * (BT + 1);                            // FO: [2][BT] g_i (0 past the chunk, without g)
  uint64_t* const bars = reinterpret_cast<uint64_t*>(smem_raw + C::kBarOffset);  // [NS] (TMA)
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  if constexpr (TMA) {
    // the swizzled tiles need 1024-byte alignment (no static shared memory here; never expected to fire)
    if ((static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw)) & 1023u) != 0) __trap();
    if (tid < NS) mbar_init(bars + tid, 1);
    mbar_init_fence();
    __syncthreads();
  }
  uint32_t bar_phase = 0;  // bit b: the parity of buffer b's next phase (TMA)
  const int qr = lane / 4, qc = 2 * (lane % 4);  // accumulator fragment: rows qr, qr + 8; columns qc, qc + 1
  // the gate table's row of this thread (none unless in [0, BT)): threads 0 .. BT - 1, or (kNarrow) the warps before
  // the last, which neither copy u nor issue the tensor-map copies
  const int gt = C::kNarrow ? tid - (kThreads - 32 - BT) : tid;
  const int K = static_cast<int>(a.geo.K), kp = (K + 15) / 16 * 16;
  const int64_t HV = a.geo.HV, V = a.V, KV = static_cast<int64_t>(K) * V, group = HV / a.geo.H;
  const bool gated = a.g.data != nullptr;
  const float* const gp = static_cast<const float*>(a.g.data);
  const TK* const wp = static_cast<const TK*>(a.w.data);
  const TK* const kptr = static_cast<const TK*>(a.k.data);
  const TK* const up = static_cast<const TK*>(a.u.data);
  TK* const hp = static_cast<TK*>(a.h.data);
  TK* const vnp = static_cast<TK*>(a.v_new.data);
  const TK* const qptr = static_cast<const TK*>(a.q.data);
  TK* const op = static_cast<TK*>(a.o.data);
  const int64_t wst = a.w.stride_t, kst = a.k.stride_t, ust = a.u.stride_t, vst = a.v_new.stride_t;
  const int64_t qst = a.q.stride_t, ost = a.o.stride_t;
  const int64_t gst = a.g.stride_t;
  // this warp's v_new tiles: row block vm, column tiles vn0 .. vn0 + kNPW
  const int vt0 = warp * C::kNPW;
  const bool v_active = vt0 < C::kVT;
  const int vm = vt0 / C::kNV, vn0 = vt0 % C::kNV;
  // Per-thread copy units (fixed over the chunks): shared byte addresses in buffer 0, global offsets from a chunk's
  // row pointer (0 for the element-wise fallbacks, which take the chunk's pointer), the step between a thread's units
  const TW tw(tid);
  const TU tu(tid);
  const TH th(tid);
  const uint32_t smem0 = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  // a thread's first w / k unit in buffer 0: padded rows, or (TMA) 16-byte group g = c / 8 of row i0 in box g / 8 at
  // swizzled group (g % 8) ^ (i0 % 8); its later units are kRowStep (a multiple of 8) rows further, same group
  const uint32_t w_dst =
      smem0 + (TMA ? static_cast<uint32_t>((tw.c >> 6) * C::kBoxBytes + tw.i0 * 128 +
                                           ((((tw.c >> 3) & 7) ^ (tw.i0 & 7)) << 4))
                   : static_cast<uint32_t>((tw.i0 * C::kLdK + tw.c) * sizeof(TK)));
  const uint32_t k_dst = w_dst + static_cast<uint32_t>(NS * C::kWTile * sizeof(TK));
  const uint32_t q_dst = w_dst + static_cast<uint32_t>(2 * NS * C::kWTile * sizeof(TK));  // FO
  const uint32_t u_dst = smem0 + static_cast<uint32_t>((C::kUOffset + tu.i0 * C::kLdV + tu.c) * sizeof(TK));
  // WG: the S^T boxes and the v_new^T box (shared byte addresses)
  const uint32_t q_addr = smem0 + static_cast<uint32_t>(2 * NS * C::kWTile * sizeof(TK));  // FO: the q tiles
  const uint32_t st_addr = q_addr + static_cast<uint32_t>(NS * C::kQTile * sizeof(TK));
  const uint32_t vt_addr = st_addr + static_cast<uint32_t>(C::kStTile * sizeof(TK));
  const uint32_t vu_addr = vt_addr + static_cast<uint32_t>(C::kVtTile * sizeof(TK));  // FO: ungated v_new^T
  const uint32_t p_addr = vu_addr + static_cast<uint32_t>(C::kVuTile * sizeof(TK));  // FO: P
  const int64_t w_off = vec.w ? tw.i0 * wst + tw.c : 0, k_off = vec.k ? tw.i0 * kst + tw.c : 0;
  const int64_t q_off = vec.q ? tw.i0 * qst + tw.c : 0, q_step = TW::kRowStep * qst;
  const int64_t u_off = vec.u ? tu.i0 * ust + tu.c : 0;
  const int64_t w_step = TW::kRowStep * wst, k_step = TW::kRowStep * kst, u_step = TU::kRowStep * ust;
  const int64_t h_off = vec.h ? th.i0 * V + th.c : 0, h_step = TH::kRowStep * V;
  const int64_t v_off = ((WG ? (warp & 3) : vm) * 16 + qr) * vst;  // this thread's first v_new row of a chunk
  // WG: descriptors of buffer 0's w tile, of this warpgroup's S^T columns, of buffer 0's k box of this warpgroup (M-
  // major) and of the v_new^T box; a k-step or another buffer adds its byte offset (wgmma_desc_add)
  const uint64_t wdesc0 = wgmma_desc_sw128(smem0);
  const uint64_t sdesc0 = wgmma_desc_sw128(st_addr + static_cast<uint32_t>((warp >> 2) * (BV / 2) * 128));
  const uint64_t kdesc0 = wgmma_desc_sw128_mn(
      smem0 + static_cast<uint32_t>(NS * C::kWTile * sizeof(TK) + (warp >> 2) * C::kBoxBytes), 1024);
  const uint64_t vdesc0 = wgmma_desc_sw128(vt_addr);
  // FO: the q tile (A of q S and of q k^T, K-major), this warpgroup's 32 rows of the k tile as the B operand of
  // q k^T (K-major: its columns of the scores), its columns of the ungated v_new^T box (B of P v_new), the P tile
  // (A of P v_new)
  const uint64_t qdesc0 = wgmma_desc_sw128(q_addr);
  const uint64_t kbdesc0 =
      wgmma_desc_sw128(smem0 + static_cast<uint32_t>(NS * C::kWTile * sizeof(TK) + (warp >> 2) * 32 * 128));
  const uint64_t vudesc0 = wgmma_desc_sw128(vu_addr + static_cast<uint32_t>((warp >> 2) * (BV / 2) * 128));
  const uint64_t pdesc0 = wgmma_desc_sw128(p_addr);

  for (int64_t unit = blockIdx.x; unit < units; unit += gridDim.x) {
    const int64_t vb = unit % vblocks, nh = unit / vblocks, hv = nh % HV, n = nh / HV, hk = hv / group;
    const int64_t col0 = vb * BV;
    const int vcols = static_cast<int>(min(static_cast<int64_t>(BV), V - col0));
    const SeqBounds sb = sequence_bounds(a.geo, n);
    if (sb.bad && hv == 0 && vb == 0 && tid == 0) record_device_error(errors, a.geo.cu_site, n);
    const int64_t state0 = (n * HV + hv) * KV;
    float S[C::kMT][C::kNV][4];
    // the initial state: in pairs where the fused-output variant of 64 columns takes them (with 32 columns, and in the
    // other variants, they changed the compiled chunk loop: 1.01-1.02x the forward's time), else per element
    if (C::kOStaged && vec.h0_pairs && a.h0 != nullptr) {
      load_state_pairs(S, a, state0 + col0, K, vcols, warp, lane);
    } else {
      for_each_state(S, warp, lane, [&](int row, int col, float& x) {
        x = (a.h0 && row < K && col < vcols) ? gdn::load_f(a.h0, a.h0_dtype, state0 + row * V + col0 + col) : 0.f;
      });
    }
    if (sb.eos > sb.bos) {
      // Row pointers (plus this thread's offset) of the sequence's first chunk; each moves by BT rows per chunk. The
      // chunk slots of h are consecutive from chunk 1 on (chunk_slot), so h moves by one slot per chunk after the
      // first.
      const TK* wq = wp + gdn::at(a.w, sb.batch, sb.bos, hv) + w_off;
      const TK* kq = kptr + gdn::at(a.k, sb.batch, sb.bos, hk) + k_off;
      const TK* uq = up + gdn::at(a.u, sb.batch, sb.bos, hv) + col0 + u_off;
      int64_t tq = sb.bos;  // first token of the next chunk to load
      TK* vq = vnp + gdn::at(a.v_new, sb.batch, sb.bos, hv) + col0;
      const TK* qq = FO ? qptr + gdn::at(a.q, sb.batch, sb.bos, hk) + q_off : nullptr;
      TK* oq = FO ? op + gdn::at(a.o, sb.batch, sb.bos, hv) + col0 : nullptr;
      const float* gq = gated ? gp + gdn::at(a.g, sb.batch, sb.bos, hv) : nullptr;
      TK* hq = hp + state_offset(a.h, sb.batch, chunk_slot(a.geo, n, sb.bos, sb.bos), hv, HV, KV) + col0 + h_off;
      TK* const hq1 =
          hp + state_offset(a.h, sb.batch, chunk_slot(a.geo, n, sb.bos, sb.bos + BT), hv, HV, KV) + col0 + h_off;
      const int64_t h_slot = HV * KV;
      // RDY: chunk j's flag is copied into shared slot j % NS by thread 0 in the copy group of chunk j - (NS - 1),
      // which has landed (barrier A passed) by the time chunk j is issued; chunks 0 .. NS - 2 read theirs from global
      // memory. A clear flag: a spin on the global flag. No register waits on a flag load: a loaded flag kept in a
      // register cost ~0.23 us per chunk (the MOV right after the load waited for it). The flag is set after the
      // producer's stores and a fence; the w / u rows are then read through L2 (cp.async.cg, tensor-map copies).
      const unsigned* const rdy = RDY ? a.ready + hv * a.ready_stride : nullptr;
      const int64_t flag_end = (sb.eos - sb.bos + BT - 1) / BT;
      const unsigned* const fsm = reinterpret_cast<const unsigned*>(smem_raw + C::kFlagOffset);
      // w, k, u rows of the chunk at tq -> buffer `b`, one cp.async group (empty past the sequence); pointers advance
      auto issue = [&](int b) {
        if (tq < sb.eos) {
          if constexpr (RDY) {
            const int64_t sl = (tq - sb.bos) / BT;
            if (sl < NS - 1 || fsm[(sl % NS) * 4 + (sl & 3)] == 0) {
              while (ld_relaxed_gpu(rdy + sl) == 0) {
              }
            }
            const int64_t nx = sl + NS - 1;
            if (tid == 0 && nx < flag_end) {
              cp_async_16(smem0 + static_cast<uint32_t>(C::kFlagOffset + (nx % NS) * 16), rdy + (nx & ~int64_t{3}),
                          true);
            }
          }
          const int L = static_cast<int>(min(static_cast<int64_t>(BT), sb.eos - tq));
          const uint32_t wb = static_cast<uint32_t>(b * C::kWTile * sizeof(TK));
          const uint32_t ub = static_cast<uint32_t>(b * C::kUTile * sizeof(TK));
          if (TMA && L == BT) {  // whole chunk: w and k tiles by tensor-map copies, K / 64 boxes each
            // issued by the last thread (the gate rows are on warps 0-1, or 5-6 with kNarrow); the block's reads of the buffer (its previous
            // chunk) precede it (barrier A); a previous unit's cp.async writes were fenced at this unit's start
            if (tid == kThreads - 1) {
              mbar_arrive_expect(bars + b, static_cast<uint32_t>((FO ? 3 : 2) * BT * K * sizeof(TK)));
              for (int box = 0; box * 64 < K; ++box) {
                tma_load_4d(smem0 + wb + box * C::kBoxBytes, &maps.w, box * 64, static_cast<int>(hv),
                            static_cast<int>(tq), static_cast<int>(sb.batch), bars + b);
                tma_load_4d(smem0 + static_cast<uint32_t>(NS * C::kWTile * sizeof(TK)) + wb + box * C::kBoxBytes,
                            &maps.k, box * 64, static_cast<int>(hk), static_cast<int>(tq), static_cast<int>(sb.batch),
                            bars + b);
                if constexpr (FO) {
                  tma_load_4d(q_addr + wb + box * C::kBoxBytes, &maps.q, box * 64, static_cast<int>(hk),
                              static_cast<int>(tq), static_cast<int>(sb.batch), bars + b);
                }
              }
            }
          } else {  // the last chunk of a sequence (zero rows past it), or no tensor maps
            if (vec.w) {
              cp_tile(tw, w_dst + wb, C::kLdK, wq, w_step, L, kp, K, wp);
            } else {
              gdn::load_tile<TK, BT>(wsm + b * C::kWTile, C::kLdK, kp, wq, wst, L, K, false, kThreads);
            }
            if (vec.k) {
              cp_tile(tw, k_dst + wb, C::kLdK, kq, k_step, L, kp, K, kptr);
            } else {
              gdn::load_tile<TK, BT>(ksm + b * C::kWTile, C::kLdK, kp, kq, kst, L, K, false, kThreads);
            }
            if constexpr (FO) cp_tile(tw, q_dst + wb, C::kLdK, qq, q_step, L, kp, K, qptr);  // vec.q: a condition
          }
          if (vec.u) {
            cp_tile(tu, u_dst + ub, C::kLdV, uq, u_step, L, BV, vcols, up);
          } else {
            gdn::load_tile<TK, BT>(usm + b * C::kUTile, C::kLdV, BV, uq, ust, L, vcols, false, kThreads);
          }
        }
        cp_async_commit();
        tq += BT;
        wq += BT * wst;
        kq += BT * kst;
        uq += BT * ust;
        if constexpr (FO) qq += BT * qst;
      };
      // Gate table of a chunk (row pointer gc, L rows): row gt < BT gets exp(g_last - g_i) (0 past the chunk, 1
      // without g), entry BT exp(g_last) (1 without g). Loaded in one place, written in another (the loads fly).
      auto gate_load = [&](const float* gc, int L, float& gi, float& gl) {
        if (gated && gt >= 0 && gt < BT) {
          gl = gc[(L - 1) * gst];
          if (gt < L) gi = gc[gt * gst];
        }
      };
      auto gate_store = [&](float gi, float gl, int L, float* dst, float* raw) {
        if (gt >= 0 && gt < BT) {
          dst[gt] = gt < L ? (gated ? expf(gl - gi) : 1.f) : 0.f;
          if (gt == 0) dst[BT] = gated ? expf(gl) : 1.f;
          if constexpr (FO) raw[gt] = gated && gt < L ? gi : 0.f;
        }
      };
      // The previous unit is done with the shared tiles. With TMA, its last chunk may have been written by cp.async
      // (generic proxy) into a buffer a tensor-map copy (async proxy) now overwrites: every thread fences first.
      if constexpr (TMA) fence_proxy_async_shared();
      __syncthreads();
      // Prologue: chunks 0 .. NS - 2 into buffers 0 .. NS - 2, one cp.async group each, so that before chunk c the
      // groups committed are NS - 1 + c and waiting until NS - 2 remain lands chunk c.
#pragma unroll
      for (int p = 0; p < NS - 1; ++p) issue(p);
      {
        const int L0 = static_cast<int>(min(static_cast<int64_t>(BT), sb.eos - sb.bos));
        float gi = 0.f, gl = 0.f;
        gate_load(gq, L0, gi, gl);
        gate_store(gi, gl, L0, gsm, grw);
      }
      int buf = 0, gbuf = 0;  // tile buffer of this chunk (chunk index mod NS); gate buffer (chunk index mod 2)
      // Two block barriers per chunk. The S tile is last read (w S, h) before barrier B of the previous chunk; the
      // v_new tile and the previous chunk's tile buffer (k) before barrier A of this one; gate buffer gbuf ^ 1 (the
      // previous chunk's) before barrier B of the previous chunk.
      for (int64_t t0 = sb.bos; t0 < sb.eos; t0 += BT, buf = buf + 1 == NS ? 0 : buf + 1, gbuf ^= 1) {
        const int L = static_cast<int>(min(static_cast<int64_t>(BT), sb.eos - t0));
        const bool has_next = t0 + BT < sb.eos;

        // 1. S -> shared memory (rounded once): h[slot] and the B operand of w S. Rows >= K are zero. (WG: the S tile
        // only for h, by stmatrix: matrices (rows +0 | +8) x (columns of tiles j, j + 1); FO: no h, no S tile.)
        if constexpr (WG && !FO) {
          const int q = lane >> 3;
          const uint32_t row_at = smem0 + static_cast<uint32_t>(
              ((C::kUOffset + NS * C::kUTile) + (warp * 16 + (lane & 7) + (q & 1) * 8) * C::kLdV + (q >> 1) * 8) * sizeof(TK));
#pragma unroll
          for (int j = 0; j < C::kNV; j += 2) {
            stmatrix_x4<false>(row_at + static_cast<uint32_t>(j * 8 * sizeof(TK)), pack2<TK>(S[0][j][0], S[0][j][1]),
                               pack2<TK>(S[0][j][2], S[0][j][3]), pack2<TK>(S[0][j + 1][0], S[0][j + 1][1]),
                               pack2<TK>(S[0][j + 1][2], S[0][j + 1][3]));
          }
        }
#pragma unroll
        for (int m = 0; m < (WG ? 0 : C::kMT); ++m) {
          const int row = (warp * C::kMT + m) * 16 + qr;
#pragma unroll
          for (int j = 0; j < C::kNV; ++j) {
            st_pair(ssm + row * C::kLdV + j * 8 + qc, pack2<TK>(S[m][j][0], S[m][j][1]));
            st_pair(ssm + (row + 8) * C::kLdV + j * 8 + qc, pack2<TK>(S[m][j][2], S[m][j][3]));
          }
        }
        if constexpr (WG) {
          // S^T into its K-major boxes (the B operand of w S): the warp's 16 rows are groups 2 (warp % 4) and + 1 of
          // box warp / 4; matrices (rows +0 | +8) x (columns of tiles j, j + 1) stored transposed.
          const int q = lane >> 3, i8 = lane & 7;
          const uint32_t box = st_addr + static_cast<uint32_t>((warp >> 2) * BV * 128);
          const uint32_t grp = static_cast<uint32_t>(((2 * (warp & 3) + (q & 1)) ^ i8) << 4);
#pragma unroll
          for (int j = 0; j < C::kNV; j += 2) {
            const int n = 8 * (j + (q >> 1)) + i8;
            stmatrix_x4<true>(box + static_cast<uint32_t>(n * 128) + grp, pack2<TK>(S[0][j][0], S[0][j][1]),
                              pack2<TK>(S[0][j][2], S[0][j][3]), pack2<TK>(S[0][j + 1][0], S[0][j + 1][1]),
                              pack2<TK>(S[0][j + 1][2], S[0][j + 1][3]));
          }
        }
        cp_async_wait<NS - 2>();  // this chunk's tiles have landed
        // WG: the S^T writes and this thread's landed cp.async rows (a last chunk's w tile) are read by wgmma, i.e. by
        // the asynchronous proxy: fenced by every thread before barrier A
        if constexpr (WG) fence_proxy_async_shared();
        if (TMA && L == BT) {
          mbar_wait(bars + buf, (bar_phase >> buf) & 1u);
          bar_phase ^= 1u << buf;
        }
        __syncthreads();  // barrier A
        // chunk c + NS - 1 into the buffer of chunk c - 1 (free since barrier A) while this one is computed: with two
        // buffers (the next chunk, one chunk step to land) right away, with more after the mma below
        if constexpr (NS == 2) issue(buf == 0 ? NS - 1 : buf - 1);

        // 2. v_new = u - w S for this warp's tiles; stored ungated, and gated (0 past the chunk) into the v_new tile.
        // The mma are issued first; the gate loads, the h store (and the tile loads with NS > 2) follow in their
        // shadow, before the results are used. Two accumulator sets (even and odd 16-column steps of K, each
        // ascending, added at the end) halve the chain of dependent mma.
        const float* const gc = gsm + gbuf * (BT + 1);
        const float decay = gc[BT];
        float vacc[C::kNPW][4], vodd[C::kNPW][4];
#pragma unroll
        for (int p = 0; p < C::kNPW; ++p) {
#pragma unroll
          for (int e = 0; e < 4; ++e) vacc[p][e] = vodd[p][e] = 0.f;
        }
        float wacc[WG ? BV / 4 : 1];  // WG: the warpgroup's v_new block, rows 16 (warp % 4) .., columns of its half
        // FO: o of the warpgroup's block (as wacc), the warpgroup's 32 columns of the scores q k^T (m64n32 layout)
        float oacc[FO ? BV / 4 : 1], sacc[FO ? 16 : 1];
        if constexpr (WG) {
          // warpgroup warp / 4 takes columns [BV / 2 (warp / 4), + BV / 2) of all 64 rows: A = the w tile (its two
          // K-major boxes as the tensor map left them), B = S^T rows of those columns; issued here, waited for before
          // the epilogue
          wgmma_fence();
          // acc = A S for an A tile of buffer `buf` (descriptor of buffer 0: `a0`), the warpgroup's columns of S^T
          auto times_s = [&](float (&acc)[BV / 4], uint64_t a0) {
            const uint64_t da = wgmma_desc_add(a0, static_cast<uint32_t>(buf * C::kWTile * sizeof(TK)));
#pragma unroll
            for (int st = 0; st < KP / 16; ++st) {
              const uint32_t ka = static_cast<uint32_t>((st >> 2) * C::kBoxBytes + (st & 3) * 32);
              const uint32_t kb = static_cast<uint32_t>((st >> 2) * BV * 128 + (st & 3) * 32);
              wgmma_ss<TK, BV / 2>(acc, wgmma_desc_add(da, ka), wgmma_desc_add(sdesc0, kb), st > 0);
            }
            wgmma_commit();
          };
          times_s(wacc, wdesc0);
          wgmma_fence_operands(wacc);
          // RDY, the output-beside form: the previous kOReadyGroup chunks' h and v_new rows, stored by every thread
          // before their barrier B, counted for chunk_fwd_o (the fence in the shadow of w S)
          if (RDY && a.o_ready != nullptr && tid == 0) {
            const int64_t c = (t0 - sb.bos) / BT;
            if (c > 0 && c % kOReadyGroup == 0) {
              count_o_ready(a.o_ready + hv * a.ready_stride + c - kOReadyGroup, kOReadyGroup);
            }
          }
          if constexpr (FO) {
            // o's two products that read only this chunk's tiles, in two more groups: q S (the same columns and
            // B operand as w S) and the warpgroup's 32 columns of q k^T (P is shared through shared memory)
            times_s(oacc, qdesc0);
            const uint64_t dq = wgmma_desc_add(qdesc0, static_cast<uint32_t>(buf * C::kWTile * sizeof(TK)));
            const uint64_t dk = wgmma_desc_add(kbdesc0, static_cast<uint32_t>(buf * C::kWTile * sizeof(TK)));
#pragma unroll
            for (int st = 0; st < KP / 16; ++st) {
              const uint32_t ka = static_cast<uint32_t>((st >> 2) * C::kBoxBytes + (st & 3) * 32);
              wgmma_ss<TK, 32>(sacc, wgmma_desc_add(dq, ka), wgmma_desc_add(dk, ka), st > 0);
            }
            wgmma_commit();
            wgmma_fence_operands(oacc);
            wgmma_fence_operands(sacc);
          }
        } else if (v_active && vm * 16 < L) {  // warp-uniform
          const TK* const a_ptr = wsm + buf * C::kWTile + (vm * 16 + (lane & 15)) * C::kLdK + (TMA ? 0 : (lane >> 4) * 8);
          const int b_row = C::kNPW == 1 ? (lane & 15) : (lane & 7) + ((lane >> 3) & 1) * 8;
          const int b_col = C::kNPW == 1 ? vn0 * 8 : (vn0 + (lane >> 4)) * 8;
          const TK* const b_ptr = ssm + b_row * C::kLdV + b_col;
          auto step = [&](int kk, float (&acc)[C::kNPW][4]) {
            uint32_t af[4];
            if constexpr (TMA) {  // group (kk % 64) / 8 + lane / 16 of row (lane % 8 mod 8) in box kk / 64
              ldmatrix_x4(af, a_ptr + (kk >> 6) * (C::kBoxBytes / 2) + (((((kk & 63) >> 3) + (lane >> 4)) ^ (lane & 7)) << 3));
            } else {
              ldmatrix_x4(af, a_ptr + kk);
            }
            if constexpr (C::kNPW == 1) {
              uint32_t b0, b1;
              ldmatrix_x2_trans(b0, b1, b_ptr + kk * C::kLdV);
              mma_m16n8k16<TK>(acc[0], af, b0, b1);
            } else {
#pragma unroll
              for (int p = 0; p < C::kNPW; p += 2) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, b_ptr + kk * C::kLdV + p * 8);
                mma_m16n8k16<TK>(acc[p], af, b[0], b[1]);
                mma_m16n8k16<TK>(acc[p + 1], af, b[2], b[3]);
              }
            }
          };
#pragma unroll
          for (int kk = 0; kk < KP; kk += 32) {
            if (kk < kp) step(kk, vacc);
            if (kk + 16 < kp) step(kk + 16, vodd);
          }
        }
        uint4 hrow[C::kNarrow ? TH::kUnits : 1];  // kNarrow: this thread's h units, loaded early
        if constexpr (C::kNarrow) {
          if (vec.h) {
#pragma unroll
            for (int j = 0; j < TH::kUnits; ++j) {
              const int r = th.i0 + j * TH::kRowStep;
              if (th.in_tile(j) && r < K && th.c < vcols) {
                hrow[j] = *reinterpret_cast<const uint4*>(ssm + r * C::kLdV + th.c);
              }
            }
          }
        }
        if constexpr (NS > 2) issue(buf == 0 ? NS - 1 : buf - 1);
        float gi_next = 0.f, gl_next = 0.f;  // the next chunk's gates, stored to shared memory later
        const int L_next = has_next ? static_cast<int>(min(static_cast<int64_t>(BT), sb.eos - t0 - BT)) : 0;
        if (has_next && gated) gate_load(gq + BT * gst, L_next, gi_next, gl_next);
        // h[slot] = S from the shared tile (read before barrier B; kNarrow: the rows loaded above); FO: no h
        if (FO) {
        } else if (vec.h) {
#pragma unroll
          for (int j = 0; j < TH::kUnits; ++j) {
            const int r = th.i0 + j * TH::kRowStep;
            if (th.in_tile(j) && r < K && th.c < vcols) {
              *reinterpret_cast<uint4*>(hq + j * h_step) =
                  C::kNarrow ? hrow[j] : *reinterpret_cast<const uint4*>(ssm + r * C::kLdV + th.c);
            }
          }
        } else {
          gdn::store_tile(hq, V, ssm, C::kLdV, K, vcols, false, kThreads);
        }
        // WG: v_new of this thread (rows 8 hr + its fragment row, column tiles jj): stored to global memory before the
        // proxy fence of the epilogue, or (kNarrow) after it
        constexpr int kVv = WG ? BV / 16 : 1;
        float vv[2][kVv][2];
        auto store_vnew = [&]() {
          if constexpr (WG) {
            const int n0 = (warp >> 2) * (BV / 2);
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const int i = (warp & 3) * 16 + qr + 8 * hr;
              TK* const vrow = vq + v_off + (hr ? 8 * vst : 0);
#pragma unroll
              for (int jj = 0; jj < kVv; ++jj) {
                if (!FO && i < L) {
                store_v_pair(vrow, n0 + jj * 8 + qc, vv[hr][jj][0], vv[hr][jj][1], vcols, vec.v_new_pairs);
              }
              }
            }
          }
        };
        if constexpr (WG) {
          // v_new = u - w S of the warpgroup's block; the gated v_new^T into its K-major box (the B operand of
          // k^T v_new): matrices (rows 16 (warp % 4) + 0 | + 8) x (columns of tiles jj, jj + 1) stored transposed
          constexpr int NH = BV / 2;
          const int n0 = (warp >> 2) * NH;
          const TK* const ut = usm + buf * C::kUTile;
          uint32_t upair[2][NH / 8];
          float fg[2];
          auto load_u = [&]() {
#pragma unroll
            for (int hr = 0; hr < 2; ++hr) {
              const int i = (warp & 3) * 16 + qr + 8 * hr;
              fg[hr] = gc[i];  // 0 past the chunk
#pragma unroll
              for (int jj = 0; jj < NH / 8; ++jj) {
                upair[hr][jj] = *reinterpret_cast<const uint32_t*>(ut + i * C::kLdV + n0 + jj * 8 + qc);
              }
            }
          };
          if constexpr (C::kNarrow) load_u();  // in the shadow of the products
          wgmma_wait<FO ? 2 : 0>();  // w S (FO: q S and q k^T stay in flight)
          wgmma_fence_operands(wacc);
          if constexpr (!C::kNarrow) load_u();
          uint32_t vg[NH / 8][2];
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
#pragma unroll
            for (int jj = 0; jj < NH / 8; ++jj) {
              const float2 uu = unpack2<TK>(upair[hr][jj]);
              vv[hr][jj][0] = uu.x - wacc[4 * jj + 2 * hr];
              vv[hr][jj][1] = uu.y - wacc[4 * jj + 2 * hr + 1];
              vg[jj][hr] = pack2<TK>(vv[hr][jj][0] * fg[hr], vv[hr][jj][1] * fg[hr]);
            }
          }
          if constexpr (!C::kNarrow) store_vnew();
          const int q = lane >> 3, i8 = lane & 7;
          const uint32_t grp = static_cast<uint32_t>(((2 * (warp & 3) + (q & 1)) ^ i8) << 4);
          if constexpr (NH == 8) {
            stmatrix_x2_trans(vt_addr + static_cast<uint32_t>((n0 + i8) * 128) + grp, vg[0][0], vg[0][1]);
          } else {
#pragma unroll
            for (int jj = 0; jj < NH / 8; jj += 2) {
              const int n = n0 + 8 * (jj + (q >> 1)) + i8;
              stmatrix_x4<true>(vt_addr + static_cast<uint32_t>(n * 128) + grp, vg[jj][0], vg[jj][1], vg[jj + 1][0],
                                vg[jj + 1][1]);
            }
          }
          if constexpr (FO) {
            // the ungated v_new (rounded as fwd_h stores it) into its box alike: the B operand of P v_new
#pragma unroll
            for (int jj = 0; jj < NH / 8; jj += 2) {
              const int n = n0 + 8 * (jj + (q >> 1)) + i8;
              stmatrix_x4<true>(vu_addr + static_cast<uint32_t>(n * 128) + grp,
                                pack2<TK>(vv[0][jj][0], vv[0][jj][1]), pack2<TK>(vv[1][jj][0], vv[1][jj][1]),
                                pack2<TK>(vv[0][jj + 1][0], vv[0][jj + 1][1]),
                                pack2<TK>(vv[1][jj + 1][0], vv[1][jj + 1][1]));
            }
          }
          if constexpr (FO) {
            // P = (q k^T) exp(g_i - g_j) for j <= i < L, else 0 (chunk_fwd_o's wgmma kernel), the warpgroup's columns
            // [32 g, 32 g + 32) rounded to TK into the P tile by stmatrix (rows +0 | +8 x column tiles t, t + 1;
            // 128-byte swizzle); O = exp(g_i) q S
            wgmma_wait<0>();
            wgmma_fence_operands(oacc);
            wgmma_fence_operands(sacc);
            const float* const gr = grw + gbuf * BT;
            const int ra = (warp & 3) * 16 + qr, rb = ra + 8;
            const float ga = gr[ra], gb = gr[rb];
#pragma unroll
            for (int t = 0; t < 4; ++t) {
              const int c = (warp >> 2) * 32 + 8 * t + qc;
              const float g0 = gr[c], g1 = gr[c + 1];
              sacc[4 * t + 0] = fwd_o::gated_score(sacc[4 * t + 0], ra, c, L, ga, g0, gated);
              sacc[4 * t + 1] = fwd_o::gated_score(sacc[4 * t + 1], ra, c + 1, L, ga, g1, gated);
              sacc[4 * t + 2] = fwd_o::gated_score(sacc[4 * t + 2], rb, c, L, gb, g0, gated);
              sacc[4 * t + 3] = fwd_o::gated_score(sacc[4 * t + 3], rb, c + 1, L, gb, g1, gated);
            }
            const int prow = (warp & 3) * 16 + (q & 1) * 8 + i8;
#pragma unroll
            for (int t = 0; t < 4; t += 2) {
              const int cg = (warp >> 2) * 4 + t + (q >> 1);  // the 16-byte group of the row
              stmatrix_x4<false>(p_addr + static_cast<uint32_t>(prow * 128 + ((cg ^ i8) << 4)),
                                 pack2<TK>(sacc[4 * t + 0], sacc[4 * t + 1]),
                                 pack2<TK>(sacc[4 * t + 2], sacc[4 * t + 3]),
                                 pack2<TK>(sacc[4 * t + 4], sacc[4 * t + 5]),
                                 pack2<TK>(sacc[4 * t + 6], sacc[4 * t + 7]));
            }
            const float ea = gated ? __expf(ga) : 1.f, eb = gated ? __expf(gb) : 1.f;
            fwd_o::scale_rows(oacc, ea, eb);
          }
          fence_proxy_async_shared();  // (FO: P, read by the wgmma after barrier B, with the v_new^T boxes)
          if constexpr (C::kNarrow) store_vnew();
        } else {
#pragma unroll
        for (int p = 0; p < C::kNPW; ++p) {
#pragma unroll
          for (int e = 0; e < 4; ++e) vacc[p][e] += vodd[p][e];
        }
        if (v_active) {
          const TK* const ut = usm + buf * C::kUTile;
#pragma unroll
          for (int hr = 0; hr < 2; ++hr) {
            const int i = vm * 16 + qr + 8 * hr;
            const float f = gc[i];  // 0 past the chunk
            TK* const vrow = vq + v_off + (hr ? 8 * vst : 0);
#pragma unroll
            for (int p = 0; p < C::kNPW; ++p) {
              const int col = (vn0 + p) * 8 + qc;
              const float2 uu = unpack2<TK>(*reinterpret_cast<const uint32_t*>(ut + i * C::kLdV + col));
              const float v0 = uu.x - vacc[p][2 * hr];
              const float v1 = uu.y - vacc[p][2 * hr + 1];
              if (i < L) store_v_pair(vrow, col, v0, v1, vcols, vec.v_new_pairs);
              st_pair(vsm + i * C::kLdV + col, pack2<TK>(v0 * f, v1 * f));
            }
          }
        }
        }
        __syncthreads();  // barrier B

        // 3. S = exp(g_last) S + k^T v_gated, ascending over the chunk's rows
        for_each_state(S, warp, lane, [&](int, int, float& x) { x *= decay; });
        const TK* const kt = ksm + buf * C::kWTile;
        const int lp = (L + 15) / 16 * 16;
        if constexpr (WG) {
          // the warpgroup's 64 state rows (warp w: rows 16 w ..): A = k^T fragments from registers, B = v_new^T
          // (all BT rows: past a last chunk's rows both k and the gated v_new are zero). A = k^T: box warp / 4 of the
          // k tile as an M-major operand (its rows are the chunk's rows, 64 state rows each)
          float(&sf)[BV / 2] = reinterpret_cast<float(&)[BV / 2]>(S[0]);
          wgmma_fence_operands(sf);  // the decay's products before the fence
          wgmma_fence();
          const uint64_t ka = wgmma_desc_add(kdesc0, static_cast<uint32_t>(buf * C::kWTile * sizeof(TK)));
#pragma unroll
          for (int st = 0; st < BT / 16; ++st) {
            wgmma_ss<TK, BV, false, true>(sf, wgmma_desc_add(ka, static_cast<uint32_t>(st * 2048)),
                                          wgmma_desc_add(vdesc0, static_cast<uint32_t>(st * 32)), 1);
          }
          if constexpr (FO) {  // O += P v_new (P from its tile, the warpgroup's columns of the ungated v_new^T box)
#pragma unroll
            for (int j = 0; j < BT / 16; ++j) {
              wgmma_ss<TK, BV / 2>(oacc, wgmma_desc_add(pdesc0, static_cast<uint32_t>(j * 32)),
                                   wgmma_desc_add(vudesc0, static_cast<uint32_t>(j * 32)), 1);
            }
          }
          wgmma_commit();
          // the next chunk's gate table while the products run (its buffer was last read before barrier B of the
          // previous chunk)
          if (has_next) gate_store(gi_next, gl_next, L_next, gsm + (gbuf ^ 1) * (BT + 1), grw + (gbuf ^ 1) * BT);
          wgmma_wait<0>();
          wgmma_fence_operands(sf);
          if constexpr (FO) {
            // o = scale O, rows < L (o in TK with pair stores: a condition of the variant). kOStaged and vec.o: the
            // warp's rows through its staging tile (stmatrix: matrices (rows +0 | +8) x (column tiles t, t + 1)),
            // then 16-byte stores of whole row segments; else pair stores from registers.
            wgmma_fence_operands(oacc);
            const float sc = a.scale;
            const int n0 = (warp >> 2) * (BV / 2);
            if (C::kOStaged && vec.o) {
              TK* const ost_tile = osm + warp * 16 * C::kOLd;
              const int q = lane >> 3;
              const uint32_t srow = static_cast<uint32_t>(__cvta_generic_to_shared(
                  ost_tile + ((q & 1) * 8 + (lane & 7)) * C::kOLd + (q >> 1) * 8));
              __syncwarp();  // the warp's reads of the previous chunk's rows are done
#pragma unroll
              for (int t = 0; t < BV / 16; t += 2) {
                stmatrix_x4<false>(srow + static_cast<uint32_t>(t * 8 * sizeof(TK)),
                                   pack2<TK>(sc * oacc[4 * t + 0], sc * oacc[4 * t + 1]),
                                   pack2<TK>(sc * oacc[4 * t + 2], sc * oacc[4 * t + 3]),
                                   pack2<TK>(sc * oacc[4 * t + 4], sc * oacc[4 * t + 5]),
                                   pack2<TK>(sc * oacc[4 * t + 6], sc * oacc[4 * t + 7]));
              }
              __syncwarp();
              constexpr int kSeg = BV / 16;  // 16-byte segments of a row of the warp's columns
#pragma unroll
              for (int e = lane; e < 16 * kSeg; e += 32) {
                const int r = e / kSeg, c = 8 * (e % kSeg), i = (warp & 3) * 16 + r;
                if (i < L) {
                  store_global_whole(reinterpret_cast<uint4*>(oq + static_cast<int64_t>(i) * ost + n0 + c),
                                     *reinterpret_cast<const uint4*>(ost_tile + r * C::kOLd + c));
                }
              }
            } else {
#pragma unroll
              for (int hr = 0; hr < 2; ++hr) {
                const int i = (warp & 3) * 16 + qr + 8 * hr;
                TK* const orow = oq + static_cast<int64_t>(i) * ost + n0 + qc;
                if (i < L) {
#pragma unroll
                  for (int t = 0; t < BV / 16; ++t) {
                    st_pair(orow + 8 * t, pack2<TK>(sc * oacc[4 * t + 2 * hr], sc * oacc[4 * t + 2 * hr + 1]));
                  }
                }
              }
            }
          }
        }
        for (int kk = 0; kk < (WG ? 0 : lp); kk += 16) {
          uint32_t bf[C::kNV / 2][4];
#pragma unroll
          for (int p = 0; p < C::kNV / 2; ++p) {
            const int row = kk + (lane & 7) + ((lane >> 3) & 1) * 8;
            ldmatrix_x4_trans(bf[p], vsm + row * C::kLdV + (2 * p + (lane >> 4)) * 8);
          }
#pragma unroll
          for (int m = 0; m < C::kMT; ++m) {
            const int m0 = (warp * C::kMT + m) * 16;
            if (m0 < K) {  // warp-uniform; rows >= K stay zero
              uint32_t af[4];
              if constexpr (TMA) {
                ldmatrix_x4_trans(af, kt + (kk + (lane & 7) + (lane >> 4) * 8) * C::kLdK + (m0 >> 6) * (C::kBoxBytes / 2) +
                                          (((((m0 & 63) >> 3) + ((lane >> 3) & 1)) ^ (lane & 7)) << 3));
              } else {
                ldmatrix_x4_trans(af, kt + (kk + (lane & 7) + (lane >> 4) * 8) * C::kLdK + m0 + ((lane >> 3) & 1) * 8);
              }
#pragma unroll
              for (int p = 0; p < C::kNV / 2; ++p) {
                mma_m16n8k16<TK>(S[m][2 * p], af, bf[p][0], bf[p][1]);
                mma_m16n8k16<TK>(S[m][2 * p + 1], af, bf[p][2], bf[p][3]);
              }
            }
          }
        }
        if (!WG && has_next) gate_store(gi_next, gl_next, L_next, gsm + (gbuf ^ 1) * (BT + 1), nullptr);
        vq += BT * vst;
        if constexpr (FO) oq += BT * ost;
        if (gated) gq += BT * gst;
        hq = t0 == sb.bos ? hq1 : hq + h_slot;
      }
      // the last group's rows: every thread stored them before the last chunk's barrier B, which thread 0 has passed
      if (RDY && a.o_ready != nullptr) {
        if (tid == 0) {
          const int64_t chunks = (sb.eos - sb.bos + BT - 1) / BT, first = (chunks - 1) / kOReadyGroup * kOReadyGroup;
          count_o_ready(a.o_ready + hv * a.ready_stride + first, chunks - first);
        }
      }
    }
    if (a.ht) {
      if (C::kOStaged && vec.ht_pairs) {  // one 8-byte store per fragment pair (ht f32, 8-byte aligned, V even)
        for_each_state_pair(S, warp, lane, [&](int row, int col, float& x0, float& x1) {
          if (row < K && col < vcols) *reinterpret_cast<float2*>(a.ht + state0 + row * V + col0 + col) = {x0, x1};
        });
      } else {
        for_each_state(S, warp, lane, [&](int row, int col, float& x) {
          if (row < K && col < vcols) a.ht[state0 + row * V + col0 + col] = x;
        });
      }
    }
  }
}

template <typename TK, int KP, int BT, int BV, int NS, bool TMA, bool WG, bool RDY, bool FO>
__global__ void __launch_bounds__(kThreads, fwd_h_min_blocks<KP, BV, FO>())
    fwd_h_mma_kernel(const FwdHArgs a, int64_t vblocks, int64_t units, FwdHVec vec, DeviceErrorRecord* errors,
                     const __grid_constant__ FwdHMaps maps) {
  fwd_h_mma_body<TK, KP, BT, BV, NS, TMA, WG, RDY, FO>(a, vblocks, units, vec, errors, maps);
}

template <typename TK, int KP, int BT, int BV, int NS, bool TMA, bool WG = false, bool RDY = false, bool FO = false>
void launch_fwd_h_mma(const FwdHArgs& a, const FwdHVec& vec, const FwdHMaps& maps, int device, cudaStream_t s) {
  using C = FwdHMma<TK, KP, BT, BV, NS, TMA, WG, RDY, FO>;
  const char* op = "chunk_gated_delta_rule_fwd_h";
  const int64_t vblocks = (a.V + BV - 1) / BV;
  const int64_t units = a.geo.N * a.geo.HV * vblocks;
  auto kernel = fwd_h_mma_kernel<TK, KP, BT, BV, NS, TMA, WG, RDY, FO>;
  allow_smem(kernel, C::kSmem, op);
  DeviceErrorRecord* errors = a.geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  launch_kernel(kernel, dim3(gdn::grid_x(units)), dim3(kThreads), C::kSmem, s, device, a, vblocks, units, vec, errors,
                maps);
}

/// set_fwd_h_tma_off_for_testing / set_fwd_h_wgmma_off_for_testing (false unless a test turns the tensor-map tiles or
/// the wgmma variant off in its process).
std::atomic<bool> fwd_h_tma_off_for_testing{false}, fwd_h_wgmma_off_for_testing{false};
/// set_intra_first_off_for_testing (false unless a test turns the intra-first form off in its process).
std::atomic<bool> intra_first_off_for_testing{false};
std::atomic<int64_t> intra_first_launches{0};  ///< fwd_h launches in the intra-first form (tests)
/// set_fwd_h_o_off_for_testing; launches of the fused-output form (tests)
std::atomic<bool> fwd_h_o_off_for_testing{false};
std::atomic<int64_t> fwd_h_o_launches{0};

/// Whether the tensor-map tiles and the wgmma products are switched on (environment, tests).
bool tma_switched_on() {
  static const bool tma_allowed = !env_switched_off("FUSEOPS_GDN_FWD_H_TMA");
  return tma_allowed && !fwd_h_tma_off_for_testing.load(std::memory_order_relaxed);
}
bool wgmma_switched_on() {
  static const bool wgmma_allowed = !env_switched_off("FUSEOPS_GDN_FWD_H_WGMMA");
  return wgmma_allowed && !fwd_h_wgmma_off_for_testing.load(std::memory_order_relaxed);
}

/// The launch of one variant: TMA (the w and k tiles of whole chunks by tensor-map copies) where the maps were made
/// (`tma`: K <= 128, BT = 64); with K = 128 on sm_90a code the products by wgmma (FUSEOPS_GDN_FWD_H_WGMMA=0 turns them
/// off).
template <typename TK, int KP, int BT, int BV, int NS>
void launch_fwd_h_var(const FwdHArgs& a, const FwdHVec& vec, const FwdHMaps& maps, bool tma, int device,
                      cudaStream_t s) {
  if constexpr (KP == 128 && BT == 64) {
    if (tma) {
      if (wgmma_switched_on() && a.geo.K == 128 && runs_sm90a_code(device)) {
        launch_fwd_h_mma<TK, KP, BT, BV, NS, true, true>(a, vec, maps, device, s);
      } else {
        launch_fwd_h_mma<TK, KP, BT, BV, NS, true>(a, vec, maps, device, s);
      }
      return;
    }
  }
  launch_fwd_h_mma<TK, KP, BT, BV, NS, false>(a, vec, maps, device, s);
}

/// Blocks the V split of one variant gives.
int64_t fwd_h_blocks(const FwdHArgs& a, int bv) { return a.geo.N * a.geo.HV * ((a.V + bv - 1) / bv); }

/// Pipeline depth of a V block width. A block walks its chunks in order and each chunk's compute is short (a few
/// dependent mma), so on small grids a chunk's tile loads are issued several chunks ahead. KP = 256 and BV = 64:
/// double buffering (three buffers at BV = 64 measured 0-3% slower on the H200 than two). BV = 16 / 32: four buffers
/// when the grid is one block per SM at most, else two (two blocks per SM then share the latency instead); four
/// measured 8-15% faster on 2/8 [2048] .. [2 x 16384] and 16/32 [4096], 1-3% slower on 16/32 [8192] / [32768].
template <typename TK, int KP, int BT, int BV>
void launch_fwd_h_ns(const FwdHArgs& a, const FwdHVec& vec, const FwdHMaps& maps, bool tma, int device,
                     cudaStream_t s) {
  if constexpr (KP > 128 || BV == 64) {
    launch_fwd_h_var<TK, KP, BT, BV, 2>(a, vec, maps, tma, device, s);
  } else {
    if (fwd_h_blocks(a, BV) <= sm_count(device)) {
      launch_fwd_h_var<TK, KP, BT, BV, 4>(a, vec, maps, tma, device, s);
    } else {
      launch_fwd_h_var<TK, KP, BT, BV, 2>(a, vec, maps, tma, device, s);
    }
  }
}

/// BV: BT = 64: the widest of 64 / 32 that still gives >= kFillBlocks blocks (about one per SM), else 16;
/// BT = 16 / 32: 32.
constexpr int64_t kFillBlocks = 128;
/// The intra-first form (chunk_gated_delta_rule_intra_first_blocks): sequences of at least 64 chunks (at 2/8 [2048],
/// 32 chunks, it measured 3-6% slower: the first chunks wait for the intra kernel); SMs left idle beside it.
constexpr int64_t kIntraFirstMinChunks = 64, kIntraFirstSpareSms = 8;
template <typename TK, int KP, int BT>
void launch_fwd_h_bv(const FwdHArgs& a, const FwdHVec& vec, const FwdHMaps& maps, bool tma, int device,
                     cudaStream_t s) {
  if constexpr (BT == 64) {
    if (fwd_h_blocks(a, 64) >= kFillBlocks) {
      launch_fwd_h_ns<TK, KP, BT, 64>(a, vec, maps, tma, device, s);
    } else if (fwd_h_blocks(a, 32) >= kFillBlocks) {
      launch_fwd_h_ns<TK, KP, BT, 32>(a, vec, maps, tma, device, s);
    } else {
      launch_fwd_h_ns<TK, KP, BT, 16>(a, vec, maps, tma, device, s);
    }
  } else {
    launch_fwd_h_ns<TK, KP, BT, 32>(a, vec, maps, tma, device, s);
  }
}

template <typename TK, int KP>
void launch_fwd_h_bt(const FwdHArgs& a, const FwdHVec& vec, const FwdHMaps& maps, bool tma, int device,
                     cudaStream_t s) {
  switch (a.geo.BT) {
    case 16: launch_fwd_h_bv<TK, KP, 16>(a, vec, maps, tma, device, s); break;
    case 32: launch_fwd_h_bv<TK, KP, 32>(a, vec, maps, tma, device, s); break;
    default: launch_fwd_h_bv<TK, KP, 64>(a, vec, maps, tma, device, s); break;
  }
}

/// Whether the fused-output form is switched on (environment, tests).
bool fwd_h_o_switched_on() {
  static const bool allowed = !env_switched_off("FUSEOPS_GDN_FWD_HO");
  return allowed && !fwd_h_o_off_for_testing.load(std::memory_order_relaxed);
}

/// The tensor-core path: k, w, u, h and v_new all in one 16-bit dtype. Returns false (nothing launched) otherwise.
/// `fo`: the fused-output form (chunk_gated_delta_rule_fwd_h_o) only, false (nothing launched) where it does not apply.
bool launch_fwd_h_tc(const FwdHArgs& a, int device, cudaStream_t s, bool fo, unsigned* counted = nullptr) {
  const DType dt = a.k.dtype;
  if (a.w.dtype != dt || a.u.dtype != dt || a.h.dtype != dt || a.v_new.dtype != dt) return false;
  const int64_t K = a.geo.K, V = a.V;
  // fo: the shape rules first, so that a forward the form does not take encodes its tensor maps once (in fwd_h's call).
  // The form's V block is launch_fwd_h_bv's: 64 columns on grids of >= kFillBlocks such blocks, else 32 on grids of
  // kFillBlocks .. one block per SM (more would run two per SM in the staged kernel; the form's tiles fill an SM);
  // whole blocks only.
  int fo_bv = 0;
  if (fo) {
    if (fwd_h_blocks(a, 64) >= kFillBlocks) {
      fo_bv = V % 64 == 0 ? 64 : 0;
    } else if (fwd_h_blocks(a, 32) >= kFillBlocks && fwd_h_blocks(a, 32) <= sm_count(device)) {
      fo_bv = V % 32 == 0 ? 32 : 0;
    }
    // (the intra-first form's flags, a.ready, never take the fused output)
    if (!(fwd_h_o_switched_on() && !a.ready && a.geo.BT == 64 && K == 128 && fo_bv != 0)) return false;
  }
  FwdHVec vec{};
  vec.w = gdn::rows_16b(a.w, K);
  vec.k = gdn::rows_16b(a.k, K);
  vec.u = gdn::rows_16b(a.u, V);
  vec.h = reinterpret_cast<std::uintptr_t>(a.h.data) % 16 == 0 && V % 8 == 0;
  vec.v_new_pairs = reinterpret_cast<std::uintptr_t>(a.v_new.data) % 4 == 0 && V % 2 == 0 &&
                    a.v_new.stride_t % 2 == 0 && a.v_new.stride_h % 2 == 0 && a.v_new.stride_b % 2 == 0;
  vec.h0_pairs = reinterpret_cast<std::uintptr_t>(a.h0) % (2 * dtype_size(a.h0_dtype)) == 0 && V % 2 == 0;
  vec.ht_pairs = reinterpret_cast<std::uintptr_t>(a.ht) % 8 == 0 && V % 2 == 0;
  // Tensor-map tiles: K 64 or 128 (whole boxes), BT 64, 16-byte rows, token coordinates in int32;
  // FUSEOPS_GDN_FWD_H_TMA=0 turns them off.
  FwdHMaps maps{};
  const bool tma = tma_switched_on() && is_sm90_or_newer(device) && (K == 64 || K == 128) && a.geo.BT == 64 &&
                   vec.w && vec.k && a.geo.T <= INT32_MAX &&
                   gdn_rows_map(&maps.w, a.w, dt, K, a.geo.HV, a.geo) && gdn_rows_map(&maps.k, a.k, dt, K, a.geo.H, a.geo);
  // the intra-first form (a.ready: set only where chunk_gated_delta_rule_intra_first_blocks applied to these args):
  // polls the ready flags of the intra kernel launched before; without tensor maps this waits for that kernel instead
  const bool ready = a.ready && tma;
  if (fo) {
    // the wgmma variant of fo_bv columns (launch_fwd_h_bv's choice, see above), q as w / k (16-byte rows, a tensor
    // map), o in TK with pair stores
    vec.q = a.q.data != nullptr && a.q.dtype == dt && gdn::rows_16b(a.q, K);
    vec.o = gdn::rows_16b(a.o, V);
    const bool form = tma && wgmma_switched_on() && runs_sm90a_code(device) && vec.q && a.o.dtype == dt &&
                      gdn::rows_pairs(a.o) && gdn_rows_map(&maps.q, a.q, dt, K, a.geo.H, a.geo);
    if (!form) return false;
    // 64 columns: the warp-specialised kernel (gdn_fwd_h_ws.cu) where u has a tensor map too
    if (fo_bv == 64 && fwd_h_o_ws_switched_on() && launch_fwd_h_o_ws(a, maps.w, maps.k, maps.q, device, s)) {
      fwd_h_o_launches.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    // three buffers (222 KB of shared memory at 64 columns with the o staging tiles, 184 KB at 32): measured 2-3% faster than two on the
    // gdn-prefill cases of 64-column blocks
    const bool launched = gdn::with_16bit(dt, [&](auto tag) {
      using TK = decltype(tag);
      if (fo_bv == 64) {
        launch_fwd_h_mma<TK, 128, 64, 64, 3, true, true, false, true>(a, vec, maps, device, s);
      } else {
        launch_fwd_h_mma<TK, 128, 64, 32, 3, true, true, false, true>(a, vec, maps, device, s);
      }
    });
    if (!launched) return false;  // (not 16-bit: no tensor maps, so not reached)
    fwd_h_o_launches.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return gdn::with_16bit(dt, [&](auto tag) {
    using TK = decltype(tag);
    if (ready) {
      launch_fwd_h_mma<TK, 128, 64, kRdyBV, 4, true, true, true>(a, vec, maps, device, s);
      intra_first_launches.fetch_add(1, std::memory_order_relaxed);
      // each chunk counted once per V block
      if (counted != nullptr && a.o_ready != nullptr) *counted = static_cast<unsigned>((V + kRdyBV - 1) / kRdyBV);
    } else if (K <= 128) {
      launch_fwd_h_bt<TK, 128>(a, vec, maps, tma, device, s);
    } else {
      launch_fwd_h_bt<TK, 256>(a, vec, maps, tma, device, s);
    }
  });
}

}  // namespace

int64_t chunk_gated_delta_rule_intra_first_blocks(const FwdHArgs& a, int device) {
  static const bool allowed = !env_switched_off("FUSEOPS_GDN_INTRA_FIRST");
  const DType dt = a.k.dtype;
  const bool same = (dt == DType::bf16 || dt == DType::f16) && a.w.dtype == dt && a.u.dtype == dt &&
                    a.h.dtype == dt && a.v_new.dtype == dt;
  // fwd_h's variant of few heads (V blocks of 16 columns, four buffers, tensor maps, wgmma; one block per SM) on one
  // sequence of at least kIntraFirstMinChunks chunks
  const bool form = allowed && !intra_first_off_for_testing.load(std::memory_order_relaxed) && same &&
                    a.geo.BT == 64 && a.geo.K == 128 && a.V == 128 && a.geo.B == 1 && !a.geo.cu_seqlens &&
                    a.geo.T >= kIntraFirstMinChunks * 64 && a.geo.T <= INT32_MAX &&
                    fwd_h_blocks(a, 32) < kFillBlocks && tma_switched_on() && wgmma_switched_on() &&
                    gdn::rows_16b(a.w, a.geo.K) && gdn::rows_16b(a.k, a.geo.K) && is_sm90_or_newer(device) &&
                    runs_sm90a_code(device) && pdl_enabled(device);
  if (!form) return 0;
  // the SMs fwd_h leaves free, less a margin (fewer blocks, less traffic beside fwd_h's chain: 60 of 68 free SMs
  // measured 3-4% faster at 2/8 [32768] than 68), if enough to keep ahead of fwd_h: 7.5 per value head
  const int64_t blocks = sm_count(device) - fwd_h_blocks(a, 16) - kIntraFirstSpareSms;
  return 2 * blocks >= 15 * a.geo.HV ? blocks : 0;
}

bool chunk_gated_delta_rule_fwd_h_o(const FwdHArgs& a, int device, void* stream) {
  const char* op = "chunk_gated_delta_rule";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.geo.BT != 64 || !launch_fwd_h_tc(a, device, s, true)) return false;
  after_launch(op, s, device);
  return true;
}
void set_fwd_h_o_off_for_testing(bool off) { fwd_h_o_off_for_testing.store(off, std::memory_order_relaxed); }
int64_t fwd_h_o_launches_for_testing() { return fwd_h_o_launches.load(std::memory_order_relaxed); }

void set_fwd_h_tma_off_for_testing(bool off) { fwd_h_tma_off_for_testing.store(off, std::memory_order_relaxed); }
void set_fwd_h_wgmma_off_for_testing(bool off) { fwd_h_wgmma_off_for_testing.store(off, std::memory_order_relaxed); }
void set_intra_first_off_for_testing(bool off) { intra_first_off_for_testing.store(off, std::memory_order_relaxed); }
int64_t intra_first_launches_for_testing() { return intra_first_launches.load(std::memory_order_relaxed); }

unsigned chunk_gated_delta_rule_fwd_h(const FwdHArgs& a, int device, void* stream) {
  const char* op = "chunk_gated_delta_rule_fwd_h";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  if (a.geo.BT != 16 && a.geo.BT != 32 && a.geo.BT != 64) {
    throw Error(ErrorKind::invalid_argument, std::string(op) + ": unsupported chunk size");
  }
  unsigned counted = 0;
  if (!launch_fwd_h_tc(a, device, s, false, &counted)) {
    switch (a.geo.BT) {
      case 16: launch_fwd_h_ffma<16>(a, device, s); break;
      case 32: launch_fwd_h_ffma<32>(a, device, s); break;
      default: launch_fwd_h_ffma<64>(a, device, s); break;
    }
  }
  after_launch(op, s, device);
  return counted;
}

}  // namespace fuseops::detail::cuda
