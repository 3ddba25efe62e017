// What `check` and `bench` select: --filter on printed and public op names.
#include <gtest/gtest.h>

#include <string>

#include "cases.h"
#include "commands.h"

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
  EXPECT_EQ(filtered("gdn-kkt-solve", "layer_norm_fwd").first, 0u);
}

}  // namespace
}  // namespace fuseops::cli
