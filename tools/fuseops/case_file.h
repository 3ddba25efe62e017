// Case files (docs/cases.md): YAML listing ops with parameters as single values, lists or ranges; every entry expands
// into the cross product of its parameters. Errors name the file, line, column and key.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cases.h"
#include "fuseops/error.h"

namespace fuseops::cli {

/// A case file's contents, checked: every point has been made into a case once by its op's hook.
struct CaseFile {
  struct Point {
    const OpSpec* op = nullptr;
    CaseParams params;
    std::string where;  ///< "file:line:col" of the entry
  };
  std::string path;
  std::string name;         ///< `name:`, else the file name without directory and extension
  std::string description;  ///< `description:`
  std::vector<Point> points;

  /// Fresh cases, one per point, in file order.
  std::vector<std::unique_ptr<OpCase>> make_cases() const;
  /// A case set running this file's cases.
  CaseSet as_set() const;
};

/// Most cases one file may expand to.
constexpr std::size_t kMaxCasesPerFile = 10000;

/// Reads and expands `path` against the ops of `reg`. Throws fuseops::Error (invalid_argument) whose message
/// starts with "path:line:col: " and names the key, for a syntax error, an unknown op or key, a bad value, a
/// missing required parameter or an impossible combination.
CaseFile read_case_file(const std::string& path, const Registry& reg);
/// The same from text (`path` is used in messages only).
CaseFile parse_case_text(const std::string& text, const std::string& path, const Registry& reg);

}  // namespace fuseops::cli
