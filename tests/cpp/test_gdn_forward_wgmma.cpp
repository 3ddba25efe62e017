// Edges of the warpgroup-MMA (wgmma, sm_90a) paths of the GDN chunked forward (docs/ops/gdn-log.md, "Warpgroup (wgmma)
// variant" of fwd_h and "Warpgroup (wgmma) kernel" of chunk_fwd_o), taken on CUDA where q, k, v (and the stages'
// intermediates) are one 16-bit dtype, chunk 64, K = 128 and every row 16-byte aligned; the CPU backend runs the same
// specs on its one path. Inputs the other GdnForward tests do not give these kernels: varlen batches of sequences
// shorter than a chunk (the 64-row tensor-map boxes of fwd_o run into the next sequence, whose values are huge or
// NaN), fixed length with B = 3 and T not a multiple of 64 (boxes past T in each batch row), value heads split over
// blocks or walked by one block (G = 1 .. 8), V = 72 / 100 / 192 / 256, o of another dtype and misaligned, no g,
// strong / zero decays, no or a large initial state, scale other than K^-0.5, l2 normalisation, q / k / v as slices
// of a fused qkv buffer, as head-major (transposed) views and with k expanded over the key heads, and the split run.
// Every comparison is per sequence (or batch row), so that an error in a one-token sequence is not diluted by its
// neighbours.
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gdn_forward_test_util.h"

namespace fuseops_test::gdn_forward {
namespace {

namespace ref = fuseops::reference;
using gdn::Placed;
using ft::index_tensor;
constexpr DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;

class GdnWgmmaEdges : public ::testing::TestWithParam<Where> {};

/// Rows [r0, r1) of `x` seen as [rows, cols], as a compact [r1 - r0, cols] tensor of x's dtype.
HostTensor row_range(const HostTensor& x, int64_t r0, int64_t r1) {
  HostTensor out(x.dtype(), {r1 - r0, x.cols()});
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t c = 0; c < x.cols(); ++c) out.set(r - r0, c, static_cast<float>(x.get(r, c)));
  }
  return out;
}

std::vector<double> elem_range(const std::vector<double>& v, int64_t e0, int64_t e1) {
  return {v.begin() + static_cast<std::ptrdiff_t>(e0), v.begin() + static_cast<std::ptrdiff_t>(e1)};
}

/// Tokens [t0, t1) of sequence n in the flat B T token order.
std::pair<int64_t, int64_t> seq_tokens(const Spec& s, const std::vector<int64_t>& cu, int64_t n) {
  return s.varlen() ? std::pair{cu[n], cu[n + 1]} : std::pair{n * s.T, (n + 1) * s.T};
}

/// o [B, T, HV, V] of every sequence not in `skip` against its rows of the golden, each sequence on its own.
void expect_o_each_sequence(const Spec& s, const std::vector<int64_t>& cu, const HostTensor& o,
                            const std::vector<double>& gold, double limit, const std::vector<bool>& skip = {}) {
  for (int64_t n = 0; n < s.N(); ++n) {
    const auto [t0, t1] = seq_tokens(s, cu, n);
    if (t1 == t0 || (!skip.empty() && skip[n])) continue;
    EXPECT_TRUE(matches(row_range(o, t0 * s.HV, t1 * s.HV), elem_range(gold, t0 * s.HV * s.V, t1 * s.HV * s.V),
                        s.dtype, "o of sequence " + std::to_string(n), limit));
  }
}

/// o and final_state of every sequence against the golden (final_state [N, HV, K, V]: an empty sequence's is its
/// initial state).
void expect_each_sequence(const Spec& s, const std::vector<int64_t>& cu, const Outputs& out,
                          const ref::RecurrenceGolden& gold, double limit, const std::vector<bool>& skip = {}) {
  expect_o_each_sequence(s, cu, out.o, gold.o, limit, skip);
  const int64_t rows = s.HV * s.K;
  for (int64_t n = 0; n < s.N(); ++n) {
    if (!skip.empty() && skip[n]) continue;
    EXPECT_TRUE(matches(row_range(out.final_state, n * rows, (n + 1) * rows),
                        elem_range(gold.final_state, n * rows * s.V, (n + 1) * rows * s.V), s.dtype,
                        "final_state of sequence " + std::to_string(n), limit));
  }
}

/// The forward's outputs `out` of `in` against the token recurrence, sequence by sequence.
void expect_forward(const Spec& s, const Inputs& in, const Outputs& out) {
  expect_each_sequence(s, in.cu, out, golden(s, in, true), forward_limit(s, in));
}

/// Multiplies the q and v rows of sequence n by f (k stays unit-norm: the recurrence stays bounded).
void scale_sequence(const Spec& s, Inputs& in, int64_t n, float f) {
  const auto [t0, t1] = seq_tokens(s, in.cu, n);
  for (int64_t r = t0 * s.H; r < t1 * s.H; ++r) {
    for (int64_t c = 0; c < s.K; ++c) in.q.set(r, c, static_cast<float>(in.q.get(r, c) * f));
  }
  for (int64_t r = t0 * s.HV; r < t1 * s.HV; ++r) {
    for (int64_t c = 0; c < s.V; ++c) in.v.set(r, c, static_cast<float>(in.v.get(r, c) * f));
  }
}

/// `in` with NaN in the q, k, v rows of the sequences marked in `poisoned`.
Inputs poison_sequences(const Spec& s, const Inputs& in, const std::vector<bool>& poisoned) {
  Inputs bad = in;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t n = 0; n < s.N(); ++n) {
    if (!poisoned[n]) continue;
    const auto [t0, t1] = seq_tokens(s, in.cu, n);
    for (int64_t r = t0 * s.H; r < t1 * s.H; ++r) {
      for (int64_t c = 0; c < s.K; ++c) {
        bad.q.set(r, c, nan);
        bad.k.set(r, c, nan);
      }
    }
    for (int64_t r = t0 * s.HV; r < t1 * s.HV; ++r) {
      for (int64_t c = 0; c < s.V; ++c) bad.v.set(r, c, nan);
    }
  }
  return bad;
}

/// One whole-forward case: the spec, a factor on the initial state, and whether it runs on CUDA only (CPU golden and
/// CPU backend of more than ~0.5 s, covering nothing new on the CPU).
struct Case {
  Spec s;
  double h0_mult = 1;
  bool cuda_only = false;
};

Spec aligned(Spec s) {
  s.aligned = true;
  return s;
}

// chunk_gated_delta_rule (fwd_h wgmma variant, fwd_o wgmma kernel where V % 128 == 0) against the token recurrence,
// sequence by sequence:
//  - varlen with empty sequences first and last, 1 / 2 / 63 / 64 / 128 / 65-token sequences (bf16; f16 with bf16
//    gates and initial state): a chunk's fwd_o box holds rows of the next sequence, fwd_h's last chunk is cp.async;
//  - 16 short varlen sequences with 4 value heads (on an H200 fwd_h's V blocks of 64; the others take 32 or 16);
//  - fixed length B = 3 with T = 193, 63 and 1: the boxes run past T in every batch row (zero fill; batch coordinate);
//  - G = HV / H = 8 with 2 chunks (value heads split over blocks), G = 1 with H = 4;
//  - V = 192 (fwd_o falls back to mma.sync, fwd_h's V blocks), 256 (two fwd_o V blocks), 72 (a partial fwd_h V
//    block) and 100 (u and h rows not 16-byte: element loads and stores beside the tensor-map w / k);
//  - strong (-100 .. -200 per token) and zero decays, no initial state, an initial state x 20 with scale 0.7,
//    use_qk_l2norm_in_kernel (the normalised q, k in the workspace);
//  - CUDA only: G = 8 with 70 chunks (on an H200 blocks of 2 value heads), 300 chunks (one block walks all 8), a
//    varlen batch of long and short sequences, and 300 sequences of 0 .. 130 tokens (f16; many empty chunk slots).
TEST_P(GdnWgmmaEdges, ForwardShapes) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  std::vector<Case> cases;
  cases.push_back({aligned(varlen({0, 1, 2, 63, 64, 128, 65, 1, 0}, 2, 4, 128, 128, bf16))});
  {
    Spec s = aligned(varlen({0, 63, 1, 64, 2, 0}, 1, 2, 128, 128, f16));
    s.gate_dtype = bf16;
    s.h0_dtype = bf16;
    cases.push_back({s});
  }
  // 16 sequences x 4 value heads x 2 V blocks: fwd_h's V blocks of 64 with two tile buffers
  cases.push_back({aligned(varlen({1, 63, 64, 65, 2, 0, 128, 3, 1, 63, 64, 65, 2, 0, 128, 3}, 1, 4, 128, 128, bf16))});
  cases.push_back({aligned(fixed(3, 193, 1, 2, 128, 128, bf16))});
  cases.push_back({aligned(fixed(3, 63, 2, 4, 128, 128, f16))});
  cases.push_back({aligned(fixed(3, 1, 1, 2, 128, 128, bf16))});
  cases.push_back({aligned(fixed(1, 70, 1, 8, 128, 128, bf16))});
  cases.push_back({aligned(fixed(1, 100, 4, 4, 128, 128, f16))});
  cases.push_back({aligned(fixed(1, 130, 1, 2, 128, 192, bf16))});
  cases.push_back({aligned(fixed(1, 70, 1, 2, 128, 256, f16))});
  cases.push_back({aligned(fixed(1, 100, 1, 2, 128, 72, bf16))});
  cases.push_back({aligned(fixed(1, 100, 1, 2, 128, 100, f16))});
  for (Decay d : {Decay::strong, Decay::zero}) {
    Spec s = aligned(fixed(2, 150, 1, 2, 128, 128, d == Decay::zero ? f16 : bf16));
    s.decay = d;
    cases.push_back({s});
  }
  {
    Spec s = aligned(fixed(2, 150, 1, 2, 128, 128, bf16));
    s.has_h0 = false;
    cases.push_back({s});
    s.has_h0 = true;
    s.scale = 0.7;
    cases.push_back({s, 20.0});
    s = aligned(fixed(2, 130, 2, 4, 128, 128, bf16));
    s.l2norm = true;
    cases.push_back({s});
  }
  cases.push_back({aligned(fixed(1, 64 * 70 + 5, 1, 8, 128, 128, bf16)), 1, true});
  cases.push_back({aligned(fixed(1, 64 * 300, 1, 8, 128, 128, bf16)), 1, true});
  cases.push_back({aligned(varlen({1, 4000, 63, 1, 2000, 64}, 2, 8, 128, 128, bf16)), 1, true});
  {
    std::vector<int64_t> lens(300);
    std::uniform_int_distribution<int64_t> len(0, 130);
    for (int64_t& l : lens) l = len(rng);
    cases.push_back({aligned(varlen(lens, 1, 2, 128, 128, f16)), 1, true});
  }
  for (const Case& c : cases) {
    if (c.cuda_only && GetParam() != Where::cuda) continue;
    SCOPED_TRACE(c.s.describe() + " h0 x " + std::to_string(c.h0_mult));
    Inputs in = make_inputs(c.s, rng);
    for (int64_t r = 0; r < in.h0.rows() && c.h0_mult != 1; ++r) {
      for (int64_t x = 0; x < c.s.V; ++x) in.h0.set(r, x, static_cast<float>(in.h0.get(r, x) * c.h0_mult));
    }
    expect_forward(c.s, in, run_chunk(GetParam(), c.s, in));
    if (HasFailure()) return;
  }
}

// Sequences next to sequences of huge values (q and v x 1e3 in bf16, x 30 in f16: o and the states of those are
// that much larger, still finite): the tensor-map boxes of a short sequence's chunk hold the neighbour's rows, which
// the causal mask must remove exactly; every sequence (the huge ones too) against its golden.
TEST_P(GdnWgmmaEdges, ForwardHugeNeighbours) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (DType dt : {bf16, f16}) {
    Spec s = aligned(varlen({63, 64, 1, 65, 2, 30}, 1, 2, 128, 128, dt));
    SCOPED_TRACE(s.describe());
    Inputs in = make_inputs(s, rng);
    for (int64_t n : {1, 3, 5}) scale_sequence(s, in, n, dt == bf16 ? 1e3f : 30.f);
    expect_forward(s, in, run_chunk(GetParam(), s, in));
    if (HasFailure()) return;
  }
}

// Sequence isolation: NaN in the q, k, v of some sequences of a varlen batch leaves the o and final_state of the
// others unchanged, byte for byte (the same op on clean inputs), and equal to their golden. The other sequences are
// 63, 1 and 2 tokens long, each followed by a poisoned one, so every kernel's chunk tile that reaches past a
// sequence's end meets NaN rows (a masked product 0 x NaN would leak them).
TEST_P(GdnWgmmaEdges, ForwardSequenceIsolation) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (DType dt : {bf16, f16}) {
    Spec s = aligned(varlen({63, 64, 1, 70, 2, 5}, 1, 2, 128, 128, dt));
    SCOPED_TRACE(s.describe());
    const Inputs in = make_inputs(s, rng);
    const Outputs clean = run_chunk(GetParam(), s, in);
    const std::vector<bool> poisoned = {false, true, false, true, false, true};
    const Inputs bad = poison_sequences(s, in, poisoned);
    const Outputs out = run_chunk(GetParam(), s, bad);
    const int64_t rows = s.HV * s.K;
    for (int64_t n = 0; n < s.N(); ++n) {
      if (poisoned[n]) continue;
      const auto [t0, t1] = seq_tokens(s, in.cu, n);
      EXPECT_TRUE(same_bytes(row_range(out.o, t0 * s.HV, t1 * s.HV), row_range(clean.o, t0 * s.HV, t1 * s.HV)))
          << "o of sequence " << n;
      EXPECT_TRUE(same_bytes(row_range(out.final_state, n * rows, (n + 1) * rows),
                             row_range(clean.final_state, n * rows, (n + 1) * rows)))
          << "final_state of sequence " << n;
    }
    expect_each_sequence(s, in.cu, out, golden(s, bad, true), forward_limit(s, in), poisoned);
    if (HasFailure()) return;
  }
}

/// Layouts of q, k, v (all with 16-byte rows): slices of one buffer whose token rows hold q [H][K], k [H][K],
/// v [HV][V] and 8 NaN elements (a fused qkv projection); head-major buffers [B, heads, T, dim] seen as
/// [B, T, heads, dim]; compact q and v with k a [B, T, 1, K] buffer expanded over the key heads (head stride 0;
/// the spec's k must have equal heads).
enum class Qkv { fused, head_major, shared_k };

/// chunk_gated_delta_rule with q, k, v in `layout`. Guards and inputs checked untouched.
Outputs run_chunk_qkv_views(Where w, const Spec& s, const Inputs& in, Qkv layout) {
  const DType dt = s.dtype;
  const int64_t W = 2 * s.H * s.K + s.HV * s.V + 8;
  std::vector<std::unique_ptr<Placed>> bufs;
  TensorView qv, kv, vv;
  auto at = [&](const Placed& p, int64_t elems) {
    return static_cast<void*>(static_cast<unsigned char*>(p.view().data) + elems * fuseops::dtype_size(dt));
  };
  // a buffer holding `buf` (uploaded at once: a CUDA view points at device memory, which upload() allocates), and a
  // view of it at element `off` with `shape` and `strides`
  auto place = [&](const HostTensor& buf, int64_t off, std::initializer_list<int64_t> shape,
                   std::initializer_list<int64_t> strides) {
    if (off == 0) {
      bufs.push_back(std::make_unique<Placed>(w, buf, 0, 8));
      bufs.back()->upload();
    }
    return TensorView(at(*bufs.back(), off), dt, bufs.back()->view().device, shape, strides);
  };
  if (layout == Qkv::fused) {
    HostTensor buf(dt, {s.B * s.T, W});
    buf.poison();
    for (int64_t bt = 0; bt < s.B * s.T; ++bt) {
      for (int64_t x = 0; x < s.H * s.K; ++x) {
        buf.set(bt, x, static_cast<float>(in.q.get(bt * s.H + x / s.K, x % s.K)));
        buf.set(bt, s.H * s.K + x, static_cast<float>(in.k.get(bt * s.H + x / s.K, x % s.K)));
      }
      for (int64_t x = 0; x < s.HV * s.V; ++x) {
        buf.set(bt, 2 * s.H * s.K + x, static_cast<float>(in.v.get(bt * s.HV + x / s.V, x % s.V)));
      }
    }
    qv = place(buf, 0, {s.B, s.T, s.H, s.K}, {s.T * W, W, s.K, 1});
    kv = place(buf, s.H * s.K, {s.B, s.T, s.H, s.K}, {s.T * W, W, s.K, 1});
    vv = place(buf, 2 * s.H * s.K, {s.B, s.T, s.HV, s.V}, {s.T * W, W, s.V, 1});
  } else if (layout == Qkv::head_major) {
    for (auto [x, heads, dim, view] : {std::tuple{&in.q, s.H, s.K, &qv}, std::tuple{&in.k, s.H, s.K, &kv},
                                       std::tuple{&in.v, s.HV, s.V, &vv}}) {
      HostTensor buf(dt, {s.B * heads * s.T, dim});
      for (int64_t b = 0; b < s.B; ++b) {
        for (int64_t t = 0; t < s.T; ++t) {
          for (int64_t h = 0; h < heads; ++h) {
            for (int64_t c = 0; c < dim; ++c) {
              buf.set((b * heads + h) * s.T + t, c, static_cast<float>(x->get((b * s.T + t) * heads + h, c)));
            }
          }
        }
      }
      *view = place(buf, 0, {s.B, s.T, heads, dim}, {heads * s.T * dim, dim, s.T * dim, 1});
    }
  } else {
    qv = place(in.q, 0, {s.B, s.T, s.H, s.K}, {s.T * s.H * s.K, s.H * s.K, s.K, 1});
    vv = place(in.v, 0, {s.B, s.T, s.HV, s.V}, {s.T * s.HV * s.V, s.HV * s.V, s.V, 1});
    HostTensor buf(dt, {s.B * s.T, s.K});
    for (int64_t bt = 0; bt < s.B * s.T; ++bt) {
      for (int64_t c = 0; c < s.K; ++c) buf.set(bt, c, static_cast<float>(in.k.get(bt * s.H, c)));
    }
    kv = place(buf, 0, {s.B, s.T, s.H, s.K}, {s.T * s.K, s.K, 0, 1});
  }
  Placed g(w, in.g, 0, 8), beta(w, in.beta, 0, 8), h0(w, in.h0, 0, 8), o(w, dt, {s.B, s.T, s.HV, s.V}, 8),
      ht(w, f32, {s.N(), s.HV, s.K, s.V}, 8);
  std::unique_ptr<Placed> cu;
  if (s.varlen()) cu = std::make_unique<Placed>(w, index_tensor(s.cu_dtype, in.cu), 0, 0);
  for (Placed* p : {&g, &beta, &h0, &o, &ht}) p->upload();
  if (cu) cu->upload();
  const TensorView cuv = cu ? cu->view() : TensorView{}, h0v = h0.view();
  TensorView htv = ht.view();
  const std::size_t bytes = fuseops::chunk_gated_delta_rule_workspace_size(qv, vv, cu ? &cuv : nullptr, s.l2norm, s.BT);
  Placed ws(w, DType::f32, {static_cast<int64_t>(bytes / 4 + 1)}, 0);
  ws.upload();
  fuseops::chunk_gated_delta_rule(o.view(), &htv, qv, kv, vv, g.view(), beta.view(), s.scale,
                                  s.has_h0 ? &h0v : nullptr, s.l2norm, cu ? &cuv : nullptr, ws.view(), s.BT);
  for (auto& p : bufs) p->download();
  for (Placed* p : {&g, &beta, &h0, &o, &ht}) p->download();
  for (auto& p : bufs) EXPECT_TRUE(p->untouched_outside(false));
  for (Placed* p : {&g, &beta, &h0}) EXPECT_TRUE(p->untouched_outside(false));
  EXPECT_TRUE(o.untouched_outside(true));
  EXPECT_TRUE(ht.untouched_outside(true));
  return {o.read(), ht.read(), {}};
}

// q, k, v as slices of a fused qkv buffer (token stride 2 H K + HV V + 8, NaN in the 8 padding elements), as
// head-major views (token stride K, head stride T K) and with k expanded over 2 key heads (head stride 0): still
// 16-byte rows, which tensor maps can describe (or the kernels fall back); fixed length B = 2 with a partial last
// chunk and varlen with short sequences.
TEST_P(GdnWgmmaEdges, ForwardStridedViews) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  const Spec specs[] = {fixed(2, 100, 2, 4, 128, 128, bf16), varlen({1, 63, 64, 2}, 2, 4, 128, 128, f16)};
  for (const Spec& s : specs) {
    for (Qkv layout : {Qkv::fused, Qkv::head_major, Qkv::shared_k}) {
      SCOPED_TRACE(s.describe() + (layout == Qkv::fused        ? " fused qkv"
                                   : layout == Qkv::head_major ? " head-major"
                                                               : " k expanded over heads"));
      Inputs in = make_inputs(s, rng);
      if (layout == Qkv::shared_k) {  // every key head holds head 0's keys
        for (int64_t r = 0; r < in.k.rows(); ++r) {
          for (int64_t c = 0; c < s.K; ++c) in.k.set(r, c, static_cast<float>(in.k.get(r - r % s.H, c)));
        }
      }
      expect_forward(s, in, run_chunk_qkv_views(GetParam(), s, in, layout));
      if (HasFailure()) return;
    }
  }
}

// Running T1 = 100 tokens (not a multiple of 64), then T2 = 93 from the returned state, equals running all at once
// (B = 2, K = V = 128, 16-byte rows: the wgmma paths with a partial last chunk in both runs).
TEST_P(GdnWgmmaEdges, SplitRun) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (DType dt : {bf16, f16}) {
    check_split_run(GetParam(), aligned(fixed(2, 193, 1, 2, 128, 128, dt)), 100, rng);
    if (HasFailure()) return;
  }
}

/// One chunk_fwd_o case: o's dtype and guard (5: misaligned, element stores), g present, scale, and `poisoned`
/// sequences (varlen) whose q, k, v_new rows are NaN.
struct OCase {
  Spec s;
  DType o_dtype;
  int64_t o_guard;
  bool has_g;
  double scale;
  bool cuda_only = false;
};

/// chunk_fwd_o on q, k, v_new = in.v, h (inputs 16-byte aligned: guards of 8) with g = the chunk-local cumsum of
/// in.g (returned in `gc`); o NaN-poisoned first, guards and inputs checked untouched.
HostTensor run_fwd_o(Where w, const OCase& c, const Inputs& in, const HostTensor& h, HostTensor& gc) {
  const Spec& s = c.s;
  std::unique_ptr<Placed> cu;
  if (s.varlen()) cu = std::make_unique<Placed>(w, index_tensor(DType::i64, in.cu), 0, 0);
  Placed q(w, in.q, 0, 8), k(w, in.k, 0, 8), vn(w, in.v, 0, 8), hs(w, h, 0, 8), g(w, in.g),
      G(w, f32, {s.B, s.T, s.HV}), O(w, c.o_dtype, {s.B, s.T, s.HV, s.V}, c.o_guard);
  for (Placed* p : {&q, &k, &vn, &hs, &g, &G, &O}) p->upload();
  if (cu) cu->upload();
  const TensorView cuv = cu ? cu->view() : TensorView{}, gv = G.view();
  fuseops::chunk_local_cumsum(G.view(), g.view(), s.BT, cu ? &cuv : nullptr);
  fuseops::chunk_fwd_o(O.view(), q.view(), k.view(), vn.view(), hs.view(), c.has_g ? &gv : nullptr, c.scale, s.BT,
                       cu ? &cuv : nullptr);
  for (Placed* p : {&q, &k, &vn, &hs, &G, &O}) p->download();
  for (Placed* p : {&q, &k, &vn, &hs}) EXPECT_TRUE(p->untouched_outside(false));
  EXPECT_TRUE(O.untouched_outside(true));
  gc = G.read();
  return O.read();
}

/// Random states h [B, NS, HV, K, V] for chunk_fwd_o of a spec (o is linear in h: any values test it).
HostTensor random_states(const Spec& s, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  const int64_t NS = fuseops::gdn_chunk_slots(s.T, s.N(), s.BT, s.varlen());
  HostTensor h(s.dtype, {s.B, NS, s.HV, s.K, s.V});
  for (int64_t r = 0; r < h.rows(); ++r) {
    for (int64_t x = 0; x < s.V; ++x) h.set(r, x, static_cast<float>(0.5 * normal(rng)));
  }
  return h;
}

std::vector<double> fwd_o_reference(const OCase& c, const Inputs& in, const HostTensor& h, const HostTensor& gc) {
  ref::StageInputs si{c.s.B, c.s.T, c.s.H, c.s.HV, c.s.K, c.s.V, c.s.BT, in.cu, {}};
  if (c.has_g) si.g = gc.to_double();
  std::vector<double> o;
  ref::fwd_o_golden(si, in.q.to_double(), in.k.to_double(), in.v.to_double(), h.to_double(), c.scale, o);
  return o;
}

// chunk_fwd_o on its own (K 128, chunk 64: on CUDA the wgmma kernel where V % 128 == 0), each sequence against the
// double golden from the same stored inputs: varlen with 1 / 2 / 63 / 64 / 128 / 65-token sequences and an empty one
// (scale 0.7); fixed length B = 3, T = 63 with o in f32; B = 3, T = 193, V = 256 with a misaligned o (element
// stores) and no g; V = 256 (two V blocks) with H = 2, G = 2, no g; G = 8 over 2 and (CUDA only) 40 chunks (value heads
// split over blocks) with o in f32 (two-element stores of another dtype).
TEST_P(GdnWgmmaEdges, OutputStage) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  Spec v1 = varlen({1, 2, 63, 64, 0, 128, 65, 1}, 1, 2, 128, 128, bf16);
  const std::vector<OCase> cases = {
      {v1, bf16, 8, true, 0.7},
      {fixed(3, 63, 1, 4, 128, 128, f16), f32, 8, true, 0.125},
      {fixed(3, 193, 1, 2, 128, 256, bf16), bf16, 5, false, 0.125},
      {fixed(1, 130, 2, 4, 128, 256, f16), f16, 8, false, 0.3},
      {fixed(1, 100, 1, 8, 128, 128, bf16), f32, 8, true, 0.125},
      {fixed(1, 64 * 40 - 3, 1, 8, 128, 128, bf16), f32, 5, true, 0.125, true},
  };
  for (const OCase& c : cases) {
    if (c.cuda_only && GetParam() != Where::cuda) continue;
    SCOPED_TRACE(c.s.describe() + " o " + fuseops::dtype_name(c.o_dtype) + " guard " + std::to_string(c.o_guard) +
                 (c.has_g ? "" : " no g") + " scale " + std::to_string(c.scale));
    const Inputs in = make_inputs(c.s, rng);
    const HostTensor h = random_states(c.s, rng);
    HostTensor gc;
    const HostTensor o = run_fwd_o(GetParam(), c, in, h, gc);
    expect_o_each_sequence(c.s, in.cu, o, fwd_o_reference(c, in, h, gc), 0);
    if (HasFailure()) return;
  }
}

// chunk_fwd_o's sequence isolation: NaN in the q, k and v_new rows of the sequences after a 63-, a 1- and a 2-token
// one leaves those sequences' o unchanged byte for byte and equal to their golden. On CUDA
// the wgmma kernel's 64-row boxes of such a chunk hold the NaN rows of the next sequence; the causal mask zeroes
// their scores, and P v_new must not form 0 x NaN.
TEST_P(GdnWgmmaEdges, OutputStageSequenceIsolation) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (DType dt : {bf16, f16}) {
    const OCase c{varlen({63, 64, 1, 70, 2, 5}, 1, 2, 128, 128, dt), dt, 8, true, 0.125};
    SCOPED_TRACE(c.s.describe());
    const Spec& s = c.s;
    const Inputs in = make_inputs(s, rng);
    const HostTensor h = random_states(s, rng);
    HostTensor gc, gc_bad;
    const HostTensor clean = run_fwd_o(GetParam(), c, in, h, gc);
    const std::vector<bool> poisoned = {false, true, false, true, false, true};
    const Inputs bad = poison_sequences(s, in, poisoned);
    const HostTensor o = run_fwd_o(GetParam(), c, bad, h, gc_bad);
    for (int64_t n = 0; n < s.N(); ++n) {
      if (poisoned[n]) continue;
      const auto [t0, t1] = seq_tokens(s, in.cu, n);
      EXPECT_TRUE(same_bytes(row_range(o, t0 * s.HV, t1 * s.HV), row_range(clean, t0 * s.HV, t1 * s.HV)))
          << "o of sequence " << n;
    }
    expect_o_each_sequence(s, in.cu, o, fwd_o_reference(c, in, h, gc), 0, poisoned);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GdnWgmmaEdges, ::testing::Values(Where::cpu, Where::cuda), where_param_name);

}  // namespace
}  // namespace fuseops_test::gdn_forward
