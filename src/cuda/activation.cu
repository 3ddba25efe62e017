// CUDA backend of the gated activations.
//
// Memory-bound: per element it reads gate and up and writes out (backward: reads 3, writes 2). Each thread owns
// one vector of VEC elements (16 bytes when the pointers, strides and d allow it, else 8, 4 or 2 bytes); the
// block is a (TX, TY) tile of (vectors in a row, rows), so no index division is needed, and grid-stride loops
// cover any number of rows or columns without exceeding the grid limits. The math costs as much as the memory
// traffic if evaluated naively (~45 instructions per element), so f16 / bf16 use the fast policy of
// common/act_math.h (~12-25). Kernels are launched with programmatic dependent launch (launch.h). Variants that
// were measured and dropped (more rows per thread, streaming hints, narrower vectors for small problems):
// bench/results/h200/activation.md.
#include <algorithm>
#include <type_traits>

#include "cuda/launch.h"
#include "cuda/vec.cuh"
#include "cuda/vec_width.h"
#include "ops/activation_impl.h"

namespace fuseops::detail::cuda {
namespace {

constexpr int kThreads = 256;

struct Tile {
  int64_t rows, vecs_per_row;
};

/// f16 / bf16 outputs take the fast math policy (common/act_math.h); f32 the precise one.
template <typename T>
constexpr bool kFast = sizeof(T) == 2;

template <typename T, Act A, int VEC>
__global__ void __launch_bounds__(kThreads) act_and_mul_kernel(T* __restrict__ out, const T* __restrict__ gate,
                                                               const T* __restrict__ up, Tile tile,
                                                               int64_t out_stride, int64_t gate_stride,
                                                               int64_t up_stride) {
  pdl_wait_and_release();
  const int64_t col_step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < tile.rows; r += row_step) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < tile.vecs_per_row;
         c += col_step) {
      FloatVec<T, VEC> g, u;
      g.load(gate + r * gate_stride + c * VEC);
      u.load(up + r * up_stride + c * VEC);
#pragma unroll
      for (int i = 0; i < VEC; ++i) g.v[i] = act_fwd<A, kFast<T>>(g.v[i]) * u.v[i];
      g.store(out + r * out_stride + c * VEC);
    }
  }
}

template <typename T, Act A, int VEC>
__global__ void __launch_bounds__(kThreads)
    act_and_mul_backward_kernel(T* __restrict__ dgate, T* __restrict__ dup, const T* __restrict__ dout,
                                const T* __restrict__ gate, const T* __restrict__ up, Tile tile,
                                int64_t dgate_stride, int64_t dup_stride, int64_t dout_stride, int64_t gate_stride,
                                int64_t up_stride) {
  pdl_wait_and_release();
  const int64_t col_step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r < tile.rows; r += row_step) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < tile.vecs_per_row;
         c += col_step) {
      FloatVec<T, VEC> d, g, u, dg, du;
      d.load(dout + r * dout_stride + c * VEC);
      g.load(gate + r * gate_stride + c * VEC);
      u.load(up + r * up_stride + c * VEC);
#pragma unroll
      for (int i = 0; i < VEC; ++i) {
        dg.v[i] = d.v[i] * u.v[i] * act_grad<A, kFast<T>>(g.v[i]);
        du.v[i] = d.v[i] * act_fwd<A, kFast<T>>(g.v[i]);
      }
      dg.store(dgate + r * dgate_stride + c * VEC);
      du.store(dup + r * dup_stride + c * VEC);
    }
  }
}

struct Launch {
  dim3 grid, block;
  Tile tile;
};

Launch plan(int64_t rows, int64_t cols, int vec) {
  Launch l;
  l.tile = Tile{rows, cols / vec};
  int tx = 32;
  while (tx < kThreads && tx < l.tile.vecs_per_row) tx *= 2;
  const int ty = kThreads / tx;
  l.block = dim3(tx, ty);
  const int64_t gx = std::min<int64_t>((l.tile.vecs_per_row + tx - 1) / tx, 1 << 20);
  const int64_t gy = std::min<int64_t>((rows + ty - 1) / ty, 65535);
  l.grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  return l;
}

template <typename T, Act A>
void launch_forward(const ActAndMulArgs& a, int device, cudaStream_t stream) {
  const int vec = pick_vec({&a.out, &a.gate, &a.up}, a.out.cols);
  const Launch l = plan(a.out.rows, a.out.cols, vec);
  auto* out = static_cast<T*>(a.out.data);
  auto* gate = static_cast<const T*>(a.gate.data);
  auto* up = static_cast<const T*>(a.up.data);
  auto go = [&](auto kernel) {
    launch_kernel(kernel, l.grid, l.block, 0, stream, device, out, gate, up, l.tile, a.out.row_stride,
                  a.gate.row_stride, a.up.row_stride);
  };
  switch (vec) {
    case 8: if constexpr (sizeof(T) == 2) go(act_and_mul_kernel<T, A, 8>); break;
    case 4: go(act_and_mul_kernel<T, A, 4>); break;
    case 2: go(act_and_mul_kernel<T, A, 2>); break;
    default: go(act_and_mul_kernel<T, A, 1>); break;
  }
}

template <typename T, Act A>
void launch_backward(const ActAndMulBackwardArgs& a, int device, cudaStream_t stream) {
  const int vec = pick_vec({&a.dgate, &a.dup, &a.dout, &a.gate, &a.up}, a.dgate.cols);
  const Launch l = plan(a.dgate.rows, a.dgate.cols, vec);
  auto go = [&](auto kernel) {
    launch_kernel(kernel, l.grid, l.block, 0, stream, device, static_cast<T*>(a.dgate.data),
                  static_cast<T*>(a.dup.data), static_cast<const T*>(a.dout.data), static_cast<const T*>(a.gate.data),
                  static_cast<const T*>(a.up.data), l.tile, a.dgate.row_stride, a.dup.row_stride, a.dout.row_stride,
                  a.gate.row_stride, a.up.row_stride);
  };
  switch (vec) {
    case 8: if constexpr (sizeof(T) == 2) go(act_and_mul_backward_kernel<T, A, 8>); break;
    case 4: go(act_and_mul_backward_kernel<T, A, 4>); break;
    case 2: go(act_and_mul_backward_kernel<T, A, 2>); break;
    default: go(act_and_mul_backward_kernel<T, A, 1>); break;
  }
}

/// Calls f(TypeTag<T>{}, std::integral_constant<Act, A>{}) for the runtime dtype and activation.
template <typename F>
void dispatch(DType dtype, Act act, F&& f) {
  with_float_type(dtype, [&](auto tag) {
    switch (act) {
      case Act::silu: f(tag, std::integral_constant<Act, Act::silu>{}); break;
      case Act::gelu: f(tag, std::integral_constant<Act, Act::gelu>{}); break;
      case Act::gelu_tanh: f(tag, std::integral_constant<Act, Act::gelu_tanh>{}); break;
    }
  });
}

}  // namespace

void act_and_mul(const char* op, const ActAndMulArgs& args, int device, void* stream) {
  DeviceGuard guard(device, op);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(args.out.dtype, args.act, [&](auto t, auto a) {
    launch_forward<typename decltype(t)::type, decltype(a)::value>(args, device, s);
  });
  after_launch(op, s, device);
}

void act_and_mul_backward(const char* op, const ActAndMulBackwardArgs& args, int device, void* stream) {
  DeviceGuard guard(device, op);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(args.dgate.dtype, args.act, [&](auto t, auto a) {
    launch_backward<typename decltype(t)::type, decltype(a)::value>(args, device, s);
  });
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
