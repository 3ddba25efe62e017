// CPU backend of the gated activations: fp32 math (common/act_math.h), one rounding at the store.
#include <cstdint>

#include "cpu/row_access.h"
#include "cuda/device_error.h"
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

template <Act A>
void masked(const MaskedActArgs& a) {
  const int64_t es = static_cast<int64_t>(dtype_size(a.dtype));
  bool bad = false;
  for (int64_t e = 0; e < a.E; ++e) {
    const int64_t i = e * a.m_stride;
    const int64_t m = a.m_dtype == DType::i32 ? static_cast<const int32_t*>(a.masked_m)[i]
                                              : static_cast<const int64_t*>(a.masked_m)[i];
    if (m < 0 || m > a.T_max) {
      record_host_error(a.site, e);
      bad = true;
    }
    const int64_t rows = m < 0 ? 0 : m > a.T_max ? a.T_max : m;
    if (rows == 0) continue;  // nothing to address (with T_max = 0 the strides were never bounded by an extent)
    // The valid rows of expert e as matrices: gate = the first d columns of input, up = the next d.
    RowMatrix out{static_cast<char*>(a.out) + e * a.out_stride_e * es, rows, a.d, a.out_stride_t, a.dtype};
    RowMatrix gate{const_cast<char*>(static_cast<const char*>(a.input)) + e * a.in_stride_e * es, rows, a.d,
                   a.in_stride_t, a.dtype};
    RowMatrix up = gate;
    up.data = static_cast<char*>(gate.data) + a.d * es;
    forward<A>(ActAndMulArgs{a.act, out, gate, up});
  }
  raise_recorded_in_debug(bad);
}

}  // namespace

void act_and_mul_masked(const MaskedActArgs& args) {
  switch (args.act) {
    case Act::silu: return masked<Act::silu>(args);
    case Act::gelu: return masked<Act::gelu>(args);
    case Act::gelu_tanh: return masked<Act::gelu_tanh>(args);
  }
}

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
