// An internal op that exercises the device error record: the smallest way a kernel reports a bad
// device-resident value. Used by the tests of check_errors() and FUSEOPS_DEBUG.
#pragma once

#include <cstdint>

#include "fuseops/tensor.h"

namespace fuseops::detail {

/// For each element of `values` (1-D, i32 or i64, CPU or CUDA), records values[i] outside [0, bound) against the
/// pair (op, arg) in the record of the tensor's device. Reads nothing out of bounds; asynchronous on CUDA.
void check_index_range(const char* op, const char* arg, TensorView values, int64_t bound, Stream stream = {});

/// Whether a FUSEOPS_DEBUG value turns debug mode on (debug_mode()): off for an empty or blank value, false / off /
/// no (any case) and a decimal number whose digits are all zero ("0", "00", "+0", "0.0", "0e3", blanks around it
/// allowed; parsed without the C locale); on otherwise (also "1e-400", "0x0", "nan").
bool debug_value_on(const char* value);

#if defined(FUSEOPS_WITH_CUDA)
namespace cuda {
void check_index_range(uint32_t site, const TensorView& values, int64_t bound, int device, void* stream);
}
#endif

}  // namespace fuseops::detail
