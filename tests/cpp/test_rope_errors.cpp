// Every validation error of the rotary embeddings (src/ops/rope.cpp): fuseops::Error of kind invalid_argument whose
// message names the op and the argument. All on CPU buffers (large enough for every view below).
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "ops/rope_impl.h"
#include "test_util.h"

namespace fuseops_test {
namespace {

using fuseops::Device;
using fuseops::MropeLayout;

constexpr DType f32 = DType::f32, bf16 = DType::bf16, i32 = DType::i32, i64 = DType::i64;
const Device cpu = Device::cpu();
constexpr const char* re = "rotary_embedding";
constexpr const char* mr = "mrope";
constexpr const char* ap = "apply_rotary_pos_emb";

/// T = 4 tokens, Hq = 2, Hk = 1, D = 64, cache [16, 64].
class RopeErrors : public ::testing::Test {
 protected:
  void* buf(int i) { return bufs_[i].data(); }
  TensorView v(int i, std::initializer_list<int64_t> shape, DType dt = f32, Device dev = cpu) {
    return TensorView(buf(i), dt, dev, shape);
  }
  TensorView s(int i, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides, DType dt = f32) {
    return TensorView(buf(i), dt, cpu, shape, strides);
  }
  TensorView pos() { return v(0, {4}, i64); }
  TensorView q() { return v(1, {4, 128}); }
  TensorView k() { return v(2, {4, 64}); }
  TensorView cache() { return v(3, {16, 64}); }
  std::vector<std::vector<int64_t>> bufs_ = std::vector<std::vector<int64_t>>(8, std::vector<int64_t>(4096, 0));
};

TEST_F(RopeErrors, ValidCallsPass) {
  const TensorView kv = k();
  EXPECT_NO_THROW(fuseops::rotary_embedding(pos(), q(), &kv, 64, cache(), true));
  EXPECT_NO_THROW(fuseops::rotary_embedding(pos(), q(), nullptr, 64, v(3, {16, 32}), false));
  EXPECT_NO_THROW(fuseops::mrope(v(0, {3, 4}, i32), q(), &kv, 64, 64, cache(), {8, 12, 12}, true,
                                 MropeLayout::interleaved));
  const TensorView q3 = v(1, {4, 2, 64}), k3 = v(2, {4, 1, 64}), cs = v(3, {16, 32}), sn = v(4, {16, 32});
  const TensorView ids = pos();
  EXPECT_NO_THROW(fuseops::apply_rotary_pos_emb(q3, k3, q3, k3, cs, sn, &ids, false));
  EXPECT_NO_THROW(fuseops::apply_rotary_pos_emb(v(5, {4, 2, 64}), v(6, {4, 1, 64}), q3, k3, cs, sn, &ids, true));
}

// Zero tokens with 2-D positions (and zero heads): the token dims have no single stride to find (torch gives a [2, 0] tensor strides
// [1, 1]), and none is needed: nothing runs.
TEST_F(RopeErrors, ZeroTokensWithTwoDimPositionsPass) {
  const TensorView none = v(2, {2, 0, 64});
  EXPECT_NO_THROW(fuseops::rotary_embedding(s(0, {2, 0}, {1, 1}, i64), v(1, {2, 0, 128}), &none, 64, cache(), true));
  const TensorView k0 = v(2, {0, 64});
  EXPECT_NO_THROW(fuseops::mrope(s(0, {3, 0}, {1, 1}, i64), v(1, {0, 128}), &k0, 64, 64, cache(), {8, 12, 12}, true));
  // Zero heads ([T, 0], strides [1, 1] from torch): no elements, nothing overlaps.
  EXPECT_NO_THROW(fuseops::rotary_embedding(pos(), s(1, {4, 0}, {1, 1}), nullptr, 64, cache(), true));
}

TEST_F(RopeErrors, RotaryEmbeddingArguments) {
  const TensorView kv = k();
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(v(0, {4}, f32), q(), &kv, 64, cache(), true), re, "positions", "i32");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(v(0, {1, 2, 2}, i64), q(), &kv, 64, cache(), true), re, "positions");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(v(0, {5}, i64), q(), &kv, 64, cache(), true), re, "query");
  // M-RoPE's [3, T] positions passed to rotary_embedding: the message says where the expected token dims come from
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(v(0, {3, 4}, i64), q(), &kv, 64, cache(), true), re, "query",
                   "shape [3, 4] (the token dims of positions) + [H * head_size]");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), v(1, {4, 100}), &kv, 64, cache(), true), re, "query",
                   "multiple of head_size");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), v(1, {4, 2, 32}), &kv, 64, cache(), true), re, "query");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), v(1, {4, 2, 64}, i32), &kv, 64, cache(), true), re, "query");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), q(), &kv, 1, cache(), true), re, "head_size");
  const TensorView kb = v(2, {4, 64}, bf16);
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), q(), &kb, 64, cache(), true), re, "key", "dtype f32");
  const TensorView k5 = v(2, {5, 64});
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), q(), &k5, 64, cache(), true), re, "key");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), q(), &kv, 64, v(3, {16, 31}), true), re, "cos_sin_cache", "even");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), q(), &kv, 64, v(3, {16, 66}), true), re, "cos_sin_cache");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), q(), &kv, 64, v(3, {16, 2, 32}), true), re, "cos_sin_cache");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), q(), &kv, 64, v(3, {16, 64}, i32), true), re, "cos_sin_cache");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), q(), &kv, 64, s(3, {16, 64}, {128, 2}), true), re,
                   "cos_sin_cache", "innermost stride 1");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), s(1, {4, 128}, {256, 2}), &kv, 64, cache(), true), re, "query",
                   "innermost stride 1");
  // Heads whose rotated parts overlap (head stride 32 < rotary_dim 64), tokens that overlap.
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), s(1, {4, 2, 64}, {128, 32, 1}), &kv, 64, cache(), true), re,
                   "query", "no two rotated parts can overlap");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), s(1, {4, 2, 64}, {64, 64, 1}), &kv, 64, cache(), true), re,
                   "query", "no two rotated parts can overlap");
  // one head (a rank-2 view of one head per token): the message gives the token stride only
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), s(1, {4, 64}, {32, 1}), &kv, 64, cache(), true), re, "query",
                   "got token stride 32 (one head)");
  // The rule is conservative within a tensor (docs/ops/rope.md): token stride 5 and head stride 7 at rotary_dim 2
  // interleave without sharing an element, and are refused all the same, by a message that says which rule.
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), s(1, {4, 3, 2}, {5, 7, 1}), nullptr, 2, v(3, {16, 2}), true), re,
                   "query", "nested token and head strides");
  // key overlapping query (views of one buffer).
  const TensorView kq = s(1, {4, 64}, {128, 1});
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), q(), &kq, 64, cache(), true), re, "key", "no overlap");
  // Views that interleave without sharing an element are accepted: per-head [q | k | v] (GPT-NeoX's fused layout),
  // and key heads over query's pass-through dims (partial rotary); a key shifted into query's rotated part is not.
  float* b1 = static_cast<float*>(buf(1));
  const TensorView qh(b1, f32, cpu, {4, 2, 64}, {384, 192, 1});
  const TensorView kh(b1 + 64, f32, cpu, {4, 2, 64}, {384, 192, 1});
  EXPECT_NO_THROW(fuseops::rotary_embedding(pos(), qh, &kh, 64, cache(), true));
  const TensorView k_shift(b1 + 32, f32, cpu, {4, 2, 64}, {384, 192, 1});
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), qh, &k_shift, 64, cache(), true), re, "key", "no overlap");
  const TensorView q_wide(b1, f32, cpu, {4, 1, 128}, {256, 128, 1});  // rotary 32 of 128: dims 32.. pass through
  const TensorView k_pass(b1 + 64, f32, cpu, {4, 1, 128}, {256, 128, 1});
  EXPECT_NO_THROW(fuseops::rotary_embedding(pos(), q_wide, &k_pass, 128, v(3, {16, 32}), true));
  const TensorView k_rot(b1 + 16, f32, cpu, {4, 1, 128}, {256, 128, 1});
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), q_wide, &k_rot, 128, v(3, {16, 32}), true), re, "key",
                   "no overlap");
  // Unequal token strides: the q / k rule is conservative, and the message says it compared address ranges. q's
  // tokens at elements [0, 64) and [256, 320), k's (token stride 128) at [64, 128) and [192, 256): no shared element.
  const TensorView q_far(b1, f32, cpu, {2, 64}, {256, 1});
  const TensorView k_near(b1 + 64, f32, cpu, {2, 64}, {128, 1});
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(v(0, {2}, i64), q_far, &k_near, 64, cache(), true), re, "key",
                   "no overlap with query", "overlapping address ranges (token strides of 128 elements (key) and 256 (query)");
  // One token: the token strides are never used, and the rule is exact.
  const TensorView q_one(b1, f32, cpu, {1, 64}, {256, 1}), k_one(b1 + 64, f32, cpu, {1, 64}, {128, 1});
  EXPECT_NO_THROW(fuseops::rotary_embedding(v(0, {1}, i64), q_one, &k_one, 64, cache(), true));
  const TensorView k_into(b1 + 32, f32, cpu, {1, 64}, {128, 1});
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(v(0, {1}, i64), q_one, &k_into, 64, cache(), true), re, "key",
                   "overlapping memory");
  // The cache and the positions are read while query / key are written: no overlap with them either.
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), q(), &kv, 64, v(1, {16, 64}), true), re, "query",
                   "no overlap with cos_sin_cache");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(v(2, {4}, i64), q(), &kv, 64, cache(), true), re, "key",
                   "no overlap with positions");
  // Devices.
  const TensorView kc = v(2, {4, 64}, f32, Device::cuda(0));
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(pos(), q(), &kc, 64, cache(), true), re, "key", "device cpu");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding(v(0, {4}, i64, Device::cuda(0)), q(), &kv, 64, cache(), true), re,
                   "positions", "device cpu");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding_backward(v(0, {4}, f32), q(), &kv, 64, cache(), true),
                   "rotary_embedding_backward", "positions");
  EXPECT_ARG_ERROR(fuseops::rotary_embedding_backward(pos(), v(1, {4, 100}), &kv, 64, cache(), true),
                   "rotary_embedding_backward", "grad_query");
}

TEST_F(RopeErrors, MropeArguments) {
  const TensorView kv = k(), p3 = v(0, {3, 4}, i64);
  const std::array<int64_t, 3> sec = {8, 12, 12};
  EXPECT_ARG_ERROR(fuseops::mrope(p3, q(), &kv, 64, 64, cache(), {8, 12, 11}, true), mr, "mrope_section", "32");
  EXPECT_ARG_ERROR(fuseops::mrope(p3, q(), &kv, 64, 64, cache(), {-4, 24, 12}, true), mr, "mrope_section");
  // Sections whose int64 sum wraps to rotary_dim / 2 (INT64_MAX + INT64_MAX + 34 = 32).
  constexpr int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_ARG_ERROR(fuseops::mrope(p3, q(), &kv, 64, 64, cache(), {big, big, 34}, true), mr, "mrope_section");
  // with 1-D positions the sections are unused, and still checked
  const TensorView p1 = v(0, {4}, i64);
  EXPECT_ARG_ERROR(fuseops::mrope(p1, q(), &kv, 64, 64, cache(), {-5, 44, -7}, true), mr, "mrope_section");
  EXPECT_ARG_ERROR(fuseops::mrope(p1, q(), &kv, 64, 64, cache(), {int64_t{1} << 40, 0, 0}, true), mr,
                   "mrope_section");
  EXPECT_ARG_ERROR(fuseops::mrope(p3, q(), &kv, 64, 32, cache(), sec, true), mr, "rotary_dim", "64");
  // a rotary_dim no cache could fit (past head_size, odd) is named as rotary_dim, even where the cache agrees with it
  EXPECT_ARG_ERROR(fuseops::mrope(p3, v(1, {4, 2 * 32}), nullptr, 32, 64, cache(), sec, true), mr, "rotary_dim",
                   "an even value in [2, min(head_size 32, 512)], got 64");
  EXPECT_ARG_ERROR(fuseops::mrope(p3, q(), &kv, 64, 63, cache(), sec, true), mr, "rotary_dim", "got 63");
  EXPECT_ARG_ERROR(fuseops::mrope(v(0, {3, 5}, i64), q(), &kv, 64, 64, cache(), sec, true), mr, "query",
                   "shape [5] (the tokens of positions)");
  EXPECT_ARG_ERROR(fuseops::mrope(v(0, {2, 4}, i64), q(), &kv, 64, 64, cache(), sec, true), mr, "positions",
                   "[3, T]");
  EXPECT_ARG_ERROR(fuseops::mrope(v(0, {3, 5}, i64), q(), &kv, 64, 64, cache(), sec, true), mr, "query");
  EXPECT_ARG_ERROR(fuseops::mrope(v(0, {3, 4}, bf16), q(), &kv, 64, 64, cache(), sec, true), mr, "positions");
  EXPECT_ARG_ERROR(fuseops::mrope(p3, q(), &kv, 64, 64, cache(), sec, true, static_cast<MropeLayout>(7)), mr,
                   "layout");
  EXPECT_ARG_ERROR(fuseops::mrope_backward(p3, q(), &kv, 64, 64, cache(), {1, 1, 1}, true), "mrope_backward",
                   "mrope_section");
  EXPECT_ARG_ERROR(fuseops::parse_mrope_layout("qwen3"), mr, "layout");
  EXPECT_ARG_ERROR(fuseops::parse_mrope_layout(std::string("chunked\0", 8)), mr, "layout", "got \"chunked\\x00\"");
  EXPECT_EQ(fuseops::parse_mrope_layout("interleaved_glm"), MropeLayout::interleaved_glm);
}

// A first input (positions, q) or position_ids whose fields are corrupt (rank 9 or -1, a negative dim) is named
// itself, never read past its arrays, and never reported against a valid argument compared with its dims.
TEST_F(RopeErrors, MalformedFirstInputNamedItself) {
  const TensorView kv = k(), q3 = v(1, {4, 2, 64}), k3 = v(2, {4, 1, 64}), cs = v(3, {16, 32}), sn = v(4, {16, 32});
  const TensorView ids = pos();
  for (int bad = 0; bad < kMalformedWays; ++bad) {
    SCOPED_TRACE(bad);
    auto corrupt = [bad](TensorView t, int dim) { return malformed(t, bad, dim); };
    const std::string got = malformed_message(bad);
    EXPECT_ARG_ERROR(fuseops::rotary_embedding(corrupt(pos(), 0), q(), &kv, 64, cache(), true), re, "positions", got);
    EXPECT_ARG_ERROR(fuseops::mrope(corrupt(v(0, {3, 4}, i32), 1), q(), &kv, 64, 64, cache(), {8, 12, 12}, true), mr,
                     "positions", got);
    EXPECT_ARG_ERROR(fuseops::apply_rotary_pos_emb(v(5, {4, 2, 64}), v(6, {4, 1, 64}), corrupt(q3, 0), k3, cs, sn, &ids,
                                                   false),
                     ap, "q", got);
    const TensorView bad_ids = corrupt(pos(), 0);
    EXPECT_ARG_ERROR(fuseops::apply_rotary_pos_emb(q3, k3, q3, k3, cs, sn, &bad_ids, false), ap, "position_ids", got);
  }
}

TEST_F(RopeErrors, ApplyRotaryPosEmbArguments) {
  const TensorView q3 = v(1, {4, 2, 64}), k3 = v(2, {4, 1, 64}), cs = v(3, {16, 32}), sn = v(4, {16, 32});
  const TensorView ids = pos();
  auto call = [&](TensorView qo, TensorView ko, TensorView q, TensorView k, TensorView c, TensorView s_,
                  const TensorView* p) { fuseops::apply_rotary_pos_emb(qo, ko, q, k, c, s_, p, false); };
  EXPECT_ARG_ERROR(call(q3, k3, q3, k3, v(3, {16, 64}), sn, &ids), ap, "cos", "D / 2 = 32");
  EXPECT_ARG_ERROR(call(q3, k3, q3, k3, cs, v(4, {8, 32}), &ids), ap, "sin");
  EXPECT_ARG_ERROR(call(q3, k3, q3, k3, cs, v(4, {16, 32}, bf16), &ids), ap, "sin", "dtype f32");
  EXPECT_ARG_ERROR(call(q3, k3, q3, k3, s(3, {16, 32}, {64, 2}), sn, &ids), ap, "cos", "innermost stride 1");
  const TensorView bad_ids = v(0, {5}, i64);
  EXPECT_ARG_ERROR(call(q3, k3, q3, k3, cs, sn, &bad_ids), ap, "position_ids");
  EXPECT_ARG_ERROR(call(q3, k3, q3, k3, cs, sn, nullptr), ap, "q", "rank 4");
  const TensorView q4 = v(1, {1, 20, 1, 64}), k4 = v(2, {1, 20, 1, 64});
  EXPECT_ARG_ERROR(call(q4, k4, q4, k4, cs, sn, nullptr), ap, "cos", "S = 20");
  EXPECT_ARG_ERROR(call(q3, k3, v(1, {128}), k3, cs, sn, &ids), ap, "q", "rank >= 2");
  EXPECT_ARG_ERROR(call(q3, k3, q3, v(2, {3, 1, 64}), cs, sn, &ids), ap, "k");
  EXPECT_ARG_ERROR(call(q3, k3, q3, v(2, {4, 1, 64}, bf16), cs, sn, &ids), ap, "k", "dtype f32");
  EXPECT_ARG_ERROR(call(v(5, {4, 3, 64}), k3, q3, k3, cs, sn, &ids), ap, "q_out");
  EXPECT_ARG_ERROR(call(v(5, {4, 2, 64}, bf16), k3, q3, k3, cs, sn, &ids), ap, "q_out", "dtype f32");
  // An output that overlaps an input without being it, and outputs that overlap each other.
  const TensorView shifted = s(1, {4, 2, 64}, {128, 64, 1});
  EXPECT_ARG_ERROR(call(TensorView(static_cast<float*>(buf(1)) + 32, f32, cpu, {4, 2, 64}), k3, q3, k3, cs, sn, &ids),
                   ap, "q_out", "no overlap");
  EXPECT_ARG_ERROR(call(v(5, {4, 2, 64}), v(5, {4, 1, 64}), q3, k3, cs, sn, &ids), ap, "k_out", "no overlap");
  EXPECT_ARG_ERROR(call(shifted, v(2, {4, 1, 64}), q3, v(1, {4, 1, 64}), cs, sn, &ids), ap, "k", "no overlap");
  EXPECT_ARG_ERROR(fuseops::apply_rotary_pos_emb_backward(q3, k3, q3, k3, cs, v(4, {16, 31}), &ids, false),
                   "apply_rotary_pos_emb_backward", "sin");
}

// A size-1 head dim's stride is never used: an output that differs from its input only there is the input (in
// place), not an overlap, as a size-1 token dim already was. The rotation equals that of the identical view.
TEST_F(RopeErrors, SizeOneHeadDimStrideIsIgnored) {
  const TensorView ids = v(0, {4, 3}, i64), cs = v(3, {16, 32}), sn = v(4, {16, 32});
  for (int i = 0; i < 4 * 3 * 64; ++i) static_cast<float*>(buf(1))[i] = static_cast<float>(i % 7) - 3.0f;
  for (int i = 0; i < 16 * 32; ++i) static_cast<float*>(buf(3))[i] = 0.5f, static_cast<float*>(buf(4))[i] = -0.25f;
  bufs_[2] = bufs_[1];
  const std::vector<int64_t> before = bufs_[1];
  // q: its output view has head stride 1 where the input has 64; k: the identical view. Both rotate the same data.
  const TensorView q4 = s(1, {4, 3, 1, 64}, {192, 64, 64, 1}), q4_out = s(1, {4, 3, 1, 64}, {192, 64, 1, 1});
  const TensorView k4 = s(2, {4, 3, 1, 64}, {192, 64, 64, 1});
  EXPECT_NO_THROW(fuseops::apply_rotary_pos_emb(q4_out, k4, q4, k4, cs, sn, &ids, false));
  EXPECT_EQ(bufs_[1], bufs_[2]);
  EXPECT_NE(bufs_[1], before);
}

// Empty views whose token dims alone overflow int64 (a zero head or head dim later): refused by name, never a
// wrapped token count (UBSan: signed overflow). An empty cache without data: every position is out of range and
// recorded, the query unchanged, and no offset is applied to its null pointer (UBSan: pointer overflow).
TEST_F(RopeErrors, EmptyViewsAndAnEmptyCache) {
  constexpr int64_t big = int64_t{1} << 40;
  const TensorView cs = v(3, {16, 32}), sn = v(4, {16, 32});
  // zero tokens behind a huge dim: nothing to do
  const TensorView q0 = v(1, {big, 0, 2, 64}), k0 = v(2, {big, 0, 1, 64}), ids0 = v(0, {big, 0}, i64);
  EXPECT_NO_THROW(fuseops::apply_rotary_pos_emb(q0, k0, q0, k0, cs, sn, &ids0, false));
  // zero heads, but big * big tokens
  const TensorView qh = v(1, {big, big, 0, 64}), kh = v(2, {big, big, 0, 64});
  EXPECT_ARG_ERROR(fuseops::apply_rotary_pos_emb(qh, kh, qh, kh, cs, sn, nullptr, false), ap, "q",
                   "token dims whose product fits in 64 bits");
  fuseops::clear_errors();
  for (int i = 0; i < 4 * 64; ++i) static_cast<float*>(buf(1))[i] = static_cast<float>(i);
  const std::vector<int64_t> before = bufs_[1];
  const TensorView empty_cache(nullptr, f32, cpu, {0, 64});
  EXPECT_NO_THROW(fuseops::rotary_embedding(v(0, {4}, i64), v(1, {4, 64}), nullptr, 64, empty_cache, true));
  EXPECT_EQ(bufs_[1], before);
  EXPECT_NE(take_device_error().find("rotary_embedding: positions: value out of range at index 0"), std::string::npos);
}

// Out of place, q and k are only read: they may be one tensor or overlap (autograd hands one gradient to both outputs
// of q_embed + k_embed). The outputs equal those of separate copies. In place, q and k may not overlap.
TEST_F(RopeErrors, OutOfPlaceInputsMayOverlap) {
  const TensorView ids = pos(), cs = v(3, {16, 32}), sn = v(4, {16, 32});
  for (int i = 0; i < 4 * 2 * 64; ++i) static_cast<float*>(buf(1))[i] = static_cast<float>(i % 11) - 5.0f;
  for (int i = 0; i < 16 * 32; ++i) {
    static_cast<float*>(buf(3))[i] = std::cos(0.1f * static_cast<float>(i));
    static_cast<float*>(buf(4))[i] = std::sin(0.1f * static_cast<float>(i));
  }
  static_cast<int64_t*>(buf(0))[1] = 3, static_cast<int64_t*>(buf(0))[2] = 15;
  bufs_[2] = bufs_[1];
  const TensorView q = v(1, {4, 2, 64});
  const TensorView k_head1 = s(1, {4, 1, 64}, {128, 64, 1});  // q's head 0, as k
  // q and k one tensor; k a view of q's first head.
  EXPECT_NO_THROW(fuseops::apply_rotary_pos_emb(v(5, {4, 2, 64}), v(6, {4, 2, 64}), q, q, cs, sn, &ids, false));
  EXPECT_EQ(bufs_[5], bufs_[6]);
  const std::vector<int64_t> q_embed = bufs_[5];
  EXPECT_NO_THROW(fuseops::apply_rotary_pos_emb(v(5, {4, 2, 64}), v(6, {4, 1, 64}), q, k_head1, cs, sn, &ids, true));
  // against separate copies (buffer 2 holds q's values)
  bufs_[7].assign(bufs_[7].size(), 0);
  const TensorView q_copy = v(2, {4, 2, 64}), k_copy = s(2, {4, 1, 64}, {128, 64, 1});
  EXPECT_NO_THROW(fuseops::apply_rotary_pos_emb(v(7, {4, 2, 64}), v(6, {4, 1, 64}), q_copy, k_copy, cs, sn, &ids, true));
  EXPECT_EQ(bufs_[5], bufs_[7]);
  EXPECT_NE(bufs_[5], q_embed);  // GPT-J and NeoX rotate differently: the second call ran
  // In place, q and k may not share elements (one is written while the other is read).
  EXPECT_ARG_ERROR(fuseops::apply_rotary_pos_emb(q, k_head1, q, k_head1, cs, sn, &ids, false), ap, "k", "no overlap");
  EXPECT_ARG_ERROR(fuseops::apply_rotary_pos_emb(v(5, {4, 2, 64}), k_head1, q, k_head1, cs, sn, &ids, false), ap,
                   "k_out", "no overlap with q");
}

// The q / k overlap rule (rope_heads_overlap, which walks the shorter of the head and token-offset ranges and solves
// for the other) against every pair of rotated parts, on random small layouts: equal token strides (or one token)
// exact, unequal ones never missing an overlap.
TEST(RopeHeadsOverlap, MatchesEveryPairOfParts) {
  std::mt19937_64 rng(test_rng()());
  static char buffer[1 << 12];
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  int64_t overlaps = 0, exact = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const DType dtype = trial % 2 ? DType::f32 : DType::bf16;
    const int64_t e = trial % 2 ? 4 : 2, tokens = uniform(1, 5), na = uniform(1, 7), nb = uniform(1, 7);
    const int64_t ta = uniform(0, 40), tb = trial % 5 == 0 ? uniform(0, 40) : ta, hsa = uniform(0, 20);
    const int64_t hsb = uniform(0, 20), r = uniform(1, 8), delta = uniform(-60, 60);  // delta in elements
    const char* da = buffer + 1024;
    const char* db = da + delta * e;
    bool any = false;
    for (int64_t t = 0; t < tokens && !any; ++t) {
      for (int64_t h = 0; h < na && !any; ++h) {
        for (int64_t u = 0; u < tokens && !any; ++u) {
          for (int64_t g = 0; g < nb && !any; ++g) {
            const int64_t a0 = t * ta + h * hsa, b0 = delta + u * tb + g * hsb;  // elements from da
            any = a0 < b0 + r && b0 < a0 + r;
          }
        }
      }
    }
    const bool got = fuseops::detail::rope_heads_overlap(da, na, ta, hsa, db, nb, tb, hsb, tokens, r, dtype);
    SCOPED_TRACE("tokens " + std::to_string(tokens) + " a: " + std::to_string(na) + " heads, strides " +
                 std::to_string(ta) + " / " + std::to_string(hsa) + "; b: " + std::to_string(nb) + " heads, strides " +
                 std::to_string(tb) + " / " + std::to_string(hsb) + ", offset " + std::to_string(delta) + "; r " +
                 std::to_string(r));
    if (ta == tb || tokens == 1) {
      ASSERT_EQ(got, any);
      ++exact;
    } else if (any) {
      ASSERT_TRUE(got) << "an overlap was missed";
    }
    overlaps += any;
  }
  EXPECT_GT(overlaps, 2000);  // both answers are well represented
  EXPECT_GT(exact - overlaps, 2000);
}

}  // namespace
}  // namespace fuseops_test
