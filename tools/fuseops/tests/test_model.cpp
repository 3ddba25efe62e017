// `fuseops model`: ops are looked up by name at run time (a hook, else a built-in case, else missing), and a layer
// runs on the CPU.
#include <gtest/gtest.h>

#include <string>

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
  CheckOutcome check(Device, int64_t, uint64_t) const override { return {}; }
  double time_cpu_us(int64_t) const override { return 1; }
  std::unique_ptr<BenchProblem> bench() const override { return nullptr; }
};

TEST(Model, TheThreeModels) {
  for (const char* name : {"qwen3-next-80b", "llama3-8b", "deepseek-v3"}) EXPECT_FALSE(model(name).layer(64, 2).empty());
  const auto steps = model("qwen3-next-80b").layer(100, 3);
  const Step& experts = steps[6];
  EXPECT_EQ(experts.names.front(), "silu_and_mul");
  EXPECT_EQ(std::get<int64_t>(experts.params.at("tokens")), 3000);  // tokens x batch x top-10
  EXPECT_EQ(std::get<int64_t>(step_of(steps, "chunk_gated_delta_rule_fwd_kkt_solve").params.at("seq_len")), 100);
}

TEST(Model, OpsResolveByNameAtRunTime) {
  Registry only_activation;
  register_activation_cases(only_activation);
  const auto steps = model("qwen3-next-80b").layer(64, 1);
  // present through the activation family's hook, with the model's shape
  const Resolved act = resolve(steps[6], only_activation, "qwen3-next-80b");
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
  EXPECT_EQ(rope.source, "set other (its shape, not --tokens)");

  // a hook that does not take the model's parameters: noted, then the built-in case
  OpSpec picky;
  picky.family = "stub";
  picky.name = "rotary_embedding";
  picky.params = {ParamSpec{"tokens", ParamKind::integer, "", std::nullopt, {}, 1, INT64_MAX}};
  picky.make = [](const CaseParams&) -> std::unique_ptr<OpCase> { return std::make_unique<StubCase>("rotary_embedding"); };
  with_rope.add_op(picky);
  const Resolved r2 = resolve(step_of(steps, "rotary_embedding"), with_rope, "qwen3-next-80b");
  ASSERT_NE(r2.c, nullptr);
  EXPECT_NE(r2.note.find("rotary_embedding rejects"), std::string::npos) << r2.note;
}

TEST(Model, RunsALayerOnTheCpu) {
  ModelOptions o;
  o.name = "qwen3-next-80b";
  o.tokens = 32;
  o.check_rows = 8;
  o.backend = "cpu";
  o.quiet = true;
  o.seed_text = "7";
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
