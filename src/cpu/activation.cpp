// CPU backend of the gated activations: fp32 math (common/act_math.h), one rounding at the store.
#include <cstdint>

#include "common/half.h"
#include "ops/activation_impl.h"

namespace fuseops::detail::cpu {
namespace {

inline float load(const RowMatrix& m, int64_t r, int64_t c) {
  const int64_t i = r * m.row_stride + c;
  switch (m.dtype) {
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(m.data)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(m.data)[i]);
    default: return static_cast<const float*>(m.data)[i];
  }
}

inline void store(const RowMatrix& m, int64_t r, int64_t c, float v) {
  const int64_t i = r * m.row_stride + c;
  switch (m.dtype) {
    case DType::f16: static_cast<uint16_t*>(m.data)[i] = float_to_f16(v); break;
    case DType::bf16: static_cast<uint16_t*>(m.data)[i] = float_to_bf16(v); break;
    default: static_cast<float*>(m.data)[i] = v; break;
  }
}

template <Act A>
void forward(const ActAndMulArgs& a) {
  for (int64_t r = 0; r < a.out.rows; ++r) {
    for (int64_t c = 0; c < a.out.cols; ++c) {
      store(a.out, r, c, act_fwd<A>(load(a.gate, r, c)) * load(a.up, r, c));
    }
  }
}

template <Act A>
void backward(const ActAndMulBackwardArgs& a) {
  for (int64_t r = 0; r < a.dgate.rows; ++r) {
    for (int64_t c = 0; c < a.dgate.cols; ++c) {
      const float dout = load(a.dout, r, c), g = load(a.gate, r, c), u = load(a.up, r, c);
      store(a.dgate, r, c, dout * u * act_grad<A>(g));
      store(a.dup, r, c, dout * act_fwd<A>(g));
    }
  }
}

}  // namespace

void act_and_mul(const ActAndMulArgs& args) {
  switch (args.act) {
    case Act::silu: return forward<Act::silu>(args);
    case Act::gelu: return forward<Act::gelu>(args);
    case Act::gelu_tanh: return forward<Act::gelu_tanh>(args);
  }
}

void act_and_mul_backward(const ActAndMulBackwardArgs& args) {
  switch (args.act) {
    case Act::silu: return backward<Act::silu>(args);
    case Act::gelu: return backward<Act::gelu>(args);
    case Act::gelu_tanh: return backward<Act::gelu_tanh>(args);
  }
}

}  // namespace fuseops::detail::cpu
