// Case files: expansion of lists and ranges into the cross product, defaults, aliases, and one test per kind of
// error, each checking that the message names the file, line, column and key.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

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
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: [4, 0]\n    d: 8\n", "f.yaml:3:17", "tokens",
                    "value 0 outside [1, inf]");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n    dtype: f64\n", "f.yaml:5:12", "dtype",
                    "\"f64\" is not one of f32, f16, bf16");
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    seq_len: 64\n    head_k_dim: 512\n", "f.yaml:4:17", "head_k_dim",
                    "outside [1, 256]");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: {from: 8, to: 4}\n    d: 8\n", "f.yaml:3:27",
                    "tokens.to", "below from");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: []\n    d: 8\n", "f.yaml:3:13", "tokens", "empty list");
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    seqlens: 5\n    num_heads: 1\n", "f.yaml:3:14", "seqlens",
                    "expected a list of integers");
}

TEST(CaseFile, ImpossibleCombinations) {
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    seq_len: 64\n    num_heads: 3\n    num_v_heads: [6, 32]\n",
                    "f.yaml:5:5", "num_v_heads", "not a multiple of num_heads 3");
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    batch: 2\n    seqlens: [10, 20]\n    num_heads: 1\n", "f.yaml:3:5", "batch",
                    "varlen (seqlens) runs with batch 1");
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    seq_len: 64\n    chunk_size: 48\n    num_heads: 1\n", "f.yaml:4:5", "chunk_size",
                    "expected 16, 32 or 64");
  EXPECT_CASE_ERROR("cases:\n  - op: kkt_solve\n    num_heads: 2\n", "f.yaml:2:5", "seq_len",
                    "give seq_len (fixed length) or seqlens");
}

TEST(CaseFile, MissingRequiredSyntaxAndSize) {
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: 4\n", "f.yaml:2:5", "d", "required by op silu_and_mul");
  EXPECT_CASE_ERROR("cases:\n  - tokens: 4\n", "f.yaml:2:5", "op", "missing");
  const std::string syntax = error_of("cases:\n  - op: silu_and_mul\n    d: [1, 2\n");
  EXPECT_EQ(syntax.rfind("f.yaml:", 0), 0u) << syntax;
  EXPECT_NE(syntax.find("YAML syntax"), std::string::npos) << syntax;
  EXPECT_CASE_ERROR("cases: {}\n", "f.yaml:1:8", "cases", "non-empty list");
  EXPECT_CASE_ERROR("cases:\n  - op: silu_and_mul\n    tokens: {from: 1, to: 200}\n    d: {from: 1, to: 200}\n",
                    "f.yaml:2:5", "d", "more than 10000 cases");
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
