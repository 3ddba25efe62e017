// Element access of the CPU backends: a RowMatrix element (or a plain array element) of any float storage dtype, as
// fp32, and a store rounded once to the storage dtype.
#pragma once

#include <cstdint>

#include "common/half.h"
#include "core/validate.h"

namespace fuseops::detail::cpu {

/// Element i of a contiguous array of `dtype`, as fp32.
inline float load(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    default: return static_cast<const float*>(data)[i];
  }
}

/// Stores v at element i of a contiguous array of `dtype`, rounded once.
inline void store(void* data, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::f16: static_cast<uint16_t*>(data)[i] = float_to_f16(v); break;
    case DType::bf16: static_cast<uint16_t*>(data)[i] = float_to_bf16(v); break;
    default: static_cast<float*>(data)[i] = v; break;
  }
}

inline float load(const RowMatrix& m, int64_t r, int64_t c) { return load(m.data, m.dtype, r * m.row_stride + c); }

inline void store(const RowMatrix& m, int64_t r, int64_t c, float v) {
  store(m.data, m.dtype, r * m.row_stride + c, v);
}

}  // namespace fuseops::detail::cpu
