// Timing helpers of the standalone experiments in this folder: CK (exit on a CUDA error), the median time per
// launch under CUDA-graph replay and the copy rate.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#define CK(x)                                               \
  do {                                                      \
    cudaError_t ck_ = (x);                                  \
    if (ck_ != cudaSuccess) {                               \
      std::printf("%s: %s\n", #x, cudaGetErrorString(ck_)); \
      std::exit(1);                                         \
    }                                                       \
  } while (0)

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Median us per launch of 15 replays of a graph of `launches` calls launch(i, stream), after 2 launches and one
/// replay to warm up.
inline double time_graph_us(const std::function<void(int, cudaStream_t)>& launch, int launches = 4) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < 2; ++i) launch(i, s);
  CK(cudaStreamSynchronize(s));
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) launch(i, s);
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t e;
  CK(cudaGraphInstantiate(&e, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaGraphLaunch(e, s));
  CK(cudaStreamSynchronize(s));
  std::vector<double> per;
  for (int r = 0; r < 15; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(e, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    per.push_back(ms * 1e3 / launches);
  }
  CK(cudaGraphExecDestroy(e));
  CK(cudaGraphDestroy(g));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  CK(cudaStreamDestroy(s));
  return median(per);
}

/// The copy rate as `fuseops bench` measures it: bytes read + written by a 1 GiB device-to-device cudaMemcpy, TB/s.
inline double copy_rate_tbps() {
  const size_t bytes = size_t(1) << 30;
  void *src, *dst;
  CK(cudaMalloc(&src, bytes));
  CK(cudaMalloc(&dst, bytes));
  CK(cudaMemset(src, 1, bytes));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < 12; ++i) {
    CK(cudaEventRecord(a));
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float m = 0;
    CK(cudaEventElapsedTime(&m, a, b));
    if (i >= 2) ms.push_back(m);
  }
  CK(cudaFree(src));
  CK(cudaFree(dst));
  return 2.0 * bytes / (median(ms) * 1e-3) / 1e12;
}
