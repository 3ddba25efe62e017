// torch kernels of the library-wide functions: the device error record and the version (include/fuseops/error.h).
#include <climits>
#include <string>

#include "ops.h"
#include "torch_utils.h"

namespace fuseops::torch_binding {

namespace {
/// The schema's int64 device as the C++ API's int: one past int's range is an error (it wrapped, 2^32 - 1 to -1).
int device_ordinal(const char* op, int64_t device) {
  if (device < INT_MIN || device > INT_MAX) {
    throw fuseops::Error(fuseops::ErrorKind::invalid_argument,
                         std::string(op) + ": device: expected -1 (every device that ran an op) or a CUDA device "
                                           "ordinal >= 0, got " + std::to_string(device));
  }
  return static_cast<int>(device);
}
}  // namespace

void check_errors(int64_t device) {
  translate_errors([&] { fuseops::check_errors(device_ordinal("check_errors", device)); });
}

void clear_errors(int64_t device) {
  translate_errors([&] { fuseops::clear_errors(device_ordinal("clear_errors", device)); });
}

std::string version() { return fuseops::version(); }

}  // namespace fuseops::torch_binding
