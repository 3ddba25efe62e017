// CUDA backend of the gated activations.
//
// Memory-bound: per element it reads gate and up and writes out (backward: reads 3, writes 2). Each thread owns
// one vector of VEC elements (16 bytes when the pointers, strides and d allow it, else 8, 4 or 2 bytes); the
// block is a (TX, TY) tile of (vectors in a row, rows), so no index division is needed, and grid-stride loops
// cover any number of rows or columns without exceeding the grid limits. Large problems give each thread 4 rows
// with all loads issued before the math. The math costs as much as the memory traffic if evaluated naively
// (~45 instructions per element against ~3 cycles of memory time per 16-byte vector per multiprocessor), so
// f16 / bf16 use the fast policy of common/act_math.h (~15-25 instructions).
#include <algorithm>
#include <type_traits>

#include "cuda/launch.h"
#include "cuda/vec.cuh"
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

// Each thread owns one vector column and U rows TY apart (U > 1 only for large problems: all U loads are issued
// before the math, for more bytes in flight per thread).
template <typename T, Act A, int VEC, int U>
__global__ void __launch_bounds__(kThreads) act_and_mul_kernel(T* __restrict__ out, const T* __restrict__ gate,
                                                               const T* __restrict__ up, Tile tile,
                                                               int64_t out_stride, int64_t gate_stride,
                                                               int64_t up_stride) {
  const int64_t col_step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y * U;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * blockDim.y * U + threadIdx.y; r0 < tile.rows; r0 += row_step) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < tile.vecs_per_row;
         c += col_step) {
      FloatVec<T, VEC> g[U], u[U];
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const int64_t r = r0 + k * static_cast<int64_t>(blockDim.y);
        if (r < tile.rows) {
          g[k].load(gate + r * gate_stride + c * VEC);
          u[k].load(up + r * up_stride + c * VEC);
        }
      }
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const int64_t r = r0 + k * static_cast<int64_t>(blockDim.y);
        if (r < tile.rows) {
#pragma unroll
          for (int i = 0; i < VEC; ++i) g[k].v[i] = act_fwd<A, kFast<T>>(g[k].v[i]) * u[k].v[i];
          g[k].store(out + r * out_stride + c * VEC);
        }
      }
    }
  }
}

template <typename T, Act A, int VEC, int U>
__global__ void __launch_bounds__(kThreads)
    act_and_mul_backward_kernel(T* __restrict__ dgate, T* __restrict__ dup, const T* __restrict__ dout,
                                const T* __restrict__ gate, const T* __restrict__ up, Tile tile,
                                int64_t dgate_stride, int64_t dup_stride, int64_t dout_stride, int64_t gate_stride,
                                int64_t up_stride) {
  const int64_t col_step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t row_step = static_cast<int64_t>(gridDim.y) * blockDim.y * U;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * blockDim.y * U + threadIdx.y; r0 < tile.rows; r0 += row_step) {
    for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < tile.vecs_per_row;
         c += col_step) {
      FloatVec<T, VEC> d[U], g[U], u[U];
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const int64_t r = r0 + k * static_cast<int64_t>(blockDim.y);
        if (r < tile.rows) {
          d[k].load(dout + r * dout_stride + c * VEC);
          g[k].load(gate + r * gate_stride + c * VEC);
          u[k].load(up + r * up_stride + c * VEC);
        }
      }
#pragma unroll
      for (int k = 0; k < U; ++k) {
        const int64_t r = r0 + k * static_cast<int64_t>(blockDim.y);
        if (r < tile.rows) {
          FloatVec<T, VEC> dg, du;
#pragma unroll
          for (int i = 0; i < VEC; ++i) {
            dg.v[i] = d[k].v[i] * u[k].v[i] * act_grad<A, kFast<T>>(g[k].v[i]);
            du.v[i] = d[k].v[i] * act_fwd<A, kFast<T>>(g[k].v[i]);
          }
          dg.store(dgate + r * dgate_stride + c * VEC);
          du.store(dup + r * dup_stride + c * VEC);
        }
      }
    }
  }
}

/// The widest vector (in elements, at most 16 bytes) that divides d, every row stride and every base address.
int pick_vec(std::initializer_list<const RowMatrix*> ms, int64_t cols) {
  const int64_t esize = static_cast<int64_t>(dtype_size((*ms.begin())->dtype));
  for (int vec = static_cast<int>(16 / esize); vec > 1; vec /= 2) {
    bool ok = cols % vec == 0;
    for (const RowMatrix* m : ms) {
      ok = ok && (m->rows <= 1 || m->row_stride % vec == 0) &&
           reinterpret_cast<std::uintptr_t>(m->data) % static_cast<std::uintptr_t>(vec * esize) == 0;
    }
    if (ok) return vec;
  }
  return 1;
}

struct Launch {
  dim3 grid, block;
  Tile tile;
  int unroll;  // rows per thread: 1, or kUnroll for problems that fill the GPU several times over
};

constexpr int kUnroll = 4;

Launch plan(int64_t rows, int64_t cols, int vec, int device) {
  Launch l;
  l.tile = Tile{rows, cols / vec};
  int tx = 32;
  while (tx < kThreads && tx < l.tile.vecs_per_row) tx *= 2;
  const int ty = kThreads / tx;
  l.block = dim3(tx, ty);
  // Unroll once every resident thread (2048 per multiprocessor) gets kUnroll vectors.
  const int64_t vectors = rows * l.tile.vecs_per_row;
  l.unroll = vectors >= int64_t{kUnroll} * 2048 * sm_count(device) ? kUnroll : 1;
  const int64_t gx = std::min<int64_t>((l.tile.vecs_per_row + tx - 1) / tx, 1 << 20);
  const int64_t gy = std::min<int64_t>((rows + int64_t{ty} * l.unroll - 1) / (int64_t{ty} * l.unroll), 65535);
  l.grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  return l;
}

template <typename T, Act A, int U>
void launch_forward(const ActAndMulArgs& a, const Launch& l, int vec, cudaStream_t stream) {
  auto* out = static_cast<T*>(a.out.data);
  auto* gate = static_cast<const T*>(a.gate.data);
  auto* up = static_cast<const T*>(a.up.data);
#define FUSEOPS_FWD(V)                                                                                   \
  act_and_mul_kernel<T, A, V, U><<<l.grid, l.block, 0, stream>>>(out, gate, up, l.tile, a.out.row_stride, \
                                                               a.gate.row_stride, a.up.row_stride)
  switch (vec) {
    case 8: if constexpr (sizeof(T) == 2) { FUSEOPS_FWD(8); } break;
    case 4: FUSEOPS_FWD(4); break;
    case 2: FUSEOPS_FWD(2); break;
    default: FUSEOPS_FWD(1); break;
  }
#undef FUSEOPS_FWD
}

template <typename T, Act A, int U>
void launch_backward(const ActAndMulBackwardArgs& a, const Launch& l, int vec, cudaStream_t stream) {
#define FUSEOPS_BWD(V)                                                                                       \
  act_and_mul_backward_kernel<T, A, V, U><<<l.grid, l.block, 0, stream>>>(                                     \
      static_cast<T*>(a.dgate.data), static_cast<T*>(a.dup.data), static_cast<const T*>(a.dout.data),       \
      static_cast<const T*>(a.gate.data), static_cast<const T*>(a.up.data), l.tile, a.dgate.row_stride,     \
      a.dup.row_stride, a.dout.row_stride, a.gate.row_stride, a.up.row_stride)
  switch (vec) {
    case 8: if constexpr (sizeof(T) == 2) { FUSEOPS_BWD(8); } break;
    case 4: FUSEOPS_BWD(4); break;
    case 2: FUSEOPS_BWD(2); break;
    default: FUSEOPS_BWD(1); break;
  }
#undef FUSEOPS_BWD
}

template <typename T>
struct TypeTag {
  using type = T;
};

/// Calls f(TypeTag<T>{}, std::integral_constant<Act, A>{}) for the runtime dtype and activation.
template <typename F>
void dispatch(DType dtype, Act act, F&& f) {
  auto by_act = [&](auto tag) {
    switch (act) {
      case Act::silu: f(tag, std::integral_constant<Act, Act::silu>{}); break;
      case Act::gelu: f(tag, std::integral_constant<Act, Act::gelu>{}); break;
      case Act::gelu_tanh: f(tag, std::integral_constant<Act, Act::gelu_tanh>{}); break;
    }
  };
  switch (dtype) {
    case DType::f32: by_act(TypeTag<float>{}); break;
    case DType::f16: by_act(TypeTag<__half>{}); break;
    case DType::bf16: by_act(TypeTag<__nv_bfloat16>{}); break;
    default: throw Error(ErrorKind::invalid_argument, "act_and_mul: unsupported dtype");
  }
}

}  // namespace

void act_and_mul(const char* op, const ActAndMulArgs& args, int device, void* stream) {
  DeviceGuard guard(device, op);
  auto s = static_cast<cudaStream_t>(stream);
  const int vec = pick_vec({&args.out, &args.gate, &args.up}, args.out.cols);
  const Launch l = plan(args.out.rows, args.out.cols, vec, device);
  dispatch(args.out.dtype, args.act, [&](auto t, auto a) {
    using T = typename decltype(t)::type;
    constexpr Act A = decltype(a)::value;
    if (l.unroll == kUnroll) {
      launch_forward<T, A, kUnroll>(args, l, vec, s);
    } else {
      launch_forward<T, A, 1>(args, l, vec, s);
    }
  });
  after_launch(op, s, device);
}

void act_and_mul_backward(const char* op, const ActAndMulBackwardArgs& args, int device, void* stream) {
  DeviceGuard guard(device, op);
  auto s = static_cast<cudaStream_t>(stream);
  const int vec = pick_vec({&args.dgate, &args.dup, &args.dout, &args.gate, &args.up}, args.dgate.cols);
  const Launch l = plan(args.dgate.rows, args.dgate.cols, vec, device);
  dispatch(args.dgate.dtype, args.act, [&](auto t, auto a) {
    using T = typename decltype(t)::type;
    constexpr Act A = decltype(a)::value;
    if (l.unroll == kUnroll) {
      launch_backward<T, A, kUnroll>(args, l, vec, s);
    } else {
      launch_backward<T, A, 1>(args, l, vec, s);
    }
  });
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
