#include "core/dispatch.h"

#include <string>

#include "fuseops/error.h"
#include "fuseops/version.h"

namespace fuseops::detail {

Backend backend_for(const char* op, const Device& device) {
  if (!device.is_cuda()) return Backend::cpu;
  if (!built_with_cuda()) {
    throw Error(ErrorKind::unsupported, std::string(op) + ": tensors are on " + device_name(device) +
                                            " but this build of fuseops has no CUDA backend");
  }
  const int n = cuda_device_count();
  if (n == 0) {
    throw Error(ErrorKind::unsupported, std::string(op) + ": tensors are on " + device_name(device) +
                                            " but this machine has no CUDA device");
  }
  if (device.index >= n) {
    throw Error(ErrorKind::invalid_argument, std::string(op) + ": device: expected a CUDA device index < " +
                                                 std::to_string(n) + ", got " + device_name(device));
  }
  return Backend::cuda;
}

}  // namespace fuseops::detail
