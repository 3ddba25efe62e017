// Charts of bench results (the JSON `fuseops bench --json` writes): per case, the achieved TB/s against the ceiling
// measured in the same run (GPU: the copy rate; CPU: the memcpy rate), TFLOP/s where the op counts FLOPs, and the
// ratio of each baseline's time to ours. Self-contained SVG and HTML (no scripts or fonts fetched; the HTML's only
// script counts the rendered bars into the body's data-rendered-bars attribute).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace fuseops::cli {

/// One throughput bar (<rect class="bar">) per result, one ratio bar (<rect class="ratio-bar">) per result and
/// baseline. Throws fuseops::Error for a JSON that is not a bench result.
std::string chart_svg(const nlohmann::json& bench);
std::string chart_html(const nlohmann::json& bench);

/// Writes the charts to the paths that are not empty.
void write_charts(const nlohmann::json& bench, const std::string& svg_path, const std::string& html_path);

/// One number in printf format `f` (a single conversion), as the charts and the bench tables print it; a value of
/// 10^15 or more in %.3g in the conversion's place (%f would print hundreds of digits).
std::string fmt(const char* f, double v);

/// `fuseops chart --from results.json --svg F --html F`.
int run_chart(const std::string& from, const std::string& svg_path, const std::string& html_path);

}  // namespace fuseops::cli
