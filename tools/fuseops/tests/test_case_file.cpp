// Case files: expansion of lists and ranges into the cross product, defaults, aliases, and one test per kind of
// error, each checking that the message names the file, line, column and key.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <tuple>
#include <vector>

#include "case_file.h"
#include "cases.h"

namespace fuseops::cli {
namespace {

CaseFile parse(const std::string& text) { return parse_case_text(text, "f.yaml", registry()); }

/// The message of the error `text` raises ("" when it parses).
std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    return e.what();
  }
  return "";
}

#define EXPECT_CASE_ERROR(text, where, key, words)                          \
  do {                                                                      \
    const std::string msg = error_of(text);                                 \
    EXPECT_EQ(msg.rfind(std::string(where) + ": ", 0), 0u) << msg;          \
    EXPECT_NE(msg.find("key \"" + std::string(key) + "\""), std::string::npos) << msg; \
    EXPECT_NE(msg.find(words), std::string::npos) << msg;                   \
  } while (0)

TEST(CaseFile, ExpandsListsAndRangesToTheCrossProduct) {
  const CaseFile f = parse(
      "name: mine\n"
      "cases:\n"
      "  - op: silu_and_mul\n"
      "    tokens: [1, 64]\n"
      "    d: {from: 128, to: 512, mul: 2}\n"
      "    dtype: [bf16, f16]\n");
  EXPECT_EQ(f.name, "mine");
  ASSERT_EQ(f.points.size(), 12u);
  const auto cases = f.make_cases();
  ASSERT_EQ(cases.size(), 12u);
  // the first key written varies slowest, the last fastest
  EXPECT_EQ(cases[0]->shape, "1x128");
  EXPECT_EQ(dtype_name(cases[0]->dtype), std::string("bf16"));
  EXPECT_EQ(dtype_name(cases[1]->dtype), std::string("f16"));
  EXPECT_EQ(cases[2]->shape, "1x256");
  EXPECT_EQ(cases[11]->shape, "64x512");
  EXPECT_EQ(cases[11]->op, "silu_and_mul");
  EXPECT_EQ(cases[11]->rows, 64);
  EXPECT_EQ(f.points[0].where, "f.yaml:3:5");
}

// Integers are decimal with leading zeros decimal, as the seeds (C-style 010 was read as 8, and 09 "did not fit").
TEST(CaseFile, LeadingZerosAreDecimal) {
  const auto cases = parse("cases:\n  - op: silu_and_mul\n    tokens: [010, 09, +7]\n    d: 008\n").make_cases();
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_EQ(cases[0]->shape, "10x8");
  EXPECT_EQ(cases[1]->shape, "9x8");
  EXPECT_EQ(cases[2]->shape, "7x8");
  // a range's step and mul are read alike (010 was read as 8 there, 0x10 as 16, !!float 16 as 16)
  const auto by_mul =
      parse("cases:\n  - op: silu_and_mul\n    tokens: {from: 1, to: 100, mul: 010}\n    d: 8\n").make_cases();
  ASSERT_EQ(by_mul.size(), 3u);
  EXPECT_EQ(by_mul[1]->shape, "10x8");
  EXPECT_EQ(by_mul[2]->shape, "100x8");
  const auto by_step =
      parse("cases:\n  - op: silu_and_mul\n    tokens: {from: 1, to: 20, step: 010}\n    d: 8\n").make_cases();
  ASSERT_EQ(by_step.size(), 2u);
  EXPECT_EQ(by_step[1]->shape, "11x8");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: {from: 1, to: 40, step: 0x10}\n    d: 8\n",
                    "f.yaml:3:37", "tokens.step", "decimal digits only");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: {from: 1, to: 40, mul: !!float 16}\n    d: 8\n",
                    "f.yaml:3:36", "tokens.mul", "tagged");
}

TEST(CaseFile, StepRangesOptionsAndDefaults) {
  const CaseFile f = parse(
      "cases:\n"
      "  - op: gelu_and_mul\n"
      "    tokens: {from: 10, to: 31, step: 10}\n"
      "    d: 100\n"
      "    approximate: [none, tanh]\n");
  const auto cases = f.make_cases();
  ASSERT_EQ(cases.size(), 6u);  // 10, 20, 30 x none, tanh
  EXPECT_EQ(cases[0]->op, "gelu_and_mul");
  EXPECT_EQ(cases[1]->op, "gelu_tanh_and_mul");
  EXPECT_EQ(cases[4]->shape, "30x100");
  EXPECT_EQ(f.points[0].params.text("fill"), "normal");  // default
  EXPECT_EQ(f.name, "f");                                // the file name without extension
}

// mrope's printed names imply their layout (mrope(interleaved) ran the chunked default and printed mrope(chunked))
TEST(CaseFile, MropeAliasesImplyTheirLayout) {
  const std::string rest = "    tokens: 4\n    num_heads: 2\n    num_kv_heads: 1\n    head_size: 64\n"
                           "    mrope_section: [8, 12, 12]\n";
  const CaseFile f = parse("cases:\n  - op: mrope(interleaved)\n" + rest + "  - op: mrope(interleaved_glm)\n" + rest +
                           "  - op: mrope\n" + rest);
  ASSERT_EQ(f.points.size(), 3u);
  EXPECT_EQ(f.points[0].params.text("mrope_layout"), "interleaved");
  EXPECT_EQ(f.points[1].params.text("mrope_layout"), "interleaved_glm");
  EXPECT_EQ(f.points[2].params.text("mrope_layout"), "chunked");
  const auto cases = f.make_cases();
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_EQ(cases[0]->op, "mrope(interleaved)");
}

// An alias means what it says where the entry does not: layer_norm is a LayerNorm, rms_norm_gated has the gate (both
// ran as an ungated RMSNorm); an entry may repeat what the alias implies.
TEST(CaseFile, NormAliasesImplyTheirForm) {
  const CaseFile f = parse(
      "cases:\n"
      "  - op: layer_norm\n    tokens: 4\n    hidden: 64\n"
      "  - op: rms_norm_gated\n    tokens: 4\n    hidden: 64\n"
      "  - op: layer_norm\n    tokens: 4\n    hidden: 64\n    is_rms_norm: false\n"
      "  - op: rms_norm\n    tokens: 4\n    hidden: 64\n");
  ASSERT_EQ(f.points.size(), 4u);
  EXPECT_FALSE(f.points[0].params.boolean("is_rms_norm"));
  EXPECT_FALSE(f.points[0].params.boolean("gate"));
  EXPECT_TRUE(f.points[1].params.boolean("is_rms_norm"));
  EXPECT_TRUE(f.points[1].params.boolean("gate"));
  EXPECT_FALSE(f.points[2].params.boolean("is_rms_norm"));
  EXPECT_TRUE(f.points[3].params.boolean("is_rms_norm"));
  EXPECT_FALSE(f.points[3].params.boolean("gate"));
  const auto cases = f.make_cases();
  ASSERT_EQ(cases.size(), 4u);
  EXPECT_EQ(cases[0]->op.rfind("layer_norm", 0), 0u) << cases[0]->op;
  EXPECT_NE(cases[1]->op.find("gate"), std::string::npos) << cases[1]->op;
}

// A parameter that contradicts what the alias implies is an error at its key, naming the alias (layer_norm with
// is_rms_norm: true ran an RMSNorm, rmsnorm_gated with is_rms_norm: false a layer_norm,gate row, rms_norm_gated with
// gate: false a plain rms_norm, mrope(chunked) with another layout that layout); also one value of a list.
TEST(CaseFile, AliasContradictedIsAnError) {
  const std::string norm = "    tokens: 4\n    hidden: 64\n";
  EXPECT_CASE_ERROR("cases:\n  - op: rmsnorm_gated\n" + norm + "    is_rms_norm: false\n", "f.yaml:5:5", "is_rms_norm",
                    "op rmsnorm_gated implies is_rms_norm true, but the entry gives false (drop is_rms_norm, or name "
                    "the op layer_norm_fwd)");
  EXPECT_CASE_ERROR("cases:\n  - op: rms_norm_gated\n" + norm + "    gate: false\n", "f.yaml:5:5", "gate",
                    "op rms_norm_gated implies gate true, but the entry gives false");
  EXPECT_CASE_ERROR("cases:\n  - op: layer_norm\n" + norm + "    is_rms_norm: [false, true]\n", "f.yaml:5:5",
                    "is_rms_norm", "op layer_norm implies is_rms_norm false, but the entry gives true");
  EXPECT_CASE_ERROR("cases:\n  - op: rms_norm\n    is_rms_norm: false\n" + norm, "f.yaml:3:5", "is_rms_norm",
                    "op rms_norm implies is_rms_norm true");
  EXPECT_CASE_ERROR("cases:\n  - op: mrope(chunked)\n    tokens: 4\n    num_heads: 2\n    num_kv_heads: 1\n"
                    "    head_size: 64\n    mrope_section: [8, 12, 12]\n    mrope_layout: interleaved\n",
                    "f.yaml:8:5", "mrope_layout", "op mrope(chunked) implies mrope_layout chunked");
}

TEST(CaseFile, GdnFixedVarlenAndAlias) {
  const CaseFile f = parse(
      "cases:\n"
      "  - op: kkt_solve\n"
      "    seqlens: [[1, 63, 64], [100]]\n"
      "    num_heads: 2\n"
      "    num_v_heads: 4\n"
      "    chunk_size: [32, 64]\n"
      "  - op: chunk_gated_delta_rule_fwd_kkt_solve\n"
      "    batch: 2\n"
      "    seq_len: 70\n"
      "    num_heads: 1\n"
      "    head_k_dim: 60\n");
  const auto cases = f.make_cases();
  ASSERT_EQ(cases.size(), 5u);
  EXPECT_EQ(cases[0]->shape, "3seq:128x2x128,hv4,bt32");
  EXPECT_EQ(cases[0]->rows, 128);
  EXPECT_EQ(cases[3]->shape, "1seq:100x2x128,hv4");
  EXPECT_EQ(cases[4]->shape, "2x70x1x60");
  EXPECT_EQ(cases[4]->rows, 140);
  EXPECT_EQ(cases[4]->family, "gdn");
}

// A reduced CPU run of a fixed-length intra-chunk op keeps every batch row while each keeps a chunk of tokens, else
// the first max(2, rows / chunk) rows (a 256-sequence batch at 64 rows kept one token per row).
TEST(CaseFile, GdnIntraReducedKeepsChunks) {
  const CaseFile f = parse(
      "cases:\n  - op: kkt_solve\n    num_heads: 2\n    head_k_dim: 16\n    batch: [256, 2, 4]\n"
      "    seq_len: 4096\n");
  const auto cases = f.make_cases();
  ASSERT_EQ(cases.size(), 3u);
  EXPECT_EQ(cases[0]->rows_at(64), 64);         // 2 rows of 32 (it ran 256 rows of 1)
  EXPECT_EQ(cases[0]->rows_at(64 * 5), 5 * 64);  // 5 rows of a chunk
  EXPECT_EQ(cases[1]->rows_at(64), 64);         // 2 rows of 32, as before
  EXPECT_EQ(cases[2]->rows_at(1024), 1024);     // 4 rows of 256, as before
}

// A reduced CPU run of a fixed-length chunked forward keeps two and a half chunks per batch row kept: 161 x B rows
// where the rows allow it (it kept 161 x B tokens per row, 161 x B^2 rows, and a batch of short sequences ran whole),
// else the first max(2, rows / 161) batch rows (every row of a 256-sequence model batch took 4 GB).
TEST(CaseFile, GdnForwardReducedPerBatchRow) {
  const std::string op = "  - op: chunk_gated_delta_rule\n    num_heads: 2\n";
  const CaseFile f = parse("cases:\n" + op + "    batch: [1, 2, 8]\n    seq_len: 4096\n" + op +
                           "    batch: 64\n    seq_len: 200\n");
  const auto cases = f.make_cases();
  ASSERT_EQ(cases.size(), 4u);
  EXPECT_EQ(cases[0]->rows_at(1), 161);
  EXPECT_EQ(cases[1]->rows_at(1), 2 * 161);
  EXPECT_EQ(cases[2]->rows_at(1), 2 * 161);
  EXPECT_EQ(cases[2]->rows_at(5 * 161 + 10), 5 * 161);
  EXPECT_EQ(cases[2]->rows_at(8 * 161), 8 * 161);
  EXPECT_EQ(cases[3]->rows_at(1), 2 * 161);
  EXPECT_EQ(cases[3]->rows_at(100000), 64 * 200);  // all of it when the rows allow
}

// Reduced CPU runs cut varlen cases with their structure kept: every sequence stays (empty ones empty, the others
// at least one token), so the empty and 1-token sequences a case names are still checked.
TEST(CaseFile, ReducedVarlenKeepsEverySequence) {
  using V = std::vector<int64_t>;
  EXPECT_EQ(seqlens_reduced({1000, 1, 0, 3000}, 64), (V{42, 1, 0, 21}));
  EXPECT_EQ(seqlens_reduced({1, 0, 63}, 64), (V{1, 0, 63}));  // fits: unchanged
  EXPECT_EQ(seqlens_reduced({3000, 1000}, 64), (V{32, 32}));
  EXPECT_EQ(seqlens_reduced({0, 5, 0, 5, 5}, 2), (V{0, 1, 0, 1}));  // fewer rows than sequences: the first ones
  EXPECT_EQ(seqlens_reduced({10, 54}, 32), (V{10, 22}));
  // the chunked forward's varlen runs: the first non-empty sequence keeps two chunks and a half (161 tokens at chunk
  // 64), the others share at least as many again
  EXPECT_EQ(seqlens_reduced_first(V(8, 1024), 1, 161), (V{161, 23, 23, 23, 23, 23, 23, 23}));
  EXPECT_EQ(seqlens_reduced_first({0, 0, 1024, 5, 5}, 1, 161), (V{0, 0, 161, 5, 5}));
  EXPECT_EQ(seqlens_reduced_first({30, 0, 30}, 1, 161), (V{30, 0, 30}));  // fits: unchanged
  EXPECT_EQ(seqlens_reduced_first({0, 2000, 1000}, 1000, 161), (V{0, 161, 839}));
  EXPECT_EQ(seqlens_reduced_first(V(400, 1), 1, 161), V(322, 1));  // one token each: the first 322
  for (const V& s : {V{1000, 1, 0, 3000}, V{7, 7, 7}, V{0, 0, 90}}) {
    const V r = seqlens_reduced(s, 16);
    int64_t sum = 0;
    for (std::size_t i = 0; i < r.size(); ++i) {
      sum += r[i];
      EXPECT_LE(r[i], s[i]);
      EXPECT_EQ(r[i] == 0, s[i] == 0);
    }
    EXPECT_EQ(sum, 16);
  }
}

// The set name of a file's cases is not empty (default: the file's stem); a range without step or mul counts by 1.
TEST(CaseFile, SetNamesAndDefaultStep) {
  const std::string body = "cases:\n  - op: silu_and_mul\n    tokens: {from: 1, to: 3}\n    d: 64\n";
  EXPECT_CASE_ERROR("name: \"\"\n" + body, "f.yaml:1:7", "name", "non-empty");
  EXPECT_EQ(parse("name: mine\n" + body).name, "mine");
  EXPECT_EQ(parse(body).name, "f");
  EXPECT_EQ(parse(body).make_cases().size(), 3u);
}

// Ranges over the whole int64 range, for a parameter that takes any integer (the built-in ones start at 0 or 1):
// the values up to `to`, with no signed overflow on the way (to - step overflowed for `to` near INT64_MIN: UBSan).
TEST(CaseFile, RangesNeverOverflow) {
  Registry reg;
  OpSpec any;
  any.family = "test";
  any.name = "any";
  any.params = {integer_param("n", "any integer", std::nullopt, INT64_MIN, INT64_MAX)};
  any.make = [](const CaseParams&) -> std::unique_ptr<OpCase> { return nullptr; };
  reg.add_op(any);
  const auto values = [&](const std::string& range) {
    std::vector<int64_t> v;
    for (const auto& p : parse_case_text("cases:\n  - op: any\n    n: " + range + "\n", "f.yaml", reg).points) {
      v.push_back(p.params.integer("n"));
    }
    return v;
  };
  constexpr int64_t lo = INT64_MIN, hi = INT64_MAX;
  EXPECT_EQ(values("{from: -9223372036854775808, to: -9223372036854775800, step: 9223372036854775807}"),
            std::vector<int64_t>{lo});
  EXPECT_EQ(values("{from: -9223372036854775808, to: 9223372036854775807, step: 9223372036854775807}"),
            (std::vector<int64_t>{lo, -1, hi - 1}));
  EXPECT_EQ(values("{from: 9223372036854775800, to: 9223372036854775807, step: 3}"),
            (std::vector<int64_t>{hi - 7, hi - 4, hi - 1}));
  EXPECT_EQ(values("{from: 9223372036854775806, to: 9223372036854775807}"), (std::vector<int64_t>{hi - 1, hi}));
  EXPECT_EQ(values("{from: 3037000499, to: 9223372036854775807, mul: 3037000499}"),
            (std::vector<int64_t>{3037000499, int64_t{3037000499} * 3037000499}));
  EXPECT_EQ(values("{from: 1, to: 9223372036854775807, mul: 9223372036854775807}"), (std::vector<int64_t>{1, hi}));
}

TEST(CaseFile, UnknownOpNamesFileLineColumnAndKey) {
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mull\n    d: 8\n", "f.yaml:2:9", "op", "unknown op \"silu_and_mull\"");
}

TEST(CaseFile, UnknownKey) {
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4\n    dd: 8\n", "f.yaml:4:5", "dd",
                    "unknown key for op silu_and_mul");
  // silu has no approximate: only the gelu forms take it
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n    approximate: tanh\n", "f.yaml:5:5",
                    "approximate", "unknown key");
  EXPECT_CASE_ERROR("name: x\nmodel: y\ncases: []\n", "f.yaml:2:1", "model", "unknown top-level key");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: {from: 1, to: 4, by: 2}\n    d: 8\n", "f.yaml:3:30",
                    "tokens.by", "unknown range key");
}

TEST(CaseFile, BadValues) {
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: abc\n", "f.yaml:4:8", "d", "expected an integer");
  // decimal only, leading zeros decimal (as the seeds): 010 is 10, 09 is 9; 0x10 and 0o10 are errors
  for (const auto& [d, words] : {std::pair<std::string, std::string>{"0x10", "got \"0x10\" (decimal digits only)"},
                                 {"0o10", "got \"0o10\" (decimal digits only)"},
                                 {"99999999999999999999", "integer 99999999999999999999 does not fit in 64 bits"}}) {
    EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: " + d + "\n", "f.yaml:4:8", "d", words);
  }
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: [4, 0]\n    d: 8\n", "f.yaml:3:17", "tokens",
                    "value 0 outside [1, inf]");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n    dtype: f64\n", "f.yaml:5:12", "dtype",
                    "\"f64\" is not one of f32, f16, bf16");
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    seq_len: 64\n    head_k_dim: 512\n", "f.yaml:4:17", "head_k_dim",
                    "outside [1, 256]");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: {from: 8, to: 4}\n    d: 8\n", "f.yaml:3:27",
                    "tokens.to", "below from");
  // a range's to is its bound: the values it reaches must be in the parameter's range, to itself need not be
  const std::string kkt = "cases:\n  - op: kkt_solve\n    seq_len: 64\n    num_heads: 1\n    head_k_dim: ";
  EXPECT_EQ(parse(kkt + "{from: 56, to: 300, step: 100}\n").make_cases().size(), 3u);  // 56, 156, 256
  EXPECT_EQ(parse(kkt + "{from: 1, to: 1000, mul: 16}\n").make_cases().size(), 3u);    // 1, 16, 256
  EXPECT_CASE_ERROR(kkt + "{from: 56, to: 400, step: 100}\n", "f.yaml:5:32", "head_k_dim",
                    "the range reaches 356 outside [1, 256]");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: []\n    d: 8\n", "f.yaml:3:13", "tokens", "empty list");
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    seqlens: 5\n    num_heads: 1\n", "f.yaml:3:14", "seqlens",
                    "expected a list of integers");
  // the range message carries the parameter's help, so that 128 and 48 both say which chunk sizes exist
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    seq_len: 64\n    chunk_size: 128\n", "f.yaml:4:17", "chunk_size",
                    "value 128 outside [16, 64] (BT: 16, 32 or 64)");
  // an empty value is reported at its key (yaml-cpp marks the null at the next line's token)
  for (const std::string& tail : {std::string("    seq_len:\n    num_heads: 1\n"), std::string("    seq_len:\n")}) {
    EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n" + tail, "f.yaml:3:5", "seq_len", "no value given");
  }
}

TEST(CaseFile, ImpossibleCombinations) {
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    seq_len: 64\n    num_heads: 3\n    num_v_heads: [6, 32]\n",
                    "f.yaml:5:5", "num_v_heads", "not a multiple of num_heads 3");
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    batch: 2\n    seqlens: [10, 20]\n    num_heads: 1\n", "f.yaml:3:5", "batch",
                    "varlen (seqlens) runs with batch 1");
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    seq_len: 64\n    chunk_size: 48\n    num_heads: 1\n", "f.yaml:4:5", "chunk_size",
                    "expected 16, 32 or 64");
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    num_heads: 2\n", "f.yaml:2:5", "seq_len",
                    "give seq_len (fixed length) or a non-empty seqlens");
}

TEST(CaseFile, MissingRequiredSyntaxAndSize) {
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4\n", "f.yaml:2:5", "d", "required by op silu_and_mul");
  EXPECT_CASE_ERROR("cases:\n  - tokens: 4\n", "f.yaml:2:5", "op", "missing");
  const std::string syntax = error_of("cases:\n  - op: silu_and_mul\n    d: [1, 2\n");
  EXPECT_EQ(syntax.rfind("f.yaml:", 0), 0u) << syntax;
  EXPECT_NE(syntax.find("YAML syntax"), std::string::npos) << syntax;
  EXPECT_CASE_ERROR("cases: {}\n", "f.yaml:1:8", "cases", "non-empty list");
  // empty values are reported at their keys (yaml-cpp marks the null at the next token, or past the file's end), an
  // empty list item by its number at the list's start
  EXPECT_CASE_ERROR("name:\ncases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n", "f.yaml:1:1", "name",
                    "got nothing");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\ndescription:\n", "f.yaml:5:1",
                    "description", "got nothing");
  EXPECT_CASE_ERROR("cases:\n", "f.yaml:1:1", "cases", "non-empty list");
  EXPECT_CASE_ERROR("cases:\n  - op:\n    tokens: 4\n", "f.yaml:2:5", "op", "got nothing");
  EXPECT_CASE_ERROR("cases:\n  -\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n", "f.yaml:2:3", "cases",
                    "entry 1 of the list is empty");
  // a CR without an LF (a CRLF file whose last line lost its LF; CR-only line endings) is named, not read into a value
  EXPECT_CASE_ERROR("cases:\r\n  - op: silu_and_mul\r\n    tokens: 4\r\n    d: 8\r", "f.yaml:4:9", "cases",
                    "carriage return (CR) without a line feed");
  EXPECT_CASE_ERROR("cases:\r  - op: silu_and_mul\r", "f.yaml:1:7", "cases", "carriage return");
  const auto crlf = parse("cases:\r\n  - op: silu_and_mul\r\n    tokens: 4\r\n    d: 8\r\n").make_cases();
  EXPECT_EQ(crlf.size(), 1u);
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: {from: 1, to: 200}\n    d: {from: 1, to: 200}\n",
                    "f.yaml:4:5", "d", "more than 10000 cases");  // at the key that crossed the limit
}

TEST(CaseFile, ReadsFilesAndNamesUnreadableOnes) {
  const std::string path = ::testing::TempDir() + "fuseops_case_file_test.yaml";
  {
    std::ofstream f(path);
    f << "description: two cases\ncases:\n  - op: silu_and_mul\n    tokens: [2, 3]\n    d: 16\n";
  }
  const CaseFile f = read_case_file(path, registry());
  EXPECT_EQ(f.name, "fuseops_case_file_test");
  const CaseSet set = f.as_set();
  EXPECT_EQ(set.description, "two cases");
  ASSERT_EQ(set.factories.size(), 1u);
  EXPECT_EQ(set.factories[0]().size(), 2u);
  std::remove(path.c_str());
  EXPECT_THROW(read_case_file(path, registry()), Error);
}

TEST(CaseFile, ExamplesParse) {
  for (const char* name : {"llama3-8b", "qwen3-next-80b", "deepseek-v3", "mixtral-8x7b", "gdn-anchors"}) {
    const CaseFile f = read_case_file(std::string(FUSEOPS_SOURCE_DIR) + "/bench/cases/" + name + ".yaml", registry());
    EXPECT_GT(f.points.size(), 0u) << name;
  }
}

// Every op family's hook: one entry per op, checked through the cases it makes (op name, shape, rows).
TEST(CaseFile, EveryFamilysHooksParse) {
  const CaseFile f = parse(
      "cases:\n"
      "  - op: rotary_embedding\n    tokens: 30\n    num_heads: 128\n    num_kv_heads: 1\n    head_size: 64\n"
      "    head_stride: 192\n    is_neox: false\n"
      "  - op: rotary_embedding_backward\n    tokens: 8\n    num_heads: 8\n    num_kv_heads: 2\n    head_size: 128\n"
      "    rotary_dim: 64\n"
      "  - op: apply_rotary_pos_emb\n    tokens: 40\n    batch: 4\n    num_heads: 4\n    num_kv_heads: 2\n    head_size: 64\n"
      "  - op: mrope\n    tokens: 50\n    num_heads: 4\n    num_kv_heads: 2\n    head_size: 128\n"
      "    mrope_section: [24, 20, 20]\n    mrope_layout: interleaved\n"
      "  - op: topk_softmax\n    tokens: 33\n    num_experts: 512\n    topk: 10\n    renormalize: true\n"
      "  - op: grouped_topk\n    tokens: 33\n    num_experts: 256\n    n_group: 8\n    topk_group: 4\n    topk: 8\n"
      "    routed_scaling_factor: 2.5\n    bias: true\n"
      "  - op: moe_align_block_size\n    tokens: 33\n    num_experts: 64\n    topk: 6\n    block_size: 16\n"
      "  - op: moe_route\n    tokens: 33\n    num_experts: 64\n    topk: [8, 4]\n    scoring: [softmax, sigmoid]\n"
      "  - op: grouped_topk\n    tokens: 2\n    num_experts: 64\n    n_group: 4\n    topk_group: 2\n    topk: 4\n"
      "    scoring: softmax\n"
      "  - op: rms_norm_gated\n    tokens: 20\n    hidden: 4096\n    group_size: 128\n    gate: true\n"
      "  - op: silu_and_mul_masked\n    num_experts: 8\n    max_tokens: 32\n    tokens_per_expert: 7\n    busy_experts: 3\n"
      "    d: 64\n"
      "  - op: gelu_and_mul_masked\n    num_experts: 8\n    max_tokens: 32\n    tokens_per_expert: 32\n    d: 64\n"
      "    approximate: tanh\n"
      "  - op: chunk_gated_delta_rule\n    batch: 2\n    seq_len: 100\n    num_heads: 2\n    num_v_heads: 4\n"
      "  - op: chunk_gated_delta_rule\n    seqlens: [1, 63, 65]\n    num_heads: 2\n    chunk_size: 32\n"
      "  - op: fused_recurrent_gated_delta_rule\n    batch: 3\n    seq_len: 5\n    num_heads: 2\n"
      "  - op: fused_recurrent_gated_delta_rule_update\n    batch: 3\n    num_heads: 2\n    beta_per_channel: true\n"
      "  - op: fused_sigmoid_gating_delta_rule_update\n    batch: 3\n    num_heads: 2\n    num_v_heads: 4\n"
      "  - op: chunk_local_cumsum\n    seqlens: [3, 70, 0, 5]\n    num_v_heads: 3\n    reverse: true\n"
      "  - op: chunk_local_cumsum\n    seqlens: [3, 70, 0, 5]\n    num_v_heads: 3\n    reverse: true\n    scale: -2\n"
      "  - op: rotary_embedding_backward\n    tokens: 8\n    num_heads: 8\n    num_kv_heads: 2\n    head_size: 128\n"
      "    rotary_dim: 64\n    theta: 500000.5\n    max_position: 8192\n"
      "  - op: apply_rotary_pos_emb\n    tokens: 40\n    batch: 4\n    num_heads: 4\n    num_kv_heads: 2\n    head_size: 64\n"
      "    theta: 1000000\n    max_position: 32768\n    cache_dtype: f32\n");
  const auto cases = f.make_cases();
  const std::vector<std::pair<std::string, std::string>> want = {
      {"rotary_embedding", "30x128/1x64j,hs192"},
      {"rotary_embedding_backward", "8x8/2x128r64"},
      {"apply_rotary_pos_emb", "40x4/2x64,B4"},
      {"mrope(interleaved)", "50x4/2x128,sec24/20/20"},
      {"topk_softmax", "33x512 k10,renorm"},
      {"grouped_topk", "33x256 k8,g8/4,x2.5,bias"},
      {"moe_align_block_size", "33x64 k6 bs16"},
      {"moe_route", "33x64 k8 bs64"},
      {"moe_route", "33x64 k8 bs64,sigmoid"},
      {"moe_route", "33x64 k4 bs64"},
      {"moe_route", "33x64 k4 bs64,sigmoid"},
      {"grouped_topk", "2x64 k4,softmax,g4/2"},  // the scoring that is not the usual one is in the label
      {"rms_norm,gate", "20x4096/g128"},
      {"silu_and_mul_masked", "8x32x64:3@7"},
      {"gelu_and_mul_masked(tanh)", "8x32x64:8@32"},
      {"chunk_gated_delta_rule", "2/4:B2x100"},
      {"chunk_gated_delta_rule", "2/2:[1,63,65],bt32"},
      {"fused_recurrent_gated_delta_rule", "2/2:N3x5"},
      {"fused_recurrent_gated_delta_rule_update", "2/2:N3,beta_v"},
      {"fused_sigmoid_gating_delta_rule_update", "2/4:N3,gating"},
      {"chunk_local_cumsum", "4seq:78x3,rev"},
      {"chunk_local_cumsum", "4seq:78x3,rev,x-2"},  // scale is in the label
      {"rotary_embedding_backward", "8x8/2x128r64,theta500000.5,mp8192"},  // every parameter that differs is shown
      {"apply_rotary_pos_emb", "40x4/2x64,B4,theta1000000,mp32768,cache f32"}};
  ASSERT_EQ(cases.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(cases[i]->op, want[i].first) << i;
    EXPECT_EQ(cases[i]->shape, want[i].second) << i;
  }
  EXPECT_EQ(cases[0]->family, "rope");
  EXPECT_EQ(cases[5]->family, "moe");
  EXPECT_EQ(cases[12]->family, "norm");
  EXPECT_EQ(cases[15]->rows, 200);  // batch x seq_len
  EXPECT_EQ(cases[17]->rows, 15);
  EXPECT_EQ(cases[20]->rows, 78);
  EXPECT_EQ(cases[20]->dtype, DType::f32);  // g of the cumsum: f32 by default
}

// Every op family that has built-in cases has a hook, so that case files and `fuseops model` reach it.
TEST(CaseFile, EveryFamilyHasAHook) {
  for (const CaseSet& s : registry().sets()) {
    for (const auto& f : s.factories) {
      for (const auto& c : f()) {
        bool hooked = false;
        for (const OpSpec& o : registry().ops()) hooked = hooked || o.family == c->family;
        EXPECT_TRUE(hooked) << c->family << " (" << c->op << " in set " << s.name << ")";
      }
    }
  }
  for (const char* op : {"rotary_embedding", "apply_rotary_pos_emb", "mrope", "topk_softmax", "grouped_topk",
                         "moe_align_block_size", "moe_route", "layer_norm_fwd", "silu_and_mul_masked",
                         "gelu_and_mul_masked", "chunk_gated_delta_rule", "fused_recurrent_gated_delta_rule",
                         "chunk_local_cumsum"}) {
    EXPECT_NE(registry().find_op(op), nullptr) << op;
  }
}

TEST(CaseFile, HooksRejectImpossibleCombinations) {
  EXPECT_CASE_ERROR("cases:\n  - op: rotary_embedding\n    tokens: 4\n    num_heads: 2\n    num_kv_heads: 1\n"
                    "    head_size: 64\n    rotary_dim: 33\n", "f.yaml:7:5", "rotary_dim", "must be even");
  // the ops' limit of 512 rotated dims, named at the key that sets it (rotary_dim, or head_size without it)
  EXPECT_CASE_ERROR("cases:\n  - op: rotary_embedding\n    tokens: 3\n    num_heads: 1\n    num_kv_heads: 1\n"
                    "    head_size: 1024\n    rotary_dim: 514\n", "f.yaml:7:5", "rotary_dim", "limit of 512");
  EXPECT_CASE_ERROR("cases:\n  - op: apply_rotary_pos_emb\n    tokens: 3\n    num_heads: 1\n    num_kv_heads: 1\n"
                    "    head_size: 1024\n", "f.yaml:6:5", "head_size", "limit of 512");
  EXPECT_CASE_ERROR("cases:\n  - op: mrope\n    tokens: 4\n    num_heads: 2\n    num_kv_heads: 1\n    head_size: 128\n"
                    "    mrope_section: [16, 24, 20]\n", "f.yaml:7:5", "mrope_section", "not rotary_dim / 2 = 64");
  // sections whose sum wraps around int64 to rotary_dim / 2 (each is checked first)
  EXPECT_CASE_ERROR("cases:\n  - op: mrope\n    tokens: 4\n    num_heads: 2\n    num_kv_heads: 1\n    head_size: 64\n"
                    "    mrope_section: [9223372036854775807, 9223372036854775807, 34]\n", "f.yaml:7:5", "mrope_section",
                    "not in [0, rotary_dim / 2 = 32]");
  EXPECT_CASE_ERROR("cases:\n  - op: apply_rotary_pos_emb\n    tokens: 10\n    batch: 4\n    num_heads: 2\n"
                    "    num_kv_heads: 1\n    head_size: 64\n", "f.yaml:4:5", "batch", "not a multiple of batch 4");
  EXPECT_CASE_ERROR("cases:\n  - op: grouped_topk\n    tokens: 4\n    num_experts: 100\n    n_group: 8\n    topk: 2\n",
                    "f.yaml:5:5", "n_group", "not a multiple of n_group 8");
  EXPECT_CASE_ERROR("cases:\n  - op: grouped_topk\n    tokens: 4\n    num_experts: 64\n    n_group: 8\n    topk_group: 1\n"
                    "    topk: 9\n", "f.yaml:7:5", "topk", "more than the experts of topk_group groups, 8");
  EXPECT_CASE_ERROR("cases:\n  - op: topk_softmax\n    tokens: 4\n    num_experts: 4\n    topk: 8\n", "f.yaml:5:5", "topk",
                    "more than num_experts 4");
  EXPECT_CASE_ERROR("cases:\n  - op: layer_norm_fwd\n    tokens: 4\n    hidden: 100\n    group_size: 64\n", "f.yaml:5:5",
                    "group_size", "does not divide hidden 100");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul_masked\n    num_experts: 4\n    max_tokens: 8\n    tokens_per_expert: 9\n"
                    "    d: 8\n", "f.yaml:5:5", "tokens_per_expert", "more than max_tokens 8");
  // the masked forms' expert limit, before anything runs (the op would refuse only the case that reaches it)
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul_masked\n    num_experts: [4, 5000]\n    max_tokens: 4\n"
                    "    tokens_per_expert: 2\n    d: 8\n", "f.yaml:3:5", "num_experts", "5000 is more than 4096");
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_gated_delta_rule\n    seq_len: 64\n    num_heads: 4\n    num_v_heads: 6\n",
                    "f.yaml:5:5", "num_v_heads", "not a multiple of num_heads 4");
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_local_cumsum\n    seqlens: [0, 0]\n    num_v_heads: 4\n", "f.yaml:3:5",
                    "seqlens", "the sequences hold no tokens");
  // the cumsum's scale as the op takes it, in fp32: out of its range, or nonzero and rounding to 0 there
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_local_cumsum\n    seq_len: 64\n    num_v_heads: 4\n    scale: 1e39\n",
                    "f.yaml:5:5", "scale", "finite in fp32");
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_local_cumsum\n    seq_len: 64\n    num_v_heads: 4\n    scale: 1e-50\n",
                    "f.yaml:5:5", "scale", "not round to 0");
  EXPECT_CASE_ERROR("cases:\n  - op: grouped_topk\n    tokens: 4\n    num_experts: 64\n    n_group: 8\n    topk: 2\n"
                    "    routed_scaling_factor: 1e39\n", "f.yaml:7:5", "routed_scaling_factor", "finite in fp32");
}

TEST(CaseFile, SeqLenZeroSaysWhatToGive) {
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_gated_delta_rule\n    seq_len: 0\n    num_heads: 2\n", "f.yaml:3:5", "seq_len",
                    "seq_len 0 gives no tokens and seqlens is empty: give seq_len (fixed length) or a non-empty "
                    "seqlens (varlen)");
  // an empty seqlens without seq_len: the error points at the key the user wrote
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_gated_delta_rule\n    seqlens: []\n    num_heads: 2\n", "f.yaml:3:5",
                    "seqlens", "seqlens is empty");
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_gated_delta_rule\n    seqlens: [[]]\n    num_heads: 2\n", "f.yaml:3:5",
                    "seqlens", "seqlens is empty");
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    seq_len: [64, 0]\n    num_heads: 2\n", "f.yaml:3:5", "seq_len",
                    "seq_len 0 gives no tokens");
}

// A NUL byte (yaml-cpp: "unknown escape character") and a merge key (yaml-cpp does not merge: "op missing") say so.
TEST(CaseFile, NulBytesAndMergeKeys) {
  EXPECT_CASE_ERROR(std::string("cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 64\n\0junk", 57), "f.yaml:5:1",
                    "cases", "the file contains a NUL byte");
  EXPECT_CASE_ERROR("cases:\n  - &e {op: silu_and_mul, tokens: 4, d: 64}\n  - <<: *e\n    d: 128\n", "f.yaml:3:5",
                    "<<", "YAML merge keys (<<) are not supported");
}

// A tag other than !!int on an integer key is an error (!!float 64 was read as 64); !!int is fine.
TEST(CaseFile, IntegerKeysTakeNoOtherTag) {
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: !!float 64\n", "f.yaml:4:8", "d",
                    "expected an integer, got \"64\" tagged !!float");
  EXPECT_EQ(parse("cases:\n  - op: silu_and_mul\n    tokens: !!int 4\n    d: 64\n").points.size(), 1u);
}

// YAML nested past the reader's limit is named as such (yaml-cpp says "bad file")
TEST(CaseFile, DeepNestingIsNamed) {
  const std::string msg = error_of("x: " + std::string(600, '[') + std::string(600, ']') + "\n");
  EXPECT_NE(msg.find("f.yaml:1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find(": YAML nesting too deep (the reader stops at depth"), std::string::npos) << msg;
}

TEST(CaseFile, NameIsOneLineWithoutBars) {
  // the message says which rule the name breaks and shows it escaped (a tab or an escape was "not one line")
  EXPECT_CASE_ERROR("name: \"a|b\"\ncases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n", "f.yaml:1:7", "name",
                    "expected a name of one line of UTF-8 text without control characters or '|' (it is a column of "
                    "the tables), got \"a|b\"");
  EXPECT_CASE_ERROR("name: \"a\\nb\"\ncases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n", "f.yaml:1:7", "name",
                    "got \"a\\x0ab\"");
  EXPECT_CASE_ERROR("name: \"a\\tb\"\ncases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n", "f.yaml:1:7", "name",
                    "without control characters or '|' (it is a column of the tables), got \"a\\tb\"");
  EXPECT_CASE_ERROR("name: \"a\\e[31mb\"\ncases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n", "f.yaml:1:7",
                    "name", "got \"a\\x1b[31mb\"");
  // C1 control characters (U+009B: a terminal's CSI, as raw UTF-8 or as YAML's escape) and the line / paragraph
  // separators break the line too (they were accepted); the message shows them escaped
  EXPECT_CASE_ERROR("name: a\xC2\x9B" "31mb\ncases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n", "f.yaml:1:7",
                    "name", "without control characters or '|' (it is a column of the tables), got \"a\\u009b31mb\"");
  EXPECT_CASE_ERROR("name: \"a\\x85b\"\ncases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n", "f.yaml:1:7",
                    "name", "got \"a\\u0085b\"");
  EXPECT_CASE_ERROR("name: a\xE2\x80\xA8" "b\ncases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n", "f.yaml:1:7",
                    "name", "got \"a\\u2028b\"");
  // letters beside C1 in UTF-8 are text
  EXPECT_EQ(parse("name: caf\xC3\xA9\xC2\xA0x\ncases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n").name,
            "caf\xC3\xA9\xC2\xA0x");
}

// A name is UTF-8 text, as --note (docs/cases.md: "as for --note"): YAML's escape \N (U+0085), which yaml-cpp writes
// as a raw 0x85 byte that the control-character check did not see, and raw bytes that are not UTF-8 were accepted.
// The message shows the byte escaped.
TEST(CaseFile, NameIsUtf8Text) {
  const std::string cases = "cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n";
  EXPECT_CASE_ERROR("name: \"a\\Nb\"\n" + cases, "f.yaml:1:7", "name",
                    "expected a name of one line of UTF-8 text without control characters or '|' (it is a column of "
                    "the tables), got \"a\\x85b\"");
  EXPECT_CASE_ERROR("name: \"a\xff" "b\"\n" + cases, "f.yaml:1:7", "name", "got \"a\\xffb\"");
  EXPECT_CASE_ERROR("name: a\xC3" "b\n" + cases, "f.yaml:1:7", "name", "got \"a\\xc3b\"");
}

// The default name, the file's stem, is one line of UTF-8 text too (a file named x<U+2028>y.yaml put a raw line
// separator into the Markdown): each control character, line or paragraph separator and byte that is not UTF-8 is
// replaced by U+FFFD (docs/cases.md); a '|' stays (the tables escape it).
TEST(CaseFile, DefaultNameFromTheStemIsOneLine) {
  const std::string cases = "cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n";
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  const std::vector<std::pair<std::string, std::string>> stems = {
      {"x\xE2\x80\xA8y", "x" + r + "y"}, {"p\xE2\x80\xA9", "p" + r}, {"e\x1b[31mX", "e" + r + "[31mX"},
      {"n\xC2\x85", "n" + r}, {"a\xff" "b", "a" + r + "b"}, {"a|b", "a|b"}, {"caf\xC3\xA9", "caf\xC3\xA9"}};
  for (const auto& [stem, name] : stems) {
    EXPECT_EQ(parse_case_text(cases, "dir/" + stem + ".yaml", registry()).name, name) << stem;
    EXPECT_EQ(parse_case_text("name: ok\n" + cases, "dir/" + stem + ".yaml", registry()).name, "ok");
  }
}

TEST(CaseFile, DuplicateKeysAreErrors) {
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n    d: 16\n", "f.yaml:5:5", "d",
                    "duplicate key (first at f.yaml:4:5)");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    op: gelu_and_mul\n    tokens: 4\n    d: 8\n", "f.yaml:3:5", "op",
                    "duplicate key");
  EXPECT_CASE_ERROR("name: a\ncases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\nname: b\n", "f.yaml:6:1", "name",
                    "duplicate key (first at f.yaml:1:1)");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: {from: 1, to: 4, from: 2}\n    d: 8\n", "f.yaml:3:30",
                    "from", "duplicate key");
}

// A key that is no text (a null `~`, a list) is an error at its place; it had printed as key "".
// A batch of fixed length and as many varlen sequences of the same length print apart (both had printed 2x100).
TEST(CaseFile, GdnForwardLabelsTellFixedFromVarlen) {
  const auto cases = parse(
      "cases:\n  - op: chunk_gated_delta_rule\n    batch: 2\n    seq_len: 100\n    num_heads: 2\n"
      "  - op: chunk_gated_delta_rule\n    seqlens: [100, 100]\n    num_heads: 2\n").make_cases();
  ASSERT_EQ(cases.size(), 2u);
  EXPECT_EQ(cases[0]->shape, "2/2:B2x100");
  EXPECT_EQ(cases[1]->shape, "2/2:2x100");
}

TEST(CaseFile, KeysAreText) {
  for (const auto& [text, where, got] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"cases:\n  - op: silu_and_mul\n    ~: 3\n", "f.yaml:3:5", "got a null key"},
           {"cases:\n  - op: silu_and_mul\n    [a]: 3\n", "f.yaml:3:5", "got a list"},
           {"? {a: 1}\n: 3\ncases: []\n", "f.yaml:1:3", "got a mapping"},
           {"cases:\n  - op: silu_and_mul\n    tokens: {~: 1, to: 4}\n    d: 8\n", "f.yaml:3:14", "got a null key"}}) {
    const std::string msg = error_of(text);
    EXPECT_EQ(msg, where + ": expected a key of text, " + got) << text;
  }
}

TEST(CaseFile, SizesThatOverflowNameTheirKey) {
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 99999999999999999999\n    d: 8\n", "f.yaml:3:13", "tokens",
                    "does not fit in 64 bits");
  // d alone is too large: d is to blame, not tokens (2 d would overflow)
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 4611686018427387904\n", "f.yaml:4:5", "d",
                    "is more than 2^39 elements");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4000000000\n    d: 4000\n", "f.yaml:3:5", "tokens",
                    "tokens x d = 4000000000 x 4000 is more than 2^39 elements");
  EXPECT_CASE_ERROR("cases:\n  - op: rotary_embedding\n    tokens: 4\n    num_heads: 9223372036854775807\n"
                    "    num_kv_heads: 1\n    head_size: 64\n", "f.yaml:4:5", "num_heads", "more than 2^40");
  // a head's elements are head_stride where one is given (it said "head_size" with head_stride's value)
  EXPECT_CASE_ERROR("cases:\n  - op: rotary_embedding\n    tokens: 268435456\n    num_heads: 128\n"
                    "    num_kv_heads: 1\n    head_size: 64\n    head_stride: 192\n", "f.yaml:3:5", "tokens",
                    "tokens x num_heads x head_stride = 268435456 x 128 x 192");
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_local_cumsum\n    seqlens: [9223372036854775807, 9223372036854775807]\n"
                    "    num_v_heads: 4\n", "f.yaml:3:5", "seqlens", "more than 2^40 tokens");
  // one sequence given as seqlens runs as fixed length; its error still names seqlens, the key the file has
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_gated_delta_rule\n    seqlens: [100000000000]\n    num_heads: 16\n",
                    "f.yaml:3:5", "seqlens", "seqlens x num_v_heads x head_v_dim = 100000000000 x 16 x 128");
  // the MoE ops' int32 limits (T x k, and the schedule's length) are the hooks' too: the op would refuse the case
  EXPECT_CASE_ERROR("cases:\n  - op: grouped_topk\n    tokens: 268435456\n    num_experts: 256\n    topk: 8\n"
                    "    n_group: 8\n    topk_group: 4\n", "f.yaml:3:5", "tokens",
                    "tokens x topk = 268435456 x 8 is 2^31 or more");
  EXPECT_CASE_ERROR("cases:\n  - op: moe_align_block_size\n    tokens: 268435455\n    num_experts: 256\n"
                    "    topk: 8\n", "f.yaml:3:5", "tokens", "of 2147499768 entries is 2^31 or more (int32 schedule)");
  // T x k of 2^31 or more: moe_align_block_size's own limit, its schedule's (it is not a router; it had said "the
  // routers' limit")
  EXPECT_CASE_ERROR("cases:\n  - op: moe_align_block_size\n    tokens: 268435456\n    num_experts: 256\n"
                    "    topk: 8\n", "f.yaml:3:5", "tokens",
                    "the schedule (moe_align_sizes of tokens x topk = 2147483648, num_experts 256, block_size 64) of "
                    "2147499776 entries is 2^31 or more (int32 schedule)");
  EXPECT_EQ(error_of("cases:\n  - op: moe_align_block_size\n    tokens: 268435456\n    num_experts: 256\n"
                     "    topk: 8\n").find("router"),
            std::string::npos);
  EXPECT_CASE_ERROR("cases:\n  - op: moe_align_block_size\n    tokens: 512\n    num_experts: 4096\n    topk: 8\n"
                    "    block_size: 1048576\n", "f.yaml:6:5", "block_size", "2^31 or more (int32 schedule)");
  // the padding (4096 x (2^19 - 1)) under 2^31 alone but larger than tokens x topk (8192): block_size, as the op names
  // it (the hook had said tokens)
  EXPECT_CASE_ERROR("cases:\n  - op: moe_align_block_size\n    tokens: 1024\n    num_experts: 4096\n    topk: 8\n"
                    "    block_size: 524288\n", "f.yaml:6:5", "block_size", "2^31 or more (int32 schedule)");
  EXPECT_EQ(error_of("cases:\n  - op: moe_align_block_size\n    tokens: 1000\n    num_experts: 256\n    topk: 8\n"),
            "");
  EXPECT_CASE_ERROR("cases:\n  - op: grouped_topk\n    tokens: 4\n    num_experts: 8\n    topk: 2\n"
                    "    routed_scaling_factor: 1e-45\n", "f.yaml:6:5", "routed_scaling_factor", "below 2^-126");
  // chunk_local_cumsum's scale likewise (7.01e-46 ran as 2^-149, twice the value, and "passed" at 100% error)
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_local_cumsum\n    seq_len: 64\n    num_v_heads: 2\n    scale: 7.01e-46\n",
                    "f.yaml:5:5", "scale", "below 2^-126");
  EXPECT_EQ(error_of("cases:\n  - op: chunk_local_cumsum\n    seq_len: 64\n    num_v_heads: 2\n    scale: -1.2e-38\n"),
            "");
  // chunk_local_cumsum has no head dim: g and its output are [B, T, HV], so 2^34 x 2 elements are accepted (they
  // were counted x 64) and 2^40 x 2 are not
  EXPECT_EQ(error_of("cases:\n  - op: chunk_local_cumsum\n    seq_len: 17179869184\n    num_v_heads: 2\n"), "");
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_local_cumsum\n    seq_len: 1099511627776\n    num_v_heads: 2\n",
                    "f.yaml:3:5", "seq_len", "seq_len x batch x num_v_heads = 1099511627776 x 1 x 2 is more than 2^40");
  // each value under its own name (seq_len used to show seq_len x batch)
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_local_cumsum\n    batch: 65536\n    seq_len: 16777216\n"
                    "    num_v_heads: 32\n",
                    "f.yaml:4:5", "seq_len", "seq_len x batch x num_v_heads = 16777216 x 65536 x 32 is more than 2^40");
  // kkt_solve's output rows are chunk_size wide: with head_k_dim below chunk_size, chunk_size is named
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    seq_len: 8589934592\n    num_heads: 4\n    head_k_dim: 16\n",
                    "f.yaml:3:5", "seq_len", "seq_len x batch x num_v_heads x chunk_size = 8589934592 x 1 x 4 x 64");
  EXPECT_CASE_ERROR("cases:\n  - op: chunk_gated_delta_rule\n    batch: 4294967296\n    seq_len: 4294967296\n"
                    "    num_heads: 1\n", "f.yaml:4:5", "seq_len", "seq_len x batch");
  // the token recurrence's tokens are seq_len x batch: a long seq_len is to blame, not batch
  EXPECT_CASE_ERROR("cases:\n  - op: fused_recurrent_gated_delta_rule\n    batch: 1\n    seq_len: 100000000000\n"
                    "    num_heads: 16\n", "f.yaml:4:5", "seq_len",
                    "seq_len x batch x num_v_heads x head_v_dim = 100000000000 x 1 x 16 x 128 is more than 2^40");
  EXPECT_CASE_ERROR("cases:\n  - op: fused_recurrent_gated_delta_rule_update\n    batch: 100000000000\n"
                    "    num_heads: 16\n", "f.yaml:3:5", "batch", "batch x num_v_heads x head_v_dim = 100000000000 x 16");
}

TEST(CaseFile, EmptyFilePointsAtLineOne) {
  EXPECT_CASE_ERROR("", "f.yaml:1:1", "cases", "the file is empty");
  EXPECT_CASE_ERROR("# nothing but a comment\n", "f.yaml:1:1", "cases", "the file is empty");
}

// A second document (after ---) was ignored: only the first one ran. It is an error at the second one's start; an
// empty trailing document is harmless.
TEST(CaseFile, ASecondDocumentIsAnError) {
  const std::string one = "cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n";
  EXPECT_CASE_ERROR(one + "---\n" + one, "f.yaml:6:1", "cases", "a second YAML document");
  EXPECT_CASE_ERROR("---\n" + one + "---\n# more\n" + one, "f.yaml:8:1", "cases", "a second YAML document");
  EXPECT_EQ(parse(one + "---\n").points.size(), 1u);
  EXPECT_EQ(parse("---\n" + one + "...\n").points.size(), 1u);
  EXPECT_EQ(parse(one + "...\n---\n").points.size(), 1u);
  // one final --- only: a second empty document after it is an error at its --- (two were accepted), and an empty
  // document before the case file's makes that one the second
  EXPECT_CASE_ERROR(one + "---\n---\n", "f.yaml:6:1", "cases", "a second --- after the document");
  EXPECT_CASE_ERROR(one + "---\n# c\n---\n# d\n", "f.yaml:7:1", "cases", "a second --- after the document");
  EXPECT_CASE_ERROR("---\n---\n" + one, "f.yaml:3:1", "cases", "a second YAML document");
}

// A list at the top level (or a scalar) printed yaml-cpp's "invalid node" without a place.
TEST(CaseFile, TopLevelThatIsNoMapping) {
  EXPECT_CASE_ERROR("- op: chunk_gated_delta_rule\n  seq_len: 64\n", "f.yaml:1:1", "cases", "got a list");
  EXPECT_CASE_ERROR("just text\n", "f.yaml:1:1", "cases", "got \"just text\"");
  EXPECT_CASE_ERROR("cases:\n  - - op: silu_and_mul\n", "f.yaml:2:5", "cases", "got a list");
  // an empty list says so (it said "got a list" after "expected a non-empty list")
  EXPECT_CASE_ERROR("cases: []\n", "f.yaml:1:8", "cases", "expected a non-empty list of entries, got an empty list");
}

// A quoted scalar is a string, even when it reads as a number or a boolean.
TEST(CaseFile, QuotedScalarsAreNoNumbers) {
  const std::string head = "cases:\n  - op: silu_and_mul\n";
  EXPECT_CASE_ERROR(head + "    tokens: \"64\"\n    d: 8\n", "f.yaml:3:13", "tokens", "the quoted string \"64\"");
  EXPECT_CASE_ERROR(head + "    tokens: 64\n    d: !!str 8\n", "f.yaml:4:8", "d", "expected an integer, got the quoted");
  EXPECT_CASE_ERROR(head + "    tokens: ['4', 8]\n    d: 8\n", "f.yaml:3:14", "tokens", "the quoted string \"4\"");
  EXPECT_CASE_ERROR(head + "    tokens: {from: 1, to: 8, mul: '2'}\n    d: 8\n", "f.yaml:3:35", "tokens.mul",
                    "the quoted string \"2\"");
  const std::string rope = "cases:\n  - op: rotary_embedding\n    tokens: 4\n    num_heads: 2\n    head_size: 64\n";
  EXPECT_CASE_ERROR(rope + "    is_neox: 'true'\n", "f.yaml:6:14", "is_neox", "expected true or false, got the quoted");
  // YAML 1.1's other spellings are not booleans here (yaml-cpp's decoder took them silently)
  for (const char* word : {"yes", "on", "y", "Y", "no", "off", "True"}) {
    EXPECT_CASE_ERROR(rope + "    is_neox: " + word + "\n", "f.yaml:6:14", "is_neox", "expected true or false");
  }
  EXPECT_CASE_ERROR(rope + "    theta: \"1e4\"\n", "f.yaml:6:12", "theta", "expected a number, got the quoted");
  // a nonzero number below the double range is refused, as one above it is (it had been read as 0)
  for (const char* tiny : {"1e-400", "-1e-400", "0.000001e-399"}) {
    EXPECT_CASE_ERROR(rope + "    theta: " + tiny + "\n", "f.yaml:6:12", "theta", "(nonzero, but it reads as 0)");
  }
  EXPECT_CASE_ERROR(rope + "    theta: 1e400\n", "f.yaml:6:12", "theta", "expected a number in the double range, got");
  EXPECT_CASE_ERROR(rope + "    theta: 1e4x\n", "f.yaml:6:12", "theta", "expected a number, got");
  const std::string cumsum = "cases:\n  - op: chunk_local_cumsum\n    seq_len: 64\n    num_v_heads: 2\n";
  for (const char* zero : {"0", "-0.0", "0e-400", "0.0e5"}) {  // zeros stay zeros
    EXPECT_EQ(parse(cumsum + "    scale: " + zero + "\n").points.size(), 1u) << zero;
  }
  EXPECT_EQ(parse(head + "    tokens: 64\n    d: 8\n    dtype: \"bf16\"\n").points.size(), 1u);  // text may be quoted
}

TEST(CaseParams, HooksRejectUnknownAndMissingParameters) {
  const OpSpec* op = registry().find_op("silu_and_mul");
  ASSERT_NE(op, nullptr);
  try {
    op->with_defaults({{"tokens", int64_t{4}}, {"d", int64_t{8}}, {"hidden", int64_t{1}}});
    FAIL() << "no error";
  } catch (const ParamError& e) {
    EXPECT_EQ(e.key(), "hidden");
  }
  try {
    op->with_defaults({{"tokens", int64_t{4}}});
    FAIL() << "no error";
  } catch (const ParamError& e) {
    EXPECT_EQ(e.key(), "d");
  }
  EXPECT_EQ(registry().find_op("kkt_solve"), registry().find_op("chunk_gated_delta_rule_fwd_kkt_solve"));
  EXPECT_EQ(registry().find_op("no_such_op"), nullptr);
}

}  // namespace
}  // namespace fuseops::cli
