// The CUDA rotary kernels at prefill sizes, against the float64 golden (testing/rope_problem.h). The CUDA backend
// gives each thread 1, 2 or 4 heads of one token (2 at most for M-RoPE with an f32 cache and 16-bit data), the
// fewest whose grid fits in one wave of resident threads (on an H200, 132 SMs x 768 threads), else the most; the
// small problems of test_rope.cpp all take one head per thread. These sizes reach 2 and 4 heads per thread (counted
// for 132 SMs in the comments; other GPUs land on other counts), with a thread's last group partly filled, groups
// that span the last query heads and the first key heads, every dtype, NeoX and GPT-J, partial rotary, fused-qkv
// views, the scalar path, key absent, Hk > Hq, the inverse, an fp32 cache, out-of-place outputs, bad positions, and
// the M-RoPE layouts of rope_test_util.h.
#include <string>
#include <vector>

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

// Threads per token = lanes (r / 2 / 8 for 16-bit data, r / 2 / 4 for f32, r / 2 on the scalar path) x groups.
std::vector<RopeSpec> rotary_specs(DType dtype) {
  std::vector<RopeSpec> v;
  for (bool neox : {true, false}) {
    const auto b = [&](RopeOp op, int64_t T, int64_t hq, int64_t hk, int64_t d, int64_t r) {
      return spec(op, dtype, neox, T, hq, hk, d, r);
    };
    // Qwen3-Next-like r 64 of 256, 7 heads: 16-bit 2 per thread (groups {q0,q1} {q2,q3} {q4,k0} {k1}); f32 4.
    v.push_back(b(RopeOp::rotary_embedding, 5000, 5, 2, 256, 64));
    // 6 heads, fused qkv: 16-bit 4 per thread ({q0..q3} {k0,k1}); f32 4 in several waves.
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
    // rotary 80 of 128 (5 lanes), Hk > Hq: 16-bit 2 per thread.
    v.push_back(b(RopeOp::rotary_embedding, 6000, 2, 4, 128, 80));
    // Key absent, 7 heads of 64: 16-bit 2 per thread, the last group one head.
    s = b(RopeOp::rotary_embedding, 6000, 7, 1, 64, 64);
    s.has_key = false;
    v.push_back(s);
    // Unaligned views: the scalar path (32 lanes), 4 per thread.
    s = b(RopeOp::rotary_embedding, 6000, 4, 2, 64, 64);
    s.head_pad = 3;
    s.token_pad = 5;
    s.fused_qkv = true;
    v.push_back(s);
    // DeepSeek-like q_pe: 129 heads of stride 192, 4 per thread, the last group one (key) head.
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

// M-RoPE, 5000 tokens of 7 heads: 16-bit r 128 and f32 take 4 per thread ({q0..q3} {q4,k0,k1}), 16-bit r 64 2
// ({q0,q1} {q2,q3} {q4,k0} {k1}); 16-bit data with an f32 cache (three 32-byte row pieces) at most 2.
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

class RopeLargeDtype : public ::testing::TestWithParam<DType> {};

TEST_P(RopeLargeDtype, SeveralHeadsPerThreadMatchGolden) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng = test_rng();
  std::vector<RopeSpec> specs = rotary_specs(GetParam());
  for (const RopeSpec& s : mrope_specs(GetParam())) specs.push_back(s);
  for (const RopeSpec& s : specs) {
    const ft::RopeOutcome o = ft::run_rope_check(s, fuseops::Device::cuda(0), rng());
    EXPECT_TRUE(o.pass()) << ft::describe(s) << ": " << o.detail();
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(All, RopeLargeDtype, ::testing::Values(DType::f32, DType::f16, DType::bf16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(fuseops::dtype_name(info.param));
                         });

}  // namespace
}  // namespace fuseops_test
