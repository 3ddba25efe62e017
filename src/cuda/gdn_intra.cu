// CUDA backend of the GDN intra-chunk ops: chunk_local_cumsum, chunk_scaled_dot_kkt_fwd, solve_tril and the fused
// chunk_gated_delta_rule_fwd_kkt_solve (include/fuseops/gdn.h; math in docs/ops/gdn.md).
//
// Work decomposition. A "slot" is one chunk of one sequence: chunk_slots(geo) slots are launched along grid.x (a
// grid-stride loop covers any count) and mapped to chunks on the device, without host synchronisation and without a
// prefix sum over the sequences (resolve_chunk in gdn_intra.cuh; slots that hold no chunk exit). grid.y runs over
// heads (looped past 65535).
//  - kkt and fused: one 256-thread block per (chunk, KEY head). It loads the chunk's k rows once into shared memory,
//    forms the Gram matrix K K^T once (tensor cores for f16 / bf16, FFMA for f32), then for each of the key head's
//    value heads builds the fp32 kkt tile from it (beta, exp(g_i - g_j), mask) and either stores it (kkt) or inverts
//    it in shared memory and stores the inverse (fused). When the grid would be too small to fill the GPU, the value
//    heads of a key head are split over several blocks (each recomputes the Gram).
//    Work that only feeds rows past a short chunk's end (Gram tiles, kkt rows, diagonal blocks, block merges) is
//    skipped, so a chunk of 16 tokens costs far less than a full one (varlen batches of short sequences).
//    The fused op's grids beyond one wave at chunk 64 with 16-bit k and output take gdn_intra_warp.cu's kernel
//    instead: one warp per (chunk, value head), the same arithmetic (the same bytes).
//  - solve_tril: one block per (chunk, value head): load the strictly lower part as fp32, invert, store.
//  - cumsum: one warp per (chunk, group of 8 value heads): the group's g staged in shared memory by one round of
//    loads, then a lane per head, sequential fp32 sums.
// Kkt and fused are one kernel template (kSolve), and all numerics live in shared routines of gdn_intra.cuh: that is
// what makes the fused op bitwise identical to kkt (f32 A) + solve_tril.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <type_traits>

#include "cuda/device_error.h"
#include "cuda/gdn_cumsum.cuh"
#include "cuda/gdn_intra.cuh"
#include "cuda/gdn_intra_warp.h"
#include "cuda/launch.h"
#include "fuseops/error.h"
#include "ops/gdn_impl.h"

namespace fuseops::detail::cuda {
namespace {

using gdn::ChunkRef;
using gdn::kThreads;
using gdn::kWarps;

/// Register caps. The kkt / fused op comes in two kernels (bench/results/h200/gdn.md): kkt_pipelined_kernel at
/// kThroughputBlocks = 4 blocks of 256 threads per SM (64 registers; the solve routines want ~60, a few loop variables
/// are spilled around them to L1; 3 blocks measured 10% slower) for grids of several waves, and kkt_kernel at
/// kLatencyBlocks = 2 (128 registers, no spills: each block finishes sooner) for grids that fit in one wave of 2
/// blocks per SM. solve_tril always uses the first cap. The fused kernel and
/// solve_tril also come in an FFMA-inverse and a tensor-core-inverse variant (kTc, by output dtype), so neither holds
/// the registers of both; docs/ops/gdn-log.md "Intra-chunk stage" lists registers and spills of each.
constexpr int kThroughputBlocks = 4;
constexpr int kLatencyBlocks = 2;

// ---------------------------------------------------------------------------------------------------------------
// Kernels

/// Launch-time constants of the kkt / fused kernel.
struct KktParams {
  int64_t slots;      ///< chunk slots along x
  int group;          ///< G = HV / H value heads per key head
  int heads_per_cta;  ///< value heads of one key head handled by one block
  int parts;          ///< blocks per (chunk, key head) = ceil(G / heads_per_cta)
  int kp;             ///< K padded to the Gram step (16 for f16 / bf16, 4 for f32)
  int ld;             ///< k tile row stride (elements)
  bool k_vec;         ///< 16-byte loads of k rows
  int k_row_shift;    ///< gdn::load_k_tile's row_shift (gdn::k_tile_row_shift)
  bool out_vec;       ///< 16-byte stores of output rows
  DeviceErrorRecord* errors;
};

/// Bytes of the k tile [BT][ld] (TK) in the kkt kernels' dynamic shared memory, rounded up to 16.
template <typename TK, int BT>
__host__ __device__ constexpr std::size_t kkt_k_bytes(int ld) {
  return (static_cast<std::size_t>(BT) * ld * sizeof(TK) + 15) / 16 * 16;
}
/// Bytes of the fp32 A tile [BT][BT + 4] and, for the fused op, the merge scratch.
template <int BT, bool kSolve>
constexpr std::size_t kkt_f_bytes() {
  return (gdn::kTileFloats<BT> + (kSolve ? gdn::kScratchFloats<BT> : 0)) * sizeof(float);
}

/// Dynamic shared memory of the kkt kernels: kkt_kernel puts the A tile in the bytes of the k tile (dead once the Gram
/// is formed); kkt_pipelined_kernel keeps them apart, so the next work item's k rows land while this one's A is
/// built and inverted.
template <typename TK, int BT, bool kSolve, bool kPipelined>
std::size_t kkt_smem_bytes(int ld) {
  return kPipelined ? kkt_k_bytes<TK, BT>(ld) + kkt_f_bytes<BT, kSolve>()
                    : std::max(kkt_k_bytes<TK, BT>(ld), kkt_f_bytes<BT, kSolve>());
}

/// The tiles of a kkt kernel in its dynamic shared memory `smem`, laid out as kkt_smem_bytes counts them.
template <typename TK, int BT, bool kPipelined>
struct KktTiles {
  TK* ks;          ///< k tile [BT][ld]
  float* tile;     ///< fp32 A tile [BT][kTileLd]
  float* scratch;  ///< merge scratch (fused op)
  __device__ __forceinline__ KktTiles(float4* smem, int ld)
      : ks(reinterpret_cast<TK*>(smem)),
        tile(reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(smem) +
                                      (kPipelined ? kkt_k_bytes<TK, BT>(ld) : 0))),
        scratch(tile + gdn::kTileFloats<BT>) {}
};

/// The value heads [begin, end) of key unit y (a key head, or a share of its value heads), and its key head.
struct UnitHeads {
  int hk, begin, end;
};
__device__ __forceinline__ UnitHeads unit_heads(const KktParams& prm, int y) {
  const int hk = prm.parts == 1 ? y : y / prm.parts;  // no integer division in the usual case
  const int begin = hk * prm.group + (y - hk * prm.parts) * prm.heads_per_cta;
  return {hk, begin, min(begin + prm.heads_per_cta, (hk + 1) * prm.group)};
}

/// The value heads of one (chunk, key unit) once its Gram is formed and gate_beta holds the first head's g / beta:
/// per head the kkt tile, then either its store (kSolve = false) or its inverse and that store. Ends with a barrier.
template <typename TK, int BT, bool kSolve, bool kTc>
__device__ __forceinline__ void kkt_heads(const gdn::Gram<TK, BT>& gram, float* gate_beta, float* tile,
                                          float* scratch, const KktArgs& args, const GdnOut& out,
                                          const KktParams& prm, const ChunkRef& ch, const UnitHeads& u) {
  const int tid = static_cast<int>(threadIdx.x);
  float gb = 0.f;
  for (int hv = u.begin; hv < u.end; ++hv) {
    gram.kkt_tile(gate_beta, ch.len, tile);
    __syncthreads();
    const bool next = hv + 1 < u.end;  // prefetch the next value head's g / beta behind the solve
    if (next && tid < 2 * BT) gb = gdn::load_gate_or_beta<BT>(args, ch, hv + 1, tid);
    if constexpr (kSolve) gdn::invert_unit_lower<BT, kTc>(tile, scratch, ch.len);
    gdn::store_tile_rows<BT>(tile, out, ch, hv, prm.out_vec);
    if (next && tid < 2 * BT) gate_beta[tid] = gb;
    __syncthreads();
  }
}

/// kSolve = false: chunk_scaled_dot_kkt_fwd (out = A). kSolve = true: the fused op (out = (I + A)^{-1}).
/// kTc: gdn::tensor_core_inverse(out.dtype) (false without kSolve); a template parameter so each variant holds the
/// registers of one inverse only.
/// The latency kernel, for grids of at most one wave of kLatencyBlocks blocks per SM (each block then has one work
/// item, usually): one item after the other, the A tile in the k tile's bytes.
template <typename TK, int BT, bool kSolve, bool kTc>
__global__ void __launch_bounds__(kThreads, kLatencyBlocks)
    kkt_kernel(const KktArgs args, const GdnOut out, const KktParams prm) {
  pdl_wait_and_release();
  extern __shared__ float4 smem[];
  const KktTiles<TK, BT, false> tiles(smem, prm.ld);
  TK* ks = tiles.ks;
  float* tile = tiles.tile;  // in the k tile's bytes
  float* scratch = tiles.scratch;
  __shared__ ChunkRef chunk;
  __shared__ float gate_beta[2 * BT];  // g then beta of the chunk's rows, current value head
  const int tid = static_cast<int>(threadIdx.x);
  const int key_units = static_cast<int>(args.geo.H) * prm.parts;

  for (int64_t slot = blockIdx.x; slot < prm.slots; slot += gridDim.x) {
    __syncthreads();  // the previous slot is done with `chunk` and the tiles
    if (tid < 32) {
      const ChunkRef c = gdn::resolve_chunk<BT>(args.geo, slot, prm.errors, blockIdx.y == 0);
      if (tid == 0) chunk = c;
    }
    __syncthreads();
    const ChunkRef ch = chunk;
    if (ch.len == 0) continue;

    for (int y = blockIdx.y; y < key_units; y += gridDim.y) {
      const UnitHeads u = unit_heads(prm, y);
      gdn::load_k_tile<TK, BT>(ks, prm.ld, prm.kp, args.k, args.geo.K, ch, u.hk, prm.k_vec, prm.k_row_shift);
      const float gb = tid < 2 * BT ? gdn::load_gate_or_beta<BT>(args, ch, u.begin, tid) : 0.f;  // with the copies
      cp_async_wait_all();
      if (tid < 2 * BT) gate_beta[tid] = gb;
      __syncthreads();
      gdn::Gram<TK, BT> gram;
      gram.compute(ks, prm.ld, prm.kp, ch.len);
      __syncthreads();  // the k tile is dead: the A tile takes its bytes
      kkt_heads<TK, BT, kSolve, kTc>(gram, gate_beta, tile, scratch, args, out, prm, ch, u);
    }
  }
}

/// One work item of a kkt block: a chunk slot, a key unit y and the slot's chunk (len 0: no item left).
struct KktItem {
  int64_t slot;
  int y;
  ChunkRef ch;
};

/// The block's first work item (`first`) or the one after `it`, skipping empty slots: y steps over the key units by
/// gridDim.y, then the slot by gridDim.x (the walk order of kkt_kernel). Called by warp 0 (resolve_chunk is a warp
/// routine); lane 0 writes it.
template <int BT>
__device__ void find_item(const KktArgs& args, const KktParams& prm, int key_units, KktItem it, bool first,
                          KktItem& dst) {
  if (first) {
    it = {static_cast<int64_t>(blockIdx.x), static_cast<int>(blockIdx.y), ChunkRef{0, 0, 0}};
    if (it.slot < prm.slots) it.ch = gdn::resolve_chunk<BT>(args.geo, it.slot, prm.errors, blockIdx.y == 0);
  } else {
    it.y += gridDim.y;
  }
  while (it.slot < prm.slots && (it.y >= key_units || it.ch.len == 0)) {
    it.y = blockIdx.y;
    it.slot += gridDim.x;
    it.ch = ChunkRef{0, 0, 0};
    if (it.slot < prm.slots) it.ch = gdn::resolve_chunk<BT>(args.geo, it.slot, prm.errors, blockIdx.y == 0);
  }
  if (it.slot >= prm.slots) it.ch.len = 0;
  if ((threadIdx.x & 31) == 0) dst = it;
}

/// The throughput kernel, for grids of several waves (kThroughputBlocks blocks per SM, each walking many items):
/// once an item's Gram is formed its k tile is free, and the copies of the next item's k rows (and its first g /
/// beta) are issued there, so they land while this item's kkt tiles are built, inverted and stored. Same items, same
/// arithmetic as kkt_kernel (the same bytes).
template <typename TK, int BT, bool kSolve, bool kTc>
__global__ void __launch_bounds__(kThreads, kThroughputBlocks)
    kkt_pipelined_kernel(const KktArgs args, const GdnOut out, const KktParams prm) {
  pdl_wait_and_release();
  extern __shared__ float4 smem[];
  const KktTiles<TK, BT, true> tiles(smem, prm.ld);
  TK* ks = tiles.ks;
  float* tile = tiles.tile;  // apart from the k tile
  float* scratch = tiles.scratch;
  __shared__ KktItem next;
  __shared__ float gate_beta[2 * BT];  // g then beta of the chunk's rows, current value head
  const int tid = static_cast<int>(threadIdx.x);
  const int key_units = static_cast<int>(args.geo.H) * prm.parts;

  if (tid < 32) find_item<BT>(args, prm, key_units, KktItem{}, true, next);
  __syncthreads();
  KktItem cur = next;
  if (cur.ch.len == 0) return;
  auto issue = [&](const KktItem& it) {  // the k rows and the first value head's g / beta of an item
    const UnitHeads u = unit_heads(prm, it.y);
    gdn::load_k_tile<TK, BT>(ks, prm.ld, prm.kp, args.k, args.geo.K, it.ch, u.hk, prm.k_vec, prm.k_row_shift);
    return tid < 2 * BT ? gdn::load_gate_or_beta<BT>(args, it.ch, u.begin, tid) : 0.f;
  };
  float gb = issue(cur);

  for (;;) {
    __syncthreads();  // every thread has read `next` (below) for the previous item
    if (tid < 32) find_item<BT>(args, prm, key_units, cur, false, next);  // behind the copies
    cp_async_wait_all();
    if (tid < 2 * BT) gate_beta[tid] = gb;
    __syncthreads();
    const UnitHeads u = unit_heads(prm, cur.y);
    gdn::Gram<TK, BT> gram;
    gram.template compute<true>(ks, prm.ld, prm.kp, cur.ch.len);
    __syncthreads();  // the k tile is free
    const bool more = next.ch.len > 0;
    if (more) gb = issue(next);
    kkt_heads<TK, BT, kSolve, kTc>(gram, gate_beta, tile, scratch, args, out, prm, cur.ch, u);
    if (!more) break;
    cur = next;
  }
}

struct SolveParams {
  int64_t slots;
  bool a_vec;    ///< 16-byte loads of A rows
  bool out_vec;  ///< 16-byte stores of Ai rows
  DeviceErrorRecord* errors;
};

/// kTc: gdn::tensor_core_inverse(out.dtype), the same rule as the fused kkt_kernel.
template <int BT, bool kTc>
__global__ void __launch_bounds__(kThreads, kThroughputBlocks)
    solve_tril_kernel(const GdnGeometry geo, const GdnIn A, const GdnOut out, const SolveParams prm) {
  pdl_wait_and_release();
  __shared__ __align__(16) float tile[gdn::kTileFloats<BT>];
  __shared__ __align__(16) float scratch[gdn::kScratchFloats<BT> > 0 ? gdn::kScratchFloats<BT> : 4];
  __shared__ ChunkRef chunk;
  const int tid = static_cast<int>(threadIdx.x);

  for (int64_t slot = blockIdx.x; slot < prm.slots; slot += gridDim.x) {
    __syncthreads();
    if (tid < 32) {
      const ChunkRef c = gdn::resolve_chunk<BT>(geo, slot, prm.errors, blockIdx.y == 0);
      if (tid == 0) chunk = c;
    }
    __syncthreads();
    const ChunkRef ch = chunk;
    if (ch.len == 0) continue;

    for (int hv = blockIdx.y; hv < geo.HV; hv += gridDim.y) {
      gdn::load_a_tile<BT>(tile, A, ch, hv, prm.a_vec);
      __syncthreads();
      gdn::invert_unit_lower<BT, kTc>(tile, scratch, ch.len);
      gdn::store_tile_rows<BT>(tile, out, ch, hv, prm.out_vec);
      __syncthreads();
    }
  }
}

/// One warp per unit (chunk slot, group of kCumsumHeads heads), 8 per block (gdn_cumsum.cuh).
template <int BT>
__global__ void __launch_bounds__(kThreads)
    cumsum_kernel(const CumsumArgs args, int64_t units, int64_t groups, float scale, DeviceErrorRecord* errors) {
  pdl_wait_and_release();
  __shared__ float cumsum_buf[kWarps][BT * gdn::kCumsumHeads];
  const int warp = static_cast<int>(threadIdx.x / 32);
  gdn::cumsum_units<BT, gdn::kCumsumHeads>(args, units, groups, scale, errors, blockIdx.x, gridDim.x, cumsum_buf[warp]);
}

// ---------------------------------------------------------------------------------------------------------------
// Host side

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

/// Whether 16-byte accesses of `vec` elements work at every (b, t, h) row start of x: base aligned and every stride
/// of a dimension longer than 1 a multiple of `vec`.
bool rows_vectorizable(const GdnIn& x, int64_t vec, int64_t B, int64_t T, int64_t heads) {
  return aligned16(x.data) && (B <= 1 || x.stride_b % vec == 0) && (T <= 1 || x.stride_t % vec == 0) &&
         (heads <= 1 || x.stride_h % vec == 0);
}

unsigned grid_x(int64_t slots) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(slots, INT_MAX)));
}
unsigned grid_y(int64_t units) { return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(units, 65535))); }

template <typename TK, int BT, bool kSolve>
void launch_kkt_as(const char* op, const KktArgs& a, const GdnOut& out, int device, cudaStream_t stream) {
  const GdnGeometry& geo = a.geo;
  KktParams prm{};
  prm.slots = gdn::chunk_slots(geo);
  const int64_t group = geo.HV / geo.H;
  // Split a key head's value heads over several blocks only when (chunks x key heads) cannot fill the GPU.
  const gdn::HeadSplit split = gdn::split_value_heads(prm.slots * geo.H, group, 4LL * sm_count(device));
  prm.group = static_cast<int>(group);
  prm.heads_per_cta = split.heads_per_cta;
  prm.parts = split.parts;
  prm.kp = static_cast<int>((geo.K + gdn::k_step<TK>() - 1) / gdn::k_step<TK>() * gdn::k_step<TK>());
  prm.ld = gdn::k_tile_ld<TK>(prm.kp);
  constexpr int64_t kVec = 16 / sizeof(TK);
  prm.k_vec = geo.K % kVec == 0 && rows_vectorizable(a.k, kVec, geo.B, geo.T, geo.H);
  prm.k_row_shift = gdn::k_tile_row_shift<TK>(prm.kp);
  prm.out_vec = aligned16(out.data);
  prm.errors = geo.cu_seqlens ? cuda_error_record(device) : nullptr;

  // At most kCtasPerSm blocks per SM in all: each block walks several chunk slots (the per-block setup is paid less
  // often and the last wave is shorter); measured 1-3% faster than one block per slot on the large shapes.
  constexpr int64_t kCtasPerSm = 8;
  const int64_t gy = std::max<int64_t>(1, std::min<int64_t>(geo.H * prm.parts, 65535));
  const int64_t gx = std::min<int64_t>(prm.slots, std::max<int64_t>(1, kCtasPerSm * sm_count(device) / gy));
  const bool latency = gx * gy <= int64_t{kLatencyBlocks} * sm_count(device);
  if constexpr (kSolve && BT == 64 && sizeof(TK) == 2) {
    // Grids beyond one wave of the latency kernel: one warp per (chunk, value head), the same bytes (its one-unit
    // chain is longer than the latency kernel's 8-warp one, so one-wave grids keep that; bench/results/h200/gdn.md,
    // thirty-third session).
    if (gdn::kkt_solve_warp_applies(a, out, prm.kp, prm.k_vec, device, latency)) {
      gdn::WarpKktParams wp{};
      wp.slots = prm.slots;
      wp.group = prm.group;
      wp.kp = prm.kp;
      wp.kboxes = static_cast<int>((geo.K + 63) / 64);
      wp.errors = prm.errors;
      if (gdn::launch_kkt_solve_warp(op, a, out, wp, device, stream)) return;
    }
  }
  auto pick = [latency](auto tc) {
    constexpr bool kTc = decltype(tc)::value;
    return latency ? kkt_kernel<TK, BT, kSolve, kTc> : kkt_pipelined_kernel<TK, BT, kSolve, kTc>;
  };
  // the inverse by output dtype, as in solve_tril (BT = 16 has no merges: one variant)
  auto kernel = kSolve && gdn::tensor_core_inverse(out.dtype) ? pick(std::bool_constant<kSolve && BT >= 32>{})
                                                              : pick(std::false_type{});
  const std::size_t smem = latency ? kkt_smem_bytes<TK, BT, kSolve, false>(prm.ld)
                                   : kkt_smem_bytes<TK, BT, kSolve, true>(prm.ld);
  allow_smem(kernel, smem, op);  // f32 k with K > 160 at BT = 64 (K = 256: 66.5 KB; 88 KB pipelined)
  launch_kernel(kernel, dim3(grid_x(gx), grid_y(gy)), dim3(kThreads), smem, stream, device, a,
                out, prm);
}

template <typename TK, bool kSolve>
void launch_kkt_bt(const char* op, const KktArgs& a, const GdnOut& out, int device, cudaStream_t stream) {
  switch (a.geo.BT) {
    case 16: launch_kkt_as<TK, 16, kSolve>(op, a, out, device, stream); break;
    case 32: launch_kkt_as<TK, 32, kSolve>(op, a, out, device, stream); break;
    case 64: launch_kkt_as<TK, 64, kSolve>(op, a, out, device, stream); break;
    default: throw Error(ErrorKind::invalid_argument, std::string(op) + ": unsupported chunk size");
  }
}

template <bool kSolve>
void launch_kkt(const char* op, const KktArgs& a, const GdnOut& out, int device, void* stream) {
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  switch (a.k.dtype) {
    case DType::f32: launch_kkt_bt<float, kSolve>(op, a, out, device, s); break;
    case DType::f16: launch_kkt_bt<__half, kSolve>(op, a, out, device, s); break;
    case DType::bf16: launch_kkt_bt<__nv_bfloat16, kSolve>(op, a, out, device, s); break;
    default: throw Error(ErrorKind::invalid_argument, std::string(op) + ": unsupported k dtype");
  }
  after_launch(op, s, device);
}

}  // namespace

void chunk_local_cumsum(const CumsumArgs& args, int device, void* stream) {
  const char* op = "chunk_local_cumsum";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  const gdn::CumsumLaunch c = gdn::cumsum_launch(args, gdn::kCumsumHeads, op, device);
  auto go = [&](auto kernel) {
    launch_kernel(kernel, dim3(grid_x((c.units + kWarps - 1) / kWarps)), dim3(kThreads), 0, s, device, args, c.units,
                  c.groups, c.scale, c.errors);
  };
  switch (args.geo.BT) {
    case 16: go(cumsum_kernel<16>); break;
    case 32: go(cumsum_kernel<32>); break;
    case 64: go(cumsum_kernel<64>); break;
    default: throw Error(ErrorKind::invalid_argument, std::string(op) + ": unsupported chunk size");
  }
  after_launch(op, s, device);
}

void chunk_scaled_dot_kkt_fwd(const KktArgs& args, const GdnOut& A, int device, void* stream) {
  launch_kkt<false>("chunk_scaled_dot_kkt_fwd", args, A, device, stream);
}

void chunk_gated_delta_rule_fwd_kkt_solve(const KktArgs& args, const GdnOut& Ai, int device, void* stream) {
  launch_kkt<true>("chunk_gated_delta_rule_fwd_kkt_solve", args, Ai, device, stream);
}

void solve_tril(const GdnGeometry& geo, const GdnIn& A, const GdnOut& Ai, int device, void* stream) {
  const char* op = "solve_tril";
  DeviceGuard guard(device, op);
  const auto s = static_cast<cudaStream_t>(stream);
  SolveParams prm{};
  prm.slots = gdn::chunk_slots(geo);
  prm.a_vec = rows_vectorizable(A, static_cast<int64_t>(16 / dtype_size(A.dtype)), geo.B, geo.T, geo.HV);
  prm.out_vec = aligned16(Ai.data);
  prm.errors = geo.cu_seqlens ? cuda_error_record(device) : nullptr;
  const dim3 grid(grid_x(prm.slots), grid_y(geo.HV));
  auto go = [&](auto kernel) { launch_kernel(kernel, grid, dim3(kThreads), 0, s, device, geo, A, Ai, prm); };
  const bool tc = gdn::tensor_core_inverse(Ai.dtype);  // the same rule as the fused op
  switch (geo.BT) {
    case 16: go(solve_tril_kernel<16, false>); break;
    case 32: tc ? go(solve_tril_kernel<32, true>) : go(solve_tril_kernel<32, false>); break;
    case 64: tc ? go(solve_tril_kernel<64, true>) : go(solve_tril_kernel<64, false>); break;
    default: throw Error(ErrorKind::invalid_argument, std::string(op) + ": unsupported chunk size");
  }
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
