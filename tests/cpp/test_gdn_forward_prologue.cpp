// The prologue form of the forward's warp intra kernel (chunk_gated_delta_rule_fwd_intra_prologue: the l2norm of q
// and k and the chunk-local cumsum of g inside the intra kernel, no prologue launch) against the prologue kernel and
// the intra kernel it stands in for: chunk_gated_delta_rule's o and final_state byte for byte, and against the float64
// golden. Each case asserts whether the form ran (its launch counter), so a dispatch change cannot make the comparison
// vacuous. CUDA only: the CPU backend has one path, which the other GdnForward tests run.
#include <cstdlib>
#include <string>
#include <vector>

#include "gdn_forward_test_util.h"
#if defined(FUSEOPS_WITH_CUDA)
#include "core/env.h"
#include "cuda/launch.h"
#include "fuseops/error.h"
#include "ops/gdn_forward_impl.h"
#endif

namespace fuseops_test::gdn_forward {
namespace {

#if defined(FUSEOPS_WITH_CUDA)
namespace cuda = fuseops::detail::cuda;
using cuda::KktWarpForTesting;
constexpr DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;

struct Case {
  Spec s;
  bool applies;        ///< the prologue form runs (with the warp kernel's testing mode `always`)
  bool golden = true;  ///< also against the float64 golden (the multi-wave grid: bytes only, its golden takes seconds)
};

/// The form at both of its row widths (K = 128: 16 lanes per row, K = 64: 8), f16 and bf16; q and k rows shared out
/// over G = 1, 2, 3, 4 and 16 value heads per key head (G = 3: 64 rows do not split evenly; G = 16: four rows per
/// unit); batch rows with a partial last chunk; varlen with empty, 1-token, chunk-edge and long sequences (int32 and
/// int64 cu_seqlens: a sequence's partial chunk inside the batch, its rows the next chunk's neighbours); g in bf16 and
/// f16 as well as f32; strong, zero and mixed decays; no initial state; padded rows (strides not the contiguous ones).
/// Cases the rule must leave to the prologue kernel: no l2norm, K = 96 and K = 32 (no one-vector-per-lane form), f32
/// q / k (no warp kernel), misaligned rows.
std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](Spec s, bool applies = true, bool golden = true) {
    s.l2norm = true;
    s.aligned = true;
    out.push_back({s, applies, golden});
  };
  add(fixed(2, 200, 2, 8, 128, 128, bf16));
  add(fixed(1, 130, 3, 3, 64, 64, f16));
  add(fixed(1, 150, 2, 6, 128, 64, bf16));
  add(fixed(1, 100, 1, 16, 64, 128, bf16));
  Spec v = varlen({0, 1, 63, 64, 65, 130, 0, 200}, 2, 4, 128, 128, f16);
  v.gate_dtype = bf16;
  add(v);
  v.cu_dtype = DType::i64;
  v.decay = Decay::mixed;
  v.gate_dtype = f16;
  add(v);
  Spec strong = fixed(2, 129, 2, 8, 128, 128, bf16);
  strong.decay = Decay::strong;
  add(strong);
  Spec zero = fixed(1, 150, 2, 4, 64, 64, f16);
  zero.decay = Decay::zero;
  zero.has_h0 = false;
  add(zero);
  Spec padded = varlen({70, 5, 128}, 1, 2, 128, 128, bf16);
  padded.padded = true;
  add(padded);
  // more units than resident warps: each warp walks several units (its tile, g / beta, rstd rows and mbarrier reused)
  add(fixed(1, 64 * 100, 2, 32, 128, 128, bf16), true, /*golden=*/false);
  add(fixed(1, 64 * 100 - 7, 2, 32, 64, 64, f16), true, /*golden=*/false);
  add(fixed(1, 130, 2, 4, 96, 128, bf16), false);
  add(fixed(1, 130, 2, 4, 32, 64, bf16), false);
  add(fixed(1, 130, 2, 4, 128, 128, f32), false);
  Spec plain = fixed(1, 130, 2, 4, 128, 128, bf16);
  plain.aligned = true;
  out.push_back({plain, false, true});  // no l2norm: nothing to fold in
  Spec misaligned = fixed(1, 130, 2, 4, 128, 128, bf16);
  misaligned.l2norm = true;
  out.push_back({misaligned, false, true});
  return out;
}

/// The prologue form for the launches that follow (`on`: where it applies; `off`: never) until the guard's scope ends,
/// then FUSEOPS_GDN_INTRA_PROLOGUE's setting again.
struct PrologueMode {
  explicit PrologueMode(cuda::IntraPrologueForTesting mode) { cuda::set_intra_prologue_for_testing(mode); }
  ~PrologueMode() { cuda::set_intra_prologue_for_testing(cuda::IntraPrologueForTesting::env); }
  PrologueMode(const PrologueMode&) = delete;
  PrologueMode& operator=(const PrologueMode&) = delete;
};

/// The form's launches expected of one forward that `applies` under the rule, with the form turned on (an sm_90+
/// kernel).
int64_t expected(bool applies) { return applies && fuseops::detail::is_sm90_or_newer(0) ? 1 : 0; }

/// o and final_state (and the workspaces, where given) of runs with the form on and off, byte for byte.
void expect_same_bytes(const Outputs& on, const Outputs& off, const HostTensor* ws_on = nullptr,
                       const HostTensor* ws_off = nullptr) {
  EXPECT_TRUE(same_bytes(on.o, off.o)) << "o";
  EXPECT_TRUE(same_bytes(on.final_state, off.final_state)) << "final_state";
  // the whole workspace, poisoned alike before both runs: qn, kn, the cumsum, w, u (and what fwd_h wrote)
  if (ws_on) {
    EXPECT_TRUE(same_bytes(*ws_on, *ws_off)) << "workspace";
  }
}

class GdnIntraPrologue : public ::testing::Test {
 protected:
  void SetUp() override { FUSEOPS_SKIP_WITHOUT_CUDA(); }
};

TEST_F(GdnIntraPrologue, SameBytesAsPrologueKernel) {
  std::mt19937_64 rng = test_rng();
  const IntraWarpMode always(KktWarpForTesting::always);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.s.describe());
    const Inputs in = make_inputs(c.s, rng);
    const int64_t launches = cuda::intra_prologue_launches_for_testing();
    HostTensor ws_on, ws_off;
    Outputs on, off;
    {
      const PrologueMode mode(cuda::IntraPrologueForTesting::on);
      on = run_chunk(Where::cuda, c.s, in, &ws_on);
    }
    EXPECT_EQ(cuda::intra_prologue_launches_for_testing() - launches, expected(c.applies)) << "the launch rule";
    {
      const PrologueMode mode(cuda::IntraPrologueForTesting::off);
      const int64_t off_launches = cuda::intra_prologue_launches_for_testing();
      off = run_chunk(Where::cuda, c.s, in, &ws_off);
      EXPECT_EQ(cuda::intra_prologue_launches_for_testing(), off_launches) << "the testing switch";
    }
    expect_same_bytes(on, off, &ws_on, &ws_off);
    if (!c.golden) continue;
    const fuseops::reference::RecurrenceGolden gold = golden(c.s, in, /*round_normalized=*/true);
    const double limit = forward_limit(c.s, in);
    EXPECT_TRUE(matches(on.o, gold.o, c.s.dtype, "o", limit));
    EXPECT_TRUE(matches(on.final_state, gold.final_state, c.s.dtype, "final_state", limit));
    if (HasFailure()) return;
  }
}

// The launch rule without the testing mode: a grid of more than four units per SM takes the form (the same bytes as
// without it), one of at most four does not (the block kernel and the prologue kernel run);
// FUSEOPS_GDN_INTRA_WARP=0 keeps both off the warp kernel, =always puts both on it.
TEST_F(GdnIntraPrologue, LaunchRule) {
  std::mt19937_64 rng = test_rng();
  const PrologueMode form_on(cuda::IntraPrologueForTesting::on);
  const char* env = std::getenv("FUSEOPS_GDN_INTRA_WARP");
  const bool warp_on = !fuseops::detail::env_switched_off("FUSEOPS_GDN_INTRA_WARP");
  const bool always = env != nullptr && std::string(env) == "always";
  const int64_t sms = fuseops::detail::sm_count(0);
  Spec big = varlen(std::vector<int64_t>(8, 64 * ((4 * sms) / 64 + 8)), 2, 8, 128, 128, bf16);
  Spec small = varlen({64, 64}, 2, 8, 128, 128, bf16);
  for (Spec* s : {&big, &small}) {
    s->l2norm = true;
    s->aligned = true;
  }
  int64_t launches = cuda::intra_prologue_launches_for_testing();
  const Inputs in = make_inputs(big, rng);
  const Outputs on = run_chunk(Where::cuda, big, in);
  EXPECT_EQ(cuda::intra_prologue_launches_for_testing() - launches, expected(warp_on)) << big.describe();
  Outputs off;
  {
    const PrologueMode form_off(cuda::IntraPrologueForTesting::off);
    off = run_chunk(Where::cuda, big, in);
  }
  expect_same_bytes(on, off);
  launches = cuda::intra_prologue_launches_for_testing();
  run_chunk(Where::cuda, small, make_inputs(small, rng));
  EXPECT_EQ(cuda::intra_prologue_launches_for_testing() - launches, expected(always)) << small.describe();
}

// A decreasing cu_seqlens through the form: no access outside the tensors and the workspace (guards), the fault
// recorded against cu_seqlens.
TEST_F(GdnIntraPrologue, MalformedCuSeqlensRecorded) {
  if (fuseops::debug_mode()) GTEST_SKIP() << "FUSEOPS_DEBUG: the op raises before the kernel";
  std::mt19937_64 rng = test_rng();
  const IntraWarpMode always(KktWarpForTesting::always);
  const PrologueMode form_on(cuda::IntraPrologueForTesting::on);
  Spec v = varlen({10, 70, 0, 64}, 2, 4, 128, 128, bf16);
  v.l2norm = true;
  v.aligned = true;
  Inputs bad = make_inputs(v, rng);
  bad.cu = {0, 80, 70, 144, 144};
  fuseops::clear_errors();
  const int64_t launches = cuda::intra_prologue_launches_for_testing();
  HostTensor ws;  // its guards checked too
  run_chunk(Where::cuda, v, bad, &ws);
  EXPECT_EQ(cuda::intra_prologue_launches_for_testing() - launches, expected(true));
  const std::string msg = take_device_error();
  EXPECT_NE(msg.find("cu_seqlens"), std::string::npos) << msg;
}
#endif

}  // namespace
}  // namespace fuseops_test::gdn_forward
