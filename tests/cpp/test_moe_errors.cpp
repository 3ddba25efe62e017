// Every bad argument of the MoE routing ops raises fuseops::Error naming the op and the argument.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "test_util.h"

namespace fuseops_test {
namespace {

using fuseops::Device;
using fuseops::MoeScoring;

struct Bufs {
  std::vector<float> logits = std::vector<float>(4 * 256), weights = std::vector<float>(4 * 8), bias = std::vector<float>(256);
  std::vector<int32_t> ids = std::vector<int32_t>(4 * 8), src = std::vector<int32_t>(4 * 8);
  std::vector<int32_t> sorted = std::vector<int32_t>(32 + 256 * 63), eids = std::vector<int32_t>(300),
                       total = std::vector<int32_t>(1), map = std::vector<int32_t>(256);
  TensorView L(std::initializer_list<int64_t> s = {4, 256}) { return TensorView(logits.data(), DType::f32, Device::cpu(), s); }
  TensorView W(std::initializer_list<int64_t> s = {4, 8}) { return TensorView(weights.data(), DType::f32, Device::cpu(), s); }
  TensorView I(std::initializer_list<int64_t> s = {4, 8}) { return TensorView(ids.data(), DType::i32, Device::cpu(), s); }
  TensorView S() { return TensorView(src.data(), DType::i32, Device::cpu(), {4, 8}); }
  TensorView B(int64_t n = 256) { return TensorView(bias.data(), DType::f32, Device::cpu(), {n}); }
  TensorView sorted_v(int64_t n = 32 + 256 * 63) { return TensorView(sorted.data(), DType::i32, Device::cpu(), {n}); }
  TensorView eids_v(int64_t n = 300) { return TensorView(eids.data(), DType::i32, Device::cpu(), {n}); }
  TensorView total_v() { return TensorView(total.data(), DType::i32, Device::cpu(), {1}); }
  TensorView map_v(int64_t n = 256) { return TensorView(map.data(), DType::i32, Device::cpu(), {n}); }
};

TEST(MoeErrors, TopkSoftmax) {
  Bufs b;
  const char* op = "topk_softmax";
  EXPECT_NO_THROW(fuseops::topk_softmax(b.W(), b.I(), b.S(), b.L(), true));
  TensorView half(b.logits.data(), DType::i32, Device::cpu(), {4, 256});
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W(), b.I(), b.S(), half, true), op, "gating_output");
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W(), b.I(), b.S(), b.L({1024}), true), op, "gating_output");
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W(), b.I(), b.S(), b.L({1, 1025}), true), op, "gating_output");
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W({3, 8}), b.I(), b.S(), b.L(), true), op, "topk_weights");
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W({1, 33}), b.I({1, 33}), b.S(), b.L({1, 256}), true), op, "topk_weights");
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W({4, 3}), b.I({4, 3}), b.S(), b.L({4, 2}), true), op, "topk_weights");
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W(), b.I({4, 7}), b.S(), b.L(), true), op, "topk_ids",
                   "[T, k] (T of gating_output, k of topk_weights) = [4, 8], got [4, 7]");
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W({3, 8}), b.I(), b.S(), b.L(), true), op, "topk_weights",
                   "[T, k] (T of gating_output) = [4, 8], got [3, 8]");
  TensorView fids(b.ids.data(), DType::f32, Device::cpu(), {4, 8});
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W(), fids, b.S(), b.L(), true), op, "topk_ids");
  TensorView i64src(b.src.data(), DType::i64, Device::cpu(), {4, 4});
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W(), b.I(), i64src, b.L(), true), op, "token_expert_indices");
  TensorView bias = b.B(255);
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W(), b.I(), b.S(), b.L(), true, &bias), op, "correction_bias");
  TensorView alias(b.logits.data(), DType::f32, Device::cpu(), {4, 8});
  EXPECT_ARG_ERROR(fuseops::topk_softmax(alias, b.I(), b.S(), b.L(), true), op, "topk_weights");
  TensorView strided(b.logits.data(), DType::f32, Device::cpu(), {4, 128}, {256, 2});
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W(), b.I(), b.S(), strided, true), op, "gating_output");
  TensorView on_gpu = b.I();
  on_gpu.device = Device::cuda(0);
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W(), on_gpu, b.S(), b.L(), true), op, "topk_ids");
}

// A dtype field set outside the enum (a caller filling TensorView from a foreign dtype code) is named with the op and
// the argument; dtype_size() had thrown "dtype: unknown dtype code 9", which names neither.
TEST(MoeErrors, DtypeCodeOutsideTheEnum) {
  Bufs b;
  TensorView logits = b.L();
  logits.dtype = static_cast<DType>(9);
  EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W(), b.I(), b.S(), logits, true), "topk_softmax", "gating_output",
                   "dtype f32, f16, bf16, i32 or i64", "got dtype code 9");
  TensorView ids = b.I();
  ids.dtype = static_cast<DType>(-1);
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(), b.eids_v(), b.total_v(), ids, 256, 16),
                   "moe_align_block_size", "topk_ids", "got dtype code -1");
}

TEST(MoeErrors, GroupedTopk) {
  Bufs b;
  const char* op = "grouped_topk";
  TensorView bias = b.B();
  EXPECT_NO_THROW(fuseops::grouped_topk(b.W(), b.I(), b.L(), &bias, 8, 4, true, 2.5));
  EXPECT_ARG_ERROR(fuseops::grouped_topk(b.W(), b.I(), b.L(), &bias, 7, 4, true, 2.5), op, "n_group");
  EXPECT_ARG_ERROR(fuseops::grouped_topk(b.W(), b.I(), b.L(), &bias, 64, 4, true, 2.5), op, "n_group");
  EXPECT_ARG_ERROR(fuseops::grouped_topk(b.W(), b.I(), b.L(), &bias, 8, 9, true, 2.5), op, "topk_group");
  EXPECT_ARG_ERROR(fuseops::grouped_topk(b.W(), b.I(), b.L(), &bias, 8, 0, true, 2.5), op, "topk_group");
  EXPECT_ARG_ERROR(fuseops::grouped_topk(b.W(), b.I(), b.L({4, 16}), &bias, 8, 2, true, 2.5), op, "bias");
  TensorView small_bias = b.B(16);
  EXPECT_ARG_ERROR(fuseops::grouped_topk(b.W(), b.I(), b.L({4, 16}), &small_bias, 8, 2, true, 2.5), op, "topk_weights",
                   "k = shape[1] <= topk_group * E / n_group = 4", "got k = ");
  EXPECT_ARG_ERROR(fuseops::grouped_topk(b.W(), b.I(), b.L(), &bias, 8, 4, true, INFINITY), op,
                   "routed_scaling_factor");
  EXPECT_ARG_ERROR(fuseops::grouped_topk(b.W(), b.I(), b.L(), &bias, 8, 4, true, 1e39), op, "routed_scaling_factor",
                   "got 1e+39");  // above fp32's range, printed as the number given
  EXPECT_ARG_ERROR(fuseops::grouped_topk(b.W(), b.I(), b.L(), &bias, 8, 4, true, 1e-300), op,
                   "routed_scaling_factor", "rounding to 0", "got 1e-300");  // would silently scale every weight to 0
  EXPECT_ARG_ERROR(fuseops::grouped_topk(b.W(), b.I(), b.L(), &bias, 8, 4, true, 1.0, static_cast<MoeScoring>(7)), op,
                   "scoring");
  EXPECT_ARG_ERROR(fuseops::grouped_topk(b.W(), b.I(), b.L({256}), &bias, 8, 4, true, 1.0), op, "scores");
}

TEST(MoeErrors, AlignBlockSize) {
  Bufs b;
  const char* op = "moe_align_block_size";
  EXPECT_NO_THROW(fuseops::moe_align_block_size(b.sorted_v(), b.eids_v(), b.total_v(), b.I(), 256, 64));
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(), b.eids_v(), b.total_v(), b.I(), 0, 64), op, "num_experts");
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(), b.eids_v(), b.total_v(), b.I(), 4097, 64), op,
                   "num_experts");
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(), b.eids_v(), b.total_v(), b.I(), 256, 0), op, "block_size");
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(100), b.eids_v(), b.total_v(), b.I(), 256, 64), op,
                   "sorted_token_ids");
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(), b.eids_v(10), b.total_v(), b.I(), 256, 64), op,
                   "expert_ids");
  TensorView two(b.total.data(), DType::i32, Device::cpu(), {2});
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(), b.eids_v(), b.eids_v(2), b.I(), 256, 64), op,
                   "num_tokens_post_pad");
  (void)two;
  TensorView fids(b.ids.data(), DType::f32, Device::cpu(), {4, 8});
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(), b.eids_v(), b.total_v(), fids, 256, 64), op, "topk_ids");
  // the int32 schedule too long: on its padding's larger factor where num_experts * (block_size - 1) alone is too
  // long (the ids are few), else on topk_ids (a view that is never read: the sizes are checked first)
  const TensorView few = b.I({512, 8});
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(), b.eids_v(), b.total_v(), few, 4096, 1 << 20), op,
                   "block_size", "got 1048576");
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(), b.eids_v(), b.total_v(), b.I({(1 << 28) - 1, 8}), 256,
                                                 64),
                   op, "topk_ids", "an int32 schedule", "got [268435455, 8]");
  TensorView map = b.map_v(255);
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(), b.eids_v(), b.total_v(), b.I(), 256, 64, &map), op,
                   "expert_map");
  // the two inputs may share memory (topk_ids read from inside expert_map), as every op's inputs may: the same
  // result as from separate copies (it was refused as an overlap)
  {
    std::vector<int32_t> shared(256), ids_copy(32), s1(32 + 256 * 63), s2(s1.size()), e1(300), e2(300), t1(1), t2(1);
    for (int32_t i = 0; i < 256; ++i) shared[i] = i;  // identity map; its first 32 entries are the ids 0 .. 31
    std::copy(shared.begin(), shared.begin() + 32, ids_copy.begin());
    const auto v = [](std::vector<int32_t>& x, std::initializer_list<int64_t> shape) {
      return TensorView(x.data(), DType::i32, Device::cpu(), shape);
    };
    const TensorView map_shared = v(shared, {256});
    EXPECT_NO_THROW(fuseops::moe_align_block_size(v(s1, {32 + 256 * 63}), v(e1, {300}), v(t1, {1}), v(shared, {4, 8}),
                                                  256, 64, &map_shared));
    std::vector<int32_t> map_copy = shared;
    const TensorView map_apart = v(map_copy, {256});
    fuseops::moe_align_block_size(v(s2, {32 + 256 * 63}), v(e2, {300}), v(t2, {1}), v(ids_copy, {4, 8}), 256, 64,
                                  &map_apart);
    EXPECT_EQ(s1, s2);
    EXPECT_EQ(e1, e2);
    EXPECT_EQ(t1, t2);
  }
  TensorView overlap(b.sorted.data() + 10, DType::i32, Device::cpu(), {300});
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(), overlap, b.total_v(), b.I(), 256, 64), op, "expert_ids");
  TensorView strided(b.sorted.data(), DType::i32, Device::cpu(), {2048}, {2});
  EXPECT_ARG_ERROR(fuseops::moe_align_block_size(strided, b.eids_v(), b.total_v(), b.I(), 256, 64), op,
                   "sorted_token_ids");
}

TEST(MoeErrors, MoeRoute) {
  Bufs b;
  const char* op = "moe_route";
  fuseops::MoeRouterConfig c;
  c.scoring = MoeScoring::sigmoid;
  c.n_group = 8;
  c.topk_group = 4;
  EXPECT_NO_THROW(fuseops::moe_route(b.W(), b.I(), b.sorted_v(), b.eids_v(), b.total_v(), b.L(), nullptr, c, 64));
  EXPECT_ARG_ERROR(fuseops::moe_route(b.W(), b.I(), b.sorted_v(), b.eids_v(), b.total_v(), b.L(), nullptr, c, 0), op,
                   "block_size");
  c.n_group = 3;
  EXPECT_ARG_ERROR(fuseops::moe_route(b.W(), b.I(), b.sorted_v(), b.eids_v(), b.total_v(), b.L(), nullptr, c, 64), op,
                   "n_group");
  c.n_group = 8;
  EXPECT_ARG_ERROR(fuseops::moe_route(b.W(), b.I(), b.sorted_v(20), b.eids_v(), b.total_v(), b.L(), nullptr, c, 64), op,
                   "sorted_token_ids");
}

// A first input whose fields are corrupt (a rank its arrays cannot hold, a negative dim: the fields are public) is
// named itself, never read past its arrays, and never reported against a valid argument compared with its dims.
TEST(MoeErrors, MalformedFirstInputNamedItself) {
  Bufs b;
  fuseops::MoeRouterConfig c;
  c.n_group = 8;
  c.topk_group = 4;
  TensorView bias = b.B();
  for (int bad = 0; bad < kMalformedWays; ++bad) {
    SCOPED_TRACE(bad);
    // how 2: T = -4 (topk_weights' [T, k] would be [-4, 8]; moe_align_sizes would get numel -32)
    const TensorView logits = malformed(b.L(), bad, 0), ids = malformed(b.I(), bad, 0);
    const std::string got = malformed_message(bad);
    EXPECT_ARG_ERROR(fuseops::topk_softmax(b.W(), b.I(), b.S(), logits, true, &bias), "topk_softmax",
                     "gating_output", got);
    EXPECT_ARG_ERROR(fuseops::grouped_topk(b.W(), b.I(), logits, &bias, 8, 4, true, 1.0), "grouped_topk", "scores",
                     got);
    EXPECT_ARG_ERROR(fuseops::moe_route(b.W(), b.I(), b.sorted_v(), b.eids_v(), b.total_v(), logits, &bias, c, 64),
                     "moe_route", "gating_output", got);
    EXPECT_ARG_ERROR(fuseops::moe_align_block_size(b.sorted_v(), b.eids_v(), b.total_v(), ids, 256, 64),
                     "moe_align_block_size", "topk_ids", got);
  }
}

TEST(MoeErrors, AlignSizes) {
  EXPECT_EQ(fuseops::moe_align_sizes(16, 8, 4).sorted_len, 16 + 8 * 3);
  EXPECT_EQ(fuseops::moe_align_sizes(17, 8, 4, true).sorted_len, 44);  // 17 + 24 = 41 -> 44
  EXPECT_EQ(fuseops::moe_align_sizes(2, 256, 64).sorted_len, 128);     // numel < E: numel * block_size
  EXPECT_EQ(fuseops::moe_align_sizes(2, 256, 64).blocks, 2);
  EXPECT_EQ(fuseops::moe_align_sizes(0, 256, 64).sorted_len, 0);
  EXPECT_THROW(fuseops::moe_align_sizes(1, 0, 64), fuseops::Error);
  const char* op = "moe_align_sizes";
  EXPECT_ARG_ERROR(fuseops::moe_align_sizes(-5, 8, 4), op, "numel");
  EXPECT_ARG_ERROR(fuseops::moe_align_sizes(5, 0, 4), op, "num_experts");
  EXPECT_ARG_ERROR(fuseops::moe_align_sizes(5, 8, 0), op, "block_size");
  // Sizes past int64: an error, never a negative (wrapped) size.
  constexpr int64_t max = std::numeric_limits<int64_t>::max();
  EXPECT_ARG_ERROR(fuseops::moe_align_sizes(max, 4096, 1 << 20), op, "numel", "2^63");
  EXPECT_ARG_ERROR(fuseops::moe_align_sizes(max / 2, max / 2 - 1, 3), op, "num_experts", "2^63",
                   "got " + std::to_string(max / 2 - 1));  // the padding's larger factor
  EXPECT_ARG_ERROR(fuseops::moe_align_sizes(int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 30), op, "num_experts",
                   "2^63");
  // fewer ids than experts: the length is numel * block_size (the cap), however large num_experts is
  EXPECT_EQ(fuseops::moe_align_sizes(1, max, 3).sorted_len, 3);
  EXPECT_EQ(fuseops::moe_align_sizes(10, int64_t{1} << 40, int64_t{1} << 30).sorted_len, int64_t{10} << 30);
  EXPECT_EQ(fuseops::moe_align_sizes(0, 2, max).sorted_len, 0);
  EXPECT_EQ(fuseops::moe_align_sizes(1, max, 2, true).sorted_len, 2);
  // and its overflow names the larger of numel and block_size
  EXPECT_ARG_ERROR(fuseops::moe_align_sizes(4, 8, max), op, "block_size", "numel * block_size where numel < num_experts");
  EXPECT_ARG_ERROR(fuseops::moe_align_sizes(int64_t{1} << 40, int64_t{1} << 41, int64_t{1} << 30), op, "numel", "2^63");
  // the padding's larger factor: block_size here (num_experts 8 named it, "got 8")
  EXPECT_ARG_ERROR(fuseops::moe_align_sizes(100, 8, max), op, "block_size", "2^63", "got " + std::to_string(max));
  // fits, its round-up does not (the message says so: the sum alone holds)
  EXPECT_ARG_ERROR(fuseops::moe_align_sizes(max - 7, 1, 8, true), op, "numel", "rounded up to block_size");
  // the largest sum whose round-up fits, INT64_MAX - (block_size - 1) (its round-up added block_size first, which
  // wrapped: UBSan)
  EXPECT_EQ(fuseops::moe_align_sizes(max - 2, 1, 2, true).sorted_len, max - 1);
  EXPECT_EQ(fuseops::moe_align_sizes(max, 1, 1, true).sorted_len, max);
  const auto edge = fuseops::moe_align_sizes(max - 7, 1, 8);                      // fits exactly
  EXPECT_EQ(edge.sorted_len, max);
  EXPECT_EQ(edge.blocks, max / 8 + 1);
  const auto few = fuseops::moe_align_sizes(2, max / 8, 8);  // numel < num_experts: numel * block_size
  EXPECT_EQ(few.sorted_len, 16);
}

}  // namespace
}  // namespace fuseops_test
