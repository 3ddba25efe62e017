// CUDA helpers of the large-tensor tests (compiled only with the CUDA backend).
#pragma once

#if defined(FUSEOPS_WITH_CUDA)
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>

namespace fuseops_test {

/// cudaMalloc'ed memory, freed on scope exit; `status` says whether the allocation succeeded.
struct DeviceBuffer {
  void* ptr = nullptr;
  cudaError_t status = cudaSuccess;
  explicit DeviceBuffer(size_t bytes) {
    status = cudaMalloc(&ptr, bytes);
    if (status != cudaSuccess) (void)cudaGetLastError();
  }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

/// Copies `pattern` (host bytes) into the start of `dst` and repeats it by doubling up to `total` bytes.
inline void fill_by_repetition(void* dst, size_t total, const void* pattern, size_t pattern_bytes) {
  size_t have = std::min(pattern_bytes, total);
  ASSERT_EQ(cudaMemcpy(dst, pattern, have, cudaMemcpyHostToDevice), cudaSuccess);
  while (have < total) {
    const size_t n = std::min(have, total - have);
    ASSERT_EQ(cudaMemcpy(static_cast<char*>(dst) + have, dst, n, cudaMemcpyDeviceToDevice), cudaSuccess);
    have += n;
  }
}

}  // namespace fuseops_test
#endif
