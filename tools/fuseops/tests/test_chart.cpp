// Charts from bench results, and the progress line.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>

#include "chart.h"
#include "fuseops/error.h"
#include "progress.h"

namespace fuseops::cli {
namespace {

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

nlohmann::json gpu_results() {
  return nlohmann::json::parse(R"({"command": "bench", "backend": "cuda", "version": "0.1.0", "device": "NVIDIA H200",
    "copy_tbps": 4.0, "date": "2026-01-01", "results": [
      {"set": "s", "op": "silu_and_mul", "shape": "8192x14336", "dtype": "bf16", "bytes": 704643072, "flops": 0,
       "cold_us": 200.0, "baseline": "unfused", "baseline_cold_us": 400.0},
      {"set": "s", "op": "kkt_solve", "shape": "1x4096x16x128", "dtype": "bf16", "bytes": 3e7, "flops": 2.1e9,
       "cold_us": 10.0, "baseline": "unfused", "baseline_cold_us": 15.0,
       "baselines": [{"name": "FLA", "cold_us": 30.0}]},
      {"set": "<s&>", "op": "x", "shape": "1", "dtype": "f32", "bytes": 0, "cold_us": 1.0}]})");
}

TEST(Chart, OneBarPerCaseAndOneRatioBarPerBaseline) {
  const std::string svg = chart_svg(gpu_results());
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_EQ(count(svg, "class=\"bar\""), 3u);
  EXPECT_EQ(count(svg, "class=\"ratio-bar\""), 3u);  // unfused x2, FLA x1
  EXPECT_EQ(count(svg, "class=\"ceiling\""), 1u);
  EXPECT_NE(svg.find("3.523 TB/s"), std::string::npos);  // 704643072 B / 200 us
  EXPECT_NE(svg.find("(88% of ceiling)"), std::string::npos);
  EXPECT_NE(svg.find("210.00 TFLOP/s"), std::string::npos);  // 2.1e9 / 10 us
  EXPECT_NE(svg.find("2.00x"), std::string::npos);
  EXPECT_NE(svg.find("3.00x"), std::string::npos);
  EXPECT_NE(svg.find("&lt;s&amp;&gt;"), std::string::npos);  // labels escaped
  EXPECT_EQ(svg.find("<s&>"), std::string::npos);
  const std::string html = chart_html(gpu_results());
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(count(html, "class=\"bar\""), 3u);
  EXPECT_NE(html.find("data-cases=\"3\""), std::string::npos);
  EXPECT_EQ(html.find("http://", html.find("</svg>")), std::string::npos);  // nothing fetched
}

/// The message chart_svg raises for `results` (one entry) of a GPU bench ("" when it renders).
std::string chart_error(const std::string& entry) {
  try {
    chart_svg(nlohmann::json::parse(R"({"command": "bench", "backend": "cuda", "copy_tbps": 4.0, "results": [)" + entry + "]}"));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Chart, RejectsIncompleteOrNegativeEntries) {
  EXPECT_NE(chart_error(R"({"shape": "1", "cold_us": 1})").find("results[0]: missing \"op\""), std::string::npos);
  EXPECT_NE(chart_error(R"({"op": "x", "cold_us": 1})").find("results[0] (x ): missing \"shape\""), std::string::npos);
  EXPECT_NE(chart_error(R"({"op": "x", "shape": "1"})").find("missing a time: \"cold_us\""), std::string::npos);
  EXPECT_NE(chart_error(R"({"op": "x", "shape": "1", "cold_us": -2})").find("\"cold_us\" is negative (-2)"), std::string::npos);
  EXPECT_NE(chart_error(R"({"op": "x", "shape": "1", "cold_us": 2, "bytes": -5})").find("\"bytes\" and \"flops\" must be >= 0"),
            std::string::npos);
  EXPECT_NE(chart_error(R"({"op": "x", "shape": "1", "cold_us": "fast"})").find("\"cold_us\" is not a number"),
            std::string::npos);
  EXPECT_NE(chart_error(R"({"op": "x", "shape": "1", "cold_us": 1, "baseline_cold_us": -1})").find("\"baseline_cold_us\" is negative"),
            std::string::npos);
  const std::string no_cold = chart_error(R"({"op": "x", "shape": "1", "cold_us": 1, "baselines": [{"name": "FLA", "warm_us": 3}]})");
  EXPECT_NE(no_cold.find("baseline \"FLA\": no \"cold_us\""), std::string::npos) << no_cold;
  EXPECT_NE(chart_error(R"({"op": "x", "shape": "1", "cold_us": 1, "baselines": [{"name": "FLA", "cold_us": -3}]})")
                .find("baseline \"FLA\": \"cold_us\" is negative"),
            std::string::npos);
  EXPECT_EQ(chart_error(R"({"op": "x", "shape": "1", "cold_us": 0})"), "");  // zero is a time
  // ... but not one to divide by: a rate or a ratio would be drawn as 0 or as a non-finite width
  EXPECT_NE(chart_error(R"({"op": "x", "shape": "1", "cold_us": 0, "bytes": 64})").find("\"cold_us\" is 0"),
            std::string::npos);
  EXPECT_NE(chart_error(R"({"op": "x", "shape": "1", "cold_us": 1e-300, "bytes": 1e308})").find("not a finite rate"),
            std::string::npos);
  EXPECT_NE(chart_error(R"({"op": "x", "shape": "1", "cold_us": 1e-300,
                            "baselines": [{"name": "a", "cold_us": 1e300}]})")
                .find("baseline \"a\": its time / the case's"),
            std::string::npos);
  EXPECT_NE(chart_error(R"({"op": "x", "shape": "1", "cold_us": 1, "baselines": [{"cold_us": 3}]})")
                .find("a baseline without a \"name\""),
            std::string::npos);  // it was drawn without a label
  EXPECT_NE(chart_error(R"({"op": "x", "shape": "1", "cold_us": 1, "bytes": "lots"})").find("\"bytes\" is not a number"),
            std::string::npos);
}

// The share of the ceiling is a ratio that must be finite (a ceiling_tbps of 1e-300 drew "(inf% of ceiling)"), and a
// finite but absurd number prints short (its %f form ran to 300 digits, cut at 63 characters).
TEST(Chart, CeilingShareIsFiniteAndNumbersPrintShort) {
  const std::string entry = R"({"command": "bench", "results": [{"op": "a", "shape": "b", "cold_us": 5, )";
  try {
    chart_svg(nlohmann::json::parse(entry + R"("bytes": 1e300, "flops": 1e300}], "ceiling_tbps": 1e-300})"));
    ADD_FAILURE() << "charted an infinite share of the ceiling";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("chart: results[0] (a b): its rate / the ceiling (2e+293 / 1e-300 TB/s) is "
                                         "not a finite ratio"),
              std::string::npos)
        << e.what();
  }
  // a ceiling of 1e-300 with a plain rate, and a huge rate with a plain ceiling: finite shares, printed short
  const std::string tiny = chart_svg(nlohmann::json::parse(entry + R"("bytes": 1e9}], "ceiling_tbps": 1e-300})"));
  EXPECT_NE(tiny.find("200.000 TB/s (2e+304% of ceiling)"), std::string::npos) << tiny;
  const std::string huge =
      chart_svg(nlohmann::json::parse(entry + R"("bytes": 1e300, "flops": 1e300}], "ceiling_tbps": 4.0})"));
  EXPECT_NE(huge.find("2e+293 TB/s (5e+294% of ceiling), 2e+293 TFLOP/s"), std::string::npos) << huge;
  for (const std::string& svg : {tiny, huge}) EXPECT_EQ(svg.find("0000000000000000"), std::string::npos) << svg;
  EXPECT_EQ(fmt(" (%.0f%% of ceiling)", 88.2), " (88% of ceiling)");
  EXPECT_EQ(fmt("%.2fx", 1e20), "1e+20x");
}

// Finite but huge values (a baseline time, a ceiling, a rate near the largest double) draw finite bars and lines: the
// axis maxima (max * 1.08) overflowed to inf, and the SVG had width="-nan" and x1="-nan". No number drawn or printed
// in either chart is nan or inf.
TEST(Chart, HugeValuesDrawFiniteCoordinates) {
  const std::string entry = R"({"op": "silu_and_mul", "shape": "1x1", "cold_us": 1.0, "bytes": 100)";
  for (const std::string& text :
       {R"({"command": "bench", "results": [)" + entry + R"(, "baseline": "b", "baseline_cold_us": 1.7e308}]})",
        R"({"command": "bench", "backend": "cuda", "copy_tbps": 1.7e308, "results": [)" + entry + "}]}",
        std::string(R"({"command": "bench", "results": [{"op": "a", "shape": "b", "cold_us": 1e-300,
            "bytes": 1.7e8, "baselines": [{"name": "c", "cold_us": 1.7e8}]}]})")}) {
    const auto j = nlohmann::json::parse(text);
    for (const std::string& out : {chart_svg(j), chart_html(j)}) {
      std::string lower = out;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      EXPECT_EQ(lower.find("nan"), std::string::npos) << out;
      EXPECT_EQ(lower.find("inf"), std::string::npos) << out;
      const std::regex number("(x|x1|x2|width|data-value)=\"([^\"]*)\"");
      for (auto m = std::sregex_iterator(out.begin(), out.end(), number); m != std::sregex_iterator(); ++m) {
        EXPECT_TRUE(std::isfinite(std::strtod((*m)[2].str().c_str(), nullptr))) << (*m)[0] << " in " << text;
      }
    }
  }
}

// Baseline times of zero are drawn (they were dropped: "no baseline in these results"); "baseline": "" (what bench
// writes for a case without one, with the time of an empty graph) is no baseline; an empty results list is an error.
// Names with control characters or bytes that are not UTF-8 (a case file's name is the set's) reach the SVG and HTML
// as U+FFFD: XML forbids the raw bytes, and the SVG would not parse.
TEST(Chart, UnprintableNamesReplaced) {
  const auto j = nlohmann::json::parse(std::string(R"({"command": "bench", "backend": "cuda", "results": [
    {"set": "bad\u0007set", "op": "a\u0000b", "dtype": "c\u009bd", "shape": "1", "cold_us": 2.0}]})"));
  nlohmann::json raw = j;
  raw["results"][0]["shape"] = std::string("x\xffy");  // not UTF-8 (JSON text cannot hold it; a parsed result can)
  for (const std::string& out : {chart_svg(raw), chart_html(raw)}) {
    EXPECT_EQ(out.find('\x07'), std::string::npos);
    EXPECT_EQ(out.find(std::string(1, '\0')), std::string::npos);
    EXPECT_EQ(out.find('\xff'), std::string::npos);
    EXPECT_NE(out.find("bad\xEF\xBF\xBDset"), std::string::npos);
    EXPECT_NE(out.find("x\xEF\xBF\xBDy"), std::string::npos);
    EXPECT_NE(out.find("c\xEF\xBF\xBD" "d"), std::string::npos);  // C1 (U+009B) as well as C0
    EXPECT_EQ(out.find("\xC2\x9B"), std::string::npos);
  }
}

TEST(Chart, ZeroBaselinesDrawnEmptyNamesNot) {
  const auto zero = nlohmann::json::parse(R"({"command": "bench", "backend": "cuda", "results": [
    {"set": "s", "op": "x", "shape": "1", "cold_us": 2.0, "baselines": [{"name": "a", "cold_us": 0}]}]})");
  EXPECT_EQ(count(chart_svg(zero), "class=\"ratio-bar\""), 1u);
  const auto none = nlohmann::json::parse(R"({"command": "bench", "backend": "cuda", "results": [
    {"set": "s", "op": "x", "shape": "1", "cold_us": 2.0, "baseline": "", "baseline_cold_us": 0.18}]})");
  const std::string svg = chart_svg(none);
  EXPECT_EQ(count(svg, "class=\"ratio-bar\""), 0u);
  EXPECT_NE(svg.find("no baseline in these results"), std::string::npos);
  EXPECT_THROW(chart_svg(nlohmann::json::parse(R"({"command": "bench", "results": []})")), Error);
}

TEST(Chart, GpuResultWithItsOwnCeiling) {
  const auto j = nlohmann::json::parse(R"({"command": "bench", "backend": "cuda", "ceiling_tbps": 4.0, "results": [
    {"set": "s", "op": "silu_and_mul", "shape": "8192x14336", "dtype": "bf16", "bytes": 704643072, "cold_us": 200.0}]})");
  const std::string svg = chart_svg(j);
  EXPECT_EQ(count(svg, "class=\"ceiling\""), 1u);
  EXPECT_NE(svg.find("(88% of ceiling)"), std::string::npos) << svg;
  EXPECT_NE(svg.find("ceiling_tbps of the results 4.000 TB/s"), std::string::npos) << svg;
}

TEST(Chart, CpuResultsWithoutBaselines) {
  const auto j = nlohmann::json::parse(R"({"command": "bench", "backend": "cpu", "version": "0.1.0",
    "ceiling_tbps": 0.01, "results": [{"set": "a", "op": "silu_and_mul", "shape": "4x8", "dtype": "bf16",
    "cpu_us": 2.0, "bytes": 192}]})");
  const std::string svg = chart_svg(j);
  EXPECT_EQ(count(svg, "class=\"bar\""), 1u);
  EXPECT_EQ(count(svg, "class=\"ratio-bar\""), 0u);
  EXPECT_NE(svg.find("no baseline in these results"), std::string::npos);
  EXPECT_NE(svg.find("not GPU numbers"), std::string::npos);
  EXPECT_NE(svg.find("memcpy rate"), std::string::npos);
  // the HTML table gives the CPU rate in GB/s as the SVG does (it printed 0.000 TB/s)
  const std::string html = chart_html(j);
  EXPECT_NE(html.find("<td>0.10 GB/s</td>"), std::string::npos) << html;
}

TEST(Chart, RejectsWhatIsNotABenchResult) {
  // a check result with rows (an empty list is refused for its emptiness alone)
  try {
    chart_svg(nlohmann::json::parse(R"({"command": "check", "results": [)"
                                    R"({"op": "silu_and_mul", "shape": "4x8", "dtype": "f32", "cold_us": 1.0}]})"));
    ADD_FAILURE() << "charted a check result";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(command \"bench\""), std::string::npos) << e.what();
  }
  // a ceiling given as zero, negative or text is an error (it silently drew no ceiling line)
  for (const char* bad : {R"("copy_tbps": -4.0)", R"("copy_tbps": 0)", R"("ceiling_tbps": "fast")"}) {
    const std::string text = std::string(R"({"command": "bench", "backend": "cuda", )") + bad + R"(, "results": []})";
    try {
      chart_svg(nlohmann::json::parse(text));
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("must be a positive number (TB/s)"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(chart_html(nlohmann::json::parse(R"([1, 2])")), Error);
  EXPECT_THROW(run_chart("/nonexistent/x.json", "a.svg", ""), Error);
}

TEST(Progress, LineAndTerminalOnly) {
  EXPECT_EQ(Progress::line(3, 10, 65.4, "silu_and_mul 4x8 bf16"), "[3/10] 1:05 elapsed  silu_and_mul 4x8 bf16");
  EXPECT_EQ(Progress::line(0, 2, 0, ""), "[0/2] 0:00 elapsed");
  EXPECT_LE(Progress::line(1, 2, 0, std::string(300, 'x')).size(), 100u);
  EXPECT_FALSE(Progress::on_terminal(true));  // --quiet
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress off(5, false, f);
    off.show(1, "a");
    off.clear();
  }
  EXPECT_EQ(std::ftell(f), 0);  // nothing written when off
  {
    Progress on(5, true, f);
    on.show(2, "b");
  }  // cleared on destruction
  std::rewind(f);
  char buf[256] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const std::string written(buf, n);
  EXPECT_NE(written.find("\r\033[K[2/5] 0:00 elapsed  b"), std::string::npos) << written;
  EXPECT_EQ(written.substr(written.size() - 4), "\r\033[K");
}

}  // namespace
}  // namespace fuseops::cli
