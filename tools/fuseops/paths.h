// The files a command reads and writes, checked before anything is written: an output must not be an input
// (`chart --from b.json --svg b.json` replaced the results with the chart) nor another output (`--svg x --html x`).
#pragma once

#include <string>
#include <vector>

namespace fuseops::cli {

/// A file named on the command line: the option and the path as given ("" = not given, skipped).
struct FileArg {
  std::string option;
  std::string path;
};

/// Whether two paths name one file: the same file where both exist (symbolic and hard links included), else the same
/// absolute path once normalised (".", "..", and the links of the part that exists resolved).
bool same_file(const std::string& a, const std::string& b);

/// Throws Error (invalid_argument) naming both options when an output is the same file as an input or as an
/// earlier output.
void check_distinct_files(const std::vector<FileArg>& inputs, const std::vector<FileArg>& outputs);

}  // namespace fuseops::cli
