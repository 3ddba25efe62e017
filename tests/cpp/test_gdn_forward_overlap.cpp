// The overlapped form of the CUDA forward (chunk_gated_delta_rule_overlap_applies in src/ops/gdn_forward_impl.h; off
// unless FUSEOPS_GDN_OVERLAP=1, turned on here by the testing hook: the warp intra kernel as a persistent grid that
// walks the chunks by their index within the sequence and sets a flag per (chunk, value head); the fused-output fwd_h
// of 64 columns launched beside it, polling the flags) against the same forward with the form off: o and final_state
// byte for byte (the same kernels' arithmetic; only the walk, the tile buffers and the waits differ), and against the
// float64 golden. Each case asserts whether the form ran (the launch counter) against the rule's answer on this GPU, so
// a dispatch change cannot make the comparison vacuous. CUDA only.
#include <string>
#include <vector>

#include "gdn_forward_test_util.h"
#if defined(FUSEOPS_WITH_CUDA)
#include "cuda/launch.h"
#include "ops/gdn_forward_impl.h"
#endif

namespace fuseops_test::gdn_forward {
namespace {

#if defined(FUSEOPS_WITH_CUDA)
namespace cuda = fuseops::detail::cuda;
constexpr DType f16 = DType::f16, bf16 = DType::bf16;

/// The forward's launches take the overlapped form in `mode` (its intra kernel on `intra_blocks` blocks, 0: one per SM)
/// until the guard's scope ends, then as FUSEOPS_GDN_OVERLAP says (off by default).
struct OverlapMode {
  explicit OverlapMode(cuda::OverlapForTesting mode, int intra_blocks = 0) {
    cuda::set_overlap_for_testing(mode);
    cuda::set_overlap_intra_blocks_for_testing(intra_blocks);
  }
  ~OverlapMode() {
    cuda::set_overlap_for_testing(cuda::OverlapForTesting::env);
    cuda::set_overlap_intra_blocks_for_testing(0);
  }
  OverlapMode(const OverlapMode&) = delete;
  OverlapMode& operator=(const OverlapMode&) = delete;
};

/// Whether the form should run for `s` on device 0 when turned on: fwd_h's 64-column blocks (N HV V / 64) fill one
/// wave of at least 128, sm_90a code with programmatic launches, the switches of the kernels it joins on (the rule's
/// register and shared-memory fit holds on an H200; on another GPU a mismatch here fails the test, which is then the
/// place to look).
bool form_expected(const Spec& s) {
  namespace fd = fuseops::detail;
  const int64_t blocks = s.N() * s.HV * (s.V / 64);
  bool on = fd::runs_sm90a_code(0) && fd::pdl_enabled(0) && blocks >= 128 && blocks <= fd::sm_count(0);
  for (const char* sw :
       {"FUSEOPS_GDN_FWD_HO", "FUSEOPS_GDN_INTRA_WARP", "FUSEOPS_GDN_FWD_H_TMA", "FUSEOPS_GDN_FWD_H_WGMMA"}) {
    on = on && !fd::env_switched_off(sw);
  }
  return on;
}

/// chunk_gated_delta_rule of `s` with the form (where it applies) and without it: the launch count, o and final_state
/// byte for byte, and the form's run against the golden. `intra_blocks` > 0: the form's intra kernel on that many
/// blocks only, so that fwd_h's blocks start on free SMs and wait on flags not yet set.
void expect_same_bytes(const Spec& s, std::mt19937_64& rng, int intra_blocks = 0) {
  SCOPED_TRACE(s.describe() + (intra_blocks > 0 ? ", intra blocks " + std::to_string(intra_blocks) : ""));
  const Inputs in = make_inputs(s, rng);
  const int64_t before = cuda::overlap_launches_for_testing();
  const Outputs form = [&] {
    const OverlapMode on(cuda::OverlapForTesting::on, intra_blocks);
    return run_chunk(Where::cuda, s, in);
  }();
  EXPECT_EQ(cuda::overlap_launches_for_testing() - before, form_expected(s) ? 1 : 0) << "the launch rule";
  const Outputs off = [&] {
    const OverlapMode never(cuda::OverlapForTesting::off);
    return run_chunk(Where::cuda, s, in);
  }();
  EXPECT_EQ(cuda::overlap_launches_for_testing() - before, form_expected(s) ? 1 : 0) << "the form off";
  EXPECT_TRUE(same_bytes(form.o, off.o)) << "o";
  EXPECT_TRUE(same_bytes(form.final_state, off.final_state)) << "final_state";
  const fuseops::reference::RecurrenceGolden gold = golden(s, in, /*round_normalized=*/true);
  const double limit = forward_limit(s, in);
  EXPECT_TRUE(matches(form.o, gold.o, s.dtype, "o", limit));
  EXPECT_TRUE(matches(form.final_state, gold.final_state, s.dtype, "final_state", limit));
}

// K = V = 128 with N HV = 64 (128 fwd_h blocks, the form's smallest grid): a varlen batch of 8 with empty, 1-token,
// chunk-edge and partial sequences (the flags' per-sequence bases, units past a sequence's chunks skipped); batch rows
// in f16 without an initial state; Qwen3-Next's heads (16 / 32) with l2 normalisation in the kernel, i64 cu_seqlens and
// strong decays; 16 / 64 heads on one sequence; 64 sequences of one value head (0-200 tokens, the longest sequence
// known only on the device). And N HV = 72 (144 blocks, more than an H200's SMs): the form must not run. The first
// two again with the intra kernel on 2 blocks (fwd_h's blocks then poll flags that are not yet set).
TEST(GdnOverlap, SameBytesAsTheFormOff) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  std::mt19937_64 rng = test_rng();
  std::vector<Spec> specs;
  specs.push_back(varlen({0, 1, 63, 64, 65, 130, 200, 1000}, 2, 8, 128, 128, bf16));
  Spec rows = fixed(4, 300, 4, 16, 128, 128, f16);
  rows.has_h0 = false;
  specs.push_back(rows);
  Spec qwen = varlen({300, 517}, 16, 32, 128, 128, bf16);
  qwen.l2norm = true;
  qwen.cu_dtype = DType::i64;
  qwen.decay = Decay::strong;
  specs.push_back(qwen);
  specs.push_back(fixed(1, 1000, 16, 64, 128, 128, bf16));
  std::vector<int64_t> lens(64);
  std::uniform_int_distribution<int64_t> len(0, 200);
  for (int64_t& n : lens) n = len(rng);
  specs.push_back(varlen(lens, 1, 1, 128, 128, bf16));
  specs.push_back(varlen({100, 200, 300, 90, 64, 1, 77, 128, 5}, 2, 8, 128, 128, bf16));
  for (Spec& s : specs) {
    s.aligned = true;
    expect_same_bytes(s, rng);
    if (HasFailure()) return;
  }
  for (int i = 0; i < 2; ++i) {
    expect_same_bytes(specs[i], rng, /*intra_blocks=*/2);
    if (HasFailure()) return;
  }
}

// A malformed cu_seqlens under the form: the intra kernel and fwd_h read the same clamped bounds (sequence_bounds), so
// every flag fwd_h polls is set and the forward returns; the error is recorded, and nothing outside o and final_state
// is written (run_chunk checks their guards and the inputs').
TEST(GdnOverlap, MalformedCuSeqlens) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  if (fuseops::debug_mode()) GTEST_SKIP() << "FUSEOPS_DEBUG: the op raises at once, before the kernels";
  std::mt19937_64 rng = test_rng();
  Spec s = varlen({10, 70, 0, 64, 200, 1, 130, 25}, 2, 8, 128, 128, bf16);
  s.aligned = true;
  const Inputs in = make_inputs(s, rng);
  for (const std::vector<int64_t>& cu : {std::vector<int64_t>{0, 80, 70, 144, 144, 300, 301, 431, 500},
                                         std::vector<int64_t>{0, 10, 80, 80, 144, 344, 345, 475, 400},
                                         std::vector<int64_t>{5, 10, 80, 80, 144, 344, 345, 475, 500}}) {
    Inputs bad = in;
    bad.cu = cu;
    fuseops::clear_errors();
    const int64_t before = cuda::overlap_launches_for_testing();
    {
      const OverlapMode on(cuda::OverlapForTesting::on);
      run_chunk(Where::cuda, s, bad);
    }
    EXPECT_EQ(cuda::overlap_launches_for_testing() - before, form_expected(s) ? 1 : 0);
    const std::string msg = take_device_error();
    EXPECT_NE(msg.find("cu_seqlens"), std::string::npos) << msg;
  }
}
#endif

}  // namespace
}  // namespace fuseops_test::gdn_forward
