// CUDA-graph timing, the copy-rate and empty-kernel yardsticks, device buffers.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "cuda/launch.h"
#include "gpu.h"

namespace fuseops::cli::gpu {

void launch_empty(cudaStream_t s);  // gpu_kernels.cu

namespace {
void check(cudaError_t e, const char* what) { detail::check_cuda(e, "bench", what); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream"); }
  ~Stream() { cudaStreamDestroy(s); }
};

struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  Events() {
    check(cudaEventCreate(&a), "event");
    check(cudaEventCreate(&b), "event");
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  double ms() {
    float t = 0;
    check(cudaEventElapsedTime(&t, a, b), "event time");
    return t;
  }
};
}  // namespace

void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to device");
}

DeviceInfo device_info(int device) {
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "device properties");
  DeviceInfo d;
  d.name = p.name;
  d.sms = p.multiProcessorCount;
  d.l2_bytes = static_cast<std::size_t>(p.l2CacheSize);
  std::size_t total = 0;
  check(cudaMemGetInfo(&d.free_bytes, &total), "memory info");
  return d;
}

Buffer::Buffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes) check(cudaMalloc(&ptr_, bytes), "cudaMalloc");
}
Buffer::~Buffer() {
  if (ptr_) cudaFree(ptr_);
}
Buffer::Buffer(Buffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr;
  o.bytes_ = 0;
}
Buffer& Buffer::operator=(Buffer&& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

double time_graph_us(const std::function<void(int, void*)>& launch, int launches, double min_seconds,
                     int max_replays) {
  Stream stream;
  // One eager pass first: loads modules and surfaces errors outside of capture.
  for (int i = 0; i < std::min(launches, 2); ++i) launch(i, stream.s);
  check(cudaStreamSynchronize(stream.s), "warm-up");
  cudaGraph_t graph = nullptr;
  check(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int i = 0; i < launches; ++i) launch(i, stream.s);
  check(cudaStreamEndCapture(stream.s, &graph), "end capture");
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  Events ev;
  std::vector<double> per_launch;
  check(cudaGraphLaunch(exec, stream.s), "graph launch");  // warm-up replay
  check(cudaStreamSynchronize(stream.s), "warm-up replay");
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < max_replays; ++r) {
    check(cudaEventRecord(ev.a, stream.s), "record");
    check(cudaGraphLaunch(exec, stream.s), "graph launch");
    check(cudaEventRecord(ev.b, stream.s), "record");
    check(cudaEventSynchronize(ev.b), "sync");
    per_launch.push_back(ev.ms() * 1e3 / launches);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r >= 4 && elapsed >= min_seconds) break;
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return median(per_launch);
}

double copy_rate_tbps() {
  const std::size_t bytes = std::size_t(1) << 30;
  Buffer src(bytes), dst(bytes);
  fill_random(src.get(), DType::f32, static_cast<int64_t>(bytes / 4), 7);
  Stream stream;
  Events ev;
  std::vector<double> ms;
  for (int i = 0; i < 12; ++i) {
    check(cudaEventRecord(ev.a, stream.s), "record");
    check(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, stream.s), "copy");
    check(cudaEventRecord(ev.b, stream.s), "record");
    check(cudaEventSynchronize(ev.b), "sync");
    if (i >= 2) ms.push_back(ev.ms());
  }
  return 2.0 * static_cast<double>(bytes) / (median(ms) * 1e-3) / 1e12;
}

double empty_kernel_us() {
  return time_graph_us([](int, void* s) { launch_empty(static_cast<cudaStream_t>(s)); }, 200);
}

}  // namespace fuseops::cli::gpu
