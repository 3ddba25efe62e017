// CUDA backend of the rotary embeddings (rotary_embedding, apply_rotary_pos_emb, mrope, their inverse).
//
// Memory-bound: each (token, head) reads and writes its first rotary_dim dims once; the angles of a token are a
// few hundred bytes shared by all its heads. A thread owns P consecutive frequency pairs of one token ("lane" of
// the token's h / P lanes) and rotates them in one or more heads: it loads the two P-element vectors that hold its
// pairs (NeoX: x[j0..] and x[h + j0..]; GPT-J: x[2 j0..] and x[2 j0 + P..], but in the group kernel x[j0..] and
// x[h + j0..] as NeoX's, i.e. pairs j0 / 2.. and (h + j0) / 2..), its P cos / sin values from the cache row of the
// position, rotates in fp32 and stores. With 16-bit data P = 8 (16-byte accesses), with f32
// P = 4; a scalar variant (P = 1) serves views whose pointers or strides are not aligned to P elements.
// Three kernels, chosen on the host by the work per resident thread:
// - decode (rope_decode_kernel): while every (token, head, lane) gets its own thread in one wave of resident
//   threads (rope_decode_kernel_fits, ops/rope_impl.h): one head per thread, no loop. Every address that comes from
//   the parameters alone (the head's data, the positions, the lane's M-RoPE axes) is formed before the wait on the
//   previous kernel (with programmatic dependent launch that part overlaps it); after the wait the head's two
//   vectors and every position are loaded at once, so the only chain left is positions -> angles -> store.
//   Tiny problems (one decode token and the like, kTinyWork) take rope_decode_tiny_kernel instead, in blocks of
//   kTinyThreads: every parameter-derived value pinned in registers before the wait and the chain after it cut to
//   what the positions decide.
// - walk (rope_kernel): every larger case but heavy prefill, and every larger M-RoPE case. A thread reads its
//   position(s) and angles once and walks over heads slot, slot + slots, ... (2 to 8), issuing the first head's
//   loads before the position -> angle chain; from 4 heads walked per thread (16-bit data and cache, 1-D positions
//   or lane_row M-RoPE; rope_walk_ahead_size) it issues each next head's loads before rotating the current one
//   (AHEAD).
// - group (rope_group_kernel): 1-D positions, vector path, when the walk kernel would give every thread 8 heads
//   (more than 7 heads per resident thread): 4 consecutive heads of q or of k per thread, addressed from one base and
//   the head stride (no per-head address arithmetic between the loads), all 8 loads issued before the position -> angle
//   chain; in-place and out-of-place variants. Measured faster there (DeepSeek-V3 q_pe, Llama 16384 tokens, FlagOS
//   8192-token shapes) and slower everywhere else (docs/ops/rope-log.md, third session).
// M-RoPE: a lane's P pairs take their axes from one 32-bit word of the parameters (2 bits per pair), read once per
// thread before the wait; lanes whose pairs share an axis (chunked sections) read one row with vector loads, the
// others one value per pair from its own row, all issued at once. The decode and walk kernels come in three angle
// variants (Angles): rope (1-D positions), lane_row (M-RoPE whose every lane is on one axis: no per-pair code, 8
// fewer registers in the walk kernel) and pair_rows (the rest).
// Bad positions: the token is left unrotated (copied when out of place) and recorded in the device error record;
// no address derived from a bad position is formed.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/device_error.cuh"
#include "cuda/launch.h"
#include "cuda/vec.cuh"
#include "ops/rope_impl.h"

namespace fuseops::detail::cuda {
namespace {

constexpr int kThreads = 256;
/// Decode kernel of tiny problems: threads per block (or one head's lanes, when more), so that the few warps spread
/// over SMs and each issues its dependent chain without sharing a scheduler (measured: 1.12-1.14 us against
/// 1.16-1.21 in blocks of 256 at one M-RoPE token).
constexpr int64_t kTinyThreads = 64;
/// Tiny: at most this many (token, head, lane) threads (every one-token case of the benchmark sets, 72-320 threads,
/// where rope_decode_tiny_kernel was measured faster; DeepSeek-V3's one token, 516, and 64 tokens stay on
/// rope_decode_kernel).
constexpr int64_t kTinyWork = 512;
/// Group kernel: heads per thread (8 16-byte loads in flight), and the resident blocks of kThreads per SM asked
/// of the compiler (at most 80 registers per thread; 64 make it spill more; at 80, four of its 36 instantiations
/// spill 24 bytes: 16-bit data with an f32 cache, out of place).
constexpr int kGroupHeads = 4;
constexpr int kGroupMinBlocksPerSm = 3;
/// Group kernel: the groups of a tensor of `heads` heads.
__host__ __device__ constexpr int64_t group_count(int64_t heads) { return (heads + kGroupHeads - 1) / kGroupHeads; }

/// N elements of T in one access of N * sizeof(T) <= 16 bytes; plain (coherent) loads, since in place the same
/// addresses are written by this kernel.
template <typename T, int N>
struct Pack {
  using Raw = typename RawPack<N * sizeof(T)>::type;
  union {
    Raw raw;
    T e[N];
  } u;
  __device__ __forceinline__ void load(const T* p) { u.raw = *reinterpret_cast<const Raw*>(p); }
  /// One store instruction (store_global_whole: a plain store was split into four in the group kernel).
  __device__ __forceinline__ void store(T* p) const { store_global_whole(reinterpret_cast<Raw*>(p), u.raw); }
  /// The same as global accesses cached in L2 only, for pointers whose address space the compiler cannot see.
  __device__ __forceinline__ void load_global(const T* p) { u.raw = __ldcg(reinterpret_cast<const Raw*>(p)); }
  __device__ __forceinline__ void store_global(T* p) const { __stcg(reinterpret_cast<Raw*>(p), u.raw); }
  __device__ __forceinline__ float get(int i) const { return to_float(u.e[i]); }
  __device__ __forceinline__ void set(int i, float v) { u.e[i] = from_float<T>(v); }
};

/// Where token t's position on each axis is (not range-checked): an element of `positions`, or without positions
/// the value t mod seq_len (in 32 bits when both fit). Formed from the parameters alone; load() reads memory.
struct PositionSource {
  const void* at = nullptr;  ///< the element of axis 0 (int32_t or int64_t); null: no positions, `value` is it
  int64_t axis_stride = 0;   ///< elements between axes
  bool i32 = false;
  int64_t value = 0;
  /// Every axis, the branches on the position type outside the loads, so that they issue back to back.
  template <int AXES>
  __device__ __forceinline__ void load(int64_t (&pos)[AXES]) const {
    if (at == nullptr) {
#pragma unroll
      for (int ax = 0; ax < AXES; ++ax) pos[ax] = value;
      return;
    }
    __builtin_assume(__isGlobal(at));  // global loads, as for the data (not generic ones)
    if (i32) {
#pragma unroll
      for (int ax = 0; ax < AXES; ++ax) pos[ax] = static_cast<const int32_t*>(at)[ax * axis_stride];
    } else {
#pragma unroll
      for (int ax = 0; ax < AXES; ++ax) pos[ax] = static_cast<const int64_t*>(at)[ax * axis_stride];
    }
  }
};

__device__ __forceinline__ PositionSource position_source(const RopeArgs& a, int64_t t) {
  PositionSource src;
  if (a.positions == nullptr) {
    src.value = t <= INT32_MAX && a.seq_len <= INT32_MAX
                    ? static_cast<int64_t>(static_cast<uint32_t>(t) % static_cast<uint32_t>(a.seq_len))
                    : t % a.seq_len;
    return src;
  }
  src.i32 = a.pos_dtype == DType::i32;
  const int64_t i = t * a.pos_token_stride;
  src.at = src.i32 ? static_cast<const void*>(static_cast<const int32_t*>(a.positions) + i)
                   : static_cast<const void*>(static_cast<const int64_t*>(a.positions) + i);
  src.axis_stride = a.pos_axis_stride;
  return src;
}

/// Where a lane's angles come from, one kernel variant each (chosen on the host, angles_of):
/// - rope: one position per token, its cache row;
/// - lane_row: M-RoPE whose every lane has all its P pairs on one axis (chunked sections on lane boundaries, and
///   always with P = 1): the three positions are loaded and checked, each lane reads the one row its axis names
///   with vector loads (no per-pair path, so the registers of the rope variant plus the positions);
/// - pair_rows: M-RoPE with lanes whose pairs name different rows (interleaved, GLM, a chunked boundary inside a
///   lane): such a lane reads each pair from its own row, cos at the row's pair j and sin h elements further (one
///   cos_sin_cache: mrope's only form, checked on the host).
/// - rope_halves: 1-D positions for the group kernel's GPT-J lane, which holds x[j0..] and x[h + j0..] as NeoX's
///   does (so that a warp's loads and stores cover whole sectors): its pairs are j0 / 2 .. and (h + j0) / 2 .., two
///   half-width loads from the row.
enum class Angles { rope, lane_row, pair_rows, rope_halves };
template <Angles A>
constexpr int kAxes = A == Angles::rope || A == Angles::rope_halves ? 1 : 3;

/// The M-RoPE axes of a lane's P pairs j0 .. j0 + P - 1 (P in {1, 4, 8}: they lie in one word of axis_code): pair
/// j0 + i at bits [2 i, 2 i + 2) of `code`. Read once per thread, before the position -> angle chain.
template <int P, Angles A>
struct LaneAxes {
  uint32_t code = 0;
  bool uniform = true;  ///< every pair on one axis: vector loads of one row
};

template <int P, Angles A>
__device__ __forceinline__ LaneAxes<P, A> lane_axes(const RopeArgs& a, int j0) {
  static_assert(P == 1 || P == 4 || P == 8, "a lane's pairs must lie in one 16-pair code word");
  LaneAxes<P, A> l;
  if constexpr (kAxes<A> == 3) {
    constexpr uint32_t kMask = (1u << (2 * P)) - 1u;
    l.code = (a.axis_code[j0 / 16] >> (2 * (j0 % 16))) & kMask;
    if constexpr (A == Angles::pair_rows) l.uniform = l.code == (l.code & 3u) * (0x55555555u & kMask);
  }
  return l;
}

/// P cache values of type C kept in their storage type (half the registers of floats for a 16-bit cache), in
/// pieces of at most 16 bytes; widened to float at each use (exactly).
template <typename C, int P>
struct CacheValues {
  static constexpr int W = P * sizeof(C) > 16 ? static_cast<int>(16 / sizeof(C)) : P;
  StorageVec<C, W> piece[P / W];
  /// P consecutive values at p (aligned to the piece), read-only loads.
  __device__ __forceinline__ void load(const C* p) {
#pragma unroll
    for (int k = 0; k < P / W; ++k) piece[k].load(p + k * W);
  }
  /// P / 2 consecutive values at p0, then P / 2 at p1 (each aligned to its P / 2 values), read-only loads.
  __device__ __forceinline__ void load_halves(const C* p0, const C* p1) {
    if constexpr (W == P) {  // one piece of 8 or 16 bytes, assembled from two loads of half its words
      StorageVec<C, P / 2> lo, hi;
      lo.load(p0);
      hi.load(p1);
      if constexpr (P * sizeof(C) == 16) piece[0].u.raw = make_uint4(lo.u.raw.x, lo.u.raw.y, hi.u.raw.x, hi.u.raw.y);
      else piece[0].u.raw = make_uint2(lo.u.raw, hi.u.raw);
    } else {  // whole pieces
#pragma unroll
      for (int k = 0; k < P / W / 2; ++k) {
        piece[k].load(p0 + k * W);
        piece[P / W / 2 + k].load(p1 + k * W);
      }
    }
  }
  __device__ __forceinline__ void load_one(int i, const C* p) { piece[i / W].u.elems[i % W] = __ldg(p); }
  __device__ __forceinline__ float get(int i) const { return piece[i / W].get(i % W); }
  __device__ __forceinline__ void negate() {
#pragma unroll
    for (int i = 0; i < P; ++i) piece[i / W].u.elems[i % W] = from_float<C>(-get(i));
  }
};

/// cos / sin of pairs j0 .. j0 + P - 1 for the token's valid positions.
template <typename C, int P, Angles A>
__device__ __forceinline__ void gather_angles(const RopeArgs& a, const int64_t (&pos)[kAxes<A>],
                                              const LaneAxes<P, A>& lane, int64_t j0, CacheValues<C, P>& c,
                                              CacheValues<C, P>& s) {
  const C* cos = static_cast<const C*>(a.cos) + j0;
  const C* sin = static_cast<const C*>(a.sin) + j0;
  if constexpr (A == Angles::rope) {
    c.load(cos + pos[0] * a.cos_stride);
    s.load(sin + pos[0] * a.sin_stride);
  } else if constexpr (A == Angles::rope_halves) {
    const C* cos_row = static_cast<const C*>(a.cos) + pos[0] * a.cos_stride;
    const C* sin_row = static_cast<const C*>(a.sin) + pos[0] * a.sin_stride;
    const int64_t j1 = (a.rotary_dim / 2 + j0) / 2;  // the second half's first pair
    c.load_halves(cos_row + j0 / 2, cos_row + j1);
    s.load_halves(sin_row + j0 / 2, sin_row + j1);
  } else {
    auto row = [&](uint32_t axis) { return axis == 0 ? pos[0] : axis == 1 ? pos[1] : pos[2]; };
    if (A == Angles::lane_row || lane.uniform) {  // one row for the whole lane: vector loads
      const int64_t p = row(lane.code & 3u);
      c.load(cos + p * a.cos_stride);
      s.load(sin + p * a.sin_stride);
    } else {  // each pair its own row; the codes are in a register, so every load is issued before any is used
      const int64_t h = a.rotary_dim / 2;  // sin = cos + h in every row
      const C* rc[3] = {cos + pos[0] * a.cos_stride, cos + pos[1] * a.cos_stride, cos + pos[2] * a.cos_stride};
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const uint32_t ax = (lane.code >> (2 * i)) & 3u;
        const C* q = (ax == 0 ? rc[0] : ax == 1 ? rc[1] : rc[2]) + i;
        c.load_one(i, q);
        s.load_one(i, q + h);
      }
    }
  }
}

/// Range check of token t's positions (the recorder thread records the first bad axis) and, when they are valid,
/// the lane's angles, with sin negated for the inverse. Returns whether the token is rotated.
template <typename C, int P, Angles A>
__device__ __forceinline__ bool token_angles(const RopeArgs& a, const int64_t (&pos)[kAxes<A>], int64_t t,
                                             bool recorder, const LaneAxes<P, A>& lane, int64_t j0,
                                             DeviceErrorRecord* rec, CacheValues<C, P>& c, CacheValues<C, P>& s) {
  constexpr int AXES = kAxes<A>;
  bool valid = true;
#pragma unroll
  for (int ax = 0; ax < AXES; ++ax) valid &= (pos[ax] >= 0) & (pos[ax] < a.max_position);  // no short circuit
  if (!valid) {  // one branch on the common path; the first bad axis is found only here
    if (recorder) {
      int bad = AXES - 1;
#pragma unroll
      for (int ax = AXES - 2; ax >= 0; --ax)
        if (pos[ax] < 0 || pos[ax] >= a.max_position) bad = ax;
      record_device_error(rec, a.error_site, bad * a.tokens + t);
    }
    return false;
  }
  gather_angles<C, P, A>(a, pos, lane, j0, c, s);
  if (a.inverse) s.negate();
  return true;
}

template <typename T, int P>
__device__ __forceinline__ void rotate_pair(Pack<T, P>& x, int i0, Pack<T, P>& y, int i1, float c, float s) {
  const float a = x.get(i0), b = y.get(i1);
  x.set(i0, a * c - b * s);
  y.set(i1, b * c + a * s);
}

/// Rotates the lane's P pairs of one head held in x and y (see the file comment for which elements they hold).
template <typename T, int P, bool NEOX, typename C>
__device__ __forceinline__ void rotate_head(Pack<T, P>& x, Pack<T, P>& y, const CacheValues<C, P>& c,
                                            const CacheValues<C, P>& s) {
  if constexpr (NEOX || P == 1) {
#pragma unroll
    for (int i = 0; i < P; ++i) rotate_pair(x, i, y, i, c.get(i), s.get(i));
  } else {
#pragma unroll
    for (int m = 0; m < P / 2; ++m) {
      rotate_pair(x, 2 * m, x, 2 * m + 1, c.get(m), s.get(m));
      rotate_pair(y, 2 * m, y, 2 * m + 1, c.get(P / 2 + m), s.get(P / 2 + m));
    }
  }
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

/// Rotates a head's vectors x, y (read from `in`) when the token is valid and stores them at `out`; a token left
/// unrotated is untouched in place and copied out of place.
template <typename T, int P, bool NEOX, typename C>
__device__ __forceinline__ void finish_head(Pack<T, P>& x, Pack<T, P>& y, const T* in, T* out, int64_t offA,
                                            int64_t offB, bool valid, const CacheValues<C, P>& c,
                                            const CacheValues<C, P>& s) {
  if (valid) rotate_head<T, P, NEOX>(x, y, c, s);
  else if (in == out) return;
  x.store(out + offA);
  y.store(out + offB);
}

/// A decode kernel's thread (lane x, head y, token z of the block): its first pair j0, the offsets of its two
/// vectors in a head, its token and head, and the head's input / output rows (null when the thread has no (token,
/// head)). Shared by rope_decode_kernel and rope_decode_tiny_kernel.
template <typename T, int P, bool NEOX>
struct DecodeThread {
  int j0;
  int64_t offA, offB, t, hd;
  bool active;
  const T* in = nullptr;
  T* out = nullptr;
  __device__ __forceinline__ explicit DecodeThread(const RopeArgs& a)
      : j0(static_cast<int>(threadIdx.x) * P),
        offA(NEOX ? j0 : 2 * j0),
        offB(NEOX ? a.rotary_dim / 2 + j0 : 2 * j0 + P),
        t(static_cast<int64_t>(blockIdx.x) * blockDim.z + threadIdx.z),
        hd(static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y),
        active(t < a.tokens && hd < a.q.heads + a.k.heads) {
    if (active) locate(a, hd, t, in, out);
  }
};

/// Decode kernel: thread (lane x, head y, token z) of the block rotates head y of token z; the grid covers every
/// (token, head) once (no loop). Parameter-only work before the wait (see the file comment).
template <typename T, typename C, int P, bool NEOX, Angles A>
__global__ void __launch_bounds__(kThreads)
    rope_decode_kernel(const __grid_constant__ RopeArgs a, DeviceErrorRecord* rec) {
  const DecodeThread<T, P, NEOX> d(a);
  const PositionSource src = position_source(a, d.t);
  const LaneAxes<P, A> lane = lane_axes<P, A>(a, d.j0);
  pdl_wait_and_release();
  if (!d.active) return;
  // Every load that needs no position, all at once: the head's two vectors and the position(s).
  Pack<T, P> x, y;
  x.load(d.in + d.offA);
  y.load(d.in + d.offB);
  int64_t pos[kAxes<A>];
  src.load(pos);
  CacheValues<C, P> c, s;
  const bool valid = token_angles<C, P, A>(a, pos, d.t, threadIdx.x == 0 && d.hd == 0, lane, d.j0, rec, c, s);
  finish_head<T, P, NEOX>(x, y, d.in, d.out, d.offA, d.offB, valid, c, s);
}

/// Keeps a value formed from the parameters in a register from this point on: an empty asm statement that the
/// compiler cannot move across the PDL wait (another asm volatile), so the value is neither recomputed nor read
/// from the parameters again after the wait.
__device__ __forceinline__ void pin(uint64_t& v) { asm volatile("" : "+l"(v)); }
__device__ __forceinline__ void pin(uint32_t& v) { asm volatile("" : "+r"(v)); }
template <typename V>
__device__ __forceinline__ void pin_ptr(V*& p) {
  uint64_t u = reinterpret_cast<uint64_t>(p);
  pin(u);
  p = reinterpret_cast<V*>(u);
}

/// The decode kernel's position pointers, one per axis, formed before the wait. M-RoPE: the lane's own axis (its
/// first pair's) comes first, so a lane whose pairs share an axis takes its row from pos[0] with no select.
template <int AXES>
struct DecodePositions {
  const char* at[AXES] = {};  ///< null: no positions (`value` is the position on every axis)
  uint32_t i32 = 0;
  uint64_t value = 0;
  __device__ __forceinline__ void load(int64_t (&pos)[AXES]) const {
    if (at[0] == nullptr) {
#pragma unroll
      for (int k = 0; k < AXES; ++k) pos[k] = static_cast<int64_t>(value);
    } else if (i32) {
#pragma unroll
      for (int k = 0; k < AXES; ++k) pos[k] = __ldcg(reinterpret_cast<const int32_t*>(at[k]));
    } else {
#pragma unroll
      for (int k = 0; k < AXES; ++k) pos[k] = __ldcg(reinterpret_cast<const long long*>(at[k]));
    }
  }
};

/// 32-bit word w of a lane's P cache values (pieces of at most 16 bytes).
template <typename C, int P>
__device__ __forceinline__ uint32_t& cache_word(CacheValues<C, P>& v, int w) {
  constexpr int kWordsPerPiece = CacheValues<C, P>::W * static_cast<int>(sizeof(C)) / 4;
  return reinterpret_cast<uint32_t*>(&v.piece[w / kWordsPerPiece].u)[w % kWordsPerPiece];
}

/// Axis bits of the N pairs j .. j + N - 1 (in one word of axis_code; N <= 8) from uniform parameter reads: every
/// word is read at a fixed offset and the thread's word selected in registers (a parameter read at a per-thread
/// index is serialised over a warp's distinct addresses; measured 0.04 us faster at one Qwen2.5-VL token).
template <int N>
__device__ __forceinline__ uint32_t axis_bits(const RopeArgs& a, int j) {
  static_assert(N <= 8, "at most 8 pairs (16 bits)");
  const int word = j / 16;
  uint32_t w = a.axis_code[0];
#pragma unroll
  for (int i = 1; i < kRopeMaxPairs / 16; ++i) w = word == i ? a.axis_code[i] : w;
  return (w >> (2 * (j % 16))) & ((1u << (2 * N)) - 1u);
}

/// Keeps the arithmetic behind `v` in front of the PDL wait. The empty-asm pins bind the front end only: ptxas sinks
/// pure arithmetic below griddepcontrol.wait (in the sm_90a SASS, ~100 instructions of M-RoPE mask arithmetic between
/// the wait and the position loads). An exit predicated on `v` is control flow, which ptxas keeps in front of the
/// wait, and with it everything `v` is computed from. Never taken for the values passed (xors of masks made of whole
/// 16- or 32-bit fields of ones or zeros, never 0x5a5a5a5a). (A predicated trap anchors as well but made ptxas spill
/// in one instantiation.)
__device__ __forceinline__ void anchor_before_wait(uint32_t v) {
  asm volatile("{\n\t.reg .pred p;\n\tsetp.eq.u32 p, %0, 0x5a5a5a5a;\n\t@p exit;\n\t}" ::"r"(v));
}

/// Decode kernel of tiny problems (at most kTinyWork threads: one decode token and the like), in blocks of
/// kTinyThreads: thread (lane x, head y, token z) rotates head y of token z, as rope_decode_kernel. M-RoPE: it first
/// lets the next kernel in the stream start launching (pdl_release), so that the next launch forms its addresses
/// while this one runs and only the chain after the wait remains between two launches (1-D positions: measured level
/// or 0.01-0.02 us slower so, hence released after the wait as in every kernel). Everything that comes from the
/// parameters alone is formed and pinned in registers before the wait; after it: the head's two vectors and the
/// positions (all loads at once, L2 only), one unsigned compare per axis, the row address (one 64-bit multiply-add),
/// the cache loads, the rotation and the stores. M-RoPE: the lane's axis bits come from uniform parameter reads,
/// its own axis (its first pair's) is loaded first, so a lane whose pairs share an axis takes its row from pos[0];
/// in the pair_rows variant every lane loads its vectors of all three rows and merges them with per-word masks formed
/// before the wait (zero for a lane on one axis), instead of one scalar load per pair; with GPT-J pairs the masks are
/// anchored there (anchor_before_wait; with NeoX pairs measured slower so). The inverse flips sin's sign bits (one xor
/// per word). Measured on the H200 only for tiny problems (docs/ops/rope-log.md, sixth, ninth and tenth
/// sessions).
template <typename T, typename C, int P, bool NEOX, Angles A>
__global__ void __launch_bounds__(kThreads)
    rope_decode_tiny_kernel(const __grid_constant__ RopeArgs a, DeviceErrorRecord* rec) {
  constexpr bool kReleaseFirst = A != Angles::rope;
  if constexpr (kReleaseFirst) pdl_release();
  constexpr int AXES = kAxes<A>;
  constexpr int kWords = P * static_cast<int>(sizeof(C)) / 4;  // of the lane's cos (0: one 16-bit value)
  // M-RoPE with lanes on several axes: the angles of three rows, merged by masks formed before the wait.
  constexpr bool kMerge = A == Angles::pair_rows && P * sizeof(C) >= 4;
  const DecodeThread<T, P, NEOX> d(a);
  const int j0 = d.j0;
  const int64_t t = d.t, hd = d.hd;
  const bool active = d.active;
  const T* inA = d.in + d.offA;
  const T* inB = d.in + d.offB;
  T* outA = d.out + d.offA;
  T* outB = d.out + d.offB;
  // Positions, the lane's own axis first.
  const uint32_t code = A == Angles::rope ? 0u : axis_bits<P>(a, j0);
  const uint32_t ax0 = code & 3u;
  DecodePositions<AXES> dp;
  {
    const PositionSource src = position_source(a, t);
    dp.i32 = src.i32;
    dp.value = static_cast<uint64_t>(src.value);
    if (src.at != nullptr) {
      const int64_t axis_bytes = src.axis_stride * (src.i32 ? 4 : 8);
#pragma unroll
      for (int k = 0; k < AXES; ++k) {
        const uint32_t ax = (ax0 + k) % 3u;
        dp.at[k] = static_cast<const char*>(src.at) + static_cast<int64_t>(ax) * axis_bytes;
      }
    }
  }
  // The angles: the lane's first cos / sin value in row 0, the row strides in bytes, the valid rows.
  const char* cos0 = static_cast<const char*>(a.cos) + static_cast<int64_t>(j0) * sizeof(C);
  const char* sin0 = static_cast<const char*>(a.sin) + static_cast<int64_t>(j0) * sizeof(C);
  uint64_t cos_row = static_cast<uint64_t>(a.cos_stride) * sizeof(C);
  uint64_t sin_row = static_cast<uint64_t>(a.sin_stride) * sizeof(C);
  uint64_t max_pos = static_cast<uint64_t>(a.max_position);
  uint32_t sign = a.inverse ? (sizeof(C) == 2 ? 0x80008000u : 0x80000000u) : 0u;
  // Per 32-bit word of the lane's cos / sin: the elements on the lane's second and third axes (rows pos[1], pos[2]).
  constexpr int kMaskWords = kMerge ? kWords : 1;
  uint32_t m1[kMaskWords] = {}, m2[kMaskWords] = {};
  if constexpr (kMerge) {
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
#pragma unroll
      for (int e = 0; e < 4 / static_cast<int>(sizeof(C)); ++e) {
        const int i = w * (4 / static_cast<int>(sizeof(C))) + e;
        const uint32_t r = ((code >> (2 * i)) & 3u) + 3u - ax0;  // 1 .. 5: the axis relative to ax0, plus 3
        const uint32_t field = sizeof(C) == 2 ? 0xffffu << (16 * e) : 0xffffffffu;
        m1[w] |= r == 1u || r == 4u ? field : 0u;
        m2[w] |= r == 2u || r == 5u ? field : 0u;
      }
      pin(m1[w]), pin(m2[w]);
    }
    if constexpr (!NEOX) {  // measured: GPT-J 1.05 -> 0.99 us at one GLM-4.1V token, NeoX 0.98 -> 1.07 (Qwen3-VL)
      uint32_t all = 0;
#pragma unroll
      for (int w = 0; w < kWords; ++w) all ^= m1[w] ^ m2[w];
      anchor_before_wait(all);
    }
  }
  pin_ptr(inA), pin_ptr(inB), pin_ptr(outA), pin_ptr(outB), pin_ptr(cos0), pin_ptr(sin0);
#pragma unroll
  for (int k = 0; k < AXES; ++k) pin_ptr(dp.at[k]);
  pin(dp.i32), pin(dp.value), pin(cos_row), pin(sin_row), pin(max_pos), pin(sign);
  if constexpr (kReleaseFirst) pdl_wait();
  else pdl_wait_and_release();
  if (!active) return;
  Pack<T, P> x, y;
  x.load_global(inA);
  y.load_global(inB);
  int64_t pos[AXES];
  dp.load(pos);
  bool valid = true;
#pragma unroll
  for (int k = 0; k < AXES; ++k) valid &= static_cast<uint64_t>(pos[k]) < max_pos;
  if (!valid) {
    if (threadIdx.x == 0 && hd == 0) {  // the first bad axis in axis order (pos[k] is axis (ax0 + k) % 3)
      uint32_t bad = 2;
#pragma unroll
      for (int k = 0; k < AXES; ++k)
        if (static_cast<uint64_t>(pos[k]) >= max_pos) bad = min(bad, (ax0 + k) % 3u);
      record_device_error(rec, a.error_site, static_cast<int64_t>(AXES == 1 ? 0u : bad) * a.tokens + t);
    }
    if (inA != outA) {
      x.store_global(outA);
      y.store_global(outB);
    }
    return;
  }
  CacheValues<C, P> c, s;
  c.load(reinterpret_cast<const C*>(cos0 + static_cast<uint64_t>(pos[0]) * cos_row));
  s.load(reinterpret_cast<const C*>(sin0 + static_cast<uint64_t>(pos[0]) * sin_row));
  if constexpr (kMerge) {  // the other two rows (a lane on one axis has zero masks), merged word by word
    CacheValues<C, P> c1, s1, c2, s2;
    c1.load(reinterpret_cast<const C*>(cos0 + static_cast<uint64_t>(pos[1]) * cos_row));
    s1.load(reinterpret_cast<const C*>(sin0 + static_cast<uint64_t>(pos[1]) * sin_row));
    c2.load(reinterpret_cast<const C*>(cos0 + static_cast<uint64_t>(pos[2]) * cos_row));
    s2.load(reinterpret_cast<const C*>(sin0 + static_cast<uint64_t>(pos[2]) * sin_row));
#pragma unroll
    for (int w = 0; w < kWords; ++w) {
      const uint32_t m0 = ~(m1[w] | m2[w]);
      cache_word(c, w) = (cache_word(c, w) & m0) | (cache_word(c1, w) & m1[w]) | (cache_word(c2, w) & m2[w]);
      cache_word(s, w) = (cache_word(s, w) & m0) | (cache_word(s1, w) & m1[w]) | (cache_word(s2, w) & m2[w]);
    }
  }
  if constexpr (P * sizeof(C) >= 4) {
#pragma unroll
    for (int w = 0; w < kWords; ++w) cache_word(s, w) ^= sign;
  } else {  // one 16-bit value
    s.piece[0].u.raw ^= static_cast<uint16_t>(sign);
  }
  rotate_head<T, P, NEOX>(x, y, c, s);
  x.store_global(outA);
  y.store_global(outB);
}

/// Walk kernel: threads per block at most, and resident blocks per SM asked of the compiler, per angle variant and
/// cache element size, for the most resident threads without spilling (ptxas, sm_90a): rope and lane_row with a
/// 16-bit cache 256 x 5 (at most 48 registers: 1280 threads per SM; lane_row takes 50 unbounded, i.e. 1024);
/// pair_rows with a 16-bit cache 128 x 9 (at most 56: 1152 threads; it spills 16-32 bytes at 48, and 256-thread
/// blocks of 56 registers would fit only 4, 1024 threads); the others 256 x 4 (at most 64; they spill at 48 / 56;
/// without a bound ptxas gives pair_rows 90-94).
constexpr int walk_block_threads(Angles A, int cache_bytes) {
  return A == Angles::pair_rows && cache_bytes == 2 ? 128 : kThreads;
}
constexpr int walk_min_blocks(Angles A, int cache_bytes) {
  return cache_bytes == 2 ? (A == Angles::pair_rows ? 9 : 5) : A == Angles::rope ? 5 : 4;
}
/// The walk kernel that loads one head ahead (AHEAD): 256 x 4 (at most 64 registers, 58-64 used: 1024 threads per
/// SM; at 48 it spills 16-28 bytes).
constexpr int kWalkAheadMinBlocks = 4;

/// Walk kernel: thread (lane x, head slot y, token z) of the block; heads slot, slot + slots, ... of the token.
/// AHEAD (16-bit data and cache, P = 8, rope and lane_row angles; chosen by rope_walk_ahead_size): each head's
/// rotation waits behind the next head's loads, so two heads' vectors are in flight per thread instead of one (at
/// fewer resident threads: kWalkAheadMinBlocks).
template <typename T, typename C, int P, bool NEOX, Angles A, bool AHEAD = false>
__global__ void __launch_bounds__(walk_block_threads(A, sizeof(C)),
                                  AHEAD ? kWalkAheadMinBlocks : walk_min_blocks(A, sizeof(C)))
    rope_kernel(const __grid_constant__ RopeArgs a, DeviceErrorRecord* rec) {
  static_assert(!AHEAD || (sizeof(T) == 2 && sizeof(C) == 2 && P == 8 && A != Angles::pair_rows),
                "the walk kernel loads ahead only where it was measured: 16-bit data and cache, 1-D or lane_row");
  const LaneAxes<P, A> lane = lane_axes<P, A>(a, static_cast<int>(threadIdx.x) * P);
  pdl_wait_and_release();
  const int64_t h = a.rotary_dim / 2;
  const int64_t j0 = static_cast<int64_t>(threadIdx.x) * P;  // first pair of this lane
  const int64_t offA = NEOX ? j0 : 2 * j0;
  const int64_t offB = NEOX ? h + j0 : 2 * j0 + P;
  const int64_t total_heads = a.q.heads + a.k.heads;
  const int64_t slot = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t slots = static_cast<int64_t>(gridDim.y) * blockDim.y;
  const bool recorder = threadIdx.x == 0 && slot == 0;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.z + threadIdx.z; t < a.tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.z) {
    // The first head's data does not depend on the position: issue its loads before the position -> angle chain.
    Pack<T, P> x, y;
    const T* in = nullptr;
    T* out = nullptr;
    if (slot < total_heads) {
      locate(a, slot, t, in, out);
      x.load(in + offA);
      y.load(in + offB);
    }
    // All the positions before any check: a recording atomic between them would keep M-RoPE's three loads in order.
    int64_t pos[kAxes<A>];
    position_source(a, t).load(pos);
    CacheValues<C, P> c, s;
    const bool valid = token_angles<C, P, A>(a, pos, t, recorder, lane, j0, rec, c, s);
    for (int64_t hd = slot; hd < total_heads; hd += slots) {
      if constexpr (AHEAD) {
        Pack<T, P> next_x, next_y;
        const T* next_in = nullptr;
        T* next_out = nullptr;
        if (hd + slots < total_heads) {
          locate(a, hd + slots, t, next_in, next_out);
          next_x.load(next_in + offA);
          next_y.load(next_in + offB);
        }
        finish_head<T, P, NEOX>(x, y, in, out, offA, offB, valid, c, s);
        x = next_x, y = next_y, in = next_in, out = next_out;
      } else {
        if (hd != slot) {
          locate(a, hd, t, in, out);
          x.load(in + offA);
          y.load(in + offB);
        }
        finish_head<T, P, NEOX>(x, y, in, out, offA, offB, valid, c, s);
      }
    }
  }
}

/// Group kernel (1-D positions, P = 16 bytes of T): thread (lane x, group y, token z) of the block. A group is
/// kGroupHeads consecutive heads of q, or of k (fewer in a tensor's last group; groups 0 .. q_groups - 1 are q's): one
/// base address and the head stride reach all of its heads, so that the thread's loads issue back to back. T: q / k
/// storage type, C: cache storage type; INPLACE: the outputs are the inputs (pointers and strides).
template <typename T, typename C, bool NEOX, bool INPLACE>
__global__ void __launch_bounds__(kThreads, kGroupMinBlocksPerSm)
    rope_group_kernel(const __grid_constant__ RopeArgs a, DeviceErrorRecord* rec) {
  constexpr int P = static_cast<int>(16 / sizeof(T));
  pdl_wait_and_release();
  const int64_t h = a.rotary_dim / 2;
  const int64_t j0 = static_cast<int64_t>(threadIdx.x) * P;  // the lane's first element (NeoX: its first pair)
  // Both pairings: x[j0..] and x[h + j0..], so that each load and store instruction of a warp covers whole 32-byte
  // sectors (GPT-J's x[2 j0..] and x[2 j0 + P..] had each cover half of twice as many: FlagOS (4, 2048, 32, 128)
  // GPT-J took 79.97 us against NeoX's 68.27, now 68.22; docs/ops/rope-log.md, thirty-first session).
  const int64_t offA = j0;
  const int64_t offB = h + j0;
  constexpr Angles kAngles = NEOX ? Angles::rope : Angles::rope_halves;
  const int64_t q_groups = group_count(a.q.heads);
  const int64_t groups = q_groups + group_count(a.k.heads);
  const int64_t group0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t group_step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.z + threadIdx.z; t < a.tokens;
       t += static_cast<int64_t>(gridDim.x) * blockDim.z) {
    for (int64_t g = group0; g < groups; g += group_step) {
      // 1. The position: the head of the only dependent chain (position -> cache row).
      int64_t pos[1];
      position_source(a, t).load(pos);
      // 2. Every head's data, independent of the position, before anything waits for it.
      const bool is_q = g < q_groups;
      const int64_t first = (is_q ? g : g - q_groups) * kGroupHeads;
      const int n = static_cast<int>(min(static_cast<int64_t>(kGroupHeads), (is_q ? a.q.heads : a.k.heads) - first));
      const int64_t step = is_q ? a.q.head_stride : a.k.head_stride;
      const T* in = static_cast<const T*>(is_q ? a.q.data : a.k.data) +
                    (t * (is_q ? a.q.token_stride : a.k.token_stride) + first * step + offA);
      Pack<T, P> x[kGroupHeads], y[kGroupHeads];
#pragma unroll
      for (int k = 0; k < kGroupHeads; ++k) {
        if (k < n) {
          x[k].load(in + k * step);
          y[k].load(in + k * step + (offB - offA));
        }
      }
      // 3. Range check (the first group's lane 0 records a bad position) and the angles, once for all the heads.
      CacheValues<C, P> c, s;
      const bool valid = token_angles<C, P, kAngles>(a, pos, t, g == 0 && threadIdx.x == 0, LaneAxes<P, kAngles>{}, j0,
                                                     rec, c, s);
      if (INPLACE && !valid) continue;  // left untouched
      // 4. Rotate and store (out of place, an unrotated token copied).
      int64_t out_step = step;
      T* out = const_cast<T*>(in);
      if constexpr (!INPLACE) {
        out_step = is_q ? a.q.out_head_stride : a.k.out_head_stride;
        out = static_cast<T*>(is_q ? a.q.out : a.k.out) +
              (t * (is_q ? a.q.out_token_stride : a.k.out_token_stride) + first * out_step + offA);
      }
#pragma unroll
      for (int k = 0; k < kGroupHeads; ++k) {
        if (k < n) {
          if (valid) rotate_head<T, P, NEOX>(x[k], y[k], c, s);
          x[k].store(out + k * out_step);
          y[k].store(out + k * out_step + (offB - offA));
        }
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
};

/// The decode kernel serves every problem whose (token, head, lane) work fits in the resident threads
/// (rope_decode_kernel_fits), unless FUSEOPS_ROPE_DECODE=0 (then the walk kernel, one head per thread).
bool use_decode_kernel(const RopeArgs& a, int p, int sms) {
  static const bool enabled = !env_switched_off("FUSEOPS_ROPE_DECODE");
  return enabled && rope_decode_kernel_fits(a.tokens, a.q.heads + a.k.heads, a.rotary_dim / 2 / p, sms);
}

/// The group kernel serves 1-D positions on the vector path when the walk kernel would walk 8 heads per thread
/// (rope_group_kernel_size).
bool use_group_kernel(const RopeArgs& a, int p, int sms) {
  return a.num_axes == 1 && p == static_cast<int>(16 / dtype_size(a.dtype)) &&
         rope_group_kernel_size(a.tokens, a.q.heads + a.k.heads, a.rotary_dim / 2 / p, sms);
}

/// Block (lanes, head slots or groups, tokens) of at most max_threads (>= the lanes) and grid for `units` slots or
/// groups per token; at least `blocks_per_sm` blocks per SM where the tokens allow.
Plan make_plan(const RopeArgs& a, int p, int sms, int64_t units, int64_t blocks_per_sm, int64_t max_threads) {
  const int64_t lanes = a.rotary_dim / 2 / p;  // <= kRopeMaxPairs = kThreads
  const int64_t max_units = std::max<int64_t>(1, max_threads / lanes);
  const int64_t gy = std::min<int64_t>((units + max_units - 1) / max_units, 65535);
  const int64_t units_per_block = std::min<int64_t>((units + gy - 1) / gy, max_units);
  int64_t tb = std::max<int64_t>(1, max_threads / (lanes * units_per_block));
  const int64_t spread = blocks_per_sm * sms;
  tb = std::min<int64_t>({tb, 64, std::max<int64_t>(1, (a.tokens + spread - 1) / spread)});
  const int64_t gx = std::min<int64_t>((a.tokens + tb - 1) / tb, int64_t{1} << 30);
  Plan pl;
  pl.block = dim3(static_cast<unsigned>(lanes), static_cast<unsigned>(units_per_block), static_cast<unsigned>(tb));
  pl.grid = dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy));
  return pl;
}

/// Walk kernel: heads per thread = the work over the resident threads, clamped to [1, 8] (rope_walk_heads; decode
/// one per thread); blocks of at most max_threads.
Plan walk_plan(const RopeArgs& a, int p, int sms, int64_t max_threads) {
  const int64_t heads = a.q.heads + a.k.heads;
  const int64_t hpt = rope_walk_heads(a.tokens, heads, a.rotary_dim / 2 / p, sms);
  return make_plan(a, p, sms, (heads + hpt - 1) / hpt, 2, max_threads);
}

Plan group_plan(const RopeArgs& a, int p, int sms) {
  return make_plan(a, p, sms, group_count(a.q.heads) + group_count(a.k.heads), 8, kThreads);
}

/// The angle variant of a problem at p pairs per thread: rope for 1-D positions; lane_row for M-RoPE whose every
/// lane has its p pairs on one axis; else pair_rows (then p >= 4: at most 64 lanes; and one cos_sin_cache, sin
/// h elements after cos in each row, as mrope builds it).
Angles angles_of(const RopeArgs& a, int p) {
  if (a.num_axes != 3) return Angles::rope;
  const int64_t h = a.rotary_dim / 2;
  for (int64_t j = 0; j < h; ++j) {
    if (a.axis_of(j) != a.axis_of(j - j % p)) {
      const bool one_cache = a.sin_stride == a.cos_stride &&
                             a.sin == static_cast<const char*>(a.cos) + h * static_cast<int64_t>(dtype_size(a.cache_dtype));
      if (!one_cache || h / p > kThreads / 2) {  // unreachable through mrope; a guard for other callers
        throw Error(ErrorKind::unsupported, "rope: M-RoPE lanes on several axes need one cos_sin_cache and P >= 4");
      }
      return Angles::pair_rows;
    }
  }
  return Angles::lane_row;
}

/// Launches kernel_for(std::bool_constant<NEOX>, std::integral_constant<Angles, A>) (an instantiation of the
/// decode or walk kernel) for the problem's pairing and angle variant `angles` on plan `pl`.
template <typename KernelFor>
void launch_variant(const RopeArgs& a, Angles angles, const Plan& pl, KernelFor kernel_for, DeviceErrorRecord* rec,
                    cudaStream_t stream, int device) {
  auto go = [&](auto variant) {
    auto kernel = a.is_neox ? kernel_for(std::true_type{}, variant) : kernel_for(std::false_type{}, variant);
    launch_kernel(kernel, pl.grid, pl.block, 0, stream, device, a, rec);
  };
  switch (angles) {
    case Angles::rope: go(std::integral_constant<Angles, Angles::rope>{}); break;
    case Angles::lane_row: go(std::integral_constant<Angles, Angles::lane_row>{}); break;
    case Angles::pair_rows: go(std::integral_constant<Angles, Angles::pair_rows>{}); break;
    case Angles::rope_halves:  // the group kernel's alone; angles_of never picks it
      throw Error(ErrorKind::unsupported, "rope: the rope_halves angles have no decode or walk kernel");
  }
}

template <typename T, int P>
void launch_decode(const RopeArgs& a, int sms, DeviceErrorRecord* rec, cudaStream_t stream, int device) {
  // One head per thread: the grid covers every (token, head), as rope_decode_kernel_fits keeps it within
  // the limits of make_plan's grid.
  const bool tiny = a.tokens * (a.q.heads + a.k.heads) * (a.rotary_dim / 2 / P) <= kTinyWork;
  const Plan pl = make_plan(a, P, sms, a.q.heads + a.k.heads, 2, tiny ? kTinyThreads : kThreads);
  with_float_type(a.cache_dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    if (tiny) {
      launch_variant(
          a, angles_of(a, P), pl,
          [](auto neox, auto angles) {
            return rope_decode_tiny_kernel<T, C, P, decltype(neox)::value, decltype(angles)::value>;
          },
          rec, stream, device);
    } else {
      launch_variant(
          a, angles_of(a, P), pl,
          [](auto neox, auto angles) {
            return rope_decode_kernel<T, C, P, decltype(neox)::value, decltype(angles)::value>;
          },
          rec, stream, device);
    }
  });
}

template <typename T, int P>
void launch_walk(const RopeArgs& a, int sms, DeviceErrorRecord* rec, cudaStream_t stream, int device) {
  const Angles angles = angles_of(a, P);
  const Plan pl =
      walk_plan(a, P, sms, walk_block_threads(angles, static_cast<int>(dtype_size(a.cache_dtype))));
  const bool ahead = angles != Angles::pair_rows &&
                     rope_walk_ahead_size(a.tokens, a.q.heads + a.k.heads, a.rotary_dim / 2 / P, sms);
  with_float_type(a.cache_dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    if constexpr (sizeof(T) == 2 && sizeof(C) == 2 && P == 8) {
      if (ahead) {
        launch_variant(
            a, angles, pl,
            [](auto neox, auto angles) {
              constexpr Angles kA = decltype(angles)::value;  // pair_rows never loads ahead (ahead is false there)
              return rope_kernel<T, C, P, decltype(neox)::value, kA, kA != Angles::pair_rows>;
            },
            rec, stream, device);
        return;
      }
    }
    launch_variant(
        a, angles, pl,
        [](auto neox, auto angles) { return rope_kernel<T, C, P, decltype(neox)::value, decltype(angles)::value>; },
        rec, stream, device);
  });
}

/// Whether the outputs are the inputs (same pointers and strides): rotary_embedding, mrope and
/// apply_rotary_pos_emb(inplace=True).
bool rope_in_place(const RopeArgs& a) {
  auto same = [](const RopeHeads& hs) {
    return hs.out == hs.data && hs.out_token_stride == hs.token_stride && hs.out_head_stride == hs.head_stride;
  };
  return same(a.q) && same(a.k);
}

template <typename T>
void launch_group(const RopeArgs& a, int sms, DeviceErrorRecord* rec, cudaStream_t stream, int device) {
  const Plan pl = group_plan(a, static_cast<int>(16 / sizeof(T)), sms);
  with_float_type(a.cache_dtype, [&](auto tag) {
    using C = typename decltype(tag)::type;
    auto go = [&](auto kernel) { launch_kernel(kernel, pl.grid, pl.block, 0, stream, device, a, rec); };
    const bool inplace = rope_in_place(a);
    if (a.is_neox && inplace) go(rope_group_kernel<T, C, true, true>);
    else if (a.is_neox) go(rope_group_kernel<T, C, true, false>);
    else if (inplace) go(rope_group_kernel<T, C, false, true>);
    else go(rope_group_kernel<T, C, false, false>);
  });
}

template <typename T>
void launch_typed(const RopeArgs& a, DeviceErrorRecord* rec, cudaStream_t stream, int device) {
  constexpr int kVec = static_cast<int>(16 / sizeof(T));
  const int p = pick_pairs_per_thread(a);
  const int sms = sm_count(device);
  if (use_decode_kernel(a, p, sms)) {
    if (p == kVec) launch_decode<T, kVec>(a, sms, rec, stream, device);
    else launch_decode<T, 1>(a, sms, rec, stream, device);
  } else if (use_group_kernel(a, p, sms)) {
    launch_group<T>(a, sms, rec, stream, device);
  } else if (p == kVec) {
    launch_walk<T, kVec>(a, sms, rec, stream, device);
  } else {
    launch_walk<T, 1>(a, sms, rec, stream, device);
  }
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
