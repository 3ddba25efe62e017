// Helpers for CUDA launchers (included by .cu files only).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "core/env.h"
#include "fuseops/error.h"

namespace fuseops::detail {

/// Throws Error(device_failure) "<op>: <what>: <cuda error string>" when `status` is not cudaSuccess.
void check_cuda(cudaError_t status, const char* op, const char* what);

/// Makes `device` current for the scope and restores the previous device.
class DeviceGuard {
 public:
  DeviceGuard(int device, const char* op);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

/// Checks the launch that just happened; in debug mode (FUSEOPS_DEBUG=1) also synchronises `stream` and raises
/// any recorded device error.
void after_launch(const char* op, cudaStream_t stream, int device);

/// Attribute `attr` of `device`, queried once per (attribute, device) and cached.
int device_attribute(cudaDeviceAttr attr, int device);
/// Multiprocessor count of `device` (cached).
int sm_count(int device);

/// Whether kernels on `device` launch with programmatic dependent launch: compute capability >= 9.0, unless the
/// environment sets FUSEOPS_PDL=0 (cached).
bool pdl_enabled(int device);

/// Whether thread block clusters and PDL may be used on `device` (cached): its compute capability is >= 9.0 and the
/// code the driver runs there was compiled for sm_90 or newer (common/cuda_arch.h; below sm_90 the device-side
/// cluster and PDL helpers are no-ops).
bool is_sm90_or_newer(int device);

/// Whether the code that runs on `device` is sm_90a code (common/cuda_arch.h, cuda_code_is_sm90a; cached): where
/// kernels may use the wgmma instructions, which exist on that target only.
bool runs_sm90a_code(int device);

/// launch_kernel() for a kernel that runs as thread block clusters of `cluster_x` blocks (sm_90+; grid.x must be a
/// multiple of cluster_x); cluster_x == 1 launches without the cluster attribute.
template <typename... KernelArgs, typename... Args>
void launch_kernel_cluster(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, std::size_t smem,
                           cudaStream_t stream, int device, unsigned cluster_x, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  unsigned n = 0;
  if (pdl_enabled(device)) {
    attribute[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  if (cluster_x > 1) {
    attribute[n].id = cudaLaunchAttributeClusterDimension;
    attribute[n].val.clusterDim.x = cluster_x;
    attribute[n].val.clusterDim.y = 1;
    attribute[n].val.clusterDim.z = 1;
    ++n;
  }
  config.attrs = attribute;
  config.numAttrs = n;
  (void)cudaLaunchKernelEx(&config, kernel, static_cast<KernelArgs>(args)...);
}

/// Lets `kernel` start with `bytes` of dynamic shared memory. The default limit (48 KiB) holds for static and
/// dynamic shared memory together, so a kernel opts in above 40 KiB of dynamic memory (the static shared memory of
/// every fuseops kernel is below 8 KiB). Errors name `op`.
template <typename Kernel>
void allow_smem(Kernel kernel, std::size_t bytes, const char* op) {
  constexpr std::size_t kDefaultLimit = 48 * 1024, kStaticBound = 8 * 1024;
  if (bytes + kStaticBound <= kDefaultLimit) return;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), op,
             "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
}

/// Asks for a shared-memory carveout of `percent` (0-100, or cudaSharedmemCarveoutMaxShared) for `kernel`, so that as
/// many blocks as its launch plans for stay resident per SM. Errors name `op`.
template <typename Kernel>
void prefer_carveout(Kernel kernel, int percent, const char* op) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent), op,
             "cudaFuncSetAttribute(PreferredSharedMemoryCarveout)");
}

/// Blocks of `threads` threads and `smem` bytes of dynamic shared memory that `kernel` can keep resident on the
/// whole of `device` at once (at least 1): the grid of a grid-stride kernel that fills the GPU in one wave. Errors
/// name `op`.
template <typename Kernel>
int64_t resident_blocks(Kernel kernel, int threads, std::size_t smem, int device, const char* op) {
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem), op,
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return std::max<int64_t>(1, int64_t{per_sm} * sm_count(device));
}

/// resident_blocks() of a persistent kernel launched with `smem` bytes of dynamic shared memory, cached per (kernel,
/// threads, smem, device), so that a launch pays no driver query after the first. The kernel's dynamic shared-memory
/// limit (allow_smem) only ever grows, to the largest `smem` asked for on the device: a launch with a cached smem
/// must still fit after a smaller one (lowering the limit there made the next larger launch fail, invalid argument).
template <typename Kernel>
int64_t cached_wave(Kernel kernel, int threads, std::size_t smem, int device, const char* op) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, std::size_t, int>, int64_t> known;
  static std::map<std::pair<const void*, int>, std::size_t> allowed;  ///< per (kernel, device): the limit set
  const std::lock_guard<std::mutex> lock(mutex);
  const void* k = reinterpret_cast<const void*>(kernel);
  std::size_t& limit = allowed[{k, device}];
  if (smem > limit) {
    allow_smem(kernel, smem, op);
    limit = smem;
  }
  const auto key = std::make_tuple(k, threads, smem, device);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  const int64_t wave = resident_blocks(kernel, threads, smem, device, op);
  known.emplace(key, wave);
  return wave;
}

/// Launches `kernel` on `stream`, with programmatic dependent launch where enabled: the kernel may be scheduled
/// while the previous kernel in the stream is finishing, and must call pdl_wait() (or pdl_wait_and_release()) before
/// it reads anything that kernel may have written. Errors surface in after_launch().
template <typename... KernelArgs, typename... Args>
void launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                   int device, Args&&... args) {
  launch_kernel_cluster(kernel, grid, block, smem, stream, device, 1u, std::forward<Args>(args)...);
}

/// The two halves of pdl_wait_and_release(), also usable apart: pdl_release() first, by a kernel of a few blocks, lets
/// the next kernel in the stream start launching at once (its blocks then do their own work up to their wait while
/// this kernel runs); pdl_wait() first and pdl_release() at the end, by a grid of one wave, launches the next kernel
/// only once each block has a thread there (the GDN forward's intra kernels and the decode warp kernel: launched
/// earlier, the next grid's blocks waited on the SMs this grid freed first and ran slower; docs/ops/gdn-log.md, "Where
/// the intra kernels release fwd_h"). pdl_release() takes effect for a block at the first of its threads to run it;
/// a block that exits without it counts as released. No-ops before sm_90.
__device__ __forceinline__ void pdl_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// First statement of most kernels launched by launch_kernel() (the exceptions split it, above): waits until the
/// previous kernel in the stream has completed and its memory is visible (a no-op when it was not launched as a
/// dependent), then lets the next kernel start launching. No-op before sm_90.
__device__ __forceinline__ void pdl_wait_and_release() {
  pdl_wait();
  pdl_release();
}

}  // namespace fuseops::detail
