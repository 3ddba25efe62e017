// TensorView, DType and Device helpers.
#include <cstdint>
#include <sstream>

#include "fuseops/error.h"
#include "fuseops/tensor.h"

namespace fuseops {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
  }
  throw Error(ErrorKind::invalid_argument, "dtype: unknown dtype code " + std::to_string(static_cast<int>(dtype)));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
  }
  return "unknown";
}

bool is_floating(DType dtype) { return dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16; }

std::string device_name(const Device& device) {
  if (device.is_cuda()) return "cuda:" + std::to_string(device.index);
  if (device.kind == Device::Kind::cpu) return "cpu";
  // a kind set by hand outside the enum: said as such, never taken for the CPU
  return "device kind code " + std::to_string(static_cast<int>(device.kind));
}

namespace {
void fill_view(TensorView& v, int32_t rank, const int64_t* shape, const int64_t* strides) {
  if (rank < 0 || rank > TensorView::kMaxRank) {
    throw Error(ErrorKind::invalid_argument, "TensorView: expected rank in [0, " + std::to_string(TensorView::kMaxRank) +
                                                 "], got " + std::to_string(rank));
  }
  if (rank > 0 && !shape) throw Error(ErrorKind::invalid_argument, "TensorView: expected a shape array, got null");
  v.rank = rank;
  int64_t running = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] < 0) {
      throw Error(ErrorKind::invalid_argument,
                  "TensorView: expected non-negative sizes, got " + std::to_string(shape[i]) + " in dim " + std::to_string(i));
    }
    v.shape[i] = shape[i];
    v.strides[i] = strides ? strides[i] : running;
    // Contiguous strides of a tensor with more than 2^63 elements do not exist; checked by validate_extent().
    if (!strides && shape[i] > 0 && __builtin_mul_overflow(running, shape[i], &running)) running = INT64_MAX;
  }
}
}  // namespace

TensorView::TensorView(void* data_, DType dtype_, Device device_, std::initializer_list<int64_t> shape_)
    : data(data_), dtype(dtype_), device(device_) {
  fill_view(*this, static_cast<int32_t>(shape_.size()), shape_.begin(), nullptr);
}

TensorView::TensorView(void* data_, DType dtype_, Device device_, std::initializer_list<int64_t> shape_,
                       std::initializer_list<int64_t> strides_)
    : data(data_), dtype(dtype_), device(device_) {
  if (shape_.size() != strides_.size()) {
    throw Error(ErrorKind::invalid_argument, "TensorView: expected as many strides as dims, got " +
                                                 std::to_string(strides_.size()) + " strides for " +
                                                 std::to_string(shape_.size()) + " dims");
  }
  fill_view(*this, static_cast<int32_t>(shape_.size()), shape_.begin(), strides_.begin());
}

TensorView TensorView::from_arrays(void* data, DType dtype, Device device, int32_t rank, const int64_t* shape,
                                   const int64_t* strides) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  fill_view(v, rank, shape, strides);
  return v;
}

namespace {
/// The public `rank` field set by hand past what the shape and stride arrays hold: an error, never a read past them.
void check_rank(const TensorView& v, const char* what) {
  if (v.rank < 0 || v.rank > TensorView::kMaxRank) {
    throw Error(ErrorKind::invalid_argument, std::string("TensorView::") + what + ": expected rank in [0, " +
                                                 std::to_string(TensorView::kMaxRank) + "], got " +
                                                 std::to_string(v.rank));
  }
}
}  // namespace

int64_t TensorView::numel() const {
  check_rank(*this, "numel");
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] == 0) return 0;
  }
  for (int i = 0; i < rank; ++i) {
    if (__builtin_mul_overflow(n, shape[i], &n)) return INT64_MAX;  // saturates; ops reject it (validate.cpp)
  }
  return n;
}

static int wrap_dim(int i, int rank) {
  int j = i < 0 ? i + rank : i;
  if (j < 0 || j >= rank) {
    throw Error(ErrorKind::invalid_argument,
                "TensorView: dim " + std::to_string(i) + " out of range for rank " + std::to_string(rank));
  }
  return j;
}

int64_t TensorView::size(int i) const {
  check_rank(*this, "size");
  return shape[wrap_dim(i, rank)];
}
int64_t TensorView::stride(int i) const {
  check_rank(*this, "stride");
  return strides[wrap_dim(i, rank)];
}

bool TensorView::is_contiguous() const {
  check_rank(*this, "is_contiguous");
  if (numel() == 0) return true;  // as PyTorch: no element is out of place (strides of a 0-sized view vary)
  int64_t expected = 1;
  for (int i = rank - 1; i >= 0; --i) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return false;
    // the outermost size is not needed; past 2^63 - 1 elements no stride can be the next one's expected value
    if (i > 0 && __builtin_mul_overflow(expected, shape[i], &expected)) return false;
  }
  return true;
}

std::string TensorView::shape_str() const {
  if (rank < 0 || rank > kMaxRank) return "[rank " + std::to_string(rank) + " outside 0.." + std::to_string(kMaxRank) + "]";
  std::ostringstream os;
  os << '[';
  for (int i = 0; i < rank; ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

TensorView TensorView::slice(int dim, int64_t start, int64_t length) const {
  check_rank(*this, "slice");
  int d = wrap_dim(dim, rank);
  // no sum or product that can wrap: start + length and start * stride * size are checked before they are formed
  if (start < 0 || length < 0 || start > shape[d] || length > shape[d] - start) {
    throw Error(ErrorKind::invalid_argument, "TensorView::slice: range of " + std::to_string(length) +
                                                 " elements from " + std::to_string(start) + " outside dim " +
                                                 std::to_string(d) + " of size " + std::to_string(shape[d]));
  }
  int64_t offset = 0;
  if (__builtin_mul_overflow(start, strides[d], &offset) ||
      __builtin_mul_overflow(offset, static_cast<int64_t>(dtype_size(dtype)), &offset)) {
    throw Error(ErrorKind::invalid_argument, "TensorView::slice: the byte offset of element " + std::to_string(start) +
                                                 " of dim " + std::to_string(d) + " (stride " +
                                                 std::to_string(strides[d]) + ") does not fit in 64 bits");
  }
  TensorView v = *this;
  // a null view stays null (an offset from null is no address: the ops then refuse it where it has elements)
  v.data = data ? static_cast<char*>(data) + offset : nullptr;
  v.shape[d] = length;
  return v;
}

}  // namespace fuseops
