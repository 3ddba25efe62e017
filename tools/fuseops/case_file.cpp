#include "case_file.h"

#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "commands.h"
#include "paths.h"

namespace fuseops::cli {
namespace {

/// "path:line:col" of a node (yaml-cpp marks are 0-based; the null mark of an empty document is -1: line 1), the path
/// escaped (escaped_text: a file named e<ESC>[31mX.yaml put a raw escape on the terminal).
std::string at(const std::string& path, const YAML::Mark& m) {
  return place_text(path, TextPlace{std::max(m.line, 0), std::max(m.column, 0)});
}

std::string scalar_text(const YAML::Node& n);

/// The keys of a mapping in order; a key written twice is an error at its second place (yaml-cpp keeps both), and so
/// is a key that is no text (`~:`, `? [a]`; it had printed as key "").
std::vector<std::pair<std::string, YAML::Mark>> keys_of(const std::string& path, const YAML::Node& map) {
  std::vector<std::pair<std::string, YAML::Mark>> keys;
  for (const auto& kv : map) {
    if (!kv.first.IsScalar()) {
      const std::string got = kv.first.IsNull() ? std::string("a null key") : scalar_text(kv.first);
      throw Error(ErrorKind::invalid_argument, at(path, kv.first.Mark()) + ": expected a key of text, got " + got);
    }
    const std::string key = kv.first.Scalar();
    for (const auto& [k, m] : keys) {
      if (k == key) {
        throw Error(ErrorKind::invalid_argument, at(path, kv.first.Mark()) + ": key \"" + escaped_text(key) +
                                                     "\": duplicate key (first at " + at(path, m) + ")");
      }
    }
    keys.emplace_back(key, kv.first.Mark());
  }
  return keys;
}

[[noreturn]] void fail(const std::string& path, const YAML::Mark& m, const std::string& key, const std::string& msg) {
  throw Error(ErrorKind::invalid_argument, at(path, m) + ": key \"" + escaped_text(key) + "\": " + msg);
}

/// A scalar written as a string ("64", '64', !!str 64): not a number or a boolean even when it reads as one.
/// A tag as the file writes it: YAML's standard tags in their short form (!!float for tag:yaml.org,2002:float).
std::string shown_tag(const std::string& tag) {
  const std::string standard = "tag:yaml.org,2002:";
  return tag.rfind(standard, 0) == 0 ? "!!" + tag.substr(standard.size()) : tag;
}

bool quoted(const YAML::Node& n) { return n.IsScalar() && (n.Tag() == "!" || n.Tag() == "tag:yaml.org,2002:str"); }

std::string scalar_text(const YAML::Node& n) {
  if (quoted(n)) return "the quoted string \"" + escaped_text(n.Scalar()) + "\"";
  if (n.IsScalar()) return "\"" + escaped_text(n.Scalar()) + "\"";
  if (n.IsSequence()) return n.size() == 0 ? "an empty list" : "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

/// Where an error about a key's value points: the value, or the key where the value is empty (`name:` and nothing
/// after it: yaml-cpp marks the null at the next token, often the next line or past the file's end).
YAML::Mark value_mark(const YAML::Node& key, const YAML::Node& value) {
  return value.IsNull() ? key.Mark() : value.Mark();
}

class EntryReader {
 public:
  EntryReader(const std::string& path, const std::string& key, const ParamSpec& spec)
      : path_(path), key_(key), spec_(spec) {}

  /// The alternatives a value node gives for the parameter.
  std::vector<ParamValue> alternatives(const YAML::Node& n) const {
    std::vector<ParamValue> out;
    switch (spec_.kind) {
      case ParamKind::integer:
        if (n.IsMap()) return range(n);
        if (n.IsSequence()) {
          if (n.size() == 0) fail(path_, n.Mark(), key_, "an empty list gives no case");
          for (const YAML::Node& e : n) out.push_back(integer(e));
          return out;
        }
        return {integer(n)};
      case ParamKind::text:
      case ParamKind::boolean:
      case ParamKind::number:
        if (n.IsSequence()) {
          if (n.size() == 0) fail(path_, n.Mark(), key_, "an empty list gives no case");
          for (const YAML::Node& e : n) out.push_back(single(e));
          return out;
        }
        return {single(n)};
      case ParamKind::int_list:
        if (!n.IsSequence()) fail(path_, n.Mark(), key_, "expected a list of integers, got " + scalar_text(n));
        if (n.size() > 0 && n[0].IsSequence()) {
          for (const YAML::Node& e : n) out.push_back(int_list(e));
          return out;
        }
        return {int_list(n)};
    }
    return out;
  }

 private:
  /// integer_of under the parameter's key, within the parameter's range.
  int64_t integer(const YAML::Node& n) const { return within_bounds(integer_of(n, key_), n.Mark()); }

  /// v itself when the parameter takes it, else an error at `mark` ("value V outside [min, max] (help)").
  int64_t within_bounds(int64_t v, const YAML::Mark& mark, const std::string& what = "value") const {
    if (v < spec_.min || v > spec_.max) {
      const std::string range =
          "[" + std::to_string(spec_.min) + ", " + (spec_.max == INT64_MAX ? "inf" : std::to_string(spec_.max)) + "]";
      fail(path_, mark, key_, what + " " + std::to_string(v) + " outside " + range + " (" + spec_.help + ")");
    }
    return v;
  }

  // Decimal digits with an optional sign, leading zeros decimal (010 is 10), as the seeds are read: not YAML's
  // 0x / 0o forms, nor a C-style octal 010. Errors name `key`.
  int64_t integer_of(const YAML::Node& n, const std::string& key) const {
    // an explicit tag other than !!int (e.g. !!float 64) says the value is not meant as an integer
    if (n.IsScalar() && !quoted(n) && n.Tag() != "?" && n.Tag() != "tag:yaml.org,2002:int") {
      fail(path_, n.Mark(), key, "expected an integer, got " + scalar_text(n) + " tagged " + shown_tag(n.Tag()));
    }
    const std::string t = n.IsScalar() && !quoted(n) ? n.Scalar() : "";
    const std::size_t digits = !t.empty() && (t[0] == '-' || t[0] == '+') ? 1 : 0;  // after the sign
    if (t.size() <= digits || t.find_first_not_of("0123456789", digits) != std::string::npos) {
      const bool numeric = t.size() > digits && std::isdigit(static_cast<unsigned char>(t[digits]));
      fail(path_, n.Mark(), key,
           "expected an integer, got " + scalar_text(n) + (numeric ? " (decimal digits only)" : ""));
    }
    int64_t v = 0;
    if (std::from_chars(t.data() + (t[0] == '+' ? 1 : 0), t.data() + t.size(), v).ec != std::errc()) {  // range
      fail(path_, n.Mark(), key, "integer " + t + " does not fit in 64 bits");
    }
    return v;
  }

  /// Whether a decimal number's text is past the double range (1e400: strtod reads it whole, as out of range).
  static bool beyond_double(const std::string& t) {
    if (t.empty() || t.find_first_not_of("0123456789+-.eE") != std::string::npos) return false;
    errno = 0;
    char* end = nullptr;
    std::strtod(t.c_str(), &end);
    return end == t.c_str() + t.size() && errno == ERANGE;
  }

  /// Whether a number's text has a nonzero digit before its exponent ("1e-400", "0.5"; not "0", "-0.0e5", ".nan").
  static bool nonzero_mantissa(const std::string& t) {
    for (const char c : t) {
      if (c == 'e' || c == 'E') return false;
      if (c >= '1' && c <= '9') return true;
    }
    return false;
  }

  ParamValue single(const YAML::Node& n) const {
    if (spec_.kind == ParamKind::number) {
      double d = 0;
      if (!n.IsScalar() || quoted(n) || !YAML::convert<double>::decode(n, d)) {
        fail(path_, n.Mark(), key_,
             std::string(n.IsScalar() && !quoted(n) && beyond_double(n.Scalar()) ? "expected a number in the double range"
                                                                                  : "expected a number") +
                 ", got " + scalar_text(n));
      }
      // a nonzero literal read as 0 (1e-400: below the smallest double) is refused, as 1e400 is above
      if (d == 0 && nonzero_mantissa(n.Scalar())) {
        fail(path_, n.Mark(), key_,
             "expected a number in the double range, got " + scalar_text(n) + " (nonzero, but it reads as 0)");
      }
      return d;
    }
    if (spec_.kind == ParamKind::boolean) {
      // true / false only (yaml-cpp's decoder also takes yes, no, on, off, y, n in any case)
      if (!n.IsScalar() || quoted(n) || (n.Scalar() != "true" && n.Scalar() != "false")) {
        fail(path_, n.Mark(), key_, "expected true or false, got " + scalar_text(n));
      }
      return n.Scalar() == "true";
    }
    if (!n.IsScalar()) fail(path_, n.Mark(), key_, "expected a word, got " + scalar_text(n));
    const std::string s = n.Scalar();
    if (!spec_.choices.empty()) {
      std::string known;
      for (const std::string& c : spec_.choices) {
        if (c == s) return s;
        known += (known.empty() ? "" : ", ") + c;
      }
      fail(path_, n.Mark(), key_, "\"" + escaped_text(s) + "\" is not one of " + known);
    }
    return s;
  }

  std::vector<int64_t> int_list(const YAML::Node& n) const {
    if (!n.IsSequence()) fail(path_, n.Mark(), key_, "expected a list of integers, got " + scalar_text(n));
    std::vector<int64_t> v;
    for (const YAML::Node& e : n) v.push_back(integer(e));
    return v;
  }

  /// {from: A, to: B, step: S} or {from: A, to: B, mul: M}: A, A+S, ... <= B or A, A*M, ... <= B; neither: step 1.
  /// A and every value reached must be ones the parameter takes; B need not be (it is only the bound).
  std::vector<ParamValue> range(const YAML::Node& n) const {
    const YAML::Node from = n["from"], to = n["to"], step = n["step"], mul = n["mul"];  // undefined when absent
    for (const auto& [k, mark] : keys_of(path_, n)) {
      if (k != "from" && k != "to" && k != "step" && k != "mul") {
        fail(path_, mark, key_ + "." + k, "unknown range key (known: from, to, step, mul)");
      }
    }
    if (!from.IsDefined() || !to.IsDefined()) fail(path_, n.Mark(), key_, "a range needs from and to");
    if (step.IsDefined() && mul.IsDefined()) fail(path_, n.Mark(), key_, "a range takes step or mul, not both");
    // to is a bound, not a value: only the values the range reaches must be ones the parameter takes
    const int64_t a = integer(from), b = integer_of(to, key_ + ".to");
    if (a > b) fail(path_, to.Mark(), key_ + ".to", "to (" + std::to_string(b) + ") is below from (" + std::to_string(a) + ")");
    // step and mul read as every integer of the file (integer_of: decimal only, 010 is 10)
    int64_t s = 1, m = 0;
    if (step.IsDefined() && (s = integer_of(step, key_ + ".step")) < 1) {
      fail(path_, step.Mark(), key_ + ".step", "expected an integer >= 1, got " + scalar_text(step));
    }
    if (mul.IsDefined() && (m = integer_of(mul, key_ + ".mul")) < 2) {
      fail(path_, mul.Mark(), key_ + ".mul", "expected an integer >= 2, got " + scalar_text(mul));
    }
    if (m >= 2 && a < 1) fail(path_, from.Mark(), key_ + ".from", "a multiplicative range starts at 1 or more");
    std::vector<ParamValue> out;
    for (int64_t v = a; v <= b;) {
      out.push_back(within_bounds(v, to.Mark(), "the range reaches"));
      if (out.size() > kMaxCasesPerFile) fail(path_, n.Mark(), key_, "the range has more than " + std::to_string(kMaxCasesPerFile) + " values");
      // the next value; one past INT64_MAX is past b too (b - s, the old bound, overflowed for b near INT64_MIN)
      if (m >= 2 ? __builtin_mul_overflow(v, m, &v) : __builtin_add_overflow(v, s, &v)) break;
    }
    return out;
  }

  const std::string& path_;
  std::string key_;
  const ParamSpec& spec_;
};

void read_entry(const std::string& path, const YAML::Node& entry, const Registry& reg, CaseFile& file) {
  if (!entry.IsMap()) fail(path, entry.Mark(), "cases", "each case entry is a mapping with an op, got " + scalar_text(entry));
  keys_of(path, entry);  // no key twice
  if (entry["<<"].IsDefined()) {  // yaml-cpp does not merge: the entry would lack the merged keys
    fail(path, entry.Mark(), "<<", "YAML merge keys (<<) are not supported: write the entry's keys out");
  }
  const YAML::Node op_node = entry["op"];
  if (!op_node.IsDefined()) fail(path, entry.Mark(), "op", "missing: each entry names its op");
  if (!op_node.IsScalar()) {
    YAML::Mark mark = op_node.Mark();
    for (const auto& kv : entry) {
      if (kv.first.IsScalar() && kv.first.Scalar() == "op") mark = value_mark(kv.first, kv.second);
    }
    fail(path, mark, "op", "expected an op name, got " + scalar_text(op_node));
  }
  const OpSpec* op = reg.find_op(op_node.Scalar());
  if (!op) {
    std::string known;
    for (const OpSpec& o : reg.ops()) known += (known.empty() ? "" : ", ") + o.name;
    fail(path, op_node.Mark(), "op", "unknown op \"" + escaped_text(op_node.Scalar()) + "\" (known: " + known + ")");
  }
  std::vector<std::pair<std::string, std::vector<ParamValue>>> axes;
  std::map<std::string, YAML::Mark> marks;
  for (const auto& kv : entry) {
    const std::string key = kv.first.Scalar();
    if (key == "op") continue;
    const ParamSpec* p = op->param(key);
    if (!p) {
      std::string known;
      for (const ParamSpec& q : op->params) known += (known.empty() ? "" : ", ") + q.name;
      fail(path, kv.first.Mark(), key, "unknown key for op " + op->name + " (known: " + known + ")");
    }
    marks[key] = kv.first.Mark();
    // an empty value (`seq_len:` and nothing after it), reported at its key (value_mark)
    if (kv.second.IsNull()) fail(path, kv.first.Mark(), key, "no value given (" + p->help + ")");
    axes.emplace_back(key, EntryReader(path, key, *p).alternatives(kv.second));
  }
  for (const ParamSpec& p : op->params) {
    if (!p.default_value && !marks.count(p.name)) fail(path, entry.Mark(), p.name, "required by op " + op->name + " (" + p.help + ")");
  }
  std::size_t total = 1;
  for (const auto& a : axes) {
    total *= a.second.size();
    if (total + file.points.size() > kMaxCasesPerFile) {
      fail(path, marks[a.first], a.first, "the file expands to more than " + std::to_string(kMaxCasesPerFile) + " cases");
    }
  }
  std::vector<std::size_t> idx(axes.size(), 0);
  for (std::size_t n = 0; n < total; ++n) {
    std::map<std::string, ParamValue> given;
    for (std::size_t a = 0; a < axes.size(); ++a) given[axes[a].first] = axes[a].second[idx[a]];
    CaseParams params;
    try {
      params = op->with_defaults(given, op_node.Scalar());
    } catch (const ParamError& e) {  // a value that contradicts the alias the entry names its op by
      fail(path, marks.count(e.key()) ? marks[e.key()] : op_node.Mark(), e.key(), e.what());
    }
    try {
      op->make(params);  // the hook rejects impossible combinations here, before anything runs
    } catch (const ParamError& e) {
      const auto m = marks.find(e.key());
      fail(path, m != marks.end() ? m->second : entry.Mark(), e.key(),
           std::string(e.what()) + " (op " + op->name + ", " + params.describe() + ")");
    } catch (const Error& e) {
      fail(path, entry.Mark(), "op", std::string(e.what()) + " (op " + op->name + ", " + params.describe() + ")");
    }
    file.points.push_back({op, std::move(params), at(path, entry.Mark())});
    for (std::size_t a = axes.size(); a-- > 0;) {  // odometer: the last key written varies fastest
      if (++idx[a] < axes[a].second.size()) break;
      idx[a] = 0;
    }
  }
}

std::string stem(const std::string& path) {
  std::string s = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  const std::size_t dot = s.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? s : s.substr(0, dot);
}

}  // namespace

std::vector<std::unique_ptr<OpCase>> CaseFile::make_cases() const {
  std::vector<std::unique_ptr<OpCase>> out;
  for (const Point& p : points) out.push_back(p.op->make(p.params));
  return out;
}

CaseSet CaseFile::as_set() const {
  // The points are copied into the factory so the set outlives this object.
  auto copy = std::make_shared<CaseFile>(*this);
  return CaseSet{name, description.empty() ? "cases from " + path : description, true, {[copy] { return copy->make_cases(); }}};
}

namespace {

/// A yaml-cpp mark at a place of the text (the checks made before yaml-cpp reads it).
YAML::Mark mark_of(TextPlace p) {
  YAML::Mark m;
  m.line = p.line;
  m.column = p.column;
  return m;
}

/// The one document of the file: a second one (after `---`) with content is an error at its start, not ignored, and
/// so is more than one empty document after it (one trailing `---` is allowed).
YAML::Node single_document(const std::string& text, const std::string& path) {
  std::vector<YAML::Node> docs;
  // a NUL byte: yaml-cpp says "unknown escape character"
  check_no_nul_byte(text, "YAML", [&](TextPlace p) { return place_text(path, p) + ": key \"cases\": "; });
  // a carriage return without a line feed (a CRLF file whose last line lost its LF, or CR-only line endings): yaml-cpp
  // keeps it in the scalar before it ("8\r") or reports another syntax error
  for (std::size_t i = text.find('\r'); i != std::string::npos; i = text.find('\r', i + 1)) {
    if (i + 1 < text.size() && text[i + 1] == '\n') continue;
    fail(path, mark_of(place_in_text(text, i)), "cases",
         "a carriage return (CR) without a line feed: save the file with LF or CRLF line endings");
  }
  try {
    docs = YAML::LoadAll(text);
  } catch (const YAML::DeepRecursion& e) {  // its message is yaml-cpp's "bad file"
    throw Error(ErrorKind::invalid_argument, at(path, e.mark) + ": YAML nesting too deep (the reader stops at depth " +
                                                 std::to_string(e.depth()) + ")");
  } catch (const YAML::ParserException& e) {
    throw Error(ErrorKind::invalid_argument, at(path, e.mark) + ": YAML syntax: " + e.msg);
  }
  // the first document is the case file; after it one empty document at most (a final ---). A second document with
  // content is an error at its first line (also after an empty first one: the file's cases are then the second), and
  // so is a second empty one, at its --- (yaml-cpp marks an empty document at the next token: the --- that ends it)
  for (std::size_t k = 1; k < docs.size(); ++k) {
    if (!docs[k].IsNull()) {
      fail(path, docs[k].Mark(), "cases", "a second YAML document (after ---): a case file is one document; put every "
                                          "entry under one cases: list");
    }
    if (k >= 2) {
      fail(path, docs[k - 1].Mark(), "cases",
           "a second --- after the document: a case file is one document, ended by one --- at most");
    }
  }
  return docs.empty() ? YAML::Node() : docs[0];
}

/// A set name (`name:`): the set column of every table, so one non-empty line of UTF-8 text (one_line_fault, as
/// --note: no control character, C1 included, nor a line or paragraph separator; yaml-cpp writes "\N" as a raw 0x85
/// byte, which only the UTF-8 check sees) without '|' (a Markdown column separator).
void check_name(const std::string& path, const YAML::Mark& mark, const std::string& name) {
  if (name.empty()) fail(path, mark, "name", "expected a non-empty name");
  if (one_line_fault(name).empty() && name.find('|') == std::string::npos) return;
  fail(path, mark, "name",
       "expected a name of one line of UTF-8 text without control characters or '|' (it is a column of the tables), "
       "got \"" + escaped_text(name) + "\"");
}

CaseFile parse_document(const YAML::Node& root, const std::string& path, const Registry& reg) {
  CaseFile file;
  file.path = path;
  // the default name: the file's stem, one line of UTF-8 text as a name: is (a control character, a line or paragraph
  // separator, a byte that is not UTF-8 replaced by U+FFFD; `bench --cases $'x\u2028y.yaml'` wrote U+2028 raw into the
  // Markdown); a '|' stays (md_cell escapes it)
  file.name = printable_text(stem(path), true);
  if (!root.IsDefined() || root.IsNull()) {
    fail(path, YAML::Mark::null_mark(), "cases", "the file is empty: expected a mapping with a list under cases:");
  }
  if (!root.IsMap()) fail(path, root.Mark(), "cases", "expected a mapping with a list under cases:, got " + scalar_text(root));
  keys_of(path, root);  // no top-level key twice
  YAML::Node cases;
  YAML::Mark cases_mark;
  bool has_cases = false;
  for (const auto& kv : root) {
    const std::string key = kv.first.Scalar();
    if (key == "name" || key == "description") {
      if (!kv.second.IsScalar()) {
        fail(path, value_mark(kv.first, kv.second), key, "expected text, got " + scalar_text(kv.second));
      }
      (key == "name" ? file.name : file.description) = kv.second.Scalar();
      if (key == "name") check_name(path, kv.second.Mark(), file.name);
    } else if (key == "cases") {
      cases = kv.second;
      cases_mark = value_mark(kv.first, kv.second);
      has_cases = true;
    } else {
      fail(path, kv.first.Mark(), key, "unknown top-level key (known: name, description, cases)");
    }
  }
  if (!has_cases) fail(path, root.Mark(), "cases", "missing: the list of case entries");
  if (!cases.IsSequence() || cases.size() == 0) {
    fail(path, cases_mark, "cases", "expected a non-empty list of entries, got " + scalar_text(cases));
  }
  std::size_t index = 0;
  for (const YAML::Node& entry : cases) {
    ++index;
    // an empty item (`-` and nothing after it) has no position of its own: the list's start and the item's number
    if (entry.IsNull()) {
      fail(path, cases_mark, "cases",
           "entry " + std::to_string(index) + " of the list is empty (a '-' with nothing after it)");
    }
    read_entry(path, entry, reg, file);
  }
  return file;
}

}  // namespace

CaseFile parse_case_text(const std::string& text, const std::string& path, const Registry& reg) {
  try {
    return parse_document(single_document(text, path), path, reg);
  } catch (const YAML::Exception& e) {  // a yaml-cpp error no check above foresaw: still with the file and place
    throw Error(ErrorKind::invalid_argument, at(path, e.mark) + ": YAML: " + e.msg);
  }
}

CaseFile read_case_file(const std::string& path, const Registry& reg) {
  // at most 16 MiB (read_input_file): /dev/zero or a runaway pipe is an error, not an endless read
  return parse_case_text(read_input_file("--cases", path, "a case file is a short list"), path, reg);
}

}  // namespace fuseops::cli
