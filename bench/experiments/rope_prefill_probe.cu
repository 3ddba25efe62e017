// Experiment: where whole-head RoPE prefill loses against a plain read-and-write-back of its bytes on the H200
// (Llama-3 8B: 16384 tokens, 32 query and 8 key heads of 128, NeoX, bf16 data and cache, int64 positions 0..T-1).
// Variants of one kernel, each timed cold (rotating argument sets >= 4x L2, CUDA-graph replay, as `fuseops bench`):
// - copy: every 16-byte vector of q and k read and written back (U = 8 per thread, all loads first): the bound;
// - group: the library's group kernel reduced to this shape (4 heads per thread, 8 lanes per head, all 8 loads
//   before the position -> angle chain, every stride a compile-time constant); also launched with programmatic
//   dependent launch ("PDL", as the library launches), and with the cache rows read by ld.global.nc;
// - library rotary_embedding (built with -DFUSEOPS_PROBE_LIB and linked with libfuseops.a): the library's op on the
//   same buffers, in the same harness;
// - group_nopos: the position taken as the token index (no position load);
// - group_noangle: neither position nor cache row (cos / sin from the parameters);
// - group_ahead: the group kernel walking ITER tokens per thread, the next token's position and cache rows loaded
//   while the current token's data is in flight;
// - pair: 80 threads per token, thread k owning vectors k, k + 80, ..., k + 560 of the token (each warp instruction
//   512 contiguous bytes), the NeoX partner vector fetched from lane k ^ 8 by shuffles;
// - pair_ahead: pair, walking ITER tokens per thread with the next token's angles loaded ahead.
// Each variant's output is compared with the group kernel's (bytes) on one set; the timing is the point.
// Standalone: nvcc -O3 -std=c++17 -arch=sm_90a bench/experiments/rope_prefill_probe.cu -o /tmp/probe && /tmp/probe
// With the library's op: nvcc -O3 -std=c++17 -arch=sm_90a -DFUSEOPS_PROBE_LIB -Iinclude
//   bench/experiments/rope_prefill_probe.cu build-carry/libfuseops.a -o /tmp/probe (after scripts/build-carry.sh)
// Results and what they showed: docs/ops/rope-log.md, "The group kernel's address arithmetic (thirtieth session)".
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "graph_timing.cuh"
#ifdef FUSEOPS_PROBE_LIB  // link with libfuseops.a: the library's own rotary_embedding in the same harness
#include "fuseops/rope.h"
#endif

namespace {

constexpr int64_t kHq = 32, kHk = 8, kD = 128, kHeads = kHq + kHk;
constexpr int64_t kVecPerHead = kD * 2 / 16;  // 16 vectors of 8 bf16
constexpr int64_t kVecPerToken = kHeads * kVecPerHead;  // 640

struct Args {
  __nv_bfloat16* q;
  __nv_bfloat16* k;
  const int64_t* pos;
  const __nv_bfloat16* cache;  // [max_pos, 128]: cos 0..63, sin 64..127
  int64_t tokens, max_pos;
  float c0, s0;  // group_noangle's angle
};

struct V8 {
  uint4 raw;
  __device__ float get(int i) const {
    const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&raw);
    return __bfloat162float(e[i]);
  }
  __device__ void set(int i, float v) { reinterpret_cast<__nv_bfloat16*>(&raw)[i] = __float2bfloat16_rn(v); }
};

__device__ __forceinline__ uint4 ld16(const void* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void st16(void* p, uint4 v) {
  asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

__device__ __forceinline__ __nv_bfloat16* head_ptr(const Args& a, int64_t t, int64_t hd) {
  return hd < kHq ? a.q + (t * kHq + hd) * kD : a.k + (t * kHk + hd - kHq) * kD;
}


__device__ __forceinline__ void rotate(V8& x, V8& y, const V8& c, const V8& s) {
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float a = x.get(i), b = y.get(i), cc = c.get(i), ss = s.get(i);
    x.set(i, __fmaf_rn(a, cc, -__fmul_rn(b, ss)));
    y.set(i, __fmaf_rn(b, cc, __fmul_rn(a, ss)));
  }
}

__global__ void __launch_bounds__(256) copy_kernel(Args a) {
  constexpr int U = 8;
  const int64_t nq = a.tokens * kHq * kVecPerHead, n = a.tokens * kVecPerToken;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * U * blockDim.x + threadIdx.x;
  uint4 v[U];
  char* p[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t i = first + u * static_cast<int64_t>(blockDim.x);
    p[u] = i < nq ? reinterpret_cast<char*>(a.q) + i * 16 : reinterpret_cast<char*>(a.k) + (i - nq) * 16;
    if (i < n) v[u] = ld16(p[u]);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t i = first + u * static_cast<int64_t>(blockDim.x);
    if (i < n) st16(p[u], v[u]);
  }
}

enum class Angle { load, nopos, none };

__device__ __forceinline__ void pdl_wait_release() {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;");
}

__device__ __forceinline__ uint4 ld16_nc(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// The two vectors of the lane in each of 4 heads from `base` (the lane's first element of the group's first head).
__device__ __forceinline__ void load_group(const __nv_bfloat16* base, V8 (&x)[4], V8 (&y)[4]) {
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    x[h].raw = ld16(base + h * kD);
    y[h].raw = ld16(base + h * kD + 64);
  }
}
__device__ __forceinline__ void rotate_store_group(__nv_bfloat16* base, V8 (&x)[4], V8 (&y)[4], const V8& c,
                                                   const V8& s) {
#pragma unroll
  for (int h = 0; h < 4; ++h) {
    rotate(x[h], y[h], c, s);
    st16(base + h * kD, x[h].raw);
    st16(base + h * kD + 64, y[h].raw);
  }
}

// Block (8 lanes, 10 groups, 3 tokens): the library's group kernel for this shape.
template <Angle M, bool PDL = false, bool NC = false>
__global__ void __launch_bounds__(256, 3) group_kernel(Args a) {
  if constexpr (PDL) pdl_wait_release();
  const int j0 = threadIdx.x * 8;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.z + threadIdx.z;
  if (t >= a.tokens) return;
  const int64_t first = threadIdx.y * 4;
  int64_t pos = t;
  if constexpr (M == Angle::load) pos = a.pos[t];
  V8 x[4], y[4];
  __nv_bfloat16* base = head_ptr(a, t, first) + j0;  // a group of 4 heads lies in q or in k
  load_group(base, x, y);
  const bool valid = pos >= 0 && pos < a.max_pos;
  V8 c, s;
  if constexpr (M == Angle::none) {
#pragma unroll
    for (int i = 0; i < 8; ++i) c.set(i, a.c0 + i), s.set(i, a.s0 - i);
  } else if (valid) {
    c.raw = NC ? ld16_nc(a.cache + pos * kD + j0) : ld16(a.cache + pos * kD + j0);
    s.raw = NC ? ld16_nc(a.cache + pos * kD + 64 + j0) : ld16(a.cache + pos * kD + 64 + j0);
  }
  if (valid) rotate_store_group(base, x, y, c, s);
}

// The group kernel walking ITER tokens per thread (t, t + stride, ...): the next token's position and cache rows are
// loaded while the current token's data is in flight.
template <int ITER, int MINB = 3>
__global__ void __launch_bounds__(240, MINB) group_ahead_kernel(Args a) {
  const int j0 = threadIdx.x * 8;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.z;
  int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.z + threadIdx.z;
  const int64_t first = threadIdx.y * 4;
  if (t >= a.tokens) return;
  int64_t pos = a.pos[t];
  V8 c, s;
  if (pos >= 0 && pos < a.max_pos) {
    c.raw = ld16(a.cache + pos * kD + j0);
    s.raw = ld16(a.cache + pos * kD + 64 + j0);
  }
  for (int it = 0; it < ITER && t < a.tokens; ++it, t += stride) {
    V8 x[4], y[4];
    __nv_bfloat16* base = head_ptr(a, t, first) + j0;  // a group of 4 heads lies in q or in k
    load_group(base, x, y);
    const int64_t tn = t + stride;
    const bool more = it + 1 < ITER && tn < a.tokens;
    const int64_t pos_next = more ? a.pos[tn] : 0;
    if (pos >= 0 && pos < a.max_pos) rotate_store_group(base, x, y, c, s);
    pos = pos_next;
    if (more && pos >= 0 && pos < a.max_pos) {
      c.raw = ld16(a.cache + pos * kD + j0);
      s.raw = ld16(a.cache + pos * kD + 64 + j0);
    }
  }
}

// 80 threads per token (blockDim.x = 80 * tokens per block); thread k of a token owns vectors k + 80 u, u < 8, of the
// token's 640 (16 per head: half k & 8, lane k & 7 for every u). ITER tokens per thread, angles one token ahead.
template <int ITER, int MINB = 1>
__global__ void __launch_bounds__(320, MINB) pair_kernel(Args a) {
  const int tpb = blockDim.x / 80;
  const int kk = threadIdx.x % 80;
  const int j0 = (kk & 7) * 8;
  const bool second = kk & 8;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * tpb;
  int64_t t = static_cast<int64_t>(blockIdx.x) * tpb + threadIdx.x / 80;
  const bool live0 = t < a.tokens;
  int64_t pos = live0 ? a.pos[t] : -1;
  V8 c, s;
  if (pos >= 0 && pos < a.max_pos) {
    c.raw = ld16(a.cache + pos * kD + j0);
    s.raw = ld16(a.cache + pos * kD + 64 + j0);
  }
  for (int it = 0; it < ITER; ++it, t += stride) {
    const bool live = t < a.tokens;  // the whole warp shuffles: a dead lane joins with zeros
    V8 v[8];
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      const int64_t vi = kk + 80 * u;
      const int64_t hd = vi >> 4;
      v[u].raw = live ? ld16(head_ptr(a, t, hd) + (vi & 15) * 8) : make_uint4(0, 0, 0, 0);
    }
    const int64_t tn = t + stride;
    const bool more = it + 1 < ITER && tn < a.tokens;
    const int64_t pos_next = more ? a.pos[tn] : -1;
    const bool valid = live && pos >= 0 && pos < a.max_pos;
#pragma unroll
    for (int u = 0; u < 8; ++u) {
      V8 o;
      o.raw.x = __shfl_xor_sync(0xffffffffu, v[u].raw.x, 8);
      o.raw.y = __shfl_xor_sync(0xffffffffu, v[u].raw.y, 8);
      o.raw.z = __shfl_xor_sync(0xffffffffu, v[u].raw.z, 8);
      o.raw.w = __shfl_xor_sync(0xffffffffu, v[u].raw.w, 8);
      if (valid) {
        V8 r;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float m = v[u].get(i), p = o.get(i), cc = c.get(i), ss = s.get(i);
          r.set(i, second ? __fmaf_rn(m, cc, __fmul_rn(p, ss)) : __fmaf_rn(m, cc, -__fmul_rn(p, ss)));
        }
        const int64_t vi = kk + 80 * u;
        st16(head_ptr(a, t, vi >> 4) + (vi & 15) * 8, r.raw);
      }
    }
    pos = pos_next;
    if (more && pos >= 0 && pos < a.max_pos) {
      c.raw = ld16(a.cache + pos * kD + j0);
      s.raw = ld16(a.cache + pos * kD + 64 + j0);
    }
  }
}

struct Set {
  __nv_bfloat16 *q, *k, *cache;
  int64_t* pos;
};

}  // namespace

int main() {
  const int64_t T = 16384, max_pos = T;
  int l2 = 0, sms = 0;
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t qb = T * kHq * kD * 2, kb = T * kHk * kD * 2, cb = max_pos * kD * 2, pb = T * 8;
  const double mb = (2.0 * (qb + kb) + cb * 0 + pb) / 1e6;  // data read + written, positions (rows: L2 mostly)
  const double set_bytes = static_cast<double>(qb + kb + cb + pb);
  const int sets = std::max(2, static_cast<int>(4.0 * l2 / set_bytes + 0.999));
  std::vector<Set> S(sets);
  std::vector<int64_t> hpos(T);
  for (int64_t i = 0; i < T; ++i) hpos[i] = i;
  std::vector<uint16_t> hq(qb / 2), hk(kb / 2), hc(cb / 2);
  uint32_t r = 12345u;
  auto rnd = [&] {
    r = r * 1664525u + 1013904223u;
    return static_cast<uint16_t>(0x3c00u + ((r >> 9) & 0x3ff));  // bf16 in [1, 2)
  };
  for (auto& e : hq) e = rnd();
  for (auto& e : hk) e = rnd();
  for (auto& e : hc) e = static_cast<uint16_t>(rnd() - 0x0100u);  // [0.5, 1)
  for (Set& s : S) {
    CK(cudaMalloc(&s.q, qb));
    CK(cudaMalloc(&s.k, kb));
    CK(cudaMalloc(&s.cache, cb));
    CK(cudaMalloc(&s.pos, pb));
    CK(cudaMemcpy(s.q, hq.data(), qb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s.k, hk.data(), kb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s.cache, hc.data(), cb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(s.pos, hpos.data(), pb, cudaMemcpyHostToDevice));
  }
  auto args = [&](int i) {
    const Set& s = S[i % sets];
    return Args{s.q, s.k, s.pos, s.cache, T, max_pos, 0.5f, 0.25f};
  };
  const double rate = copy_rate_tbps();
  std::printf("copy rate %.3f TB/s, %d SMs, %d argument sets of %.0f MB; data + positions %.1f MB, copy-rate time "
              "%.2f us\n\n",
              rate, sms, sets, set_bytes / 1e6, mb, mb / rate);
  std::printf("| variant | cold us | x copy-rate time | same bytes as group |\n|---|---|---|---|\n");

  // Reference output of the group kernel on a fresh copy of set 0.
  auto reset0 = [&] {
    CK(cudaMemcpy(S[0].q, hq.data(), qb, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(S[0].k, hk.data(), kb, cudaMemcpyHostToDevice));
  };
  auto fetch0 = [&](std::vector<uint16_t>& oq, std::vector<uint16_t>& ok) {
    oq.resize(qb / 2), ok.resize(kb / 2);
    CK(cudaMemcpy(oq.data(), S[0].q, qb, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ok.data(), S[0].k, kb, cudaMemcpyDeviceToHost));
  };
  const dim3 gblock(8, 10, 3);
  const unsigned ggrid = static_cast<unsigned>((T + 2) / 3);
  std::vector<uint16_t> refq, refk;
  reset0();
  group_kernel<Angle::load><<<ggrid, gblock>>>(args(0));
  CK(cudaDeviceSynchronize());
  fetch0(refq, refk);

  struct Variant {
    const char* name;
    std::function<void(int, cudaStream_t)> launch;
    bool compare;
  };
  auto ahead_grid = [&](int iter) { return static_cast<unsigned>((T + 3 * iter - 1) / (3 * iter)); };
  auto pair_grid = [&](int tpb, int iter) { return static_cast<unsigned>((T + tpb * iter - 1) / (tpb * iter)); };
  auto pdl_launch = [&](auto kernel, unsigned grid, dim3 block, cudaStream_t s, const Args& a) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = block;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, kernel, a));
  };
  std::vector<Variant> vs = {
      {"copy (bound)", [&](int i, cudaStream_t s) {
         copy_kernel<<<static_cast<unsigned>((T * kVecPerToken + 2047) / 2048), 256, 0, s>>>(args(i));
       }, false},
      {"group", [&](int i, cudaStream_t s) { group_kernel<Angle::load><<<ggrid, gblock, 0, s>>>(args(i)); }, true},
      {"group, PDL", [&](int i, cudaStream_t s) {
         pdl_launch(group_kernel<Angle::load, true>, ggrid, gblock, s, args(i));
       }, true},
      {"group, PDL, cache rows by ld.global.nc", [&](int i, cudaStream_t s) {
         pdl_launch(group_kernel<Angle::load, true, true>, ggrid, gblock, s, args(i));
       }, true},
#ifdef FUSEOPS_PROBE_LIB
      {"library rotary_embedding", [&](int i, cudaStream_t s) {
         using fuseops::DType;
         using fuseops::TensorView;
         const fuseops::Device dev = fuseops::Device::cuda(0);
         const Set& st = S[i % sets];
         const TensorView pos(st.pos, DType::i64, dev, {T});
         const TensorView q(st.q, DType::bf16, dev, {T, kHq, kD});
         const TensorView k(st.k, DType::bf16, dev, {T, kHk, kD});
         const TensorView cache(st.cache, DType::bf16, dev, {max_pos, kD});
         fuseops::rotary_embedding(pos, q, &k, kD, cache, true, false, fuseops::Stream(s));
       }, true},
#endif
      {"group_nopos", [&](int i, cudaStream_t s) { group_kernel<Angle::nopos><<<ggrid, gblock, 0, s>>>(args(i)); },
       true},
      {"group_noangle", [&](int i, cudaStream_t s) { group_kernel<Angle::none><<<ggrid, gblock, 0, s>>>(args(i)); },
       false},
      {"group_ahead 2", [&](int i, cudaStream_t s) { group_ahead_kernel<2><<<ahead_grid(2), gblock, 0, s>>>(args(i)); },
       true},
      {"group_ahead 4", [&](int i, cudaStream_t s) { group_ahead_kernel<4><<<ahead_grid(4), gblock, 0, s>>>(args(i)); },
       true},
      {"group_ahead 8", [&](int i, cudaStream_t s) { group_ahead_kernel<8><<<ahead_grid(8), gblock, 0, s>>>(args(i)); },
       true},
      {"group_ahead 4, 2 blocks/SM", [&](int i, cudaStream_t s) {
         group_ahead_kernel<4, 2><<<ahead_grid(4), gblock, 0, s>>>(args(i));
       }, true},
      {"pair 4 tok/block", [&](int i, cudaStream_t s) { pair_kernel<1><<<pair_grid(4, 1), 320, 0, s>>>(args(i)); },
       true},
      {"pair 2 tok/block", [&](int i, cudaStream_t s) { pair_kernel<1><<<pair_grid(2, 1), 160, 0, s>>>(args(i)); },
       true},
      {"pair_ahead 2", [&](int i, cudaStream_t s) { pair_kernel<2><<<pair_grid(4, 2), 320, 0, s>>>(args(i)); },
       true},
      {"pair_ahead 4", [&](int i, cudaStream_t s) { pair_kernel<4><<<pair_grid(4, 4), 320, 0, s>>>(args(i)); },
       true},
      {"pair_ahead 8", [&](int i, cudaStream_t s) { pair_kernel<8><<<pair_grid(4, 8), 320, 0, s>>>(args(i)); },
       true},
      {"pair_ahead 4, 3 blocks/SM", [&](int i, cudaStream_t s) {
         pair_kernel<4, 3><<<pair_grid(4, 4), 320, 0, s>>>(args(i));
       }, true},
      {"pair 4 tok/block, 3 blocks/SM", [&](int i, cudaStream_t s) {
         pair_kernel<1, 3><<<pair_grid(4, 1), 320, 0, s>>>(args(i));
       }, true},
  };
  const int launches = std::max(sets, 20 / sets * sets);
  for (int rep = 0; rep < 2; ++rep) {
    for (const Variant& v : vs) {
      const char* same = "-";
      if (v.compare && rep == 0) {
        reset0();
        v.launch(0, 0);
        CK(cudaDeviceSynchronize());
        std::vector<uint16_t> oq, ok;
        fetch0(oq, ok);
        same = oq == refq && ok == refk ? "yes" : "NO";
      }
      const double us = time_graph_us(v.launch, launches);
      std::printf("| %s | %.2f | %.3f | %s |\n", v.name, us, us / (mb / rate), same);
    }
  }
  return 0;
}
