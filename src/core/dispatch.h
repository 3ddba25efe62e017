// Backend selection by the tensors' device.
#pragma once

#include "fuseops/tensor.h"

namespace fuseops::detail {

enum class Backend { cpu, cuda };

/// The backend that serves tensors on `device`. Throws Error(unsupported) for a CUDA device in a build without
/// CUDA, and Error(invalid_argument) for a CUDA index that is not a device of this machine.
Backend backend_for(const char* op, const Device& device);

}  // namespace fuseops::detail
