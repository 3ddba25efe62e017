// CPU backend of the gated activations: fp32 math (common/act_math.h), one rounding at the store.
#include <cstdint>

#include "cpu/row_access.h"
#include "ops/activation_impl.h"

namespace fuseops::detail::cpu {
namespace {

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
