// The subcommands of the `fuseops` command line.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "fuseops/error.h"

namespace fuseops::cli {

class OpCase;
class Registry;

struct Options {
  std::vector<std::string> sets;
  std::vector<std::string> cases;  ///< --cases: YAML case files (docs/cases.md)
  std::string backend = "auto";
  std::string json, md, svg, html, filter, note;
  std::string shape;  ///< only the case with exactly this shape text (as printed), e.g. 2x16384x32x128
  bool json_given = false, md_given = false;  ///< the option was on the command line (even with an empty value)
  bool svg_given = false, html_given = false;
  bool quiet = false;     ///< no progress line
  std::string seed_text;  ///< --seed; not given: from FUSEOPS_SEED or the clock
  bool seed_given = false;
  int64_t cpu_rows = 64;
};

struct ModelOptions {
  std::string name;
  int64_t tokens = 4096;  ///< tokens per sequence
  int64_t batch = 1;      ///< sequences
  int64_t check_rows = 64;  ///< rows of the slice checked against the golden
  std::string backend = "auto";
  std::string json;
  std::string seed_text;
  bool seed_given = false;
  bool quiet = false;
};

int run_list();
int run_check(const Options& opts);
int run_bench(const Options& opts);
int run_model(const ModelOptions& opts);
/// Op family -> its ops (the hooks' names; the built-in cases' ops for a family without hooks), for `list`.
std::map<std::string, std::vector<std::string>> op_families(const Registry& reg);
/// The same with the ops of `reg` (tests).
int run_model(const ModelOptions& opts, const Registry& reg);
/// `fuseops model --list [NAME]`: the models (only NAME when given; an error for an unknown one) and their layers' ops.
int run_model_list(const std::string& name = "");

/// Whether --filter and --shape select the case: the filter text is in the op name printed (the case's, e.g.
/// kkt_solve) or in the public name of its op in `reg` (as `fuseops list` shows it, chunk_gated_delta_rule_fwd_kkt_solve).
bool selected(const OpCase& c, const Options& opts, const Registry& reg);
/// The run's seed: --seed (decimal, also when given empty) if given or not empty, else FUSEOPS_SEED or the clock.
uint64_t seed_option(const std::string& text, bool given);
/// "cpu" or "cuda" from --backend (auto: the GPU when there is one); an error for cuda without one.
bool use_cuda(const std::string& backend);
/// The cases a reduced CPU run keeps more rows of than --cpu-rows asks ("the chunked GDN forward keeps at least two
/// chunks and a half, ..."), for the option's help and the run headers.
extern const char* const kCpuRowsKept;
/// "at most N rows per case (reduced sizes; <kCpuRowsKept>; the rows column shows what ran)", "1 row" in the
/// singular: what the CPU headers of check and bench promise.
std::string cpu_rows_promise(int64_t rows);
/// Launches per timed graph for a problem whose single launch takes about `est_us`: enough for ~2 ms, 10..1000.
int launches_for(double est_us);
/// Terminal columns of UTF-8 `text` (one per code point).
int text_columns(const std::string& text);
/// A console table column's width widened to hold `cell` (at most 64 columns: a longer cell overflows its row only).
int widen_column(int width, const std::string& cell);
/// `text` padded with spaces to `width` terminal columns (left-aligned, or right-aligned with `right`), counting
/// UTF-8 code points rather than bytes (a "—" cell takes one column); longer text is returned whole.
std::string pad_column(const std::string& text, int width, bool right = false);
/// Position of the first byte of `text` that does not begin a well-formed UTF-8 sequence (stray continuation bytes,
/// truncated or overlong sequences, surrogates, code points past U+10FFFF), or std::string::npos.
std::size_t utf8_error_at(const std::string& text);
/// The length in bytes of the control character that starts at byte `at` of UTF-8 `text` (C0 U+0000 - U+001F, DEL
/// U+007F, C1 U+0080 - U+009F: two bytes, C2 80 - C2 9F; on a terminal they act rather than print, U+009B as an
/// escape), and with `line_breaks` also of a line or paragraph separator (U+2028, U+2029: three bytes); 0 where none
/// starts there. `code` (where given) gets its code point. The one test of what is a control character, for the
/// checks (line_break_at) and the replacements (printable_text) alike.
std::size_t control_at(const std::string& text, std::size_t at, bool line_breaks, uint32_t* code = nullptr);
/// Position of the first character of `text` that breaks one line of text (control_at with line_breaks: a control
/// character, a line or paragraph separator), or std::string::npos; `what` (where given) gets its name, "the control
/// character U+000A" or "the line separator U+2028". --note and a case file's name are one line.
std::size_t line_break_at(const std::string& text, std::string* what = nullptr);
/// What keeps `text` from being one line of printable UTF-8 text, its first fault placed at its character (counted
/// from 1, not a byte offset): "expected one line of text, got the control character U+0085 at character 3" (a
/// line_break_at character) or "expected UTF-8 text, got the byte 0xff at character 2" (utf8_error_at); "" where
/// nothing does. The rule of --note and of a case file's name, however it is given.
std::string one_line_fault(const std::string& text);
/// `text` with each byte that does not begin a well-formed UTF-8 sequence, and each control character (control_at:
/// U+0000 - U+001F, U+007F, U+0080 - U+009F: XML and SVG forbid most of them, and in Markdown or on a terminal they
/// act rather than print), replaced by U+FFFD: the form of names (case files, sets, ops) in the Markdown, SVG and
/// HTML outputs and the console rows. With `line_breaks`, U+2028 and U+2029 too (one line: a case file's default
/// name, its stem).
std::string printable_text(const std::string& text, bool line_breaks = false);
/// `text` as messages quote it: each control character, line and paragraph separator escaped (\r, \t, \x1b,
/// \u009b, \u2028) and each byte that does not begin a UTF-8 sequence too (\xff), so that none acts on the terminal
/// and the reader sees what was there: the form of names, paths and quoted values in error and status messages.
std::string escaped_text(const std::string& text);
/// `j` as the JSON text the commands write (indent 1), bytes that are not UTF-8 replaced by U+FFFD.
std::string json_text(const nlohmann::json& j);

/// An error measure as the tables print it: "%.3e", or "-" where it was not measured (NaN: the case failed before).
std::string error_cell(double v);

/// Runs `f` for the case named `what` (e.g. "llama3-8b silu_and_mul 4096x14336 bf16"); an allocation that fails (host
/// memory) becomes an Error naming the case (std::bad_alloc alone says nothing of which one).
template <typename F>
auto naming_the_case(const std::string& what, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    throw Error(ErrorKind::unsupported, what + ": out of host memory (std::bad_alloc)");
  }
}

/// The CPU's memcpy rate (64 MiB, best of 3), bytes read + written per second, TB/s: the CPU bench's ceiling.
double cpu_memcpy_tbps();

}  // namespace fuseops::cli
