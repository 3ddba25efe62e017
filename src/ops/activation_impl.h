// Internal interface between the activation op (validation, ops/activation.cpp) and its backends.
#pragma once

#include "common/act_math.h"
#include "core/validate.h"

namespace fuseops::detail {

/// out = act(gate) * up, row by row. All matrices have the same dtype, rows and cols.
struct ActAndMulArgs {
  Act act;
  RowMatrix out, gate, up;
};

/// dgate = dout * up * act'(gate), dup = dout * act(gate).
struct ActAndMulBackwardArgs {
  Act act;
  RowMatrix dgate, dup, dout, gate, up;
};

/// out[e, r, :] = act(input[e, r, :d]) * input[e, r, d:] for r < clamp(masked_m[e], 0, T_max).
struct MaskedActArgs {
  Act act;
  DType dtype;
  int64_t E = 0, T_max = 0, d = 0;
  void* out = nullptr;
  const void* input = nullptr;
  int64_t out_stride_e = 0, out_stride_t = 0, in_stride_e = 0, in_stride_t = 0;  ///< elements
  const void* masked_m = nullptr;
  DType m_dtype = DType::i32;
  int64_t m_stride = 1;
  uint32_t site = 0;  ///< (op, "masked_m") in the device error record
};

namespace cpu {
void act_and_mul(const ActAndMulArgs& args);
void act_and_mul_backward(const ActAndMulBackwardArgs& args);
void act_and_mul_masked(const MaskedActArgs& args);
}  // namespace cpu

namespace cuda {
void act_and_mul(const char* op, const ActAndMulArgs& args, int device, void* stream);
void act_and_mul_backward(const char* op, const ActAndMulBackwardArgs& args, int device, void* stream);
void act_and_mul_masked(const char* op, const MaskedActArgs& args, int device, void* stream);
}  // namespace cuda

}  // namespace fuseops::detail
