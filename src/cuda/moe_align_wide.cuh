// Device code of the wide variant of moe_align_block_size (plan: common/moe_align_wide.h; docs/ops/moe-log.md,
// "moe_align_block_size: wide variant"): C independent thread block clusters of CL blocks (C divides CL), G = C * CL
// blocks in all. Block b = c * CL + r (cluster c, rank r) owns the slice [b S, (b + 1) S) of the flat ids; block r
// of every cluster also counts chunk r = [r C S, (r + 1) C S), so that the CL chunks of one cluster are all the ids
// and cluster c's first owned id is the start of chunk c CL / C. No global scratch, no state shared between
// clusters (each cluster counts all ids itself), two cluster barriers:
//  1. load: the owned ids (rounds of 32 per warp, all in flight: align_load_slots, which records bad ids) and the
//     chunk's ids (16-byte loads where the ids are contiguous i32); chunk histogram with shared atomics
//     (order-free);
//  2. rank: per round, the lanes of one expert find each other with log2(E) ballots (no __match_any_sync) and take
//     consecutive ranks after the warp's running count of that expert;
//  3. exclusive prefix of the warp counts per expert (lane w of a warp holds warp w's count: one shuffle scan per
//     expert), the block's owned counts; cluster barrier;
//  4. from the cluster's histograms and owned counts through distributed shared memory: every expert's total and
//     the ids of that expert before this block's slice (the chunks before the cluster, then the owned slices of
//     lower ranks); region starts = exclusive scan of the padded totals (every block computes them);
//  5. every owned id goes to start + earlier + warp prefix + rank; padding, expert_ids and num_tokens_post_pad:
//     align_fill over all G blocks; second cluster barrier before leaving (the peers' shared memory is read).
// Tokens of one expert land in ascending flat order: blocks, warps, rounds and lanes ascend with the flat index.
#pragma once

#include <cstdio>

#include "common/moe_align_wide.h"
#include "cuda/moe_align.cuh"

namespace fuseops::detail::cuda {

/// Arrives at the cluster barrier without release semantics (cluster_arrive releases): for "this block has read the
/// peers' shared memory" (the loaded values are consumed before the arrive), so that no block leaves too early.
__device__ __forceinline__ void cluster_arrive_relaxed(unsigned blocks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (blocks > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
  (void)blocks;
}

static_assert(kMoeAlignWideMaxExperts <= (1 << kAlignPeerBits), "one ballot per bit of the expert");

/// Counts one raw id of a chunk (after the map, if any) in `hist` [E + 1]: ids outside [0, E) and map entries
/// outside [0, E) go to the trash counter hist[E], which is never read (no branch around the atomic; bad ids are
/// recorded by the block owning them).
__device__ __forceinline__ void align_count_id(const AlignParams& p, int id, int* hist) {
  const unsigned E = static_cast<unsigned>(p.E);
  unsigned e = static_cast<unsigned>(id) < E ? static_cast<unsigned>(id) : E;
  if (p.expert_map) {  // uniform
    const int m = e < E ? p.expert_map[static_cast<int64_t>(e) * p.map_stride] : -1;
    e = static_cast<unsigned>(m) < E ? static_cast<unsigned>(m) : E;
  }
  atomicAdd(&hist[e], 1);
}

/// Ids known to be in [0, E), contiguous i32 and unmapped (moe_route's, from its own router): counted and loaded
/// without the range checks, the map and the error records.
struct TrustedIds {
  __device__ __forceinline__ int operator()(const AlignParams& p, int i) const {
    return static_cast<const int32_t*>(p.ids)[i];
  }
};

/// align_count_id, or (TRUSTED) the plain count of an id known to be in [0, E).
template <bool TRUSTED>
__device__ __forceinline__ void align_count(const AlignParams& p, int id, int* hist) {
  if constexpr (TRUSTED) {
    atomicAdd(&hist[id], 1);
  } else {
    align_count_id(p, id, hist);
  }
}

/// Step 1's chunk [lo, hi): contiguous i32 ids are read with 16-byte loads from `mid` (the first 16-byte boundary
/// at or after lo), `nv` vectors, the head [lo, mid) and the tail [mid + 4 nv, hi) one id per thread.
struct AlignChunk {
  int64_t lo, hi, mid, nv;
  bool vec;
};

constexpr int kAlignChunkVectors = 4;  ///< 16-byte loads per thread in flight (16 ids)

/// Step 1a, before the counters are zeroed: the chunk's split and this thread's first kAlignChunkVectors vectors
/// (in flight while the block zeroes its counters).
__device__ __forceinline__ AlignChunk align_chunk_preload(const AlignParams& p, int64_t lo, int64_t hi,
                                                          int4 (&x)[kAlignChunkVectors]) {
  constexpr int64_t nt = 32 * kMoeAlignWideWarps;
  AlignChunk c{lo, hi, lo, 0, !p.ids_i64 && p.ids_stride == p.ids_cols};
  if (c.vec) {
    const int32_t* ids = static_cast<const int32_t*>(p.ids);
    const int64_t head = (4 - ((reinterpret_cast<uintptr_t>(ids + lo) >> 2) & 3)) & 3;
    c.mid = min(hi, lo + head);
    c.nv = (hi - c.mid) / 4;
    const int4* v = reinterpret_cast<const int4*>(ids + c.mid);
#pragma unroll
    for (int u = 0; u < kAlignChunkVectors; ++u) {
      const int64_t b = threadIdx.x + u * nt;
      x[u] = b < c.nv ? v[b] : make_int4(-1, -1, -1, -1);
    }
  }
  return c;
}

/// Step 1b: the chunk's histogram (shared atomics, order-free), starting with the preloaded vectors; i64 or strided
/// ids one at a time, 8 per thread in flight. TRUSTED: TrustedIds (contiguous i32, so the vector path).
template <bool TRUSTED>
__device__ __forceinline__ void align_chunk_count(const AlignParams& p, const AlignChunk& c,
                                                  const int4 (&x)[kAlignChunkVectors], int* hist) {
  constexpr int64_t nt = 32 * kMoeAlignWideWarps;
  const int64_t tid = threadIdx.x;
  if (c.vec) {
    const int32_t* ids = static_cast<const int32_t*>(p.ids);
    const int4* v = reinterpret_cast<const int4*>(ids + c.mid);
    const int64_t tail = c.mid + 4 * c.nv;
    if (c.lo + tid < c.mid) align_count<TRUSTED>(p, ids[c.lo + tid], hist);
    if (tail + tid < c.hi) align_count<TRUSTED>(p, ids[tail + tid], hist);
    int4 y[kAlignChunkVectors];
#pragma unroll
    for (int u = 0; u < kAlignChunkVectors; ++u) y[u] = x[u];
    for (int64_t b = tid; b < c.nv;) {
#pragma unroll
      for (int u = 0; u < kAlignChunkVectors; ++u) {
        if (b + u * nt < c.nv) {  // no atomics for the missing vectors (they would all hit the trash counter)
          align_count<TRUSTED>(p, y[u].x, hist);
          align_count<TRUSTED>(p, y[u].y, hist);
          align_count<TRUSTED>(p, y[u].z, hist);
          align_count<TRUSTED>(p, y[u].w, hist);
        }
      }
      b += kAlignChunkVectors * nt;
#pragma unroll
      for (int u = 0; u < kAlignChunkVectors; ++u) y[u] = b + u * nt < c.nv ? v[b + u * nt] : make_int4(-1, -1, -1, -1);
    }
    return;
  }
  constexpr int U = 8;
  for (int64_t b = c.lo + tid; b < c.hi; b += U * nt) {
    int id[U];
#pragma unroll
    for (int u = 0; u < U; ++u) id[u] = b + u * nt < c.hi ? align_load_id(p, static_cast<int>(b + u * nt)) : -1;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (b + u * nt < c.hi) align_count_id(p, id[u], hist);
    }
  }
}

/// Step 4 for ranks [r0, r0 + 8) of the cluster: adds their histogram counts of expert e to `all` (and to `earlier`
/// for the chunks before `first`) and their owned counts to `earlier` for the ranks below `rank`; the 16 remote
/// loads are all in flight at once.
__device__ __forceinline__ void align_wide_peer_sums(int* hist, int* owned, int e, unsigned r0, unsigned cl,
                                                     unsigned rank, unsigned first, int& all, int& earlier) {
  int h[8], o[8];
#pragma unroll
  for (unsigned u = 0; u < 8; ++u) {
    const unsigned r = r0 + u, rr = r < cl ? r : rank;  // a valid rank even where the load is skipped
    h[u] = r < cl ? cluster_peer(hist, rr)[e] : 0;
    o[u] = r < rank ? cluster_peer(owned, rr)[e] : 0;
  }
#pragma unroll
  for (unsigned u = 0; u < 8; ++u) {
    all += h[u];
    earlier += (r0 + u < first ? h[u] : 0) + o[u];
  }
}

/// The wide schedule (see the top of the file); `slice`: S. Launched as clusters of 2 to kMoeAlignWideMaxCluster
/// blocks of kMoeAlignWideWarps warps, with moe_align_wide_smem_words(E) ints of shared memory (16-byte aligned);
/// R: ids per lane of the slice; TRUSTED: the ids are TrustedIds.
template <int R, bool TRUSTED = false>
inline __device__ void align_wide(const AlignParams& p, int64_t slice, int* smem) {
  constexpr int W = kMoeAlignWideWarps, NT = 32 * W;
  static_assert(kMoeAlignWideMaxExperts <= NT, "one expert per thread in steps 3 and 4");
  const int E = p.E, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const unsigned cl = cluster_blocks(), rank = cluster_rank();
  const unsigned lg = static_cast<unsigned>(__ffs(static_cast<int>(cl)) - 1);  // cl is a power of two (the plan's)
  const unsigned clusters = gridDim.x >> lg, c = blockIdx.x >> lg;  // (a division's ~15 instructions before the loads)
  const int zero = static_cast<int>(moe_align_wide_zeroed_words(E));
  int* cnt = smem;              // [W][E]: per-warp counts, then their exclusive prefix over warps
  int* hist = cnt + W * E;      // [E + 1]: ids of each expert in this block's chunk; [E]: skipped ids
  int* owned = smem + zero;     // [E]: ids of each expert in this block's slice
  int* start = owned + E;       // [E + 1]: region starts
  int* count = start + E + 1;   // [E]: totals
  int* before = count + E;      // [E]: ids of each expert before this block's slice
  int* local = before + E;      // [E]: block-local starts (exclusive prefix of the owned counts)
  int* scratch = local + E;     // [64]
  unsigned* stage = reinterpret_cast<unsigned*>(scratch + 64);  // [slice]: (expert << 16) | (flat - lo)
  const int64_t n = p.numel;
  const int lo = static_cast<int>(min(n, static_cast<int64_t>(blockIdx.x) * slice));
  const int hi = static_cast<int>(min(n, lo + slice));
  const int per_warp = (hi - lo + W - 1) / W;
  const int wlo = min(hi, lo + warp * per_warp), whi = min(hi, wlo + per_warp);
  // 1. Owned ids and the chunk's first ids in flight while the counters are zeroed; the chunk's histogram; then the
  //    owned ids mapped (bad ones recorded).
  int slot[R];
  if constexpr (TRUSTED) {
    align_load_raw<R, TrustedIds>(p, wlo, whi, lane, slot);
  } else {
    align_load_raw<R>(p, wlo, whi, lane, slot);
  }
  const int64_t chunk = static_cast<int64_t>(clusters) * slice;
  int4 first_vectors[kAlignChunkVectors];
  const AlignChunk ch = align_chunk_preload(p, min(n, rank * chunk), min(n, (rank + 1) * chunk), first_vectors);
  for (int i = tid; i < zero / 4; i += NT) reinterpret_cast<int4*>(smem)[i] = make_int4(0, 0, 0, 0);
  __syncthreads();  // counters zeroed
  align_chunk_count<TRUSTED>(p, ch, first_vectors, hist);
  // 2. Ranks within the warp.
  if constexpr (!TRUSTED) align_map_settle<R>(p, wlo, lane, slot);
  int* my_cnt = cnt + warp * E;
  align_rank_slots<R>(wlo, whi, lane, my_cnt, slot, BallotPeers{});
  __syncthreads();
  // 3. Warp prefixes (thread e walks expert e's 32 counters, 8 loads at a time) and the owned counts.
  int own = 0;
  if (tid < E) {
#pragma unroll
    for (int w = 0; w < W; w += 8) {
      int x[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) x[u] = cnt[(w + u) * E + tid];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        cnt[(w + u) * E + tid] = own;
        own += x[u];
      }
    }
    owned[tid] = own;
  }
  cluster_arrive(cl);  // histograms and owned counts visible to the cluster
  cluster_wait(cl);
  // 4. Thread e: expert e's total and ids before this slice (DSMEM), its padded size; region starts and block-local
  //    starts = exclusive block scans of the padded sizes and of the owned counts (warp scans, then every warp
  //    scans the 32 warp totals).
  int padded = 0;
  if (tid < E) {
    int all = 0, earlier = 0;
    static_assert(kMoeAlignWideMaxCluster == 8, "one group of 8 peers");
    align_wide_peer_sums(hist, owned, tid, 0, cl, rank, c * (cl / clusters), all, earlier);
    before[tid] = earlier;
    count[tid] = all;
    padded = static_cast<int>(moe_round_up(all, p.block_size));
  }
  cluster_arrive_relaxed(cl);  // this block has read the peers' memory
  // Only the warps holding experts scan (the others hit the two barriers): the scans' shuffles of all 32 warps were
  // the longest of the block's short steps (a clock64 trace: about 1 900 cycles).
  const int ew = (E + 31) >> 5;  // warps holding an expert (warp-uniform tests below)
  int in_warp[2] = {padded, own};  // inclusive sums over the warp's threads, then exclusive ones
  if (warp < ew) {
    warp_inclusive_scan(in_warp, lane);
    if (lane == 31) {
      scratch[warp] = in_warp[0];
      scratch[32 + warp] = in_warp[1];
    }
    in_warp[0] -= padded;
    in_warp[1] -= own;
  }
  __syncthreads();
  if (warp < ew) {
    int over_warps[2] = {lane < ew ? scratch[lane] : 0, lane < ew ? scratch[32 + lane] : 0};  // over the warps
    warp_inclusive_scan(over_warps, lane);
    const int prev = (warp + 31) & 31;
    const int base = __shfl_sync(0xffffffffu, over_warps[0], prev);
    const int own_base = __shfl_sync(0xffffffffu, over_warps[1], prev);
    const int total = __shfl_sync(0xffffffffu, over_warps[0], 31);
    if (tid < E) {
      start[tid] = (warp > 0 ? base : 0) + in_warp[0];
      local[tid] = (warp > 0 ? own_base : 0) + in_warp[1];
    }
    if (tid == 0) start[E] = total;
  }
  __syncthreads();
  const int staged = local[E - 1] + owned[E - 1];  // the ids this block owns
  // 5. The owned ids to their block-local sorted positions, then copied out in that order (each expert's run of
  //    this block lands in one piece: coalesced stores); this block's share of the padding, expert_ids and the tail.
#pragma unroll
  for (int j = 0; j < R; ++j) {
    if (slot[j] >= 0) {
      const int e = slot[j] >> 16;
      stage[local[e] + my_cnt[e] + (slot[j] & 0xffff)] =
          (static_cast<unsigned>(e) << 16) | static_cast<unsigned>(wlo + 32 * j + lane - lo);
    }
  }
  __syncthreads();
  for (int q = tid; q < staged; q += NT) {
    const unsigned v = stage[q];
    const int e = static_cast<int>(v >> 16);
    p.sorted[start[e] + before[e] + q - local[e]] = lo + static_cast<int>(v & 0xffffu);
  }
  align_fill(p, start, count, gridDim.x, blockIdx.x);
  cluster_wait(cl);  // no block leaves while another may still read its histogram or owned counts
}

}  // namespace fuseops::detail::cuda
