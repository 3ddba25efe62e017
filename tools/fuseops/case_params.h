// Cases made from parameters: each op family describes, per op, the parameters a case file (docs/cases.md) or a
// model layer (`fuseops model`) may give, and a hook that makes one OpCase from one set of values. The case-file
// reader checks names, kinds, ranges and choices against these descriptions, fills in defaults and expands lists
// and ranges into a cross product; the hook itself only rejects impossible combinations (ParamError).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "fuseops/tensor.h"

namespace fuseops::cli {

class OpCase;

/// The kind of one parameter's value.
enum class ParamKind {
  integer,   ///< `d: 14336`; alternatives as a list `[1, 64]` or a range `{from: 1, to: 8192, mul: 2}`
  text,      ///< one of `choices`, e.g. `dtype: bf16`
  boolean,   ///< `is_neox: true`
  int_list,  ///< one value is a list, `seqlens: [1, 63, 64]`; alternatives are a list of lists
  number,    ///< a real number, `routed_scaling_factor: 2.5`; alternatives as a list
};

using ParamValue = std::variant<int64_t, std::string, bool, std::vector<int64_t>, double>;

/// One parameter of an op.
struct ParamSpec {
  std::string name;
  ParamKind kind = ParamKind::integer;
  std::string help;
  std::optional<ParamValue> default_value;  ///< none: the parameter is required
  std::vector<std::string> choices;         ///< text: the allowed values
  int64_t min = 0;                          ///< integer and int_list elements: the allowed range
  int64_t max = INT64_MAX;
};

/// An impossible combination found by a hook: `key` is the parameter to blame (the case-file reader adds the file,
/// line and column of that key).
class ParamError : public std::runtime_error {
 public:
  ParamError(std::string key, const std::string& message) : std::runtime_error(message), key_(std::move(key)) {}
  const std::string& key() const { return key_; }

 private:
  std::string key_;
};

/// One point of the cross product: every parameter of the op has a value (given or default).
class CaseParams {
 public:
  void set(const std::string& name, ParamValue v) { values_[name] = std::move(v); }
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  /// Whether `name` was given (a case file's key or a caller's value), not taken from the op's defaults.
  bool given(const std::string& name) const { return given_.count(name) > 0; }
  void mark_given(const std::string& name) { given_.insert(name); }
  int64_t integer(const std::string& name) const { return get<int64_t>(name); }
  const std::string& text(const std::string& name) const { return get<std::string>(name); }
  bool boolean(const std::string& name) const { return get<bool>(name); }
  const std::vector<int64_t>& int_list(const std::string& name) const { return get<std::vector<int64_t>>(name); }
  double number(const std::string& name) const { return get<double>(name); }
  /// A number the op takes in fp32: ParamError unless it is finite there and, if nonzero, does not round to 0 (the
  /// ops' own rule for such scalars, so a bad value is a case-file error rather than a failed case).
  double fp32_number(const std::string& name) const;
  /// fp32_number() of a scale that multiplies the case's outputs (`what`): also ParamError where it is nonzero and
  /// below 2^-126 in magnitude. The op takes it, but the scaled outputs would be subnormal, below the golden check's
  /// absolute floor, which could not tell a wrong one (a check of such a case would pass whatever it computed).
  double checkable_scale(const std::string& name, const char* what) const;
  const std::map<std::string, ParamValue>& values() const { return values_; }
  /// "d=14336 dtype=bf16 tokens=4096": for messages.
  std::string describe() const;

 private:
  template <typename T>
  const T& get(const std::string& name) const {
    const auto it = values_.find(name);
    if (it == values_.end() || !std::holds_alternative<T>(it->second)) {
      throw ParamError(name, "parameter \"" + name + "\" is missing or of the wrong kind");
    }
    return std::get<T>(it->second);
  }
  std::map<std::string, ParamValue> values_;
  std::set<std::string> given_;
};

/// An op that can be made from parameters: the per-family hook, registered with Registry::add_op from the
/// family's register_<family>_cases().
struct OpSpec {
  std::string family;                ///< "activation"
  std::string name;                  ///< the public op name, "silu_and_mul"
  std::vector<std::string> aliases;  ///< other names it answers to, e.g. the OpCase::op of its built-in cases
  /// Values an alias implies (`layer_norm`: is_rms_norm false): set where the entry does not give the parameter, an
  /// error where it gives another value (`op: layer_norm` with `is_rms_norm: true` ran an RMSNorm).
  std::map<std::string, std::map<std::string, ParamValue>> alias_defaults;
  /// Aliases that tell its rows apart, each with the start of the names its rows print (layer_norm_fwd: rms_norm ->
  /// "rms_norm", layer_norm -> "layer_norm", rms_norm_gated -> "rms_norm,gate"): --filter by one of them selects the
  /// rows whose printed name starts so, not every row of the op.
  std::map<std::string, std::string> row_names;
  std::string help;
  std::vector<ParamSpec> params;
  std::function<std::unique_ptr<OpCase>(const CaseParams&)> make;  ///< throws ParamError for an impossible combination

  const ParamSpec* param(const std::string& n) const;
  bool answers_to(const std::string& n) const;
  /// The defaults plus `given` (names checked: an unknown one throws ParamError naming it); `as`: the name the op was
  /// called by (an alias's defaults come before the op's; a given value that contradicts one throws ParamError naming
  /// the parameter and the alias).
  CaseParams with_defaults(const std::map<std::string, ParamValue>& given, const std::string& as = "") const;
};

/// Parameter descriptions for the families' hooks. `def` none: required.
ParamSpec integer_param(const std::string& name, const std::string& help, std::optional<int64_t> def = std::nullopt,
                        int64_t min = 1, int64_t max = INT64_MAX);
ParamSpec text_param(const std::string& name, const std::string& help, const std::string& def,
                     std::vector<std::string> choices);
ParamSpec dtype_param(const std::string& default_dtype = "bf16", std::vector<std::string> choices = {"f32", "f16", "bf16"});
ParamSpec bool_param(const std::string& name, const std::string& help, bool def);
std::string value_text(const ParamValue& v);
/// The product of `factors` (parameter name, value >= 0), checked against 2^`limit_log2` elements (sizes of the
/// problem's buffers): ParamError naming a factor that is above the limit by itself, else naming the first factor
/// (the rows) when the product is. Never overflows.
int64_t bounded_product(const std::vector<std::pair<std::string, int64_t>>& factors, int limit_log2 = 40);
/// "bf16" -> DType::bf16; ParamError naming `key` for anything else.
DType dtype_from_name(const std::string& key, const std::string& name);

/// The sequence parameters of the GDN ops: batch and seq_len (fixed length, B sequences of T tokens) or seqlens
/// (varlen: batch 1, sequence lengths whose prefix sums are cu_seqlens).
struct Sequences {
  int64_t batch = 1, seq_len = 0;
  std::vector<int64_t> seqlens;  ///< empty: fixed length
  int64_t tokens() const;        ///< B x T, or the sum of seqlens
};
std::vector<ParamSpec> sequence_params();
/// The sequences `seqlens` cut to at most `rows` tokens in all (reduced CPU runs of varlen cases), keeping their
/// structure: every sequence stays, empty ones empty, each other one at least 1 token and at most its length, the
/// budget shared in order (an equal share first, then what is left); with fewer rows than non-empty sequences, the
/// first `rows` of them (1 token each) and the empty ones among them.
std::vector<int64_t> seqlens_reduced(const std::vector<int64_t>& seqlens, int64_t rows);
/// The sequences `seqlens` cut for a reduced CPU run that still crosses chunks in one sequence: where they hold more
/// than max(rows, 2 span) tokens, the first non-empty one keeps min(its length, span) and the others share the rest
/// (seqlens_reduced); else unchanged.
std::vector<int64_t> seqlens_reduced_first(const std::vector<int64_t>& seqlens, int64_t rows, int64_t span);
/// A case spec with fields B, T, seqlens and varlen() cut to at most `rows` tokens (reduced CPU runs): fixed length
/// keeps rows / B tokens per batch row, varlen the seqlens_reduced.
template <class Spec>
Spec reduced_tokens(const Spec& s, int64_t rows) {
  if (rows >= s.B * s.T) return s;
  Spec r = s;
  if (!s.varlen()) {
    r.T = std::max<int64_t>(1, rows / s.B);
    return r;
  }
  r.seqlens = seqlens_reduced(s.seqlens, rows);
  r.T = std::accumulate(r.seqlens.begin(), r.seqlens.end(), int64_t{0});
  return r;
}
/// Checks them (ParamError naming seq_len, seqlens or batch: no tokens, both given, varlen with batch > 1, sizes).
Sequences sequences_of(const CaseParams& p);
/// The chunk_size parameter of the GDN ops (default 64) and its value: 16, 32 or 64 (ParamError naming chunk_size).
ParamSpec chunk_size_param();
int64_t chunk_size_of(const CaseParams& p);
/// num_v_heads (0: num_heads), a multiple of num_heads (ParamError naming num_v_heads).
int64_t value_heads_of(const CaseParams& p);

}  // namespace fuseops::cli
