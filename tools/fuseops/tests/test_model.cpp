// `fuseops model`: ops are looked up by name at run time (a hook, else a built-in case, else missing), and a layer
// runs on the CPU.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "fuseops/error.h"
#include "model.h"

namespace fuseops::cli {
namespace {

const Model& model(const std::string& name) {
  for (const Model& m : models()) {
    if (m.name == name) return m;
  }
  throw std::runtime_error("no model " + name);
}

const Step& step_of(const std::vector<Step>& steps, const std::string& op) {
  for (const Step& s : steps) {
    if (s.names.front() == op) return s;
  }
  throw std::runtime_error("no step " + op);
}

/// A stand-in case of an op no family has yet.
class StubCase : public OpCase {
 public:
  explicit StubCase(std::string name) {
    family = "stub";
    op = std::move(name);
    shape = "7x7";
    rows = 7;
  }
  CheckOutcome check(Device, int64_t, uint64_t) const override {
    CheckOutcome o;
    o.pass = true;
    return o;
  }
  double time_cpu_us(int64_t) const override { return 1; }
  std::unique_ptr<BenchProblem> bench() const override { return nullptr; }
};

TEST(Model, TheThreeModels) {
  for (const char* name : {"qwen3-next-80b", "llama3-8b", "deepseek-v3"}) EXPECT_FALSE(model(name).layer(64, 2).empty());
  const auto steps = model("qwen3-next-80b").layer(100, 3);
  const Step& experts = step_of(steps, "silu_and_mul");
  EXPECT_EQ(experts.names.front(), "silu_and_mul");
  EXPECT_EQ(std::get<int64_t>(experts.params.at("tokens")), 3000);  // tokens x batch x top-10
  EXPECT_EQ(experts.what, "routed experts: SwiGLU (tokens x 10 rows)");
  EXPECT_EQ(std::get<int64_t>(step_of(steps, "chunk_gated_delta_rule_fwd_kkt_solve").params.at("seq_len")), 100);
}

// One token per sequence is a decode step: the GDN layer runs the decode op on the state pool (as a serving stack
// does), not the chunked forward of 1-token sequences.
TEST(Model, DecodeUsesTheGdnDecodeStep) {
  const auto steps = model("qwen3-next-80b").layer(1, 64);
  const Step& gdn = step_of(steps, "fused_sigmoid_gating_delta_rule_update");
  EXPECT_EQ(std::get<int64_t>(gdn.params.at("batch")), 64);
  EXPECT_THROW(step_of(steps, "chunk_gated_delta_rule"), std::runtime_error);
  EXPECT_NO_THROW(step_of(model("qwen3-next-80b").layer(2, 64), "chunk_gated_delta_rule"));
  EXPECT_EQ(resolve(gdn, registry(), "qwen3-next-80b").c->shape, "16/32:N64,gating");
}

// The masked expert layout is the same tokens x 10 rows as the row above it: at one token, 10 busy experts with a
// row each (it had all 512 experts with a row each, 51x the work); at 100 tokens, 512 experts with 2 rows.
TEST(Model, MaskedExpertRowsMatchTheUnmaskedRow) {
  for (auto [tokens, busy, per] : std::vector<std::array<int64_t, 3>>{{1, 10, 1}, {100, 512, 2}, {52, 512, 2}}) {
    const auto steps = model("qwen3-next-80b").layer(tokens, 1);
    const Step& m = step_of(steps, "silu_and_mul_masked");
    EXPECT_EQ(std::get<int64_t>(m.params.at("busy_experts")), busy) << tokens;
    EXPECT_EQ(std::get<int64_t>(m.params.at("tokens_per_expert")), per) << tokens;
    EXPECT_GE(busy * per, 10 * tokens);
    EXPECT_LT((busy - 1) * per, 10 * tokens + busy);
  }
  const auto decode = model("qwen3-next-80b").layer(1, 1);
  EXPECT_EQ(resolve(step_of(decode, "silu_and_mul_masked"), registry(), "qwen3-next-80b").c->shape, "512x2x512:10@1");
}

// The masked step's CPU time and bytes follow its valid rows, not T_max: a run at T_max = 64 of a case with 80 rows
// in each of 512 experts (T_max 160) did 64 of the 80 rows per expert (the time was scaled by 160 / 64).
TEST(Model, MaskedCpuWorkFollowsTheValidRows) {
  const Resolved r = resolve(step_of(model("qwen3-next-80b").layer(4096, 1), "silu_and_mul_masked"), registry(), "m");
  ASSERT_NE(r.c, nullptr);
  ASSERT_EQ(r.c->shape, "512x160x512:512@80");
  EXPECT_DOUBLE_EQ(r.c->time_scale_to_full(64), 80.0 / 64.0);
  EXPECT_DOUBLE_EQ(r.c->time_scale_to_full(160), 1.0);
  const double row_bytes = 3.0 * 512 * 2;  // per valid row: 2d read, d written, bf16
  EXPECT_DOUBLE_EQ(r.c->bytes_at(64), 512 * 64 * row_bytes + 4.0 * 512);
  EXPECT_DOUBLE_EQ(r.c->bytes_at(160), r.c->bench()->bytes());
  EXPECT_DOUBLE_EQ(r.c->bytes_at(100), r.c->bytes_at(160));  // past the 80 valid rows T_max adds nothing
  // a row-wise op keeps the plain rows ratio
  const Resolved act = resolve(step_of(model("qwen3-next-80b").layer(4096, 1), "silu_and_mul"), registry(), "m");
  ASSERT_NE(act.c, nullptr);
  EXPECT_DOUBLE_EQ(act.c->time_scale_to_full(64), static_cast<double>(act.c->rows) / 64.0);
}

TEST(Model, OpsResolveByNameAtRunTime) {
  Registry only_activation;
  register_activation_cases(only_activation);
  const auto steps = model("qwen3-next-80b").layer(64, 1);
  // present through the activation family's hook, with the model's shape
  const Resolved act = resolve(step_of(steps, "silu_and_mul"), only_activation, "qwen3-next-80b");
  ASSERT_NE(act.c, nullptr);
  EXPECT_EQ(act.c->shape, "640x512");
  EXPECT_EQ(act.source, "hook silu_and_mul");
  // GDN and rope are missing from this registry
  EXPECT_EQ(resolve(step_of(steps, "chunk_gated_delta_rule_fwd_kkt_solve"), only_activation, "x").c, nullptr);
  EXPECT_EQ(resolve(step_of(steps, "rotary_embedding"), only_activation, "x").c, nullptr);

  // a family that registers only case sets (no hook) still appears, with its set's shape
  Registry with_rope;
  with_rope.add("other", "", true, [] {
    std::vector<std::unique_ptr<OpCase>> v;
    v.push_back(std::make_unique<StubCase>("rotary_embedding"));
    return v;
  });
  const Resolved rope = resolve(step_of(steps, "rotary_embedding"), with_rope, "qwen3-next-80b");
  ASSERT_NE(rope.c, nullptr);
  EXPECT_EQ(rope.source, "set other (its shape, not the requested one)");

  // a hook that does not take the model's parameters: rejected, with the reason, and no built-in case of another shape
  // stands in for it
  OpSpec picky;
  picky.family = "stub";
  picky.name = "rotary_embedding";
  picky.params = {ParamSpec{"tokens", ParamKind::integer, "", std::nullopt, {}, 1, INT64_MAX}};
  picky.make = [](const CaseParams&) -> std::unique_ptr<OpCase> { return std::make_unique<StubCase>("rotary_embedding"); };
  with_rope.add_op(picky);
  const Resolved r2 = resolve(step_of(steps, "rotary_embedding"), with_rope, "qwen3-next-80b");
  EXPECT_EQ(r2.c, nullptr);
  EXPECT_NE(r2.note.find("rotary_embedding rejects"), std::string::npos) << r2.note;
}

// Sizes the hooks refuse (the user's `--tokens 16777216 --batch 16` and `--batch 65536`): rejected, never replaced by
// a built-in case of another shape (RMSNorm of hidden 8192 from the norm set for Qwen3-Next's 2048).
TEST(Model, TooBigSizesAreRejectedNotReplaced) {
  for (const int64_t batch : {int64_t{16}, int64_t{65536}}) {
    const auto steps = model("qwen3-next-80b").layer(int64_t{1} << 24, batch);
    for (const char* op : {"silu_and_mul", "moe_route", "layer_norm_fwd"}) {
      const Resolved r = resolve(step_of(steps, op), registry(), "qwen3-next-80b");
      if (batch == 16 && std::string(op) == "layer_norm_fwd") continue;  // 2^28 x 2048 fits
      EXPECT_EQ(r.c, nullptr) << op << " batch " << batch << " from " << r.source;
      EXPECT_NE(r.note.find(" rejects "), std::string::npos) << op << ": " << r.note;
    }
  }
}

// The user's `fuseops model deepseek-v3 --tokens 16777216 --batch 16`: each MoE op is rejected with its own limit;
// moe_align_block_size's is its int32 schedule, not "the routers' limit" (it is not a router).
TEST(Model, MoeOpsAreRejectedWithTheirOwnLimits) {
  const auto steps = model("deepseek-v3").layer(int64_t{1} << 24, 16);
  const Resolved align = resolve(step_of(steps, "moe_align_block_size"), registry(), "deepseek-v3");
  EXPECT_EQ(align.c, nullptr);
  EXPECT_NE(align.note.find("moe_align_block_size rejects tokens: the schedule"), std::string::npos) << align.note;
  EXPECT_NE(align.note.find("(int32 schedule)"), std::string::npos) << align.note;
  EXPECT_EQ(align.note.find("router"), std::string::npos) << align.note;
  for (const char* op : {"grouped_topk", "moe_route"}) {
    const Resolved r = resolve(step_of(steps, op), registry(), "deepseek-v3");
    EXPECT_EQ(r.c, nullptr) << op;
    EXPECT_NE(r.note.find("is 2^31 or more: the routers' limit (int32 indices)"), std::string::npos) << r.note;
  }
}

/// `fuseops model NAME --tokens T --check-rows R --backend cpu --quiet --seed 7`.
ModelOptions cpu_options(const std::string& name, int64_t tokens, int64_t check_rows) {
  ModelOptions o;
  o.name = name;
  o.tokens = tokens;
  o.check_rows = check_rows;
  o.backend = "cpu";
  o.quiet = true;
  o.seed_text = "7";
  return o;
}

/// Whether any hook or built-in case of `reg` answers to one of the step's names.
bool exists(const Step& s, const Registry& reg) {
  for (const std::string& n : s.names) {
    if (reg.find_op(n)) return true;
    for (const CaseSet& set : reg.sets()) {
      for (const auto& f : set.factories) {
        for (const auto& c : f()) {
          if (c->op == n) return true;
        }
      }
    }
  }
  return false;
}

// Every step of every model is built by its op's hook at the model's dims and the given tokens; only ops that do not
// exist in the library are missing.
TEST(Model, EveryOpThroughItsHookNoFalseMissing) {
  for (const Model& m : models()) {
    for (const Step& s : m.layer(64, 2)) {
      const Resolved r = resolve(s, registry(), m.name);
      if (!exists(s, registry())) {
        EXPECT_EQ(r.c, nullptr) << m.name << ": " << s.names.front();
        continue;
      }
      ASSERT_NE(r.c, nullptr) << m.name << ": " << s.names.front() << " " << r.note;
      EXPECT_EQ(r.source.rfind("hook ", 0), 0u) << m.name << ": " << s.names.front() << " from " << r.source;
      EXPECT_TRUE(r.note.empty()) << r.note;
      if (s.params.count("tokens")) {
        EXPECT_EQ(r.c->rows, std::get<int64_t>(s.params.at("tokens"))) << s.names.front();
      }
    }
  }
  const auto steps = model("qwen3-next-80b").layer(64, 1);
  EXPECT_EQ(resolve(step_of(steps, "chunk_gated_delta_rule"), registry(), "qwen3-next-80b").c->shape, "16/32:64");
  EXPECT_EQ(resolve(step_of(steps, "chunk_local_cumsum"), registry(), "qwen3-next-80b").c->shape, "1x64x32");
  EXPECT_EQ(resolve(step_of(steps, "rotary_embedding"), registry(), "qwen3-next-80b").c->shape,
            "64x16/2x256r64,theta10000000");
  EXPECT_EQ(resolve(step_of(steps, "topk_softmax"), registry(), "qwen3-next-80b").c->shape, "64x512 k10,renorm");
  const auto ds = model("deepseek-v3").layer(64, 1);
  EXPECT_EQ(resolve(step_of(ds, "rotary_embedding"), registry(), "deepseek-v3").c->shape, "64x128/1x64j,hs192");
  EXPECT_EQ(resolve(step_of(ds, "grouped_topk"), registry(), "deepseek-v3").c->shape, "64x256 k8,g8/4,renorm,x2.5,bias");
  // the only step of the three models whose op the library lacks
  std::vector<std::string> missing;
  for (const Model& m : models()) {
    for (const Step& s : m.layer(64, 1)) {
      if (!resolve(s, registry(), m.name).c) missing.push_back(m.name + ":" + s.names.front());
    }
  }
  EXPECT_EQ(missing, std::vector<std::string>{"qwen3-next-80b:causal_conv1d_fn"});
}

// The models' dimensions (config.json of each model).
TEST(Model, DimensionsOfTheRealModels) {
  const auto q = model("qwen3-next-80b").layer(10, 1);
  auto i = [](const Step& s, const char* k) { return std::get<int64_t>(s.params.at(k)); };
  EXPECT_EQ(i(q[0], "hidden"), 2048);
  EXPECT_EQ(q[0].count, 2);
  const Step& gdn = step_of(q, "chunk_gated_delta_rule");
  EXPECT_EQ(i(gdn, "num_heads"), 16);
  EXPECT_EQ(i(gdn, "num_v_heads"), 32);
  EXPECT_EQ(i(gdn, "head_k_dim"), 128);
  EXPECT_EQ(i(gdn, "head_v_dim"), 128);
  EXPECT_EQ(i(step_of(q, "layer_norm_fwd"), "hidden"), 2048);
  const Step& router = step_of(q, "moe_route");
  EXPECT_EQ(i(router, "num_experts"), 512);
  EXPECT_EQ(i(router, "topk"), 10);
  const Step& rope = step_of(q, "rotary_embedding");
  EXPECT_EQ(i(rope, "head_size"), 256);
  EXPECT_EQ(i(rope, "rotary_dim"), 64);
  EXPECT_EQ(std::get<double>(rope.params.at("theta")), 1e7);
  const auto l = model("llama3-8b").layer(10, 1);
  EXPECT_EQ(i(l[0], "hidden"), 4096);
  EXPECT_EQ(i(step_of(l, "silu_and_mul"), "d"), 14336);
  EXPECT_EQ(i(step_of(l, "rotary_embedding"), "num_heads"), 32);
  EXPECT_EQ(i(step_of(l, "rotary_embedding"), "num_kv_heads"), 8);
  EXPECT_EQ(std::get<double>(step_of(l, "rotary_embedding").params.at("theta")), 500000.0);
  const auto d = model("deepseek-v3").layer(10, 1);
  EXPECT_EQ(i(d[0], "hidden"), 7168);
  const Step& g = step_of(d, "grouped_topk");
  EXPECT_EQ(i(g, "num_experts"), 256);
  EXPECT_EQ(i(g, "n_group"), 8);
  EXPECT_EQ(i(g, "topk_group"), 4);
  EXPECT_EQ(i(g, "topk"), 8);
  EXPECT_EQ(std::get<double>(g.params.at("routed_scaling_factor")), 2.5);
  EXPECT_TRUE(std::get<bool>(g.params.at("bias")));
  EXPECT_EQ(i(step_of(d, "silu_and_mul"), "d"), 2048);
  EXPECT_FALSE(std::get<bool>(step_of(d, "rotary_embedding").params.at("is_neox")));
}

/// A rotary_embedding hook taking the parameters the models pass and rejecting them all through `make`.
OpSpec picky_rope(std::function<std::unique_ptr<OpCase>(const CaseParams&)> make) {
  OpSpec picky;
  picky.family = "stub";
  picky.name = "rotary_embedding";
  for (const char* k : {"tokens", "num_heads", "num_kv_heads", "head_size", "rotary_dim"}) {
    picky.params.push_back(integer_param(k, "", 0, 0));
  }
  picky.params.push_back(bool_param("is_neox", "", true));
  picky.params.push_back(ParamSpec{"theta", ParamKind::number, "", 1.0, {}, 0, INT64_MAX});
  picky.make = std::move(make);
  return picky;
}

// A hook that rejects the model's parameters: a "rejects" line in the table and in --json, and the op is not listed
// as missing.
TEST(Model, RejectionsArePrintedAndInTheJson) {
  Registry reg;
  register_activation_cases(reg);
  reg.add_op(picky_rope([](const CaseParams&) -> std::unique_ptr<OpCase> { throw ParamError("head_size", "only 96 here"); }));
  ModelOptions o = cpu_options("llama3-8b", 4, 4);
  o.json = ::testing::TempDir() + "fuseops_model_reject.json";
  ::testing::internal::CaptureStdout();
  const int rc = run_model(o, reg);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 1) << out;  // a requested op did not run: the layer total is incomplete
  EXPECT_NE(out.find("rotary_embedding rejects head_size: only 96 here"), std::string::npos) << out;
  EXPECT_NE(out.find("1 missing, 1 rejected"), std::string::npos) << out;  // layer_norm_fwd is not in `reg`
  EXPECT_NE(out.find("INCOMPLETE: without the rejected ops"), std::string::npos) << out;
  std::ifstream f(o.json);
  const nlohmann::json j = nlohmann::json::parse(f);
  EXPECT_FALSE(j["complete"].get<bool>());
  bool seen = false;
  for (const auto& s : j["steps"]) {
    if (s["op"] == "rotary_embedding") {
      seen = true;
      EXPECT_TRUE(s["rejected"].get<bool>());
      EXPECT_FALSE(s["missing"].get<bool>());
      EXPECT_NE(s["note"].get<std::string>().find("rejects head_size"), std::string::npos);
    }
  }
  EXPECT_TRUE(seen);
  std::remove(o.json.c_str());
}

// A rejected op with a built-in case (the old fallback) and a built-in stand-in of an op without a hook: neither is in
// the layer total or the shares; the rejected one counts as rejected and the run fails.
TEST(Model, StandInsAndRejectionsAreOutOfTheTotal) {
  Registry reg;
  register_activation_cases(reg);
  reg.add("other", "", true, [] {
    std::vector<std::unique_ptr<OpCase>> v;
    v.push_back(std::make_unique<StubCase>("rotary_embedding"));
    v.push_back(std::make_unique<StubCase>("layer_norm_fwd"));
    return v;
  });
  reg.add_op(picky_rope([](const CaseParams& p) -> std::unique_ptr<OpCase> {
    throw ParamError("tokens", "tokens " + std::to_string(p.integer("tokens")) + " is too many");
  }));
  ModelOptions o = cpu_options("llama3-8b", 4, 4);
  o.json = ::testing::TempDir() + "fuseops_model_standin.json";
  ::testing::internal::CaptureStdout();
  const int rc = run_model(o, reg);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("0 missing, 1 rejected"), std::string::npos) << out;
  EXPECT_NE(out.find("not added to the layer total: from set other (its shape, not the requested one)"),
            std::string::npos) << out;
  std::ifstream f(o.json);
  const nlohmann::json j = nlohmann::json::parse(f);
  double added_us = 0;
  for (const auto& s : j["steps"]) {
    if (s["op"] == "rotary_embedding") {
      EXPECT_TRUE(s["rejected"].get<bool>());
      EXPECT_FALSE(s.contains("time_us"));  // not run
    } else if (s["op"] == "layer_norm_fwd") {
      EXPECT_FALSE(s["added"].get<bool>());
      EXPECT_EQ(s["share"].get<double>(), 0.0);
    } else if (s["added"].get<bool>()) {
      added_us += s["time_us"].get<double>();
    }
  }
  EXPECT_DOUBLE_EQ(j["total_us"].get<double>(), added_us);
  EXPECT_GT(added_us, 0.0);
  std::remove(o.json.c_str());
}

TEST(Model, RunsALayerOnTheCpu) {
  ModelOptions o = cpu_options("qwen3-next-80b", 32, 8);
  ::testing::internal::CaptureStdout();
  const int rc = run_model(o);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("NO GPU in use"), std::string::npos) << out;
  EXPECT_NE(out.find("kkt_solve"), std::string::npos) << out;
  EXPECT_NE(out.find("silu_and_mul"), std::string::npos) << out;
  EXPECT_NE(out.find("layer total"), std::string::npos) << out;
  o.name = "gpt-5";
  EXPECT_THROW(run_model(o), Error);
}

}  // namespace
}  // namespace fuseops::cli
