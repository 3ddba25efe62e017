#include "case_params.h"

#include <algorithm>
#include <numeric>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

namespace fuseops::cli {

std::string value_text(const ParamValue& v) {
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* d = std::get_if<double>(&v)) {  // %g, with more digits only where 6 do not give the value back
    char buf[32];
    for (int digits = 6; digits <= 17; ++digits) {
      std::snprintf(buf, sizeof buf, "%.*g", digits, *d);
      if (std::strtod(buf, nullptr) == *d) break;
    }
    return buf;
  }
  std::string out = "[";
  for (int64_t x : std::get<std::vector<int64_t>>(v)) out += (out.size() > 1 ? "," : "") + std::to_string(x);
  return out + "]";
}

double CaseParams::fp32_number(const std::string& name) const {
  const double x = number(name);
  const float f = static_cast<float>(x);
  if (!std::isfinite(f) || (f == 0.f && x != 0.0)) {
    throw ParamError(name,
                     "must be finite in fp32 (|" + name + "| < 2^128 - 2^103 = 3.4028235677973366e+38) and, if "
                     "nonzero, not round to 0 there (|" + name + "| > 2^-150 = 7.006492321624085e-46)");
  }
  return x;
}

double CaseParams::checkable_scale(const std::string& name, const char* what) const {
  const double x = fp32_number(name);
  if (x != 0 && std::fabs(x) < std::numeric_limits<float>::min()) {
    throw ParamError(name, std::string("nonzero and below 2^-126 in magnitude: the ") + what +
                               " would all be subnormal, which the golden check cannot compare");
  }
  return x;
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

CaseParams OpSpec::with_defaults(const std::map<std::string, ParamValue>& given, const std::string& as) const {
  CaseParams out;
  for (const auto& [k, v] : given) {
    if (!param(k)) throw ParamError(k, name + ": unknown parameter \"" + k + "\"");
    out.set(k, v);
    out.mark_given(k);
  }
  if (const auto a = alias_defaults.find(as); a != alias_defaults.end()) {
    for (const auto& [k, v] : a->second) {
      const auto g = given.find(k);
      if (g == given.end()) {
        out.set(k, v);
      } else if (g->second != v) {  // the name says one thing, the parameter another: which was meant is unknown
        throw ParamError(k, "op " + as + " implies " + k + " " + value_text(v) + ", but the entry gives " +
                                value_text(g->second) + " (drop " + k + ", or name the op " + name + ")");
      }
    }
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

ParamSpec bool_param(const std::string& name, const std::string& help, bool def) {
  ParamSpec p;
  p.name = name;
  p.kind = ParamKind::boolean;
  p.help = help;
  p.default_value = def;
  return p;
}

int64_t bounded_product(const std::vector<std::pair<std::string, int64_t>>& factors, int limit_log2) {
  const int64_t limit = int64_t{1} << limit_log2;
  const std::string bound = " is more than 2^" + std::to_string(limit_log2) + " elements";
  std::string names, values;
  for (const auto& [name, v] : factors) {
    if (v > limit) throw ParamError(name, name + " " + std::to_string(v) + bound);
    names += (names.empty() ? "" : " x ") + name;
    values += (values.empty() ? "" : " x ") + std::to_string(v);
  }
  int64_t prod = 1;
  for (const auto& f : factors) {
    if (f.second != 0 && prod > limit / f.second) {
      throw ParamError(factors.front().first, names + " = " + values + bound);
    }
    prod *= f.second;
  }
  return prod;
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

int64_t Sequences::tokens() const {
  if (seqlens.empty()) return batch * seq_len;
  int64_t n = 0;
  for (int64_t l : seqlens) n += l;
  return n;
}

std::vector<ParamSpec> sequence_params() {
  ParamSpec seqlens;
  seqlens.name = "seqlens";
  seqlens.kind = ParamKind::int_list;
  seqlens.help = "varlen: the sequence lengths (cu_seqlens are their prefix sums; batch 1)";
  seqlens.default_value = std::vector<int64_t>{};
  return {integer_param("batch", "B", 1, 1), integer_param("seq_len", "T, tokens per sequence (fixed length)", 0, 0),
          seqlens};
}

std::vector<int64_t> seqlens_reduced(const std::vector<int64_t>& seqlens, int64_t rows) {
  int64_t nonempty = 0, total = 0;
  for (int64_t l : seqlens) nonempty += l > 0, total += l;
  if (total <= rows) return seqlens;
  std::vector<int64_t> out;
  if (nonempty > rows) {  // not a token for each: the first `rows` non-empty sequences, 1 token each
    int64_t used = 0;
    for (int64_t l : seqlens) {
      if (l > 0 && used == rows) break;
      out.push_back(l > 0 ? 1 : 0);
      used += l > 0;
    }
    return out;
  }
  // every sequence kept: empty ones empty, the others 1 token, then the remaining budget shared in order, each
  // sequence taking at most an equal share in the first pass and what is left in the second
  out.reserve(seqlens.size());
  for (int64_t l : seqlens) out.push_back(l > 0 ? 1 : 0);
  int64_t budget = rows - nonempty;
  const int64_t share = nonempty > 0 ? budget / nonempty : 0;
  for (int pass = 0; pass < 2 && budget > 0; ++pass) {
    for (std::size_t i = 0; i < seqlens.size() && budget > 0; ++i) {
      const int64_t room = seqlens[i] - out[i];
      const int64_t take = std::min({room, budget, pass == 0 ? share : budget});
      out[i] += take;
      budget -= take;
    }
  }
  return out;
}

std::vector<int64_t> seqlens_reduced_first(const std::vector<int64_t>& seqlens, int64_t rows, int64_t span) {
  const int64_t budget = std::max(rows, 2 * span);
  if (std::accumulate(seqlens.begin(), seqlens.end(), int64_t{0}) <= budget) return seqlens;
  const auto first = std::find_if(seqlens.begin(), seqlens.end(), [](int64_t l) { return l > 0; });
  const auto at = first - seqlens.begin();
  const int64_t kept = std::min(*first, span);  // more tokens than the budget: a non-empty sequence exists
  std::vector<int64_t> rest = seqlens;
  rest.erase(rest.begin() + at);
  std::vector<int64_t> out = seqlens_reduced(rest, budget - kept);  // keeps the empty sequences before `at`
  out.insert(out.begin() + at, kept);
  return out;
}

Sequences sequences_of(const CaseParams& p) {
  Sequences s;
  s.batch = p.integer("batch");
  s.seq_len = p.integer("seq_len");
  s.seqlens = p.int_list("seqlens");
  if (s.seqlens.empty() && s.seq_len == 0) {
    // the key the user wrote (an empty seqlens without seq_len), else seq_len
    throw ParamError(p.given("seqlens") && !p.given("seq_len") ? "seqlens" : "seq_len",
                     "seq_len 0 gives no tokens and seqlens is empty: give seq_len (fixed length) or a non-empty "
                     "seqlens (varlen)");
  }
  if (!s.seqlens.empty() && s.seq_len != 0) throw ParamError("seq_len", "seq_len and seqlens exclude each other");
  if (!s.seqlens.empty() && s.batch != 1) {
    throw ParamError("batch", "varlen (seqlens) runs with batch 1, got " + std::to_string(s.batch));
  }
  if (s.seqlens.empty()) {
    bounded_product({{"seq_len", s.seq_len}, {"batch", s.batch}});
    return s;
  }
  int64_t sum = 0;
  for (int64_t l : s.seqlens) {
    if (l < 0) throw ParamError("seqlens", "a sequence length is negative: " + std::to_string(l));
    if (l > (int64_t{1} << 40) - sum) throw ParamError("seqlens", "the sequences hold more than 2^40 tokens");
    sum += l;
  }
  if (sum == 0) throw ParamError("seqlens", "the sequences hold no tokens");
  return s;
}

ParamSpec chunk_size_param() { return integer_param("chunk_size", "BT: 16, 32 or 64", 64, 16, 64); }

int64_t chunk_size_of(const CaseParams& p) {
  const int64_t BT = p.integer("chunk_size");
  if (BT != 16 && BT != 32 && BT != 64) throw ParamError("chunk_size", "expected 16, 32 or 64, got " + std::to_string(BT));
  return BT;
}

int64_t value_heads_of(const CaseParams& p) {
  const int64_t H = p.integer("num_heads"), HV = p.integer("num_v_heads") == 0 ? H : p.integer("num_v_heads");
  if (HV % H != 0) {
    throw ParamError("num_v_heads", "num_v_heads " + std::to_string(HV) + " is not a multiple of num_heads " + std::to_string(H));
  }
  return HV;
}

}  // namespace fuseops::cli
