// CUDA backend of the rotary embeddings (rotary_embedding, apply_rotary_pos_emb, mrope, their inverse).
//
// Memory-bound: each (token, head) reads and writes its first rotary_dim dims once; the angles of a token are a
// few hundred bytes shared by all its heads. A thread owns P consecutive frequency pairs of one token ("lane" of
// the token's h / P lanes) in up to kMaxHeadsPerThread consecutive heads (a "group"). It issues every global load
// that does not depend on a position first: its position(s), then the two P-element vectors of each of its heads
// (NeoX: x[j0..] and x[h + j0..]; GPT-J: x[2 j0..] and x[2 j0 + P..]); only then does it wait for the positions,
// read its P cos / sin values from the cache row(s) (the one dependent load: positions -> cache row), rotate every
// head in fp32 and store. With 16-bit data P = 8 (16-byte accesses), with f32 P = 4; a scalar variant (P = 1)
// serves views whose pointers or strides are not aligned to P elements. M-RoPE reads the lane's vector from each
// of the (at most three) rows its pairs name and picks per pair, in the storage type, by a 2-bit axis code (one
// 32-bit word of kernel parameters per lane, computed on the host from the layout's map). Block = (lanes, groups,
// tokens); the heads per thread grow with the problem (1, 2 or 4) so that decode spreads one head per thread over
// the SMs and prefill keeps 4 heads (128 bytes with 16-bit data) of loads in flight per thread. One kernel per
// (data type, cache type, P, NeoX / GPT-J, 1 or 3 position axes). Bad positions: the token is left unrotated
// (copied when out of place) and recorded in the device error record; no address derived from a bad position is
// formed.
#include <algorithm>
#include <cstdint>

#include "cuda/device_error.cuh"
#include "cuda/launch.h"
#include "cuda/vec.cuh"
#include "ops/rope_impl.h"

namespace fuseops::detail::cuda {
namespace {

constexpr int kThreads = 256;
/// Heads per thread at most: 4 (8 16-byte loads in flight), but 2 for M-RoPE with 32-byte cache pieces (f32 cache,
/// 16-bit data), whose three rows in flight take the registers of two more heads (4 spill within
/// kMinBlocksPerSm's 80 registers).
template <typename C, int P, int AXES>
constexpr int kMaxHeadsPerThread = AXES == 3 && P * sizeof(C) > 16 ? 2 : 4;
/// Resident blocks of kThreads per SM asked of the compiler: at most 80 registers per thread (64 make the 4-head
/// kernels spill).
constexpr int kMinBlocksPerSm = 3;

/// The M-RoPE axis (0 T, 1 H, 2 W) of pair j as bits [2 (j % 16), 2 (j % 16) + 2) of word j / 16. The P <= 8 pairs
/// of a lane start at a multiple of P, so they lie in one word.
struct AxisCodes {
  uint32_t w[kRopeMaxPairs / 16] = {};
};

template <typename T, int N>
struct Pack {
  using Raw = typename RawPack<N * sizeof(T)>::type;
  union {
    Raw raw;
    T e[N];
  } u;
  __device__ __forceinline__ void load(const T* p) { u.raw = *reinterpret_cast<const Raw*>(p); }
  __device__ __forceinline__ void store(T* p) const { *reinterpret_cast<Raw*>(p) = u.raw; }
  __device__ __forceinline__ float get(int i) const { return to_float(u.e[i]); }
  __device__ __forceinline__ void set(int i, float v) { u.e[i] = from_float<T>(v); }
};

/// N consecutive cache values (read-only) as floats, in accesses of at most 16 bytes.
template <typename C, int N>
__device__ __forceinline__ void load_angles(const C* p, float* out) {
  constexpr int W = N * sizeof(C) > 16 ? static_cast<int>(16 / sizeof(C)) : N;
#pragma unroll
  for (int k = 0; k < N; k += W) {
    FloatVec<C, W> v;
    v.load(p + k);
#pragma unroll
    for (int i = 0; i < W; ++i) out[k + i] = v.v[i];
  }
}

/// Position of token t on `axis` (not range-checked). Without positions: t mod seq_len, in 32 bits when both fit.
__device__ __forceinline__ int64_t load_position(const RopeArgs& a, int axis, int64_t t) {
  if (a.positions == nullptr) {
    if (t <= INT32_MAX && a.seq_len <= INT32_MAX)
      return static_cast<uint32_t>(t) % static_cast<uint32_t>(a.seq_len);
    return t % a.seq_len;
  }
  const int64_t i = axis * a.pos_axis_stride + t * a.pos_token_stride;
  return a.pos_dtype == DType::i32 ? static_cast<int64_t>(static_cast<const int32_t*>(a.positions)[i])
                                   : static_cast<const int64_t*>(a.positions)[i];
}

/// cos / sin of pairs j0 .. j0 + P - 1 (of a cache of type C) for the token's valid positions. M-RoPE: `code`
/// holds the pairs' 2-bit axes; each row some pair names is read with vector loads (all issued before any is used)
/// and each pair takes its value from its own row.
template <typename C, int P, int AXES>
__device__ __forceinline__ void gather_angles(const RopeArgs& a, const int64_t (&pos)[AXES], uint32_t code,
                                              int64_t j0, float* c, float* s) {
  const C* cos = static_cast<const C*>(a.cos);
  const C* sin = static_cast<const C*>(a.sin);
  if constexpr (AXES == 1) {
    (void)code;
    load_angles<C, P>(cos + pos[0] * a.cos_stride + j0, c);
    load_angles<C, P>(sin + pos[0] * a.sin_stride + j0, s);
  } else {
    // Pieces of at most 16 bytes; each pair's value is picked in the storage type (half the registers of floats
    // for 16-bit caches) and widened once at the end.
    constexpr int W = P * sizeof(C) > 16 ? static_cast<int>(16 / sizeof(C)) : P;
    auto takes = [&](int i, int ax) { return ((code >> (2 * i)) & 3u) == static_cast<uint32_t>(ax); };
    StorageVec<C, W> pc[P / W], ps[P / W];
#pragma unroll
    for (int k = 0; k < P / W; ++k) pc[k].u.raw = ps[k].u.raw = {};
#pragma unroll
    for (int ax = 0; ax < 3; ++ax) {
      bool used = false;
#pragma unroll
      for (int i = 0; i < P; ++i) used = used || takes(i, ax);
      if (!used) continue;
      const C* row_c = cos + pos[ax] * a.cos_stride + j0;
      const C* row_s = sin + pos[ax] * a.sin_stride + j0;
#pragma unroll
      for (int k = 0; k < P / W; ++k) {
        StorageVec<C, W> vc, vs;
        vc.load(row_c + k * W);
        vs.load(row_s + k * W);
#pragma unroll
        for (int e = 0; e < W; ++e) {
          if (takes(k * W + e, ax)) {
            pc[k].u.elems[e] = vc.u.elems[e];
            ps[k].u.elems[e] = vs.u.elems[e];
          }
        }
      }
    }
#pragma unroll
    for (int i = 0; i < P; ++i) {
      c[i] = pc[i / W].get(i % W);
      s[i] = ps[i / W].get(i % W);
    }
  }
}

template <typename T, int P>
__device__ __forceinline__ void rotate_pair(Pack<T, P>& x, int i0, Pack<T, P>& y, int i1, float c, float s) {
  const float a = x.get(i0), b = y.get(i1);
  x.set(i0, a * c - b * s);
  y.set(i1, b * c + a * s);
}

/// Input and output of head `hd` (q heads first, then k heads) of token t.
template <typename T>
__device__ __forceinline__ void locate(const RopeArgs& a, int64_t hd, int64_t t, const T*& in, T*& out) {
  const bool is_q = hd < a.q.heads;
  const RopeHeads& hs = is_q ? a.q : a.k;
  const int64_t head = is_q ? hd : hd - a.q.heads;
  in = static_cast<const T*>(hs.data) + t * hs.token_stride + head * hs.head_stride;
  out = static_cast<T*>(hs.out) + t * hs.out_token_stride + head * hs.out_head_stride;
}

/// Thread (lane x, group y, token z) of the block; `hpt` heads per group (1 .. kMaxHeadsPerThread). T: q / k
/// storage type, C: cache storage type.
template <typename T, typename C, int P, bool NEOX, int AXES>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    rope_kernel(const __grid_constant__ RopeArgs a, const __grid_constant__ AxisCodes codes, int hpt,
                DeviceErrorRecord* rec) {
  pdl_wait_and_release();
  const int64_t h = a.rotary_dim / 2;
  const int64_t j0 = static_cast<int64_t>(threadIdx.x) * P;  // first pair of this lane
  const int64_t offA = NEOX ? j0 : 2 * j0;
  const int64_t offB = NEOX ? h + j0 : 2 * j0 + P;
  const int64_t total_heads = a.q.heads + a.k.heads;
  const int64_t group0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t group_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  const uint32_t code = AXES == 3 ? codes.w[j0 / 16] >> (2 * (j0 % 16)) : 0u;
  const float sign = a.inverse ? -1.0f : 1.0f;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.z + threadIdx.z; t < a.tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.z) {
    for (int64_t g = group0; g * hpt < total_heads; g += group_step) {
      const int64_t first = g * hpt;
      const int n = static_cast<int>(min(static_cast<int64_t>(hpt), total_heads - first));
      // 1. The position(s): the head of the only dependent chain (positions -> cache row).
      int64_t pos[AXES];
#pragma unroll
      for (int ax = 0; ax < AXES; ++ax) pos[ax] = load_position(a, ax, t);
      // 2. Every head's data, independent of the positions, before anything waits for them.
      Pack<T, P> x[kMaxHeadsPerThread<C, P, AXES>], y[kMaxHeadsPerThread<C, P, AXES>];
#pragma unroll
      for (int k = 0; k < kMaxHeadsPerThread<C, P, AXES>; ++k) {
        if (k < n) {
          const T* in;
          T* out;
          locate(a, first + k, t, in, out);
          x[k].load(in + offA);
          y[k].load(in + offB);
        }
      }
      // 3. Range check; the first group's lane 0 records the token's first bad axis.
      bool valid = true;
#pragma unroll
      for (int ax = 0; ax < AXES; ++ax) valid = valid && pos[ax] >= 0 && pos[ax] < a.max_position;
      if (!valid && g == 0 && threadIdx.x == 0) {
        int bad = 0;
#pragma unroll
        for (int ax = AXES - 1; ax >= 0; --ax)
          if (pos[ax] < 0 || pos[ax] >= a.max_position) bad = ax;
        record_device_error(rec, a.error_site, bad * a.tokens + t);
      }
      // 4. The angles, once for all the thread's heads.
      float c[P], s[P];
      if (valid) {
        gather_angles<C, P, AXES>(a, pos, code, j0, c, s);
#pragma unroll
        for (int i = 0; i < P; ++i) s[i] *= sign;
      }
      // 5. Rotate and store.
#pragma unroll
      for (int k = 0; k < kMaxHeadsPerThread<C, P, AXES>; ++k) {
        if (k >= n) continue;
        const T* in;
        T* out;
        locate(a, first + k, t, in, out);
        if (valid) {
          if constexpr (NEOX || P == 1) {
#pragma unroll
            for (int i = 0; i < P; ++i) rotate_pair(x[k], i, y[k], i, c[i], s[i]);
          } else {
#pragma unroll
            for (int m = 0; m < P / 2; ++m) {
              rotate_pair(x[k], 2 * m, x[k], 2 * m + 1, c[m], s[m]);
              rotate_pair(y[k], 2 * m, y[k], 2 * m + 1, c[P / 2 + m], s[P / 2 + m]);
            }
          }
        } else if (in == out) {
          continue;  // in place: unrotated = untouched
        }
        x[k].store(out + offA);
        y[k].store(out + offB);
      }
    }
  }
}

/// P elements (16 bytes of T) when every pointer and stride allows it, else 1.
int pick_pairs_per_thread(const RopeArgs& a) {
  const int64_t esize = static_cast<int64_t>(dtype_size(a.dtype));
  const int64_t p = 16 / esize;
  const int64_t h = a.rotary_dim / 2;
  auto aligned = [](const void* ptr, int64_t bytes) {
    return reinterpret_cast<std::uintptr_t>(ptr) % static_cast<std::uintptr_t>(bytes) == 0;
  };
  bool ok = h % p == 0;
  for (const RopeHeads* hs : {&a.q, &a.k}) {
    if (!hs->data || hs->heads == 0) continue;
    ok = ok && aligned(hs->data, p * esize) && aligned(hs->out, p * esize);
    if (a.tokens > 1) ok = ok && hs->token_stride % p == 0 && hs->out_token_stride % p == 0;
    if (hs->heads > 1) ok = ok && hs->head_stride % p == 0 && hs->out_head_stride % p == 0;
  }
  const int64_t csize = static_cast<int64_t>(dtype_size(a.cache_dtype));
  const int64_t piece = std::min<int64_t>(p * csize, 16);
  ok = ok && aligned(a.cos, piece) && aligned(a.sin, piece);
  if (a.max_position > 1) ok = ok && a.cos_stride % p == 0 && a.sin_stride % p == 0;
  return ok ? static_cast<int>(p) : 1;
}

struct Plan {
  dim3 grid, block;
  int heads_per_thread = 1;
};

/// Heads per thread: the fewest of 1, 2, 4 (at most max_hpt) whose grid fits in one wave of resident threads
/// (decode: one head per thread, the most threads; a problem that fits in one wave issues all its loads at once),
/// else max_hpt (several waves, 2 max_hpt 16-byte loads in flight per thread).
Plan plan(const RopeArgs& a, int p, int sms, int max_hpt) {
  const int64_t lanes = a.rotary_dim / 2 / p;  // <= kRopeMaxPairs = kThreads
  const int64_t heads = a.q.heads + a.k.heads;
  const int64_t resident = static_cast<int64_t>(sms) * kThreads * kMinBlocksPerSm;
  int64_t hpt = 1;
  while (hpt < max_hpt && a.tokens * ((heads + hpt - 1) / hpt) * lanes > resident) hpt *= 2;
  const int64_t groups = (heads + hpt - 1) / hpt;
  const int64_t max_groups = std::max<int64_t>(1, kThreads / lanes);
  const int64_t gy = std::min<int64_t>((groups + max_groups - 1) / max_groups, 65535);
  const int64_t groups_per_block = std::min<int64_t>((groups + gy - 1) / gy, max_groups);
  int64_t tb = std::max<int64_t>(1, kThreads / (lanes * groups_per_block));
  // At least ~8 blocks per SM where the tokens allow: a one-wave grid then splits evenly enough over the SMs.
  tb = std::min<int64_t>({tb, 64, std::max<int64_t>(1, (a.tokens + 8 * sms - 1) / (8 * sms))});
  const int64_t gx = std::min<int64_t>((a.tokens + tb - 1) / tb, int64_t{1} << 30);
  Plan pl;
  pl.block = dim3(static_cast<unsigned>(lanes), static_cast<unsigned>(groups_per_block), static_cast<unsigned>(tb));
  pl.grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  pl.heads_per_thread = static_cast<int>(hpt);
  return pl;
}

AxisCodes axis_codes(const RopeArgs& a) {
  AxisCodes c;
  if (a.num_axes != 3) return c;
  for (int64_t j = 0; j < a.rotary_dim / 2; ++j) c.w[j / 16] |= static_cast<uint32_t>(a.axis[j] & 3u) << (2 * (j % 16));
  return c;
}

template <typename T, int P>
void launch_for(const RopeArgs& a, DeviceErrorRecord* rec, cudaStream_t stream, int device) {
  const AxisCodes codes = axis_codes(a);
  with_float_type(a.cache_dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    const bool m = a.num_axes == 3;
    const Plan pl =
        plan(a, P, sm_count(device), m ? kMaxHeadsPerThread<C, P, 3> : kMaxHeadsPerThread<C, P, 1>);
    auto go = [&](auto kernel) {
      launch_kernel(kernel, pl.grid, pl.block, 0, stream, device, a, codes, pl.heads_per_thread, rec);
    };
    if (m) {
      if (a.is_neox) go(rope_kernel<T, C, P, true, 3>);
      else go(rope_kernel<T, C, P, false, 3>);
    } else {
      if (a.is_neox) go(rope_kernel<T, C, P, true, 1>);
      else go(rope_kernel<T, C, P, false, 1>);
    }
  });
}

template <typename T>
void launch_typed(const RopeArgs& a, DeviceErrorRecord* rec, cudaStream_t stream, int device) {
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  if (pick_pairs_per_thread(a) == kVec) launch_for<T, kVec>(a, rec, stream, device);
  else launch_for<T, 1>(a, rec, stream, device);
}

}  // namespace

void rope(const char* op, const RopeArgs& args, int device, void* stream) {
  DeviceGuard guard(device, op);
  auto s = static_cast<cudaStream_t>(stream);
  DeviceErrorRecord* rec = cuda_error_record(device);
  switch (args.dtype) {
    case DType::f32: launch_typed<float>(args, rec, s, device); break;
    case DType::f16: launch_typed<__half>(args, rec, s, device); break;
    case DType::bf16: launch_typed<__nv_bfloat16>(args, rec, s, device); break;
    default: throw Error(ErrorKind::invalid_argument, std::string(op) + ": unsupported dtype");
  }
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
