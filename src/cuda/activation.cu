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

#include "cuda/device_error.cuh"
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

/// One vector: out[0, VEC) = act(gate[0, VEC)) * up[0, VEC), rounded once.
template <typename T, Act A, int VEC>
__device__ __forceinline__ void act_and_mul_vec(T* out, const T* gate, const T* up) {
  FloatVec<T, VEC> g, u;
  g.load(gate);
  u.load(up);
#pragma unroll
  for (int i = 0; i < VEC; ++i) g.v[i] = act_fwd<A, kFast<T>>(g.v[i]) * u.v[i];
  g.store(out);
}

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
      act_and_mul_vec<T, A, VEC>(out + r * out_stride + c * VEC, gate + r * gate_stride + c * VEC,
                                 up + r * up_stride + c * VEC);
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

// ---------------------------------------------------------------------------------------------------------------
// Masked expert-major form. Every block first turns masked_m into an exclusive prefix sum of the valid row counts
// n_e = clamp(masked_m[e], 0, T_max) in shared memory (E <= kMaxMaskedExperts; masked_m is a few KB, read from L2
// by every block), then the grid loops over the flattened valid rows v in [0, sum n_e): row v belongs to the expert
// e with prefix[e] <= v < prefix[e + 1] (searched upwards from the thread's previous row by the row's warp, 32
// experts per step), at row v - prefix[e]. So the work, and the grid, follow the valid rows only, however they are
// spread over the experts. Each thread takes two rows per iteration.

template <typename T>
struct MaskedParams {
  T* out;
  const T* input;
  const void* masked_m;
  int64_t E, T_max, d, vecs_per_row;
  int64_t out_stride_e, out_stride_t, in_stride_e, in_stride_t, m_stride;
  bool m_int64;
  DeviceErrorRecord* errors;
  uint32_t site;
};

/// prefix[0..E] = exclusive prefix sum of the clamped counts, by every thread of the block; returns prefix[E].
/// Block 0 records the first out-of-range masked_m.
template <typename T>
__device__ int64_t masked_prefix(const MaskedParams<T>& p, int64_t* prefix) {
  __shared__ int64_t warp_total[kThreads / 32];
  const int nthreads = static_cast<int>(blockDim.x * blockDim.y);
  const int tid = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x), lane = tid & 31, warp = tid / 32;
  const int64_t per_thread = (p.E + nthreads - 1) / nthreads;
  const int64_t e0 = min(p.E, tid * per_thread), e1 = min(p.E, e0 + per_thread);
  auto count = [&](int64_t e) {
    const int64_t i = e * p.m_stride;
    const int64_t m = p.m_int64 ? static_cast<const int64_t*>(p.masked_m)[i]
                                : static_cast<int64_t>(static_cast<const int32_t*>(p.masked_m)[i]);
    if ((m < 0 || m > p.T_max) && blockIdx.x == 0) record_device_error(p.errors, p.site, e);
    return m < 0 ? int64_t{0} : m > p.T_max ? p.T_max : m;
  };
  int64_t local = 0;
  for (int64_t e = e0; e < e1; ++e) local += count(e);
  // Exclusive scan of the per-thread sums: within warps by shuffles, then across the warp totals.
  int64_t incl = local;
  for (int o = 1; o < 32; o *= 2) {
    const int64_t t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  int64_t before = 0;
  for (int w = 0; w < warp; ++w) before += warp_total[w];
  int64_t run = before + incl - local;
  for (int64_t e = e0; e < e1; ++e) {
    prefix[e] = run;
    run += count(e);  // a second read of the same few bytes (L1), instead of a per-thread buffer
  }
  if (tid == nthreads - 1) prefix[p.E] = run;
  __syncthreads();
  return prefix[p.E];
}

/// The expert of flattened valid row v < prefix[E]: the e with prefix[e] <= v < prefix[e + 1], at or after `e` (the
/// expert of the thread's previous row: rows of one thread only grow), found by the whole warp (v is warp-uniform: a
/// row spans blockDim.x >= 32 threads): lane l probes the boundary e + 1 + l and the passing lanes, a prefix of the
/// warp since prefix[] does not decrease, advance e. One shared load and ballot per 32 experts passed; one in all
/// while v stays in expert e. (A thread walking one expert per step took 15 us for a decode step's 10 rows over 512
/// experts; a galloping search per thread was slower than this on sparse layouts: bench/results/h200/moe.md.)
__device__ __forceinline__ int64_t masked_expert(const int64_t* prefix, int64_t E, int64_t e, int64_t v) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  while (true) {
    const int64_t probe = e + 1 + lane;  // prefix[E] > v: lanes at or past E never pass
    const unsigned pass = __ballot_sync(0xffffffffu, probe < E && prefix[probe] <= v);
    e += __popc(pass);
    if (pass != 0xffffffffu) return e;
  }
}

/// out = act(gate) * up for one vector already loaded in storage form (the numerics of act_and_mul_vec).
template <typename T, Act A, int VEC>
__device__ __forceinline__ void act_and_mul_loaded(T* out, const StorageVec<T, VEC>& gate,
                                                   const StorageVec<T, VEC>& up) {
  FloatVec<T, VEC> r;
#pragma unroll
  for (int i = 0; i < VEC; ++i) r.v[i] = act_fwd<A, kFast<T>>(gate.get(i)) * up.get(i);
  r.store_whole(out);
}

/// Two rows per thread and iteration (v and v + step of the grid-stride order), both rows' loads written before any
/// math (the SASS of CUDA 13's ptxas issues row 1's loads after row 0's store all the same).
template <typename T, Act A, int VEC>
__global__ void __launch_bounds__(kThreads) act_and_mul_masked_kernel(const MaskedParams<T> p) {
  extern __shared__ int64_t prefix[];  // [E + 1]
  pdl_wait_and_release();
  const int64_t total = masked_prefix(p, prefix);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.y;
  int64_t e0 = 0;
  for (int64_t v0 = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; v0 < total; v0 += 2 * step) {
    const int64_t v1 = v0 + step;
    const bool two = v1 < total;
    e0 = masked_expert(prefix, p.E, e0, v0);
    const int64_t e1 = two ? masked_expert(prefix, p.E, e0, v1) : e0;  // `two` is warp-uniform
    const int64_t r0 = v0 - prefix[e0], r1 = two ? v1 - prefix[e1] : r0;
    T* out0 = p.out + e0 * p.out_stride_e + r0 * p.out_stride_t;
    T* out1 = p.out + e1 * p.out_stride_e + r1 * p.out_stride_t;
    const T* in0 = p.input + e0 * p.in_stride_e + r0 * p.in_stride_t;
    const T* in1 = p.input + e1 * p.in_stride_e + r1 * p.in_stride_t;
    for (int64_t c = threadIdx.x; c < p.vecs_per_row; c += blockDim.x) {
      StorageVec<T, VEC> g0, u0, g1, u1;
      g0.load(in0 + c * VEC);
      u0.load(in0 + p.d + c * VEC);
      if (two) {
        g1.load(in1 + c * VEC);
        u1.load(in1 + p.d + c * VEC);
      }
      act_and_mul_loaded<T, A, VEC>(out0 + c * VEC, g0, u0);
      if (two) act_and_mul_loaded<T, A, VEC>(out1 + c * VEC, g1, u1);
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
  int tx = 32;  // whole warps per row (the masked kernel's expert search is warp-wide)
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
void launch_masked(const char* op, const MaskedActArgs& a, int device, cudaStream_t stream) {
  // Vector width: d, both strides of out and input, and both base addresses (the up half follows at d elements).
  const RowMatrix out_rows{a.out, a.T_max, a.d, a.out_stride_t, a.dtype}, out_experts{a.out, a.E, a.d, a.out_stride_e, a.dtype};
  const RowMatrix in_rows{const_cast<void*>(a.input), a.T_max, a.d, a.in_stride_t, a.dtype};
  const RowMatrix in_experts{const_cast<void*>(a.input), a.E, a.d, a.in_stride_e, a.dtype};
  const int vec = pick_vec({&out_rows, &out_experts, &in_rows, &in_experts}, a.d);
  MaskedParams<T> p;
  p.out = static_cast<T*>(a.out);
  p.input = static_cast<const T*>(a.input);
  p.masked_m = a.masked_m;
  p.E = a.E;
  p.T_max = a.T_max;
  p.d = a.d;
  p.vecs_per_row = a.d / vec;
  p.out_stride_e = a.out_stride_e;
  p.out_stride_t = a.out_stride_t;
  p.in_stride_e = a.in_stride_e;
  p.in_stride_t = a.in_stride_t;
  p.m_stride = a.m_stride;
  p.m_int64 = a.m_dtype == DType::i64;
  p.errors = cuda_error_record(device);
  p.site = a.site;
  // Rows of the flattened valid list per block: as plan(); the grid is the blocks the GPU holds at once (one wave:
  // a second, partial wave would leave most SMs idle at the end), bounded by the row pairs there can be.
  const Launch l = plan(a.E * a.T_max, a.d, vec);
  const int64_t max_blocks = std::max<int64_t>(1, (a.E * a.T_max + 2 * l.block.y - 1) / (2 * l.block.y));
  const std::size_t smem = static_cast<std::size_t>(a.E + 1) * sizeof(int64_t);
  auto go = [&](auto kernel) {
    const int64_t resident = resident_blocks(kernel, static_cast<int>(l.block.x * l.block.y), smem, device, op);
    const unsigned grid = static_cast<unsigned>(std::min(max_blocks, resident));
    launch_kernel(kernel, dim3(grid), l.block, smem, stream, device, p);
  };
  switch (vec) {
    case 8: if constexpr (sizeof(T) == 2) go(act_and_mul_masked_kernel<T, A, 8>); break;
    case 4: go(act_and_mul_masked_kernel<T, A, 4>); break;
    case 2: go(act_and_mul_masked_kernel<T, A, 2>); break;
    default: go(act_and_mul_masked_kernel<T, A, 1>); break;
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

namespace fuseops::detail::cuda {

void act_and_mul_masked(const char* op, const MaskedActArgs& args, int device, void* stream) {
  DeviceGuard guard(device, op);
  auto s = static_cast<cudaStream_t>(stream);
  dispatch(args.dtype, args.act, [&](auto t, auto a) {
    launch_masked<typename decltype(t)::type, decltype(a)::value>(op, args, device, s);
  });
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
