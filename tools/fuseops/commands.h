// The subcommands of the `fuseops` command line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fuseops::cli {

struct Options {
  std::vector<std::string> sets;
  std::string backend = "auto";
  std::string json, md, filter, note;
  std::string shape;  ///< only the case with exactly this shape text (as printed), e.g. 2x16384x32x128
  bool json_given = false, md_given = false;  ///< the option was on the command line (even with an empty value)
  std::string seed_text;  ///< --seed; empty: from FUSEOPS_SEED or the clock
  int64_t cpu_rows = 64;
};

int run_list();
int run_check(const Options& opts);
int run_bench(const Options& opts);

}  // namespace fuseops::cli
