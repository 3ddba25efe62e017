// CUDA backend of the gated norm (docs/ops/norm.md, "Performance").
//
// Memory-bound: per element it reads x (and z) and writes out once; weight and bias ([N]) stay in L2 / L1. Each
// (row, group) is owned by a segment of TPG threads (a power of two: part of a warp, a warp, or up to 1024 threads of
// a block), each thread holding up to kThreadElems elements of the group in registers as VEC-element vectors, so x
// and z are read from memory exactly once. The statistics are a fixed-order tree (warp shuffles, then shared memory
// across the warps of a segment, one barrier per reduction): every run gives the same bits, and a row's result does
// not depend on other rows. Blocks loop over (row, group) items with a block-uniform trip count, so every thread
// reaches the reductions.
//
// Two launch variants of the one kernel: the general one (TPG = the group's vectors rounded up to a power of two, at
// most 1024, halved for 16-byte vectors and 16 to 1024 vectors so each thread holds two; up to kThreadElems elements
// per thread) and, for wide groups on 16-byte vectors (kWideThreads to
// kWideThreads * kWideElems / VEC vectors: whole-row norms of 2048-8192 elements), one block of kWideThreads threads
// per (row, group) with up to kWideElems elements per thread: more bytes in flight per thread and more groups per
// SM than 1024 threads holding one vector each; with 32 16-bit elements per thread (no gate before the norm) x is held
// in its storage form (RAW), so that 4 blocks fit per SM instead of 3. Launched as one wave (at most one block per SM),
// they stage weight and bias in shared memory by cp.async behind x's loads (NormParams::stage): decode sizes, where
// the weight's round trip after the reductions was on the critical path.
//
// Where more blocks than one wave would run (many rows) and the groups take 16-byte vectors with no gate before the
// norm, the row-pipelined kernel (layer_norm_fwd_pipelined_kernel) runs instead: a persistent grid copying each
// segment's next item into shared memory while it normalises the current one. Measured 0.66-0.95x the time of the
// per-item kernels (docs/ops/norm-log.md, "Row-pipelined kernel and staged weights (twenty-eighth session)").
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <numeric>
#include <type_traits>

#include "common/act_math.h"
#include "cuda/launch.h"
#include "cuda/mma.cuh"
#include "cuda/vec.cuh"
#include "cuda/vec_width.h"
#include "ops/norm_impl.h"

namespace fuseops::detail::cuda {
namespace {

constexpr int kThreadElems = 16;  // elements of a group held per thread: groups up to 16 * 1024 = kMaxNormGroup
constexpr int kMaxThreads = 1024;
static_assert(kThreadElems * kMaxThreads == kMaxNormGroup, "the on-chip capacity is the validated group limit");
constexpr int kWideThreads = 256;  // threads per group of the wide variant (one block)
constexpr int kWideElems = 32;     // elements per thread of the wide variant: groups up to 8192
/// Dynamic shared memory of the staged weight and bias, at most: within the default 48 KiB with the kernel's static
/// buffer, and 4 blocks per SM.
constexpr std::size_t kStageBytes = 40 * 1024;
/// Dynamic shared memory of the row-pipelined variant, at most: 4 blocks per SM (4 x (48 + 1.25) KB of the 228 KB).
constexpr std::size_t kPipelinedBytes = 48 * 1024;
/// Blocks per SM the wide variant is compiled for (bounds its registers): 4 with 16 elements per thread (64
/// registers, no spills), 3 with 32 16-bit elements as floats (80), 4 with them in storage form (RAW: 64 registers,
/// ~110 bytes of spill loads, measured faster), 2 with 32 f32 elements.
constexpr int wide_min_blocks(int elems, int elem_bytes, bool raw) {
  return elems <= 16 || raw ? 4 : elems * elem_bytes <= 64 ? 3 : 2;
}

/// f16 / bf16 outputs take the fast SiLU policy (common/act_math.h); f32 the precise one.
template <typename T>
constexpr bool kFastSilu = sizeof(T) == 2;

template <typename T, typename W>
struct NormParams {
  T* out;
  const T* x;
  const T* z;
  const W* weight;
  const W* bias;
  float* mean;
  float* rstd;
  int64_t out_stride, x_stride, z_stride;
  int64_t rows, ngroups, group_size, items;  // items = rows * ngroups
  int tpg;  // threads per (row, group): a power of two
  int nv;   // vectors per thread
  float eps;
  NormGate gate;
  bool rms;
  bool stage;  ///< weight and bias copied into shared memory while x is in flight (stage_smem)
};

/// One output element before the gate: (x - mean) rstd w (+ b), rounded step by step (no contraction left to the
/// compiler), so that every kernel variant gives the same bits. (A shared helper for the whole output vector, taking
/// the gate too, measured in ptxas 48-160 bytes of new spills in the wide variants: kept per element.)
__device__ __forceinline__ float normalized(float x, float mean, float rstd, float w) {
  return __fmul_rn(__fmul_rn(__fsub_rn(x, mean), rstd), w);
}
__device__ __forceinline__ float normalized(float x, float mean, float rstd, float w, float b) {
  return __fmaf_rn(__fmul_rn(__fsub_rn(x, mean), rstd), w, b);
}

/// Sum over the segment of `tpg` threads containing this thread; every thread of the segment gets the same bits.
/// Called by every thread of the block (block-uniform control flow). `red` holds two buffers of one float per warp,
/// used in turn (`turn` flips per call): a call writes the buffer that the call before last read, and every thread
/// passed the previous call's barrier after its reads of that buffer, so one barrier per call suffices.
__device__ __forceinline__ float segment_sum(float v, int tpg, float (*red)[kMaxThreads / 32], int& turn) {
  for (int o = min(tpg, 32) / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (tpg <= 32) return v;
  float* buf = red[turn];
  turn ^= 1;
  const int warp = static_cast<int>(threadIdx.x) / 32, per_segment = tpg / 32;
  const int first = warp / per_segment * per_segment;
  if ((threadIdx.x & 31) == 0) buf[warp] = v;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < per_segment; ++w) t += buf[first + w];
  return t;
}

/// NV: vectors per thread held in registers (p.nv <= NV); 1 for groups of up to 1024 vectors. BLOCK: the largest
/// block it is launched with (kMaxThreads, or kWideThreads for the wide variant: more registers per thread). RAW: x
/// held in its 16-bit storage form and converted at each use (half the registers of floats; never with a gate before
/// the norm, whose x silu(z) is held as floats).
template <typename T, typename W, int VEC, int NV, int BLOCK = kMaxThreads, bool RAW = false>
__global__ void __launch_bounds__(BLOCK, BLOCK == kMaxThreads ? 1 : wide_min_blocks(NV * VEC, sizeof(T), RAW))
    layer_norm_fwd_kernel(const NormParams<T, W> p) {
  constexpr int kMaxVecs = NV;
  static_assert(NV * VEC <= (BLOCK == kMaxThreads ? kThreadElems : kWideElems), "registers per thread");
  static_assert(!RAW || sizeof(T) == 2, "the storage form saves registers for 16-bit x only");
  constexpr bool kFast = kFastSilu<T>;
  __shared__ float red[2][kMaxThreads / 32];
  int turn = 0;
  pdl_wait_and_release();
  const int tpg = p.tpg;
  const int seg = static_cast<int>(threadIdx.x) / tpg, lane = static_cast<int>(threadIdx.x) & (tpg - 1);
  const int64_t per_block = blockDim.x / tpg;
  const int64_t G = p.group_size;
  const float n = static_cast<float>(G);
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * per_block; base < p.items;
       base += static_cast<int64_t>(gridDim.x) * per_block) {
    const int64_t item = base + seg;
    const bool valid = item < p.items;
    const int64_t row = valid ? item / p.ngroups : 0, group = valid ? item % p.ngroups : 0;
    const int64_t c0 = group * G;
    const T* x = p.x + row * p.x_stride + c0;
    const T* z = p.z + row * p.z_stride + c0;  // used only with a gate
    // Element offset (within the group) of vector i of this thread, and whether it is inside the group.
    auto col = [&](int i) { return static_cast<int64_t>(i * tpg + lane) * VEC; };
    auto inside = [&](int i) { return valid && i < p.nv && col(i) < G; };

    float xs[RAW ? 1 : kMaxVecs][VEC];
    StorageVec<T, VEC> xr[RAW ? kMaxVecs : 1];
    // z in storage form. With few vectors per thread, a gate after the norm is loaded together with x (twice the
    // bytes in flight per thread); with many, at its use, to stay within the registers of the launch bounds.
    constexpr bool kEarlyZ = NV <= 2;
    StorageVec<T, VEC> zs[kMaxVecs];
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxVecs; ++i) {
      if constexpr (RAW) {
        if (inside(i)) {
          xr[i].load(x + col(i));
          if (kEarlyZ && p.gate == NormGate::after_norm) zs[i].load(z + col(i));
        } else {
          xr[i].u.raw = {};  // zero bits: 0.0
        }
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum += xr[i].get(k);
        continue;
      }
      if (inside(i)) {
        FloatVec<T, VEC> v;
        v.load(x + col(i));
        if (p.gate == NormGate::before_norm || (kEarlyZ && p.gate == NormGate::after_norm)) zs[i].load(z + col(i));
        if (p.gate == NormGate::before_norm) {
#pragma unroll
          for (int k = 0; k < VEC; ++k) v.v[k] *= act_fwd<Act::silu, kFast>(zs[i].get(k));
        }
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          xs[i][k] = v.v[k];
          sum += v.v[k];
        }
      } else {
#pragma unroll
        for (int k = 0; k < VEC; ++k) xs[i][k] = 0.0f;
      }
    }
    // Staged (p.stage): this thread's weight (and bias) vectors go into its own slots of shared memory by cp.async
    // now, behind x's loads, so that their round trip overlaps x's instead of following the reductions; each thread
    // reads back only the bytes it copied, after waiting for its own copies (no block barrier).
    extern __shared__ __align__(16) unsigned char norm_smem[];
    auto slot = [&](int i) {  // vector i of this thread in the staged weight; the bias follows the weight
      return reinterpret_cast<W*>(norm_smem) + (static_cast<int>(i * blockDim.x) + static_cast<int>(threadIdx.x)) * VEC;
    };
    const int bias_off = static_cast<int>(p.nv * blockDim.x) * VEC;
    constexpr bool kStageable = VEC > 1;  // 16-byte vectors of x: 8 to 32 bytes of W (the scalar path reads at its use)
    if constexpr (kStageable) {
      if (p.stage) {
#pragma unroll
        for (int i = 0; i < kMaxVecs; ++i) {
          if (!inside(i)) continue;
          cp_async_ca<VEC * sizeof(W)>(slot(i), p.weight + c0 + col(i));
          if (p.bias) cp_async_ca<VEC * sizeof(W)>(slot(i) + bias_off, p.bias + c0 + col(i));
        }
        cp_async_commit();
      }
    }
    // element k of vector i of x (x silu(z) with a gate before the norm)
    auto xval = [&](int i, int k) {
      if constexpr (RAW) {
        return xr[i].get(k);
      } else {
        return xs[i][k];
      }
    };
    float mean = 0.0f;
    if (!p.rms) mean = segment_sum(sum, tpg, red, turn) / n;
    float sq = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxVecs; ++i) {
      if (inside(i)) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float c = xval(i, k) - mean;
          sq += c * c;
        }
      }
    }
    const float rstd = 1.0f / sqrtf(segment_sum(sq, tpg, red, turn) / n + p.eps);
    if (valid && lane == 0) {
      const int64_t s = group * p.rows + row;  // group-major, as FLA
      if (p.mean) p.mean[s] = mean;
      if (p.rstd) p.rstd[s] = rstd;
    }
    T* out = p.out + row * p.out_stride + c0;
    const bool staged = kStageable && p.stage;
    if (staged) cp_async_wait_all();
#pragma unroll
    for (int i = 0; i < kMaxVecs; ++i) {
      if (!inside(i)) continue;
      float w[VEC], b[VEC];
      if (staged) {
        load_as_floats<W, VEC, true>(slot(i), w);
        if (p.bias) load_as_floats<W, VEC, true>(slot(i) + bias_off, b);
      } else {
        load_as_floats<W, VEC>(p.weight + c0 + col(i), w);
        if (p.bias) load_as_floats<W, VEC>(p.bias + c0 + col(i), b);
      }
      FloatVec<T, VEC> y;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        y.v[k] = p.bias ? normalized(xval(i, k), mean, rstd, w[k], b[k]) : normalized(xval(i, k), mean, rstd, w[k]);
      }
      if (p.gate == NormGate::after_norm) {
        if (!kEarlyZ) zs[i].load(z + col(i));
#pragma unroll
        for (int k = 0; k < VEC; ++k) y.v[k] = __fmul_rn(y.v[k], act_fwd<Act::silu, kFast>(zs[i].get(k)));
      }
      y.store_whole(out + col(i));
    }
  }
}

/// Row-pipelined variant (16-byte vectors, no gate before the norm, segments of at most kWideThreads threads): a
/// persistent grid whose threads copy their vectors of x (and z) of their segment's next item into their own
/// shared-memory slots by cp.async while they normalise the current item from the other stage's slots, and their
/// weight (and bias) vectors once: a segment keeps one group, since the grid's item stride is a multiple of ngroups.
/// Each thread reads back only the slots it filled, after waiting for its own copies, so the reductions' barriers are
/// the only ones. Loads of the next item overlap the reductions and stores of the current one, and x needs no
/// registers while in flight. The sums, their order and the output arithmetic are layer_norm_fwd_kernel's: the same
/// bytes (test NormPipelined.SameBytesWhereTaken). Shared memory per block (launch_pipelined): per thread, NV x
/// (1 + bias) weight vectors, then 2 stages x (1 + gate) x NV 16-byte vectors of x (and z). Three stages measured no
/// better where they fit (docs/ops/norm-log.md, "Row-pipelined kernel and staged weights").
template <typename T, typename W, int NV>
__global__ void __launch_bounds__(kWideThreads, 4) layer_norm_fwd_pipelined_kernel(const NormParams<T, W> p) {
  constexpr int VEC = static_cast<int>(16 / sizeof(T));
  __shared__ float red[2][kMaxThreads / 32];
  int turn = 0;
  extern __shared__ __align__(16) unsigned char norm_smem[];
  pdl_wait_and_release();
  constexpr int threads = kWideThreads;  // the launch's block: slot offsets known at compile time
  const int tpg = p.tpg, tid = static_cast<int>(threadIdx.x);
  const int seg = tid / tpg, lane = tid & (tpg - 1);
  const int64_t per_block = threads / tpg, stride = static_cast<int64_t>(gridDim.x) * per_block;
  const int64_t G = p.group_size;
  const float n = static_cast<float>(G);
  const bool gated = p.gate == NormGate::after_norm;
  const int64_t c0 = (static_cast<int64_t>(blockIdx.x) * per_block + seg) % p.ngroups * G;
  auto col = [&](int i) { return static_cast<int64_t>(i * tpg + lane) * VEC; };
  auto has = [&](int i) { return i < p.nv && col(i) < G; };  // vector i of this thread is inside the group
  W* const wslot = reinterpret_cast<W*>(norm_smem) + tid * VEC;  // + i * threads * VEC; the bias after the weight
  constexpr int bias_off = NV * threads * VEC;
  uint4* const slots = reinterpret_cast<uint4*>(reinterpret_cast<W*>(norm_smem) + (p.bias ? 2 : 1) * bias_off) + tid;
  const int arrays = gated ? 2 : 1;
  auto slot = [&](int stage, int array, int i) { return slots + ((stage * arrays + array) * NV + i) * threads; };
  auto issue = [&](int64_t base, int stage) {  // x (and z) of the segment's item at `base`, into `stage`
    const int64_t item = base + seg;
    if (item >= p.items) return;
    const int64_t row = item / p.ngroups;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      if (!has(i)) continue;
      cp_async_16(slot(stage, 0, i), p.x + row * p.x_stride + c0 + col(i), true);
      if (gated) cp_async_16(slot(stage, 1, i), p.z + row * p.z_stride + c0 + col(i), true);
    }
  };
  auto xval = [&](int stage, int i, float (&f)[VEC]) {
    StorageVec<T, VEC> v;
    v.load_shared(reinterpret_cast<const T*>(slot(stage, 0, i)));
#pragma unroll
    for (int k = 0; k < VEC; ++k) f[k] = v.get(k);
  };

#pragma unroll
  for (int i = 0; i < NV; ++i) {
    if (!has(i)) continue;
    cp_async_ca<VEC * sizeof(W)>(wslot + i * threads * VEC, p.weight + c0 + col(i));
    if (p.bias) cp_async_ca<VEC * sizeof(W)>(wslot + bias_off + i * threads * VEC, p.bias + c0 + col(i));
  }
  int stage = 0;
  issue(static_cast<int64_t>(blockIdx.x) * per_block, 0);
  cp_async_commit();  // with the weight's copies
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * per_block; base < p.items; base += stride) {
    issue(base + stride, stage ^ 1);  // into the stage this thread read in the previous iteration
    cp_async_commit();
    cp_async_wait<1>();  // this item's copies (and the weight's) have landed; the next item's may be in flight
    const int64_t item = base + seg;
    const bool valid = item < p.items;
    const int64_t row = valid ? item / p.ngroups : 0;
    auto inside = [&](int i) { return valid && has(i); };
    auto each_x = [&](auto&& f) {  // f(x) for every element of the thread's vectors, in layer_norm_fwd_kernel's order
#pragma unroll
      for (int i = 0; i < NV; ++i) {
        if (!inside(i)) continue;
        float v[VEC];
        xval(stage, i, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) f(v[k]);
      }
    };
    float sum = 0.0f;
    if (!p.rms) each_x([&](float v) { sum += v; });
    const float mean = p.rms ? 0.0f : segment_sum(sum, tpg, red, turn) / n;
    float sq = 0.0f;
    each_x([&](float v) {
      const float c = v - mean;
      sq += c * c;
    });
    const float rstd = 1.0f / sqrtf(segment_sum(sq, tpg, red, turn) / n + p.eps);
    if (valid && lane == 0) {
      const int64_t s = c0 / G * p.rows + row;  // group-major, as FLA
      if (p.mean) p.mean[s] = mean;
      if (p.rstd) p.rstd[s] = rstd;
    }
    T* const out = p.out + row * p.out_stride + c0;
#pragma unroll
    for (int i = 0; i < NV; ++i) {
      if (!inside(i)) continue;
      float f[VEC], w[VEC], b[VEC];
      xval(stage, i, f);
      load_as_floats<W, VEC, true>(wslot + i * threads * VEC, w);
      if (p.bias) load_as_floats<W, VEC, true>(wslot + bias_off + i * threads * VEC, b);
      FloatVec<T, VEC> y;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        y.v[k] = p.bias ? normalized(f[k], mean, rstd, w[k], b[k]) : normalized(f[k], mean, rstd, w[k]);
      }
      if (gated) {
        StorageVec<T, VEC> zv;
        zv.load_shared(reinterpret_cast<const T*>(slot(stage, 1, i)));
#pragma unroll
        for (int k = 0; k < VEC; ++k) y.v[k] = __fmul_rn(y.v[k], act_fwd<Act::silu, kFastSilu<T>>(zv.get(k)));
      }
      y.store_whole(out + col(i));
    }
    stage ^= 1;
  }
  cp_async_wait_all();  // nothing is left in flight into the block's shared memory
}

int next_pow2(int64_t v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

/// Threads per (row, group) segment of the per-item kernel's general variant and of the pipelined kernel's groups
/// below kWideThreads vectors: the group's vectors rounded up to a power of two (at most kMaxThreads), halved for
/// 16-byte vectors and 16 to kMaxThreads vectors so each thread holds two (Qwen3-Next's groups of 128: twice the
/// bytes of x and z in flight per thread at the same 64 registers).
int segment_threads(int64_t vecs, bool vec16) {
  const int tpg = std::min(kMaxThreads, next_pow2(vecs));
  return vec16 && vecs >= 16 && next_pow2(vecs) <= kMaxThreads ? tpg / 2 : tpg;
}

std::atomic<int64_t> pipelined_launches{0};  ///< norm_pipelined_launches_for_testing
std::atomic<int64_t> staged_launches{0};     ///< norm_staged_launches_for_testing

/// Sets p.stage and returns the dynamic shared memory of the launch: weight and bias staged (nv vectors of `vec` W
/// elements per thread of `block`) with 16-byte vectors of x, in a launch of one wave, where that fits kStageBytes;
/// FUSEOPS_NORM_STAGE=0: read at their use (the same bytes; for A/B runs and the test that compares them).
template <typename T, typename W>
std::size_t stage_smem(NormParams<T, W>& p, int vec, int block, int64_t grid, int device, bool bias) {
  const std::size_t bytes = static_cast<std::size_t>(p.nv) * vec * block * sizeof(W) * (bias ? 2 : 1);
  p.stage = vec > 1 && bytes <= kStageBytes && grid <= sm_count(device) && !env_switched_off("FUSEOPS_NORM_STAGE");
  if (p.stage) staged_launches.fetch_add(1, std::memory_order_relaxed);
  return p.stage ? bytes : 0;
}

/// The row-pipelined variant where it applies (16-byte vectors, no gate before the norm, groups of at most
/// kWideThreads x 4 vectors, shared memory within kPipelinedBytes, more blocks than one wave holds); launches it and
/// returns true, else false. Segments as the other variants (wide groups: a block; else two vectors per thread for
/// groups of 16 vectors or more), blocks of kWideThreads threads, a grid of one wave whose item stride is a multiple
/// of ngroups. FUSEOPS_NORM_PIPE=0 turns it off (the same bytes; for A/B runs and the test that compares them).
template <typename T, typename W>
bool launch_pipelined(NormParams<T, W> p, int vec, const LayerNormArgs& a, int device, cudaStream_t stream,
                      const char* op) {
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  if (vec != kVec || a.gate == NormGate::before_norm) return false;
  const int64_t vecs = a.group_size / kVec;
  if (vecs > int64_t{kWideThreads} * 4) return false;
  p.tpg = vecs >= kWideThreads ? kWideThreads : segment_threads(vecs, true);
  p.nv = static_cast<int>((vecs + p.tpg - 1) / p.tpg);
  const int64_t per_block = kWideThreads / p.tpg, needed = (p.items + per_block - 1) / per_block;
  if (needed <= sm_count(device) || env_switched_off("FUSEOPS_NORM_PIPE")) return false;
  const int nv = p.nv == 1 ? 1 : p.nv <= 2 ? 2 : 4;  // the kernel's NV: its slot layout
  const std::size_t smem = static_cast<std::size_t>(kWideThreads) * nv *
                           (kVec * sizeof(W) * (a.bias ? 2 : 1) + 16 * 2 * (a.gate == NormGate::after_norm ? 2 : 1));
  if (smem > kPipelinedBytes) return false;
  auto go = [&](auto kernel) {
    const int64_t wave = cached_wave(kernel, kWideThreads, smem, device, op);
    if (needed <= wave) return false;
    const int64_t unit = p.ngroups / std::gcd(per_block, p.ngroups);  // blocks per item stride multiple of ngroups
    const int64_t grid = wave / unit * unit;
    if (grid * 4 < wave * 3) return false;  // a grid rounded far below the wave (many groups): the per-item kernels
    launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(kWideThreads), smem, stream, device, p);
    pipelined_launches.fetch_add(1, std::memory_order_relaxed);
    return true;
  };
  if (nv == 1) return go(layer_norm_fwd_pipelined_kernel<T, W, 1>);
  return nv == 2 ? go(layer_norm_fwd_pipelined_kernel<T, W, 2>) : go(layer_norm_fwd_pipelined_kernel<T, W, 4>);
}

template <typename T, typename W>
void launch(const LayerNormArgs& a, int device, cudaStream_t stream, const char* op) {
  NormParams<T, W> p{};
  p.out = static_cast<T*>(a.out.data);
  p.x = static_cast<const T*>(a.x.data);
  p.z = a.z.data ? static_cast<const T*>(a.z.data) : p.x;
  p.weight = static_cast<const W*>(a.weight);
  p.bias = static_cast<const W*>(a.bias);
  p.mean = a.mean;
  p.rstd = a.rstd;
  p.out_stride = a.out.row_stride;
  p.x_stride = a.x.row_stride;
  p.z_stride = a.z.data ? a.z.row_stride : a.x.row_stride;
  p.rows = a.x.rows;
  p.ngroups = a.ngroups;
  p.group_size = a.group_size;
  p.items = a.x.rows * a.ngroups;
  p.eps = a.eps;
  p.gate = a.gate;
  p.rms = a.rms;

  // 16-byte vectors where x, z, out (rows and groups) and weight, bias allow; else scalars.
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  int vec = a.z.data ? pick_vec({&a.out, &a.x, &a.z}, a.group_size) : pick_vec({&a.out, &a.x}, a.group_size);
  const int64_t w_align = std::min<int64_t>(16, kVec * static_cast<int64_t>(sizeof(W)));
  if (vec != kVec || !aligned_to(a.weight, w_align) || (a.bias && !aligned_to(a.bias, w_align))) vec = 1;
  if (launch_pipelined(p, vec, a, device, stream, op)) return;

  const int64_t vecs = a.group_size / vec;
  constexpr int kWideVecs = kWideElems / kVec;
  if (vec == kVec && vecs >= kWideThreads && vecs <= int64_t{kWideThreads} * kWideVecs) {
    // wide groups: one block of kWideThreads threads per (row, group), up to kWideElems elements per thread (half
    // as many registers for groups that need at most half of them)
    p.tpg = kWideThreads;
    p.nv = static_cast<int>((vecs + kWideThreads - 1) / kWideThreads);
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>(p.items, int64_t{1} << 20)));
    const std::size_t smem = stage_smem(p, kVec, kWideThreads, grid.x, device, a.bias != nullptr);
    if (p.nv <= kWideVecs / 2) {
      launch_kernel(layer_norm_fwd_kernel<T, W, kVec, kWideVecs / 2, kWideThreads>, grid, dim3(kWideThreads), smem,
                    stream, device, p);
    } else {
      // 16-bit x held in storage form (no gate before the norm); FUSEOPS_NORM_RAW=0: as floats (the same bytes; for
      // A/B runs and the test that compares them)
      if constexpr (sizeof(T) == 2) {
        if (a.gate != NormGate::before_norm && !env_switched_off("FUSEOPS_NORM_RAW")) {
          launch_kernel(layer_norm_fwd_kernel<T, W, kVec, kWideVecs, kWideThreads, true>, grid, dim3(kWideThreads),
                        smem, stream, device, p);
          return;
        }
      }
      launch_kernel(layer_norm_fwd_kernel<T, W, kVec, kWideVecs, kWideThreads>, grid, dim3(kWideThreads), smem,
                    stream, device, p);
    }
    return;
  }
  p.tpg = segment_threads(vecs, vec == kVec);
  p.nv = static_cast<int>((vecs + p.tpg - 1) / p.tpg);  // <= kThreadElems / vec: group_size <= kMaxNormGroup
  // Blocks of 256 threads, fewer when that leaves SMs idle (decode), never less than one segment or one warp.
  const int64_t spread = (p.items * p.tpg + sm_count(device) - 1) / sm_count(device);
  const int block = std::max(p.tpg, std::max(32, next_pow2(std::min<int64_t>(256, spread))));
  const int64_t per_block = block / p.tpg;
  const int64_t grid = std::min<int64_t>((p.items + per_block - 1) / per_block, int64_t{1} << 20);
  const std::size_t smem = stage_smem(p, vec, block, grid, device, a.bias != nullptr);
  auto go = [&](auto kernel) {
    launch_kernel(kernel, dim3(static_cast<unsigned>(grid)), dim3(block), smem, stream, device, p);
  };
  if (vec == kVec) {
    if (p.nv == 1) go(layer_norm_fwd_kernel<T, W, kVec, 1>);
    else go(layer_norm_fwd_kernel<T, W, kVec, kThreadElems / kVec>);
  } else {
    if (p.nv == 1) go(layer_norm_fwd_kernel<T, W, 1, 1>);
    else go(layer_norm_fwd_kernel<T, W, 1, kThreadElems>);
  }
}

}  // namespace

int64_t norm_pipelined_launches_for_testing() { return pipelined_launches.load(std::memory_order_relaxed); }
int64_t norm_staged_launches_for_testing() { return staged_launches.load(std::memory_order_relaxed); }

void layer_norm_fwd(const char* op, const LayerNormArgs& args, int device, void* stream) {
  DeviceGuard guard(device, op);
  auto s = static_cast<cudaStream_t>(stream);
  with_float_type(args.x.dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    if (args.w_dtype == DType::f32) {
      launch<T, float>(args, device, s, op);
    } else if constexpr (!std::is_same_v<T, float>) {
      launch<T, T>(args, device, s, op);  // weight in x's dtype (validated)
    }
  });
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
