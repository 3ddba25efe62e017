// Experiment: cost of subnormal support in the fast silu (ex2.approx / rcp.approx with and without .ftz), bf16
// silu_and_mul at 8192 x 14336 and 64 x 14336, rotating buffers, CUDA-graph replay, PDL on.
// nvcc -O3 -std=c++17 -arch=sm_90a bench/experiments/ftz_variants.cu
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <vector>

using T = __nv_bfloat16;
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e)); return 1; } } while (0)

template <int M>  // 0: both ftz, 1: ex2 subnormal + rcp ftz, 2: neither ftz
__device__ __forceinline__ float silu(float x) {
  float e, r, a = -fabsf(x) * 1.4426950408889634f;
  if (M == 0) asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(a)); else asm("ex2.approx.f32 %0, %1;" : "=f"(e) : "f"(a));
  if (M == 2) asm("rcp.approx.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e)); else asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
  return x * (x >= 0.0f ? r : e * r);
}

template <int M>
__global__ void __launch_bounds__(256) k(T* out, const T* x, int64_t rows, int64_t vpr, int64_t d) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < vpr; c += int64_t(gridDim.x) * blockDim.x) {
      uint4 g = __ldg(reinterpret_cast<const uint4*>(x + r * 2 * d) + c), u = __ldg(reinterpret_cast<const uint4*>(x + r * 2 * d + d) + c), o;
      const T* gp = reinterpret_cast<const T*>(&g); const T* upp = reinterpret_cast<const T*>(&u); T* op = reinterpret_cast<T*>(&o);
#pragma unroll
      for (int i = 0; i < 8; ++i) op[i] = __float2bfloat16_rn(silu<M>(__bfloat162float(gp[i])) * __bfloat162float(upp[i]));
      reinterpret_cast<uint4*>(out + r * d)[c] = o;
    }
}

template <int M>
void launch(T* out, const T* x, int64_t rows, int64_t d, cudaStream_t s) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((d / 8 + 255) / 256, std::min<int64_t>(rows, 65535));
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at; cfg.numAttrs = 1;
  cudaLaunchKernelEx(&cfg, k<M>, out, x, rows, d / 8, d);
}

int main() {
  void (*fs[])(T*, const T*, int64_t, int64_t, cudaStream_t) = {launch<0>, launch<1>, launch<2>, launch<0>, launch<1>, launch<2>};
  const char* names[] = {"ftz/ftz", "ex2 subnormal/rcp ftz", "no ftz", "ftz/ftz", "ex2 subnormal/rcp ftz", "no ftz"};
  for (int64_t rows : {8192, 64}) {
    const int64_t d = 14336;
    const int sets = rows == 64 ? 48 : 2;
    std::vector<T*> o(sets), x(sets);
    for (int i = 0; i < sets; ++i) { CK(cudaMalloc(&o[i], rows * d * 2)); CK(cudaMalloc(&x[i], rows * d * 4)); CK(cudaMemset(x[i], 0x3f, rows * d * 4)); }
    cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    for (int v = 0; v < 6; ++v) {
      const int n = rows == 64 ? 480 : 20;
      fs[v](o[0], x[0], rows, d, s);
      cudaGraph_t g; cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < n; ++i) fs[v](o[i % sets], x[i % sets], rows, d, s);
      CK(cudaStreamEndCapture(s, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
      cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
      std::vector<float> t;
      for (int r = 0; r < 12; ++r) { cudaEventRecord(a, s); cudaGraphLaunch(ge, s); cudaEventRecord(b, s); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms, a, b); t.push_back(ms * 1e3f / n); }
      std::sort(t.begin(), t.end());
      printf("%5lld x %lld  %-24s cold %8.2f us  %.3f TB/s\n", (long long)rows, (long long)d, names[v], t[6], 6.0 * rows * d / t[6] / 1e6);
    }
  }
  return 0;
}
