// Experiment: the bound of the GDN decode kernel's state access pattern on the H200, without its arithmetic. One
// decode step at Qwen3-Next-80B size (256 sequences x 32 value heads x 128 x 128 f32 state = 537 MB, read and written
// once in place: 1.07 GB moved) against a contiguous copy kernel of the same bytes. Each pattern kernel moves the
// state as decode_warp_kernel (src/cuda/gdn_decode.cu) does at K = V = 128: persistent warps, a unit = (head,
// 16-column slice), lane (kg = lane / 4, vl = lane % 4) moves rows kg 16 .. kg 16 + 15, columns slice 16 + 4 vl .. + 3
// as 16-byte pieces, staged into shared memory by cp.async.cg one unit ahead, written back (+1) with st.global.cs. What
// varies is the unit order, the block shape and the unit's footprint:
//   order "kernel": warp w of the grid's W takes units w, w + W, ... (the 8 slices of a head go to 8 consecutive
//                   warps: 4 blocks of 2 warps, 2 of 4, 1 block of 8; 6 or 12 warps: a head in 2 blocks);
//   order "chunk":  warp w takes the contiguous units [w U / W, (w + 1) U / W) (it walks a head's 8 slices in turn);
//   order "rows":   as "kernel", but a unit is 16 whole consecutive 512-byte rows (8 KB contiguous; each warp-wide
//                   access is one whole row): the same staging machinery with a copy's footprint.
//   order "wide32": a unit = (head, 32-column slice), lane (r = lane / 8, c = lane % 8) moves rows 4 j + r, columns
//                   slice 32 + 4 c .. + 3 for j < 32 (each warp-wide access = 4 rows x 128 bytes; 16 KB per buffer).
//   orders "kernel loads, rows stores" and "rows loads, kernel stores": the loads of one footprint, the stores of the
//                   other, to tell which side costs (in place, so the stores race with later loads: a timing probe
//                   only; the "touched exactly once" check reports it).
// Blocks per SM are fixed with padding shared memory (the grid is the resident blocks, as the kernel's).
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90a bench/experiments/gdn_decode_pattern.cu -o /tmp/pattern && /tmp/pattern
// Times: median us per launch of 15 replays of a CUDA graph of 4 launches (the 537 MB state is > 10x L2: cold).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "graph_timing.cuh"

constexpr int64_t kHeads = 256 * 32;       // sequences x value heads
constexpr int64_t kHeadElems = 128 * 128;  // K x V
constexpr int64_t kElems = kHeads * kHeadElems;
constexpr int kRows = 16;                  // rows per lane
constexpr int kSlices = 8;                 // 16-column slices per head
constexpr int64_t kUnits = kHeads * kSlices;

enum Order { kKernel = 0, kChunk = 1, kRowsOrder = 2, kWide32 = 3, kNarrowLoadRowStore = 4, kRowLoadNarrowStore = 5 };

/// 16-byte pieces per lane and unit, units, and shared bytes per warp (two buffers).
__host__ __device__ constexpr int pieces_of(int order) { return order == kWide32 ? 32 : kRows; }
__host__ __device__ constexpr int64_t units_of(int order) { return order == kWide32 ? kHeads * 4 : kUnits; }
__host__ __device__ constexpr int warp_smem(int order) { return 2 * pieces_of(order) * 32 * 16; }
/// The footprints the loads and the stores of ORDER follow.
__host__ __device__ constexpr int load_order(int order) {
  return order == kNarrowLoadRowStore ? kKernel : order == kRowLoadNarrowStore ? kRowsOrder : order;
}
__host__ __device__ constexpr int store_order(int order) {
  return order == kNarrowLoadRowStore ? kRowsOrder : order == kRowLoadNarrowStore ? kKernel : order;
}

/// Element index of lane `lane`'s piece j of unit u.
template <int ORDER>
__device__ __forceinline__ int64_t piece(int64_t u, int lane, int j) {
  if constexpr (ORDER == kRowsOrder) return u * (kRows * 128) + j * 128 + lane * 4;
  if constexpr (ORDER == kWide32) {
    return (u / 4) * kHeadElems + static_cast<int64_t>(j * 4 + lane / 8) * 128 + (u % 4) * 32 + (lane % 8) * 4;
  }
  const int64_t head = u / kSlices, sl = u % kSlices;
  const int kg = lane / 4, vl = lane % 4;
  return head * kHeadElems + static_cast<int64_t>(kg * kRows + j) * 128 + sl * 16 + vl * 4;
}

template <int ORDER>
__device__ __forceinline__ void stage(const float* state, int64_t u, int lane, float4 (*buf)[32]) {
#pragma unroll
  for (int j = 0; j < pieces_of(ORDER); ++j) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(&buf[j][lane]));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst),
                 "l"(state + piece<load_order(ORDER)>(u, lane, j))
                 : "memory");
  }
}

template <int WB, int ORDER>
__global__ void __launch_bounds__(WB * 32) pattern_rmw(float* state) {
  extern __shared__ __align__(16) float4 smem[];
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  constexpr int P = pieces_of(ORDER);
  float4(*bufs)[P][32] = reinterpret_cast<float4(*)[P][32]>(smem) + 2 * warp;
  const int64_t gw = static_cast<int64_t>(blockIdx.x) * WB + warp, nw = static_cast<int64_t>(gridDim.x) * WB;
  int64_t u = gw, end = units_of(ORDER), step = nw;
  if constexpr (ORDER == kChunk) {
    u = gw * kUnits / nw;
    end = (gw + 1) * kUnits / nw;
    step = 1;
  }
  if (u < end) stage<ORDER>(state, u, lane, bufs[0]);
  asm volatile("cp.async.commit_group;" ::: "memory");
  for (int b = 0; u < end; u += step, b ^= 1) {
    if (u + step < end) stage<ORDER>(state, u + step, lane, bufs[b ^ 1]);
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 1;" ::: "memory");
#pragma unroll
    for (int j = 0; j < P; ++j) {
      float4 x = bufs[b][j][lane];
      x.x += 1.f;
      x.y += 1.f;
      x.z += 1.f;
      x.w += 1.f;
      __stcs(reinterpret_cast<float4*>(state + piece<store_order(ORDER)>(u, lane, j)), x);
    }
  }
  asm volatile("cp.async.wait_all;" ::: "memory");
}

/// Contiguous reference kernels: copy src -> dst, or in place x + 1 (plain or streaming stores); 4 float4 per thread.
template <int MODE>  // 0 copy, 1 in place plain stores, 2 in place streaming stores
__global__ void __launch_bounds__(256) contiguous(const float4* src, float4* dst, int64_t n4) {
  const int64_t i0 = static_cast<int64_t>(blockIdx.x) * 1024 + threadIdx.x;
  float4 v[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    if (i0 + r * 256 < n4) v[r] = src[i0 + r * 256];
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    if (i0 + r * 256 >= n4) continue;
    if (MODE == 0) {
      dst[i0 + r * 256] = v[r];
    } else {
      float4 x = v[r];
      x.x += 1.f;
      x.y += 1.f;
      x.z += 1.f;
      x.w += 1.f;
      if (MODE == 1) dst[i0 + r * 256] = x;
      else __stcs(dst + i0 + r * 256, x);
    }
  }
}

__global__ void count_not(const float* p, int64_t n, float want, unsigned long long* bad) {
  unsigned long long c = 0;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    c += p[i] != want;
  }
  if (c) atomicAdd(bad, c);
}

constexpr double kMoved = 2.0 * kElems * 4;  // bytes read + written
double ref_us = 0;                           // the contiguous copy kernel (x copy = ref_us / us)

void row(const char* name, double us) {
  std::printf("| %s | %.1f | %.0f | %.3f |\n", name, us, kMoved / us / 1e3, ref_us / us);
}

template <int WB, int ORDER>
void pattern(const char* order, int per_sm, float* state, unsigned long long* bad) {
  int sms = 0, smem_sm = 0, smem_optin = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
  CK(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  const auto k = pattern_rmw<WB, ORDER>;
  const int smem = std::min(smem_optin, std::max(WB * warp_smem(ORDER), smem_sm / per_sm - 1024));
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int resident = 0;
  CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&resident, k, WB * 32, smem));
  char name[128];
  std::snprintf(name, sizeof name, "pattern %s, %d-warp blocks, %d blocks/SM (%d warps/SM)", order, WB, resident,
                resident * WB);
  if (resident != per_sm) std::printf("(asked %d blocks/SM)\n", per_sm);
  const unsigned grid = static_cast<unsigned>(resident * sms);
  // every element exactly once: one launch on zeros leaves all ones
  CK(cudaMemset(state, 0, kElems * 4));
  CK(cudaMemset(bad, 0, sizeof *bad));
  k<<<grid, WB * 32, smem>>>(state);
  count_not<<<1024, 256>>>(state, kElems, 1.f, bad);
  unsigned long long nbad = 0;
  CK(cudaMemcpy(&nbad, bad, sizeof nbad, cudaMemcpyDeviceToHost));
  if (nbad) std::printf("%s: %llu elements not touched exactly once\n", name, nbad);
  row(name, time_graph_us([&](int, cudaStream_t s) { k<<<grid, WB * 32, smem, s>>>(state); }));
}

int main() {
  float *a, *b;
  unsigned long long* bad;
  CK(cudaMalloc(&a, kElems * 4));
  CK(cudaMalloc(&b, kElems * 4));
  CK(cudaMalloc(&bad, sizeof *bad));
  CK(cudaMemset(a, 0, kElems * 4));
  CK(cudaMemset(b, 0, kElems * 4));
  const int64_t n4 = kElems / 4;
  const unsigned blocks = static_cast<unsigned>((n4 + 1023) / 1024);
  const auto f4 = [](float* p) { return reinterpret_cast<float4*>(p); };
  ref_us = time_graph_us([&](int, cudaStream_t s) { contiguous<0><<<blocks, 256, 0, s>>>(f4(a), f4(b), n4); });
  std::printf("state %.0f MB, %.2f GB moved per step\n\n| pattern | us | GB/s | x copy |\n|---|---|---|---|\n",
              kElems * 4 / 1e6, kMoved / 1e9);
  row("copy kernel -> other buffer", ref_us);
  // a memcpy node in a graph: much slower than the kernel here (H200: 389 us against 264)
  row("cudaMemcpyAsync (graph node) -> other buffer",
      time_graph_us([&](int, cudaStream_t s) { CK(cudaMemcpyAsync(b, a, kElems * 4, cudaMemcpyDeviceToDevice, s)); }));
  row("in place x + 1, plain stores",
      time_graph_us([&](int, cudaStream_t s) { contiguous<1><<<blocks, 256, 0, s>>>(f4(a), f4(a), n4); }));
  row("in place x + 1, streaming stores",
      time_graph_us([&](int, cudaStream_t s) { contiguous<2><<<blocks, 256, 0, s>>>(f4(a), f4(a), n4); }));
  pattern<2, kKernel>("kernel", 6, a, bad);
  pattern<2, kKernel>("kernel", 4, a, bad);
  pattern<4, kKernel>("kernel", 3, a, bad);
  pattern<6, kKernel>("kernel", 2, a, bad);
  pattern<8, kKernel>("kernel", 1, a, bad);
  pattern<12, kKernel>("kernel", 1, a, bad);
  pattern<2, kChunk>("chunk", 6, a, bad);
  pattern<8, kChunk>("chunk", 1, a, bad);
  pattern<2, kRowsOrder>("rows", 6, a, bad);
  pattern<4, kRowsOrder>("rows", 3, a, bad);
  pattern<8, kRowsOrder>("rows", 1, a, bad);
  pattern<4, kNarrowLoadRowStore>("kernel loads, rows stores", 3, a, bad);
  pattern<4, kRowLoadNarrowStore>("rows loads, kernel stores", 3, a, bad);
  pattern<1, kWide32>("wide32", 6, a, bad);
  pattern<2, kWide32>("wide32", 3, a, bad);
  pattern<1, kWide32>("wide32", 4, a, bad);
  pattern<2, kWide32>("wide32", 2, a, bad);
  pattern<4, kWide32>("wide32", 1, a, bad);
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(bad));
  return 0;
}
