// Internal interface between the rotary-embedding ops (validation, ops/rope.cpp) and their backends. One
// description serves rotary_embedding, apply_rotary_pos_emb and mrope: heads of query and key, where each token's
// angles come from (a cos table and a sin table, indexed by one position per M-RoPE axis), and how pairs are formed.
#pragma once

#include <algorithm>
#include <cstdint>

#include "fuseops/rope.h"
#include "fuseops/tensor.h"

namespace fuseops::detail {

/// Largest rotary_dim / 2 the ops accept (the M-RoPE axis table has one entry per pair).
constexpr int kRopeMaxPairs = static_cast<int>(kRopeMaxRotaryDim / 2);

/// The heads of query or key: element (t, head, i) is data[t * token_stride + head * head_stride + i] (input) and
/// out[t * out_token_stride + head * out_head_stride + i] (output; out == data and equal strides in place). The
/// stride of a size-1 dim (one token, one head) is 0: it is never used.
struct RopeHeads {
  void* data = nullptr;  ///< null: absent (key=None)
  void* out = nullptr;
  int64_t heads = 0;
  int64_t token_stride = 0, head_stride = 0;
  int64_t out_token_stride = 0, out_head_stride = 0;
};

struct RopeArgs {
  DType dtype = DType::bf16;  ///< of query and key
  int64_t tokens = 0;
  int64_t rotary_dim = 0;  ///< r, even; pairs h = r / 2
  bool is_neox = true;
  bool inverse = false;
  RopeHeads q, k;

  /// Angles: cos of pair j at position p is cos[p * cos_stride + j], sin likewise (elements of cache_dtype).
  const void* cos = nullptr;
  const void* sin = nullptr;
  DType cache_dtype = DType::f32;
  int64_t cos_stride = 0, sin_stride = 0;
  int64_t max_position = 0;  ///< rows of the tables; valid positions are [0, max_position)

  /// Positions: axis a of token t is positions[a * pos_axis_stride + t * pos_token_stride]; null: the position
  /// of token t is t % seq_len (FlagGems apply_rotary_pos_emb without position_ids).
  const void* positions = nullptr;
  DType pos_dtype = DType::i64;
  int num_axes = 1;  ///< 1 (RoPE) or 3 (M-RoPE)
  int64_t pos_axis_stride = 0, pos_token_stride = 0;
  int64_t seq_len = 1;
  /// M-RoPE (num_axes == 3): the axis (0 T, 1 H, 2 W) of each pair j < h, 2 bits per pair: bits
  /// [2 (j % 16), 2 (j % 16) + 2) of word j / 16 (so the 1, 4 or 8 pairs of a CUDA lane lie in one word).
  uint32_t axis_code[kRopeMaxPairs / 16] = {};
  int axis_of(int64_t j) const { return static_cast<int>((axis_code[j / 16] >> (2 * (j % 16))) & 3u); }
  void set_axis(int64_t j, int axis) {
    uint32_t& w = axis_code[j / 16];
    const int shift = static_cast<int>(2 * (j % 16));
    w = (w & ~(3u << shift)) | (static_cast<uint32_t>(axis & 3) << shift);
  }

  uint32_t error_site = 0;  ///< (op, "positions"), for out-of-range positions
};

namespace cpu {
void rope(const RopeArgs& args);
}  // namespace cpu

namespace cuda {
void rope(const char* op, const RopeArgs& args, int device, void* stream);

/// Resident threads per SM that the CUDA launch plans count on: the hardware's 2048, not what each kernel holds (the
/// walk kernel's variants hold 1024-1280, so e.g. Llama-3 4096 tokens runs 1.94 waves); the heads-per-thread rule
/// below was measured against one-wave grids of longer threads and won (docs/ops/rope-log.md, thirty-second session).
constexpr int64_t kRopeResidentThreadsPerSm = 2048;

/// Which CUDA kernel serves a problem of `tokens` x `heads` (query + key) heads with `lanes` threads per head
/// (rotary_dim / 2 / pairs per thread): the decode kernel (one (token, head, lane) per thread, every address
/// formed before the wait on the previous kernel) while that work fits in the resident threads of `sms` SMs, i.e.
/// exactly where the walk kernel would give each thread one head; above it the walk / group kernels. The
/// environment variable FUSEOPS_ROPE_DECODE=0 turns the decode kernel off (A/B against the walk kernel).
inline bool rope_decode_kernel_fits(int64_t tokens, int64_t heads, int64_t lanes, int sms) {
  return tokens * heads * lanes <= static_cast<int64_t>(sms) * kRopeResidentThreadsPerSm;
}

/// Heads per thread that the walk kernel wants for that work: the work over the resident threads, rounded up (1
/// exactly where rope_decode_kernel_fits). It walks at most kRopeWalkMaxHeads.
constexpr int64_t kRopeWalkMaxHeads = 8;
inline int64_t rope_walk_heads_wanted(int64_t tokens, int64_t heads, int64_t lanes, int sms) {
  const int64_t resident = static_cast<int64_t>(sms) * kRopeResidentThreadsPerSm;
  return (tokens * heads * lanes + resident - 1) / resident;
}

/// Heads per thread of the walk kernel: rope_walk_heads_wanted clamped to [1, min(kRopeWalkMaxHeads, heads)].
inline int64_t rope_walk_heads(int64_t tokens, int64_t heads, int64_t lanes, int sms) {
  return std::clamp<int64_t>(rope_walk_heads_wanted(tokens, heads, lanes, sms), 1,
                             std::min<int64_t>(kRopeWalkMaxHeads, heads));
}

/// Heads the walk kernel's busiest thread walks: the heads over its head slots per token (ceil(heads /
/// rope_walk_heads), as the launch plans them), rounded up; below rope_walk_heads where the slots split the heads
/// unevenly (6 heads at 4 per thread: 2 slots of 3).
inline int64_t rope_walk_heads_walked(int64_t tokens, int64_t heads, int64_t lanes, int sms) {
  const int64_t hpt = rope_walk_heads(tokens, heads, lanes, sms);
  const int64_t slots = (heads + hpt - 1) / hpt;
  return (heads + slots - 1) / slots;
}

/// From this many heads walked per thread the walk kernel loads one head ahead (16-bit data and cache, 16-byte
/// lanes, 1-D positions or M-RoPE lanes on one axis): measured faster at 4-8 heads per thread and slower at 2; 3 not
/// measured (docs/ops/rope-log.md, thirty-first session).
constexpr int64_t kRopeWalkAheadMinHeads = 4;
inline bool rope_walk_ahead_size(int64_t tokens, int64_t heads, int64_t lanes, int sms) {
  return rope_walk_heads_walked(tokens, heads, lanes, sms) >= kRopeWalkAheadMinHeads;
}

/// The sizes at which the group kernel takes a problem of 1-D positions on the vector path: at least
/// kRopeWalkMaxHeads heads, and the walk kernel would want at least that many heads per thread.
inline bool rope_group_kernel_size(int64_t tokens, int64_t heads, int64_t lanes, int sms) {
  return heads >= kRopeWalkMaxHeads && rope_walk_heads_wanted(tokens, heads, lanes, sms) >= kRopeWalkMaxHeads;
}
}  // namespace cuda

/// Whether the rotated parts of two head sets share an element (the q / k overlap rule of the rope validators): a =
/// [tokens, na heads, r elements] at token stride ta and head stride hsa (elements of `dtype`) from `da`, b likewise.
/// Exact when the token strides are equal or there is one token, in O(na x min(nb, 2 tokens - 1)) steps; otherwise
/// overlapping extents count as an overlap (conservative). Strides are non-negative (validated before).
bool rope_heads_overlap(const void* da, int64_t na, int64_t ta, int64_t hsa, const void* db, int64_t nb, int64_t tb,
                        int64_t hsb, int64_t tokens, int64_t r, DType dtype);

}  // namespace fuseops::detail
