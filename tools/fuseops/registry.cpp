#include "cases.h"

#include <stdexcept>
#include <algorithm>
#include <chrono>

namespace fuseops::cli {

void Registry::add(const std::string& set, const std::string& description, bool real_model, CaseFactory factory) {
  for (CaseSet& s : sets_) {
    if (s.name == set) {  // a set several families fill: each adds its part's description
      if (!description.empty()) s.description += (s.description.empty() ? "" : "; ") + description;
      s.factories.push_back(std::move(factory));
      return;
    }
  }
  sets_.push_back(CaseSet{set, description, real_model, {std::move(factory)}});
}

const CaseSet* Registry::find(const std::string& name) const {
  for (const CaseSet& s : sets_) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

void Registry::add_op(OpSpec spec) {
  for (const OpSpec& o : ops_) {
    if (o.answers_to(spec.name)) throw std::logic_error("op registered twice: " + spec.name);
  }
  ops_.push_back(std::move(spec));
}

const OpSpec* Registry::find_op(const std::string& name) const {
  for (const OpSpec& o : ops_) {
    if (o.answers_to(name)) return &o;
  }
  return nullptr;
}

double median_wall_us(const std::function<void()>& fn, int reps) {
  std::vector<double> us;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    register_activation_cases(reg);
    register_gdn_cases(reg);
    register_moe_cases(reg);
    register_rope_cases(reg);
    register_gdn_forward_cases(reg);
    register_gdn_fwd_o_cases(reg);
    register_norm_cases(reg);
    return reg;
  }();
  return r;
}

}  // namespace fuseops::cli
