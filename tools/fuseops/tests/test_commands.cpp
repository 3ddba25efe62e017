// What `check` and `bench` select (--filter on printed and public op names), and the files a command reads and writes:
// no output may overwrite an input or another output; --note is one line; a reduced CPU bench reports the rows that
// ran.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cases.h"
#include "chart.h"
#include "commands.h"
#include "fuseops/error.h"
#include "paths.h"

namespace fuseops::cli {
namespace {

/// The cases of built-in set `set` that --filter `filter` selects, and how many the set has.
std::pair<std::size_t, std::size_t> filtered(const std::string& set, const std::string& filter) {
  Options o;
  o.filter = filter;
  std::size_t n = 0, picked = 0;
  for (const CaseFactory& f : registry().find(set)->factories) {
    for (const auto& c : f()) {
      ++n;
      picked += selected(*c, o, registry()) ? 1 : 0;
    }
  }
  return {picked, n};
}

// `fuseops list` and the README show public names (chunk_gated_delta_rule_fwd_kkt_solve, layer_norm_fwd); the rows
// print the cases' names (kkt_solve, rms_norm): --filter takes either.
TEST(Filter, MatchesPublicAndPrintedOpNames) {
  for (const auto& [set, filter] : {std::pair{"gdn-kkt-solve", "chunk_gated_delta_rule_fwd_kkt_solve"},
                                    std::pair{"gdn-kkt-solve", "kkt_solve"}, std::pair{"norm", "layer_norm_fwd"},
                                    std::pair{"norm", "norm"}}) {
    const auto [picked, n] = filtered(set, filter);
    EXPECT_GT(n, 0u) << set;
    EXPECT_EQ(picked, n) << set << " --filter " << filter;
  }
  EXPECT_EQ(filtered("norm", "no_such_op").first, 0u);
  EXPECT_EQ(filtered("norm", "layer_norm,gate").first, 2u);  // the printed name with its variant marks
  // with marks it is text: the rows printing it, not the whole op ("mrope(interleaved)" took all three layouts)
  EXPECT_GT(filtered("qwen3-vl", "mrope(interleaved)").first, 0u);
  EXPECT_EQ(filtered("qwen2.5-vl", "mrope(interleaved)").first, 0u);  // its rows print mrope(chunked)
  EXPECT_GT(filtered("qwen2.5-vl", "mrope").first, 0u);
  EXPECT_EQ(filtered("gdn-kkt-solve", "layer_norm_fwd").first, 0u);
  // the norm's rows print rms_norm or layer_norm (aliases of layer_norm_fwd): each selects its own rows
  const std::size_t rms = filtered("norm", "rms_norm").first, layer = filtered("norm", "layer_norm").first;
  EXPECT_GT(rms, 0u);
  EXPECT_GT(layer, 0u);
  EXPECT_EQ(rms + layer, filtered("norm", "").second);
  // the gated aliases select the gated RMSNorm rows only (rms_norm,gate / ,gate-before / ,gate,w32: 7 of the 10);
  // they selected all 10, plain rms_norm and layer_norm,gate,bias among them
  for (const char* gated : {"rms_norm_gated", "rmsnorm_gated"}) {
    EXPECT_EQ(filtered("norm", gated).first, 7u) << gated;
    EXPECT_EQ(filtered("norm", gated).first, filtered("norm", "rms_norm,gate").first) << gated;
  }
}

// A whole op name selects that op only; other text every op whose names contain it.
TEST(Filter, WholeNameSelectsThatOpOnly) {
  EXPECT_EQ(filtered("gdn-kkt-solve", "chunk_gated_delta_rule").first, 0u);  // the forward, not kkt_solve
  const auto [picked, n] = filtered("gdn-kkt-solve", "chunk_gated_delta");  // a part of both names
  EXPECT_GT(n, 0u);
  EXPECT_EQ(picked, n);
  // the forward, not chunk_gated_delta_rule_with_states (its one row of the set)
  EXPECT_EQ(filtered("gdn-prefill", "chunk_gated_delta_rule_with_states").first, 1u);
  EXPECT_EQ(filtered("gdn-prefill", "chunk_gated_delta_rule").first + 1, filtered("gdn-prefill", "").second);
  // silu_and_mul is not silu_and_mul_backward; "silu_and_mul_" selects the others
  const std::size_t whole = filtered("llama3-8b", "silu_and_mul").first, part = filtered("llama3-8b", "silu").first;
  EXPECT_GT(whole, 0u);
  EXPECT_LT(whole, part);
  EXPECT_EQ(whole + filtered("llama3-8b", "silu_and_mul_").first, part);
}

/// A fresh empty folder for one test.
std::string temp_dir(const std::string& name) {
  const std::string d = ::testing::TempDir() + "fuseops_" + name;
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d + "/sub");
  return d;
}

std::string read(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// The message of the Error `f` throws ("" when it does not throw).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_argument);
    return e.what();
  }
  return "";
}

TEST(Paths, SameFileByCanonicalOrNormalisedPath) {
  const std::string d = temp_dir("paths");
  std::ofstream(d + "/a.json") << "{}";
  std::filesystem::create_symlink(d + "/a.json", d + "/link.json");
  EXPECT_TRUE(same_file(d + "/a.json", d + "/sub/../a.json"));
  EXPECT_TRUE(same_file(d + "/a.json", d + "/./link.json"));          // both exist: the same file
  EXPECT_TRUE(same_file(d + "/new.svg", d + "/sub/../new.svg"));     // neither exists: normalised paths
  EXPECT_TRUE(same_file(d + "/sub/new.svg", d + "/sub//new.svg"));
  EXPECT_FALSE(same_file(d + "/a.json", d + "/new.svg"));
  EXPECT_FALSE(same_file(d + "/new.svg", d + "/new.html"));
  // a link to a file not made yet: writing through it creates that file (relative and absolute targets)
  std::filesystem::create_symlink("z.md", d + "/dangling.json");
  std::filesystem::create_symlink(d + "/sub/../y.md", d + "/dangling2.json");
  EXPECT_TRUE(same_file(d + "/dangling.json", d + "/z.md"));
  EXPECT_TRUE(same_file(d + "/y.md", d + "/dangling2.json"));
  EXPECT_FALSE(same_file(d + "/dangling.json", d + "/y.md"));
  const std::string msg = error_of([&] {
    check_distinct_files({{"--from", d + "/a.json"}}, {{"--svg", d + "/x.svg"}, {"--html", d + "/sub/../x.svg"}});
  });
  EXPECT_NE(msg.find("--html: " + d + "/sub/../x.svg is the same file as the output --svg"), std::string::npos) << msg;
  EXPECT_EQ(error_of([&] { check_distinct_files({{"--from", d + "/a.json"}}, {{"--svg", ""}, {"--html", ""}}); }), "");
  std::filesystem::remove_all(d);
}

// `chart --from b.json --svg b.json` replaced the results with the chart; `--svg x --html x` wrote both to one file.
TEST(Paths, ChartNeverOverwritesItsInputOrWritesTwiceToOneFile) {
  const std::string d = temp_dir("chart_paths");
  const std::string from = d + "/b.json";
  const std::string results = R"({"command": "bench", "backend": "cpu", "ceiling_tbps": 0.01,
    "results": [{"set": "s", "op": "silu_and_mul", "shape": "8x8", "dtype": "f32", "bytes": 512, "cpu_us": 1.0}]})";
  std::ofstream(from) << results;
  std::string msg = error_of([&] { run_chart(from, from, ""); });
  EXPECT_NE(msg.find("--svg: " + from + " is the same file as the input --from"), std::string::npos) << msg;
  msg = error_of([&] { run_chart(from, "", d + "/sub/../b.json"); });
  EXPECT_NE(msg.find("--html:"), std::string::npos) << msg;
  msg = error_of([&] { run_chart(from, d + "/x", d + "/x"); });
  EXPECT_NE(msg.find("--html: " + d + "/x is the same file as the output --svg"), std::string::npos) << msg;
  EXPECT_EQ(read(from), results);
  EXPECT_FALSE(std::filesystem::exists(d + "/x"));
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(run_chart(from, d + "/x.svg", d + "/x.html"), 0);
  ::testing::internal::GetCapturedStdout();
  std::filesystem::remove_all(d);
}

// bench's four outputs and its case files: all distinct, checked before any case runs.
TEST(Paths, BenchOutputsAreDistinctFromEachOtherAndTheCaseFiles) {
  const std::string d = temp_dir("bench_paths");
  const std::string cases = d + "/c.yaml";
  const std::string text = "cases:\n  - op: silu_and_mul\n    tokens: 4\n    d: 8\n";
  std::ofstream(cases) << text;
  Options o;
  o.backend = "cpu";
  o.quiet = true;
  o.cases = {cases};
  o.json = cases;
  std::string msg = error_of([&] { run_bench(o); });
  EXPECT_NE(msg.find("--json: " + cases + " is the same file as the input --cases"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { run_check(o); }).find("--json:"), std::string::npos);
  o.json = d + "/r.json";
  o.md = d + "/r.md";
  o.html = d + "/./r.md";
  msg = error_of([&] { run_bench(o); });
  EXPECT_NE(msg.find("--html: " + d + "/./r.md is the same file as the output --md"), std::string::npos) << msg;
  EXPECT_EQ(read(cases), text);
  std::filesystem::remove_all(d);
}

// --note and the JSON outputs: bytes that are not UTF-8 are an error in --note and replaced in the JSON text (a
// serialisation error used to truncate the --json file after the whole run).
TEST(Text, Utf8ErrorsAndJsonText) {
  EXPECT_EQ(utf8_error_at("plain — ok \xF0\x9F\x99\x82"), std::string::npos);
  EXPECT_EQ(utf8_error_at("\xff"), 0u);
  EXPECT_EQ(utf8_error_at("ab\x80"), 2u);          // a stray continuation byte
  EXPECT_EQ(utf8_error_at("a\xE2\x80"), 1u);      // truncated
  EXPECT_EQ(utf8_error_at("\xC0\xAF"), 0u);        // overlong
  EXPECT_EQ(utf8_error_at("\xED\xA0\x80"), 0u);    // a surrogate
  EXPECT_EQ(utf8_error_at("\xF4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(json_text(nlohmann::json{{"name", "a\xff" "b"}}), "{\n \"name\": \"a\xEF\xBF\xBD" "b\"\n}");
}

// The console tables pad by terminal columns: a "—" cell (3 bytes of UTF-8) is one column wide.
TEST(Tables, PadColumnCountsCodePoints) {
  EXPECT_EQ(pad_column("—", 5, true), "    —");
  EXPECT_EQ(pad_column("—", 5), "—    ");
  EXPECT_EQ(pad_column("12.50", 7, true), "  12.50");
  EXPECT_EQ(pad_column("gdn-prefill", 4), "gdn-prefill");  // longer text is kept whole
  EXPECT_EQ(pad_column("", 2), "  ");
  // a column widens to its widest cell, counted the same way, up to 64 columns
  EXPECT_EQ(widen_column(4, "——"), 4);
  EXPECT_EQ(widen_column(4, "16384x32/8x128,theta500000"), 26);
  EXPECT_EQ(widen_column(4, std::string(100, 'x')), 64);
}

// A reduced CPU run of the chunked GDN forward keeps two and a half chunks (161 tokens at chunk 64) whatever
// --cpu-rows says: bench's rows and bytes (and model's scaling) are those of the rows that ran, not of those asked.
TEST(CpuRows, BenchReportsTheRowsThatRan) {
  const auto cases = registry().find("gdn-prefill")->factories.front()();
  ASSERT_FALSE(cases.empty());
  EXPECT_EQ(cases.front()->rows_at(1), 161) << cases.front()->shape;
  const std::string d = temp_dir("cpu_rows");
  // the decode op's tokens are rows too: a long seq_len is cut to the rows (it ran all 10^6 tokens, minutes and GBs)
  std::ofstream(d + "/c.yaml") << "cases:\n  - op: chunk_gated_delta_rule\n    seq_len: 1000\n    num_heads: 1\n"
                                  "    head_k_dim: 16\n    head_v_dim: 8\n  - op: silu_and_mul\n    tokens: 9\n"
                                  "    d: 8\n  - op: fused_recurrent_gated_delta_rule\n    batch: 2\n"
                                  "    seq_len: 1000000\n    num_heads: 1\n    head_k_dim: 16\n    head_v_dim: 8\n";
  Options o;
  o.backend = "cpu";
  o.quiet = true;
  o.cpu_rows = 1;
  o.cases = {d + "/c.yaml"};
  o.json = d + "/r.json";
  ::testing::internal::CaptureStdout();
  run_bench(o);
  ::testing::internal::GetCapturedStdout();
  const nlohmann::json r = nlohmann::json::parse(read(o.json))["results"];
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0]["rows"], 161);
  EXPECT_EQ(r[1]["rows"], 1);
  EXPECT_EQ(r[2]["rows"], 1);
  o.cpu_rows = 161;  // asking for the rows that ran reports the same rows and bytes
  ::testing::internal::CaptureStdout();
  run_bench(o);
  ::testing::internal::GetCapturedStdout();
  const nlohmann::json r161 = nlohmann::json::parse(read(o.json))["results"];
  EXPECT_EQ(r161[0]["rows"], 161);
  EXPECT_EQ(r161[0]["bytes"], r[0]["bytes"]);
  EXPECT_EQ(r161[1]["rows"], 9);
  EXPECT_EQ(r161[2]["rows"], 161);  // one sequence of 161 tokens
  std::filesystem::remove_all(d);
}

// A newline in --note added lines (and table rows) to the Markdown.
TEST(Note, IsOneLineOfText) {
  Options o;
  o.backend = "cpu";
  o.note = "commit abc\n| x | y |";
  const std::string msg = error_of([&] { run_bench(o); });
  EXPECT_NE(msg.find("--note: expected one line of text, got the control character U+000A at character 11"),
            std::string::npos) << msg;
  o.note = "tab\there";
  EXPECT_NE(error_of([&] { run_bench(o); }).find("U+0009"), std::string::npos);
  // C1 control characters (U+009B is a terminal's CSI) and the line / paragraph separators were accepted, C0 not
  o.note = "ab\xC2\x9B" "31m";
  EXPECT_NE(error_of([&] { run_bench(o); }).find("--note: expected one line of text, got the control character U+009B "
                                                  "at character 3"),
            std::string::npos);
  o.note = "a\xC2\x80";
  EXPECT_NE(error_of([&] { run_bench(o); }).find("the control character U+0080 at character 2"), std::string::npos);
  o.note = "line\xE2\x80\xA8two";
  EXPECT_NE(error_of([&] { run_bench(o); }).find("got the line separator U+2028 at character 5"), std::string::npos);
  o.note = "\xE2\x80\xA9";
  EXPECT_NE(error_of([&] { run_bench(o); }).find("got the paragraph separator U+2029 at character 1"),
            std::string::npos);
  // placed by character, not by byte offset (the U+0085 after a four-byte and a two-byte character is at byte 6)
  o.note = "\xF0\x9F\x98\x80\xC3\xA9\xC2\x85";
  EXPECT_NE(error_of([&] { run_bench(o); }).find("the control character U+0085 at character 3"), std::string::npos);
  // the first fault is named: here the byte that is not UTF-8, before the C1 character
  o.note = "a\xff\xC2\x9B";
  EXPECT_NE(error_of([&] { run_bench(o); }).find("expected UTF-8 text, got the byte 0xff at character 2"),
            std::string::npos);
}

// One test of what a control character is (control_at), for the checks and the replacements: C0, DEL and C1; the
// line and paragraph separators only where one line is asked for. Letters next to C1 (U+00A0, U+00E9) are text.
TEST(Text, ControlCharacters) {
  uint32_t code = 0;
  EXPECT_EQ(control_at("\x1b", 0, false, &code), 1u);
  EXPECT_EQ(code, 0x1Bu);
  EXPECT_EQ(control_at("\x7f", 0, false), 1u);
  EXPECT_EQ(control_at("a\xC2\x9F", 1, false, &code), 2u);
  EXPECT_EQ(code, 0x9Fu);
  EXPECT_EQ(control_at("\xC2\xA0", 0, true), 0u);  // no-break space
  EXPECT_EQ(control_at("\xC3\xA9", 0, true), 0u);  // e acute
  EXPECT_EQ(control_at("\xC2", 0, true), 0u);      // truncated: no character
  EXPECT_EQ(control_at("\xE2\x80\xA8", 0, false), 0u);
  EXPECT_EQ(control_at("\xE2\x80\xA8", 0, true, &code), 3u);
  EXPECT_EQ(code, 0x2028u);
  EXPECT_EQ(control_at("\xE2\x80\x94", 0, true), 0u);  // an em dash
  EXPECT_EQ(line_break_at("caf\xC3\xA9 \xE2\x80\x94 ok"), std::string::npos);
  EXPECT_EQ(printable_text("a\xC2\x9B" "b\x07"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
  EXPECT_EQ(printable_text("\xC2\xA0\xE2\x80\x94"), "\xC2\xA0\xE2\x80\x94");
}

// Messages quote names, paths and values escaped: control characters, line separators and bytes that are not UTF-8
// as \xNN / \uNNNN (a raw ESC or OSC sequence in a path acted on the terminal), UTF-8 text as it is.
TEST(Text, EscapedForMessages) {
  EXPECT_EQ(escaped_text("e\x1b[31mX.yaml"), "e\\x1b[31mX.yaml");
  EXPECT_EQ(escaped_text("r\x1b]0;pwn\x07.json"), "r\\x1b]0;pwn\\x07.json");
  EXPECT_EQ(escaped_text("a\tb\rc"), "a\\tb\\rc");
  EXPECT_EQ(escaped_text("a\xC2\x9B" "b\xE2\x80\xA8" "c"), "a\\u009bb\\u2028c");
  EXPECT_EQ(escaped_text("a\x85" "b\xff"), "a\\x85b\\xff");  // not UTF-8: each byte
  EXPECT_EQ(escaped_text("caf\xC3\xA9 \xF0\x9F\x98\x80"), "caf\xC3\xA9 \xF0\x9F\x98\x80");
}

}  // namespace
}  // namespace fuseops::cli
