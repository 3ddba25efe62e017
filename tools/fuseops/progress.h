// A one-line progress indicator for long runs: "[12/40] 0:13 elapsed  kkt_solve 1x4096x16x128", redrawn in place on
// a terminal and cleared before each result row is printed. Off when stdout is not a terminal or with --quiet.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <string>

namespace fuseops::cli {

class Progress {
 public:
  /// `enabled`: usually Progress::on_terminal(quiet).
  Progress(std::size_t total, bool enabled, std::FILE* out = stdout);
  ~Progress() { clear(); }
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  /// Shows that case `done` + 1 of the total, `label`, is running (`done` cases finished so far).
  void show(std::size_t done, const std::string& label);
  /// Erases the line, so that a result row can be printed.
  void clear();
  bool enabled() const { return enabled_; }

  /// True when stdout is a terminal and not `quiet`.
  static bool on_terminal(bool quiet);
  /// The text of the line.
  static std::string line(std::size_t done, std::size_t total, double seconds, const std::string& label);

 private:
  std::size_t total_;
  bool enabled_;
  bool shown_ = false;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace fuseops::cli
