// The warp-per-unit form of the forward's intra-chunk kernel (src/cuda/gdn_intra_fwd_warp.cu: chunk 64, f16 / bf16
// k and v with K, V <= 128 in 16-byte rows) against the block kernel it stands in for: chunk_gated_delta_rule's o and
// final_state byte for byte (w and u feed both), and against the float64 golden. Each case asserts which kernel ran
// (the launch counter), so a dispatch change cannot make the comparison vacuous; LaunchRule checks which grids the
// rule gives it. CUDA only: the CPU backend has one path, which the other GdnForward tests run.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gdn_forward_test_util.h"
#if defined(FUSEOPS_WITH_CUDA)
#include "cuda/launch.h"
#include "ops/gdn_forward_impl.h"
#include "ops/gdn_validate.h"
#endif

namespace fuseops_test::gdn_forward {
namespace {

#if defined(FUSEOPS_WITH_CUDA)
namespace cuda = fuseops::detail::cuda;
using cuda::KktWarpForTesting;
using gdn::Placed;
constexpr DType f16 = DType::f16, bf16 = DType::bf16;

/// The forward's intra launches take `mode` until the guard's scope ends, then the launch rule again.
struct IntraWarpMode {
  explicit IntraWarpMode(KktWarpForTesting mode) { cuda::set_intra_warp_for_testing(mode); }
  ~IntraWarpMode() { cuda::set_intra_warp_for_testing(KktWarpForTesting::rule); }
  IntraWarpMode(const IntraWarpMode&) = delete;
  IntraWarpMode& operator=(const IntraWarpMode&) = delete;
};

struct Case {
  Spec s;
  bool applies;  ///< the warp kernel can run (testing mode `always`; the launch rule also looks at the grid)
  bool golden;   ///< also against the float64 golden (the large walk: bytes only, its golden takes seconds)
};

/// Partial last chunks, batch rows, varlen with empty / 1-token / chunk-edge sequences (int32 and int64
/// cu_seqlens), grouped heads (G = 1 .. 16), K != V, K and V not multiples of 16 or 64 (the tensor maps' zero fill
/// pads the boxes), rows padded to 16-byte strides (the maps' strides not the contiguous ones), chunk lengths at the
/// inverse's block edges (16, 32, 33, 48), strong / extreme / zero / mixed decays, no initial state, l2 normalisation
/// in the kernel, scale 0.7; a grid with more units than resident warps (each warp walks several, its region and
/// mbarrier reused); grids of fewer warps per block (few units). The stores: whole chunks and the last chunk of T by
/// tensor-map copies (the map clips rows past T), a sequence's partial last chunk inside a varlen batch by the lanes.
/// Cases the rule must leave to the block kernel: K not a multiple of 8, head dims below 32 (f32 intermediates), chunk
/// 32, K = V = 256, misaligned rows.
std::vector<Case> cases() {
  std::vector<Case> out;
  auto add = [&](Spec s, bool applies = true, bool golden = true) {
    s.aligned = s.aligned || applies;
    out.push_back({s, applies, golden});
  };
  add(fixed(1, 300, 4, 64, 128, 128, bf16));
  Spec v = varlen({0, 1, 63, 64, 65, 130, 0, 200}, 2, 16, 128, 128, f16);
  add(v);
  v.cu_dtype = DType::i64;
  v.decay = Decay::mixed;
  add(v);
  Spec strong = fixed(2, 129, 8, 64, 128, 128, bf16);
  strong.decay = Decay::strong;
  add(strong);
  Spec extreme = fixed(1, 100, 2, 4, 64, 128, bf16);
  extreme.decay = Decay::extreme;
  add(extreme);
  Spec zero = fixed(1, 150, 2, 4, 128, 64, f16);
  zero.decay = Decay::zero;
  zero.has_h0 = false;
  add(zero);
  Spec odd = fixed(1, 90, 1, 2, 40, 120, bf16);
  odd.scale = 0.7;
  add(odd);
  add(fixed(1, 70, 1, 1, 32, 40, f16));
  Spec norm = fixed(2, 200, 2, 4, 128, 128, bf16);
  norm.l2norm = true;
  add(norm);
  add(fixed(1, 64 * 100, 2, 32, 128, 128, bf16), true, /*golden=*/false);
  add(fixed(1, 64, 1, 2, 128, 128, bf16));  // 2 units: blocks of one warp
  Spec padded = fixed(1, 150, 2, 8, 128, 128, bf16);
  padded.padded = true;  // aligned: rows padded by 8 elements
  add(padded);
  add(varlen({16, 32, 33, 48, 17, 64}, 1, 2, 64, 64, f16));
  add(fixed(1, 70, 1, 2, 100, 128, bf16), false);
  add(fixed(1, 70, 1, 1, 16, 24, f16), false);  // head dims below 32: w and u in f32 (the separate stages)
  Spec bt32 = fixed(1, 100, 2, 4, 128, 128, bf16);
  bt32.BT = 32;
  add(bt32, false);
  add(fixed(1, 100, 1, 2, 256, 256, bf16), false);
  Spec misaligned = fixed(1, 100, 2, 4, 128, 128, bf16);
  misaligned.padded = true;  // guards of 5 elements and odd padding: no 16-byte rows
  add(misaligned, false);
  return out;
}

/// chunk_gated_delta_rule of `s` on the warp kernel (testing mode `always`) and on the block kernel (`never`): o and
/// final_state byte for byte, the launch count (1 where the kernel applies), and the warp run against the golden.
void expect_same_bytes(const Case& c, std::mt19937_64& rng) {
  SCOPED_TRACE(c.s.describe());
  const Inputs in = make_inputs(c.s, rng);
  const bool sm90 = fuseops::detail::is_sm90_or_newer(0);
  const int64_t before = cuda::intra_warp_launches_for_testing();
  const Outputs warp = [&] {
    const IntraWarpMode always(KktWarpForTesting::always);
    return run_chunk(Where::cuda, c.s, in);
  }();
  EXPECT_EQ(cuda::intra_warp_launches_for_testing() - before, c.applies && sm90 ? 1 : 0) << "always";
  const Outputs block = [&] {
    const IntraWarpMode never(KktWarpForTesting::never);
    return run_chunk(Where::cuda, c.s, in);
  }();
  EXPECT_EQ(cuda::intra_warp_launches_for_testing() - before, c.applies && sm90 ? 1 : 0) << "never";
  EXPECT_TRUE(same_bytes(warp.o, block.o)) << "o";
  EXPECT_TRUE(same_bytes(warp.final_state, block.final_state)) << "final_state";
  if (c.golden) {
    const fuseops::reference::RecurrenceGolden gold = golden(c.s, in, /*round_normalized=*/true);
    const double limit = forward_limit(c.s, in);
    EXPECT_TRUE(matches(warp.o, gold.o, c.s.dtype, "o", limit));
    EXPECT_TRUE(matches(warp.final_state, gold.final_state, c.s.dtype, "final_state", limit));
  }
}

TEST(GdnIntraFwdWarp, SameBytesAsTheBlockKernel) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  std::mt19937_64 rng = test_rng();
  for (const Case& c : cases()) {
    expect_same_bytes(c, rng);
    if (HasFailure()) return;
  }
}

// The block shape of grids of one unit per warp (intra_warp_grid_for_testing, pure host logic; an H200's 132 SMs of
// 228 KB, 1 KB reserved per block, and two smaller devices): every unit resident in one wave, no SM given more than one
// warp past the even spread (units / SMs rounded up), the shared memory within sm_90's 227 KB per block; at 2/8
// [8 x 1024] (1088 units on 132 SMs) blocks of 3 warps, 3 per SM; from 12 units per SM on, blocks of 4 warps, 3 per SM.
// On an SM of 100 KB every block still fits (the rule then only costs speed). Needs no GPU.
TEST(GdnIntraFwdWarp, GridShape) {
  constexpr std::size_t kSmSmem = 228 * 1024, kReserved = 1024;
  auto blocks_per_sm = [&](const cuda::IntraWarpGrid& g) {
    return static_cast<int64_t>(kSmSmem / (g.smem + kReserved));
  };
  for (int64_t sms : {132, 114, 78}) {
    for (int64_t units = 1; units <= 12 * sms; ++units) {
      const cuda::IntraWarpGrid g = cuda::intra_warp_grid_for_testing(units, sms, kSmSmem, kReserved);
      const int64_t per_sm = (units + sms - 1) / sms, busiest = blocks_per_sm(g) * g.warps;
      ASSERT_TRUE(g.warps >= 1 && g.warps <= 4) << units << " units on " << sms << " SMs: " << g.warps << " warps";
      ASSERT_LE(g.smem, std::size_t{227 * 1024}) << units << " units on " << sms << " SMs";
      ASSERT_GE(busiest * sms, units) << units << " units on " << sms << " SMs: not one wave";
      ASSERT_LE(busiest, per_sm + 1) << units << " units on " << sms << " SMs";
    }
  }
  const cuda::IntraWarpGrid h200 = cuda::intra_warp_grid_for_testing(1088, 132, kSmSmem, kReserved);
  EXPECT_EQ(h200.warps, 3);
  EXPECT_EQ(blocks_per_sm(h200), 3);
  const cuda::IntraWarpGrid full = cuda::intra_warp_grid_for_testing(12 * 132, 132, kSmSmem, kReserved);
  EXPECT_EQ(full.warps, 4);
  EXPECT_GE(blocks_per_sm(full), 3);
  for (int64_t units = 1; units <= 12 * 132; ++units) {
    const cuda::IntraWarpGrid g = cuda::intra_warp_grid_for_testing(units, 132, 100 * 1024, kReserved);
    ASSERT_LE(g.smem + kReserved, std::size_t{100 * 1024}) << units << " units on SMs of 100 KB";
  }
}

// The launch rule at its edge: a grid of at most four units per SM keeps the block kernel, four units more take the
// warp kernel (with the same bytes); FUSEOPS_GDN_INTRA_WARP=0 keeps the block kernel on both, =always takes the warp
// kernel on both.
TEST(GdnIntraFwdWarp, LaunchRule) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  std::mt19937_64 rng = test_rng();
  const char* env = std::getenv("FUSEOPS_GDN_INTRA_WARP");
  const bool sm90 = fuseops::detail::is_sm90_or_newer(0);
  const bool on = sm90 && !fuseops::detail::env_switched_off("FUSEOPS_GDN_INTRA_WARP");
  const bool always = sm90 && env != nullptr && std::string(env) == "always";
  // the rule's edge, exact for any SM count: B sequences of one chunk with 4 value heads, so B = SMs gives 4 units per
  // SM (the block kernel) and B = SMs + 1 four units more (the warp kernel); B > 1 is never the intra-first form
  const int64_t sms = fuseops::detail::sm_count(0);
  Spec small = fixed(sms, 64, 1, 4, 128, 128, bf16);
  Spec large = fixed(sms + 1, 64, 1, 4, 128, 128, bf16);
  for (Spec* s : {&small, &large}) {
    s->aligned = true;
    SCOPED_TRACE(s->describe());
    const Inputs in = make_inputs(*s, rng);
    const int64_t before = cuda::intra_warp_launches_for_testing();
    const Outputs by_rule = run_chunk(Where::cuda, *s, in);
    EXPECT_EQ(cuda::intra_warp_launches_for_testing() - before, always || (on && s == &large) ? 1 : 0);
    const IntraWarpMode never(KktWarpForTesting::never);
    const Outputs block = run_chunk(Where::cuda, *s, in);
    EXPECT_TRUE(same_bytes(by_rule.o, block.o)) << "o";
    EXPECT_TRUE(same_bytes(by_rule.final_state, block.final_state)) << "final_state";
  }
}

// The `always` mode takes the warp kernel even with FUSEOPS_GDN_INTRA_WARP=0 (so that this file tests it under the
// switch too); with malformed cu_seqlens the forward (its cumsum first) records the error, and nothing outside o and
// final_state is written (run_chunk checks their guards and the inputs'; w and u lie in the workspace, whose bounds
// IntraOutputsByteForByte checks with guards).
TEST(GdnIntraFwdWarp, AlwaysModeAndMalformedCuSeqlens) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  if (!fuseops::detail::is_sm90_or_newer(0)) GTEST_SKIP() << "sm_90+ kernel";
  std::mt19937_64 rng = test_rng();
  const IntraWarpMode always(KktWarpForTesting::always);
  Spec s = varlen({10, 70, 0, 64}, 2, 4, 128, 128, bf16);
  s.aligned = true;
  const Inputs in = make_inputs(s, rng);
  const int64_t before = cuda::intra_warp_launches_for_testing();
  const Outputs warp = run_chunk(Where::cuda, s, in);
  EXPECT_EQ(cuda::intra_warp_launches_for_testing() - before, 1);
  const fuseops::reference::RecurrenceGolden gold = golden(s, in, /*round_normalized=*/true);
  EXPECT_TRUE(matches(warp.o, gold.o, s.dtype, "o", forward_limit(s, in)));
  if (fuseops::debug_mode()) return;  // FUSEOPS_DEBUG: the op raises at once, before the kernel
  Inputs bad = in;
  bad.cu = {0, 80, 70, 144, 144};  // decreasing
  fuseops::clear_errors();
  run_chunk(Where::cuda, s, bad);  // the guards around the inputs, o and final_state are checked
  EXPECT_EQ(cuda::intra_warp_launches_for_testing() - before, 2);
  const std::string msg = take_device_error();
  EXPECT_NE(msg.find("cu_seqlens"), std::string::npos) << msg;
}

/// w and u of chunk_gated_delta_rule_fwd_intra (the forward's intra-chunk kernel, called directly) on the warp kernel
/// (testing mode `always`) and on the block kernel (`never`), from the same k, v, beta and cumulative g: byte for byte,
/// with NaN-poisoned outputs inside guards (a row written by one kernel and not the other, or outside the tensors,
/// fails).
void expect_same_w_u(const Spec& s, std::mt19937_64& rng) {
  namespace fd = fuseops::detail;
  SCOPED_TRACE(s.describe());
  const Inputs in = make_inputs(s, rng);
  const int64_t pad = s.padded ? 8 : 0, guard = 8;
  Placed k(Where::cuda, in.k, pad, guard), v(Where::cuda, in.v, pad, guard), beta(Where::cuda, in.beta, 0, guard),
      g(Where::cuda, in.g, 0, guard), gc(Where::cuda, DType::f32, {s.B, s.T, s.HV}, guard);
  std::unique_ptr<Placed> cu;
  if (s.varlen()) cu = std::make_unique<Placed>(Where::cuda, ft::index_tensor(s.cu_dtype, in.cu), 0, 0);
  Placed w0(Where::cuda, s.dtype, {s.B, s.T, s.HV, s.K}, guard), w1(Where::cuda, s.dtype, {s.B, s.T, s.HV, s.K}, guard),
      u0(Where::cuda, s.dtype, {s.B, s.T, s.HV, s.V}, guard), u1(Where::cuda, s.dtype, {s.B, s.T, s.HV, s.V}, guard);
  Placed* const w[2] = {&w0, &w1};
  Placed* const u[2] = {&u0, &u1};
  for (Placed* p : {&k, &v, &beta, &g, &gc, &w0, &w1, &u0, &u1}) p->upload();
  if (cu) cu->upload();
  TensorView cuv;
  if (cu) cuv = cu->view();
  fuseops::chunk_local_cumsum(gc.view(), g.view(), s.BT, cu ? &cuv : nullptr);
  fd::KktArgs ka;
  ka.geo = fd::gdn_geometry(s.B, s.T, s.H, s.HV, s.K, s.BT);
  fd::attach_cu_seqlens("chunk_gated_delta_rule", cu ? &cuv : nullptr, fuseops::Device::cuda(0), ka.geo);
  ka.k = fd::in_view(k.view());
  ka.g = fd::in_view(gc.view());
  ka.beta = fd::in_view(beta.view());
  fd::WuArgs wa;
  wa.geo = ka.geo;
  wa.V = s.V;
  wa.k = ka.k;
  wa.v = fd::in_view(v.view());
  wa.beta = ka.beta;
  wa.g = ka.g;
  const int64_t before = cuda::intra_warp_launches_for_testing();
  for (int run = 0; run < 2; ++run) {
    const IntraWarpMode mode(run == 0 ? KktWarpForTesting::always : KktWarpForTesting::never);
    wa.w = fd::out_view(w[run]->view());
    wa.u = fd::out_view(u[run]->view());
    ASSERT_TRUE(cuda::chunk_gated_delta_rule_fwd_intra(ka, wa, 0, nullptr));
  }
  EXPECT_EQ(cuda::intra_warp_launches_for_testing() - before, fuseops::detail::is_sm90_or_newer(0) ? 1 : 0);
  for (Placed* p : {&w0, &w1, &u0, &u1}) {
    p->download();
    EXPECT_TRUE(p->untouched_outside(true));
  }
  EXPECT_NO_THROW(fuseops::check_errors());
  EXPECT_TRUE(same_bytes(w0.read(), w1.read())) << "w";
  EXPECT_TRUE(same_bytes(u0.read(), u1.read())) << "u";
}

// w and u themselves (the contract; the forward's o and final_state above could hide a one-ulp difference): fixed
// length with partial chunks and B = 2, K != V and not multiples of 16 / 64, padded rows, and a varlen batch of 400
// sequences of 1 .. 100 tokens with 16 value heads (~5000 units, more than three per resident warp on the H200: warps
// walk units whose partial chunks are stored by the lanes, then copy the next unit's rows into the same region).
TEST(GdnIntraFwdWarp, IntraOutputsByteForByte) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  std::mt19937_64 rng = test_rng();
  std::vector<Spec> specs = {fixed(2, 200, 2, 8, 128, 128, bf16), fixed(1, 150, 1, 2, 40, 120, f16)};
  Spec padded = fixed(1, 130, 2, 4, 64, 128, bf16);
  padded.padded = true;
  specs.push_back(padded);
  std::vector<int64_t> lens(400);
  std::uniform_int_distribution<int64_t> len(1, 100);
  for (int64_t& n : lens) n = len(rng);
  specs.push_back(varlen(lens, 4, 16, 128, 128, bf16));
  for (Spec& s : specs) {
    s.aligned = true;
    expect_same_w_u(s, rng);
    if (HasFailure()) return;
  }
}
#endif

}  // namespace
}  // namespace fuseops_test::gdn_forward
