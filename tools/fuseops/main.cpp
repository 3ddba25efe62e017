// fuseops: the command line. `list` the case sets, `check` ops against the float64 golden, `bench` them, `chart`
// bench results, run a `model` layer.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "chart.h"
#include "commands.h"
#include "fuseops/error.h"
#include "paths.h"
#include "fuseops/version.h"

namespace {

constexpr const char* kSeedHelp =
    "random seed, decimal 0 .. 2^64-1 (default: FUSEOPS_SEED, unless empty, else the clock)";

/// `fuseops bogus`: CLI11 reports only "A subcommand is required" (and `fuseops bogus --help` printed the main help
/// and exited 0); name the word and the subcommands instead. `words`: the words CLI11 left, or the command line's.
bool unknown_subcommand(const CLI::App& app, const std::vector<std::string>& words) {
  if (!app.get_subcommands().empty()) return false;
  for (const std::string& word : words) {
    if (word == "--") break;  // what follows is not the command line's options or subcommand
    if (word.empty() || word[0] == '-') continue;
    std::string known;
    for (const CLI::App* s : app.get_subcommands({})) known += (known.empty() ? "" : ", ") + s->get_name();
    std::fprintf(stderr, "fuseops: error: unknown subcommand \"%s\" (valid: %s; fuseops --help)\n",
                 fuseops::cli::escaped_text(word).c_str(), known.c_str());
    return true;
  }
  return false;
}

/// `status` once the standard output is flushed: 1 where it could not be written in full (`--help > /dev/full` exited
/// 0), but a usage error keeps its 2 (nothing ran; what it printed is the help that goes with it).
int flushed(int status) {
  try {
    fuseops::cli::flush_stdout();
  } catch (const fuseops::cli::WriteError& e) {
    std::fprintf(stderr, "fuseops: error: %s\n", e.what());
    return status == 2 ? 2 : 1;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fuseops::cli;
  CLI::App app{"fuseops " + std::string(fuseops::version()) +
               ": fused LLM operators. Checks every op against a float64 golden and benchmarks it on real model shapes."};
  app.set_version_flag("--version", std::string(fuseops::version()));
  app.require_subcommand(1);
  // CLI11's parse errors in the form of ours: "fuseops: error: --tokens: ..." and its hint
  // (CLI11 lists unexpected arguments in an order of its own, those after "--" first: they are listed here in the
  // order of the command line, a word with a space or none quoted)
  const std::vector<std::string> given(argv + 1, argv + argc);
  app.failure_message([&given](const CLI::App* a, const CLI::Error& e) {
    if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
      std::vector<std::string> left = a->remaining(true);
      std::string words;
      for (const std::string& w : given) {
        const auto it = std::find(left.begin(), left.end(), w);
        if (it == left.end()) continue;
        left.erase(it);
        const bool quote = w.empty() || w.find_first_of(" \t\n") != std::string::npos;
        const std::string shown = escaped_text(w);
        words += (words.empty() ? "" : " ") + (quote ? "\"" + shown + "\"" : shown);
      }
      if (!words.empty()) {
        return "fuseops: error: The following arguments were not expected: " + words +
               "\nRun with --help for more information.\n";
      }
    }
    // CLI11's words quote what was given (a path that does not exist: "File does not exist: e<ESC>[31mX.yaml"):
    // escaped, the hint after them as CLI11 writes it
    const std::string what = e.what();
    return "fuseops: error: " + escaped_text(what) + CLI::FailureMessage::simple(a, e).substr(what.size());
  });

  app.add_subcommand("list", "list op families and case sets");

  // --filter '' / --shape '' would select every case (every name contains ''): an error, not a silent "all"
  const CLI::Validator non_empty(
      [](const std::string& v) { return v.empty() ? std::string("expected a non-empty value") : std::string(); },
      "");
  // integer options: decimal digits only, checked before the range (CLI11 said "Value 1e3 not in range 1 to ..."),
  // and leading zeros dropped before CLI11 converts the text (it reads 010 as octal 8 and fails on 08)
  const CLI::Validator decimal(
      [](std::string& v) {
        const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos;
        if (!digits) return "expected a decimal integer, got \"" + v + "\"";
        v.erase(0, std::min(v.find_first_not_of('0'), v.size() - 1));
        return std::string();
      },
      "");
  // the case selection of check and bench: --filter, --shape, --cases
  const auto add_selection = [&non_empty](CLI::App& sub, Options& opts) {
    sub.add_option("--filter", opts.filter,
                   "only cases of this op (a whole name, public or printed without its variant marks) or every case "
                   "whose op names contain this text")
        ->check(non_empty);
    sub.add_option("--shape", opts.shape, "only cases with exactly this shape, as printed (e.g. 1x8192x8x128)")
        ->check(non_empty);
    sub.add_option("--cases", opts.cases, "YAML case file(s) (docs/cases.md); without --set only these run")
        ->check(CLI::ExistingFile);
  };
  const std::string cpu_rows_help = std::string("rows per case on the CPU backend (reduced sizes; ") + kCpuRowsKept +
                                    "; the rows column shows what ran)";
  Options check_opts;
  CLI::App* check = app.add_subcommand("check", "run cases on a backend and compare with the float64 golden");
  check->add_option("--set", check_opts.sets, "case set(s) to run (default: every set)");
  check->add_option("--backend", check_opts.backend, "auto | cpu | cuda (auto: the GPU when there is one)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  CLI::Option* check_json = check->add_option("--json", check_opts.json, "write the results as JSON to this file");
  CLI::Option* check_seed = check->add_option("--seed", check_opts.seed_text, kSeedHelp);
  check->add_option("--cpu-rows", check_opts.cpu_rows, cpu_rows_help)
      ->transform(decimal)->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_selection(*check, check_opts);
  check->add_flag("--quiet", check_opts.quiet, "no progress line on a terminal");

  Options bench_opts;
  CLI::App* bench = app.add_subcommand("bench", "time cases (GPU: CUDA-graph replay, warm and cold)");
  bench->add_option("--set", bench_opts.sets, "case set(s) to run (default: the real-model sets)");
  bench->add_option("--backend", bench_opts.backend, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  CLI::Option* bench_json = bench->add_option("--json", bench_opts.json, "write the results as JSON to this file");
  CLI::Option* bench_md = bench->add_option("--md", bench_opts.md, "write the results as a Markdown table to this file");
  bench->add_option("--cpu-rows", bench_opts.cpu_rows, cpu_rows_help)
      ->transform(decimal)->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  add_selection(*bench, bench_opts);
  bench->add_option("--note", bench_opts.note, "a line for the Markdown header (commit, command)");
  bench->add_flag("--quiet", bench_opts.quiet, "no progress line on a terminal");
  CLI::Option* bench_svg = bench->add_option("--svg", bench_opts.svg, "write a chart of the results (SVG) to this file");
  CLI::Option* bench_html = bench->add_option("--html", bench_opts.html, "write a chart and table (HTML) to this file");

  std::string chart_from, chart_svg, chart_html;
  CLI::App* chart = app.add_subcommand("chart", "chart a bench result file (fuseops bench --json) as SVG / HTML");
  chart->add_option("--from", chart_from, "the JSON of fuseops bench --json")->required()->check(CLI::ExistingFile);
  chart->add_option("--svg", chart_svg, "write the SVG chart to this file")->check(non_empty);
  chart->add_option("--html", chart_html, "write the HTML chart and table to this file")->check(non_empty);

  ModelOptions model_opts;
  bool model_list = false;
  CLI::App* model = app.add_subcommand(
      "model", "run the op sequence of one layer of a real model: golden check of a slice, time per op, share");
  model->add_option("name", model_opts.name, "qwen3-next-80b | llama3-8b | deepseek-v3")->check(non_empty);
  CLI::Option* model_list_flag =
      model->add_flag("--list", model_list, "list the models (or only NAME) and the ops of their layers");
  std::vector<CLI::Option*> model_run_opts;  // what --list would ignore: an error with it
  model_run_opts.push_back(model->add_option("--tokens", model_opts.tokens, "tokens per sequence (default 4096)")
                               ->transform(decimal)
                               ->check(CLI::Range(int64_t{1}, int64_t{1} << 24)));
  model_run_opts.push_back(model->add_option("--batch", model_opts.batch, "sequences (default 1)")
                               ->transform(decimal)
                               ->check(CLI::Range(int64_t{1}, int64_t{1} << 16)));
  model_run_opts.push_back(
      model->add_option("--check-rows", model_opts.check_rows, "rows of the slice checked against the golden (default 64)")
          ->transform(decimal)
          ->check(CLI::Range(int64_t{1}, int64_t{1} << 20)));
  model_run_opts.push_back(model->add_option("--backend", model_opts.backend, "auto | cpu | cuda")
                               ->check(CLI::IsMember({"auto", "cpu", "cuda"})));
  model_run_opts.push_back(
      model->add_option("--json", model_opts.json, "write the table as JSON to this file")->check(non_empty));
  CLI::Option* model_seed = model->add_option("--seed", model_opts.seed_text, kSeedHelp);
  model_run_opts.push_back(model_seed);
  for (CLI::Option* o : model_run_opts) model_list_flag->excludes(o);
  model->add_flag("--quiet", model_opts.quiet, "no progress line on a terminal");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    if (unknown_subcommand(app, given)) return 2;
    return flushed(app.exit(e));
  } catch (const CLI::CallForAllHelp& e) {
    if (unknown_subcommand(app, given)) return 2;
    return flushed(app.exit(e));
  } catch (const CLI::CallForVersion& e) {
    // printed here, not by app.exit: its std::endl flushes at once, and a failed flush there leaves flushed() an
    // error flag without the errno reason that --help's message gives ("No space left on device")
    std::printf("%s\n", e.what());
    return flushed(e.get_exit_code());
  } catch (const CLI::ParseError& e) {
    if (!unknown_subcommand(app, app.remaining())) app.exit(e);
    return 2;
  }
  check_opts.json_given = check_json->count() > 0;
  check_opts.seed_given = check_seed->count() > 0;
  model_opts.seed_given = model_seed->count() > 0;
  bench_opts.json_given = bench_json->count() > 0;
  bench_opts.md_given = bench_md->count() > 0;
  bench_opts.svg_given = bench_svg->count() > 0;
  bench_opts.html_given = bench_html->count() > 0;
  auto run_command = [&]() -> int {
    if (app.got_subcommand("list")) return run_list();
    if (app.got_subcommand("check")) return run_check(check_opts);
    if (app.got_subcommand("bench")) return run_bench(bench_opts);
    if (app.got_subcommand("chart")) return run_chart(chart_from, chart_svg, chart_html);
    if (app.got_subcommand("model")) {
      if (model_list) return run_model_list(model_opts.name);
      if (model_opts.name.empty()) {  // a usage error (nothing ran), with the list to choose from
        run_model_list("");
        std::fprintf(stderr, "fuseops: error: model: give a model NAME (one of the list above)\n");
        return 2;
      }
      return run_model(model_opts);
    }
    return 0;
  };
  try {
    return flushed(run_command());
  } catch (const fuseops::cli::WriteError& e) {  // after the run: an output file or stdout is incomplete
    std::fprintf(stderr, "fuseops: error: %s\n", e.what());
    return 1;
  } catch (const fuseops::Error& e) {
    std::fprintf(stderr, "fuseops: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuseops: error: %s\n", e.what());
    return 2;
  }
}
