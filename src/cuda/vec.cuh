// Vector loads and stores of N elements of a 16-bit or 32-bit storage type, converted to and from float.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "fuseops/error.h"
#include "fuseops/tensor.h"

namespace fuseops::detail {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/// Two floats rounded to a packed pair of f16 / bf16 (lo in the low half), as one 32-bit word (an mma A / B register, a
/// vector store's word).
template <typename TK>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<TK, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

/// Two 16-bit values of a packed pair (lo in the low half) as floats.
template <typename TK>
__device__ __forceinline__ float2 unpack2(uint32_t x) {
  if constexpr (std::is_same_v<TK, __nv_bfloat16>) {
    return make_float2(__uint_as_float(x << 16), __uint_as_float(x & 0xffff0000u));
  } else {
    return make_float2(__half2float(__ushort_as_half(static_cast<unsigned short>(x & 0xffffu))),
                       __half2float(__ushort_as_half(static_cast<unsigned short>(x >> 16))));
  }
}

/// One weak store of 16 / 8 / 4 / 2 bytes at global address `p` (aligned to its size), in one instruction (PTX
/// st.global.v4.b32 / v2.b32 / b32 / b16: what a plain C++ store compiles to where the compiler keeps it whole). In
/// some kernels the compiler split a plain 16-byte store into four 4-byte ones (PTX st.global.u32 / v2.u16 pairs),
/// four store instructions for one.
__device__ __forceinline__ void store_global_whole(uint4* p, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}
__device__ __forceinline__ void store_global_whole(uint2* p, uint2 v) {
  asm volatile("st.global.v2.b32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y) : "memory");
}
__device__ __forceinline__ void store_global_whole(uint32_t* p, uint32_t v) {
  asm volatile("st.global.b32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void store_global_whole(uint16_t* p, uint16_t v) {
  asm volatile("st.global.b16 [%0], %1;" ::"l"(p), "h"(v) : "memory");
}

/// Raw storage of `Bytes` bytes, loadable in one instruction.
template <int Bytes>
struct RawPack;
template <>
struct RawPack<16> { using type = uint4; };
template <>
struct RawPack<8> { using type = uint2; };
template <>
struct RawPack<4> { using type = uint32_t; };
template <>
struct RawPack<2> { using type = uint16_t; };

/// N elements of T kept in their storage form (N * sizeof(T) bytes of registers), for a load issued early and
/// converted late.
template <typename T, int N>
struct StorageVec {
  union {
    typename RawPack<N * sizeof(T)>::type raw;
    T elems[N];
  } u;
  /// Loads N contiguous elements from `p` (aligned to N * sizeof(T)) through the read-only path.
  __device__ __forceinline__ void load(const T* p) {
    u.raw = __ldg(reinterpret_cast<const typename RawPack<N * sizeof(T)>::type*>(p));
  }
  /// Loads N contiguous elements from shared memory at `p` (aligned to N * sizeof(T)): a plain load (__ldg reads
  /// global memory only).
  __device__ __forceinline__ void load_shared(const T* p) {
    u.raw = *reinterpret_cast<const typename RawPack<N * sizeof(T)>::type*>(p);
  }
  __device__ __forceinline__ float get(int i) const { return to_float(u.elems[i]); }
};

/// N elements of T, converted to float.
template <typename T, int N>
struct FloatVec {
  float v[N];

  /// Loads N contiguous elements from `p` (aligned to N * sizeof(T)) through the read-only path.
  __device__ __forceinline__ void load(const T* p) {
    StorageVec<T, N> raw;
    raw.load(p);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = raw.get(i);
  }

  /// Rounds to T once and stores N contiguous elements at `p` (aligned to N * sizeof(T)).
  __device__ __forceinline__ void store(T* p) const {
    using Raw = typename RawPack<N * sizeof(T)>::type;
    union {
      Raw raw;
      T elems[N];
    } u;
#pragma unroll
    for (int i = 0; i < N; ++i) u.elems[i] = from_float<T>(v[i]);
    *reinterpret_cast<Raw*>(p) = u.raw;
  }

  /// store() at a global address in one instruction whatever the compiler makes of the kernel: the elements packed
  /// into 32-bit words (pack2), stored by store_global_whole. In the masked activation, the gated norm and the GDN
  /// l2norm kernels the compiler split store()'s 16 bytes into four 4-byte stores (3-7% of the masked kernel's time on
  /// a bandwidth-bound case, 1-2% of the norm's: bench/results/h200/norm.md, twenty-seventh session).
  __device__ __forceinline__ void store_whole(T* p) const {
    constexpr int kBytes = N * static_cast<int>(sizeof(T));
    static_assert(kBytes == 2 || kBytes == 4 || kBytes == 8 || kBytes == 16, "one store of 2, 4, 8 or 16 bytes");
    if constexpr (kBytes < 4) {
      *p = from_float<T>(v[0]);
    } else {
      uint32_t w[kBytes / 4];
#pragma unroll
      for (int i = 0; i < kBytes / 4; ++i) {
        if constexpr (sizeof(T) == 4) {
          w[i] = __float_as_uint(v[i]);
        } else {
          w[i] = pack2<T>(v[2 * i], v[2 * i + 1]);
        }
      }
      if constexpr (kBytes == 16) {
        store_global_whole(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
      } else if constexpr (kBytes == 8) {
        store_global_whole(reinterpret_cast<uint2*>(p), make_uint2(w[0], w[1]));
      } else {
        store_global_whole(reinterpret_cast<uint32_t*>(p), w[0]);
      }
    }
  }
};

/// N consecutive elements of T at p (aligned to min(16, N * sizeof(T)) bytes) as floats, in read-only loads of at
/// most 16 bytes (kShared: p in shared memory, plain loads).
template <typename T, int N, bool kShared = false>
__device__ __forceinline__ void load_as_floats(const T* p, float (&out)[N]) {
  constexpr int kChunk = N * sizeof(T) <= 16 ? N : static_cast<int>(16 / sizeof(T));
#pragma unroll
  for (int c = 0; c < N; c += kChunk) {
    StorageVec<T, kChunk> v;
    if constexpr (kShared) {
      v.load_shared(p + c);
    } else {
      v.load(p + c);
    }
#pragma unroll
    for (int i = 0; i < kChunk; ++i) out[c + i] = v.get(i);
  }
}

/// A storage type as a value, for generic lambdas.
template <typename T>
struct TypeTag {
  using type = T;
};

/// Calls f(TypeTag<T>{}) with T = float, __half or __nv_bfloat16 for f32, f16 or bf16.
template <typename F>
void with_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(TypeTag<float>{}); break;
    case DType::f16: f(TypeTag<__half>{}); break;
    case DType::bf16: f(TypeTag<__nv_bfloat16>{}); break;
    default: throw Error(ErrorKind::invalid_argument, std::string("unsupported storage dtype ") + dtype_name(dtype));
  }
}

}  // namespace fuseops::detail
