// torch kernels of the library-wide functions: the device error record and the version (include/fuseops/error.h).
#include "ops.h"
#include "torch_utils.h"

namespace fuseops::torch_binding {

void check_errors(int64_t device) {
  translate_errors([&] { fuseops::check_errors(static_cast<int>(device)); });
}

void clear_errors(int64_t device) {
  translate_errors([&] { fuseops::clear_errors(static_cast<int>(device)); });
}

std::string version() { return fuseops::version(); }

}  // namespace fuseops::torch_binding
