// fuseops public API: version.
#pragma once

namespace fuseops {

/// The library's version, "MAJOR.MINOR.PATCH".
const char* version();

/// True when the library was built with the CUDA backend.
bool built_with_cuda();

/// Number of usable CUDA devices (0 in a build without CUDA or on a machine without a GPU).
int cuda_device_count();

}  // namespace fuseops
