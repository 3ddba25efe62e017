// The command line's GPU functions in a build without CUDA: every entry point reports that clearly.
#include "fuseops/error.h"
#include "gpu.h"

namespace fuseops::cli::gpu {
namespace {
[[noreturn]] void no_cuda() { throw Error(ErrorKind::unsupported, "this build of fuseops has no CUDA backend"); }
}  // namespace

DeviceInfo device_info(int) { no_cuda(); }
Buffer::Buffer(std::size_t) { no_cuda(); }
Buffer::~Buffer() = default;
Buffer::Buffer(Buffer&&) noexcept {}
Buffer& Buffer::operator=(Buffer&&) noexcept { return *this; }
void fill_random(void*, DType, int64_t, uint64_t, float) { no_cuda(); }
void copy_to_device(void*, const void*, std::size_t) { no_cuda(); }
double time_graph_us(const std::function<void(int, void*)>&, int, double, int) { no_cuda(); }
double copy_rate_tbps() { no_cuda(); }
double empty_kernel_us() { no_cuda(); }
void unfused_act_and_mul(int, DType, void*, const void*, const void*, void*, int64_t, int64_t, int64_t, int64_t, int64_t,
                         void*) {
  no_cuda();
}
void unfused_act_and_mul_backward(int, DType, void*, void*, const void*, const void*, const void*, int64_t, int64_t,
                                  void*) {
  no_cuda();
}

void unfused_rope(DType, const RopeHeadsView&, const RopeHeadsView&, int64_t, int64_t, bool, DType, const void*,
                  const void*, int64_t, const int64_t*, int, const unsigned char*, void*, void*) {
  no_cuda();
}

}  // namespace fuseops::cli::gpu
