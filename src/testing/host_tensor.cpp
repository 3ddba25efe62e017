#include "testing/host_tensor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "common/half.h"
#include "core/env.h"
#include "testing/parallel.h"
#include "fuseops/error.h"

#if defined(FUSEOPS_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace fuseops::testing {

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape, int64_t row_pitch)
    : dtype_(dtype), shape_(std::move(shape)) {
  const int64_t c = cols();
  pitch_ = row_pitch > 0 ? row_pitch : c;
  if (pitch_ < c) throw Error(ErrorKind::invalid_argument, "HostTensor: row_pitch < last dim");
  const int64_t r = rows();
  const int64_t elems = r == 0 ? 0 : (r - 1) * pitch_ + c;
  storage_.assign(static_cast<std::size_t>(elems) * dtype_size(dtype_), 0);
}

int64_t HostTensor::rows() const {
  int64_t r = 1;
  for (std::size_t i = 0; i + 1 < shape_.size(); ++i) r *= shape_[i];
  return r;
}

TensorView HostTensor::view() const { return view_at(const_cast<unsigned char*>(storage_.data()), Device::cpu()); }

TensorView HostTensor::view_at(void* device_data, Device device) const {
  int64_t strides[TensorView::kMaxRank];
  const int rank = static_cast<int>(shape_.size());
  int64_t running = pitch_;
  for (int i = rank - 1; i >= 0; --i) {
    if (i == rank - 1) {
      strides[i] = 1;
    } else {
      strides[i] = running;
      running *= shape_[i];
    }
  }
  return TensorView::from_arrays(device_data, dtype_, device, rank, shape_.data(), strides);
}

double HostTensor::get(int64_t r, int64_t c) const {
  const int64_t i = r * pitch_ + c;
  switch (dtype_) {
    case DType::f32: return reinterpret_cast<const float*>(storage_.data())[i];
    case DType::f16: return detail::f16_to_float(reinterpret_cast<const uint16_t*>(storage_.data())[i]);
    case DType::bf16: return detail::bf16_to_float(reinterpret_cast<const uint16_t*>(storage_.data())[i]);
    case DType::i32: return reinterpret_cast<const int32_t*>(storage_.data())[i];
    case DType::i64: return static_cast<double>(reinterpret_cast<const int64_t*>(storage_.data())[i]);
  }
  return 0;
}

void HostTensor::set(int64_t r, int64_t c, float v) {
  const int64_t i = r * pitch_ + c;
  switch (dtype_) {
    case DType::f32: reinterpret_cast<float*>(storage_.data())[i] = v; break;
    case DType::f16: reinterpret_cast<uint16_t*>(storage_.data())[i] = detail::float_to_f16(v); break;
    case DType::bf16: reinterpret_cast<uint16_t*>(storage_.data())[i] = detail::float_to_bf16(v); break;
    case DType::i32: reinterpret_cast<int32_t*>(storage_.data())[i] = static_cast<int32_t>(v); break;
    case DType::i64: reinterpret_cast<int64_t*>(storage_.data())[i] = static_cast<int64_t>(v); break;
  }
}

std::vector<double> HostTensor::to_double() const {
  std::vector<double> out(static_cast<std::size_t>(numel()));
  const int64_t c = cols();
  for (int64_t r = 0, k = 0; r < rows(); ++r) {
    for (int64_t j = 0; j < c; ++j) out[k++] = get(r, j);
  }
  return out;
}

void HostTensor::poison() {
  const std::size_t n = storage_.size() / dtype_size(dtype_);
  for (std::size_t i = 0; i < n; ++i) {
    switch (dtype_) {
      case DType::f32: reinterpret_cast<float*>(storage_.data())[i] = std::numeric_limits<float>::quiet_NaN(); break;
      case DType::f16: reinterpret_cast<uint16_t*>(storage_.data())[i] = 0x7e00u; break;
      case DType::bf16: reinterpret_cast<uint16_t*>(storage_.data())[i] = 0x7fc0u; break;
      case DType::i32: reinterpret_cast<int32_t*>(storage_.data())[i] = -0x5a5a5a5a; break;
      case DType::i64: reinterpret_cast<int64_t*>(storage_.data())[i] = -0x5a5a5a5a5a5a5a5aLL; break;
    }
  }
}

HostTensor index_tensor(DType dtype, std::vector<int64_t> shape, const std::vector<int64_t>& values) {
  if (dtype != DType::i32 && dtype != DType::i64) {
    throw Error(ErrorKind::invalid_argument, "index_tensor: dtype must be i32 or i64");
  }
  HostTensor t(dtype, std::move(shape));
  if (static_cast<int64_t>(values.size()) > t.numel()) {
    throw Error(ErrorKind::invalid_argument, "index_tensor: more values than elements");
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::i32) {
      static_cast<int32_t*>(t.data())[i] = static_cast<int32_t>(values[i]);
    } else {
      static_cast<int64_t*>(t.data())[i] = values[i];
    }
  }
  return t;
}

HostTensor index_tensor(DType dtype, const std::vector<int64_t>& values) {
  return index_tensor(dtype, {static_cast<int64_t>(values.size())}, values);
}

const char* fill_name(Fill fill) {
  switch (fill) {
    case Fill::normal: return "normal";
    case Fill::wide: return "wide";
    case Fill::adversarial: return "adversarial";
  }
  return "?";
}

namespace {
void fill_rows(HostTensor& t, Fill fill, std::mt19937_64& rng, int64_t row_begin, int64_t row_end);
}

void fill_random(HostTensor& t, Fill fill, std::mt19937_64& rng) { fill_rows(t, fill, rng, 0, t.rows()); }

void fill_random_seeded(HostTensor& t, Fill fill, uint64_t seed) {
  const int64_t block = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, t.cols()));
  parallel_chunks(t.rows(), block, [&](int64_t k, int64_t begin, int64_t end) {
    std::mt19937_64 rng(seed + 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(k + 1));
    fill_rows(t, fill, rng, begin, end);
  });
}

namespace {
void fill_rows(HostTensor& t, Fill fill, std::mt19937_64& rng, int64_t row_begin, int64_t row_end) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t c = 0; c < t.cols(); ++c) {
      float v = normal(rng);
      if (fill == Fill::wide) {
        v *= std::pow(10.0f, -3.0f + 5.0f * uni(rng));
      } else if (fill == Fill::adversarial) {
        const float p = uni(rng);
        const float sign = uni(rng) < 0.5f ? -1.0f : 1.0f;
        if (p < 0.04f) v = sign * inf;
        else if (p < 0.08f) v = std::numeric_limits<float>::quiet_NaN();
        else if (p < 0.14f) v = sign * 0.0f;
        else if (p < 0.20f) v = sign * 1e-30f * (1.0f + uni(rng));
        else if (p < 0.30f) v = sign * 1e4f * (1.0f + uni(rng));
        else if (p < 0.40f) v = sign * (20.0f + 70.0f * uni(rng));
        else if (p < 0.50f) v = sign * (3.0f + 10.0f * uni(rng));
      }
      t.set(r, c, v);
    }
  }
}
}  // namespace

uint64_t parse_seed(const char* what, const std::string& text) {
  // Decimal digits only (strtoull's base prefixes would read "010" as 8 and "0x10" as 16; "-1", " 1" and "1e3" are
  // no seeds either): leading zeros are decimal, so "010" is 10.
  uint64_t v = 0;
  if (text.find('\0') != std::string::npos || !fuseops::detail::parse_decimal(text.c_str(), &v)) {
    throw Error(ErrorKind::invalid_argument,
                std::string(what) + ": expected a decimal integer seed in [0, 2^64 - 1], got \"" + text + "\"");
  }
  return v;
}

uint64_t seed_from_env_or_clock() {
  const char* s = std::getenv("FUSEOPS_SEED");
  if (s && *s) return parse_seed("FUSEOPS_SEED", s);  // FUSEOPS_SEED= (empty) counts as unset
  return static_cast<uint64_t>(std::chrono::high_resolution_clock::now().time_since_epoch().count());
}

#if defined(FUSEOPS_WITH_CUDA)
namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    throw Error(ErrorKind::device_failure, std::string("testing: ") + what + ": " + cudaGetErrorString(e));
  }
}
}  // namespace

DeviceTensor::DeviceTensor(const HostTensor& host, int device) : bytes_(host.bytes()), device_(device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  if (bytes_ > 0) check(cudaMalloc(&ptr_, bytes_), "cudaMalloc");
  view_ = host.view_at(ptr_, Device::cuda(device));
  copy_from(host);
}

DeviceTensor::~DeviceTensor() {
  if (ptr_) cudaFree(ptr_);
}

void DeviceTensor::copy_to(HostTensor& host) const {
  if (bytes_ > 0) check(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), "copy to host");
}

void DeviceTensor::copy_from(const HostTensor& host) {
  if (bytes_ > 0) check(cudaMemcpy(ptr_, host.data(), bytes_, cudaMemcpyHostToDevice), "copy to device");
}

void device_synchronize(int device) {
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}
#else
DeviceTensor::DeviceTensor(const HostTensor&, int) {
  throw Error(ErrorKind::unsupported, "testing: this build has no CUDA backend");
}
DeviceTensor::~DeviceTensor() = default;
void DeviceTensor::copy_to(HostTensor&) const {}
void DeviceTensor::copy_from(const HostTensor&) {}
void device_synchronize(int) {}
#endif

}  // namespace fuseops::testing
