// Device code of moe_align_block_size (and the schedule half of moe_route): one kernel of CL thread blocks forming a
// thread block cluster (sm_90; CL = 1 elsewhere and for small inputs). Block r owns the flat ids [lo_r, hi_r), each
// warp a contiguous slice of them, so "ascending flat index" is (block, warp, round, lane) order:
//  1. count: every warp counts its slice per expert in its own shared row cnt[w][.] (shared atomics);
//  2. per expert: exclusive prefix of the warp counts (in place) and the block total; cluster barrier; every block
//     reads the other blocks' totals through distributed shared memory: the expert's total and the count of the
//     blocks before it; cluster barrier (no block leaves while others read its shared memory);
//  3. region starts: block-wide exclusive scan of the totals rounded up to block_size;
//  4. scatter: the warp walks its slice again in order; lanes routed to the same expert find each other with
//     __match_any_sync, take consecutive ranks in lane order, and the lowest of them advances the warp's counter;
//  5. padding (numel), expert_ids of every block (binary search of the region starts; -1 past the end) and
//     num_tokens_post_padded, spread over all threads of the cluster.
// Nothing is written at an address derived from a bad id: those are skipped (and recorded in the count pass).
#pragma once

#include <cooperative_groups.h>

#include <cstdint>

#include "common/moe_math.h"
#include "cuda/device_error.cuh"

namespace fuseops::detail::cuda {

/// Kernel parameters of the schedule (see AlignArgs).
struct AlignParams {
  const void* ids;  ///< read with plain loads: moe_route writes them in the same kernel
  int64_t ids_stride;
  int ids_cols;
  int ids_i64;
  int numel;
  int32_t* sorted;
  int sorted_len;
  int32_t* expert_ids;
  int blocks;
  int32_t* total;
  const int32_t* expert_map;  ///< nullptr when absent
  int64_t map_stride;
  int E, block_size;
  DeviceErrorRecord* record;
  uint32_t ids_site, map_site;
};

/// Shared memory of the schedule for `warps` warps and E experts, in int32 words.
inline int64_t align_smem_words(int warps, int64_t E) { return (warps + 4) * E + 1 + 32; }

__device__ __forceinline__ unsigned cluster_blocks() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().num_blocks();
#else
  return 1;
#endif
}

__device__ __forceinline__ unsigned cluster_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().block_rank();
#else
  return 0;
#endif
}

/// Barrier of every thread of the cluster (of the block when not launched as a cluster).
__device__ __forceinline__ void cluster_barrier(unsigned blocks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (blocks > 1) {
    cooperative_groups::this_cluster().sync();
    return;
  }
#endif
  (void)blocks;
  __syncthreads();
}

/// `p` (in this block's shared memory) as seen in block `rank` of the cluster.
__device__ __forceinline__ const int* cluster_peer(int* p, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  return cooperative_groups::this_cluster().map_shared_rank(p, rank);
#else
  (void)rank;
  return p;
#endif
}

/// The local expert of flat id i, or -1 when it is skipped; records bad values when `record`.
__device__ __forceinline__ int align_expert(const AlignParams& p, int i, bool record) {
  const int r = i / p.ids_cols, c = i - r * p.ids_cols;
  const int64_t off = static_cast<int64_t>(r) * p.ids_stride + c;
  const int64_t id = p.ids_i64 ? static_cast<const int64_t*>(p.ids)[off] : static_cast<const int32_t*>(p.ids)[off];
  if (id == -1) return -1;
  if (id < -1 || id >= p.E) {
    if (record) record_device_error(p.record, p.ids_site, i);
    return -1;
  }
  if (!p.expert_map) return static_cast<int>(id);
  const int l = p.expert_map[id * p.map_stride];
  if (l < -1 || l >= p.E) {
    if (record) record_device_error(p.record, p.map_site, id);
    return -1;
  }
  return l;
}

/// In-place exclusive scan of v[0..n) by the whole block; v[n] = the total. `scratch`: 32 ints.
__device__ __forceinline__ void block_exclusive_scan(int* v, int n, int* scratch) {
  const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5;
  const int per = (n + nt - 1) / nt, lo = min(n, tid * per), hi = min(n, lo + per);
  int sum = 0;
  for (int e = lo; e < hi; ++e) sum += v[e];
  int incl = sum;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) scratch[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int w = lane < static_cast<int>(nt >> 5) ? scratch[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    scratch[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  int run = incl - sum + (warp > 0 ? scratch[warp - 1] : 0);
  for (int e = lo; e < hi; ++e) {
    const int x = v[e];
    v[e] = run;
    run += x;
  }
  if (tid == nt - 1) v[n] = run;
  __syncthreads();
}

/// The schedule of the flat ids [lo, hi) of this block; every block of the cluster calls it with its own slice
/// (slices ascending with the block rank). `smem`: align_smem_words(blockDim.x / 32, E) ints.
inline __device__ void align_schedule(const AlignParams& p, int lo, int hi, int* smem) {
  const int E = p.E, tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5, warps = nt >> 5;
  const unsigned cl = cluster_blocks(), rank = cluster_rank();
  int* cnt = smem;                 // [warps][E]
  int* block_total = cnt + warps * E;  // [E], read by the other blocks
  int* before = block_total + E;   // [E]: ids of this expert in earlier blocks
  int* count = before + E;         // [E]: ids of this expert in all blocks
  int* start = count + E;          // [E + 1]: padded counts, then region starts
  int* scratch = start + E + 1;    // [32]
  for (int i = tid; i < warps * E; i += nt) cnt[i] = 0;
  __syncthreads();
  const int per_warp = (hi - lo + warps - 1) / warps;
  const int wlo = min(hi, lo + warp * per_warp), whi = min(hi, wlo + per_warp);
  int* my_cnt = cnt + warp * E;
  // 1. Count.
  for (int b = wlo; b < whi; b += 32) {
    const int i = b + lane;
    const int e = i < whi ? align_expert(p, i, true) : -1;
    if (e >= 0) atomicAdd(&my_cnt[e], 1);
  }
  __syncthreads();
  // 2. Per expert: prefix over warps, block total; then the cluster-wide view.
  for (int e = tid; e < E; e += nt) {
    int run = 0;
    for (int w = 0; w < warps; ++w) {
      const int c = cnt[w * E + e];
      cnt[w * E + e] = run;
      run += c;
    }
    block_total[e] = run;
  }
  cluster_barrier(cl);
  for (int e = tid; e < E; e += nt) {
    int all = 0, earlier = 0;
    for (unsigned r = 0; r < cl; ++r) {
      const int c = cluster_peer(block_total, r)[e];
      all += c;
      if (r < rank) earlier += c;
    }
    before[e] = earlier;
    start[e] = static_cast<int>(moe_round_up(all, p.block_size));
    count[e] = all;
  }
  cluster_barrier(cl);
  // 3. Region starts.
  block_exclusive_scan(start, E, scratch);
  const int total = start[E];
  for (int i = tid; i < warps * E; i += nt) cnt[i] += start[i % E] + before[i % E];
  __syncthreads();
  // 4. Scatter in flat-index order.
  const unsigned lt = (1u << lane) - 1u;
  for (int b = wlo; b < whi; b += 32) {
    const int i = b + lane;
    const int e = i < whi ? align_expert(p, i, false) : -1;
    const unsigned peers = __match_any_sync(0xffffffffu, e);
    const int pos = e >= 0 ? my_cnt[e] + __popc(peers & lt) : 0;
    __syncwarp();
    if (e >= 0 && (peers & lt) == 0) my_cnt[e] += __popc(peers);
    __syncwarp();
    if (e >= 0) p.sorted[pos] = i;
  }
  // 5. Padding, expert_ids, num_tokens_post_padded.
  const int gt = static_cast<int>(rank) * nt + tid, gstride = static_cast<int>(cl) * nt;
  for (int e = gt; e < E; e += gstride) {
    for (int j = start[e] + count[e]; j < start[e + 1]; ++j) p.sorted[j] = p.numel;
  }
  for (int j = total + gt; j < p.sorted_len; j += gstride) p.sorted[j] = p.numel;
  for (int blk = gt; blk < p.blocks; blk += gstride) {
    int v = -1;
    const int64_t pos = static_cast<int64_t>(blk) * p.block_size;
    if (pos < total) {
      int a = 0, z = E - 1;  // largest e with start[e] <= pos
      while (a < z) {
        const int m = (a + z + 1) >> 1;
        if (start[m] <= pos) a = m;
        else z = m - 1;
      }
      v = a;
    }
    p.expert_ids[blk] = v;
  }
  if (gt == 0) *p.total = total;
}

}  // namespace fuseops::detail::cuda
