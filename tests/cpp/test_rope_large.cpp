// The CUDA rotary kernels at prefill sizes, against the float64 golden (testing/rope_problem.h). The CUDA backend
// has three kernels (src/cuda/rope.cu): the decode kernel gives each thread one head of one token while the
// (token, head, lane) work fits in the resident threads (on an H200, 132 SMs x 2048 threads;
// rope_decode_kernel_fits in ops/rope_impl.h); above that the walk kernel gives each thread 2 to 8 heads of one
// token, the work over the resident threads rounded up; when that reaches 8 with 1-D positions, aligned views and
// at least 8 heads, the group kernel takes over with 4 consecutive heads per thread. The small problems of
// test_rope.cpp all take the decode kernel. DecodeKernelSwitch runs each kernel variant (rotary, every M-RoPE
// layout case of rope_test_util.h, the scalar path) at the largest token count of the decode kernel on this GPU
// and one token more (the walk kernel, 2 heads per thread). rotary_specs and mrope_specs reach the decode kernel
// or 2 to 3 heads per thread of the walk kernel (counted for 132 SMs in the comments; other GPUs land on other
// counts) with every dtype, NeoX and GPT-J, partial rotary, fused-qkv views, the scalar path, key absent,
// Hk > Hq, the inverse, an fp32 cache, out-of-place outputs, bad positions, and the M-RoPE layouts of
// rope_test_util.h; group_specs reach the group kernel (at least 8 heads per thread wanted on GPUs of up to 148
// SMs, scaled up on larger GPUs) with groups of one tensor's heads (short last groups, a tensor of 2 or 1 heads, no
// key), each cache type, fused qkv, DeepSeek-V3's head stride, bad positions, the inverse, partial rotary, and
// out-of-place apply_rotary_pos_emb with output strides unlike the input's, NeoX and GPT-J; walk_ahead_specs reach
// the walk kernel's form that loads one head ahead (16-bit data and cache, at least 4 heads walked per thread).
#include <string>
#include <vector>

#include "cuda_test_util.h"
#if defined(FUSEOPS_WITH_CUDA)
#include "cuda/launch.h"
#endif
#include "ops/rope_impl.h"
#include "rope_test_util.h"
#include "test_util.h"
#include "testing/rope_problem.h"

namespace fuseops_test {
namespace {

using fuseops::MropeLayout;
using ft::RopeOp;
using ft::RopeSpec;

RopeSpec spec(RopeOp op, DType dtype, bool neox, int64_t T, int64_t hq, int64_t hk, int64_t d, int64_t r) {
  RopeSpec s = rope_spec(op, dtype, neox, T, hq, hk, d, r);
  s.max_position = 4096;
  return s;
}

// Threads per token = lanes (r / 2 / 8 for 16-bit data, r / 2 / 4 for f32, r / 2 on the scalar path) x head slots.
std::vector<RopeSpec> rotary_specs(DType dtype) {
  std::vector<RopeSpec> v;
  for (bool neox : {true, false}) {
    const auto b = [&](RopeOp op, int64_t T, int64_t hq, int64_t hk, int64_t d, int64_t r) {
      return spec(op, dtype, neox, T, hq, hk, d, r);
    };
    // Qwen3-Next-like r 64 of 256, 7 heads: 16-bit the decode kernel, f32 2 per thread.
    v.push_back(b(RopeOp::rotary_embedding, 5000, 5, 2, 256, 64));
    // 6 heads, fused qkv: 16-bit 2 per thread (slots {q0,q3} {q1,k0} {q2,k1}); f32 3.
    RopeSpec s = b(RopeOp::rotary_embedding, 6000, 4, 2, 128, 128);
    s.fused_qkv = true;
    v.push_back(s);
    s.bad_tokens = {1, 2999, 5998};  // -1, -1, max_position
    s.fused_qkv = false;
    s.inverse = true;
    v.push_back(s);
    s = b(RopeOp::rotary_embedding, 6000, 4, 2, 128, 128);
    s.cache_dtype = dtype == DType::f32 ? DType::bf16 : DType::f32;
    s.pos_dtype = DType::i32;
    v.push_back(s);
    // rotary 80 of 128 (5 lanes), Hk > Hq: 16-bit the decode kernel, f32 2 per thread.
    v.push_back(b(RopeOp::rotary_embedding, 6000, 2, 4, 128, 80));
    // Key absent, 7 heads of 64: 16-bit the decode kernel, f32 2 per thread (the last slot one head).
    s = b(RopeOp::rotary_embedding, 6000, 7, 1, 64, 64);
    s.has_key = false;
    v.push_back(s);
    // Unaligned views: the scalar path (32 lanes), 5 per thread.
    s = b(RopeOp::rotary_embedding, 6000, 4, 2, 64, 64);
    s.head_pad = 3;
    s.token_pad = 5;
    s.fused_qkv = true;
    v.push_back(s);
    // DeepSeek-like q_pe: 129 heads of stride 192: 16-bit 2 per thread, f32 4.
    s = b(RopeOp::rotary_embedding, 1000, 128, 1, 64, 64);
    s.head_pad = 128;
    v.push_back(s);
    // apply_rotary_pos_emb out of place without position_ids, and in place with them, with a bad one.
    s = b(RopeOp::apply_rotary_pos_emb, 6000, 4, 2, 128, 128);
    s.batch = 2;
    s.position_ids = false;
    s.out_of_place = true;
    s.max_position = 3000;
    v.push_back(s);
    s = b(RopeOp::apply_rotary_pos_emb, 6000, 4, 2, 128, 128);
    s.bad_tokens = {4001};
    v.push_back(s);
  }
  return v;
}

// M-RoPE, 5000 tokens of 7 heads: 16-bit r 128 and f32 r 64 take 2 per thread of the walk kernel, 16-bit r 64 the
// decode kernel, f32 r 128 3 per thread.
std::vector<RopeSpec> mrope_specs(DType dtype) {
  std::vector<RopeSpec> v;
  for (bool neox : {true, false}) {
    for (RopeSpec s : mrope_layout_specs(dtype, neox, 5000, 5, 2)) {
      s.max_position = 4096;
      v.push_back(s);
    }
    RopeSpec s = spec(RopeOp::mrope, dtype, neox, 5000, 5, 2, 128, 128);
    s.layout = MropeLayout::interleaved;
    s.section = {24, 20, 20};
    s.fused_qkv = true;
    s.cache_dtype = dtype == DType::f32 ? DType::bf16 : DType::f32;
    s.bad_tokens = {1, 2, 4999};
    v.push_back(s);
    s = spec(RopeOp::mrope, dtype, neox, 5000, 6, 2, 128, 64);
    s.layout = MropeLayout::interleaved_glm;
    s.section = {8, 12, 12};
    s.has_key = false;
    s.inverse = true;
    v.push_back(s);
  }
  return v;
}

/// SMs of device 0 (132 without a CUDA build, where the specs are never run).
int device_sms() {
#if defined(FUSEOPS_WITH_CUDA)
  return fuseops::detail::sm_count(0);
#else
  return 132;
#endif
}

/// The heads a spec rotates (query and key) and its lanes per head on the 16-byte vector path.
int64_t spec_heads(const RopeSpec& s) {
  return s.q_heads + (s.has_key || s.op == RopeOp::apply_rotary_pos_emb ? s.k_heads : 0);
}
int64_t vector_lanes(const RopeSpec& s) { return s.rotary_dim / 2 / (s.dtype == DType::f32 ? 4 : 8); }

/// Whether the group kernel takes a spec (1-D positions, 16-byte lanes) on this GPU: rope_group_kernel_size.
bool reaches_group_kernel(const RopeSpec& s) {
  return fuseops::detail::cuda::rope_group_kernel_size(s.tokens, spec_heads(s), vector_lanes(s), device_sms());
}

/// Whether the walk kernel that loads one head ahead takes a spec of 16-bit data and cache on the vector path with
/// 1-D positions or lane_row M-RoPE (the spec's part of the rule) on this GPU: above the decode kernel's size, off
/// the group kernel's (1-D), and rope_walk_ahead_size.
bool reaches_walk_ahead(const RopeSpec& s) {
  namespace fd = fuseops::detail::cuda;
  const int64_t heads = spec_heads(s), lanes = vector_lanes(s);
  const int sms = device_sms();
  return !fd::rope_decode_kernel_fits(s.tokens, heads, lanes, sms) &&
         (s.op == RopeOp::mrope || !fd::rope_group_kernel_size(s.tokens, heads, lanes, sms)) &&
         fd::rope_walk_ahead_size(s.tokens, heads, lanes, sms);
}

/// `tokens`, or more (a multiple of 256) where this GPU needs more for the spec to reach the group kernel.
RopeSpec at_group_size(RopeSpec s) {
  while (!reaches_group_kernel(s)) s.tokens += 256;
  return s;
}

// The group kernel: 8192 tokens (more on GPUs of over 148 SMs) of 31 + 6 heads of 128 (16-bit 8 lanes: 2.4M
// lane-heads, 9.0 per resident thread on 132 SMs, 8.0 on 148; f32 16 lanes, twice that); groups {q0..q3} ..
// {q28,q29,q30}, {k0..k3}, {k4,k5} (a group is heads of one tensor). In place: fused qkv with bad positions, GPT-J
// with an other-size cache, i32 positions and the inverse, 37 query heads without a key, 2 query heads (one short
// group) and 35 key heads, DeepSeek-V3's q_pe (128 + 1 heads of 64 in a stride of 192, GPT-J: 4 lanes). Out of place
// (apply_rotary_pos_emb): without position_ids, [4, 2048] tokens; and NeoX and GPT-J from a fused qkv buffer (input
// token strides of 43 heads, outputs of 31 and 6) with i32 position ids, bad positions (copied unrotated) and an f32
// cache for 16-bit data.
std::vector<RopeSpec> group_specs(DType dtype) {
  std::vector<RopeSpec> v;
  RopeSpec s = spec(RopeOp::rotary_embedding, dtype, true, 8192, 31, 6, 128, 128);
  s.fused_qkv = true;
  s.bad_tokens = {1, 4097, 8191};
  v.push_back(s);
  s = spec(RopeOp::rotary_embedding, dtype, false, 8192, 31, 6, 128, 128);
  s.cache_dtype = dtype == DType::f32 ? DType::bf16 : DType::f32;
  s.pos_dtype = DType::i32;
  s.inverse = true;
  v.push_back(s);
  s = spec(RopeOp::apply_rotary_pos_emb, dtype, true, 8192, 31, 6, 128, 128);
  s.cache_dtype = dtype == DType::f16 ? DType::bf16 : DType::f16;
  s.batch = 4;
  s.position_ids = false;
  s.out_of_place = true;
  s.max_position = 3000;
  v.push_back(s);
  for (bool neox : {true, false}) {
    s = spec(RopeOp::apply_rotary_pos_emb, dtype, neox, 8448, 31, 6, 128, 128);
    s.fused_qkv = true;
    s.out_of_place = true;
    s.pos_dtype = DType::i32;
    s.bad_tokens = {2, 4097};
    s.cache_dtype = dtype == DType::f32 ? DType::bf16 : DType::f32;
    v.push_back(s);
  }
  s = spec(RopeOp::rotary_embedding, dtype, true, 8192, 37, 1, 128, 128);
  s.has_key = false;
  s.heads_dim = true;
  s.bad_tokens = {0, 8191};
  v.push_back(s);
  s = spec(RopeOp::rotary_embedding, dtype, true, 8192, 2, 35, 128, 128);
  s.heads_dim = true;
  v.push_back(s);
  // Partial rotary GPT-J, rotary 80 of 128: the second half's pairs start at 20 + j0 / 2 (with a 16-bit cache 40
  // bytes into the row, off a 16-byte line).
  s = spec(RopeOp::rotary_embedding, dtype, false, 8192, 31, 6, 128, 80);
  s.fused_qkv = true;
  v.push_back(s);
  s = spec(RopeOp::rotary_embedding, dtype, false, 4608, 128, 1, 64, 64);
  s.head_pad = 128;
  s.bad_tokens = {4607};
  v.push_back(s);
  for (RopeSpec& g : v) g = at_group_size(g);
  return v;
}

// The walk kernel that loads one head ahead (16-bit data and cache, 16-byte lanes, 1-D positions or M-RoPE lanes on
// one axis, at least 4 heads walked per thread): 5 + 2 or 7 heads (never the group kernel's 8), tokens raised from
// 12288 (a multiple of 256) until this GPU has each thread walk 4 heads (14592 on 132 SMs at 8 lanes); bad
// positions in every spec with positions. NeoX from a fused qkv buffer; GPT-J with i32 positions, the inverse and an
// f16 / bf16 cache of the other type; NeoX partial rotary 64 of 256 (4 lanes); out-of-place apply_rotary_pos_emb,
// GPT-J without position_ids (the cache as long as the sequence) and NeoX with i32 position ids (bad tokens copied
// unrotated); chunked M-RoPE [16, 24, 24] (lane_row: every lane on one axis), NeoX, and GPT-J without a key. None for
// f32 data (the kernel has no f32 form).
std::vector<RopeSpec> walk_ahead_specs(DType dtype) {
  std::vector<RopeSpec> v;
  if (dtype == DType::f32) return v;
  const DType other = dtype == DType::bf16 ? DType::f16 : DType::bf16;
  RopeSpec s = spec(RopeOp::rotary_embedding, dtype, true, 12288, 5, 2, 128, 128);
  s.fused_qkv = true;
  v.push_back(s);
  s = spec(RopeOp::rotary_embedding, dtype, false, 12288, 6, 1, 128, 128);
  s.pos_dtype = DType::i32;
  s.inverse = true;
  s.cache_dtype = other;
  v.push_back(s);
  v.push_back(spec(RopeOp::rotary_embedding, dtype, true, 12288, 5, 2, 256, 64));
  s = spec(RopeOp::apply_rotary_pos_emb, dtype, false, 12288, 5, 2, 128, 128);
  s.batch = 2;
  s.position_ids = false;
  s.out_of_place = true;
  v.push_back(s);
  s = spec(RopeOp::apply_rotary_pos_emb, dtype, true, 12288, 5, 2, 128, 128);
  s.out_of_place = true;
  s.pos_dtype = DType::i32;
  v.push_back(s);
  for (bool neox : {true, false}) {
    s = spec(RopeOp::mrope, dtype, neox, 12288, neox ? 5 : 7, 2, 128, 128);
    s.layout = MropeLayout::chunked;
    s.section = {16, 24, 24};
    s.has_key = neox;
    v.push_back(s);
  }
  for (RopeSpec& w : v) {
    while (!reaches_walk_ahead(w)) w.tokens += 256;
    if (w.position_ids) w.bad_tokens = {1, w.tokens / 2, w.tokens - 1};
    else w.max_position = w.tokens / w.batch;  // position = index in the sequence: a cache row each
  }
  return v;
}

class RopeLargeDtype : public ::testing::TestWithParam<DType> {};

TEST_P(RopeLargeDtype, SeveralHeadsPerThreadMatchGolden) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng = test_rng();
  std::vector<RopeSpec> specs = rotary_specs(GetParam());
  for (const RopeSpec& s : mrope_specs(GetParam())) specs.push_back(s);
  for (const RopeSpec& s : group_specs(GetParam())) {
    EXPECT_TRUE(reaches_group_kernel(s)) << ft::describe(s);
    specs.push_back(s);
  }
  for (const RopeSpec& s : walk_ahead_specs(GetParam())) specs.push_back(s);
  for (const RopeSpec& s : specs) {
    const ft::RopeOutcome o = ft::run_rope_check(s, fuseops::Device::cuda(0), rng());
    EXPECT_TRUE(o.pass()) << ft::describe(s) << ": " << o.detail();
    if (HasFailure()) return;
  }
}

// The decode kernel's switch on this GPU: each variant at the largest token count whose work fits in the resident
// threads (the decode kernel) and at one token more (the walk kernel, 2 heads per thread), with bad positions at
// the first and the last token (M-RoPE: on axis t mod 3). Variants: rotary; every M-RoPE layout case (angle
// variants lane_row, e.g. chunked [16, 24, 24], and pair_rows, e.g. interleaved, whose lanes mix axes) with the
// cache in the data's dtype and, for chunked and interleaved, in the other element size (f32 for 16-bit data),
// inverse; the scalar path (lane_row with one pair per thread).
TEST_P(RopeLargeDtype, DecodeKernelSwitchMatchesGolden) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
#if defined(FUSEOPS_WITH_CUDA)
  namespace fd = fuseops::detail::cuda;
  const int sms = device_sms();
  const DType dtype = GetParam();
  const int64_t vec = dtype == DType::f32 ? 4 : 8;  // pairs per thread on the vector path
  std::vector<std::pair<RopeSpec, int64_t>> variants;  // (spec, lanes per head)
  for (bool neox : {true, false}) {
    variants.push_back({spec(RopeOp::rotary_embedding, dtype, neox, 1, 5, 2, 128, 128), 64 / vec});
    for (RopeSpec s : mrope_layout_specs(dtype, neox, 1, 5, 2)) {
      s.max_position = 4096;
      variants.push_back({s, s.rotary_dim / 2 / vec});
    }
  }
  // lane_row and pair_rows with the other cache element size (their walk kernels differ in block size and bound).
  for (MropeLayout layout : {MropeLayout::chunked, MropeLayout::interleaved}) {
    RopeSpec s = spec(RopeOp::mrope, dtype, false, 1, 5, 2, 128, 128);
    s.layout = layout;
    s.section = {16, 24, 24};
    s.cache_dtype = dtype == DType::f32 ? DType::bf16 : DType::f32;
    s.inverse = true;
    variants.push_back({s, 64 / vec});
  }
  RopeSpec scalar = spec(RopeOp::mrope, dtype, true, 1, 5, 2, 128, 128);  // unaligned views: one pair per thread
  scalar.layout = MropeLayout::interleaved;
  scalar.section = {24, 20, 20};
  scalar.head_pad = 3;
  scalar.fused_qkv = true;
  variants.push_back({scalar, 64});
  std::mt19937_64 rng = test_rng();
  for (auto& [base, lanes] : variants) {
    const int64_t heads = base.q_heads + base.k_heads;
    const int64_t t_max = static_cast<int64_t>(sms) * fd::kRopeResidentThreadsPerSm / (heads * lanes);
    ASSERT_TRUE(fd::rope_decode_kernel_fits(t_max, heads, lanes, sms));
    ASSERT_FALSE(fd::rope_decode_kernel_fits(t_max + 1, heads, lanes, sms));
    for (int64_t T : {t_max, t_max + 1}) {
      RopeSpec s = base;
      s.tokens = T;
      s.bad_tokens = {0, T - 1};
      const ft::RopeOutcome o = ft::run_rope_check(s, fuseops::Device::cuda(0), rng());
      EXPECT_TRUE(o.pass()) << ft::describe(s) << " (decode kernel up to " << t_max << " tokens): " << o.detail();
      if (HasFailure()) return;
    }
  }
#endif
}

INSTANTIATE_TEST_SUITE_P(All, RopeLargeDtype, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(fuseops::dtype_name(info.param));
                         });

}  // namespace
}  // namespace fuseops_test
