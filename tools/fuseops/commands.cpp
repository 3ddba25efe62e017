#include "commands.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <new>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "case_file.h"
#include "cases.h"
#include "chart.h"
#include "fuseops/error.h"
#include "fuseops/version.h"
#include "gpu.h"
#include "paths.h"
#include "progress.h"
#include "testing/host_tensor.h"

namespace fuseops::cli {
namespace {

/// The sets to run: the named ones (error for an unknown name), else every set (check) or the real-model ones.
std::vector<const CaseSet*> select_sets(const std::vector<std::string>& names, bool real_model_only) {
  std::vector<const CaseSet*> out;
  for (const std::string& n : names) {
    const CaseSet* s = registry().find(n);
    bool seen = false;
    for (const CaseSet* o : out) seen = seen || (s && o == s);
    if (seen) continue;
    if (!s) {
      std::string known;
      for (const CaseSet& k : registry().sets()) known += (known.empty() ? "" : ", ") + k.name;
      throw Error(ErrorKind::invalid_argument, "--set: unknown case set \"" + escaped_text(n) + "\" (known: " + known + ")");
    }
    out.push_back(s);
  }
  if (out.empty()) {
    for (const CaseSet& s : registry().sets()) {
      if (!real_model_only || s.real_model) out.push_back(&s);
    }
  }
  return out;
}

/// A newline in --note would add lines (table rows) to the Markdown: one line of printable UTF-8 text only
/// (one_line_fault, as a case file's name).
void check_one_line(const char* option, const std::string& text) {
  const std::string fault = one_line_fault(text);
  if (!fault.empty()) throw Error(ErrorKind::invalid_argument, std::string(option) + ": " + fault);
}

/// The --cases files, as inputs that no output may overwrite.
std::vector<FileArg> case_file_args(const Options& opts) {
  std::vector<FileArg> out;
  for (const std::string& path : opts.cases) out.push_back({"--cases", path});
  return out;
}

void write_json(const std::string& path, const nlohmann::json& j) {
  if (path.empty()) return;
  // serialised before the file is opened, and bytes that are not UTF-8 (a case file's name or path) replaced by
  // U+FFFD: a run's results are never lost to a failed write, nor an earlier file truncated
  write_text_file("--json", path, json_text(j) + "\n");
}

std::string today() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&t));
  return buf;
}

/// One case to run, with the name of the set (or case file) it came from.
struct Work {
  std::string set;
  std::unique_ptr<OpCase> c;
  std::string label() const { return c->op + " " + c->shape + " " + dtype_name(c->dtype); }
};

/// Widths of the set, op and shape columns of a console table: the given minimum widened to every cell of `work`
/// (widen_column), so that a run's rows line up whatever its shapes print.
struct NameColumns {
  int set, op, shape;
};
NameColumns name_columns(const std::vector<Work>& work, int set, int op, int shape) {
  NameColumns w{set, op, shape};
  for (const Work& x : work) {
    w.set = widen_column(w.set, printable_text(x.set));
    w.op = widen_column(w.op, x.c->op);
    w.shape = widen_column(w.shape, x.c->shape);
  }
  return w;
}

/// naming_the_case (commands.h) for a case of a run.
template <typename F>
auto naming_the_case(const Work& w, F&& f) {
  return cli::naming_the_case(w.set + " " + w.label(), std::forward<F>(f));
}

/// The cases of the selected sets and case files (only the files when --cases is given without --set), filtered.
std::vector<Work> collect(const Options& opts, bool real_model_only) {
  std::vector<const CaseSet*> sets;
  if (!opts.sets.empty() || opts.cases.empty()) sets = select_sets(opts.sets, real_model_only);
  std::vector<CaseSet> files;
  std::vector<std::string> read;  // a file given twice runs once (as a set named twice)
  for (const std::string& path : opts.cases) {
    std::error_code ec;
    const bool again = std::any_of(read.begin(), read.end(), [&](const std::string& r) {
      return std::filesystem::equivalent(r, path, ec);
    });
    if (again) continue;
    read.push_back(path);
    files.push_back(read_case_file(path, registry()).as_set());
  }
  for (const CaseSet& f : files) sets.push_back(&f);
  std::vector<Work> work;
  for (const CaseSet* set : sets) {
    for (const CaseFactory& factory : set->factories) {
      for (auto& c : factory()) {
        if (selected(*c, opts, registry())) work.push_back({set->name, std::move(c)});
      }
    }
  }
  return work;
}

/// The distinct values of `field` over the cases the options select, as "a, b, ... (N more)" (at most 12 shown).
std::string listed(const Options& opts, bool real_model_only, std::string OpCase::*field) {
  std::vector<std::string> seen;
  for (const Work& w : collect(opts, real_model_only)) {
    const std::string& v = (*w.c).*field;
    if (std::find(seen.begin(), seen.end(), v) == seen.end()) seen.push_back(v);
  }
  std::string list;
  const std::size_t shown = std::min<std::size_t>(seen.size(), 12);
  for (std::size_t i = 0; i < shown; ++i) list += (i ? ", " : "") + seen[i];
  if (seen.size() > shown) list += ", ... (" + std::to_string(seen.size() - shown) + " more)";
  return list;
}

/// The answer of check and bench when no case is selected: the error, exit status 2 (nothing run, printed or written).
/// When --shape alone rejected every case, it lists the shapes the other selectors kept (the printed forms to copy);
/// when --filter did, the ops of the cases the other selectors kept.
int no_case_matched(const Options& opts, bool real_model_only) {
  struct Selector {
    std::string Options::*option;
    std::string OpCase::*field;
    const char* says;  // "--flag \"%s\": ...: %s"
  };
  static const Selector kSelectors[] = {
      {&Options::shape, &OpCase::shape,
       "fuseops: error: --shape \"%s\": no selected case has this shape; it takes a shape as printed, one of: %s\n"},
      {&Options::filter, &OpCase::op,
       "fuseops: error: --filter \"%s\": no selected case's op matches it; the ops of the selected cases (as printed; "
       "a whole op name, public or printed, selects that op only; other text selects the cases whose names contain "
       "it): %s\n"},
  };
  for (const Selector& s : kSelectors) {
    if ((opts.*s.option).empty()) continue;
    Options without = opts;
    (without.*s.option).clear();
    const std::string values = listed(without, real_model_only, s.field);
    if (!values.empty()) {
      std::fprintf(stderr, s.says, escaped_text(opts.*s.option).c_str(), printable_text(values).c_str());
      return 2;
    }
  }
  std::fprintf(stderr, "fuseops: error: no case matched (--set / --cases / --filter / --shape)\n");
  return 2;
}

}  // namespace

bool selected(const OpCase& c, const Options& opts, const Registry& reg) {
  const bool shape_ok = opts.shape.empty() || c.shape == opts.shape;
  if (opts.filter.empty()) return shape_ok;
  // the printed name is the op's name or alias, then the variant's marks: "rms_norm,gate", "gelu_and_mul_split(tanh)"
  const std::string base = c.op.substr(0, c.op.find_first_of(",("));
  const OpSpec* spec = reg.find_op(base);
  // a whole op name (public or printed, any alias, without variant marks) selects that op only: chunk_gated_delta_rule
  // is not chunk_gated_delta_rule_fwd_kkt_solve; a name that tells the op's rows apart (OpSpec::row_names: rms_norm,
  // rms_norm_gated) the rows whose printed name starts as it says; other text, a printed name with its marks too
  // ("mrope(interleaved)", "rms_norm,gate"), selects every case whose names contain it
  const bool marks = opts.filter.find_first_of(",(") != std::string::npos;
  if (const OpSpec* named = marks ? nullptr : reg.find_op(opts.filter)) {
    const auto row = named->row_names.find(opts.filter);
    const bool row_ok = row == named->row_names.end() || c.op.rfind(row->second, 0) == 0;
    return spec == named && row_ok && shape_ok;
  }
  auto has_filter = [&](const std::string& name) { return name.find(opts.filter) != std::string::npos; };
  return (has_filter(c.op) || (spec && has_filter(spec->name))) && shape_ok;
}

uint64_t seed_option(const std::string& text, bool given) {
  return given || !text.empty() ? testing::parse_seed("--seed", text) : testing::seed_from_env_or_clock();
}

bool use_cuda(const std::string& backend) {
  const int gpus = cuda_device_count();
  if (backend == "cuda") {
    if (!built_with_cuda()) throw Error(ErrorKind::unsupported, "--backend cuda: this build of fuseops has no CUDA backend");
    if (gpus == 0) throw Error(ErrorKind::unsupported, "--backend cuda: no CUDA device on this machine");
    return true;
  }
  if (backend == "cpu") return false;
  return gpus > 0;
}

const char* const kCpuRowsKept =
    "the chunked GDN forward keeps at least two chunks and a half, in the first sequence of a varlen case, and a "
    "fixed-length GDN intra-chunk case keeps at least two sequences";

std::string cpu_rows_promise(int64_t rows) {
  return "at most " + std::to_string(rows) + (rows == 1 ? " row" : " rows") + " per case (reduced sizes; " +
         kCpuRowsKept + "; the rows column shows what ran)";
}

int launches_for(double est_us) {
  return static_cast<int>(std::clamp(2000.0 / std::max(est_us, 0.5), 10.0, 1000.0));
}

std::map<std::string, std::vector<std::string>> op_families(const Registry& reg) {
  std::map<std::string, std::vector<std::string>> out;
  auto add = [&](const std::string& family, const std::string& op) {
    std::vector<std::string>& ops = out[family];
    if (std::find(ops.begin(), ops.end(), op) == ops.end()) ops.push_back(op);
  };
  for (const OpSpec& o : reg.ops()) add(o.family, o.name);
  for (const CaseSet& s : reg.sets()) {  // a family without hooks: the ops of its built-in cases
    for (const auto& f : s.factories) {
      for (const auto& c : f()) {
        if (std::none_of(reg.ops().begin(), reg.ops().end(), [&](const OpSpec& o) { return o.family == c->family; })) {
          add(c->family, c->op);
        }
      }
    }
  }
  return out;
}

int run_list() {
  std::printf("fuseops %s (%s)\n\nop families and the ops case files run (the API has more, e.g. the GDN stages "
              "chunk_scaled_dot_kkt_fwd, solve_tril, recompute_w_u_fwd, chunk_gated_delta_rule_fwd_h, chunk_fwd_o: "
              "include/fuseops/*.h, docs/ops/*.md; installed in <prefix>/include and <prefix>/share/doc/fuseops/docs/ops):\n",
              version(),
              built_with_cuda() ? "CPU + CUDA backends" : "CPU backend only");
  for (const auto& [family, ops] : op_families(registry())) {
    std::string names;
    for (const std::string& o : ops) names += (names.empty() ? "" : ", ") + o;
    std::printf("  %-11s %s\n", family.c_str(), names.c_str());
  }
  std::printf("\ncase sets (* = part of the default bench run; check runs all by default):\n");
  for (const CaseSet& s : registry().sets()) {
    std::size_t n = 0;
    for (const auto& f : s.factories) n += f().size();
    std::printf("  %c %-18s %3zu cases  %s\n", s.real_model ? '*' : ' ', s.name.c_str(), n, s.description.c_str());
  }
  std::printf("\nops in case files (--cases FILE, docs/cases.md) and their parameters:\n");
  std::size_t name_width = 0;  // the widest op name, so that every row's parameters start in one column
  std::vector<std::string> families;  // in order of first appearance: the ops print grouped by family
  for (const OpSpec& o : registry().ops()) {
    name_width = std::max(name_width, o.name.size());
    if (std::find(families.begin(), families.end(), o.family) == families.end()) families.push_back(o.family);
  }
  for (const std::string& family : families) {
    for (const OpSpec& o : registry().ops()) {
      if (o.family != family) continue;
      std::string params;
      for (const ParamSpec& p : o.params) {
        params += (params.empty() ? "" : ", ") + p.name + (p.default_value ? "" : "*");
      }
      std::printf("  %-11s %-*s %s\n", o.family.c_str(), static_cast<int>(name_width), o.name.c_str(), params.c_str());
    }
  }
  std::printf("  (* = required)\n");
  return 0;
}

int run_check(const Options& opts) {
  check_distinct_files(case_file_args(opts), {{"--json", opts.json}});
  check_writable("--json", opts.json, opts.json_given);
  const bool cuda = use_cuda(opts.backend);
  const uint64_t seed = seed_option(opts.seed_text, opts.seed_given);
  const std::vector<Work> work = collect(opts, false);
  if (work.empty()) return no_case_matched(opts, false);  // before the header
  std::printf("fuseops check: backend %s, seed %llu (replay with --seed %llu)\n",
              cuda ? ("cuda:0 (" + gpu::device_info(0).name + ")").c_str() : "cpu",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
  if (!cuda) {
    std::printf("%s: running on the CPU with %s\n", opts.backend == "cpu" ? "--backend cpu" : "no CUDA device",
                cpu_rows_promise(opts.cpu_rows).c_str());
  }
  const NameColumns w = name_columns(work, 16, 28, 12);
  std::printf("%s %s %s %-5s %6s %11s %11s  %-34s %s\n", pad_column("set", w.set).c_str(),
              pad_column("op", w.op).c_str(), pad_column("shape", w.shape).c_str(), "dtype", "rows", "max_abs_err",
              "rel_rms_err", "tolerance", "result");
  nlohmann::json rows = nlohmann::json::array();
  int passed = 0, failed = 0;
  Progress progress(work.size(), Progress::on_terminal(opts.quiet));
  for (std::size_t i = 0; i < work.size(); ++i) {
    const OpCase* c = work[i].c.get();
    progress.show(i, work[i].label());
    const int64_t nrows = cuda ? c->rows : std::min(c->rows, opts.cpu_rows);
    CheckOutcome o;
    try {
      o = naming_the_case(work[i], [&] { return c->check(cuda ? Device::cuda(0) : Device::cpu(), nrows, seed); });
    } catch (const Error& e) {  // the case fails (with the reason); the others still run
      o.pass = false;
      o.detail = e.what();
      o.max_abs_error = o.rel_rms_error = std::nan("");  // not measured: "-" in the table, null in the JSON
    }
    (o.pass ? passed : failed)++;
    progress.clear();
    // the rows the case ran (a case may keep more than asked: the chunked GDN forward keeps two and a half chunks)
    const int64_t ran = o.rows_checked > 0 ? o.rows_checked : nrows;
    std::printf("%s %s %s %-5s %6lld %11s %11s  %-34s %s%s%s\n",
                pad_column(printable_text(work[i].set), w.set).c_str(), pad_column(c->op, w.op).c_str(),
                pad_column(c->shape, w.shape).c_str(), dtype_name(c->dtype), static_cast<long long>(ran),
                error_cell(o.max_abs_error).c_str(), error_cell(o.rel_rms_error).c_str(), o.tolerance.c_str(),
                o.pass ? "PASS" : "FAIL",
                o.detail.empty() ? "" : "  ", printable_text(o.detail).c_str());
    std::fflush(stdout);
    rows.push_back({{"set", work[i].set}, {"family", c->family}, {"op", c->op}, {"shape", c->shape},
                    {"dtype", dtype_name(c->dtype)}, {"rows", ran}, {"backend", cuda ? "cuda" : "cpu"},
                    {"max_abs_error", o.max_abs_error}, {"rel_rms_error", o.rel_rms_error},
                    {"tolerance", o.tolerance}, {"pass", o.pass}, {"detail", o.detail}, {"seconds", o.seconds}});
  }
  progress.clear();
  // seed_text: the same digits as a string, for JSON readers that keep numbers as doubles (jq 1.6, JavaScript) and
  // would round a clock seed above 2^53 into another seed
  write_json(opts.json, {{"command", "check"}, {"version", version()}, {"seed", seed},
                         {"seed_text", std::to_string(seed)}, {"results", rows}});
  std::printf("check: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}

namespace {

struct BenchRow {
  std::string set, op, shape, dtype, baseline;
  bool decode = false;
  double bytes = 0, flops = 0, warm = 0, cold = 0, base_warm = 0, base_cold = 0;
  int cold_sets = 0;
  bool has_baseline = true;  ///< false: the case runs no baseline (run_baseline returned false); base_* unset
};

}  // namespace

std::string error_cell(double v) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3e", v);
  return buf;
}

std::size_t utf8_error_at(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    const int more = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 0;
    if (more == 0 || text.size() - i <= static_cast<std::size_t>(more)) return i;
    uint32_t cp = c & (0x3F >> more);
    for (int k = 1; k <= more; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3F);
    }
    const uint32_t least = more == 1 ? 0x80 : more == 2 ? 0x800 : 0x10000;
    if (cp < least || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += static_cast<std::size_t>(more) + 1;
  }
  return std::string::npos;
}

std::size_t control_at(const std::string& text, std::size_t at, bool line_breaks, uint32_t* code) {
  if (at >= text.size()) return 0;
  const auto byte = [&](std::size_t k) { return k < text.size() ? static_cast<unsigned char>(text[k]) : 0u; };
  uint32_t cp = 0;
  std::size_t length = 0;
  if (byte(at) < 0x20 || byte(at) == 0x7F) {
    cp = byte(at), length = 1;
  } else if (byte(at) == 0xC2 && byte(at + 1) >= 0x80 && byte(at + 1) <= 0x9F) {  // C1: U+0080 - U+009F
    cp = byte(at + 1), length = 2;
  } else if (line_breaks && byte(at) == 0xE2 && byte(at + 1) == 0x80 && (byte(at + 2) & 0xFE) == 0xA8) {
    cp = 0x2000 | (byte(at + 2) & 0x3F), length = 3;  // U+2028, U+2029 (E2 80 A8, E2 80 A9)
  }
  if (length > 0 && code) *code = cp;
  return length;
}

std::size_t line_break_at(const std::string& text, std::string* what) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    uint32_t code = 0;
    if (control_at(text, i, true, &code) == 0) continue;
    if (what) {
      char name[48];
      std::snprintf(name, sizeof name, "the %s U+%04X",
                    code == 0x2028 ? "line separator" : code == 0x2029 ? "paragraph separator" : "control character",
                    static_cast<unsigned>(code));
      *what = name;
    }
    return i;
  }
  return std::string::npos;
}

std::string one_line_fault(const std::string& text) {
  std::string what;
  const std::size_t broken = line_break_at(text, &what), at = utf8_error_at(text);
  // the text before the fault is UTF-8 (utf8_error_at stops at the first byte that is not): one column per character
  auto character = [&](std::size_t byte) {
    return " at character " + std::to_string(text_columns(text.substr(0, byte)) + 1);
  };
  if (broken != std::string::npos && (at == std::string::npos || broken < at)) {
    return "expected one line of text, got " + what + character(broken);
  }
  if (at == std::string::npos) return "";
  char code[8];
  std::snprintf(code, sizeof code, "0x%02x", static_cast<unsigned>(static_cast<unsigned char>(text[at])));
  return std::string("expected UTF-8 text, got the byte ") + code + character(at);
}

namespace {

/// `text` with each control character (control_at, with `line_breaks` also U+2028 / U+2029) and each byte that does
/// not begin a well-formed UTF-8 sequence replaced by `replace(code, byte)`: the code point, or the byte's value with
/// `byte` true. The one walk of printable_text and escaped_text.
template <typename F>
std::string replace_unprintable(const std::string& text, bool line_breaks, F&& replace) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t bad = utf8_error_at(text.substr(i));
    const std::size_t end = bad == std::string::npos ? text.size() : i + bad;
    while (i < end) {
      uint32_t code = 0;
      if (const std::size_t length = control_at(text, i, line_breaks, &code)) {
        out += replace(code, false);
        i += length;
      } else {
        out += text[i++];
      }
    }
    if (bad != std::string::npos) out += replace(static_cast<unsigned char>(text[i++]), true);  // one per byte
  }
  return out;
}

}  // namespace

std::string printable_text(const std::string& text, bool line_breaks) {
  return replace_unprintable(text, line_breaks, [](uint32_t, bool) { return std::string("\xEF\xBF\xBD"); });  // U+FFFD
}

std::string escaped_text(const std::string& text) {
  return replace_unprintable(text, true, [](uint32_t code, bool byte) {
    if (code == '\r' || code == '\t') return std::string(code == '\r' ? "\\r" : "\\t");
    char buf[8];
    std::snprintf(buf, sizeof buf, code < 0x80 || byte ? "\\x%02x" : "\\u%04x", static_cast<unsigned>(code));
    return std::string(buf);
  });
}

std::string json_text(const nlohmann::json& j) {
  return j.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int text_columns(const std::string& text) {
  int columns = 0;
  for (const char ch : text) columns += (static_cast<unsigned char>(ch) & 0xC0) != 0x80;  // not a continuation byte
  return columns;
}

int widen_column(int width, const std::string& cell) { return std::max(width, std::min(text_columns(cell), 64)); }

std::string pad_column(const std::string& text, int width, bool right) {
  const int columns = text_columns(text);
  if (columns >= width) return text;
  const std::string pad(static_cast<std::size_t>(width - columns), ' ');
  return right ? pad + text : text + pad;
}

namespace {

/// A name in a Markdown table cell: printable_text, with `|` escaped (it would end the cell).
std::string md_cell(const std::string& text) {
  std::string out;
  for (const char c : printable_text(text)) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

/// A baseline time for the tables: "%.2f", or "—" where the case has no baseline.
std::string base_cell(const BenchRow& r, double v) { return r.has_baseline ? fmt("%.2f", v) : "—"; }


void write_bench_md(const Options& opts, const gpu::DeviceInfo& info, double copy_tbps, double empty_us,
                    const std::vector<BenchRow>& rows, const std::vector<std::string>& failures) {
  std::ostringstream f;  // written at the end (write_text_file: a failed write is an error)
  f << "Device: " << info.name << " (" << info.sms << " SMs). Date: " << today() << ". fuseops " << version() << ".\n";
  if (!opts.note.empty()) f << printable_text(opts.note) << "\n";
  f << "\nCopy rate " << fmt("%.3f", copy_tbps)
    << " TB/s (1 GiB device-to-device cudaMemcpyAsync, bytes read + written); empty kernel " << fmt("%.2f", empty_us)
    << " us. Times: median per launch under CUDA-graph replay, us; warm = the same buffers every launch, cold = "
       "rotating buffer sets >= 4x L2. TB/s and x copy on the cold time; copy_us = bytes / copy rate. Baseline = the "
       "reference form the case names (column baseline; most often the op's unfused kernels), in the same binary; "
       "speedup = baseline cold / cold; — where the case has none.\n\n";
  f << "| set | op | shape | dtype | warm us | cold us | TB/s cold | copy us | x copy | baseline | baseline warm | "
       "baseline cold | speedup cold |\n";
  f << "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const BenchRow& r : rows) {  // streamed: names of any length (a fixed buffer cut long rows)
    const double copy_us = r.bytes / (copy_tbps * 1e6);
    f << "| " << md_cell(r.set) << " | " << md_cell(r.op) << " | " << md_cell(r.shape) << " | " << r.dtype << " | "
      << fmt("%.2f", r.warm) << " | "
      << fmt("%.2f", r.cold) << " | " << fmt("%.3f", r.bytes / r.cold / 1e6) << " | " << fmt("%.2f", copy_us) << " | "
      << fmt("%.2f", r.cold / copy_us) << " | "
      << (r.has_baseline && !r.baseline.empty() ? md_cell(r.baseline) : "—") << " | "
      << base_cell(r, r.base_warm) << " | " << base_cell(r, r.base_cold) << " | " << base_cell(r, r.base_cold / r.cold)
      << " |\n";
  }
  for (const std::string& failure : failures) f << "\nFAILED: " << md_cell(failure) << "\n";
  write_text_file("--md", opts.md, f.str());
}

/// Runs one bench case (`f`); where it raises an Error (out of host or device memory, a launch that fails), the case
/// is reported as FAILED with the reason, kept in `failures`, and the run goes on with the next case, as `check`
/// does.
template <typename F>
void bench_case(const Work& w, Progress& progress, std::vector<std::string>& failures, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    progress.clear();
    const std::string name = w.set + " " + w.label(), why = e.what();
    const std::string what = why.rfind(name, 0) == 0 ? why : name + ": " + why;  // named once
    std::printf("FAILED: %s\n", printable_text(what).c_str());
    std::fflush(stdout);
    failures.push_back(what);
  }
}

/// The charts of a run (--svg, --html), where any case ran: a run whose every case failed has no bar to draw (its
/// failures are in the console, JSON and Markdown, and it exits 1).
void write_bench_charts(const nlohmann::json& j, const Options& opts, const std::vector<std::string>& failures) {
  if (j["results"].empty() && !failures.empty()) {
    if (!opts.svg.empty() || !opts.html.empty()) std::printf("bench: no chart written: no case ran\n");
    return;
  }
  write_charts(j, opts.svg, opts.html);
}

/// The last line of a bench run and its exit status: 1 where a case failed.
int bench_summary(std::size_t ran, const std::vector<std::string>& failures) {
  std::printf("bench: %zu cases", ran);
  if (!failures.empty()) std::printf(", %zu FAILED", failures.size());
  std::printf("\n");
  return failures.empty() ? 0 : 1;
}

int bench_gpu(const Options& opts, const std::vector<Work>& work) {
  const gpu::DeviceInfo info = gpu::device_info(0);
  const double copy_tbps = gpu::copy_rate_tbps();
  const double empty_us = gpu::empty_kernel_us();
  std::printf("fuseops bench: %s, %d SMs, L2 %.0f MB; copy rate %.3f TB/s (1 GiB D2D, read + write); empty kernel %.2f us\n",
              info.name.c_str(), info.sms, info.l2_bytes / 1e6, copy_tbps, empty_us);
  std::printf("timing: median per launch under CUDA-graph replay; warm = same buffers, cold = rotating >= 4x L2\n");
  const NameColumns w = name_columns(work, 16, 26, 11);
  std::printf("%s %s %s %-5s %9s %9s %7s %8s %6s %10s %10s %7s\n", pad_column("set", w.set).c_str(),
              pad_column("op", w.op).c_str(), pad_column("shape", w.shape).c_str(), "dtype", "warm_us", "cold_us",
              "TB/s", "copy_us", "xcopy", "base_warm", "base_cold", "speedup");
  std::vector<BenchRow> rows;
  std::vector<std::string> failures;  // "set op shape dtype: reason" of each case that did not run
  Progress progress(work.size(), Progress::on_terminal(opts.quiet));
  for (std::size_t i = 0; i < work.size(); ++i) {
    const OpCase* c = work[i].c.get();
    progress.show(i, work[i].label());
    bench_case(work[i], progress, failures, [&] {
      auto p = naming_the_case(work[i], [&] { return c->bench(); });
      BenchRow r{work[i].set, c->op, c->shape, dtype_name(c->dtype), c->baseline, c->decode, p->bytes(), p->flops()};
      const std::size_t set_bytes = std::max<std::size_t>(p->set_bytes(), 1);
      int sets_cold =
          static_cast<int>(std::clamp<std::size_t>((4 * info.l2_bytes + set_bytes - 1) / set_bytes, 2, 4096));
      const std::size_t budget = gpu::device_info(0).free_bytes * 8 / 10;
      while (sets_cold > 2 && sets_cold * set_bytes > budget) sets_cold /= 2;
      r.cold_sets = sets_cold;
      naming_the_case(work[i], [&] { p->allocate(sets_cold); });
      const double est = gpu::time_graph_us([&](int, void* s) { p->run(0, s); }, 5, 0.0, 3);
      const int n = launches_for(est);
      r.warm = gpu::time_graph_us([&](int, void* s) { p->run(0, s); }, n);
      const int cold_n = std::max(sets_cold, (n / sets_cold) * sets_cold);
      r.cold = gpu::time_graph_us([&](int k, void* s) { p->run(k % sets_cold, s); }, cold_n);
      // the first capture says whether the case has a baseline (else the graph is empty and nothing more is timed)
      r.base_warm = gpu::time_graph_us([&](int, void* s) { r.has_baseline = p->run_baseline(0, s); }, n);
      if (r.has_baseline) {
        r.base_cold = gpu::time_graph_us([&](int k, void* s) { p->run_baseline(k % sets_cold, s); }, cold_n);
      }
      const double copy_us = r.bytes / (copy_tbps * 1e12) * 1e6;
      progress.clear();
      std::printf("%s %s %s %s %9.2f %9.2f %7.3f %8.2f %6.2f %s %s %s\n",
                  pad_column(printable_text(r.set), w.set).c_str(), pad_column(r.op, w.op).c_str(),
                  pad_column(r.shape, w.shape).c_str(), pad_column(r.dtype, 5).c_str(), r.warm, r.cold,
                  r.bytes / r.cold / 1e6, copy_us, r.cold / copy_us,
                  pad_column(base_cell(r, r.base_warm), 10, true).c_str(),
                  pad_column(base_cell(r, r.base_cold), 10, true).c_str(),
                  pad_column(base_cell(r, r.base_cold / r.cold), 7, true).c_str());
      std::fflush(stdout);
      rows.push_back(r);
    });
  }
  progress.clear();
  nlohmann::json j = {{"command", "bench"}, {"backend", "cuda"}, {"version", version()}, {"device", info.name},
                      {"copy_tbps", copy_tbps}, {"empty_kernel_us", empty_us}, {"date", today()}, {"note", opts.note}};
  j["results"] = nlohmann::json::array();
  j["failed"] = failures;
  for (const BenchRow& r : rows) {
    // a case without a baseline: "baseline" "" and no baseline times (the chart and the scripts read them as absent)
    nlohmann::json e = {{"set", r.set}, {"op", r.op}, {"shape", r.shape}, {"dtype", r.dtype}, {"bytes", r.bytes},
                        {"flops", r.flops}, {"warm_us", r.warm}, {"cold_us", r.cold}, {"cold_sets", r.cold_sets},
                        {"baseline", r.has_baseline ? r.baseline : std::string()},
                        {"copy_rate_us", r.bytes / (copy_tbps * 1e6)}};
    if (r.has_baseline) {
      e["baseline_warm_us"] = r.base_warm;
      e["baseline_cold_us"] = r.base_cold;
    }
    j["results"].push_back(e);
  }
  const int status = bench_summary(rows.size(), failures);
  write_outputs({[&] { write_json(opts.json, j); },
                 [&] {
                   if (!opts.md.empty()) write_bench_md(opts, info, copy_tbps, empty_us, rows, failures);
                 },
                 [&] { write_bench_charts(j, opts, failures); }});
  return status;
}

int bench_cpu(const Options& opts, const std::vector<Work>& work) {
  const double memcpy_tbps =
      cli::naming_the_case(std::string("bench: the CPU memcpy rate (2 x 64 MiB)"), [] { return cpu_memcpy_tbps(); });
  std::printf("fuseops bench: no GPU in use: CPU backend times (median wall time), %s; these are not GPU numbers. CPU "
              "memcpy rate %.4f TB/s (read + write)\n",
              cpu_rows_promise(opts.cpu_rows).c_str(), memcpy_tbps);
  const NameColumns w = name_columns(work, 16, 26, 11);
  std::printf("%s %s %s %-5s %6s %12s %9s\n", pad_column("set", w.set).c_str(), pad_column("op", w.op).c_str(),
              pad_column("shape", w.shape).c_str(), "dtype", "rows", "cpu_us", "GB/s");
  nlohmann::json results = nlohmann::json::array();
  std::vector<std::string> failures;  // "set op shape dtype: reason" of each case that did not run
  Progress progress(work.size(), Progress::on_terminal(opts.quiet));
  for (std::size_t i = 0; i < work.size(); ++i) {
    const OpCase* c = work[i].c.get();
    progress.show(i, work[i].label());
    bench_case(work[i], progress, failures, [&] {
      const int64_t asked = std::min(c->rows, opts.cpu_rows), nrows = c->rows_at(asked);  // the rows that ran
      const double us = naming_the_case(work[i], [&] { return c->time_cpu_us(asked); });
      // Bytes of the rows run (OpCase::bytes_at); FLOPs scaled from the full size (exact for row-wise ops; close for
      // varlen cuts).
      const double scale = c->rows > 0 ? static_cast<double>(nrows) / static_cast<double>(c->rows) : 0.0;
      const double bytes = c->bytes_at(nrows), flops = c->bench()->flops() * scale;
      progress.clear();
      std::printf("%s %s %s %-5s %6lld %12.1f %9.2f\n", pad_column(printable_text(work[i].set), w.set).c_str(),
                  pad_column(c->op, w.op).c_str(), pad_column(c->shape, w.shape).c_str(), dtype_name(c->dtype),
                  static_cast<long long>(nrows), us, us > 0 ? bytes / us / 1e3 : 0.0);
      std::fflush(stdout);
      results.push_back({{"set", work[i].set}, {"op", c->op}, {"shape", c->shape}, {"dtype", dtype_name(c->dtype)},
                         {"rows", nrows}, {"cpu_us", us}, {"bytes", bytes}, {"flops", flops}});
    });
  }
  progress.clear();
  const nlohmann::json j = {{"command", "bench"}, {"backend", "cpu"}, {"version", version()}, {"date", today()},
                            {"note", opts.note}, {"ceiling_tbps", memcpy_tbps}, {"results", results},
                            {"failed", failures}};
  const int status = bench_summary(results.size(), failures);
  auto write_md = [&] {
    if (opts.md.empty()) return;
    std::ostringstream f;  // written at the end (write_text_file: a failed write is an error)
    f << "CPU backend times (median wall time of 5 runs, 3 for the MoE cases), " << cpu_rows_promise(opts.cpu_rows)
      << "; not GPU numbers. Date: " << today() << ". fuseops " << version() << ".\n";
    if (!opts.note.empty()) f << printable_text(opts.note) << "\n";
    f << "\n| set | op | shape | dtype | rows | cpu us |\n|---|---|---|---|---|---|\n";
    for (const auto& r : results) {
      f << "| " << md_cell(r["set"].get<std::string>()) << " | " << md_cell(r["op"].get<std::string>()) << " | "
        << md_cell(r["shape"].get<std::string>()) << " | " << r["dtype"].get<std::string>() << " | "
        << r["rows"].get<int64_t>()
        << " | " << fmt("%.1f", r["cpu_us"].get<double>()) << " |\n";  // as the console prints it, never 1e+06
    }
    for (const std::string& failure : failures) f << "\nFAILED: " << md_cell(failure) << "\n";
    write_text_file("--md", opts.md, f.str());
  };
  write_outputs({[&] { write_json(opts.json, j); }, write_md, [&] { write_bench_charts(j, opts, failures); }});
  return status;
}

}  // namespace

double cpu_memcpy_tbps() {
  const std::size_t n = std::size_t{64} << 20;
  std::vector<char> a(n, 1), b(n, 0);
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    a[static_cast<std::size_t>(rep)] = b[n - 1 - static_cast<std::size_t>(rep)];  // keep the copies observable
  }
  return 2.0 * static_cast<double>(n) / best / 1e12;
}

int run_bench(const Options& opts) {
  check_one_line("--note", opts.note);
  if (!opts.note.empty() && opts.md.empty() && opts.json.empty()) {
    throw Error(ErrorKind::invalid_argument, "--note: it goes into the --md / --json output; give one of them");
  }
  check_distinct_files(case_file_args(opts), {{"--json", opts.json}, {"--md", opts.md}, {"--svg", opts.svg},
                                              {"--html", opts.html}});
  check_writable("--json", opts.json, opts.json_given);
  check_writable("--md", opts.md, opts.md_given);
  check_writable("--svg", opts.svg, opts.svg_given);
  check_writable("--html", opts.html, opts.html_given);
  const bool cuda = use_cuda(opts.backend);
  const std::vector<Work> work = collect(opts, true);
  if (work.empty()) return no_case_matched(opts, true);
  return cuda ? bench_gpu(opts, work) : bench_cpu(opts, work);
}

}  // namespace fuseops::cli
