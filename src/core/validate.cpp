#include "core/validate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

namespace fuseops::detail {

void fail_argument(const char* op, const std::string& arg, const std::string& expected, const std::string& got) {
  throw Error(ErrorKind::invalid_argument, std::string(op) + ": " + arg + ": expected " + expected + ", got " + got);
}

namespace {
/// The dtype as messages print it: its name, or its code for a field set outside the enum.
std::string dtype_text(DType dtype) {
  const std::string name = dtype_name(dtype);
  return name == "unknown" ? "dtype code " + std::to_string(static_cast<int>(dtype)) : name;
}
}  // namespace

std::string describe(const TensorView& v) {
  return v.shape_str() + " " + dtype_text(v.dtype) + " on " + device_name(v.device);
}

void check_dtype(const char* op, const char* name, const TensorView& v, std::initializer_list<DType> allowed) {
  for (DType d : allowed) {
    if (v.dtype == d) return;
  }
  std::string expected = "dtype ";
  bool first = true;
  for (DType d : allowed) {
    expected += (first ? "" : " | ");
    expected += dtype_name(d);
    first = false;
  }
  fail_argument(op, name, expected, dtype_text(v.dtype));
}

void check_same_dtype(const char* op, const char* name, const TensorView& v, const char* ref_name,
                      const TensorView& ref) {
  if (v.dtype != ref.dtype) {
    fail_argument(op, name, std::string("dtype ") + dtype_name(ref.dtype) + " (the dtype of " + ref_name + ")",
                  dtype_text(v.dtype));
  }
}

std::string number_text(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  for (int digits = 1; digits < 17; ++digits) {  // the shortest that reads back as x
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", digits, x);
    if (std::strtod(shorter, nullptr) == x) return shorter;
  }
  return buf;
}

float fp32_argument(const char* op, const char* name, double x, const char* rule, bool in_range) {
  const float f = static_cast<float>(x);
  if (!std::isfinite(f) || (f == 0.f && x != 0.0) || !in_range) {
    fail_argument(op, name,
                  std::string(rule ? std::string("a value ") + rule + ", " : "a value ") +
                      "finite in fp32, where it is used (|x| < 2^128 - 2^103 = 3.4028235677973366e+38), and, if "
                      "nonzero, not rounding to 0 there (|x| > 2^-150 = 7.006492321624085e-46)",
                  number_text(x));
  }
  return f;
}

void check_layout(const char* op, const char* name, const TensorView& v) {
  // A rank the view's arrays hold (the field is public), non-negative dims and strides, and an element count and
  // address span that fit in int64 (and in bytes).
  if (v.rank < 0 || v.rank > TensorView::kMaxRank) {
    fail_argument(op, name, "rank in [0, " + std::to_string(TensorView::kMaxRank) + "]", std::to_string(v.rank));
  }
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] < 0) fail_argument(op, name, "non-negative dims", v.shape_str());
  }
  // a dtype field set outside the enum (dtype_size() would throw without naming the op or the argument)
  if (std::string(dtype_name(v.dtype)) == "unknown") {
    fail_argument(op, name, "dtype f32, f16, bf16, i32 or i64", dtype_text(v.dtype));
  }
  int64_t span = 0, count = 1;
  bool empty = false;
  for (int i = 0; i < v.rank; ++i) {
    if (v.shape[i] == 0) empty = true;
  }
  for (int i = 0; i < v.rank; ++i) {
    if (v.strides[i] < 0) {
      fail_argument(op, name, "non-negative strides", "stride " + std::to_string(v.strides[i]) + " in dim " +
                                                          std::to_string(i) + " of " + v.shape_str());
    }
    int64_t step = 0;
    const bool overflow = !empty && (__builtin_mul_overflow(count, v.shape[i], &count) ||
                                     __builtin_mul_overflow(v.shape[i] - 1, v.strides[i], &step) ||
                                     __builtin_add_overflow(span, step, &span));
    if (overflow) fail_argument(op, name, "a size and strides whose extent fits in 64 bits", v.shape_str());
  }
  int64_t bytes = 0;
  if (!empty && __builtin_mul_overflow(span + 1, static_cast<int64_t>(dtype_size(v.dtype)), &bytes)) {
    fail_argument(op, name, "a size and strides whose extent fits in 64 bits", v.shape_str());
  }
}

void check_layouts(const char* op, std::initializer_list<NamedView> views) {
  for (const NamedView& v : views) {
    if (v.view) check_layout(op, v.name, *v.view);
  }
}

Device common_device(const char* op, std::initializer_list<NamedView> args) {
  const NamedView* first = nullptr;
  for (const NamedView& a : args) {
    check_layout(op, a.name, *a.view);
    if (a.view->numel() > 0 && a.view->data == nullptr) {
      const int64_t n = a.view->numel();
      fail_argument(op, a.name, "a data pointer for " + std::to_string(n) + (n == 1 ? " element" : " elements"),
                    a.view->rank == 0 ? "null (a rank-0 view: a default TensorView() that was never set?)" : "null");
    }
    // every kernel reads whole elements (a CUDA access of a misaligned element faults and spoils the context)
    const std::size_t esize = dtype_size(a.view->dtype);
    const auto addr = reinterpret_cast<std::uintptr_t>(a.view->data);
    if (a.view->numel() > 0 && addr % esize != 0) {
      fail_argument(op, a.name,
                    "a data pointer aligned to its element size (" + std::to_string(esize) + " bytes for " +
                        dtype_name(a.view->dtype) + ")",
                    "an address that is " + std::to_string(addr % esize) + " modulo " + std::to_string(esize));
    }
    const Device& d = a.view->device;
    if (d.kind != Device::Kind::cpu && d.kind != Device::Kind::cuda) {
      fail_argument(op, a.name, "device kind cpu or cuda", "kind code " + std::to_string(static_cast<int>(d.kind)));
    }
    if (d.index < 0 || (d.kind == Device::Kind::cpu && d.index != 0)) {
      fail_argument(op, a.name, d.kind == Device::Kind::cpu ? "cpu device index 0" : "a device index >= 0",
                    std::to_string(d.index));
    }
    if (!first) {
      first = &a;
    } else if (a.view->device != first->view->device) {
      fail_argument(op, a.name, "device " + device_name(first->view->device) + " (the device of " + first->name + ")",
                    device_name(a.view->device));
    }
  }
  return first ? first->view->device : Device::cpu();
}

void check_on_device(const char* op, const char* name, const TensorView& v, const Device& device) {
  if (v.device != device) fail_argument(op, name, "device " + device_name(device), device_name(v.device));
}

int64_t dims_product(const char* op, const char* name, const TensorView& v, int n, const char* dims) {
  for (int i = 0; i < n; ++i) {
    if (v.shape[i] == 0) return 0;
  }
  int64_t product = 1;
  for (int i = 0; i < n; ++i) {
    if (__builtin_mul_overflow(product, v.shape[i], &product)) {
      fail_argument(op, name, std::string(dims) + " whose product fits in 64 bits", v.shape_str());
    }
  }
  return product;
}

RowMatrix as_row_matrix(const char* op, const char* name, const TensorView& v) {
  if (v.rank < 1) fail_argument(op, name, "rank >= 1 [..., d]", "rank 0");
  RowMatrix m;
  m.data = v.data;
  m.dtype = v.dtype;
  m.cols = v.shape[v.rank - 1];
  m.rows = dims_product(op, name, v, v.rank - 1, "leading dims");
  if (m.cols > 1 && v.strides[v.rank - 1] != 1) {
    fail_argument(op, name, "innermost stride 1", "stride " + std::to_string(v.strides[v.rank - 1]) + " for " + v.shape_str());
  }
  if (m.rows == 0 || m.cols == 0) {  // empty: no layout to check (e.g. [3, 0, 8])
    m.row_stride = m.cols;
    return m;
  }
  // Leading dims (ignoring size-1 dims) must nest: stride[i] == stride[i+1] * shape[i+1]. (Strides are
  // non-negative and the extent fits in int64: check_layout().)
  int64_t row_stride = -1;
  int64_t inner_extent = 0;  // elements spanned by one step of the previous (inner) leading dim
  for (int i = v.rank - 2; i >= 0; --i) {
    if (v.shape[i] == 1) continue;
    if (row_stride < 0) {
      row_stride = v.strides[i];
      inner_extent = row_stride * v.shape[i];
    } else {
      if (v.strides[i] != inner_extent) {
        std::ostringstream got;
        got << "strides [";
        for (int j = 0; j < v.rank; ++j) got << (j ? ", " : "") << v.strides[j];
        got << "] for " << v.shape_str();
        fail_argument(op, name, "leading dims that flatten into rows with one row stride", got.str());
      }
      inner_extent = v.strides[i] * v.shape[i];
    }
  }
  if (row_stride < 0) row_stride = m.cols;  // at most one row
  if (m.rows > 1 && row_stride < m.cols) {
    fail_argument(op, name, "row stride >= " + std::to_string(m.cols) + " (rows must not overlap)",
                  std::to_string(row_stride));
  }
  m.row_stride = row_stride;
  return m;
}

void check_no_overlap(const char* op, const char* a_name, const RowMatrix& a, const char* b_name,
                      const RowMatrix& b) {
  if (a.rows == 0 || a.cols == 0 || b.rows == 0 || b.cols == 0) return;
  const int64_t ea = static_cast<int64_t>(dtype_size(a.dtype));
  const int64_t eb = static_cast<int64_t>(dtype_size(b.dtype));
  const auto base_a = reinterpret_cast<std::uintptr_t>(a.data);
  const auto base_b = reinterpret_cast<std::uintptr_t>(b.data);
  const std::uintptr_t end_a = base_a + static_cast<std::uintptr_t>(((a.rows - 1) * a.row_stride + a.cols) * ea);
  const std::uintptr_t end_b = base_b + static_cast<std::uintptr_t>(((b.rows - 1) * b.row_stride + b.cols) * eb);
  if (end_a <= base_b || end_b <= base_a) return;  // disjoint extents
  const bool exact = ea == eb && a.row_stride == b.row_stride && a.rows > 1 && b.rows > 1;
  if (exact) {
    // Same row pitch: the rows are disjoint iff their column intervals are disjoint modulo the pitch.
    const int64_t pitch = a.row_stride * ea;
    const int64_t delta = static_cast<int64_t>(base_b) - static_cast<int64_t>(base_a);
    int64_t off = ((delta % pitch) + pitch) % pitch;  // start of b's row relative to a's, in [0, pitch)
    const int64_t wa = a.cols * ea, wb = b.cols * eb;
    if (off >= wa && off + wb <= pitch) return;
  }
  // Said as proven where it is (same pitch as tested above, one row each, or one's first element inside the other's
  // first row); else only the address ranges meet (unequal row strides), and the message says so.
  const std::uintptr_t row_a = base_a + static_cast<std::uintptr_t>(a.cols * ea);
  const std::uintptr_t row_b = base_b + static_cast<std::uintptr_t>(b.cols * eb);
  const bool proven = exact || (a.rows == 1 && b.rows == 1) || (base_b >= base_a && base_b < row_a) ||
                      (base_a >= base_b && base_a < row_b);
  fail_argument(op, a_name, std::string("no overlap with ") + b_name,
                proven ? std::string("overlapping memory")
                      : "overlapping address ranges (row strides " + std::to_string(a.row_stride) + " and " +
                            std::to_string(b.row_stride) +
                            " elements; the test is exact for equal row strides, conservative otherwise)");
}

void check_no_internal_overlap(const char* op, const char* name, const TensorView& v) {
  if (v.numel() <= 1) return;
  // the dims of size > 1 by increasing stride; each stride must pass the largest offset of the dims before it
  std::array<std::pair<int64_t, int64_t>, TensorView::kMaxRank> dims{};
  int n = 0;
  for (int i = 0; i < v.rank; ++i) {  // insertion by stride (at most kMaxRank dims; std::sort drew a false
    if (v.shape[i] <= 1) continue;    // -Warray-bounds from GCC 12 on its unrolled paths)
    int j = n++;
    for (; j > 0 && dims[j - 1] > std::make_pair(v.strides[i], v.shape[i]); --j) dims[j] = dims[j - 1];
    dims[j] = {v.strides[i], v.shape[i]};
  }
  int64_t reach = 0;  // the largest offset of the dims taken so far (fits: check_layout())
  for (int i = 0; i < n; ++i) {
    if (dims[i].first <= reach) {
      std::string strides;
      for (int d = 0; d < v.rank; ++d) strides += (d ? ", " : "") + std::to_string(v.strides[d]);
      fail_argument(op, name,
                    "an output whose elements do not share memory (each stride, smallest first, greater than the "
                    "largest offset of the dims with smaller strides)",
                    "strides [" + strides + "] over " + v.shape_str());
    }
    reach += (dims[i].second - 1) * dims[i].first;
  }
}

void check_disjoint(const char* op, const char* a_name, const TensorView& a, const char* b_name, const TensorView& b) {
  if (a.numel() == 0 || b.numel() == 0) return;
  auto range = [](const TensorView& v) {
    int64_t span = 0;
    for (int i = 0; i < v.rank; ++i) span += (v.shape[i] - 1) * v.strides[i];  // fits: check_layout()
    const auto lo = reinterpret_cast<std::uintptr_t>(v.data);
    return std::pair<std::uintptr_t, std::uintptr_t>(lo, lo + static_cast<std::uintptr_t>((span + 1) *
                                                                                          static_cast<int64_t>(dtype_size(v.dtype))));
  };
  const auto ra = range(a), rb = range(b);
  if (ra.second <= rb.first || rb.second <= ra.first) return;
  // (a test of the address ranges: elements interleaved without sharing a byte are refused too; say so)
  fail_argument(op, a_name, std::string("no overlap with ") + b_name + " (their address ranges are compared)",
                "overlapping address ranges");
}

void check_shape_like(const char* op, const char* name, const TensorView& v, const char* ref_name,
                      const TensorView& ref, int64_t expected_last) {
  bool ok = v.rank == ref.rank && v.rank >= 1 && v.shape[v.rank - 1] == expected_last;
  for (int i = 0; ok && i < v.rank - 1; ++i) ok = v.shape[i] == ref.shape[i];
  if (!ok) {
    std::string expected = "shape [";
    for (int i = 0; i < ref.rank - 1; ++i) expected += std::to_string(ref.shape[i]) + ", ";
    // the whole shape of ref where the last dims agree, else ref's leading dims and the width the op derives
    const bool whole = ref.rank >= 1 && ref.shape[ref.rank - 1] == expected_last;
    expected += std::to_string(expected_last) + "] (" + std::string(ref_name) +
                (whole ? "'s shape)" : "'s leading dims, last dim " + std::to_string(expected_last) + ")");
    fail_argument(op, name, expected, v.shape_str());
  }
}

}  // namespace fuseops::detail
