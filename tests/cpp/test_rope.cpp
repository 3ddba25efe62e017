// Accuracy of the rotary embeddings against the float64 golden (testing/rope_problem.h), on the CPU backend always
// and on the CUDA backend when a device is present. One test per (backend, op group, dtype) sweeps NeoX and GPT-J,
// full and partial rotary (64 of 256, 80 of 128), key absent, q / k as views of one fused qkv buffer, padded
// (unaligned) views, Hk > Hq and Hk < Hq, T = 0 and 1, 2-D positions, i32 / i64 positions, fp32 / 16-bit caches,
// the inverse and the backward, and out-of-range positions (token left unrotated, fault recorded).
#include <algorithm>
#include <cmath>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "reference/rope.h"
#include "rope_test_util.h"
#include "test_util.h"
#include "testing/rope_problem.h"

namespace fuseops_test {
namespace {

using fuseops::MropeLayout;
using ft::RopeOp;
using ft::RopeSpec;

enum class Group { rotary_embedding, mrope, apply };
const char* group_name(Group g) {
  return g == Group::rotary_embedding ? "rotary_embedding" : g == Group::mrope ? "mrope" : "apply_rotary_pos_emb";
}

struct Param {
  Where where;
  Group group;
  DType dtype;
};
std::string param_name(const Param& p) {
  return std::string(where_name(p.where)) + "_" + group_name(p.group) + "_" + fuseops::dtype_name(p.dtype);
}
void PrintTo(const Param& p, std::ostream* os) { *os << param_name(p); }

std::vector<Param> all_params() {
  std::vector<Param> v;
  for (Where w : {Where::cpu, Where::cuda})
    for (Group g : {Group::rotary_embedding, Group::mrope, Group::apply})
      for (DType t : {DType::f32, DType::f16, DType::bf16}) v.push_back({w, g, t});
  return v;
}

std::vector<RopeSpec> rotary_specs(DType dtype) {
  std::vector<RopeSpec> v;
  for (bool neox : {true, false}) {
    const auto b = [&](int64_t T, int64_t hq, int64_t hk, int64_t d, int64_t r) {
      return rope_spec(RopeOp::rotary_embedding, dtype, neox, T, hq, hk, d, r);
    };
    v.push_back(b(7, 4, 2, 128, 128));
    v.push_back(b(5, 3, 1, 256, 64));  // Qwen3-Next partial rotary
    v.push_back(b(6, 2, 2, 128, 80));  // rotary_dim 80 (h = 40 pairs)
    v.push_back(b(3, 2, 1, 192, 192));
    v.push_back(b(4, 1, 3, 64, 64));   // Hk > Hq
    v.push_back(b(0, 4, 2, 128, 128));  // no tokens
    v.push_back(b(1, 4, 2, 128, 128));
    v.push_back(b(9, 3, 1, 10, 6));   // tiny head, pairs not a multiple of the vector
    RopeSpec s = b(5, 4, 2, 128, 128);
    s.has_key = false;
    v.push_back(s);
    s = b(6, 4, 2, 128, 64);
    s.fused_qkv = true;  // views of one [T, (Hq + 2 Hk) D] buffer
    v.push_back(s);
    s.heads_dim = true;
    s.pos_dtype = DType::i32;
    v.push_back(s);
    s = b(6, 3, 2, 64, 64);
    s.head_pad = 3;  // unaligned head and token strides: the scalar path
    s.token_pad = 5;
    s.fused_qkv = true;
    v.push_back(s);
    s = b(6, 2, 1, 128, 128);
    s.batch = 2;  // positions [2, 3], query [2, 3, Hq * D]
    v.push_back(s);
    s = b(5, 2, 1, 128, 128);
    s.cache_dtype = dtype == DType::f32 ? DType::bf16 : DType::f32;  // cache dtype != query dtype
    v.push_back(s);
    s = b(5, 2, 1, 128, 64);
    s.inverse = true;
    v.push_back(s);
    s.inverse = false;
    s.backward = true;
    v.push_back(s);
    s = b(8, 2, 1, 64, 64);
    s.bad_tokens = {3, 6};  // positions max_position and -1
    v.push_back(s);
    s.has_key = false;
    s.bad_tokens = {5};
    v.push_back(s);
  }
  return v;
}

std::vector<RopeSpec> mrope_specs(DType dtype) {
  std::vector<RopeSpec> v;
  for (bool neox : {true, false}) {
    for (const RopeSpec& s : mrope_layout_specs(dtype, neox, 7, 4, 2)) v.push_back(s);
    RopeSpec s = rope_spec(RopeOp::mrope, dtype, neox, 3, 4, 2, 128, 80);  // 16-bit data: 5 lanes, an odd count
    s.layout = MropeLayout::interleaved;
    s.section = {16, 12, 12};
    v.push_back(s);
    s = rope_spec(RopeOp::mrope, dtype, neox, 5, 3, 1, 128, 128);
    s.layout = MropeLayout::interleaved;
    s.section = {24, 20, 20};
    s.mrope_axes = 1;  // [T] positions: ordinary RoPE
    v.push_back(s);
    s.mrope_axes = 3;
    s.has_key = false;
    v.push_back(s);
    s.has_key = true;
    s.fused_qkv = true;
    s.backward = true;
    v.push_back(s);
    s.backward = false;
    s.bad_tokens = {1, 2, 4};  // axis t % 3 bad: H of 1 (the first flat index, T + 1), W of 2, H of 4
    v.push_back(s);
    s.bad_tokens = {};
    s.cache_dtype = dtype == DType::f32 ? DType::bf16 : DType::f32;  // 16-bit data: 32-byte cache pieces
    v.push_back(s);
    s = rope_spec(RopeOp::mrope, dtype, neox, 1, 4, 1, 128, 128);
    s.section = {16, 24, 24};
    v.push_back(s);
    s.tokens = 0;
    v.push_back(s);
    // GLM-4.1V at decode sizes (Hq 32, Hk 2, rotary 64 of 128: the tiny decode kernel on CUDA, whose 8-pair lane 2
    // spans axes H and W in the chunked map), both layouts, with both caches, the inverse, and a bad position (axis H
    // of token 1).
    for (MropeLayout layout : {MropeLayout::chunked, MropeLayout::interleaved_glm}) {
      s = rope_spec(RopeOp::mrope, dtype, neox, 1, 32, 2, 128, 64);
      s.layout = layout;
      s.section = {8, 12, 12};
      v.push_back(s);
      s.cache_dtype = dtype == DType::f32 ? DType::bf16 : DType::f32;
      s.inverse = true;
      v.push_back(s);
      s.cache_dtype = dtype;
      s.inverse = false;
      s.tokens = 2;
      s.bad_tokens = {1};
      v.push_back(s);
    }
  }
  return v;
}

std::vector<RopeSpec> apply_specs(DType dtype) {
  std::vector<RopeSpec> v;
  for (bool neox : {true, false}) {
    for (bool out_of_place : {false, true}) {
      RopeSpec s = rope_spec(RopeOp::apply_rotary_pos_emb, dtype, neox, 6, 4, 2, 128, 128);
      s.out_of_place = out_of_place;
      v.push_back(s);
      s.batch = 2;
      s.position_ids = false;  // position = index in S
      v.push_back(s);
      s.position_ids = true;  // position_ids [2, 3]
      v.push_back(s);
      s = rope_spec(RopeOp::apply_rotary_pos_emb, dtype, neox, 5, 2, 3, 64, 64);
      s.out_of_place = out_of_place;
      s.head_pad = 1;
      s.backward = true;
      v.push_back(s);
      s.backward = false;
      s.head_pad = 0;
      s.fused_qkv = true;
      s.bad_tokens = {2};
      v.push_back(s);
      s.tokens = 1;
      s.bad_tokens = {};
      v.push_back(s);
    }
  }
  return v;
}

class RopeAccuracy : public ::testing::TestWithParam<Param> {};

TEST_P(RopeAccuracy, MatchesGolden) {
  const auto [where, group, dtype] = GetParam();
  FUSEOPS_SKIP_UNLESS_RUNNABLE(where);
  const std::vector<RopeSpec> specs = group == Group::rotary_embedding ? rotary_specs(dtype)
                                      : group == Group::mrope          ? mrope_specs(dtype)
                                                                       : apply_specs(dtype);
  const fuseops::Device dev = where == Where::cpu ? fuseops::Device::cpu() : fuseops::Device::cuda(0);
  std::mt19937_64 rng = test_rng();
  for (const RopeSpec& s : specs) {
    const ft::RopeOutcome o = ft::run_rope_check(s, dev, rng());
    EXPECT_TRUE(o.pass()) << ft::describe(s) << ": " << o.detail();
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(All, RopeAccuracy, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<Param>& info) { return param_name(info.param); });

// Model-sized problems on the GPU: several heads per thread, many blocks, the vector path.
TEST(RopeLarge, ModelShapesOnCuda) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng = test_rng();
  std::vector<RopeSpec> specs;
  RopeSpec s = rope_spec(RopeOp::rotary_embedding, DType::bf16, true, 3000, 32, 8, 128, 128);  // Llama-3-8B
  s.max_position = 8192;
  s.theta = 500000;
  specs.push_back(s);
  s = rope_spec(RopeOp::rotary_embedding, DType::bf16, false, 2000, 128, 1, 64, 64);  // DeepSeek-V3 q_pe / k_pe
  s.head_pad = 128;
  s.cache_dtype = DType::f32;
  specs.push_back(s);
  s = rope_spec(RopeOp::mrope, DType::bf16, true, 3000, 32, 4, 128, 128);  // Qwen3-VL
  s.layout = MropeLayout::interleaved;
  s.section = {24, 20, 20};
  specs.push_back(s);
  s = rope_spec(RopeOp::apply_rotary_pos_emb, DType::bf16, true, 2048, 32, 32, 128, 128);  // FlagOS
  s.batch = 2;
  s.position_ids = false;
  s.out_of_place = true;
  s.max_position = 1024;
  specs.push_back(s);
  for (const RopeSpec& spec : specs) {
    const ft::RopeOutcome o = ft::run_rope_check(spec, fuseops::Device::cuda(0), rng());
    EXPECT_TRUE(o.pass()) << ft::describe(spec) << ": " << o.detail();
  }
}

std::string axes_string(MropeLayout layout, std::array<int64_t, 3> section, int64_t pairs) {
  std::string s;
  for (int a : fuseops::reference::mrope_axes(layout, section, pairs)) s += "THW"[a];
  return s;
}

// The golden's axis maps against the strings written out in docs/ops/rope.md (and vLLM's / FlagGems' mrope).
TEST(RopeAxes, GoldenMapsMatchTheDocumentedStrings) {
  std::string qwen3;
  for (int i = 0; i < 20; ++i) qwen3 += "THW";
  EXPECT_EQ(axes_string(MropeLayout::interleaved, {24, 20, 20}, 64), qwen3 + "TTTT");
  EXPECT_EQ(axes_string(MropeLayout::interleaved_glm, {8, 12, 12}, 32), "THWTHWTHWTHWTHWTHWTHWTHWHHWHHWWW");
  EXPECT_EQ(axes_string(MropeLayout::chunked, {2, 3, 1}, 6), "TTHHHW");
  const std::string odd = axes_string(MropeLayout::interleaved, {16, 24, 24}, 64);  // 22 / 21 / 21, not 16 / 24 / 24
  EXPECT_EQ(std::count(odd.begin(), odd.end(), 'T'), 22);
  EXPECT_EQ(std::count(odd.begin(), odd.end(), 'H'), 21);
  EXPECT_EQ(std::count(odd.begin(), odd.end(), 'W'), 21);
}

// Forward then backward gives the input back (the rotation is orthogonal), on every backend present.
TEST(RopeRoundTrip, BackwardUndoesForward) {
  for (Where where : {Where::cpu, Where::cuda}) {
    if (where == Where::cuda && !cuda_available()) continue;
    const int64_t T = 4, H = 2, D = 64, P = 16;
    ft::HostTensor q(DType::f32, {T, H * D}), cache(DType::f32, {P, D}), pos(DType::i64, {T});
    ft::fill_random_seeded(q, ft::Fill::normal, 7);
    const ft::HostTensor q0 = q;
    const std::vector<double> inv = fuseops::reference::rope_inv_freq(10000, D);
    for (int64_t p = 0; p < P; ++p) {
      const std::vector<double> row = fuseops::reference::rope_cache_row(inv, p);
      for (int64_t j = 0; j < D; ++j) cache.set(p, j, static_cast<float>(row[j]));
    }
    for (int64_t t = 0; t < T; ++t) static_cast<int64_t*>(pos.data())[t] = 3 * t + 1;
    std::unique_ptr<ft::DeviceTensor> dq, dc, dp;
    TensorView vq = q.view(), vc = cache.view(), vp = pos.view();
    if (where == Where::cuda) {
      dq = std::make_unique<ft::DeviceTensor>(q);
      dc = std::make_unique<ft::DeviceTensor>(cache);
      dp = std::make_unique<ft::DeviceTensor>(pos);
      vq = dq->view(), vc = dc->view(), vp = dp->view();
    }
    fuseops::rotary_embedding(vp, vq, nullptr, D, vc, true);
    if (dq) {
      ft::device_synchronize();
      dq->copy_to(q);
    }
    double moved = 0;  // the forward rotated (two no-ops would give the input back too)
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < H * D; ++c) moved = std::max(moved, std::fabs(q.get(t, c) - q0.get(t, c)));
    }
    EXPECT_GT(moved, 0.1) << where_name(where);
    fuseops::rotary_embedding_backward(vp, vq, nullptr, D, vc, true);
    if (dq) {
      ft::device_synchronize();
      dq->copy_to(q);
    }
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < H * D; ++c) EXPECT_NEAR(q.get(t, c), q0.get(t, c), 1e-5) << where_name(where) << " " << t;
    }
  }
}

// mrope with [3, T] positions whose token stride is not 1 (a transposed [T, 3] tensor: strides [1, 3]) gives bitwise
// the result of the same positions stored [3, T] contiguous, on every backend present.
TEST(RopeStrides, MropeTokenMajorPositions) {
  for (Where where : {Where::cpu, Where::cuda}) {
    if (where == Where::cuda && !cuda_available()) continue;
    const int64_t T = 7, H = 3, D = 16, P = 50;
    const fuseops::Device dev = where == Where::cpu ? fuseops::Device::cpu() : fuseops::Device::cuda(0);
    ft::HostTensor q(DType::f32, {T, H * D}), cache(DType::f32, {P, D});
    ft::HostTensor by_axis(DType::i64, {3, T}), by_token(DType::i64, {T, 3});
    ft::fill_random_seeded(q, ft::Fill::normal, 11);
    ft::fill_random_seeded(cache, ft::Fill::normal, 12);
    for (int64_t a = 0; a < 3; ++a) {
      for (int64_t t = 0; t < T; ++t) {
        const int64_t p = (7 * t + 13 * a + 5) % P;
        static_cast<int64_t*>(by_axis.data())[a * T + t] = p;
        static_cast<int64_t*>(by_token.data())[t * 3 + a] = p;
      }
    }
    ft::HostTensor out_axis = q, out_token = q;
    std::vector<std::unique_ptr<ft::DeviceTensor>> keep;
    auto place = [&](ft::HostTensor& h) -> void* {
      if (where == Where::cpu) return h.data();
      keep.push_back(std::make_unique<ft::DeviceTensor>(h));
      return keep.back()->data();
    };
    void* qa = place(out_axis);
    void* qt = place(out_token);
    const TensorView c(place(cache), DType::f32, dev, {P, D});
    const TensorView pa(place(by_axis), DType::i64, dev, {3, T});
    const TensorView pt(place(by_token), DType::i64, dev, {3, T}, {1, 3});
    fuseops::mrope(pa, TensorView(qa, DType::f32, dev, {T, H * D}), nullptr, D, D, c, {2, 3, 3}, true);
    fuseops::mrope(pt, TensorView(qt, DType::f32, dev, {T, H * D}), nullptr, D, D, c, {2, 3, 3}, true);
    if (where == Where::cuda) {
      ft::device_synchronize();
      keep[0]->copy_to(out_axis);
      keep[1]->copy_to(out_token);
    }
    EXPECT_NO_THROW(fuseops::check_errors());
    bool rotated = false;
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t j = 0; j < H * D; ++j) {
        ASSERT_EQ(out_token.get(t, j), out_axis.get(t, j)) << where_name(where) << " token " << t << " dim " << j;
        rotated = rotated || out_axis.get(t, j) != q.get(t, j);
      }
    }
    EXPECT_TRUE(rotated) << where_name(where);
  }
}

}  // namespace
}  // namespace fuseops_test

namespace fuseops_test {
namespace {

// Out of place, a token with a bad position is copied bit for bit: NaN payloads and signs included (through a float
// conversion bf16 0x7f81 became 0x7fc1, f16 0x7c01 became 0x7e00). CPU backend; the CUDA kernels store the vectors
// they loaded.
TEST(RopeBadPositions, OutOfPlaceCopyIsBitwise) {
  for (DType dt : {DType::bf16, DType::f16}) {
    constexpr int64_t T = 2, D = 8;
    const std::vector<uint16_t> specials = {0x7f81, 0x7fbf, 0xffff, 0xfe01, 0xff80, 0x7c01, 0x8000, 0x0001};
    std::vector<uint16_t> q(T * D, 0x3c00), k(T * D, 0x3c00), qo(T * D, 0), ko(T * D, 0);
    for (int64_t i = 0; i < D; ++i) q[D + i] = k[D + i] = specials[i];
    std::vector<float> cos(4 * D / 2, 1.0f), sin(4 * D / 2, 0.0f);
    std::vector<int64_t> ids = {0, 99};  // token 1: outside the 4 cache rows
    const fuseops::Device cpu = fuseops::Device::cpu();
    const TensorView pid(ids.data(), DType::i64, cpu, {T});
    fuseops::apply_rotary_pos_emb(TensorView(qo.data(), dt, cpu, {T, 1, D}), TensorView(ko.data(), dt, cpu, {T, 1, D}),
                                  TensorView(q.data(), dt, cpu, {T, 1, D}), TensorView(k.data(), dt, cpu, {T, 1, D}),
                                  TensorView(cos.data(), DType::f32, cpu, {4, D / 2}),
                                  TensorView(sin.data(), DType::f32, cpu, {4, D / 2}), &pid, false);
    EXPECT_THROW(fuseops::check_errors(), fuseops::Error);  // the bad position is reported (and cleared)
    for (int64_t i = 0; i < D; ++i) {
      EXPECT_EQ(qo[D + i], specials[i]) << fuseops::dtype_name(dt) << " q dim " << i;
      EXPECT_EQ(ko[D + i], specials[i]) << fuseops::dtype_name(dt) << " k dim " << i;
    }
  }
}

}  // namespace
}  // namespace fuseops_test
