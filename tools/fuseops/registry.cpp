#include "cases.h"

namespace fuseops::cli {

void Registry::add(const std::string& set, const std::string& description, bool real_model, CaseFactory factory) {
  for (CaseSet& s : sets_) {
    if (s.name == set) {
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

const Registry& registry() {
  static const Registry r = [] {
    Registry reg;
    register_activation_cases(reg);
    register_gdn_cases(reg);
    register_gdn_forward_cases(reg);
    return reg;
  }();
  return r;
}

}  // namespace fuseops::cli
