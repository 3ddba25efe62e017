// Device-side recorder of bad device-resident values.
#pragma once

#include "cuda/device_error.h"

namespace fuseops::detail {

/// Records that element `index` of the argument identified by `site` was bad. The first site to record wins;
/// later records from the same site keep the smallest index.
__device__ __forceinline__ void record_device_error(DeviceErrorRecord* rec, uint32_t site, long long index) {
  const unsigned int prev = atomicCAS(&rec->site, 0u, site);
  if (prev == 0u || prev == site) atomicMin(&rec->index, static_cast<unsigned long long>(index));
}

}  // namespace fuseops::detail
