// Device code of moe_align_block_size (and the schedule half of moe_route): one kernel of CL thread blocks forming a
// thread block cluster (sm_90; CL = 1 elsewhere and for small inputs), sized by moe_align_plan (common/moe_math.h).
// Block r owns the flat ids [lo_r, hi_r), each warp a contiguous slice of them, read in rounds of 32 (lane l of
// round j: id wlo + 32 j + l), so "ascending flat index" is (block, warp, round, lane) order. ROUNDS > 0:
//  1. load: every lane loads its ROUNDS ids at once (independent loads) and keeps them in registers;
//  2. rank: per round, lanes routed to the same expert find each other with __match_any_sync and take consecutive
//     ranks in lane order after the warp's running count of that expert (cnt[w][e] in shared memory);
//  3. per expert: exclusive prefix of the warp counts (in place) and the block total; block-local region starts
//     (scan of the totals); every id goes to its block-local sorted position in a shared staging buffer — while
//     the other blocks of the cluster reach the barrier;
//  4. cluster view: every block reads the other blocks' totals through distributed shared memory (the expert's
//     total and the count of the blocks before it), then scans the padded totals into region starts;
//  5. copy-out: the staging buffer goes to sorted_token_ids in order, so runs of one expert are written together
//     (coalesced) instead of one scattered store per id;
//  6. padding (numel), expert_ids and num_tokens_post_pad: one warp per few experts writes that expert's padding
//     run and its blocks, then the tail past the last region, spread over all threads of the cluster.
// ROUNDS == 0 (streamed fallback for inputs above the register capacity): 1-2 read the ids twice, counting with
// shared atomics, then scattering directly to global memory with the same match_any ranks.
// Nothing is written at an address derived from a bad id: those are skipped (and recorded in the load/count pass).
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

/// Split cluster barrier: every thread arrives (release: its earlier shared writes become visible to the cluster)
/// and later waits (acquire) for all threads of the cluster to have arrived. Arrive and wait alternate; both are
/// no-ops unless launched as a cluster of more than one block.
__device__ __forceinline__ void cluster_arrive(unsigned blocks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (blocks > 1) asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#endif
  (void)blocks;
}

__device__ __forceinline__ void cluster_wait(unsigned blocks) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (blocks > 1) asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
  (void)blocks;
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

/// Raw id of flat index i, as the schedule sees it: the id when in [-1, E), -2 when bad (no side effects, so that
/// a lane's loads can all be in flight at once).
__device__ __forceinline__ int align_load_id(const AlignParams& p, int i) {
  int64_t off = i;
  if (p.ids_stride != p.ids_cols) {  // rows with a pitch
    const int r = i / p.ids_cols, c = i - r * p.ids_cols;
    off = static_cast<int64_t>(r) * p.ids_stride + c;
  }
  const int64_t id = p.ids_i64 ? static_cast<const int64_t*>(p.ids)[off] : static_cast<const int32_t*>(p.ids)[off];
  return id < -1 || id >= p.E ? -2 : static_cast<int>(id);
}

/// Where the schedule reads its ids: topk_ids in global memory (align_load_id).
struct GlobalIds {
  __device__ __forceinline__ int operator()(const AlignParams& p, int i) const { return align_load_id(p, i); }
};

/// The local expert of a raw id >= 0: the map entry when in [-1, E), -3 when bad; the id itself without a map.
__device__ __forceinline__ int align_map(const AlignParams& p, int id) {
  if (!p.expert_map || id < 0) return id;
  const int l = p.expert_map[id * p.map_stride];
  return l < -1 || l >= p.E ? -3 : l;
}

/// Records a bad id (-2) or map entry (-3) of flat index i; returns the expert (-1: skipped).
__device__ __forceinline__ int align_settle(const AlignParams& p, int i, int e) {
  if (e == -2) record_device_error(p.record, p.ids_site, i);
  if (e == -3) record_device_error(p.record, p.map_site, align_load_id(p, i));
  return e < -1 ? -1 : e;
}

/// The first half of align_load_slots: the raw ids wlo + 32 j + lane as `ids` (align_load_id by default) reads
/// them (all in flight).
template <int R, typename Ids = GlobalIds>
__device__ __forceinline__ void align_load_raw(const AlignParams& p, int wlo, int whi, int lane, int (&slot)[R],
                                               Ids ids = {}) {
#pragma unroll
  for (int j = 0; j < R; ++j) {
    const int i = wlo + 32 * j + lane;
    slot[j] = i < whi ? ids(p, i) : -1;
  }
}

/// The second half of align_load_slots: maps the raw ids of align_load_raw and records the bad ones.
template <int R>
__device__ __forceinline__ void align_map_settle(const AlignParams& p, int wlo, int lane, int (&slot)[R]) {
  if (p.expert_map) {
#pragma unroll
    for (int j = 0; j < R; ++j) slot[j] = align_map(p, slot[j]);
  }
#pragma unroll
  for (int j = 0; j < R; ++j) {
    if (slot[j] < -1) slot[j] = align_settle(p, wlo + 32 * j + lane, slot[j]);
  }
}

/// Step 1 of the register variants: lane `lane` of the warp holding the flat ids [wlo, whi) loads its ids wlo + 32 j
/// + lane (all in flight at once), maps them and records the bad ones; slot[j] = the expert or -1 (skipped).
template <int R, typename Ids = GlobalIds>
__device__ __forceinline__ void align_load_slots(const AlignParams& p, int wlo, int whi, int lane, int (&slot)[R],
                                                 Ids ids = {}) {
  align_load_raw<R, Ids>(p, wlo, whi, lane, slot, ids);
  align_map_settle<R>(p, wlo, lane, slot);
}

/// The lanes of the warp holding the same id as this lane (__match_any_sync).
struct MatchPeers {
  __device__ __forceinline__ unsigned operator()(int e) const { return __match_any_sync(0xffffffffu, e); }
};

/// Bits of an expert that align_peers compares (experts below 1024: the small and wide variants).
constexpr int kAlignPeerBits = 10;
static_assert(kMoeAlignSmallMaxExperts <= (1 << kAlignPeerBits), "one ballot per bit of the expert");

/// The lanes holding the same expert as this lane when 0 <= e < 2^kAlignPeerBits: one ballot of the valid lanes and
/// one per bit of the expert, each folded in as m &= ~(ballot ^ s), s being all ones where this lane's bit is set
/// (no selects and no per-bit branches: the bits above log2 E are 0 on every valid lane, so they match; about 5
/// instructions per bit, against 11 with a select and a branch per bit). Independent ballots instead of
/// __match_any_sync, whose cost grows with the distinct values of the warp. Lanes with e < 0 get an unspecified mask
/// (and match no valid lane).
__device__ __forceinline__ unsigned align_peers(int e) {
  unsigned m = __ballot_sync(0xffffffffu, e >= 0);
#pragma unroll
  for (int b = 0; b < kAlignPeerBits; ++b) {
    const unsigned bit = (static_cast<unsigned>(e) >> b) & 1u;
    m &= ~(__ballot_sync(0xffffffffu, bit) ^ (0u - bit));
  }
  return m;
}

/// align_peers as the peer finder of align_rank_slots (step 2).
struct BallotPeers {
  __device__ __forceinline__ unsigned operator()(int e) const { return align_peers(e); }
};

/// Division by the block size and rounding up to it: shifts when it is a power of two (the usual sizes), else
/// integer division; the same values either way.
struct AlignBlockSize {
  int bs, shift;
  bool pow2;
  __device__ __forceinline__ explicit AlignBlockSize(int b) {
    bs = b;
    shift = __ffs(b) - 1;
    pow2 = (b & (b - 1)) == 0;
  }
  __device__ __forceinline__ int div(int x) const { return pow2 ? x >> shift : x / bs; }
  __device__ __forceinline__ int round_up(int x) const {
    return pow2 ? (x + bs - 1) & ~(bs - 1) : (x + bs - 1) / bs * bs;
  }
};

/// Step 2 of the register variants (after the warp's counters `my_cnt` [E] are zeroed and visible): per round, the
/// lanes of one expert find each other (`peers_of(e)`: the mask of the lanes holding expert e, needed for e >= 0
/// only) and take consecutive ranks in lane order after the warp's running count of that expert; slot[j] becomes
/// (expert << 16) | rank, or -1.
template <int R, typename Peers = MatchPeers>
__device__ __forceinline__ void align_rank_slots(int wlo, int whi, int lane, int* my_cnt, int (&slot)[R],
                                                 Peers peers_of = {}) {
  const unsigned lt = (1u << lane) - 1u;
#pragma unroll
  for (int j = 0; j < R; ++j) {
    if (wlo + 32 * j >= whi) break;  // warp-uniform
    const int e = slot[j];
    const unsigned peers = peers_of(e);
    const int r = e >= 0 ? my_cnt[e] + __popc(peers & lt) : 0;
    __syncwarp();
    if (e >= 0 && (peers & lt) == 0) my_cnt[e] += __popc(peers);
    __syncwarp();
    slot[j] = e >= 0 ? (e << 16) | r : -1;
  }
}

/// Inclusive prefix sums over the lanes of a warp, of each of the N values x[0..N) (shuffles up, log2 32 steps).
template <int N>
__device__ __forceinline__ void warp_inclusive_scan(int (&x)[N], int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
#pragma unroll
    for (int v = 0; v < N; ++v) {
      const int y = __shfl_up_sync(0xffffffffu, x[v], o);
      if (lane >= o) x[v] += y;
    }
  }
}

/// In-place exclusive scan of v[0..n) by the whole block; v[n] = the total. `scratch`: 32 ints. Callers make v
/// visible to the block (__syncthreads) before; it ends with one.
__device__ __forceinline__ void block_exclusive_scan(int* v, int n, int* scratch) {
  const int tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5;
  const int per = (n + nt - 1) / nt, lo = min(n, tid * per), hi = min(n, lo + per);
  int sum = 0;
  for (int e = lo; e < hi; ++e) sum += v[e];
  int incl[1] = {sum};
  warp_inclusive_scan(incl, lane);
  if (lane == 31) scratch[warp] = incl[0];
  __syncthreads();
  if (warp == 0) {
    int w[1] = {lane < static_cast<int>(nt >> 5) ? scratch[lane] : 0};
    warp_inclusive_scan(w, lane);
    scratch[lane] = w[0];  // inclusive over warps
  }
  __syncthreads();
  int run = incl[0] - sum + (warp > 0 ? scratch[warp - 1] : 0);
  for (int e = lo; e < hi; ++e) {
    const int x = v[e];
    v[e] = run;
    run += x;
  }
  if (tid == nt - 1) v[n] = run;
  __syncthreads();
}

/// Shared memory of the schedule (moe_align_smem_words ints).
struct AlignSmem {
  int* cnt;          // [warps][E]: per-warp counts, then their exclusive prefix over warps
  int* block_total;  // [E]: ids of this expert in this block, read by the other blocks
  int* local_start;  // [E + 1]: block-local region starts (ROUNDS > 0)
  int* before;       // [E]: ids of this expert in earlier blocks, then the copy-out shift
  int* count;        // [E]: ids of this expert in all blocks
  int* start;        // [E + 1]: padded counts, then region starts
  int* scratch;      // [32]
  unsigned* stage;   // [warps * 32 * ROUNDS]: (expert << 16) | (flat - lo) at the block-local sorted position
  __device__ AlignSmem(int* s, int warps, int E) {
    cnt = s;
    block_total = cnt + warps * E;
    local_start = block_total + E;
    before = local_start + E + 1;
    count = before + E;
    start = count + E;
    scratch = start + E + 1;
    stage = reinterpret_cast<unsigned*>(scratch + 32);
  }
};

/// Step 6: padding, expert_ids and num_tokens_post_pad from the region starts `start` [E + 1] (multiples of
/// block_size) and the counts `count` [E] in shared memory, by all threads of `parts` blocks (a cluster, or the
/// small variant's independent blocks), this one being `part`.
inline __device__ void align_fill(const AlignParams& p, const int* start, const int* count, unsigned parts,
                                  unsigned part) {
  const int E = p.E, bs = p.block_size, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  // Warps numbered across the parts first (warp w of part q is q + w * parts), so that consecutive experts go to
  // different blocks and every block gets a share.
  const int gw = static_cast<int>(part) + (threadIdx.x >> 5) * static_cast<int>(parts);
  const int gws = static_cast<int>(parts) * warps;
  const int per = min(32, max(1, (E + gws - 1) / gws));  // experts per warp and pass
  const int total = start[E];
  for (int e0 = gw * per; e0 < E; e0 += gws * per) {
    const int e = e0 + lane;
    int used = 0, hi = 0, blo = 0, bhi = 0;
    if (lane < per && e < E) {  // the divisions here, off the serial loop below
      const int lo = start[e];
      used = lo + count[e];
      hi = start[e + 1];
      blo = lo / bs;
      bhi = hi / bs;
    }
    unsigned busy = __ballot_sync(0xffffffffu, bhi > blo);
    while (busy) {
      const int src = __ffs(busy) - 1;
      busy &= busy - 1;
      const int u = __shfl_sync(0xffffffffu, used, src), h = __shfl_sync(0xffffffffu, hi, src);
      const int b0 = __shfl_sync(0xffffffffu, blo, src), b1 = __shfl_sync(0xffffffffu, bhi, src);
      for (int j = u + lane; j < h; j += 32) p.sorted[j] = p.numel;
      for (int b = b0 + lane; b < b1; b += 32) p.expert_ids[b] = e0 + src;
    }
  }
  const int gt = static_cast<int>(part * blockDim.x + threadIdx.x), gs = static_cast<int>(parts * blockDim.x);
  for (int j = total + gt; j < p.sorted_len; j += gs) p.sorted[j] = p.numel;
  for (int b = total / bs + gt; b < p.blocks; b += gs) p.expert_ids[b] = -1;
  if (gt == 0) *p.total = total;
}

/// Step 3's first half: cnt[w][e] -> exclusive prefix over the warps, block_total[e] = the block's count.
inline __device__ void align_warp_prefix(const AlignSmem& s, int E, int warps) {
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int run = 0, w = 0;
    for (; w + 8 <= warps; w += 8) {
      int c[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) c[u] = s.cnt[(w + u) * E + e];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        s.cnt[(w + u) * E + e] = run;
        run += c[u];
      }
    }
    for (; w < warps; ++w) {
      const int c = s.cnt[w * E + e];
      s.cnt[w * E + e] = run;
      run += c;
    }
    s.block_total[e] = run;
    s.local_start[e] = run;
  }
}

/// Step 4: the cluster's totals (after the first cluster barrier), then the region starts. Arrives at the second
/// cluster barrier once the peers' memory has been read; the caller waits on it before leaving.
inline __device__ void align_regions(const AlignParams& p, const AlignSmem& s, unsigned cl, unsigned rank) {
  const int E = p.E;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    int all = 0, earlier = 0;
    for (unsigned r = 0; r < cl; ++r) {
      const int c = r == rank ? s.block_total[e] : cluster_peer(s.block_total, r)[e];
      all += c;
      if (r < rank) earlier += c;
    }
    s.before[e] = earlier;
    s.start[e] = static_cast<int>(moe_round_up(all, p.block_size));
    s.count[e] = all;
  }
  cluster_arrive(cl);
  __syncthreads();
  block_exclusive_scan(s.start, E, s.scratch);
}

/// The schedule of the flat ids [lo, hi) of this block; every block of the cluster calls it with its own slice
/// (slices ascending with the block rank). `smem`: moe_align_smem_words(blockDim.x / 32, E, ROUNDS) ints; every
/// warp's slice holds at most 32 * ROUNDS ids when ROUNDS > 0.
template <int ROUNDS>
inline __device__ void align_schedule(const AlignParams& p, int lo, int hi, int* smem) {
  const int E = p.E, tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5, warps = nt >> 5;
  const unsigned cl = cluster_blocks(), rank = cluster_rank();
  const AlignSmem s(smem, warps, E);
  for (int i = tid; i < warps * E; i += nt) s.cnt[i] = 0;
  const int per_warp = (hi - lo + warps - 1) / warps;
  const int wlo = min(hi, lo + warp * per_warp), whi = min(hi, wlo + per_warp);
  int* my_cnt = s.cnt + warp * E;
  const unsigned lt = (1u << lane) - 1u;
  if constexpr (ROUNDS > 0) {
    // 1. Load (all of this lane's ids in flight together), then map and record.
    int slot[ROUNDS];
    align_load_slots<ROUNDS>(p, wlo, whi, lane, slot);
    __syncthreads();  // counters zeroed
    // 2. Ranks within the warp.
    align_rank_slots<ROUNDS>(wlo, whi, lane, my_cnt, slot);
    __syncthreads();
    // 3. Warp prefixes, block totals; block-local starts and staging while the other blocks arrive.
    align_warp_prefix(s, E, warps);
    cluster_arrive(cl);
    __syncthreads();
    block_exclusive_scan(s.local_start, E, s.scratch);
#pragma unroll
    for (int j = 0; j < ROUNDS; ++j) {
      if (slot[j] >= 0) {
        const int e = slot[j] >> 16;
        const int q = s.local_start[e] + my_cnt[e] + (slot[j] & 0xffff);
        s.stage[q] = (static_cast<unsigned>(e) << 16) | static_cast<unsigned>(wlo + 32 * j + lane - lo);
      }
    }
    // 4. The cluster's view and the region starts.
    cluster_wait(cl);
    align_regions(p, s, cl, rank);
    for (int e = tid; e < E; e += nt) s.before[e] += s.start[e] - s.local_start[e];
    __syncthreads();
    // 5. Copy-out in block-local sorted order.
    const int n = s.local_start[E];
    for (int q = tid; q < n; q += nt) {
      const unsigned v = s.stage[q];
      p.sorted[q + s.before[v >> 16]] = lo + static_cast<int>(v & 0xffffu);
    }
  } else {
    __syncthreads();
    // 1-2. Count.
    for (int b = wlo; b < whi; b += 32) {
      const int i = b + lane;
      const int e = i < whi ? align_settle(p, i, align_map(p, align_load_id(p, i))) : -1;
      if (e >= 0) atomicAdd(&my_cnt[e], 1);
    }
    __syncthreads();
    align_warp_prefix(s, E, warps);
    cluster_arrive(cl);
    cluster_wait(cl);
    align_regions(p, s, cl, rank);
    for (int e = tid; e < E; e += nt) s.before[e] += s.start[e];
    __syncthreads();
    // 5. Scatter in flat-index order.
    for (int b = wlo; b < whi; b += 32) {
      const int i = b + lane;
      int e = i < whi ? align_map(p, align_load_id(p, i)) : -1;
      e = e < -1 ? -1 : e;
      const unsigned peers = __match_any_sync(0xffffffffu, e);
      const int pos = e >= 0 ? s.before[e] + my_cnt[e] + __popc(peers & lt) : 0;
      __syncwarp();
      if (e >= 0 && (peers & lt) == 0) my_cnt[e] += __popc(peers);
      __syncwarp();
      if (e >= 0) p.sorted[pos] = i;
    }
  }
  // 6. Padding, expert_ids, num_tokens_post_pad.
  align_fill(p, s.start, s.count, cl, rank);
  cluster_wait(cl);  // no block leaves while another may still read its block totals
}

/// Where align_small writes sorted_token_ids and expert_ids (docs/ops/moe-log.md, "moe_align_block_size: small
/// variant"):
/// - kPrefilled: block `part` owns a contiguous chunk of sorted_token_ids and of expert_ids (AlignOwnedChunk), which
///   the caller has filled with numel / -1 (align_small_prefill) before the PDL wait (align_small_after_route_kernel:
///   the padding's stores overlap the router); after the schedule the block writes only the ids and the GEMM
///   blocks' experts that fall in its chunks. (The same fill issued after the PDL wait, while the ids load or the
///   tokens are routed, measured 0.3-0.5 us slower than a flat layout, where each block wrote its share of every
///   output word after the schedule; the flat layout measured slower than kFillWarp at every decode size.)
/// - kFillWarp: as kPrefilled, the fill done after the PDL wait by one more warp of the block
///   (align_small_fill_warp_kernel) while the kMoeAlignSmallWarps schedule warps synchronise among themselves only
///   (named barrier 1), meeting the fill warp (named barrier 2) just before they write their ids.
enum class AlignSmallOut { kPrefilled, kFillWarp };

/// Named barriers of the kFillWarp layout: the schedule warps among themselves, and with the fill warp.
constexpr int kAlignScheduleBarrier = 1, kAlignFillBarrier = 2;

/// A barrier of align_small's schedule warps: the whole block, or (kFillWarp) only the schedule warps.
template <AlignSmallOut OUT>
__device__ __forceinline__ void align_small_sync() {
  if constexpr (OUT == AlignSmallOut::kFillWarp) {
    asm volatile("bar.sync %0, %1;" ::"n"(kAlignScheduleBarrier), "n"(32 * kMoeAlignSmallWarps) : "memory");
  } else {
    __syncthreads();
  }
}

/// The chunks of sorted_token_ids [lo, hi) and expert_ids [blo, bhi) that block `part` of `parts` owns in align_small's
/// kPrefilled layout (sorted chunks a multiple of 4 words long).
struct AlignOwnedChunk {
  int lo, hi, blo, bhi;
  __device__ __forceinline__ AlignOwnedChunk(const AlignParams& p, unsigned parts, unsigned part) {
    // 32-bit unsigned: n < 2^31 and parts <= 64, so r * chunk + chunk <= n + chunk + 4 parts < 2^32 (two 32-bit
    // divisions instead of 64-bit ones on the schedule warps' chain).
    const unsigned n = static_cast<unsigned>(p.sorted_len), nb = static_cast<unsigned>(p.blocks), q = parts, r = part;
    const unsigned chunk = ((n + q - 1) / q + 3) / 4 * 4, bchunk = (nb + q - 1) / q;
    lo = static_cast<int>(min(n, r * chunk));
    hi = static_cast<int>(min(n, r * chunk + chunk));
    blo = static_cast<int>(min(nb, r * bchunk));
    bhi = static_cast<int>(min(nb, r * bchunk + bchunk));
  }
};

/// out[lo, hi) = v by threads tid of nt: 16-byte stores between the scalar head and tail (out is 4-byte aligned).
__device__ __forceinline__ void fill_words(int32_t* out, int lo, int hi, int v, int tid, int nt) {
  const int head = min(hi - lo, static_cast<int>((16u - (reinterpret_cast<uintptr_t>(out + lo) & 15u)) & 15u) >> 2);
  const int mid = lo + head, n4 = (hi - mid) >> 2, tail = mid + 4 * n4;
  if (tid < head) out[lo + tid] = v;
  int4* out4 = reinterpret_cast<int4*>(out + mid);
  for (int i = tid; i < n4; i += nt) out4[i] = make_int4(v, v, v, v);
  if (tail + tid < hi) out[tail + tid] = v;
}

/// The id-independent half of align_small's kPrefilled layout: block `part` fills its chunk of sorted_token_ids with
/// numel and its chunk of expert_ids with -1 (align_small later overwrites the ids and the used blocks' experts in
/// the same chunks, after a block barrier).
/// Threads tid of nt of the block do it (the whole block by default).
__device__ __forceinline__ void align_small_prefill(const AlignParams& p, unsigned parts, unsigned part,
                                                    int tid = static_cast<int>(threadIdx.x),
                                                    int nt = static_cast<int>(blockDim.x)) {
  const AlignOwnedChunk o(p, parts, part);
  fill_words(p.sorted, o.lo, o.hi, p.numel, tid, nt);
  for (int b = o.blo + tid; b < o.bhi; b += nt) p.expert_ids[b] = -1;
}

/// Small variant (moe_align_plan: replicas > 0; up to kMoeAlignSmallMaxIds ids and kMoeAlignSmallMaxExperts experts):
/// each of `parts` blocks of kMoeAlignSmallWarps (W) warps (this one being `part`: the grid of the standalone kernel,
/// or moe_route's blocks) computes the whole schedule from all ids (the ids are a few KB, read by every block from
/// L2) and writes its share of the outputs, so there is no shared state between blocks, and three block barriers:
///  1. the per-warp counters are zeroed (at most 8 vector stores per thread) and every lane loads its (at most
///     kMoeAlignSmallRounds) ids, warp w holding the contiguous slice [wlo, whi)
///     (align_load_slots);
///  2. ranks as in align_schedule (align_rank_slots), the peers from ballots of the experts' bits (align_peers);
///  3. thread t owns experts t, t + 32 W, ... (only as many segments of 32 W as E needs): exclusive prefix of the W
///     warp counts in place, the count, the padded size; warp scans of the padded sizes, the warp totals through 32
///     scratch words, scanned by every warp (one shuffle scan); every thread adds the totals before its (segment,
///     warp), writes its region starts and, for every GEMM block of its regions, the block's expert and its region's
///     first padding position;
///  4. block `part` owns a chunk of sorted_token_ids and of expert_ids (AlignOwnedChunk), filled with numel / -1 by
///     the caller (AlignSmallOut): it writes the ids that fall in its chunk (start[e] + warp prefix + rank) and the
///     used GEMM blocks' experts of its chunk of expert_ids.
/// Bad ids are recorded by every block (the same records: first site, smallest index). `smem`: 16-byte aligned,
/// moe_align_small_smem_words(E) ints. `ids`: where the ids are read (topk_ids in global memory by default).
template <AlignSmallOut OUT, typename Ids = GlobalIds>
__device__ __forceinline__ void align_small(const AlignParams& p, int* smem, unsigned parts, unsigned part,
                                            Ids ids = {}) {
  constexpr int W = kMoeAlignSmallWarps, R = kMoeAlignSmallRounds, NT = 32 * W;
  constexpr int VMAX = static_cast<int>((kMoeAlignSmallMaxExperts + NT - 1) / NT);
  static_assert(R >= 1 && 32 * W * R >= kMoeAlignSmallMaxIds, "ids per lane of the small variant");
  static_assert(VMAX * W <= 32, "scratch holds one total per (segment, warp)");
  const int E = p.E, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const AlignBlockSize bs(p.block_size);
  const int vn = (E + NT - 1) / NT;  // segments of NT experts in use (uniform)
  int* cnt = smem;                      // [W][E]
  int* start = cnt + W * E;             // [E + 1]
  int* count = start + E + 1;           // [E]
  int* scratch = count + E;             // [32]
  int* blk_expert = scratch + 32;       // [kMoeAlignSmallMaxIds]: expert of GEMM block b (b < total / block_size)
  const int per_warp = (p.numel + W - 1) / W;
  const int wlo = min(p.numel, warp * per_warp), whi = min(p.numel, wlo + per_warp);
  // 1. The counters zeroed (W * E is a multiple of 4; `smem` is 16-byte aligned), the ids loaded.
  for (int i = tid; i < W * E / 4; i += NT) reinterpret_cast<int4*>(cnt)[i] = make_int4(0, 0, 0, 0);
  int slot[R];
  align_load_slots<R, Ids>(p, wlo, whi, lane, slot, ids);
  align_small_sync<OUT>();
  // 2. Ranks within the warp.
  int* my_cnt = cnt + warp * E;
  align_rank_slots<R>(wlo, whi, lane, my_cnt, slot, BallotPeers{});
  align_small_sync<OUT>();
  // 3. Warp prefixes, counts and padded sizes of experts tid + v * NT; block scan of the padded sizes.
  int c[VMAX], incl[VMAX], own[VMAX];
#pragma unroll
  for (int v = 0; v < VMAX; ++v) {
    const int e = v * NT + tid;
    int run = 0;
    if (v < vn && e < E) {
      int x[W];
#pragma unroll
      for (int w = 0; w < W; ++w) x[w] = cnt[w * E + e];
#pragma unroll
      for (int w = 0; w < W; ++w) {
        cnt[w * E + e] = run;
        run += x[w];
      }
    }
    c[v] = run;
    own[v] = bs.round_up(run);
    incl[v] = own[v];
  }
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {  // warp_inclusive_scan over the segments in use
#pragma unroll
    for (int v = 0; v < VMAX; ++v) {
      if (v < vn) {
        const int y = __shfl_up_sync(0xffffffffu, incl[v], o);
        if (lane >= o) incl[v] += y;
      }
    }
  }
  if (lane == 31) {
#pragma unroll
    for (int v = 0; v < VMAX; ++v) {
      if (v < vn) scratch[v * W + warp] = incl[v];
    }
  }
  align_small_sync<OUT>();
  // The totals before (segment v, this warp) in (segment, warp) order, the order of the scratch words: one warp scan
  // of the vn * W <= 32 words (lane l holds word l), then a shuffle per segment.
  int sc[1] = {lane < vn * W ? scratch[lane] : 0};
  const int word = sc[0];
  warp_inclusive_scan(sc, lane);
  const int before = sc[0] - word;  // exclusive
  const int acc = __shfl_sync(0xffffffffu, sc[0], 31);
  int base[VMAX];
#pragma unroll
  for (int v = 0; v < VMAX; ++v) base[v] = __shfl_sync(0xffffffffu, before, (v * W + warp) & 31);
#pragma unroll
  for (int v = 0; v < VMAX; ++v) {
    const int e = v * NT + tid;
    if (v < vn && e < E) {
      const int lo = base[v] + incl[v] - own[v];
      start[e] = lo;
      count[e] = c[v];
      for (int b = bs.div(lo); b < bs.div(lo + own[v]); ++b) blk_expert[b] = e;  // at most one block per id
    }
  }
  const int total = acc;  // the grand total (every thread has it)
  align_small_sync<OUT>();
  const int blocks_used = bs.div(total);
  if constexpr (OUT == AlignSmallOut::kFillWarp) {  // the fill warp's stores before the ids (same addresses)
    asm volatile("bar.sync %0, %1;" ::"n"(kAlignFillBarrier), "n"(32 * (kMoeAlignSmallWarps + 1)) : "memory");
  }
  // 4. The ids and the used blocks' experts that fall in this block's chunks (the rest was prefilled).
  const AlignOwnedChunk o(p, parts, part);
#pragma unroll
  for (int j = 0; j < R; ++j) {
    if (slot[j] >= 0) {
      const int e = slot[j] >> 16, q = start[e] + my_cnt[e] + (slot[j] & 0xffff);
      if (q >= o.lo && q < o.hi) p.sorted[q] = wlo + 32 * j + lane;
    }
  }
  for (int b = o.blo + tid; b < min(o.bhi, blocks_used); b += NT) p.expert_ids[b] = blk_expert[b];
  if (part == 0 && tid == 0) *p.total = total;
}

}  // namespace fuseops::detail::cuda
