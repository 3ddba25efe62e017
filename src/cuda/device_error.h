// The library-wide record of the first bad device-resident value (include/fuseops/error.h, check_errors).
// Host-visible declarations; the device-side recorder is in device_error.cuh.
#pragma once

#include <cstdint>
#include <string>

namespace fuseops::detail {

/// One record per device (and one for the CPU backend). `site` is 0 while nothing was recorded, else the id of
/// the (op, argument, rule) site that recorded; `index` is the smallest bad index that site reported.
struct DeviceErrorRecord {
  uint32_t site;
  uint32_t reserved;
  unsigned long long index;
};

/// Id (>= 1) of an (op, argument, rule) triple; registered once, stable for the process. `rule`, where the index
/// alone does not say what is wrong (cu_seqlens: the index is a sequence), is added to the message; two rules of one
/// argument are two sites.
uint32_t error_site(const char* op, const char* arg, const char* rule = nullptr);
/// "op", "arg" of a site id.
const char* error_site_op(uint32_t site);
const char* error_site_arg(uint32_t site);
/// "op: arg: value out of range at index i", then " (rule)" where the site has one.
std::string error_site_message(uint32_t site, unsigned long long index);

/// The record of the CPU backend (host memory).
DeviceErrorRecord* host_error_record();
/// Records a bad value found by a CPU kernel (first site wins, smallest index kept).
void record_host_error(uint32_t site, int64_t index);
/// End of a CPU op that recorded bad values (`recorded`): in debug mode (FUSEOPS_DEBUG) raises them at the op.
void raise_recorded_in_debug(bool recorded);

#if defined(FUSEOPS_WITH_CUDA)
/// The record of CUDA device `device`, allocated on first use (also during stream capture).
DeviceErrorRecord* cuda_error_record(int device);
/// Reads (synchronising) and resets the records of one device (device >= 0) or all allocated ones.
void cuda_check_errors(int device);
void cuda_clear_errors(int device);
#endif
}  // namespace fuseops::detail
