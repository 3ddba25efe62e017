// Host tensors for the golden, the tests and the command line: owning storage, random fills, conversion to
// double, and copies to and from a CUDA device. Not part of the installed library.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "fuseops/tensor.h"

namespace fuseops::testing {

/// An owning contiguous host tensor, optionally inside a wider row (row_pitch >= last dim) so that views
/// with a row stride larger than their width can be made.
class HostTensor {
 public:
  HostTensor() = default;
  /// Contiguous [shape...]; `row_pitch` (>= last dim, 0 = last dim) spaces the rows of the last dim.
  HostTensor(DType dtype, std::vector<int64_t> shape, int64_t row_pitch = 0);

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t rows() const;
  int64_t cols() const { return shape_.empty() ? 1 : shape_.back(); }
  int64_t row_pitch() const { return pitch_; }
  int64_t numel() const { return rows() * cols(); }
  std::size_t bytes() const { return storage_.size(); }
  void* data() { return storage_.data(); }
  const void* data() const { return storage_.data(); }

  /// A CPU view (strided when row_pitch > last dim).
  TensorView view() const;
  /// The same layout at a device pointer.
  TensorView view_at(void* device_data, Device device) const;

  /// Element (row r, col c) as double, and set from float (rounded to the storage dtype once).
  double get(int64_t r, int64_t c) const;
  void set(int64_t r, int64_t c, float v);
  /// All elements (row-major [rows, cols]) as double.
  std::vector<double> to_double() const;
  /// Fills every element, padding included, with NaN (floats) or a sentinel (ints).
  void poison();

 private:
  DType dtype_ = DType::f32;
  std::vector<int64_t> shape_;
  int64_t pitch_ = 0;
  std::vector<unsigned char> storage_;
};

/// A contiguous i32 or i64 tensor of `shape` whose first values.size() elements (row-major) are `values`, stored
/// exactly (cu_seqlens, slot indices; i32 values are truncated like static_cast<int32_t>). Throws Error for another
/// dtype or more values than elements.
HostTensor index_tensor(DType dtype, std::vector<int64_t> shape, const std::vector<int64_t>& values);
/// The 1-D index tensor [values.size()] holding `values`.
HostTensor index_tensor(DType dtype, const std::vector<int64_t>& values);

/// Value distributions for random inputs.
enum class Fill {
  normal,       ///< N(0, 1)
  wide,         ///< N(0, 1) scaled by 10^U(-3, 2): magnitudes from 1e-3 to ~300
  adversarial,  ///< mix: large magnitudes (±1e4), ±inf, NaN, ±0, tiny (1e-30), values near where the
                ///< activation saturates (±20, ±90), and normal values
};

const char* fill_name(Fill fill);

/// Fills `t` from `rng` with the distribution (values rounded to t's dtype).
void fill_random(HostTensor& t, Fill fill, std::mt19937_64& rng);

/// Fills `t` deterministically from `seed`, in parallel over fixed blocks of rows (the same values for any
/// thread count).
void fill_random_seeded(HostTensor& t, Fill fill, uint64_t seed);

/// Parses a seed: decimal digits only, 0 .. 2^64-1 (leading zeros are decimal: "010" is 10); throws
/// Error(invalid_argument) naming `what` for anything else ("0x10", "-1", " 1", "", too large).
uint64_t parse_seed(const char* what, const std::string& text);
/// A seed from the environment (FUSEOPS_SEED, parsed strictly; set but empty counts as unset) or from the clock, to
/// be printed by the caller.
uint64_t seed_from_env_or_clock();

/// Device memory holding a copy of a HostTensor (same layout). In a build without CUDA, constructing one throws.
class DeviceTensor {
 public:
  DeviceTensor(const HostTensor& host, int device = 0);
  ~DeviceTensor();
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  TensorView view() const { return view_; }
  void* data() const { return ptr_; }
  /// Copies the device contents back into `host` (same layout).
  void copy_to(HostTensor& host) const;
  void copy_from(const HostTensor& host);

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = 0;
  TensorView view_;
};

/// Waits for all work on `device` (no-op without CUDA).
void device_synchronize(int device = 0);

}  // namespace fuseops::testing
