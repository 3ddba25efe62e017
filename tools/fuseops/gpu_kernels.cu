// Kernels of the command line's benchmark: random fill, empty kernel, and the unfused baselines.
#include <algorithm>

#include "common/act_math.h"
#include "cuda/launch.h"
#include "cuda/vec.cuh"
#include "gpu.h"

namespace fuseops::cli::gpu {
namespace {
using detail::Act;
using detail::FloatVec;

__global__ void empty_kernel() {}

__device__ __forceinline__ uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

template <typename T>
__global__ void fill_kernel(T* data, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t h = mix(seed ^ mix(static_cast<uint64_t>(i)));
    // Sum of 4 uniforms in [-0.5, 0.5): mean 0, sd ~0.58; scaled to sd ~ scale. Exact zeros are nudged away.
    float s = 0;
    for (int k = 0; k < 4; ++k) s += static_cast<float>((h >> (16 * k)) & 0xffff) / 65536.0f - 0.5f;
    float v = s * 1.732f * scale;
    if (v == 0.0f) v = 1e-3f * scale;
    data[i] = detail::from_float<T>(v);
  }
}

template <typename T, Act A, int VEC>
__global__ void act_only_kernel(T* tmp, const T* gate, int64_t rows, int64_t vpr, int64_t gate_stride) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * vpr;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / vpr, c = i % vpr;
    FloatVec<T, VEC> g;
    g.load(gate + r * gate_stride + c * VEC);
#pragma unroll
    for (int k = 0; k < VEC; ++k) g.v[k] = detail::act_fwd<A>(g.v[k]);
    g.store(tmp + r * vpr * VEC + c * VEC);
  }
}

template <typename T, int VEC>
__global__ void mul_kernel(T* out, const T* a, const T* b, int64_t rows, int64_t vpr, int64_t out_stride,
                           int64_t a_stride, int64_t b_stride) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * vpr;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / vpr, c = i % vpr;
    FloatVec<T, VEC> x, y;
    x.load(a + r * a_stride + c * VEC);
    y.load(b + r * b_stride + c * VEC);
#pragma unroll
    for (int k = 0; k < VEC; ++k) x.v[k] *= y.v[k];
    x.store(out + r * out_stride + c * VEC);
  }
}

template <typename T, Act A, int VEC>
__global__ void dup_kernel(T* dup, const T* dout, const T* gate, int64_t n_vec) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    FloatVec<T, VEC> d, g;
    d.load(dout + i * VEC);
    g.load(gate + i * VEC);
#pragma unroll
    for (int k = 0; k < VEC; ++k) d.v[k] *= detail::act_fwd<A>(g.v[k]);
    d.store(dup + i * VEC);
  }
}

template <typename T, Act A, int VEC>
__global__ void dgate_kernel(T* dgate, const T* dout, const T* gate, const T* up, int64_t n_vec) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    FloatVec<T, VEC> d, g, u;
    d.load(dout + i * VEC);
    g.load(gate + i * VEC);
    u.load(up + i * VEC);
#pragma unroll
    for (int k = 0; k < VEC; ++k) d.v[k] = d.v[k] * u.v[k] * detail::act_grad<A>(g.v[k]);
    d.store(dgate + i * VEC);
  }
}

/// Up to 256 pairs' axes, passed by value.
struct AxisMap {
  unsigned char axis[256];
};

template <typename C>
__global__ void rope_gather_kernel(float* tmp, const C* cos, const C* sin, int64_t stride, const int64_t* pos,
                                   int axes, AxisMap map, int64_t tokens, int64_t half) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < tokens * half;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / half, j = i % half;
    const int64_t p = pos[(axes == 3 ? map.axis[j] : 0) * tokens + t];
    tmp[t * 2 * half + j] = detail::to_float(cos[p * stride + j]);
    tmp[t * 2 * half + half + j] = detail::to_float(sin[p * stride + j]);
  }
}

template <typename T>
__global__ void rope_rotate_kernel(T* x, int64_t heads, int64_t ts, int64_t hs, const float* tmp, int64_t tokens,
                                   int64_t half, bool neox) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < tokens * heads * half;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t j = i % half, head = (i / half) % heads, t = i / (half * heads);
    T* h = x + t * ts + head * hs;
    const int64_t a = neox ? j : 2 * j, b = neox ? j + half : 2 * j + 1;
    const float c = tmp[t * 2 * half + j], s = tmp[t * 2 * half + half + j];
    const float xa = detail::to_float(h[a]), xb = detail::to_float(h[b]);
    h[a] = detail::from_float<T>(xa * c - xb * s);
    h[b] = detail::from_float<T>(xb * c + xa * s);
  }
}

int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + 255) / 256, 1 << 20)); }

template <typename F>
void with_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: f(float{}); break;
    case DType::f16: f(__half{}); break;
    case DType::bf16: f(__nv_bfloat16{}); break;
    default: throw Error(ErrorKind::invalid_argument, "bench: unsupported dtype");
  }
}

template <typename F>
void with_act(int act, F&& f) {
  switch (act) {
    case 0: f(std::integral_constant<Act, Act::silu>{}); break;
    case 1: f(std::integral_constant<Act, Act::gelu>{}); break;
    default: f(std::integral_constant<Act, Act::gelu_tanh>{}); break;
  }
}
}  // namespace

void fill_random(void* data, DType dtype, int64_t count, uint64_t seed, float scale) {
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    fill_kernel<T><<<blocks_for(count), 256>>>(static_cast<T*>(data), count, seed, scale);
  });
  detail::check_cuda(cudaGetLastError(), "bench", "fill kernel");
  detail::check_cuda(cudaDeviceSynchronize(), "bench", "fill kernel");
}

void launch_empty(cudaStream_t s) { empty_kernel<<<1, 32, 0, s>>>(); }

void unfused_act_and_mul(int act, DType dtype, void* out, const void* gate, const void* up, void* tmp, int64_t rows,
                         int64_t d, int64_t out_stride, int64_t gate_stride, int64_t up_stride, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    with_act(act, [&](auto a) {
      constexpr Act A = decltype(a)::value;
      if (d % V == 0) {
        const int64_t vpr = d / V;
        act_only_kernel<T, A, V><<<blocks_for(rows * vpr), 256, 0, s>>>(static_cast<T*>(tmp),
                                                                         static_cast<const T*>(gate), rows, vpr, gate_stride);
        mul_kernel<T, V><<<blocks_for(rows * vpr), 256, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(tmp),
                                                                static_cast<const T*>(up), rows, vpr, out_stride, d,
                                                                up_stride);
      } else {
        act_only_kernel<T, A, 1><<<blocks_for(rows * d), 256, 0, s>>>(static_cast<T*>(tmp),
                                                                       static_cast<const T*>(gate), rows, d, gate_stride);
        mul_kernel<T, 1><<<blocks_for(rows * d), 256, 0, s>>>(static_cast<T*>(out), static_cast<const T*>(tmp),
                                                              static_cast<const T*>(up), rows, d, out_stride, d,
                                                              up_stride);
      }
    });
  });
}

void unfused_act_and_mul_backward(int act, DType dtype, void* dgate, void* dup, const void* dout, const void* gate,
                                  const void* up, int64_t rows, int64_t d, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    constexpr int V = 16 / sizeof(T);
    with_act(act, [&](auto a) {
      constexpr Act A = decltype(a)::value;
      const int64_t n = rows * d;
      if (n % V == 0) {
        dup_kernel<T, A, V><<<blocks_for(n / V), 256, 0, s>>>(static_cast<T*>(dup), static_cast<const T*>(dout),
                                                             static_cast<const T*>(gate), n / V);
        dgate_kernel<T, A, V><<<blocks_for(n / V), 256, 0, s>>>(static_cast<T*>(dgate), static_cast<const T*>(dout),
                                                               static_cast<const T*>(gate),
                                                               static_cast<const T*>(up), n / V);
      } else {
        dup_kernel<T, A, 1><<<blocks_for(n), 256, 0, s>>>(static_cast<T*>(dup), static_cast<const T*>(dout),
                                                         static_cast<const T*>(gate), n);
        dgate_kernel<T, A, 1><<<blocks_for(n), 256, 0, s>>>(static_cast<T*>(dgate), static_cast<const T*>(dout),
                                                           static_cast<const T*>(gate), static_cast<const T*>(up), n);
      }
    });
  });
}

void unfused_rope(DType dtype, const RopeHeadsView& q, const RopeHeadsView& k, int64_t tokens, int64_t rotary_dim,
                  bool is_neox, DType cache_dtype, const void* cos, const void* sin, int64_t cache_stride,
                  const int64_t* positions, int axes, const unsigned char* axis_map, void* tmp, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const int64_t half = rotary_dim / 2;
  AxisMap map{};
  if (axes == 3) std::copy(axis_map, axis_map + std::min<int64_t>(half, 256), map.axis);
  with_type(cache_dtype, [&](auto tag) {
    using C = decltype(tag);
    rope_gather_kernel<C><<<blocks_for(tokens * half), 256, 0, s>>>(static_cast<float*>(tmp), static_cast<const C*>(cos),
                                                                    static_cast<const C*>(sin), cache_stride, positions,
                                                                    axes, map, tokens, half);
  });
  with_type(dtype, [&](auto tag) {
    using T = decltype(tag);
    for (const RopeHeadsView* h : {&q, &k}) {
      if (!h->data || h->heads == 0) continue;
      rope_rotate_kernel<T><<<blocks_for(tokens * h->heads * half), 256, 0, s>>>(
          static_cast<T*>(h->data), h->heads, h->token_stride, h->head_stride, static_cast<const float*>(tmp), tokens,
          half, is_neox);
    }
  });
}

}  // namespace fuseops::cli::gpu
