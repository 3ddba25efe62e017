// Experiment: the physical bound of the rotary embeddings' access pattern on the H200. For each benchmark case it
// moves exactly the bytes the op must touch (the rotated part of every head, read and written back in place,
// 16-byte accesses), and the same number of bytes as one contiguous block, and reports both against the copy rate
// (cudaMemcpy of 1 GiB, as `fuseops bench`). Partial rotary touches `touch` bytes at the start of every `stride`-byte
// head: what a kernel doing nothing but those accesses reaches is the bound for the op.
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90a bench/experiments/rope_strided_copy.cu -o /tmp/strided && /tmp/strided
// Times: median us per launch under CUDA-graph replay; warm = one buffer, cold = rotating buffers >= 4x L2.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "graph_timing.cuh"

// Vector i (16 bytes) of the touched part: row i >> log_vpr (a head of one token), vector i & (vpr - 1) in it.
// U vectors per thread, every load issued before any store; the xor with `flip` (0 at run time) keeps the store.
template <int U>
__global__ void __launch_bounds__(256) strided_rw(char* base, int64_t nvec, int log_vpr, int64_t stride,
                                                 uint32_t flip) {
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * U) * blockDim.x + threadIdx.x;
  uint4 v[U];
  char* p[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t i = first + static_cast<int64_t>(u) * blockDim.x;
    p[u] = base + (i >> log_vpr) * stride + ((i & ((int64_t{1} << log_vpr) - 1)) << 4);
    if (i < nvec) v[u] = *reinterpret_cast<const uint4*>(p[u]);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t i = first + static_cast<int64_t>(u) * blockDim.x;
    v[u].x ^= flip;
    if (i < nvec) *reinterpret_cast<uint4*>(p[u]) = v[u];
  }
}

struct Case {
  const char* name;
  int64_t heads;   // q + k heads of a token
  int64_t stride;  // bytes between heads (the head size, or DeepSeek's 192-element q_pe stride)
  int64_t touch;   // bytes of each head the op touches (rotary_dim x 2 bytes, bf16)
};

template <int U>
double run(char* const* bufs, int sets, int64_t nvec, int log_vpr, int64_t stride) {
  const int64_t blocks = (nvec + 256 * U - 1) / (256 * U);
  const int launches = std::max(sets, 20 / sets * sets);
  return time_graph_us(
      [&](int k, cudaStream_t s) {
        strided_rw<U><<<static_cast<unsigned>(blocks), 256, 0, s>>>(bufs[k % sets], nvec, log_vpr, stride, 0u);
      },
      launches);
}

int main() {
  int l2 = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  const double rate = copy_rate_tbps();
  std::printf("copy rate %.3f TB/s (cudaMemcpy 1 GiB), L2 %d MB\n\n", rate, l2 >> 20);
  std::printf("| case | tokens | MB touched | touched / head (B) | head stride (B) | pattern | U | warm us | cold us | "
              "TB/s cold | x copy cold |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  const Case cases[] = {{"qwen3-next-80b r64 of 256", 18, 512, 128}, {"glm-4.1v r64 of 128", 34, 256, 128},
                        {"deepseek-v3 q_pe r64, stride 192", 129, 384, 128}, {"llama3-8b full", 40, 256, 256},
                        {"qwen3-vl full", 36, 256, 256}, {"qwen2.5-vl full", 32, 256, 256}};
  for (const Case& c : cases) {
    for (int64_t tokens : {4096, 16384}) {
      const int64_t rows = tokens * c.heads;
      const int64_t vpr = c.touch / 16;
      int log_vpr = 0;
      while ((int64_t{1} << log_vpr) < vpr) ++log_vpr;
      const int64_t nvec = rows * vpr;
      const double mb = 2.0 * rows * c.touch / 1e6;
      for (int pattern = 0; pattern < 2; ++pattern) {  // 0: strided heads as the op, 1: the same bytes contiguous
        const int64_t stride = pattern == 0 ? c.stride : c.touch;
        const size_t set_bytes = static_cast<size_t>(rows * stride);
        const int sets = static_cast<int>(std::clamp<size_t>((4 * static_cast<size_t>(l2) + set_bytes - 1) / set_bytes, 2, 64));
        std::vector<char*> bufs(sets);
        for (char*& b : bufs) {
          CK(cudaMalloc(&b, set_bytes));
          CK(cudaMemset(b, 0, set_bytes));
        }
        for (int u : {4, 8}) {
          const double warm = u == 4 ? run<4>(bufs.data(), 1, nvec, log_vpr, stride) : run<8>(bufs.data(), 1, nvec, log_vpr, stride);
          const double cold = u == 4 ? run<4>(bufs.data(), sets, nvec, log_vpr, stride) : run<8>(bufs.data(), sets, nvec, log_vpr, stride);
          const double copy_us = mb / rate;  // MB / (TB/s) = us
          std::printf("| %s | %lld | %.1f | %lld | %lld | %s | %d | %.2f | %.2f | %.3f | %.3f |\n", c.name,
                      static_cast<long long>(tokens), mb, static_cast<long long>(c.touch),
                      static_cast<long long>(stride), pattern == 0 ? "strided (op)" : "contiguous", u, warm, cold,
                      mb / cold, cold / copy_us);
        }
        for (char* b : bufs) CK(cudaFree(b));
      }
    }
  }
  return 0;
}
