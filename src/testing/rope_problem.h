// One randomized run of a rotary-embedding op against the float64 golden, shared by the tests and the `fuseops
// check` cases: builds query / key (separate buffers or views of one fused qkv buffer, optional padding between
// heads and tokens), positions and the cache, runs the op on the CPU or a CUDA device (in place, or into outputs
// poisoned with NaN), then compares every rotated element with the golden and checks that every other element of
// every buffer is bitwise unchanged (pass-through dims, the gaps of the views, the tokens with bad positions).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "fuseops/rope.h"
#include "testing/compare.h"
#include "testing/host_tensor.h"

namespace fuseops::testing {

enum class RopeOp { rotary_embedding, apply_rotary_pos_emb, mrope };
const char* rope_op_name(RopeOp op, bool backward);

struct RopeSpec {
  RopeOp op = RopeOp::rotary_embedding;
  DType dtype = DType::bf16;
  DType cache_dtype = DType::bf16;  ///< cos_sin_cache, or cos and sin
  DType pos_dtype = DType::i64;
  int64_t tokens = 1, q_heads = 1, k_heads = 1, head_size = 128, rotary_dim = 128;
  bool is_neox = true;
  bool inverse = false;
  bool backward = false;      ///< call the *_backward function (the inverse rotation)
  bool has_key = true;        ///< rotary_embedding / mrope: key = nullptr when false
  bool fused_qkv = false;     ///< q and k are views of one [T, (Hq + 2 Hk) * head stride] buffer
  bool heads_dim = false;     ///< [T, H, D] views (always for apply_rotary_pos_emb) rather than [T, H * D]
  int64_t head_pad = 0;       ///< elements between heads (head stride D + head_pad; implies heads_dim)
  int64_t token_pad = 0;      ///< elements after each token's heads
  int64_t batch = 0;          ///< > 0: token dims [batch, T / batch] (rotary_embedding positions, apply q)
  bool out_of_place = false;  ///< apply_rotary_pos_emb: write separate outputs
  bool position_ids = true;   ///< apply_rotary_pos_emb: false = the position is the index in S (needs batch)
  int64_t max_position = 512;
  double theta = 10000;
  int mrope_axes = 3;  ///< mrope: [3, T] positions, or 1 for [T]
  MropeLayout layout = MropeLayout::chunked;
  std::array<int64_t, 3> section = {16, 24, 24};
  std::vector<int64_t> bad_tokens;  ///< tokens given an out-of-range position (-1 or max_position)
  Fill fill = Fill::normal;
};

/// "rotary_embedding bf16 T=4 Hq=2 Hk=1 D=128 r=64 neox cache=f32 pos=i64 fused".
std::string describe(const RopeSpec& s);

struct RopeOutcome {
  Comparison cmp;                ///< rotated elements vs the golden
  int64_t changed = 0;           ///< elements that had to stay bitwise unchanged but did not
  std::string first_changed;     ///< where the first of them is
  std::string error;             ///< what check_errors() raised after the op ("" if nothing)
  std::string expected_error;    ///< the index check_errors() must name ("" if no bad positions)
  Tolerance tolerance;
  bool pass() const;
  std::string detail() const;
};

/// The tolerance of every rope op: one rounding to the output dtype plus 4 fp32 ulps of |x_a cos| + |x_b sin|.
Tolerance rope_tolerance(DType dtype);

/// Runs spec on `device` with inputs from `seed` and compares (see the file comment).
RopeOutcome run_rope_check(const RopeSpec& spec, Device device, uint64_t seed);

}  // namespace fuseops::testing
