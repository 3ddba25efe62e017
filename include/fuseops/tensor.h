// fuseops public API: tensors, devices, streams.
// Host-only header: compiles without CUDA and without torch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace fuseops {

/// Element types a TensorView can hold.
enum class DType : int32_t { f32 = 0, f16 = 1, bf16 = 2, i32 = 3, i64 = 4 };

/// Size of one element in bytes.
std::size_t dtype_size(DType dtype);
/// "f32", "f16", "bf16", "i32", "i64".
const char* dtype_name(DType dtype);
/// True for f32, f16 and bf16.
bool is_floating(DType dtype);

/// Where a tensor lives.
struct Device {
  enum class Kind : int32_t { cpu = 0, cuda = 1 };
  Kind kind = Kind::cpu;
  int32_t index = 0;  ///< CUDA ordinal; 0 for the CPU.

  static Device cpu() { return Device{Kind::cpu, 0}; }
  static Device cuda(int32_t index = 0) { return Device{Kind::cuda, index}; }
  bool is_cuda() const { return kind == Kind::cuda; }
  bool operator==(const Device& o) const { return kind == o.kind && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

/// "cpu" or "cuda:N" ("device kind code K" for a kind outside the enum).
std::string device_name(const Device& device);

/// A non-owning view of a strided tensor: data pointer, dtype, device, shape and strides.
/// Strides count elements, not bytes. Rank is at most kMaxRank. A rank-0 view is a scalar. numel, size, stride,
/// is_contiguous and slice throw Error(invalid_argument) for a `rank` outside [0, kMaxRank] (the field set by hand).
/// Every op refuses (Error(invalid_argument), naming the argument) a data pointer that is not a multiple of the
/// element size (4 bytes for f32 / i32, 8 for i64, 2 for f16 / bf16), a null data pointer where there are elements,
/// and a negative stride (a view reversed along a dim; pass a copy); some ops ask more of some arguments (a 16-byte
/// aligned workspace, an innermost stride of 1, contiguous outputs: their docs say so). The data pointer is not const:
/// a view of read-only memory is made with a const_cast, and must then only be passed where the op reads.
/// Like std::span, a const TensorView is a view that is not changed, not read-only data: optional arguments are passed
/// as pointers to views (null: absent), `const TensorView*` or `TensorView*` alike, and whether an op writes an
/// argument (rope's key, the norms' mean and rstd, the GDN final_state) is said by its doc, not by that const.
struct TensorView {
  static constexpr int kMaxRank = 8;

  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  int32_t rank = 0;
  int64_t shape[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};

  TensorView() = default;
  /// A contiguous (row-major) view. Throws fuseops::Error if the rank exceeds kMaxRank or a dim is negative. A shape
  /// of more than 2^63 - 1 elements is not refused here: strides past that range saturate at INT64_MAX and numel()
  /// returns INT64_MAX; every op refuses such a view, naming the argument (its extent does not fit in 64 bits).
  TensorView(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape);
  /// A strided view; `strides` must have as many entries as `shape`.
  TensorView(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape,
             std::initializer_list<int64_t> strides);
  /// Same, from arrays of `rank` entries (for bindings, or a shape held in a std::vector: pass `v.data()`); a null
  /// `strides` gives the contiguous (row-major) strides, as the first constructor. Throws fuseops::Error as the
  /// constructors do, and for a null `shape` with rank > 0.
  static TensorView from_arrays(void* data, DType dtype, Device device, int32_t rank, const int64_t* shape,
                                const int64_t* strides = nullptr);

  /// Number of elements (1 for rank 0).
  int64_t numel() const;
  /// Size of dim `i`; negative `i` counts from the end.
  int64_t size(int i) const;
  /// Stride of dim `i` in elements; negative `i` counts from the end.
  int64_t stride(int i) const;
  /// True if the strides are those of a row-major contiguous tensor (size-1 dims are ignored; a tensor without
  /// elements is contiguous, as in PyTorch). False where a row-major stride would exceed 2^63 - 1.
  bool is_contiguous() const;
  /// "[2, 64, 128]".
  std::string shape_str() const;
  /// A view of elements [start, start + length) of dim `dim` (same strides). Throws Error(invalid_argument) for a
  /// range outside the dim, or a byte offset start * stride * element size that does not fit in 64 bits. A slice of
  /// a view whose data is null has null data.
  TensorView slice(int dim, int64_t start, int64_t length) const;
};

/// A CUDA stream handle (a `cudaStream_t`), or none for the legacy default stream. CPU tensors run on the calling
/// thread and ignore it (a stream passed with them is not an error).
struct Stream {
  void* handle = nullptr;
  Stream() = default;
  explicit Stream(void* cuda_stream) : handle(cuda_stream) {}
};

}  // namespace fuseops
