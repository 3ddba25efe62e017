#include "paths.h"

#include <filesystem>
#include <system_error>

#include "fuseops/error.h"

namespace fuseops::cli {

bool same_file(const std::string& a, const std::string& b) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  const fs::path ca = fs::weakly_canonical(fs::absolute(a, ec), ec);
  const fs::path cb = fs::weakly_canonical(fs::absolute(b, ec), ec);
  return ca == cb;
}

void check_distinct_files(const std::vector<FileArg>& inputs, const std::vector<FileArg>& outputs) {
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const FileArg& out = outputs[i];
    if (out.path.empty()) continue;
    auto clash = [&](const FileArg& other, const char* what) {
      if (other.path.empty() || !same_file(out.path, other.path)) return;
      throw Error(ErrorKind::invalid_argument, out.option + ": " + out.path + " is the same file as the " + what + " " +
                                                   other.option + " " + other.path + "; give another path");
    };
    for (const FileArg& in : inputs) clash(in, "input");
    for (std::size_t j = 0; j < i; ++j) clash(outputs[j], "output");
  }
}

}  // namespace fuseops::cli
