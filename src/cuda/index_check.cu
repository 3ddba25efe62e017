// CUDA side of the internal index-range check (core/index_check.h).
#include <algorithm>

#include "core/index_check.h"
#include "cuda/device_error.cuh"
#include "cuda/launch.h"

namespace fuseops::detail::cuda {
namespace {

template <typename I>
__global__ void check_index_range_kernel(const I* values, int64_t n, int64_t stride, int64_t bound,
                                         DeviceErrorRecord* record, uint32_t site) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = static_cast<int64_t>(values[i * stride]);
    if (v < 0 || v >= bound) record_device_error(record, site, i);
  }
}

}  // namespace

void check_index_range(uint32_t site, const TensorView& values, int64_t bound, int device, void* stream) {
  const char* op = error_site_op(site);
  DeviceGuard guard(device, op);
  DeviceErrorRecord* record = cuda_error_record(device);
  const int64_t n = values.shape[0];
  const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4 * sm_count(device)));
  auto s = static_cast<cudaStream_t>(stream);
  if (values.dtype == DType::i32) {
    check_index_range_kernel<<<blocks, 256, 0, s>>>(static_cast<const int32_t*>(values.data), n, values.strides[0],
                                                    bound, record, site);
  } else {
    check_index_range_kernel<<<blocks, 256, 0, s>>>(static_cast<const int64_t*>(values.data), n, values.strides[0],
                                                    bound, record, site);
  }
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
