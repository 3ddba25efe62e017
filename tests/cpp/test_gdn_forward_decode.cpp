// The serving forms of the GDN decode (fuseops/gdn_forward.h) against the float64 recurrence: a state pool addressed
// by ssm_state_indices [N] (padding slots -1, f32 and bf16 pools, multi-token sequences), per-token state writes with
// [N, Tmax] indices and num_accepted_tokens (speculative decoding), the fused sigmoid-gating form, and bad indices
// (< -1 or >= S: recorded, treated as padding), and FLA's per-channel beta [B, T, HV, V] in the FLA and pool forms.
// Untouched pool slots must keep their bytes.
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <vector>

#include "gdn_forward_test_util.h"
#if defined(FUSEOPS_WITH_CUDA)
#include "ops/gdn_forward_impl.h"
#endif

namespace fuseops_test::gdn_forward {
namespace {

namespace ref = fuseops::reference;
using gdn::Placed;
constexpr DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;

class GdnDecode : public ::testing::TestWithParam<Where> {};

/// One pool run: inputs of `s` (varlen), a pool of `slots` random states, indices (and num_accepted), optional fused
/// gating from raw a, b, A_log, dt_bias. Compares o, every written slot and every untouched slot.
struct PoolCase {
  Spec s;
  int64_t slots = 8;
  DType pool_dtype = f32;
  std::vector<int64_t> idx;  ///< [N] or [N, cols]
  int64_t cols = 0;
  std::vector<int64_t> accepted;  ///< empty: none
  DType acc_dtype = DType::i32;   ///< num_accepted_tokens
  bool fused_gating = false;
  std::vector<int64_t> bad_rows;  ///< sequences with a bad index / count (padding + recorded)
  bool bad_write = false;         ///< a bad per-token write index (skipped + recorded; the sequence runs)
  int64_t guard = 5;       ///< guard elements of q, k, v, gates and o (8: 16-byte aligned, 5: misaligned)
  int64_t pool_guard = 0;  ///< guard elements of the pool (0: aligned, the fast kernel; 1: misaligned, the fallback)
  /// poisoned elements between the pool's slots (vLLM's padded pages: stride(0) = HV K V + slot_pad); 0: contiguous
  int64_t slot_pad = 0;
  /// the last sequence (varlen, its start index -1) is passed as tokens past cu_seqlens[N] instead (vLLM's CUDA-graph
  /// padded steps: cu_seqlens and the indices cover one sequence fewer); its o rows must be 0, as a padding sequence's
  bool tail_tokens = false;
  /// with tail_tokens: the indices and num_accepted_tokens keep the tail sequence's row and two more, as vLLM's padded
  /// batch passes them (cu_seqlens[:num_decodes + 1] with the whole batch's indices); those rows hold an out-of-range
  /// slot and a 0 count, which would be recorded if read: they must not be
  bool rows_past_n = false;
  /// run the direct-gate form under vLLM's name (fused_recurrent_gated_delta_rule with the pool as initial_state)
  bool vllm_name = false;
  DType idx_dtype = DType::i64;            ///< ssm_state_indices
  std::optional<DType> beta_dtype;         ///< beta's dtype when not the spec's gate dtype (beta rounded to it)
  std::vector<std::string> error_words;    ///< words the recorded error's message must hold (with bad_rows)
};

/// fused_recurrent_gated_delta_rule (FLA form) on inputs of `s` against the float64 recurrence golden.
void check_recurrent(Where where, const Spec& s, std::mt19937_64& rng) {
  SCOPED_TRACE(s.describe());
  const Inputs in = make_inputs(s, rng);
  const fuseops::reference::RecurrenceGolden gold = golden(s, in, /*round_normalized=*/false);
  const Outputs r = run_recurrent(where, s, in);
  EXPECT_TRUE(matches(r.o, gold.o, s.dtype, "o"));
  EXPECT_TRUE(matches(r.final_state, gold.final_state, s.dtype, "final_state"));
}

void run_pool_case(Where where, const PoolCase& pc, std::mt19937_64& rng) {
  const Spec& s = pc.s;
  SCOPED_TRACE(s.describe() + (pc.fused_gating ? " fused gating" : "") + " pool " + fuseops::dtype_name(pc.pool_dtype) +
               " guards " + std::to_string(pc.guard) + "/" + std::to_string(pc.pool_guard) + " slot pad " +
               std::to_string(pc.slot_pad) + (pc.rows_past_n ? " rows past N" : ""));
  Spec sg = s;
  sg.has_h0 = false;
  Inputs in = make_inputs(sg, rng);
  if (pc.beta_dtype) {
    HostTensor b(*pc.beta_dtype, in.beta.shape());
    for (int64_t r = 0; r < b.rows(); ++r)
      for (int64_t c = 0; c < b.cols(); ++c) b.set(r, c, static_cast<float>(in.beta.get(r, c)));
    in.beta = b;
  }
  const int64_t N = s.N(), HV = s.HV, KV = s.K * s.V, per = HV * KV;
  HostTensor pool(pc.pool_dtype, {pc.slots, HV, s.K, s.V});
  std::normal_distribution<double> normal(0.0, 0.5);
  for (int64_t r = 0; r < pool.rows(); ++r)
    for (int64_t c = 0; c < s.V; ++c) pool.set(r, c, static_cast<float>(normal(rng)));
  // gates
  HostTensor a_raw(f32, {s.B, s.T, HV}), b_raw(f32, {s.B, s.T, HV}), A_log(f32, {HV}), dt_bias(f32, {HV});
  std::vector<double> g(static_cast<std::size_t>(s.B * s.T * HV)), beta(g.size());
  if (pc.fused_gating) {
    std::uniform_real_distribution<double> uni(-3.0, 3.0);
    for (int64_t h = 0; h < HV; ++h) {
      A_log.set(0, h, static_cast<float>(uni(rng) * 0.5));
      dt_bias.set(0, h, static_cast<float>(uni(rng)));
    }
    for (int64_t r = 0; r < a_raw.rows(); ++r) {
      for (int64_t h = 0; h < HV; ++h) {
        a_raw.set(r, h, static_cast<float>(r % 5 == 4 ? 25.0 + uni(rng) : 2.0 * uni(rng)));  // some past the threshold
        b_raw.set(r, h, static_cast<float>(2.0 * uni(rng)));
        const double x = a_raw.get(r, h) + dt_bias.get(0, h);
        const double sp = x > 20.0 ? x : std::log1p(std::exp(x));
        g[r * HV + h] = -std::exp(static_cast<double>(A_log.get(0, h))) * sp;
        beta[r * HV + h] = 1.0 / (1.0 + std::exp(-static_cast<double>(b_raw.get(r, h))));
      }
    }
  } else {
    g = in.g.to_double();
    beta = in.beta.to_double();
  }
  // golden: initial states gathered from the pool
  HostTensor h0(f32, {N, HV, s.K, s.V});
  std::vector<int64_t> start(static_cast<std::size_t>(N), -1);
  for (int64_t n = 0; n < N; ++n) {
    bool bad = false;
    for (int64_t b : pc.bad_rows) bad = bad || b == n;
    const int64_t col = bad || pc.cols == 0 || pc.accepted.empty() ? 0 : pc.accepted[n] - 1;
    const int64_t slot = bad ? -1 : pc.idx[pc.cols == 0 ? n : n * pc.cols + col];
    start[n] = slot;
    for (int64_t e = 0; e < per; ++e) {
      h0.set((n * per + e) / s.V, e % s.V, slot >= 0 ? static_cast<float>(pool.get((slot * per + e) / s.V, e % s.V)) : 0.f);
    }
  }
  ref::RecurrenceInputs ri;
  ri.q = &in.q;
  ri.k = &in.k;
  ri.v = &in.v;
  ri.g = g;
  ri.beta = beta;
  ri.beta_per_channel = !pc.fused_gating && s.beta_per_channel;
  ri.h0 = &h0;
  ri.scale = 1.0 / std::sqrt(static_cast<double>(s.K));
  ri.l2norm = s.l2norm;
  ri.cu_seqlens = in.cu;
  ri.keep_token_states = true;
  ref::RecurrenceGolden gold = ref::gated_delta_rule_recurrence(ri);
  // expected pool and o
  std::vector<double> want = pool.to_double();
  std::vector<bool> written(static_cast<std::size_t>(pc.slots), false);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t bos = in.cu.empty() ? 0 : in.cu[n], eos = in.cu.empty() ? s.T : in.cu[n + 1];
    const int64_t bb = in.cu.empty() ? n : 0;
    if (start[n] < 0) {
      for (int64_t t = bos; t < eos; ++t)
        for (int64_t e = 0; e < HV * s.V; ++e) gold.o[static_cast<std::size_t>((bb * s.T + t) * HV * s.V + e)] = 0.0;
      continue;
    }
    for (int64_t t = bos; t < eos; ++t) {
      const int64_t slot = pc.cols > 0 ? pc.idx[n * pc.cols + (t - bos)] : (t == eos - 1 ? pc.idx[n] : -1);
      if (slot < 0) continue;
      written[slot] = true;
      for (int64_t e = 0; e < per; ++e) {
        want[static_cast<std::size_t>(slot * per + e)] = gold.token_states[static_cast<std::size_t>((bb * s.T + t) * per + e)];
      }
    }
  }
  // run
  // (tail_tokens: the op sees N - 1 sequences, cu_seqlens[N - 1] < T)
  const int64_t Nop = pc.tail_tokens ? N - 1 : N;
  const std::vector<int64_t> cu_op(in.cu.begin(), in.cu.begin() + (in.cu.empty() ? 0 : Nop + 1));
  // (rows_past_n: the tail sequence's row and two more, as a padded batch larger than the real one)
  const int64_t rows = pc.rows_past_n ? N + 2 : Nop, per_row = std::max<int64_t>(pc.cols, 1);
  std::vector<int64_t> idx_op(pc.idx.begin(), pc.idx.begin() + Nop * per_row);
  idx_op.resize(static_cast<std::size_t>(rows * per_row), pc.slots + 7);  // never read
  HostTensor cu_t = ft::index_tensor(DType::i32, {static_cast<int64_t>(cu_op.size())}, cu_op);
  const std::vector<int64_t> idx_shape = pc.cols ? std::vector<int64_t>{rows, pc.cols} : std::vector<int64_t>{rows};
  HostTensor idx_t = ft::index_tensor(pc.idx_dtype, idx_shape, idx_op);
  std::vector<int64_t> acc_op = pc.accepted.empty() ? std::vector<int64_t>(N, 1) : pc.accepted;
  acc_op.resize(static_cast<std::size_t>(rows));
  for (int64_t n = Nop; n < rows; ++n) acc_op[n] = 0;  // never read
  HostTensor acc_t = ft::index_tensor(pc.acc_dtype, {rows}, acc_op);
  const int64_t gd = pc.guard;
  // the pool as [S, HV K V] rows padded by slot_pad poisoned elements, viewed as [S, HV, K, V] with stride(0) the row
  // pitch (with slot_pad 0 the contiguous pool)
  HostTensor pool_rows(pc.pool_dtype, {pc.slots, per});
  for (int64_t r = 0; r < pc.slots; ++r)
    for (int64_t e = 0; e < per; ++e) pool_rows.set(r, e, static_cast<float>(pool.get((r * per + e) / s.V, e % s.V)));
  Placed P(where, pool_rows, pc.slot_pad, pc.pool_guard), Q(where, in.q, 0, gd), Kt(where, in.k, 0, gd),
      Vt(where, in.v, 0, gd), G(where, in.g, 0, gd), Bt(where, in.beta, 0, gd), O(where, s.dtype, {s.B, s.T, HV, s.V}, gd),
      I(where, idx_t, 0, 0), Acc(where, acc_t, 0, 0), Cu(where, cu_t, 0, 0), Ar(where, a_raw, 0, gd),
      Br(where, b_raw, 0, gd), Al(where, A_log, 0, 0), Db(where, dt_bias, 0, 0);
  for (Placed* p : {&P, &Q, &Kt, &Vt, &G, &Bt, &O, &I, &Acc, &Cu, &Ar, &Br, &Al, &Db}) p->upload();
  const TensorView gv = G.view(), bv = Bt.view(), accv = Acc.view(), cuv = Cu.view();
  const TensorView pr = P.view();
  const TensorView pool_view(pr.data, pr.dtype, pr.device, {pc.slots, HV, s.K, s.V}, {pr.strides[0], KV, s.V, 1});
  const TensorView* acc = pc.accepted.empty() ? nullptr : &accv;
  const TensorView* cu = in.cu.empty() ? nullptr : &cuv;
  fuseops::clear_errors();
  if (pc.fused_gating) {
    fuseops::fused_sigmoid_gating_delta_rule_update(O.view(), pool_view, Al.view(), Ar.view(), Db.view(), Q.view(),
                                                    Kt.view(), Vt.view(), Br.view(), std::nullopt, I.view(), acc,
                                                    s.l2norm, cu);
  } else if (pc.vllm_name) {
    fuseops::fused_recurrent_gated_delta_rule(O.view(), pool_view, Q.view(), Kt.view(), Vt.view(), &gv, &bv,
                                              std::nullopt, I.view(), acc, s.l2norm, cu);
  } else {
    fuseops::fused_recurrent_gated_delta_rule_update(O.view(), pool_view, Q.view(), Kt.view(), Vt.view(), &gv, &bv,
                                                     std::nullopt, I.view(), acc, s.l2norm, cu);
  }
  for (Placed* p : {&P, &O}) p->download();
  if (pc.bad_rows.empty() && !pc.bad_write) {
    EXPECT_NO_THROW(fuseops::check_errors());
  } else {
    EXPECT_TRUE(raises([] { fuseops::check_errors(); }, fuseops::ErrorKind::device_value, pc.error_words));
  }
  EXPECT_TRUE(O.untouched_outside(true));
  EXPECT_TRUE(P.untouched_outside(true));  // the guards and the padding between slots
  EXPECT_TRUE(matches(O.read(), gold.o, s.dtype == f32 && pc.pool_dtype == f32 ? f32 : bf16, "o"));
  const HostTensor after = P.read();
  for (int64_t slot = 0; slot < pc.slots; ++slot) {
    HostTensor got(pc.pool_dtype, {1, HV, s.K, s.V});
    std::vector<double> exp(want.begin() + slot * per, want.begin() + (slot + 1) * per);
    for (int64_t e = 0; e < per; ++e) got.set(e / s.V, e % s.V, static_cast<float>(after.get(slot, e)));
    if (written[slot]) {
      EXPECT_TRUE(matches(got, exp, s.dtype == f32 && pc.pool_dtype == f32 ? f32 : bf16, "slot " + std::to_string(slot)));
    } else {
      int64_t changed = 0;
      for (int64_t e = 0; e < per; ++e) changed += got.get(e / s.V, e % s.V) != exp[e];
      EXPECT_EQ(changed, 0) << "elements changed in untouched slot " << slot;
    }
  }
}

// One token per sequence (the decode step) and multi-token sequences, padding slots, f32 / bf16 / f16 pools.
TEST_P(GdnDecode, PoolPerSequence) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (DType pd : {f32, bf16, f16}) {  // f16: vLLM's --mamba-ssm-cache-dtype float16
    for (DType dt : {f32, bf16}) {
      PoolCase pc;
      pc.s = fixed(5, 1, 2, 4, 64, 64, dt);
      pc.pool_dtype = pd;
      pc.idx = {3, -1, 0, 7, 5};
      run_pool_case(GetParam(), pc, rng);
      PoolCase mt;
      mt.s = varlen({2, 0, 3, 1}, 1, 2, 48, 40, dt);
      mt.s.l2norm = true;
      mt.pool_dtype = pd;
      mt.idx = {6, 1, 2, -1};
      run_pool_case(GetParam(), mt, rng);
      mt.vllm_name = true;  // the same form under vLLM's name
      run_pool_case(GetParam(), mt, rng);
      if (HasFailure()) return;
    }
  }
}

// Speculative decoding: [N, Tmax] indices, the start slot picked by num_accepted_tokens, a state written after every
// token (skipped where the index is -1).
TEST_P(GdnDecode, PoolPerTokenWrites) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  PoolCase pc;
  pc.s = varlen({3, 4, 1}, 2, 4, 64, 64, bf16);
  pc.slots = 16;
  pc.cols = 4;
  pc.idx = {0, 1, 2, -1, /**/ 4, 5, 6, 7, /**/ 8, -1, -1, -1};
  pc.accepted = {2, 4, 1};  // start slots 1, 7, 8 (each also written later: read before written)
  run_pool_case(GetParam(), pc, rng);
  PoolCase no_acc = pc;  // without num_accepted_tokens: column 0
  no_acc.accepted.clear();
  no_acc.s.dtype = f32;
  run_pool_case(GetParam(), no_acc, rng);
}

TEST_P(GdnDecode, SigmoidGating) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (DType dt : {f32, bf16}) {
    PoolCase pc;
    pc.s = fixed(6, 2, 2, 4, 128, 128, dt);
    pc.s.l2norm = true;
    pc.idx = {7, 6, 5, -1, 1, 0};
    pc.fused_gating = true;
    run_pool_case(GetParam(), pc, rng);
    if (HasFailure()) return;
  }
}

// An index >= S and a num_accepted_tokens outside [1, Tmax] are recorded and make their sequence padding.
// K = 32 takes the fallback CUDA kernel, K = 64 the fast one.
TEST_P(GdnDecode, BadIndicesAreRecorded) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (int64_t K : {32, 64}) {
    PoolCase pc;
    pc.s = fixed(3, 1, 1, 2, K, 32, f32);
    pc.idx = {1, 99, 2};
    pc.bad_rows = {1};
    pc.error_words = {"fused_recurrent_gated_delta_rule_update: ssm_state_indices", "index 1"};
    run_pool_case(GetParam(), pc, rng);
    // under vLLM's name the record names that op (the Python function of that name calls this form)
    pc.vllm_name = true;
    pc.error_words = {"fused_recurrent_gated_delta_rule: ssm_state_indices", "index 1"};
    run_pool_case(GetParam(), pc, rng);
    PoolCase acc;
    acc.s = varlen({2, 2}, 1, 2, K, 32, f32);
    acc.cols = 2;
    acc.idx = {0, 1, 2, 3};
    acc.accepted = {1, 5};
    acc.bad_rows = {1};
    acc.error_words = {"num_accepted_tokens", "index 1"};
    run_pool_case(GetParam(), acc, rng);
    acc.acc_dtype = DType::i64;  // the smallest count: checked before the - 1 that would wrap (UBSan)
    acc.accepted = {1, std::numeric_limits<int64_t>::min()};
    run_pool_case(GetParam(), acc, rng);
    // a sequence with more tokens than the Tmax columns: padding, recorded under cu_seqlens at its index n, not as
    // an out-of-range ssm_state_indices entry (every entry here is a valid slot)
    PoolCase longer;
    longer.s = varlen({2, 3}, 1, 2, K, 32, f32);
    longer.cols = 2;
    longer.idx = {0, 1, 2, 3};
    longer.bad_rows = {1};
    longer.error_words = {"cu_seqlens", "index 1", "more tokens than the Tmax columns"};
    for (int64_t guard : {0, 1}) {  // CUDA: an aligned pool takes the fast kernel, a misaligned one the fallback
      longer.pool_guard = guard;
      run_pool_case(GetParam(), longer, rng);
    }
    // an empty pool (S = 0, no data): every index is padding (-1, o rows 0) or bad (recorded), in both forms
    for (bool gating : {false, true}) {
      PoolCase empty;
      empty.s = fixed(3, 1, 1, 2, K, 32, f32);
      empty.slots = 0;
      empty.idx = {-1, 5, -1};
      empty.bad_rows = {1};
      // (the fused-gating op names its indices as vLLM's fused_sigmoid_gating_delta_rule_update does)
      empty.error_words = {gating ? "initial_state_indices" : "ssm_state_indices", "index 1"};
      empty.fused_gating = gating;
      run_pool_case(GetParam(), empty, rng);
    }
    fuseops::clear_errors();
  }
}

// Only -1 is padding: an index < -1 is recorded like one >= S, whether it is the slot read first (the sequence
// becomes padding) or a per-token write (skipped). K = 32: the fallback CUDA kernel, K = 64: the fast one.
TEST_P(GdnDecode, IndicesBelowMinusOneAreRecorded) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (int64_t K : {32, 64}) {
    PoolCase pc;
    pc.s = fixed(4, 1, 1, 2, K, 32, f32);
    pc.idx = {3, -2, 0, 5};
    pc.bad_rows = {1};
    pc.error_words = {"ssm_state_indices", "index 1"};
    run_pool_case(GetParam(), pc, rng);
    PoolCase start;
    start.s = varlen({2, 2}, 1, 2, K, 32, f32);
    start.cols = 2;
    start.idx = {0, 1, -7, 3};  // sequence 1 starts at column 0: -7
    start.bad_rows = {1};
    start.error_words = {"ssm_state_indices", "index 2"};  // flat index n * Tmax + column
    run_pool_case(GetParam(), start, rng);
    PoolCase write;
    write.s = varlen({2, 2}, 1, 2, K, 32, f32);
    write.cols = 2;
    write.idx = {0, 1, 2, -5};  // written after sequence 1's second token: -5
    write.accepted = {1, 1};
    write.bad_write = true;
    write.error_words = {"ssm_state_indices", "index 3"};
    run_pool_case(GetParam(), write, rng);
    fuseops::clear_errors();
  }
}

// The two CUDA decode kernels (docs/ops/gdn-log.md "decode kernel"), FLA form: the fast one (K 64 / 128 / 256, V % 4 == 0,
// 16-byte aligned states; q, k, v, o at any alignment or stride, 16-byte q / k loads only where they allow) and the
// fallback (other K, V % 4 != 0, a misaligned state). Per shape: one token per sequence; several tokens, varlen with
// an empty sequence and no initial state; l2 normalisation in the kernel with a bf16 initial state and padded q, k, v
// rows (element loads); f16 inputs and initial state; misaligned tensors (the fallback for every shape).
TEST_P(GdnDecode, KernelVariantsFlaForm) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  struct Dims {
    int64_t K, V;
  };
  // fast: 64/64, 128/128, 256/128, 128/100 and 64/36 (a partial last column slice); fallback: 60/100, 100/60, 128/62
  for (Dims d : {Dims{64, 64}, Dims{128, 128}, Dims{256, 128}, Dims{128, 100}, Dims{64, 36}, Dims{60, 100},
                 Dims{100, 60}, Dims{128, 62}}) {
    for (int variant = 0; variant < 5; ++variant) {
      const DType dt = variant == 1 ? f32 : variant == 3 ? DType::f16 : bf16;
      Spec s = variant == 1 || variant == 4 ? varlen({2, 0, 1}, 1, 2, d.K, d.V, dt)
                                            : fixed(2, variant == 0 ? 1 : 3, 1, 2, d.K, d.V, dt);
      s.aligned = variant != 4;
      s.has_h0 = variant != 1;
      s.l2norm = variant == 2 || variant == 4;
      s.padded = variant == 2;
      s.h0_dtype = variant == 2 ? bf16 : variant == 3 ? DType::f16 : f32;
      check_recurrent(GetParam(), s, rng);
      if (HasFailure()) return;
    }
  }
  // more units than the fast kernel's resident warps on an H200 (every warp stages its next unit's h0): 40 x 32 x 8
  // units (K = V = 128), f16 h0, empty and multi-token sequences
  std::vector<int64_t> lens;
  for (int64_t n = 0; n < 40; ++n) lens.push_back(n % 9 == 4 ? 0 : 1 + n % 2);
  Spec s = varlen(lens, 16, 32, 128, 128, bf16);
  s.aligned = true;
  s.l2norm = true;
  s.h0_dtype = DType::f16;
  check_recurrent(GetParam(), s, rng);
}

// The pool forms on both kernels: aligned q, k, v, o (16-byte loads) at K = V = 128 with l2 normalisation and at
// K = 256 with multi-token sequences, per-token writes at K = 128, fused gating at K = 64 (fast); K = 100 and a
// misaligned pool (fallback); f32, bf16 and f16 pools.
TEST_P(GdnDecode, PoolKernelVariants) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (DType pd : {f32, bf16, f16}) {
    PoolCase step;
    step.s = fixed(4, 1, 2, 4, 128, 128, bf16);
    step.s.l2norm = true;
    step.pool_dtype = pd;
    step.idx = {2, -1, 5, 0};
    step.guard = 8;
    run_pool_case(GetParam(), step, rng);
    PoolCase wide;
    wide.s = varlen({1, 3, 0, 2}, 1, 2, 256, 64, f32);
    wide.pool_dtype = pd;
    wide.idx = {1, 3, 4, -1};
    wide.guard = 8;
    run_pool_case(GetParam(), wide, rng);
    PoolCase spec;
    spec.s = varlen({3, 1, 2}, 2, 4, 128, 128, bf16);
    spec.pool_dtype = pd;
    spec.cols = 3;
    spec.idx = {0, 1, 2, /**/ 3, -1, -1, /**/ 4, -1, 6};
    spec.accepted = {3, 1, 2};  // start slots 2, 3, -1 (the last sequence is padding)
    spec.guard = 8;
    run_pool_case(GetParam(), spec, rng);
    PoolCase gating;
    gating.s = fixed(3, 2, 1, 2, 64, 64, f32);
    gating.fused_gating = true;
    gating.pool_dtype = pd;
    gating.idx = {4, 0, 7};
    gating.guard = 8;
    run_pool_case(GetParam(), gating, rng);
    PoolCase odd;
    odd.s = fixed(3, 1, 1, 2, 100, 60, bf16);
    odd.s.l2norm = true;
    odd.pool_dtype = pd;
    odd.idx = {1, 0, -1};
    run_pool_case(GetParam(), odd, rng);
    PoolCase misaligned = step;
    misaligned.pool_guard = 1;
    run_pool_case(GetParam(), misaligned, rng);
    // vLLM's CUDA-graph padded steps: tokens past cu_seqlens[N] (o rows 0, nothing recorded), on the fast kernel (one
    // token per sequence, per-token writes, fused gating) and the fallback (K = 100)
    PoolCase tail;
    tail.s = varlen({1, 1, 1, 2}, 2, 4, 128, 128, bf16);
    tail.pool_dtype = pd;
    tail.idx = {2, 5, 0, -1};
    tail.guard = 8;
    tail.tail_tokens = true;
    run_pool_case(GetParam(), tail, rng);
    // vLLM's layout exactly: the padded batch's empty sequences (-1) before the tail, fast kernel and fallback (V % 4 != 0)
    PoolCase vllm = tail;
    vllm.s = varlen({1, 1, 1, 0, 0, 2}, 2, 4, 128, 128, bf16);
    vllm.idx = {2, 5, 0, -1, -1, -1};
    run_pool_case(GetParam(), vllm, rng);
    PoolCase vllm_odd = vllm;
    vllm_odd.s = varlen({1, 1, 0, 0, 3}, 1, 2, 100, 61, bf16);
    vllm_odd.idx = {1, 0, -1, -1, -1};
    vllm_odd.guard = 5;
    run_pool_case(GetParam(), vllm_odd, rng);
    PoolCase tail_spec = spec;
    tail_spec.s = varlen({3, 1, 2, 3}, 2, 4, 128, 128, bf16);
    tail_spec.idx = {0, 1, 2, /**/ 3, -1, -1, /**/ 4, -1, 6, /**/ -1, -1, -1};
    tail_spec.accepted = {3, 1, 2, 1};
    tail_spec.tail_tokens = true;
    run_pool_case(GetParam(), tail_spec, rng);
    PoolCase tail_gating = gating;
    tail_gating.s = varlen({1, 1, 1}, 2, 2, 64, 64, f32);
    tail_gating.idx = {4, 0, -1};
    tail_gating.tail_tokens = true;
    run_pool_case(GetParam(), tail_gating, rng);
    PoolCase tail_odd = odd;
    tail_odd.s = varlen({1, 2, 1}, 1, 2, 100, 60, bf16);
    tail_odd.s.l2norm = true;
    tail_odd.idx = {1, 0, -1};
    tail_odd.tail_tokens = true;
    run_pool_case(GetParam(), tail_odd, rng);
    // vLLM's CUDA-graph step passes the whole padded batch's indices (and num_accepted_tokens) with cu_seqlens of the
    // real sequences only: the rows past N are never read (both kernels, per-token writes, fused gating)
    for (PoolCase pc : {vllm, vllm_odd, tail_spec, tail_gating}) {
      pc.rows_past_n = true;
      run_pool_case(GetParam(), pc, rng);
    }
    // vLLM's pools: slots in padded pages (stride(0) > HV K V). 16-byte steps apart: the fast kernel (also per-token
    // writes and fused gating); 3 elements more: the fallback
    for (int64_t pad : {8, 64, 3}) {
      for (PoolCase pc : {step, spec, gating, odd}) {
        pc.slot_pad = pad;
        run_pool_case(GetParam(), pc, rng);
      }
    }
    if (HasFailure()) return;
  }
}

// Tokens past cu_seqlens[N] are the pool forms' padding only (above): in the FLA form cu_seqlens[N] < T stays a
// malformed cu_seqlens, recorded for check_errors().
TEST_P(GdnDecode, FlaFormKeepsCuSeqlensEndingAtT) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  const Spec s = varlen({1, 1, 1}, 1, 2, 16, 16, f32);
  const Inputs in = make_inputs(s, rng);
  HostTensor cu_t = ft::index_tensor(DType::i32, {3}, {0, 1, 2});  // N = 2 sequences, T = 3 tokens
  Placed Q(GetParam(), in.q, 0, 0), Kt(GetParam(), in.k, 0, 0), Vt(GetParam(), in.v, 0, 0), G(GetParam(), in.g, 0, 0),
      Bt(GetParam(), in.beta, 0, 0), O(GetParam(), f32, {1, 3, 2, 16}, 0), Cu(GetParam(), cu_t, 0, 0);
  for (Placed* p : {&Q, &Kt, &Vt, &G, &Bt, &O, &Cu}) p->upload();
  const TensorView gv = G.view(), bv = Bt.view(), cuv = Cu.view();
  fuseops::clear_errors();
  fuseops::fused_recurrent_gated_delta_rule(O.view(), nullptr, Q.view(), Kt.view(), Vt.view(), &gv, &bv, std::nullopt,
                                            nullptr, false, &cuv);
  O.download();
  EXPECT_TRUE(raises([] { fuseops::check_errors(); }, fuseops::ErrorKind::device_value,
                     {"fused_recurrent_gated_delta_rule", "cu_seqlens", "cu_seqlens[N] = T"}));
}

// The decode step of bench/baselines/fla_gdn_forward.py and the `gdn-decode` bench (Qwen3-Next: H 16, HV 32,
// K = V = 128): bf16 q, k, v, fp32 log-sigmoid g, bf16 beta, fp32 pool, int32 ssm_state_indices = arange(N),
// use_qk_l2norm_in_kernel, 16-byte aligned tensors (the fast kernel), at N = 16; and the reversed slot order.
// All offsets are 64-bit: N = 256 (134M pool elements) takes the same index arithmetic as N = 16.
TEST_P(GdnDecode, FlaBaselineStep) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  PoolCase pc;
  pc.s = fixed(16, 1, 16, 32, 128, 128, bf16);
  pc.s.l2norm = true;
  pc.slots = 16;
  pc.idx_dtype = DType::i32;
  pc.beta_dtype = bf16;
  pc.guard = 8;
  for (int64_t n = 0; n < 16; ++n) pc.idx.push_back(n);
  run_pool_case(GetParam(), pc, rng);
  PoolCase rev = pc;
  for (int64_t n = 0; n < 16; ++n) rev.idx[n] = 15 - n;
  run_pool_case(GetParam(), rev, rng);
  // more units (sequence, value head, column slice) than the fast kernel's resident warps on an H200 (132 SMs x 12):
  // every warp stages its next unit's state while it computes one; with padding slots, empty and multi-token
  // sequences, and a bf16 pool
  PoolCase many;
  std::vector<int64_t> lens;
  for (int64_t n = 0; n < 48; ++n) {
    lens.push_back(n % 7 == 3 ? 0 : 1 + n % 3);
    many.idx.push_back(n % 5 == 2 ? -1 : 47 - n);
  }
  many.s = varlen(lens, 8, 32, 64, 128, bf16);  // 48 x 32 x 4 = 6144 units
  many.s.l2norm = true;
  many.slots = 48;
  many.pool_dtype = bf16;
  many.idx_dtype = DType::i32;
  many.guard = 8;
  run_pool_case(GetParam(), many, rng);
}

/// RAII: runs `undo` at scope exit (the decode launch rules' testing hooks, set by the functions below).
class ScopeExit {
 public:
  explicit ScopeExit(std::function<void()> undo) : undo_(std::move(undo)) {}
  ~ScopeExit() { undo_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  std::function<void()> undo_;
};

/// CUDA builds: the decode launches at K = 128 take lanes of `rows` state rows (8 or 16) until the returned guard's
/// scope ends, then the launch rule again.
[[nodiscard]] ScopeExit decode_rows([[maybe_unused]] int rows) {
#if defined(FUSEOPS_WITH_CUDA)
  fuseops::detail::cuda::set_decode_rows_for_testing(rows);
  return ScopeExit([] { fuseops::detail::cuda::set_decode_rows_for_testing(0); });
#else
  return ScopeExit([] {});
#endif
}

/// CUDA builds: the decode launches skip the L2 prefetch of the state two units ahead until the returned guard's
/// scope ends.
[[nodiscard]] ScopeExit l2_prefetch_off() {
#if defined(FUSEOPS_WITH_CUDA)
  fuseops::detail::cuda::set_decode_l2_prefetch_off_for_testing(true);
  return ScopeExit([] { fuseops::detail::cuda::set_decode_l2_prefetch_off_for_testing(false); });
#else
  return ScopeExit([] {});
#endif
}

// The CUDA fast kernel at K = 128 runs lanes of 16 state rows, or of 8 for steps of few sequences (twice the units):
// both sum over K in one fixed tree of 8-row chains, so a sequence's o and state do not depend on which one the batch
// size picked. Both forced in turn on the same inputs: the same bytes, and the golden. FLA form with multi-token and
// empty sequences, V = 128 (staged inputs) and V = 100 (a partial last column slice, no staging), f32 / bf16 h0;
// then the pool forms (per-sequence and per-token writes, fused gating) against the golden with 8-row lanes.
TEST(GdnDecodeRows, SameBitsWithEightOrSixteenRowsPerLane) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  std::mt19937_64 rng = test_rng();
  for (int64_t V : {128, 100}) {
    for (DType h0 : {f32, bf16}) {
      Spec s = varlen({1, 3, 0, 2, 1}, 2, 4, 128, V, bf16);
      s.aligned = true;
      s.l2norm = true;
      s.h0_dtype = h0;
      SCOPED_TRACE(s.describe());
      const Inputs in = make_inputs(s, rng);
      const fuseops::reference::RecurrenceGolden gold = golden(s, in, /*round_normalized=*/false);
      Outputs r8, r16;
      {
        const ScopeExit rows = decode_rows(8);
        r8 = run_recurrent(Where::cuda, s, in);
      }
      {
        const ScopeExit rows = decode_rows(16);
        r16 = run_recurrent(Where::cuda, s, in);
      }
      EXPECT_TRUE(same_bytes(r8.o, r16.o)) << "o";
      EXPECT_TRUE(same_bytes(r8.final_state, r16.final_state)) << "final_state";
      EXPECT_TRUE(matches(r8.o, gold.o, s.dtype, "o"));
      EXPECT_TRUE(matches(r8.final_state, gold.final_state, s.dtype, "final_state"));
      if (HasFailure()) return;
    }
  }
  const ScopeExit rows = decode_rows(8);
  PoolCase step;
  step.s = fixed(3, 1, 2, 4, 128, 128, bf16);
  step.s.l2norm = true;
  step.guard = 8;
  step.idx = {2, -1, 0};
  run_pool_case(Where::cuda, step, rng);
  PoolCase gating = step;
  gating.fused_gating = true;
  gating.pool_dtype = bf16;
  run_pool_case(Where::cuda, gating, rng);
  PoolCase per_token;
  per_token.s = varlen({2, 3, 1}, 2, 4, 128, 128, bf16);
  per_token.guard = 8;
  per_token.cols = 3;
  per_token.idx = {0, 1, -1, 2, 3, 4, 5, -1, -1};
  run_pool_case(Where::cuda, per_token, rng);
}

// With three units or more per warp, each warp prefetches the state of the head two units ahead into the L2 (a hint).
// A step of 24 sequences x 32 value heads (6144 units at K = V = 128, over twice the resident warps of a 148-SM GPU),
// with and without the prefetch: the same bytes, and the golden. FLA form (h0 read) and the pool form (read and
// written in place, padding slots among the indices).
TEST(GdnDecodeL2Prefetch, SameBitsWithAndWithout) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(Where::cuda);
  std::mt19937_64 rng = test_rng();
  Spec s = fixed(24, 1, 16, 32, 128, 128, bf16);
  s.aligned = true;
  s.l2norm = true;
  s.h0_dtype = f32;
  SCOPED_TRACE(s.describe());
  const Inputs in = make_inputs(s, rng);
  const fuseops::reference::RecurrenceGolden gold = golden(s, in, /*round_normalized=*/false);
  const Outputs with = run_recurrent(Where::cuda, s, in);
  Outputs without;
  {
    const ScopeExit off = l2_prefetch_off();
    without = run_recurrent(Where::cuda, s, in);
  }
  EXPECT_TRUE(same_bytes(with.o, without.o)) << "o";
  EXPECT_TRUE(same_bytes(with.final_state, without.final_state)) << "final_state";
  EXPECT_TRUE(matches(with.o, gold.o, s.dtype, "o"));
  EXPECT_TRUE(matches(with.final_state, gold.final_state, s.dtype, "final_state"));
  PoolCase pool;
  pool.s = fixed(24, 1, 16, 32, 128, 128, bf16);
  pool.s.l2norm = true;
  pool.guard = 8;
  pool.slots = 30;
  for (int64_t n = 0; n < 24; ++n) pool.idx.push_back(n % 7 == 3 ? -1 : (n * 11) % 30);
  run_pool_case(Where::cuda, pool, rng);  // against the golden, with the prefetch
}

// g and beta in f32, bf16 and f16. On CUDA, a step whose units do not outnumber the warps (this one) copies the first
// token's gates with its staged inputs as the 4-byte words that hold them: a 16-bit gate travels with its neighbour
// head's and is taken from its half of the word (HV even); with HV odd they are loaded. Against the golden.
TEST_P(GdnDecode, GateDtypes) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (DType gate : {bf16, DType::f16, f32}) {
    for (int64_t HV : {4, 3}) {
      Spec s = varlen({1, 3, 0, 2, 1}, HV == 4 ? 2 : 1, HV, 128, 64, bf16);
      s.aligned = true;
      s.gate_dtype = gate;
      s.l2norm = true;
      check_recurrent(GetParam(), s, rng);
      if (HasFailure()) return;
    }
  }
}

// FLA's per-channel beta [B, T, HV, V] (v'[j] = beta[j] (v[j] - (S^T k)[j])), FLA form, against the golden: f32 and
// bf16 inputs with f32 / bf16 betas; one token per sequence and several; varlen with an empty sequence and no initial
// state; l2 normalisation in the kernel. Shapes of both CUDA kernels' per-head rules (K = V = 128 aligned: the fast
// kernel's; K = 60, V = 100: the fallback's); with per-channel beta CUDA takes the fallback for each.
TEST_P(GdnDecode, PerChannelBetaFlaForm) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  struct Dims {
    int64_t K, V;
  };
  for (Dims d : {Dims{128, 128}, Dims{60, 100}, Dims{64, 36}}) {
    for (DType dt : {f32, bf16}) {
      Spec step = fixed(3, 1, 1, 2, d.K, d.V, dt);
      step.beta_per_channel = true;
      step.aligned = true;
      check_recurrent(GetParam(), step, rng);
      Spec multi = fixed(2, 3, 2, 4, d.K, d.V, dt);
      multi.beta_per_channel = true;
      multi.gate_dtype = bf16;
      multi.l2norm = true;
      check_recurrent(GetParam(), multi, rng);
      Spec var = varlen({2, 0, 3, 1}, 1, 2, d.K, d.V, dt);
      var.beta_per_channel = true;
      var.has_h0 = false;
      var.cu_dtype = DType::i64;
      check_recurrent(GetParam(), var, rng);
      if (HasFailure()) return;
    }
  }
}

// Per-channel beta in the pool form: [N] indices with padding slots (-1: o rows 0, nothing read or written), f32 and
// bf16 pools, multi-token varlen sequences with an empty one; [N, Tmax] per-token writes with num_accepted_tokens; a
// bad index recorded (its sequence padding).
TEST_P(GdnDecode, PerChannelBetaPool) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (DType pd : {f32, bf16}) {
    for (DType dt : {f32, bf16}) {
      PoolCase step;
      step.s = fixed(5, 1, 2, 4, 128, 128, dt);
      step.s.beta_per_channel = true;
      step.s.l2norm = true;
      step.pool_dtype = pd;
      step.idx = {3, -1, 0, 7, 5};
      step.guard = 8;
      run_pool_case(GetParam(), step, rng);
      PoolCase var;
      var.s = varlen({2, 0, 3, 1}, 1, 2, 48, 40, dt);
      var.s.beta_per_channel = true;
      var.pool_dtype = pd;
      var.idx = {6, 1, 2, -1};
      run_pool_case(GetParam(), var, rng);
      if (HasFailure()) return;
    }
  }
  PoolCase spec;
  spec.s = varlen({3, 1, 2}, 2, 4, 64, 64, bf16);
  spec.s.beta_per_channel = true;
  spec.beta_dtype = bf16;
  spec.cols = 3;
  spec.idx = {0, 1, 2, /**/ 3, -1, -1, /**/ 4, -1, 6};
  spec.accepted = {3, 1, 2};  // start slots 2, 3, -1 (the last sequence is padding)
  run_pool_case(GetParam(), spec, rng);
  PoolCase bad;
  bad.s = fixed(3, 1, 1, 2, 64, 32, f32);
  bad.s.beta_per_channel = true;
  bad.idx = {1, 99, -1};
  bad.bad_rows = {1};
  bad.error_words = {"ssm_state_indices", "index 1"};
  run_pool_case(GetParam(), bad, rng);
  fuseops::clear_errors();
}

// A per-channel beta whose V entries are all equal gives the result of the per-head beta: the same bytes on the CPU
// (the same arithmetic), within the dtype's tolerance on CUDA (per-channel beta takes the fallback kernel, which sums
// in another order than the fast one). FLA form, fixed length with an initial state and varlen with an empty
// sequence, f32 and bf16.
TEST_P(GdnDecode, PerChannelBetaOfEqualColumnsIsPerHead) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (DType dt : {f32, bf16}) {
    for (bool var : {false, true}) {
      Spec s = var ? varlen({1, 0, 3, 2}, 2, 4, 128, 128, dt) : fixed(3, 2, 1, 2, 64, 48, dt);
      s.aligned = true;
      s.l2norm = var;
      s.has_h0 = !var;
      SCOPED_TRACE(s.describe());
      const Inputs in = make_inputs(s, rng);
      Inputs pc = in;
      pc.beta = beta_over_columns(in.beta, s.V);
      Spec sc = s;
      sc.beta_per_channel = true;
      const Outputs head = run_recurrent(GetParam(), s, in), chan = run_recurrent(GetParam(), sc, pc);
      if (GetParam() == Where::cpu) {
        EXPECT_TRUE(same_bytes(chan.o, head.o)) << "o";
        EXPECT_TRUE(same_bytes(chan.final_state, head.final_state)) << "final_state";
      } else {
        EXPECT_TRUE(matches(chan.o, head.o.to_double(), dt, "o against per-head beta"));
        EXPECT_TRUE(matches(chan.final_state, head.final_state.to_double(), dt, "final_state against per-head beta"));
      }
      if (HasFailure()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GdnDecode, ::testing::Values(Where::cpu, Where::cuda), where_param_name);

}  // namespace
}  // namespace fuseops_test::gdn_forward
