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

namespace cpu {
void act_and_mul(const ActAndMulArgs& args);
void act_and_mul_backward(const ActAndMulBackwardArgs& args);
}  // namespace cpu

namespace cuda {
void act_and_mul(const char* op, const ActAndMulArgs& args, int device, void* stream);
void act_and_mul_backward(const char* op, const ActAndMulBackwardArgs& args, int device, void* stream);
}  // namespace cuda

}  // namespace fuseops::detail
