#include "case_params.h"

#include <algorithm>
#include <cstdio>

namespace fuseops::cli {

std::string value_text(const ParamValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* d = std::get_if<double>(&v)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *d);
    return buf;
  }
  std::string out = "[";
  for (int64_t x : std::get<std::vector<int64_t>>(v)) out += (out.size() > 1 ? "," : "") + std::to_string(x);
  return out + "]";
}

std::string CaseParams::describe() const {
  std::string out;
  for (const auto& [k, v] : values_) out += (out.empty() ? "" : " ") + k + "=" + value_text(v);
  return out;
}

const ParamSpec* OpSpec::param(const std::string& n) const {
  for (const ParamSpec& p : params) {
    if (p.name == n) return &p;
  }
  return nullptr;
}

bool OpSpec::answers_to(const std::string& n) const {
  return n == name || std::find(aliases.begin(), aliases.end(), n) != aliases.end();
}

CaseParams OpSpec::with_defaults(const std::map<std::string, ParamValue>& given) const {
  CaseParams out;
  for (const auto& [k, v] : given) {
    if (!param(k)) throw ParamError(k, name + ": unknown parameter \"" + k + "\"");
    out.set(k, v);
  }
  for (const ParamSpec& p : params) {
    if (out.has(p.name)) continue;
    if (!p.default_value) throw ParamError(p.name, name + ": parameter \"" + p.name + "\" is required");
    out.set(p.name, *p.default_value);
  }
  return out;
}

ParamSpec integer_param(const std::string& name, const std::string& help, std::optional<int64_t> def, int64_t min,
                        int64_t max) {
  ParamSpec p;
  p.name = name;
  p.help = help;
  if (def) p.default_value = *def;
  p.min = min;
  p.max = max;
  return p;
}

ParamSpec text_param(const std::string& name, const std::string& help, const std::string& def,
                     std::vector<std::string> choices) {
  ParamSpec p;
  p.name = name;
  p.kind = ParamKind::text;
  p.help = help;
  p.default_value = def;
  p.choices = std::move(choices);
  return p;
}

ParamSpec dtype_param(const std::string& default_dtype, std::vector<std::string> choices) {
  return text_param("dtype", "storage dtype of the inputs and outputs", default_dtype, std::move(choices));
}

DType dtype_from_name(const std::string& key, const std::string& name) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    if (name == dtype_name(t)) return t;
  }
  throw ParamError(key, "unknown dtype \"" + name + "\"");
}

}  // namespace fuseops::cli
