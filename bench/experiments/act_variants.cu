// Experiment: silu_and_mul bf16 kernel variants on the H200 (rows per thread, register form of the loads, cache
// hints). Standalone: nvcc -O3 -std=c++17 -arch=sm_90a -I include -I src bench/experiments/act_variants.cu
// Prints the median us per launch under CUDA-graph replay (rotating buffers for the large case).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "common/act_math.h"
#include "cuda/vec.cuh"

using namespace fuseops::detail;
using T = __nv_bfloat16;

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

template <bool Fast>
__device__ __forceinline__ uint4 silu_mul_pack(uint4 g, uint4 u) {
  const T* gp = reinterpret_cast<const T*>(&g);
  const T* up = reinterpret_cast<const T*>(&u);
  uint4 o;
  T* op = reinterpret_cast<T*>(&o);
#pragma unroll
  for (int i = 0; i < 8; ++i) op[i] = __float2bfloat16_rn(act_fwd<Act::silu, Fast>(__bfloat162float(gp[i])) * __bfloat162float(up[i]));
  return o;
}

// U rows per thread, loads kept packed (uint4) until use; HINT 0 plain, 1 streaming (ld.cs / st.cs), 2 nc loads
template <int U, bool Fast, int HINT>
__global__ void __launch_bounds__(256) k(T* out, const T* x, int64_t rows, int64_t vpr, int64_t d) {
  const int64_t row_step = int64_t(gridDim.y) * blockDim.y * U;
  for (int64_t r0 = int64_t(blockIdx.y) * blockDim.y * U + threadIdx.y; r0 < rows; r0 += row_step) {
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < vpr; c += int64_t(gridDim.x) * blockDim.x) {
      uint4 g[U], u[U];
#pragma unroll
      for (int q = 0; q < U; ++q) {
        const int64_t r = r0 + q * int64_t(blockDim.y);
        if (r < rows) {
          const uint4* gp = reinterpret_cast<const uint4*>(x + r * 2 * d) + c;
          const uint4* upp = reinterpret_cast<const uint4*>(x + r * 2 * d + d) + c;
          if (HINT == 1) { g[q] = __ldcs(gp); u[q] = __ldcs(upp); }
          else if (HINT == 2) { g[q] = __ldg(gp); u[q] = __ldg(upp); }
          else { g[q] = *gp; u[q] = *upp; }
        }
      }
#pragma unroll
      for (int q = 0; q < U; ++q) {
        const int64_t r = r0 + q * int64_t(blockDim.y);
        if (r < rows) {
          uint4 o = silu_mul_pack<Fast>(g[q], u[q]);
          uint4* op = reinterpret_cast<uint4*>(out + r * d) + c;
          if (HINT == 1) __stcs(op, o); else *op = o;
        }
      }
    }
  }
}

// VEC elements per thread (FloatVec), block of BT threads, optional programmatic dependent launch.
template <int VEC, bool PDL>
__global__ void __launch_bounds__(256) kv(T* out, const T* x, int64_t rows, int64_t vpr, int64_t d) {
  if (PDL) asm volatile("griddepcontrol.wait;" ::: "memory");
  if (PDL) asm volatile("griddepcontrol.launch_dependents;");
  for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < rows; r += int64_t(gridDim.y) * blockDim.y) {
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < vpr; c += int64_t(gridDim.x) * blockDim.x) {
      FloatVec<T, VEC> g, u;
      g.load(x + r * 2 * d + c * VEC);
      u.load(x + r * 2 * d + d + c * VEC);
#pragma unroll
      for (int i = 0; i < VEC; ++i) g.v[i] = act_fwd<Act::silu, true>(g.v[i]) * u.v[i];
      g.store(out + r * d + c * VEC);
    }
  }
}

template <int VEC, int BT, bool PDL>
void launchv(T* out, const T* x, int64_t rows, int64_t d, cudaStream_t s) {
  const int64_t vpr = d / VEC;
  int tx = 32;
  while (tx < BT && tx < vpr) tx *= 2;
  const int ty = BT / tx;
  dim3 grid((vpr + tx - 1) / tx, std::min<int64_t>((rows + ty - 1) / ty, 65535));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(tx, ty);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = PDL ? 1 : 0;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, kv<VEC, PDL>, out, x, rows, vpr, d));
}

__global__ void empty_k() {}
void launch_empty(T*, const T*, int64_t, int64_t, cudaStream_t s) { empty_k<<<1, 32, 0, s>>>(); }

template <int U, bool Fast, int HINT>
void launch(T* out, const T* x, int64_t rows, int64_t d, cudaStream_t s) {
  const int64_t vpr = d / 8;
  int tx = 32;
  while (tx < 256 && tx < vpr) tx *= 2;
  const int ty = 256 / tx;
  dim3 grid((vpr + tx - 1) / tx, std::min<int64_t>((rows + ty * U - 1) / (ty * U), 65535));
  k<U, Fast, HINT><<<grid, dim3(tx, ty), 0, s>>>(out, x, rows, vpr, d);
}

using Fn = void (*)(T*, const T*, int64_t, int64_t, cudaStream_t);

double time_us(Fn f, std::vector<T*>& outs, std::vector<T*>& xs, int64_t rows, int64_t d, int launches) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int sets = outs.size();
  for (int i = 0; i < 2; ++i) f(outs[i % sets], xs[i % sets], rows, d, s);
  CK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) f(outs[i % sets], xs[i % sets], rows, d, s);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  CK(cudaGraphLaunch(ge, s));
  std::vector<float> t;
  for (int r = 0; r < 15; ++r) {
    cudaEventRecord(a, s);
    cudaGraphLaunch(ge, s);
    cudaEventRecord(b, s);
    CK(cudaEventSynchronize(b));
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms * 1e3f / launches);
  }
  std::sort(t.begin(), t.end());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaStreamDestroy(s);
  return t[t.size() / 2];
}

__global__ void fill(T* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16((float)((i * 2654435761u) % 2001) / 500.0f - 2.0f);
}

int main() {
  struct V { const char* name; Fn f; };
  V variants[] = {
      {"empty kernel", launch_empty},
      {"U1 fast plain", launch<1, true, 0>},
      {"vec8 b256", launchv<8, 256, false>}, {"vec8 b256 pdl", launchv<8, 256, true>},
      {"vec8 b128", launchv<8, 128, false>}, {"vec4 b256", launchv<4, 256, false>},
      {"vec4 b128", launchv<4, 128, false>}, {"vec2 b128", launchv<2, 128, false>},
      {"vec4 b128 pdl", launchv<4, 128, true>},
  };
  const int64_t shapes[][2] = {{1, 14336}, {64, 14336}, {64, 512}, {4096, 512}, {8192, 14336}};
  for (auto& sh : shapes) {
    const int64_t rows = sh[0], d = sh[1];
    const size_t set_bytes = size_t(rows) * d * 3 * 2;
    const int sets = std::max<int>(2, std::min<int>(1024, (int)((240e6 + set_bytes - 1) / set_bytes)));
    std::vector<T*> outs(sets), xs(sets);
    for (int i = 0; i < sets; ++i) {
      CK(cudaMalloc(&outs[i], rows * d * 2));
      CK(cudaMalloc(&xs[i], rows * d * 4));
      fill<<<1024, 256>>>(xs[i], rows * d * 2);
    }
    CK(cudaDeviceSynchronize());
    const double bytes = 3.0 * rows * d * 2;
    for (auto& v : variants) {
      std::vector<T*> o1(outs.begin(), outs.begin() + 1), x1(xs.begin(), xs.begin() + 1);
      const int launches = std::max(sets, 20);
      const double warm = time_us(v.f, o1, x1, rows, d, launches);
      const double cold = time_us(v.f, outs, xs, rows, d, (launches / sets) * sets);
      printf("%6lldx%-6lld %-18s warm %8.2f us  cold %8.2f us  %.3f TB/s\n", (long long)rows, (long long)d, v.name,
             warm, cold, bytes / cold / 1e6);
    }
    for (int i = 0; i < sets; ++i) { cudaFree(outs[i]); cudaFree(xs[i]); }
  }
  return 0;
}
