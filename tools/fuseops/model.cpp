// `fuseops model NAME`: the fused-op sequence of one layer of a real model with its dimensions. Each step names the
// op(s) it needs; the op is looked up at run time in the registry — first a family's parameter hook (made with the
// model's parameters), else a built-in case of that op — so an op family that lands later appears here without a
// change; a step whose op is in neither is listed as missing. Each present op is checked against the float64 golden
// on a slice and timed (GPU: warm CUDA-graph replay; CPU: scaled from a slice, and said so).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cases.h"
#include "commands.h"
#include "fuseops/error.h"
#include "paths.h"
#include "fuseops/version.h"
#include "gpu.h"
#include "model.h"
#include "progress.h"

namespace fuseops::cli {
namespace {

using P = std::map<std::string, ParamValue>;

Step step(std::string what, std::vector<std::string> names, P params, std::string not_added = "") {
  return Step{std::move(what), std::move(names), std::move(params), std::move(not_added), "", 1};
}

Step part_of(const std::string& whole, Step s) {
  s.inside_of = whole;
  return s;
}

/// Valid rows per busy expert of the masked layout holding `pairs` (token, expert) rows over min(experts, pairs) busy
/// experts: ceil(pairs / busy), at least 1.
int64_t masked_rows(int64_t pairs, int64_t experts) {
  const int64_t busy = std::max<int64_t>(1, std::min(experts, pairs));
  return std::max<int64_t>(1, (pairs + busy - 1) / busy);
}

std::vector<Model> make_models() {
  std::vector<Model> m;
  // Qwen3-Next-80B-A3B (config.json): hidden 2048, RMSNorm eps 1e-6 on the input and after the attention; GDN with
  // 16 key / 32 value heads of 128 (short conv of width 4 over q, k, v: 2 x 16 x 128 + 32 x 128 = 8192 channels);
  // gated RMSNorm per value head (groups of 128 over 32 x 128); MoE with 512 experts, top 10 (norm_topk_prob), expert
  // and shared-expert intermediate 512; full attention (1 layer in 4) with 16 / 2 heads of 256, partial rotary 64
  // (factor 0.25, NeoX), rope theta 1e7.
  m.push_back({"qwen3-next-80b", "Qwen3-Next-80B-A3B linear-attention (GDN) layer with MoE; rope of the full-attention layers",
               [](int64_t T, int64_t B) {
                 const int64_t N = T * B;
                 Step norm = step("RMSNorm (input and post-attention), hidden 2048", {"layer_norm_fwd", "rms_norm"},
                                  {{"tokens", N}, {"hidden", int64_t{2048}}, {"is_rms_norm", true}, {"gate", false}});
                 norm.count = 2;
                 // GDN: the chunked forward for prefill; at one token per sequence the decode step on the state pool
                 // (vLLM's fused sigmoid gating form), as a serving stack runs it
                 std::vector<Step> gdn;
                 if (T == 1) {
                   gdn.push_back(step("GDN decode step (fused sigmoid gating, state pool)",
                                      {"fused_sigmoid_gating_delta_rule_update", "fused_recurrent_gated_delta_rule_update"},
                                      {{"batch", B}, {"num_heads", int64_t{16}}, {"num_v_heads", int64_t{32}},
                                       {"head_k_dim", int64_t{128}}, {"head_v_dim", int64_t{128}}}));
                 } else {
                   gdn = {part_of("chunk_gated_delta_rule",
                                  step("GDN: chunk-local cumsum of the decays", {"chunk_local_cumsum"},
                                       {{"batch", B}, {"seq_len", T}, {"num_v_heads", int64_t{32}},
                                        {"chunk_size", int64_t{64}}})),
                          part_of("chunk_gated_delta_rule",
                                  step("GDN intra-chunk: kkt + solve_tril", {"chunk_gated_delta_rule_fwd_kkt_solve", "kkt_solve"},
                                       {{"batch", B}, {"seq_len", T}, {"num_heads", int64_t{16}}, {"num_v_heads", int64_t{32}},
                                        {"head_k_dim", int64_t{128}}})),
                          step("GDN chunked forward", {"chunk_gated_delta_rule"},
                               {{"batch", B}, {"seq_len", T}, {"num_heads", int64_t{16}}, {"num_v_heads", int64_t{32}},
                                {"head_k_dim", int64_t{128}}, {"head_v_dim", int64_t{128}}})};
                 }
                 std::vector<Step> layer{
                     norm,
                     step("GDN: short causal conv1d over q, k, v (width 4)", {"causal_conv1d_fn", "causal_conv1d"},
                          {{"tokens", N}, {"dim", int64_t{8192}}, {"width", int64_t{4}}, {"activation", std::string("silu")}})};
                 layer.insert(layer.end(), gdn.begin(), gdn.end());
                 std::vector<Step> rest{
                     step("gated RMSNorm (z gate, group 128)", {"layer_norm_fwd", "rms_norm_gated", "rmsnorm_gated"},
                          {{"tokens", N}, {"hidden", int64_t{4096}}, {"group_size", int64_t{128}}, {"is_rms_norm", true},
                           {"gate", true}, {"norm_before_gate", true}}),
                     part_of("moe_route", step("MoE router: softmax top-10 of 512", {"topk_softmax"},
                                               {{"tokens", N}, {"num_experts", int64_t{512}}, {"topk", int64_t{10}},
                                                {"renormalize", true}})),
                     part_of("moe_route", step("MoE alignment to expert blocks", {"moe_align_block_size"},
                                               {{"tokens", N}, {"topk", int64_t{10}}, {"num_experts", int64_t{512}},
                                                {"block_size", int64_t{64}}})),
                     step("MoE router + alignment, fused", {"moe_route"},
                          {{"tokens", N}, {"num_experts", int64_t{512}}, {"topk", int64_t{10}}, {"renormalize", true},
                           {"block_size", int64_t{64}}}),
                     step("routed experts: SwiGLU (tokens x 10 rows)", {"silu_and_mul"},
                          {{"tokens", N * 10}, {"d", int64_t{512}}}),
                     // the same tokens x 10 rows, spread over min(512, tokens x 10) busy experts (at decode sizes
                     // most experts hold none; all 512 with a row each made a decode step's row 51x too large)
                     step("routed experts, expert-major masked layout", {"silu_and_mul_masked"},
                          {{"num_experts", int64_t{512}}, {"max_tokens", 2 * masked_rows(N * 10, 512)},
                           {"tokens_per_expert", masked_rows(N * 10, 512)},
                           {"busy_experts", std::min<int64_t>(512, N * 10)}, {"d", int64_t{512}}},
                          "an alternative layout of the row above"),
                     step("shared expert: SwiGLU", {"silu_and_mul"}, {{"tokens", N}, {"d", int64_t{512}}}),
                     step("rope, partial 64 of 256 (NeoX)", {"rotary_embedding"},
                          {{"tokens", N}, {"num_heads", int64_t{16}}, {"num_kv_heads", int64_t{2}}, {"head_size", int64_t{256}},
                           {"rotary_dim", int64_t{64}}, {"is_neox", true}, {"theta", 1e7}},
                          "full-attention layers only (1 in 4)"),
                 };
                 layer.insert(layer.end(), rest.begin(), rest.end());
                 return layer;
               }});
  // Llama-3-8B (config.json): hidden 4096, 32 / 8 heads of 128, full rotary (NeoX) with theta 500000, MLP
  // intermediate 14336.
  m.push_back({"llama3-8b", "Llama-3-8B decoder layer: RMSNorm x2, rope, SwiGLU MLP (attention and GEMMs not fused ops)",
               [](int64_t T, int64_t B) {
                 const int64_t N = T * B;
                 Step norm = step("RMSNorm (input and post-attention)", {"layer_norm_fwd", "rms_norm"},
                                  {{"tokens", N}, {"hidden", int64_t{4096}}, {"is_rms_norm", true}, {"gate", false}});
                 norm.count = 2;
                 return std::vector<Step>{
                     norm,
                     step("rope, 128 of 128 (NeoX)", {"rotary_embedding"},
                          {{"tokens", N}, {"num_heads", int64_t{32}}, {"num_kv_heads", int64_t{8}}, {"head_size", int64_t{128}},
                           {"rotary_dim", int64_t{128}}, {"is_neox", true}, {"theta", 500000.0}}),
                     step("MLP: SwiGLU", {"silu_and_mul"}, {{"tokens", N}, {"d", int64_t{14336}}}),
                 };
               }});
  // DeepSeek-V3 (config.json): hidden 7168; MLA with q_lora_rank 1536 and kv_lora_rank 512 (RMSNorm on both latents),
  // rope on qk_rope_head_dim 64 (GPT-J, theta 10000; YaRN only changes the cache) of 128 query heads (the last 64 of
  // each 192-wide q head) and one shared rope key; 256 routed experts in 8 groups, top 4 groups, top 8, scaling 2.5,
  // sigmoid scores with e_score_correction_bias; expert intermediate 2048, one shared expert (MoE layers 3..60).
  m.push_back({"deepseek-v3", "DeepSeek-V3 MoE layer: RMSNorm x2, MLA rope, grouped top-k router, experts' SwiGLU",
               [](int64_t T, int64_t B) {
                 const int64_t N = T * B;
                 Step norm = step("RMSNorm (input and post-attention)", {"layer_norm_fwd", "rms_norm"},
                                  {{"tokens", N}, {"hidden", int64_t{7168}}, {"is_rms_norm", true}, {"gate", false}});
                 norm.count = 2;
                 const P router = {{"tokens", N},           {"num_experts", int64_t{256}}, {"n_group", int64_t{8}},
                                   {"topk_group", int64_t{4}}, {"topk", int64_t{8}},         {"renormalize", true},
                                   {"routed_scaling_factor", 2.5}, {"scoring", std::string("sigmoid")}, {"bias", true}};
                 P fused = router;
                 fused["block_size"] = int64_t{64};
                 return std::vector<Step>{
                     norm,
                     step("MLA: RMSNorm of the q latent (1536)", {"layer_norm_fwd", "rms_norm"},
                          {{"tokens", N}, {"hidden", int64_t{1536}}, {"is_rms_norm", true}, {"gate", false}}),
                     step("MLA: RMSNorm of the kv latent (512)", {"layer_norm_fwd", "rms_norm"},
                          {{"tokens", N}, {"hidden", int64_t{512}}, {"is_rms_norm", true}, {"gate", false}}),
                     step("MLA rope, 64 dims (GPT-J), q head stride 192", {"rotary_embedding"},
                          {{"tokens", N}, {"num_heads", int64_t{128}}, {"num_kv_heads", int64_t{1}}, {"head_size", int64_t{64}},
                           {"rotary_dim", int64_t{64}}, {"head_stride", int64_t{192}}, {"is_neox", false}, {"theta", 10000.0}}),
                     part_of("moe_route", step("router: grouped top-8 of 256 (8 groups, top 4)", {"grouped_topk"}, router)),
                     part_of("moe_route", step("MoE alignment to expert blocks", {"moe_align_block_size"},
                                               {{"tokens", N}, {"topk", int64_t{8}}, {"num_experts", int64_t{256}},
                                                {"block_size", int64_t{64}}})),
                     step("MoE router + alignment, fused", {"moe_route"}, fused),
                     step("routed experts: SwiGLU (tokens x 8 rows)", {"silu_and_mul"}, {{"tokens", N * 8}, {"d", int64_t{2048}}}),
                     step("shared expert: SwiGLU", {"silu_and_mul"}, {{"tokens", N}, {"d", int64_t{2048}}}),
                 };
               }});
  return m;
}

std::string show_params(const P& p) {
  std::string out;
  for (const auto& [k, v] : p) out += (out.empty() ? "" : " ") + k + "=" + value_text(v);
  return out;
}

}  // namespace

const std::vector<Model>& models() {
  static const std::vector<Model> m = make_models();
  return m;
}

Resolved resolve(const Step& s, const Registry& reg, const std::string& model) {
  Resolved r;
  for (const std::string& name : s.names) {
    const OpSpec* spec = reg.find_op(name);
    if (!spec) continue;
    try {
      r.c = spec->make(spec->with_defaults(s.params, name));
      r.source = "hook " + spec->name;
      return r;
    } catch (const ParamError& e) {  // the hook does not take the model's parameters (a size too big, ...)
      r.note = spec->name + " rejects " + e.key() + ": " + e.what();
    } catch (const Error& e) {
      r.note = spec->name + " rejects the parameters: " + e.what();
    }
  }
  // Rejected: no stand-in of another shape (its time would count as this layer's, its check as this op's).
  if (!r.note.empty()) return r;
  // An op without a hook (a family that registers only built-in cases): a built-in case of it, preferring the model's
  // own set, at that case's shape; shown, but not added to the layer total.
  for (int pass = 0; pass < 2; ++pass) {
    for (const CaseSet& set : reg.sets()) {
      if ((pass == 0) != (set.name == model)) continue;
      for (const CaseFactory& f : set.factories) {
        for (auto& c : f()) {
          if (std::find(s.names.begin(), s.names.end(), c->op) == s.names.end()) continue;
          r.c = std::move(c);
          r.source = "set " + set.name + " (its shape, not the requested one)";
          return r;
        }
      }
    }
  }
  return r;
}

namespace {

/// The model called `name`; an error listing the known ones otherwise.
const Model& find_model(const std::string& name) {
  std::string known;
  for (const Model& m : models()) {
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw Error(ErrorKind::invalid_argument, "model: unknown model \"" + name + "\" (known: " + known + ")");
}

/// Added to the layer total: a case at the requested shape (from the op's hook), not a built-in stand-in.
bool at_requested_shape(const Resolved& r) { return r.c && r.source.rfind("hook ", 0) == 0; }

}  // namespace

int run_model_list(const std::string& name) {
  if (!name.empty()) find_model(name);  // an unknown name is an error, not the whole list
  std::printf("models (fuseops model NAME [--tokens N] [--batch B]):\n");
  for (const Model& m : models()) {
    if (!name.empty() && m.name != name) continue;
    std::printf("  %-15s %s\n", m.name.c_str(), m.description.c_str());
    for (const Step& s : m.layer(4096, 1)) {
      const Resolved r = resolve(s, registry(), m.name);
      std::printf("      %-8s %-34s %s\n", r.c ? "" : r.note.empty() ? "missing" : "rejected", s.names.front().c_str(),
                  s.what.c_str());
      if (!r.note.empty()) std::printf("               %s\n", r.note.c_str());
    }
  }
  return 0;
}

int run_model(const ModelOptions& opts) { return run_model(opts, registry()); }

int run_model(const ModelOptions& opts, const Registry& reg) {
  const Model* model = &find_model(opts.name);
  const bool cuda = use_cuda(opts.backend);
  const uint64_t seed = seed_option(opts.seed_text, opts.seed_given);
  const std::vector<Step> steps = model->layer(opts.tokens, opts.batch);
  check_distinct_files({}, {{"--json", opts.json}});  // before the run, as check and bench do
  check_writable("--json", opts.json, !opts.json.empty());
  std::printf("fuseops model %s: %s\n", model->name.c_str(), model->description.c_str());
  std::printf("tokens %lld per sequence, batch %lld; seed %llu; golden check of a slice of at most %lld rows per op on %s\n",
              static_cast<long long>(opts.tokens), static_cast<long long>(opts.batch),
              static_cast<unsigned long long>(seed), static_cast<long long>(opts.check_rows), cuda ? "the GPU" : "the CPU");
  if (cuda) {
    std::printf("times: %s, median per launch under CUDA-graph replay, warm (the same buffers)\n",
                gpu::device_info(0).name.c_str());
  } else {
    std::printf("times: NO GPU in use: CPU backend wall time on a slice of at most %lld rows, scaled linearly to the full "
                "rows (not GPU numbers)\n",
                static_cast<long long>(opts.check_rows));
  }

  struct Row {
    const Step* step;
    Resolved r;
    CheckOutcome check;
    double us = 0;
    bool timed = true;  ///< false: timing it failed (row.check says why); not in the total
  };
  std::vector<Row> rows;
  for (const Step& s : steps) rows.push_back({&s, resolve(s, reg, model->name), {}, 0});
  std::size_t present = 0;
  for (const Row& r : rows) present += r.r.c ? 1 : 0;
  Progress progress(present, Progress::on_terminal(opts.quiet));
  std::size_t done = 0;
  for (Row& row : rows) {
    if (!row.r.c) continue;
    const OpCase& c = *row.r.c;
    progress.show(done++, c.op + " " + c.shape);
    const int64_t slice = std::min(c.rows, opts.check_rows);
    const std::string name = c.op + " " + c.shape;
    try {
      row.check = naming_the_case(name, [&] { return c.check(cuda ? Device::cuda(0) : Device::cpu(), slice, seed); });
    } catch (const Error& e) {
      row.check.pass = false;
      row.check.detail = e.what();
      row.check.max_abs_error = row.check.rel_rms_error = std::nan("");  // not measured ("-", null in the JSON)
    }
    try {  // a case that cannot be timed (out of memory, a failed launch) fails and stays out of the total
      naming_the_case(name, [&] {
        if (cuda) {
          auto p = c.bench();
          p->allocate(1);
          const double est = gpu::time_graph_us([&](int, void* st) { p->run(0, st); }, 5, 0.0, 3);
          row.us = gpu::time_graph_us([&](int, void* st) { p->run(0, st); }, launches_for(est));
        } else {
          // scaled by the work that ran (a case may keep more than the slice: whole chunks, whole sequences)
          row.us = c.time_cpu_us(slice) * c.time_scale_to_full(slice);
        }
      });
      row.us *= row.step->count;
    } catch (const Error& e) {
      row.timed = false;
      row.us = 0;
      row.check.pass = false;
      row.check.detail += (row.check.detail.empty() ? "" : "; ") + std::string("not timed: ") + e.what();
    }
  }
  progress.clear();

  // A step is added to the layer total unless it ran at another shape than the requested one (a built-in case), it
  // says why not, or the op containing it ran at the requested shape too. Rejected steps did not run.
  auto why_not_added = [&](const Row& row) -> std::string {
    if (!row.timed) return "not timed";
    if (!at_requested_shape(row.r)) return "from " + row.r.source;
    if (!row.step->not_added.empty()) return row.step->not_added;
    if (row.step->inside_of.empty()) return "";
    for (const Row& o : rows) {
      // (a container that could not be timed leaves its parts in the total)
      if (&o != &row && o.timed && at_requested_shape(o.r) && o.step->names.front() == row.step->inside_of) {
        return "a part of " + row.step->inside_of;
      }
    }
    return "";
  };
  double total = 0;
  std::size_t untimed = 0;  // ops present whose timing failed: the total is incomplete
  for (const Row& r : rows) untimed += r.r.c && !r.timed ? 1 : 0;
  for (const Row& r : rows) {
    if (r.r.c && why_not_added(r).empty()) total += r.us;
  }
  // the step, op and shape columns widened to their cells (widen_column), so that the rows line up
  auto what_of = [](const Row& r) {
    return r.step->what + (r.step->count > 1 ? " (x" + std::to_string(r.step->count) + ")" : "");
  };
  int w_step = 44, w_op = 28, w_shape = 16;
  for (const Row& r : rows) {
    if (!r.r.c) continue;
    w_step = widen_column(w_step, what_of(r));
    w_op = widen_column(w_op, r.r.c->op);
    w_shape = widen_column(w_shape, r.r.c->shape);
  }
  // the time column widened to its cells too (a CPU time scaled to millions of rows passes 12 characters)
  auto time_cell = [](const Row& r) {
    char cell[64];
    std::snprintf(cell, sizeof cell, "%.2f", r.us);
    return std::string(cell);
  };
  int w_time = 12;
  for (const Row& r : rows) {
    if (r.r.c) w_time = widen_column(w_time, time_cell(r));
  }
  std::printf("\n%s %s %s %-5s %-6s %11s %s %7s\n", pad_column("step", w_step).c_str(),
              pad_column("op", w_op).c_str(), pad_column("shape", w_shape).c_str(), "dtype", "check", "rel_rms_err",
              pad_column(cuda ? "time_us" : "cpu_time_us", w_time, true).c_str(), "share");
  nlohmann::json out = {{"command", "model"}, {"model", model->name}, {"version", version()}, {"tokens", opts.tokens},
                        {"batch", opts.batch}, {"backend", cuda ? "cuda" : "cpu"}, {"seed", seed},
                        {"seed_text", std::to_string(seed)}};  // as check's JSON: exact for any JSON reader
  out["steps"] = nlohmann::json::array();
  int failed = 0;
  std::vector<const Row*> missing, rejected;  // rejected: the op exists, its hook rejects the model's parameters
  for (const Row& r : rows) {
    const std::string what = what_of(r);
    if (!r.r.c) {
      (r.r.note.empty() ? missing : rejected).push_back(&r);
      out["steps"].push_back({{"step", what}, {"op", r.step->names.front()}, {"missing", r.r.note.empty()},
                              {"rejected", !r.r.note.empty()}, {"note", r.r.note}});
      continue;
    }
    failed += r.check.pass ? 0 : 1;
    const std::string why = why_not_added(r);
    const bool added = why.empty();
    char share[32];
    std::snprintf(share, sizeof share, added ? "%.1f%%" : "(%.1f%%)", total > 0 ? 100.0 * r.us / total : 0.0);
    std::printf("%s %s %s %-5s %-6s %11s %s %7s\n", pad_column(what, w_step).c_str(),
                pad_column(r.r.c->op, w_op).c_str(), pad_column(r.r.c->shape, w_shape).c_str(),
                dtype_name(r.r.c->dtype), r.check.pass ? "PASS" : "FAIL", error_cell(r.check.rel_rms_error).c_str(),
                pad_column(time_cell(r), w_time, true).c_str(), share);
    if (!r.check.pass) std::printf("    FAIL: %s\n", printable_text(r.check.detail).c_str());
    if (!added) std::printf("    not added to the layer total: %s\n", why.c_str());
    out["steps"].push_back({{"step", what}, {"op", r.r.c->op}, {"shape", r.r.c->shape}, {"dtype", dtype_name(r.r.c->dtype)},
                            {"source", r.r.source}, {"pass", r.check.pass}, {"rel_rms_error", r.check.rel_rms_error},
                            {"max_abs_error", r.check.max_abs_error}, {"detail", r.check.detail}, {"time_us", r.us},
                            {"added", added}, {"share", added && total > 0 ? r.us / total : 0.0}, {"note", r.r.note}});
  }
  std::printf("layer total of the ops present: %.2f us (%s)%s\n", total, cuda ? "GPU" : "CPU, scaled; not GPU numbers",
              rejected.empty() && untimed == 0 ? "" : untimed == 0 ? "; INCOMPLETE: without the rejected ops below"
                                                   : "; INCOMPLETE: without the ops not timed above");
  if (!rejected.empty()) {
    std::printf("rejected (the op refuses the requested size or parameters; not run, not in the total or shares):\n");
    for (const Row* r : rejected) {
      std::printf("  %-28s %s  [%s]\n    %s\n", r->step->names.front().c_str(), r->step->what.c_str(),
                  show_params(r->step->params).c_str(), r->r.note.c_str());
    }
  }
  if (!missing.empty()) {
    std::printf("missing (no op or case in fuseops by these names yet; not timed):\n");
    for (const Row* r : missing) {
      std::printf("  %-28s %s  [%s]\n", r->step->names.front().c_str(), r->step->what.c_str(),
                  show_params(r->step->params).c_str());
    }
  }
  out["total_us"] = total;
  // every op of the layer that fuseops has ran at the requested shape and was timed
  out["complete"] = rejected.empty() && untimed == 0;
  if (!opts.json.empty()) {
    write_text_file("--json", opts.json, json_text(out) + "\n");
  }
  std::printf("model: %zu ops present, %zu missing, %zu rejected; check %d passed, %d failed\n", present,
              missing.size(), rejected.size(), static_cast<int>(present) - failed, failed);
  return failed || !rejected.empty() ? 1 : 0;
}

}  // namespace fuseops::cli
