// Host conversions between float and the 16-bit storage types (round to nearest even), used by the CPU
// backend, the golden's input reader and the tests. Bit-exact with CUDA's __float2half_rn / __float2bfloat16_rn.
#pragma once

#include <cstdint>
#include <cstring>

namespace fuseops::detail {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline float bf16_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  const uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

inline float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: man * 2^-24
    float v = static_cast<float>(man) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (a < 0x38800000u) {
    // result is subnormal or zero in f16: value / 2^-24 rounded to nearest even
    const float v = bits_float(a) * 16777216.0f;  // exact scaling by 2^24
    // round half to even on an exact float
    float r = static_cast<float>(static_cast<int32_t>(v));
    const float diff = v - r;
    if (diff > 0.5f || (diff == 0.5f && (static_cast<int32_t>(r) & 1))) r += 1.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(r));
  }
  // normal: rebias exponent, round mantissa from 23 to 10 bits
  uint32_t m = a - 0x38000000u;  // exponent - 112
  const uint32_t lsb = (m >> 13) & 1u;
  m += 0xfffu + lsb;
  return static_cast<uint16_t>(sign | static_cast<uint16_t>(m >> 13));
}

}  // namespace fuseops::detail
