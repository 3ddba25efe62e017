// Helpers for CUDA launchers (included by .cu files only).
#pragma once

#include <cuda_runtime.h>

#include <string>

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

/// Multiprocessor count of `device` (cached).
int sm_count(int device);

}  // namespace fuseops::detail
