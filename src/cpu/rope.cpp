// CPU backend of the rotary embeddings: per token, gather the angles once (one position per M-RoPE axis), then
// rotate the first rotary_dim dims of every query and key head in fp32, one rounding at the store.
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/half.h"
#include "cuda/device_error.h"
#include "fuseops/error.h"
#include "ops/rope_impl.h"

namespace fuseops::detail::cpu {
namespace {

inline float load(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    default: return static_cast<const float*>(p)[i];
  }
}

inline void store(DType t, void* p, int64_t i, float v) {
  switch (t) {
    case DType::f16: static_cast<uint16_t*>(p)[i] = float_to_f16(v); break;
    case DType::bf16: static_cast<uint16_t*>(p)[i] = float_to_bf16(v); break;
    default: static_cast<float*>(p)[i] = v; break;
  }
}

inline int64_t position(const RopeArgs& a, int axis, int64_t t) {
  if (!a.positions) return t % a.seq_len;
  const int64_t i = axis * a.pos_axis_stride + t * a.pos_token_stride;
  return a.pos_dtype == DType::i32 ? static_cast<const int32_t*>(a.positions)[i]
                                   : static_cast<const int64_t*>(a.positions)[i];
}

/// Rotates (or, when `valid` is false, copies) the first r dims of every head of `h` for token t.
void rotate_heads(const RopeArgs& a, const RopeHeads& h, int64_t t, bool valid, const float* c, const float* s) {
  const int64_t half = a.rotary_dim / 2;
  const bool copy = h.out != h.data;
  for (int64_t head = 0; head < h.heads; ++head) {
    const int64_t in = t * h.token_stride + head * h.head_stride;
    const int64_t out = t * h.out_token_stride + head * h.out_head_stride;
    if (!valid) {
      if (copy) {  // bit for bit (through float, NaN payloads would change), as the CUDA kernels copy; the first
                   // rotary_dim elements of a head are contiguous (innermost stride 1)
        const int64_t es = static_cast<int64_t>(dtype_size(a.dtype));
        std::memcpy(static_cast<char*>(h.out) + out * es, static_cast<const char*>(h.data) + in * es,
                    static_cast<std::size_t>(a.rotary_dim * es));
      }
      continue;
    }
    for (int64_t j = 0; j < half; ++j) {
      const int64_t i0 = a.is_neox ? j : 2 * j, i1 = a.is_neox ? j + half : 2 * j + 1;
      const float x0 = load(a.dtype, h.data, in + i0), x1 = load(a.dtype, h.data, in + i1);
      store(a.dtype, h.out, out + i0, x0 * c[j] - x1 * s[j]);
      store(a.dtype, h.out, out + i1, x1 * c[j] + x0 * s[j]);
    }
  }
}

}  // namespace

void rope(const RopeArgs& a) {
  const int64_t half = a.rotary_dim / 2;
  std::vector<float> c(static_cast<std::size_t>(half)), s(static_cast<std::size_t>(half));
  const float sign = a.inverse ? -1.0f : 1.0f;
  bool bad_seen = false;
  for (int64_t t = 0; t < a.tokens; ++t) {
    int64_t pos[3] = {0, 0, 0};
    bool valid = true;
    for (int ax = 0; ax < a.num_axes; ++ax) {
      pos[ax] = position(a, ax, t);
      if (pos[ax] < 0 || pos[ax] >= a.max_position) {
        if (valid) record_host_error(a.error_site, ax * a.tokens + t);
        valid = false;
      }
    }
    if (valid) {
      for (int64_t j = 0; j < half; ++j) {
        const int64_t p = pos[a.num_axes == 3 ? a.axis_of(j) : 0];
        c[static_cast<std::size_t>(j)] = load(a.cache_dtype, a.cos, p * a.cos_stride + j);
        s[static_cast<std::size_t>(j)] = sign * load(a.cache_dtype, a.sin, p * a.sin_stride + j);
      }
    }
    bad_seen = bad_seen || !valid;
    rotate_heads(a, a.q, t, valid, c.data(), s.data());
    if (a.k.data) rotate_heads(a, a.k, t, valid, c.data(), s.data());
  }
  raise_recorded_in_debug(bad_seen);
}

}  // namespace fuseops::detail::cpu
