// CUDA runtime helpers and the per-device error record.
#include <atomic>
#include <climits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "common/cuda_arch.h"
#include "cuda/device_error.h"
#include "cuda/launch.h"
#include "fuseops/version.h"

namespace fuseops {

bool built_with_cuda() { return true; }

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // no driver or no device: clear the sticky-free error and report none
      return 0;
    }
    return n;
  }();
  return count;
}

namespace detail {

void check_cuda(cudaError_t status, const char* op, const char* what) {
  if (status != cudaSuccess) {
    throw Error(ErrorKind::device_failure,
                std::string(op) + ": " + what + ": " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")");
  }
}

DeviceGuard::DeviceGuard(int device, const char* op) {
  check_cuda(cudaGetDevice(&previous_), op, "cudaGetDevice");
  if (previous_ != device) {
    check_cuda(cudaSetDevice(device), op, "cudaSetDevice");
  } else {
    previous_ = -1;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

int device_attribute(cudaDeviceAttr attr, int device) {
  static std::mutex mutex;
  static std::map<std::pair<int, int>, int> known;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_pair(static_cast<int>(attr), device);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int value = 0;
  check_cuda(cudaDeviceGetAttribute(&value, attr, device), "fuseops", "cudaDeviceGetAttribute");
  known.emplace(key, value);
  return value;
}

int sm_count(int device) { return device_attribute(cudaDevAttrMultiProcessorCount, device); }

namespace {

/// decide(major, minor) for `device`, cached in `cache` (a lock-free cache per device: 0 unknown, 1 no, 2 yes; read
/// on every launch).
template <typename Decide>
bool cached_capability(std::atomic<int> (&cache)[64], int device, Decide decide) {
  if (device < 0 || device >= 64) return false;
  int state = cache[device].load(std::memory_order_relaxed);
  if (state == 0) {
    int major = 0, minor = 0;
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "fuseops",
               "compute capability");
    check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "fuseops",
               "compute capability");
    state = decide(major, minor) ? 2 : 1;
    cache[device].store(state, std::memory_order_relaxed);
  }
  return state == 2;
}

}  // namespace

bool is_sm90_or_newer(int device) {
  static std::atomic<int> cache[64];
  return cached_capability(cache, device, [](int major, int minor) {
    // The code that runs must have been compiled for sm_90+ too (common/cuda_arch.h); an unreadable list
    // ("native", "all") leaves the device's capability to decide.
    const int code = cuda_code_arch(FUSEOPS_CUDA_ARCH_LIST, major, minor);
    return major >= 9 && (code < 0 || code >= 90);
  });
}

bool runs_sm90a_code(int device) {
  static std::atomic<int> cache[64];
  return cached_capability(cache, device,
                           [](int major, int minor) { return cuda_code_is_sm90a(FUSEOPS_CUDA_ARCH_LIST, major, minor); });
}

bool pdl_enabled(int device) {
  static const bool allowed = !env_switched_off("FUSEOPS_PDL");
  return allowed && is_sm90_or_newer(device);
}

namespace {
std::mutex g_records_mutex;
std::vector<DeviceErrorRecord*> g_records;  // per device, null until first use
const DeviceErrorRecord kClearRecord{0u, 0u, ULLONG_MAX};
}  // namespace

DeviceErrorRecord* cuda_error_record(int device) {
  std::lock_guard<std::mutex> lock(g_records_mutex);
  if (device >= static_cast<int>(g_records.size())) g_records.resize(device + 1, nullptr);
  if (!g_records[device]) {
    // cudaMalloc is not allowed while a stream is being captured in global mode; the allocation is not part of
    // the captured work, so switch this thread to relaxed mode for it.
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    check_cuda(cudaThreadExchangeStreamCaptureMode(&mode), "fuseops", "capture mode");
    DeviceErrorRecord* rec = nullptr;
    cudaError_t status = cudaMalloc(&rec, sizeof(DeviceErrorRecord));
    if (status == cudaSuccess) {
      status = cudaMemcpy(rec, &kClearRecord, sizeof(kClearRecord), cudaMemcpyHostToDevice);
    }
    cudaThreadExchangeStreamCaptureMode(&mode);
    check_cuda(status, "fuseops", "allocating the device error record");
    g_records[device] = rec;
  }
  return g_records[device];
}

namespace {
// Reads and clears one record; returns the record as it was.
DeviceErrorRecord take_record(int device) {
  DeviceErrorRecord* rec = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_records_mutex);
    if (device < static_cast<int>(g_records.size())) rec = g_records[device];
  }
  DeviceErrorRecord value = kClearRecord;
  if (!rec) return value;
  DeviceGuard guard(device, "check_errors");
  check_cuda(cudaDeviceSynchronize(), "check_errors", "synchronising the device");
  check_cuda(cudaMemcpy(&value, rec, sizeof(value), cudaMemcpyDeviceToHost), "check_errors", "reading the record");
  if (value.site != 0u) {
    check_cuda(cudaMemcpy(rec, &kClearRecord, sizeof(kClearRecord), cudaMemcpyHostToDevice), "check_errors",
               "clearing the record");
  }
  return value;
}

std::vector<int> devices_to_check(int device) {
  std::vector<int> devices;
  if (device >= 0) {
    devices.push_back(device);
  } else {
    std::lock_guard<std::mutex> lock(g_records_mutex);
    for (int d = 0; d < static_cast<int>(g_records.size()); ++d) {
      if (g_records[d]) devices.push_back(d);
    }
  }
  return devices;
}
}  // namespace

void cuda_check_errors(int device) {
  for (int d : devices_to_check(device)) {
    const DeviceErrorRecord rec = take_record(d);
    if (rec.site != 0u) {
      throw Error(ErrorKind::device_value,
                  error_site_message(rec.site, rec.index) + " (first bad index recorded on cuda:" + std::to_string(d) + ")");
    }
  }
}

void cuda_clear_errors(int device) {
  for (int d : devices_to_check(device)) (void)take_record(d);
}

void after_launch(const char* op, cudaStream_t stream, int device) {
  check_cuda(cudaGetLastError(), op, "kernel launch");
  if (debug_mode()) {
    check_cuda(cudaStreamSynchronize(stream), op, "kernel execution (FUSEOPS_DEBUG)");
    cuda_check_errors(device);
  }
}

}  // namespace detail
}  // namespace fuseops
