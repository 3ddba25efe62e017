#include "chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "fuseops/error.h"
#include "commands.h"
#include "paths.h"

namespace fuseops::cli {
namespace {

struct Row {
  std::string label;
  double time_us = 0, bytes = 0, flops = 0;
  std::vector<std::pair<std::string, double>> baselines;  ///< name, time in us (same timing as time_us)
  double tbps() const { return time_us > 0 ? bytes / time_us / 1e6 : 0; }
};

struct Results {
  std::string title, timing, ceiling_name;
  double ceiling_tbps = 0;
  std::vector<Row> rows;
};

std::string text_of(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}
double num_of(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}
std::string fmt_g(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

[[noreturn]] void bad_entry(std::size_t i, const nlohmann::json& e, const std::string& msg) {
  std::string what = "chart: results[" + std::to_string(i) + "]";
  // the entry's own words escaped (escaped_text): an op of "x\u001b[31m" put a raw escape on the terminal
  if (e.is_object() && !text_of(e, "op").empty()) {
    what += " (" + escaped_text(text_of(e, "op")) + " " + escaped_text(text_of(e, "shape")) + ")";
  }
  throw Error(ErrorKind::invalid_argument, what + ": " + msg);
}

/// A time of entry `e` in microseconds: a number >= 0 (an error naming the key otherwise).
double time_of(std::size_t i, const nlohmann::json& e, const nlohmann::json& holder, const char* key, const std::string& who) {
  if (!holder[key].is_number()) bad_entry(i, e, who + "\"" + key + "\" is not a number");
  const double t = holder[key].get<double>();
  if (!(t >= 0)) bad_entry(i, e, who + "\"" + key + "\" is negative (" + fmt_g(t) + ")");
  return t;
}

Results load(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("results") || !j["results"].is_array() || text_of(j, "command") != "bench") {
    throw Error(ErrorKind::invalid_argument, "chart: expected the JSON of `fuseops bench --json` (command \"bench\", results [...])");
  }
  Results r;
  const bool cpu = text_of(j, "backend") == "cpu";
  r.title = "fuseops " + text_of(j, "version") + " bench" + (cpu ? " (CPU backend: not GPU numbers)" : " on " + text_of(j, "device"));
  if (!text_of(j, "date").empty()) r.title += ", " + text_of(j, "date");
  r.timing = cpu ? "median wall time on the CPU" : "cold: median per launch under CUDA-graph replay, rotating buffers >= 4x L2";
  // The ceiling measured in the same run: the GPU copy rate (copy_tbps); a result that gives its own ceiling_tbps
  // (the CPU memcpy rate, or a GPU result from elsewhere) has that one.
  for (const char* key : {"copy_tbps", "ceiling_tbps"}) {  // given: a rate in TB/s, never silently no ceiling
    if (j.contains(key) && !(j[key].is_number() && j[key].get<double>() > 0)) {
      throw Error(ErrorKind::invalid_argument,
                  std::string("chart: \"") + key + "\" must be a positive number (TB/s), got " + j[key].dump());
    }
  }
  const bool copy = !cpu && num_of(j, "copy_tbps") > 0;
  r.ceiling_tbps = copy ? num_of(j, "copy_tbps") : num_of(j, "ceiling_tbps");
  r.ceiling_name = cpu ? "memcpy rate (read + write)" : copy ? "copy rate (1 GiB D2D, read + write)" : "ceiling_tbps of the results";
  const auto& results = j["results"];
  if (results.empty()) throw Error(ErrorKind::invalid_argument, "chart: the results list is empty (nothing to chart)");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const nlohmann::json& e = results[i];
    if (!e.is_object()) bad_entry(i, e, "expected an object with op, shape and a time");
    for (const char* key : {"op", "shape"}) {
      if (!e.contains(key) || !e[key].is_string()) bad_entry(i, e, std::string("missing \"") + key + "\" (text)");
    }
    const char* time_key = e.contains("cold_us") ? "cold_us" : e.contains("cpu_us") ? "cpu_us" : nullptr;
    if (!time_key) bad_entry(i, e, "missing a time: \"cold_us\" (GPU) or \"cpu_us\" (CPU backend)");
    Row row;
    row.label = text_of(e, "set") + "  " + text_of(e, "op") + "  " + text_of(e, "shape") + "  " + text_of(e, "dtype");
    row.time_us = time_of(i, e, e, time_key, "");
    for (const char* key : {"bytes", "flops"}) {  // optional, but a number where given
      if (e.contains(key) && !e[key].is_number()) bad_entry(i, e, std::string("\"") + key + "\" is not a number");
    }
    row.bytes = num_of(e, "bytes");
    row.flops = num_of(e, "flops");
    if (row.bytes < 0 || row.flops < 0) bad_entry(i, e, "\"bytes\" and \"flops\" must be >= 0");
    // the case's own time divides the rates and the baseline ratios: where there is one to draw, 0 would show the
    // fastest case as an empty bar and a tiny time a non-finite width
    const bool named_base = e.contains("baseline_cold_us") && !(e.contains("baseline") && text_of(e, "baseline").empty());
    const bool divides = row.bytes > 0 || row.flops > 0 || e.contains("baselines") || named_base;
    if (row.time_us == 0 && divides) {
      bad_entry(i, e, std::string("\"") + time_key + "\" is 0: no rate or ratio to draw for bytes, flops or baselines");
    }
    if (divides && (!std::isfinite(row.bytes / row.time_us) || !std::isfinite(row.flops / row.time_us))) {
      bad_entry(i, e, "bytes or flops / \"" + std::string(time_key) + "\" (" + fmt_g(row.time_us) +
                          ") is not a finite rate");
    }
    if (e.contains("baseline_cold_us")) {  // a time (>= 0, drawn even when zero) of the baseline named "baseline"
      const double t = time_of(i, e, e, "baseline_cold_us", "");
      // bench writes "baseline": "" (and the time of an empty graph) for a case without one: not a baseline
      const bool none = e.contains("baseline") && text_of(e, "baseline").empty();
      if (!none) row.baselines.emplace_back(text_of(e, "baseline").empty() ? "baseline" : text_of(e, "baseline"), t);
    }
    if (e.contains("baselines")) {  // other baselines run side by side (name, cold_us)
      if (!e["baselines"].is_array()) bad_entry(i, e, "\"baselines\" is not a list of {name, cold_us}");
      for (const auto& b : e["baselines"]) {
        const std::string who = "baseline \"" + escaped_text(b.is_object() ? text_of(b, "name") : std::string()) + "\": ";
        if (!b.is_object() || !b.contains("cold_us")) {
          bad_entry(i, e, who + "no \"cold_us\" (its cold time in microseconds, run side by side with this case)");
        }
        if (text_of(b, "name").empty()) bad_entry(i, e, "a baseline without a \"name\" (text)");
        row.baselines.emplace_back(text_of(b, "name"), time_of(i, e, b, "cold_us", who));
      }
    }
    // the share of the ceiling printed beside the bar is a ratio too: a tiny ceiling_tbps or a huge rate made it inf%
    if (row.bytes > 0 && r.ceiling_tbps > 0 && !std::isfinite(100 * row.tbps() / r.ceiling_tbps)) {
      bad_entry(i, e, "its rate / the ceiling (" + fmt_g(row.tbps()) + " / " + fmt_g(r.ceiling_tbps) +
                          " TB/s) is not a finite ratio");
    }
    for (const auto& b : row.baselines) {  // (a baseline made time_us > 0 above)
      if (!std::isfinite(b.second / row.time_us)) {
        bad_entry(i, e, "baseline \"" + escaped_text(b.first) + "\": its time / the case's (" + fmt_g(b.second) + " / " +
                            fmt_g(row.time_us) + ") is not a finite ratio");
      }
    }
    r.rows.push_back(std::move(row));
  }
  return r;
}

/// `s` as SVG / HTML text: printable_text (no raw control or non-UTF-8 bytes, which XML forbids), markup escaped.
std::string esc(const std::string& s) {
  std::string o;
  for (char c : printable_text(s)) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

/// The achieved rate of a row as the SVG labels and the HTML table print it: GB/s below 0.1 TB/s (CPU results).
std::string rate_text(const Row& row) {
  if (row.bytes <= 0) return "no byte count";
  return row.tbps() < 0.1 ? fmt("%.2f GB/s", 1e3 * row.tbps()) : fmt("%.3f TB/s", row.tbps());
}

constexpr int kWidth = 1240, kLabelW = 450, kBarW = 440, kRowH = 20, kX0 = kLabelW + 10;
constexpr double kHeadroom = 1.08;  ///< the longest bar takes 1 / 1.08 of kBarW: room for its label

/// The length of a bar (or the place of a line) for `value` on an axis whose largest value is `largest` (> 0, finite):
/// value / largest first, so that a finite but huge value gives a finite length (largest * 1.08 and kBarW * value
/// overflowed to inf, and a baseline time or a copy_tbps of 1.7e308 drew width="-nan" and x1="-nan").
double bar_length(double value, double largest) { return kBarW * (value / largest) / kHeadroom; }

/// The SVG element (without an XML prolog): the throughput section, then the baseline-ratio section.
std::string svg_element(const Results& r) {
  const int n = static_cast<int>(r.rows.size());
  int nratio = 0;
  double max_tbps = r.ceiling_tbps, max_ratio = 1.2;
  for (const Row& row : r.rows) {
    max_tbps = std::max(max_tbps, row.tbps());
    for (const auto& b : row.baselines) max_ratio = std::max(max_ratio, b.second / std::max(row.time_us, 1e-9));
    nratio += static_cast<int>(row.baselines.size());
  }
  if (!(max_tbps > 0)) max_tbps = 1.0;  // no rate and no ceiling: every bar is empty
  const int top1 = 72, top2 = top1 + n * kRowH + 70;
  const int height = top2 + std::max(nratio, 1) * kRowH + 30;
  std::ostringstream s;
  s << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << kWidth << "\" height=\"" << height << "\" viewBox=\"0 0 "
    << kWidth << " " << height << "\" font-family=\"sans-serif\" font-size=\"12\" data-cases=\"" << n << "\">\n";
  s << "<style>.bar{fill:#3b7dd8}.ratio-bar{fill:#e08a2b}.ceiling{stroke:#c0392b;stroke-width:1.5;stroke-dasharray:5,3}"
       ".unit{stroke:#555;stroke-width:1}text.v{fill:#222}</style>\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"8\" y=\"20\" font-size=\"15\" font-weight=\"bold\">" << esc(r.title) << "</text>\n";
  s << "<text x=\"8\" y=\"40\">Achieved TB/s: bytes the op must move / time (" << esc(r.timing) << ")</text>\n";
  s << "<text x=\"8\" y=\"56\">";
  if (r.ceiling_tbps > 0) s << "Dashed line: the measured ceiling, " << esc(r.ceiling_name) << " " << fmt("%.3f", r.ceiling_tbps) << " TB/s";
  else s << "No measured ceiling in these results";
  s << "</text>\n";
  for (int i = 0; i < n; ++i) {
    const Row& row = r.rows[i];
    const int y = top1 + i * kRowH;
    const double w = bar_length(row.tbps(), max_tbps);
    s << "<text x=\"8\" y=\"" << y + 14 << "\">" << esc(row.label) << "</text>\n";
    s << "<rect class=\"bar\" x=\"" << kX0 << "\" y=\"" << y + 3 << "\" width=\"" << fmt("%.2f", w) << "\" height=\""
      << kRowH - 6 << "\" data-value=\"" << fmt("%.6g", row.tbps()) << "\"><title>" << esc(row.label) << ": "
      << fmt("%.2f", row.time_us) << " us</title></rect>\n";
    std::string v = rate_text(row);
    if (row.bytes > 0 && r.ceiling_tbps > 0) v += fmt(" (%.0f%% of ceiling)", 100 * row.tbps() / r.ceiling_tbps);
    if (row.flops > 0 && row.time_us > 0) v += fmt(", %.2f TFLOP/s", row.flops / row.time_us / 1e6);
    s << "<text class=\"v\" x=\"" << fmt("%.2f", kX0 + w + 4) << "\" y=\"" << y + 14 << "\">" << esc(v) << "</text>\n";
  }
  if (r.ceiling_tbps > 0) {
    const double x = kX0 + bar_length(r.ceiling_tbps, max_tbps);
    s << "<line class=\"ceiling\" x1=\"" << fmt("%.2f", x) << "\" x2=\"" << fmt("%.2f", x) << "\" y1=\"" << top1
      << "\" y2=\"" << top1 + n * kRowH << "\"/>\n";
  }
  s << "<text x=\"8\" y=\"" << top2 - 20 << "\">Speed-up over each baseline (baseline time / fuseops time, same run; "
    << "solid line: 1x)</text>\n";
  if (nratio == 0) s << "<text x=\"8\" y=\"" << top2 + 14 << "\">no baseline in these results</text>\n";
  int k = 0;
  for (const Row& row : r.rows) {
    for (const auto& b : row.baselines) {
      const int y = top2 + k++ * kRowH;
      const double ratio = b.second / std::max(row.time_us, 1e-9), w = bar_length(ratio, max_ratio);
      s << "<text x=\"8\" y=\"" << y + 14 << "\">" << esc(row.label + "  vs " + b.first) << "</text>\n";
      s << "<rect class=\"ratio-bar\" x=\"" << kX0 << "\" y=\"" << y + 3 << "\" width=\"" << fmt("%.2f", w)
        << "\" height=\"" << kRowH - 6 << "\" data-value=\"" << fmt("%.6g", ratio) << "\"/>\n";
      s << "<text class=\"v\" x=\"" << fmt("%.2f", kX0 + w + 4) << "\" y=\"" << y + 14 << "\">" << fmt("%.2fx", ratio)
        << "</text>\n";
    }
  }
  if (nratio > 0) {
    const double x = kX0 + bar_length(1.0, max_ratio);
    s << "<line class=\"unit\" x1=\"" << fmt("%.2f", x) << "\" x2=\"" << fmt("%.2f", x) << "\" y1=\"" << top2
      << "\" y2=\"" << top2 + nratio * kRowH << "\"/>\n";
  }
  s << "</svg>\n";
  return s.str();
}

}  // namespace

std::string fmt(const char* f, double v) {
  char buf[64];
  if (std::fabs(v) >= 1e15) {
    // a finite but absurd number (a hand-made result's rate against a ceiling of 1e-300) in %f runs to hundreds of
    // digits, cut at the buffer: printed in %.3g instead, in the conversion's place
    std::string g = f;
    const std::size_t at = g.find('%'), end = g.find_first_of("eEfFgG", at);
    if (at != std::string::npos && end != std::string::npos) g.replace(at, end - at + 1, "%.3g");
    std::snprintf(buf, sizeof buf, g.c_str(), v);
    return buf;
  }
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string chart_svg(const nlohmann::json& bench) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + svg_element(load(bench));
}

std::string chart_html(const nlohmann::json& bench) {
  const Results r = load(bench);
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>" << esc(r.title) << "</title>\n"
    << "<style>body{font-family:sans-serif;margin:16px}table{border-collapse:collapse;font-size:12px}"
       "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}td:first-child{text-align:left}</style></head>\n"
    << "<body data-cases=\"" << r.rows.size() << "\">\n" << svg_element(r)
    << "<table><tr><th>case</th><th>time us</th><th>rate</th><th>TFLOP/s</th><th>baselines (us)</th></tr>\n";
  for (const Row& row : r.rows) {
    std::string b;
    for (const auto& x : row.baselines) b += (b.empty() ? "" : ", ") + x.first + " " + fmt("%.2f", x.second);
    h << "<tr><td>" << esc(row.label) << "</td><td>" << fmt("%.2f", row.time_us) << "</td><td>" << rate_text(row)
      << "</td><td>" << (row.flops > 0 ? fmt("%.2f", row.flops / std::max(row.time_us, 1e-9) / 1e6) : "") << "</td><td>"
      << esc(b) << "</td></tr>\n";
  }
  // Counts the bars the browser laid out (a non-zero box, or a zero value) for a test to read from the DOM.
  h << "</table>\n<script>\n(function(){var n=0;document.querySelectorAll('rect.bar').forEach(function(e){"
       "var b=e.getBBox();if(b.height>0&&(b.width>0||Number(e.dataset.value)===0))n++;});"
       "document.body.setAttribute('data-rendered-bars',String(n));})();\n</script>\n</body></html>\n";
  return h.str();
}

void write_charts(const nlohmann::json& bench, const std::string& svg_path, const std::string& html_path) {
  // each chart rendered only where its file is asked for (chart_svg / chart_html reject an empty result list)
  write_outputs({[&] {
                   if (!svg_path.empty()) write_text_file("--svg", svg_path, chart_svg(bench));
                 },
                 [&] {
                   if (!html_path.empty()) write_text_file("--html", html_path, chart_html(bench));
                 }});
}

int run_chart(const std::string& from, const std::string& svg_path, const std::string& html_path) {
  if (svg_path.empty() && html_path.empty()) throw Error(ErrorKind::invalid_argument, "chart: give --svg FILE and/or --html FILE");
  check_distinct_files({{"--from", from}}, {{"--svg", svg_path}, {"--html", html_path}});
  check_writable("--svg", svg_path, !svg_path.empty());  // before either file is written
  check_writable("--html", html_path, !html_path.empty());
  // at most 16 MiB, as a case file (a pipe of endless text was read until memory ran out)
  const std::string text = read_input_file("--from", from, "a bench result is a short list");
  // nlohmann::json reads a NUL byte as the end of the input: the rest of the file was silently ignored
  check_no_nul_byte(text, "JSON", [&](TextPlace p) { return "--from: " + place_text(from, p) + ": "; });
  nlohmann::json j;
  try {
    // the whole file as one value: anything after it (a second result appended, stray brackets) is an error, not
    // ignored as `f >> j` did
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // the parser's words without its "[json.exception.parse_error.101] " prefix
    std::string why = e.what();
    if (why.rfind("[json.exception.", 0) == 0 && why.find("] ") != std::string::npos) why.erase(0, why.find("] ") + 2);
    throw Error(ErrorKind::invalid_argument, "--from: " + escaped_text(from) + " is not JSON: " + why);
  }
  write_charts(j, svg_path, html_path);
  // the paths escaped: a file named r<ESC>]0;pwn<BEL>.json echoed a terminal command
  std::printf("chart: %zu cases from %s%s%s%s%s\n", j["results"].size(), escaped_text(from).c_str(),
              svg_path.empty() ? "" : " -> ", escaped_text(svg_path).c_str(), html_path.empty() ? "" : " -> ",
              escaped_text(html_path).c_str());
  return 0;
}

}  // namespace fuseops::cli
