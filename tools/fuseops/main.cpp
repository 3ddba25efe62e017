// fuseops: the command line. `list` the case sets, `check` ops against the float64 golden, `bench` them.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "commands.h"
#include "fuseops/error.h"
#include "fuseops/version.h"

int main(int argc, char** argv) {
  using namespace fuseops::cli;
  CLI::App app{"fuseops " + std::string(fuseops::version()) +
               ": fused LLM operators. Checks every op against a float64 golden and benchmarks it on real model shapes."};
  app.set_version_flag("--version", std::string(fuseops::version()));
  app.require_subcommand(1);

  app.add_subcommand("list", "list op families and case sets");

  Options check_opts;
  CLI::App* check = app.add_subcommand("check", "run cases on a backend and compare with the float64 golden");
  check->add_option("--set", check_opts.sets, "case set(s) to run (default: every set)");
  check->add_option("--backend", check_opts.backend, "auto | cpu | cuda (auto: the GPU when there is one)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  CLI::Option* check_json = check->add_option("--json", check_opts.json, "write the results as JSON to this file");
  check->add_option("--seed", check_opts.seed_text, "random seed, 0 .. 2^64-1 (default: FUSEOPS_SEED or the clock)");
  check->add_option("--cpu-rows", check_opts.cpu_rows, "rows per case on the CPU backend (reduced sizes)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  check->add_option("--filter", check_opts.filter, "only cases whose op name contains this text");
  check->add_option("--shape", check_opts.shape, "only cases with exactly this shape, as printed (e.g. 1x8192x8x128)");

  Options bench_opts;
  CLI::App* bench = app.add_subcommand("bench", "time cases (GPU: CUDA-graph replay, warm and cold)");
  bench->add_option("--set", bench_opts.sets, "case set(s) to run (default: the real-model sets)");
  bench->add_option("--backend", bench_opts.backend, "auto | cpu | cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  CLI::Option* bench_json = bench->add_option("--json", bench_opts.json, "write the results as JSON to this file");
  CLI::Option* bench_md = bench->add_option("--md", bench_opts.md, "write the results as a Markdown table to this file");
  bench->add_option("--cpu-rows", bench_opts.cpu_rows, "rows per case on the CPU backend")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  bench->add_option("--filter", bench_opts.filter, "only cases whose op name contains this text");
  bench->add_option("--shape", bench_opts.shape, "only cases with exactly this shape, as printed (e.g. 1x8192x8x128)");
  bench->add_option("--note", bench_opts.note, "a line for the Markdown header (commit, command)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  check_opts.json_given = check_json->count() > 0;
  bench_opts.json_given = bench_json->count() > 0;
  bench_opts.md_given = bench_md->count() > 0;
  try {
    if (app.got_subcommand("list")) return run_list();
    if (app.got_subcommand("check")) return run_check(check_opts);
    if (app.got_subcommand("bench")) return run_bench(bench_opts);
  } catch (const fuseops::Error& e) {
    std::fprintf(stderr, "fuseops: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuseops: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
