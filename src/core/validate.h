// Argument validation shared by every backend. Each op validates once, here, before dispatch.
#pragma once

#include <initializer_list>
#include <string>

#include "fuseops/error.h"
#include "fuseops/tensor.h"

namespace fuseops::detail {

/// Throws Error(invalid_argument) with "<op>: <arg>: expected <expected>, got <got>".
[[noreturn]] void fail_argument(const char* op, const std::string& arg, const std::string& expected,
                                const std::string& got);

/// A floating-point argument as messages print it: shortest round-trip form ("1e+39", "0.3", "nan").
std::string number_text(double x);

/// A floating-point argument the kernels use in fp32: returns it as a float, or throws Error(invalid_argument)
/// naming `op` and `name` when it is not finite in fp32 (NaN, +-inf, |x| > 3.4028235e38), when it is nonzero but
/// rounds to 0 there (|x| <= 7.0e-46: underflow), or when `in_range` is false (the op's own rule, `rule`: "> 0").
float fp32_argument(const char* op, const char* name, double x, const char* rule = nullptr, bool in_range = true);

/// A named tensor argument, for messages.
struct NamedView {
  const char* name;
  const TensorView* view;
};

/// dtype must be one of `allowed`.
void check_dtype(const char* op, const char* name, const TensorView& v, std::initializer_list<DType> allowed);
/// v.dtype == ref.dtype.
void check_same_dtype(const char* op, const char* name, const TensorView& v, const char* ref_name,
                      const TensorView& ref);
/// A rank in [0, kMaxRank], a dtype of the enum, non-negative dims and strides, and an extent (elements, address span
/// in bytes) that fits in int64.
void check_layout(const char* op, const char* name, const TensorView& v);
/// check_layout() of each view (a null view: an absent optional, skipped), before any of their dims is read: a
/// malformed view is named itself, not a valid argument whose shape is compared with its dims.
void check_layouts(const char* op, std::initializer_list<NamedView> views);
/// Every tensor passes check_layout(), has a valid device and a data pointer (aligned to its element size) when it has
/// elements, and all are on the same device; returns that device.
Device common_device(const char* op, std::initializer_list<NamedView> args);
/// v.device == device (the op's device, from common_device of its other arguments).
void check_on_device(const char* op, const char* name, const TensorView& v, const Device& device);

/// A tensor seen as rows of contiguous elements: element (r, c) is at data + r * row_stride + c.
struct RowMatrix {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;  // elements
  DType dtype = DType::f32;
};

/// The product of dims [0, n) of `v` (e.g. its rows or tokens): 0 when one of them is 0; an error naming `name`
/// ("<dims> whose product fits in 64 bits") when it does not fit in int64, which check_layout() rules out for a view
/// with elements, but not for one whose later dim is 0.
int64_t dims_product(const char* op, const char* name, const TensorView& v, int n, const char* dims);
/// Flattens [..., cols] into rows: rank >= 1, innermost stride 1 (when cols > 1), leading dims expressible with
/// one row stride, row stride >= cols (rows do not overlap).
RowMatrix as_row_matrix(const char* op, const char* name, const TensorView& v);

/// Error unless the elements of `a` and `b` are disjoint (exact for equal row strides, conservative otherwise).
void check_no_overlap(const char* op, const char* a_name, const RowMatrix& a, const char* b_name,
                      const RowMatrix& b);

/// Error unless the address ranges spanned by `a` and `b` are disjoint (conservative: interleaved views that share
/// no element are rejected too). Empty views never overlap.
void check_disjoint(const char* op, const char* a_name, const TensorView& a, const char* b_name, const TensorView& b);
/// No two elements of the output view `v` share an address (after check_layout()). Tested by a sufficient rule: the
/// dims of size > 1 sorted by stride, each stride exceeds the largest offset the smaller-stride dims reach (so a
/// broadcast (stride 0) or interleaved output is refused, and so are rare non-overlapping interleavings).
void check_no_internal_overlap(const char* op, const char* name, const TensorView& v);

/// Same rank and leading dims as `ref`, and a last dim of `expected_last`; the message names `name` and `ref_name`.
void check_shape_like(const char* op, const char* name, const TensorView& v, const char* ref_name,
                      const TensorView& ref, int64_t expected_last);

/// "[2, 64, 128]" with dtype and device, for messages.
std::string describe(const TensorView& v);

}  // namespace fuseops::detail
