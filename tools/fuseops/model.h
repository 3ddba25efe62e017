// The layers `fuseops model` runs: per model, the fused ops of one layer with that model's dimensions.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cases.h"

namespace fuseops::cli {

/// One op of a layer.
struct Step {
  std::string what;                 ///< "GDN intra-chunk: kkt + solve_tril"
  std::vector<std::string> names;   ///< op names to look up, first found wins (the first is shown when missing)
  std::map<std::string, ParamValue> params;  ///< for the op's hook (docs/cases.md lists the names per op)
  std::string not_added;            ///< why its time is not added to the layer total (empty: added)
  std::string inside_of;            ///< an op of the layer that contains this one: not added when that op is present
  int count = 1;                    ///< times per layer
};

struct Model {
  std::string name, description;
  std::function<std::vector<Step>(int64_t tokens, int64_t batch)> layer;
};

const std::vector<Model>& models();

/// A step's case: from the op's hook with the step's parameters, else a built-in case of that op (preferring the set
/// named `model`); `c` is null when the op is in neither (missing). `note` says why a hook did not take the step.
struct Resolved {
  std::unique_ptr<OpCase> c;
  std::string source;
  std::string note;
};
Resolved resolve(const Step& s, const Registry& reg, const std::string& model);

}  // namespace fuseops::cli
