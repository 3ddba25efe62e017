// The GDN intra-chunk ops (fuseops/gdn.h) against the float64 golden, on the CPU backend always and on the CUDA
// backend when a device is present. Every case runs the whole family on one input set (tests/cpp/gdn_test_util.h):
// kkt in the output dtype and in f32, solve_tril of both, the fused op twice; it compares A, the fused inverse and
// solve_tril(A) with the golden (element bounds and the relative-RMS criterion, docs/ops/gdn.md "Tolerances"),
// requires fused == solve_tril(kkt in f32) and fused == fused byte for byte, finite outputs everywhere, and that
// nothing outside the outputs (guards, padding, inputs) was written. Outputs are NaN-poisoned before each run.
#include <climits>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/gdn_chunks.h"
#include "gdn_test_util.h"

namespace fuseops_test::gdn {
namespace {

namespace ref = fuseops::reference;
constexpr DType f32 = DType::f32, f16 = DType::f16, bf16 = DType::bf16;

class GdnIntra : public ::testing::TestWithParam<Where> {};

// Chunk sizes 16 / 32 / 64 x head dims 1, 60, 64, 100, 128, 256, each with an f32 and a 16-bit output; T = 77 is no
// multiple of any chunk size; odd head dims take padded (non-contiguous) inputs.
TEST_P(GdnIntra, ChunkSizesAndHeadDims) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (int64_t BT : {16, 32, 64}) {
    for (int64_t K : {1, 60, 64, 100, 128, 256}) {
      Spec s = fixed(2, 77, 1, 2, K, BT);
      s.strided = K == 60 || K == 100;
      check_spec(GetParam(), s, rng);
      s.out_dtype = K % 3 == 1 ? f16 : bf16;  // 16-bit outputs: the tensor-core inverse at chunk 32 / 64
      check_spec(GetParam(), s, rng);
      if (HasFailure()) return;
    }
  }
}

// Every combination of k, beta and output dtypes.
TEST_P(GdnIntra, Dtypes) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  int i = 0;
  for (DType kd : {f32, f16, bf16}) {
    for (DType bd : {f32, f16, bf16}) {
      for (DType od : {f32, f16, bf16}) {
        Spec s = fixed(1, 70, 2, 2, 64, i % 2 ? 32 : 64);
        s.k_dtype = kd;
        s.beta_dtype = bd;
        s.out_dtype = od;
        check_spec(GetParam(), s, rng);
        ++i;
        if (HasFailure()) return;
      }
    }
  }
}

// g absent (no gating) and beta absent (all ones), alone and together.
TEST_P(GdnIntra, OptionalGAndBeta) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (int64_t BT : {16, 32, 64}) {
    for (Decay d : {Decay::realistic, Decay::none}) {
      for (bool has_beta : {true, false}) {
        for (DType od : {f32, bf16}) {
          Spec s = fixed(2, 45, 2, 4, 64, BT);
          s.decay = d;
          s.has_beta = has_beta;
          if (d == Decay::none && !has_beta) s.HV = s.H;  // without g and beta, HV = H
          s.out_dtype = od;
          check_spec(GetParam(), s, rng);
          if (HasFailure()) return;
        }
      }
    }
  }
}

// Grouped value heads: HV = 2H and 4H (value head hv reads key head hv / (HV / H)).
TEST_P(GdnIntra, GroupedHeads) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (auto [H, HV] : std::vector<std::pair<int64_t, int64_t>>{{1, 2}, {2, 4}, {1, 4}, {2, 8}, {3, 12}}) {
    for (int64_t BT : {32, 64}) {
      Spec s = fixed(2, 70, H, HV, 64, BT);
      s.has_beta = HV != 8;
      s.out_dtype = BT == 32 ? bf16 : f32;
      check_spec(GetParam(), s, rng);
      if (HasFailure()) return;
    }
  }
}

// Token counts around the chunk sizes, including T = 0 and 1.
TEST_P(GdnIntra, TokenCounts) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (int64_t BT : {16, 64}) {
    for (int64_t T : {0, 1, 2, 15, 16, 17, 33, 63, 64, 65, 129}) {
      Spec s = fixed(T <= 17 ? 3 : 1, T, 1, 2, 32, BT);
      s.out_dtype = T % 2 ? f32 : f16;
      check_spec(GetParam(), s, rng);
      if (HasFailure()) return;
    }
  }
}

// Varlen batches (cu_seqlens int32 and int64): empty sequences (first, middle, last), sequences shorter than a
// chunk, exact multiples of the chunk, partial last chunks.
TEST_P(GdnIntra, Varlen) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  const std::vector<std::vector<int64_t>> batches = {
      {0}, {5}, {0, 0, 3}, {1, 0, 17, 64, 0, 65, 130, 3}, {16, 16, 16, 0}, {63, 1, 0, 64, 33}, {0, 200}};
  for (const auto& lengths : batches) {
    for (int64_t BT : {16, 32, 64}) {
      for (DType cd : {DType::i32, DType::i64}) {
        Spec s = varlen(lengths, 2, 4, 48, BT);
        s.cu_dtype = cd;
        s.out_dtype = cd == DType::i32 ? f32 : bf16;
        s.strided = BT == 32;
        check_spec(GetParam(), s, rng);
        if (HasFailure()) return;
      }
    }
  }
}

// Adversarial decays: none, zero, very strong (-100 and below per token, down to -1e30), and mixtures of zero and
// strong decays; every output must be finite and within its bounds.
TEST_P(GdnIntra, AdversarialDecays) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (Decay d : {Decay::none, Decay::zero, Decay::strong, Decay::extreme, Decay::mixed}) {
    for (int64_t BT : {16, 64}) {
      for (DType od : {f32, f16, bf16}) {
        Spec s = fixed(1, 150, 1, 2, 64, BT);
        s.decay = d;
        s.out_dtype = od;
        s.k_dtype = od == f32 ? f32 : bf16;
        check_spec(GetParam(), s, rng);
        if (HasFailure()) return;
      }
    }
  }
  // Varlen with strong decays: chunks and sequences restart the cumsum.
  Spec s = varlen({3, 0, 70, 64, 1}, 1, 2, 64, 32);
  s.decay = Decay::mixed;
  check_spec(GetParam(), s, rng);
}

// The tensor-core inverse (16-bit outputs, chunk sizes 32 and 64: split-tf32 block merges, docs/ops/gdn.md
// "Numerics") against the golden on adversarial inputs: every decay kind, K = 1 and 256, k in f32 and bf16, and
// varlen batches whose chunks end inside every 16-row block (the merges' row-block skips).
TEST_P(GdnIntra, TensorCoreInverseAdversarial) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (Decay d : {Decay::none, Decay::zero, Decay::strong, Decay::extreme, Decay::mixed}) {
    for (int64_t BT : {32, 64}) {
      for (DType od : {f16, bf16}) {
        for (int64_t K : {1, 256}) {
          Spec s = fixed(1, 2 * BT + 7, 1, 2, K, BT);
          s.decay = d;
          s.out_dtype = od;
          s.k_dtype = K == 1 ? f32 : bf16;
          check_spec(GetParam(), s, rng);
          if (HasFailure()) return;
        }
      }
    }
  }
  for (int64_t BT : {32, 64}) {
    for (Decay d : {Decay::realistic, Decay::mixed}) {
      Spec s = varlen({17, 33, 48, 63, 64, 1, 31, 16, 0, 130}, 2, 4, 128, BT);
      s.decay = d;
      s.out_dtype = d == Decay::mixed ? f16 : bf16;
      check_spec(GetParam(), s, rng);
      if (HasFailure()) return;
    }
  }
}

// Keys of any norm (1e-3 .. 30): the kkt stage alone (the inverse of such an A may overflow; it is not compared).
TEST_P(GdnIntra, WideKeysKkt) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (int64_t K : {1, 60, 128, 256}) {
    for (DType od : {f32, f16, bf16}) {
      Spec s = fixed(1, 70, 1, 2, K, 64);
      s.keys = Keys::wide;
      s.k_dtype = od;
      s.out_dtype = od;
      check_spec(GetParam(), s, rng, /*check_inverse=*/false);
      if (HasFailure()) return;
    }
  }
}

// fused == solve_tril(kkt into f32) byte for byte (and the fused op run twice), for every supported configuration:
// chunk sizes, k / beta / output dtypes, g and beta present or absent, fixed length and varlen (int32 / int64),
// head dims and grouped heads.
TEST_P(GdnIntra, FusedBitIdenticalToUnfused) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  int64_t configs = 0, warp_configs = 0;
  for (int64_t BT : {16, 32, 64}) {
    for (DType kd : {f32, f16, bf16}) {
      for (DType od : {f32, f16, bf16}) {
        for (int layout = 0; layout < 3; ++layout) {  // fixed, varlen i32, varlen i64
          for (int opt = 0; opt < 4; ++opt) {          // g, beta present / absent
            for (int64_t K : {60, 128, 256}) {
              Spec s = layout == 0 ? fixed(2, 70, 1, 2, K, BT) : varlen({5, 0, BT, 70}, 1, 2, K, BT);
              if (layout == 1) s.cu_dtype = DType::i32;
              if (K == 128) {  // grouped heads
                s.H = 2;
                s.HV = 4;
              }
              s.k_dtype = kd;
              s.beta_dtype = (configs % 3 == 0) ? f32 : kd;
              s.out_dtype = od;
              s.decay = opt & 1 ? Decay::none : Decay::realistic;
              s.has_beta = !(opt & 2);
              if (opt == 3) s.HV = s.H;  // without g and beta, HV = H
              // K = 128 aligned always, half of those configurations on the fused op's warp kernel (these grids
              // are one wave, where the launch rule keeps the block kernels); the other K aligned every other time
              s.aligned = K == 128 || configs % 2 == 1;
              const bool warp = K == 128 && (layout + opt) % 2 == 0;
              const bool warp_applies = warp && BT == 64 && kd != f32 && od != f32;  // gdn_intra_warp.h
              SCOPED_TRACE(std::string(where_name(GetParam())) + ": " + s.describe() + (warp ? " warp kernel" : ""));
              const Inputs in = make_inputs(s, rng);
              const int64_t launches = warp_launches();
              Results r;
              {
                const WarpMode mode(warp ? KktWarpForTesting::always : KktWarpForTesting::rule);
                r = run_all(GetParam(), s, in);
              }
              if (GetParam() == Where::cuda) {
                ASSERT_EQ(warp_launches(), launches + (warp_applies ? 2 : 0)) << "which fused kernel ran";
              }
              warp_configs += warp_applies;
              ASSERT_TRUE(same_bytes(r.Ai_fused, r.Ai_unfused)) << "fused != solve_tril(kkt in f32)";
              ASSERT_TRUE(same_bytes(r.Ai_fused, r.Ai_fused_again)) << "fused op not deterministic";
              if (od == f32) {
                ASSERT_TRUE(same_bytes(r.A, r.A32));
              }
              ++configs;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(configs, 3 * 3 * 3 * 3 * 4 * 3);
  EXPECT_EQ(warp_configs, 2 * 2 * 3 * 4 / 2);  // BT 64, 16-bit k and output, K = 128: half of them
}

/// Tokens [bos, eos) of a compact [1, T, ...] tensor, as [1, eos - bos, ...].
HostTensor slice_tokens(const HostTensor& x, int64_t bos, int64_t eos) {
  std::vector<int64_t> shape = x.shape();
  const int64_t per_token = x.rows() / shape[1];  // rows of one token
  shape[1] = eos - bos;
  HostTensor out(x.dtype(), shape);
  const std::size_t row_bytes = x.cols() * fuseops::dtype_size(x.dtype());
  std::memcpy(out.data(), static_cast<const char*>(x.data()) + bos * per_token * row_bytes,
              (eos - bos) * per_token * row_bytes);
  return out;
}

// A sequence inside a varlen batch gets the same bytes as when run alone (every op).
TEST_P(GdnIntra, VarlenSequenceMatchesItsRunAlone) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  for (int64_t BT : {16, 64}) {
    for (DType od : {f32, bf16}) {
      Spec s = varlen({1, 0, 17, 64, 65, 130, 3}, 2, 4, 64, BT);
      s.out_dtype = od;
      SCOPED_TRACE(std::string(where_name(GetParam())) + ": " + s.describe());
      const Inputs in = make_inputs(s, rng);
      const Results batch = run_all(GetParam(), s, in);
      for (std::size_t n = 0; n < s.seqlens.size(); ++n) {
        const int64_t bos = in.cu[n], eos = in.cu[n + 1];
        if (eos == bos) continue;
        Spec alone = fixed(1, eos - bos, s.H, s.HV, s.K, BT);
        alone.out_dtype = od;
        Inputs ain;
        ain.k = slice_tokens(in.k, bos, eos);
        ain.g = slice_tokens(in.g, bos, eos);
        ain.beta = slice_tokens(in.beta, bos, eos);
        const Results single = run_all(GetParam(), alone, ain);
        SCOPED_TRACE("sequence " + std::to_string(n) + " [" + std::to_string(bos) + ", " + std::to_string(eos) + ")");
        EXPECT_TRUE(same_bytes(slice_tokens(batch.A, bos, eos), single.A)) << "A";
        EXPECT_TRUE(same_bytes(slice_tokens(batch.Ai_fused, bos, eos), single.Ai_fused)) << "Ai (fused)";
        EXPECT_TRUE(same_bytes(slice_tokens(batch.Ai_from_A, bos, eos), single.Ai_from_A)) << "solve_tril(A)";
        if (HasFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, GdnIntra, ::testing::Values(Where::cpu, Where::cuda), where_param_name);

// ---------------------------------------------------------------------------------------------------------------
// chunk_local_cumsum

class GdnCumsum : public ::testing::TestWithParam<Where> {};

/// Runs chunk_local_cumsum on `g` (padded rows when `strided`) into a padded f32 output; checks guards, padding
/// and the input; returns the output.
HostTensor run_cumsum(Where where, const HostTensor& g, int64_t BT, const std::vector<int64_t>& cu, DType cu_dtype,
                      bool reverse, std::optional<double> scale, bool strided) {
  Placed in(where, g, strided ? 3 : 0);
  Placed out(where, DType::f32, g.shape());
  std::unique_ptr<Placed> cup;
  if (!cu.empty()) {
    cup = std::make_unique<Placed>(where, ft::index_tensor(cu_dtype, cu));
    cup->upload();
  }
  in.upload();
  out.upload();
  TensorView cv;
  if (cup) cv = cup->view();
  fuseops::chunk_local_cumsum(out.view(), in.view(), BT, cup ? &cv : nullptr, reverse, scale);
  in.download();
  out.download();
  EXPECT_TRUE(in.untouched_outside(false));
  EXPECT_TRUE(out.untouched_outside(true));
  return out.read();
}

// Forward and reverse, no scale / 1/ln2 / a negative scale, g in f32 / f16 / bf16 (log-sigmoid values, and values
// of both signs), fixed length and varlen, strided input.
TEST_P(GdnCumsum, MatchesGolden) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<std::optional<double>> scales = {std::nullopt, 1.0 / std::log(2.0), -0.5};
  int i = 0;
  for (DType gd : {f32, f16, bf16}) {
    for (int64_t BT : {16, 32, 64}) {
      for (bool var : {false, true}) {
        for (bool reverse : {false, true}) {
          const std::vector<int64_t> lengths = {1, 0, 17, 64, 0, 65, 130};
          const std::vector<int64_t> cu = var ? cu_seqlens_of(lengths) : std::vector<int64_t>{};
          // HV 70: three warps' head groups per chunk on CUDA, the last one partial
          const int64_t B = var ? 1 : 2, T = var ? cu.back() : 77, HV = i % 2 ? 70 : 3;
          HostTensor g(gd, {B, T, HV});
          const bool signed_values = i % 2;
          for (int64_t r = 0; r < g.rows(); ++r) {
            for (int64_t h = 0; h < HV; ++h) {
              const double x = normal(rng);
              g.set(r, h, static_cast<float>(signed_values ? 3.0 * x : -std::log1p(std::exp(-x))));
            }
          }
          const std::optional<double> scale = scales[i % 3];
          SCOPED_TRACE(std::string(where_name(GetParam())) + ": g " + fuseops::dtype_name(gd) + " BT=" +
                       std::to_string(BT) + (var ? " varlen" : " fixed") + (reverse ? " reverse" : "") + " scale " +
                       (scale ? std::to_string(*scale) : "none") + ", FUSEOPS_SEED=" + std::to_string(run_seed()));
          const HostTensor out = run_cumsum(GetParam(), g, BT, cu, i % 4 < 2 ? DType::i32 : DType::i64, reverse,
                                            scale, i % 3 == 1);
          const ref::GdnGolden gold = ref::chunk_local_cumsum(g, BT, cu, reverse, scale.value_or(1.0));
          EXPECT_TRUE(matches_golden(out, gold, ref::GdnStage::cumsum, 0, BT));
          ++i;
          if (HasFailure()) return;
        }
      }
    }
  }
}

// A sequence of a varlen batch gets the same bytes as when run alone.
TEST_P(GdnCumsum, VarlenSequenceMatchesItsRunAlone) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  std::mt19937_64 rng = test_rng();
  std::normal_distribution<double> normal(0.0, 1.0);
  const std::vector<int64_t> cu = cu_seqlens_of({3, 0, 64, 100, 1});
  HostTensor g(f32, {1, cu.back(), 2});
  for (int64_t r = 0; r < g.rows(); ++r)
    for (int64_t h = 0; h < 2; ++h) g.set(r, h, static_cast<float>(normal(rng)));
  for (bool reverse : {false, true}) {
    const HostTensor all = run_cumsum(GetParam(), g, 32, cu, DType::i64, reverse, 0.75, false);
    for (std::size_t n = 0; n + 1 < cu.size(); ++n) {
      if (cu[n + 1] == cu[n]) continue;
      const HostTensor alone =
          run_cumsum(GetParam(), slice_tokens(g, cu[n], cu[n + 1]), 32, {}, DType::i64, reverse, 0.75, false);
      EXPECT_TRUE(same_bytes(slice_tokens(all, cu[n], cu[n + 1]), alone)) << "sequence " << n;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, GdnCumsum, ::testing::Values(Where::cpu, Where::cuda), where_param_name);

// ---------------------------------------------------------------------------------------------------------------
// Malformed cu_seqlens: no crash, nothing written outside the sequences' clamped ranges (common/gdn_chunks.h,
// sequence_bounds), and check_errors() raises device_value naming the op, cu_seqlens and the first bad sequence.
// What lands inside those ranges is unspecified (ranges may overlap) and not checked.

class GdnMalformed : public ::testing::TestWithParam<Where> {};

// The tests below take the first bad sequence and the clamped ranges from the backends' own rule (sequence_bounds);
// here that rule is held to the documented one: the first sequence n that breaks 0 = cu[0] <= cu[n] <= cu[n + 1] <=
// cu[N] = T, written out per case, and every clamped range inside [0, T].
TEST(GdnMalformedRule, FirstBadSequenceAndRangesFollowTheDocumentedRule) {
  for (const BadCu& bad : bad_cus()) {
    const Clamped c = clamped_ranges(bad.cu, bad.T);
    EXPECT_EQ(c.first_bad, bad.first_bad) << bad.what;
    for (const auto& [bos, eos] : c.ranges) {
      EXPECT_TRUE(0 <= bos && bos <= eos && eos <= bad.T) << bad.what << ": [" << bos << ", " << eos << ")";
    }
  }
}

// chunk_local_cumsum of g with no heads ([1, T, 0]) still records a malformed cu_seqlens, as every other op does (the
// CUDA kernel's units are (chunk, group of heads): at least one group per chunk).
TEST_P(GdnMalformed, CumsumWithoutHeadsRecordsCuSeqlens) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  if (fuseops::debug_mode()) GTEST_SKIP() << "FUSEOPS_DEBUG is set: ops raise at once";
  const Where where = GetParam();
  for (const BadCu& bad : bad_cus()) {
    SCOPED_TRACE(std::string(where_name(where)) + ": cu_seqlens " + bad.what);
    const Clamped clamped = clamped_ranges(bad.cu, bad.T);
    Placed g(where, HostTensor(f32, {1, bad.T, 0})), cup(where, ft::index_tensor(DType::i64, bad.cu)),
        out(where, f32, {1, bad.T, 0});
    for (Placed* p : {&g, &cup, &out}) p->upload();
    fuseops::clear_errors();
    const TensorView cv = cup.view();
    EXPECT_NO_THROW(fuseops::chunk_local_cumsum(out.view(), g.view(), 64, &cv));
    const std::string msg = take_device_error();
    EXPECT_NE(msg.find("chunk_local_cumsum: cu_seqlens: "), std::string::npos) << msg;
    EXPECT_NE(msg.find("at index " + std::to_string(clamped.first_bad) + " ("), std::string::npos) << msg;
  }
}

TEST_P(GdnMalformed, CuSeqlensIsRecordedAndNothingOutsideIsWritten) {
  FUSEOPS_SKIP_UNLESS_RUNNABLE(GetParam());
  if (fuseops::debug_mode()) GTEST_SKIP() << "FUSEOPS_DEBUG is set: ops raise at once";
  const Where where = GetParam();
  std::mt19937_64 rng = test_rng();
  for (const BadCu& bad : bad_cus()) {
    const Clamped clamped = clamped_ranges(bad.cu, bad.T);
    ASSERT_GE(clamped.first_bad, 0) << bad.what << ": not malformed";
    for (DType cd : {DType::i32, DType::i64}) {
      if (cd == DType::i32 && bad.cu[1] > INT32_MAX) continue;
      Spec s = fixed(1, bad.T, 1, 2, 32, 16);
      s.out_dtype = bf16;
      const Inputs in = make_inputs(s, rng);
      const HostTensor cu = ft::index_tensor(cd, bad.cu);
      Placed k(where, in.k), g(where, in.g), beta(where, in.beta), cup(where, cu);
      for (const char* op : {"chunk_local_cumsum", "chunk_scaled_dot_kkt_fwd", "solve_tril",
                             "chunk_gated_delta_rule_fwd_kkt_solve"}) {
        SCOPED_TRACE(std::string(where_name(where)) + ": " + op + ", cu_seqlens " + bad.what + " (" +
                     fuseops::dtype_name(cd) + ")");
        fuseops::clear_errors();
        const std::string name = op;
        const std::vector<int64_t> shape = name == "chunk_local_cumsum" ? std::vector<int64_t>{1, s.T, s.HV}
                                                                         : std::vector<int64_t>{1, s.T, s.HV, s.BT};
        Placed out(where, name == "chunk_local_cumsum" ? f32 : bf16, shape);
        for (Placed* p : {&k, &g, &beta, &cup, &out}) p->upload();
        const TensorView kv = k.view(), gv = g.view(), bv = beta.view(), cv = cup.view();
        if (name == "solve_tril") {
          Placed zeros(where, HostTensor(f32, {1, s.T, s.HV, s.BT}));  // a valid input A
          zeros.upload();
          EXPECT_NO_THROW(fuseops::solve_tril(out.view(), zeros.view(), &cv));
        } else if (name == "chunk_local_cumsum") {
          EXPECT_NO_THROW(fuseops::chunk_local_cumsum(out.view(), gv, s.BT, &cv));
        } else if (name == "chunk_scaled_dot_kkt_fwd") {
          EXPECT_NO_THROW(fuseops::chunk_scaled_dot_kkt_fwd(out.view(), kv, &gv, &bv, s.BT, &cv));
        } else {
          EXPECT_NO_THROW(fuseops::chunk_gated_delta_rule_fwd_kkt_solve(out.view(), kv, &gv, &bv, s.BT, &cv));
        }
        // check_errors synchronises with the device before the outputs are read back.
        expect_malformed_outcome(take_device_error(), name, clamped, {&k, &g, &beta, &cup}, out);
        if (HasFailure()) return;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, GdnMalformed, ::testing::Values(Where::cpu, Where::cuda), where_param_name);

// ---------------------------------------------------------------------------------------------------------------

// Zero tokens with null data pointers is valid on every backend: nothing is read, written or launched.
TEST(GdnEmpty, ZeroTokensWithNullDataIsANoOp) {
  for (Where where : {Where::cpu, Where::cuda}) {
    if (where == Where::cuda && !cuda_available()) continue;
    const fuseops::Device dev = where == Where::cpu ? fuseops::Device::cpu() : fuseops::Device::cuda(0);
    SCOPED_TRACE(where_name(where));
    const TensorView k(nullptr, bf16, dev, {2, 0, 2, 64}), g(nullptr, f32, dev, {2, 0, 4}),
        beta(nullptr, bf16, dev, {2, 0, 4}), out(nullptr, bf16, dev, {2, 0, 4, 64}), cum(nullptr, f32, dev, {2, 0, 4});
    EXPECT_NO_THROW(fuseops::chunk_scaled_dot_kkt_fwd(out, k, &g, &beta, 64));
    EXPECT_NO_THROW(fuseops::chunk_gated_delta_rule_fwd_kkt_solve(out, k, &g, &beta, 64));
    EXPECT_NO_THROW(fuseops::solve_tril(out, TensorView(nullptr, f32, dev, {2, 0, 4, 64})));
    EXPECT_NO_THROW(fuseops::chunk_local_cumsum(cum, g, 64));
  }
}

// The relative-RMS criterion of the GDN checks: an infinity of the golden's sign where the golden is past the output
// dtype's range is the right answer (chunk_local_cumsum with a large scale); any other non-finite output fails.
TEST(GdnRmsCheck, InfinitiesOnlyWhereTheGoldenOverflows) {
  HostTensor out(f32, {1, 3});
  const double inf = std::numeric_limits<double>::infinity();
  auto check = [&](float a, float b, std::vector<double> ref) {
    out.set(0, 0, a);
    out.set(0, 1, b);
    out.set(0, 2, 1.0f);
    return ref::gdn_rms_check(out, ref);
  };
  EXPECT_TRUE(check(static_cast<float>(inf), static_cast<float>(-inf), {1e39, -5e38, 1.0}).pass);
  EXPECT_TRUE(check(2.0f, static_cast<float>(inf), {2.0, 3.4028235e38, 1.0}).pass);  // rounds to inf in fp32
  const ref::RmsCheck wrong_sign = check(static_cast<float>(-inf), 2.0f, {1e39, 2.0, 1.0});
  EXPECT_FALSE(wrong_sign.pass);
  EXPECT_EQ(wrong_sign.nonfinite, 1);
  EXPECT_FALSE(check(static_cast<float>(inf), 2.0f, {3e38, 2.0, 1.0}).pass);  // in range: inf is wrong
  EXPECT_FALSE(check(std::nanf(""), 2.0f, {1e39, 2.0, 1.0}).pass);
}

}  // namespace
}  // namespace fuseops_test::gdn
