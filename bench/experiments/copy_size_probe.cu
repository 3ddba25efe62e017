// Experiment: how close a plain copy kernel gets to the copy-rate time at the byte counts of the rope prefill rows
// (issue 6's target is >= 0.92x the copy rate, i.e. <= 1.087x the copy-rate time, with the copy rate measured as
// `fuseops bench` measures it: one 1 GiB device-to-device cudaMemcpy, bytes read + written). Each size is timed cold
// as `fuseops bench` times an op (rotating buffer sets >= 4x L2, CUDA-graph replay, median per launch) in three forms:
// - in place: every 16-byte vector read and written back (rotary_embedding, mrope: q and k rotated in place);
// - out of place: read from one buffer, written to another (apply_rotary_pos_emb: q -> q_out);
// - memcpy: a cudaMemcpyAsync node of the same bytes (out of place).
// The kernel forms: 256-thread blocks, U = 4, 8 or 16 16-byte vectors per thread with every load first (U = 8 is the
// copy of rope_prefill_probe.cu), in one pass or on a grid of 8 or 16 blocks per SM stepping over the rest; each
// form's time is printed, then the best. "MB moved" counts read + written bytes, as the rope rows count theirs.
// Build and run: nvcc -O3 -std=c++17 -arch=sm_90a bench/experiments/copy_size_probe.cu -o /tmp/copyp && /tmp/copyp
// Results and what they showed: docs/ops/rope-log.md, "What a copy of the same bytes takes (thirty-second session)".
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "graph_timing.cuh"

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint4 ld16(const void* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void st16(void* p, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

/// dst[i] = src[i] for the n 16-byte vectors (dst == src: in place), U per thread with every load first; the blocks
/// step by the grid (one pass when the grid covers n).
template <int U>
__global__ void __launch_bounds__(kThreads) copy_kernel(const uint4* src, uint4* dst, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * U * kThreads;
  for (int64_t first = static_cast<int64_t>(blockIdx.x) * U * kThreads + threadIdx.x; first < n; first += step) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = first + u * static_cast<int64_t>(kThreads);
      if (i < n) v[u] = ld16(src + i);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = first + u * static_cast<int64_t>(kThreads);
      if (i < n) st16(dst + i, v[u]);
    }
  }
}

}  // namespace

int main() {
  int l2 = 0, sms = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double rate = copy_rate_tbps();
  std::printf("copy rate %.3f TB/s (1 GiB cudaMemcpy), %d SMs, L2 %d MB\n\n", rate, sms, l2 >> 20);
  std::printf("| MB moved | copy-rate us | in place us | x | out of place us | x | memcpy us | x |\n"
              "|---|---|---|---|---|---|---|---|\n");
  // Buffer sizes (MB moved = 2x): the rope rows' bytes (FlagOS 8192 tokens 134-168 MB moved, (4, 2048, 32, 128)
  // 268, Llama-3 4096 / 16384 85 / 340, DeepSeek-V3 16384 ~540) and the steps between.
  std::vector<std::string> all_forms;
  for (const double mb_buffer : {8.0, 16.0, 33.5, 42.0, 67.0, 84.0, 134.0, 170.0, 268.0, 537.0}) {
    const int64_t n = static_cast<int64_t>(mb_buffer * 1e6 / 16);
    const size_t bytes = static_cast<size_t>(n) * 16;
    // >= 4x L2 in the in-place form, which touches one buffer per set (the thirty-second session's run rotated
    // over 2x L2 there for buffers below 4x L2 / 2: its in-place column below 240 MB moved is a little warm)
    const int sets = std::max(2, static_cast<int>(4.0 * l2 / static_cast<double>(bytes) + 0.999));
    std::vector<uint4*> a(sets), b_(sets);
    for (int i = 0; i < sets; ++i) {
      CK(cudaMalloc(&a[i], bytes));
      CK(cudaMalloc(&b_[i], bytes));
      CK(cudaMemset(a[i], i + 1, bytes));
      CK(cudaMemset(b_[i], 0, bytes));
    }
    const int launches = std::max(4, sets);
    // The best of the variants: U = 4, 8, 16 vectors per thread in one pass, and U = 8 on a grid of 8 or 16
    // blocks per SM stepping over the rest.
    std::string forms = "| " + std::to_string(static_cast<int>(2 * mb_buffer)) + " |";
    auto best = [&](bool in_place) {
      double b = 1e30;
      auto time = [&](auto kernel, int u, unsigned grid_cap) {
        const unsigned grid = static_cast<unsigned>(
            std::min<int64_t>((n + int64_t{u} * kThreads - 1) / (int64_t{u} * kThreads), grid_cap));
        const double us = time_graph_us(
            [&](int i, cudaStream_t s) {
              kernel<<<grid, kThreads, 0, s>>>(a[i % sets], in_place ? a[i % sets] : b_[i % sets], n);
            },
            launches);
        char cell[32];
        std::snprintf(cell, sizeof cell, " %.2f |", us);
        forms += cell;
        b = std::min(b, us);
      };
      time(copy_kernel<4>, 4, ~0u);
      time(copy_kernel<8>, 8, ~0u);
      time(copy_kernel<16>, 16, ~0u);
      time(copy_kernel<8>, 8, static_cast<unsigned>(8 * sms));
      time(copy_kernel<8>, 8, static_cast<unsigned>(16 * sms));
      return b;
    };
    const double in_place = best(true), out_of_place = best(false);
    const double memcpy_us = time_graph_us(
        [&](int i, cudaStream_t s) {
          CK(cudaMemcpyAsync(b_[i % sets], a[i % sets], bytes, cudaMemcpyDeviceToDevice, s));
        },
        launches);
    const double moved = 2.0 * static_cast<double>(bytes);
    const double floor_us = moved / (rate * 1e12) * 1e6;
    std::printf("| %.1f | %.2f | %.2f | %.3f | %.2f | %.3f | %.2f | %.3f |\n", moved / 1e6, floor_us, in_place,
                in_place / floor_us, out_of_place, out_of_place / floor_us, memcpy_us, memcpy_us / floor_us);
    all_forms.push_back(forms);
    for (int i = 0; i < sets; ++i) {
      CK(cudaFree(a[i]));
      CK(cudaFree(b_[i]));
    }
  }
  std::printf("\nEach form, cold us (in place, then out of place; U = 4, 8, 16 in one pass, U = 8 on 8 and 16 blocks "
              "per SM):\n\n| MB moved (nominal) | in 4 | in 8 | in 16 | in 8 x 8/SM | in 8 x 16/SM | out 4 | out 8 | "
              "out 16 | out 8 x 8/SM | out 8 x 16/SM |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& f : all_forms) std::printf("%s\n", f.c_str());
  return 0;
}
