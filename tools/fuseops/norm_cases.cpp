// Case sets of the gated norm (docs/ops/norm.md): layer_norm_fwd on the output norm of Qwen3-Next's Gated DeltaNet
// layers (RMSNorm over head_v_dim = 128 groups of the HV * V = 32 * 128 = 4096 wide output, SiLU gate z after the
// norm, bf16, eps 1e-6) at prefill and decode sizes, plus LayerNorm, gate-before-norm, bias, f32 weights and one
// group per row. check() compares out, mean and rstd with the float64 golden; bench() times the op writing rstd (as
// FLA's layer_norm_fwd does), with no built-in baseline (FLA side by side: bench/baselines/fla_norm.py).
#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cases.h"
#include "fuseops/norm.h"
#include "gpu.h"
#include "reference/norm.h"
#include "testing/compare.h"
#include "testing/host_tensor.h"

namespace fuseops::cli {
namespace {

using detail::NormGate;
using testing::HostTensor;

struct Spec {
  int64_t rows, N, G;  // G = 0: one group per row
  bool rms = true;
  NormGate gate = NormGate::after_norm;
  bool bias = false;
  DType dtype = DType::bf16, wdtype = DType::bf16;
};

std::string op_name(const Spec& s) {
  std::string g = s.gate == NormGate::none ? "" : s.gate == NormGate::after_norm ? ",gate" : ",gate-before";
  return std::string(s.rms ? "rms_norm" : "layer_norm") + g + (s.bias ? ",bias" : "") +
         (s.wdtype != s.dtype ? ",w32" : "");
}

int64_t ngroups(const Spec& s) { return s.G == 0 ? 1 : s.N / s.G; }

/// Host inputs: x, z ~ N(0, 1); weight ~ 1 + N(0, 0.1) as trained norm weights; bias ~ N(0, 0.1).
struct Inputs {
  HostTensor x, z, w, b;
};

Inputs make_inputs(const Spec& s, int64_t rows, uint64_t seed) {
  Inputs in{HostTensor(s.dtype, {rows, s.N}), HostTensor(s.dtype, {rows, s.N}), HostTensor(s.wdtype, {s.N}),
            HostTensor(s.wdtype, {s.N})};
  testing::fill_random_seeded(in.x, testing::Fill::normal, seed);
  testing::fill_random_seeded(in.z, testing::Fill::normal, seed + 1);
  std::mt19937_64 rng(seed + 2);
  std::normal_distribution<float> small(0.0f, 0.1f);
  for (int64_t c = 0; c < s.N; ++c) {
    in.w.set(0, c, 1.0f + small(rng));
    in.b.set(0, c, small(rng));
  }
  return in;
}

/// The op on views (host or device); stats may be null.
void run_op(const Spec& s, const TensorView& out, const TensorView* mean, const TensorView* rstd, const TensorView& x,
            const TensorView& z, const TensorView& w, const TensorView& b, Stream stream) {
  layer_norm_fwd(out, s.rms ? nullptr : mean, rstd, x, w, s.bias ? &b : nullptr, s.gate == NormGate::none ? nullptr : &z,
                 1e-6, s.G, s.gate != NormGate::before_norm, s.rms, stream);
}

class NormBench : public BenchProblem {
 public:
  explicit NormBench(const Spec& s) : s_(s) {}
  std::size_t set_bytes() const override {
    return static_cast<std::size_t>(3 * s_.rows * s_.N) * dtype_size(s_.dtype) + 2 * s_.N * dtype_size(s_.wdtype) +
           static_cast<std::size_t>(2 * 4 * ngroups(s_) * s_.rows);
  }
  /// x (and z) read once, out written once, weight (and bias) read once, mean (LayerNorm) and rstd written once.
  double bytes() const override {
    const double es = static_cast<double>(dtype_size(s_.dtype)), n = static_cast<double>(s_.rows * s_.N);
    const double streams = s_.gate == NormGate::none ? 2.0 : 3.0;
    return streams * n * es + (s_.bias ? 2.0 : 1.0) * s_.N * dtype_size(s_.wdtype) +
           (s_.rms ? 1.0 : 2.0) * 4.0 * ngroups(s_) * s_.rows;
  }
  void allocate(int sets) override {
    const int64_t n = s_.rows * s_.N;
    for (int k = 0; k < sets; ++k) {
      gpu::Buffer b(set_bytes());
      gpu::fill_random(b.get(), s_.dtype, 2 * n, 500 + k);  // x, z
      char* w = static_cast<char*>(b.get()) + 3 * n * dtype_size(s_.dtype);
      gpu::fill_random(w, s_.wdtype, 2 * s_.N, 900 + k);  // weight, bias
      sets_.push_back(std::move(b));
    }
  }
  void run(int set, void* stream) override {
    char* base = static_cast<char*>(sets_[set].get());
    const int64_t n = s_.rows * s_.N, es = static_cast<int64_t>(dtype_size(s_.dtype));
    const int64_t wes = static_cast<int64_t>(dtype_size(s_.wdtype)), stats = ngroups(s_) * s_.rows;
    const Device dev = Device::cuda(0);
    const TensorView x(base, s_.dtype, dev, {s_.rows, s_.N}), z(base + n * es, s_.dtype, dev, {s_.rows, s_.N});
    const TensorView out(base + 2 * n * es, s_.dtype, dev, {s_.rows, s_.N});
    char* wb = base + 3 * n * es;
    const TensorView w(wb, s_.wdtype, dev, {s_.N}), b(wb + s_.N * wes, s_.wdtype, dev, {s_.N});
    float* st = reinterpret_cast<float*>(wb + 2 * s_.N * wes);
    const TensorView mean(st, DType::f32, dev, {stats}), rstd(st + stats, DType::f32, dev, {stats});
    run_op(s_, out, &mean, &rstd, x, z, w, b, Stream(stream));
  }
  bool run_baseline(int, void*) override { return false; }

 private:
  Spec s_;
  std::vector<gpu::Buffer> sets_;
};

class NormCase : public OpCase {
 public:
  explicit NormCase(const Spec& s) : s_(s) {
    family = "norm";
    op = op_name(s);
    shape = std::to_string(s.rows) + "x" + std::to_string(s.N) + (s.G ? "/g" + std::to_string(s.G) : "");
    baseline = "none (FLA: bench/baselines/fla_norm.py)";
    dtype = s.dtype;
    rows = s.rows;
    decode = s.rows <= 64;
  }

  CheckOutcome check(Device device, int64_t nrows, uint64_t seed) const override {
    const auto t0 = std::chrono::steady_clock::now();
    const Inputs in = make_inputs(s_, nrows, seed);
    const int64_t stats = ngroups(s_) * nrows;
    HostTensor out(s_.dtype, {nrows, s_.N}), mean(DType::f32, {stats}), rstd(DType::f32, {stats});
    for (HostTensor* t : {&out, &mean, &rstd}) t->poison();
    if (device.is_cuda()) {
      testing::DeviceTensor x(in.x, device.index), z(in.z, device.index), w(in.w, device.index),
          b(in.b, device.index), o(out, device.index), m(mean, device.index), r(rstd, device.index);
      const TensorView mv = m.view(), rv = r.view();
      run_op(s_, o.view(), &mv, &rv, x.view(), z.view(), w.view(), b.view(), Stream());
      testing::device_synchronize(device.index);
      o.copy_to(out);
      m.copy_to(mean);
      r.copy_to(rstd);
    } else {
      const TensorView mv = mean.view(), rv = rstd.view();
      run_op(s_, out.view(), &mv, &rv, in.x.view(), in.z.view(), in.w.view(), in.b.view(), Stream());
    }
    const auto gold = reference::layer_norm_fwd(in.x, s_.gate == NormGate::none ? nullptr : &in.z, in.w,
                                                s_.bias ? &in.b : nullptr, 1e-6, s_.G, s_.gate, s_.rms);
    const testing::Tolerance tol = testing::Tolerance::for_dtype(s_.dtype, reference::kNormMathUlps);
    const testing::Tolerance t32 = testing::Tolerance::for_dtype(DType::f32, reference::kNormMathUlps);
    const testing::Comparison co = testing::compare(out, gold.out, gold.out_sens, tol, gold.out_flush);
    const testing::Comparison cr = testing::compare(rstd, gold.rstd, gold.rstd_sens, t32);
    testing::Comparison cm;
    cm.pass = true;
    if (!s_.rms) cm = testing::compare(mean, gold.mean, gold.mean_sens, t32);
    CheckOutcome o;
    o.pass = co.pass && cr.pass && cm.pass;
    o.max_abs_error = co.max_abs_error;
    o.rel_rms_error = co.rel_rms_error;
    o.tolerance = tol.describe();
    o.detail = !co.pass ? "out: " + co.detail : !cr.pass ? "rstd: " + cr.detail : !cm.pass ? "mean: " + cm.detail : "";
    o.rows_checked = nrows;
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return o;
  }

  double time_cpu_us(int64_t nrows) const override {
    const Inputs in = make_inputs(s_, nrows, 1);
    const int64_t stats = ngroups(s_) * nrows;
    HostTensor out(s_.dtype, {nrows, s_.N}), mean(DType::f32, {stats}), rstd(DType::f32, {stats});
    const TensorView mv = mean.view(), rv = rstd.view();
    return median_wall_us([&] { run_op(s_, out.view(), &mv, &rv, in.x.view(), in.z.view(), in.w.view(), in.b.view(), Stream()); });
  }

  std::unique_ptr<BenchProblem> bench() const override { return std::make_unique<NormBench>(s_); }

 private:
  Spec s_;
};

CaseFactory make(std::vector<Spec> specs) { return case_factory<NormCase>(std::move(specs)); }

/// Qwen3-Next-80B-A3B GDN output norm: RMSNorm per value head (HV 32 x V 128), SiLU(z) gate after the norm, bf16.
std::vector<Spec> qwen3_next() {
  std::vector<Spec> v;
  for (int64_t rows : {1, 64, 4096, 16384}) v.push_back(Spec{rows, 32 * 128, 128});
  return v;
}

/// The case-file hook of layer_norm_fwd (docs/cases.md): tokens, hidden (N), group_size (0: the whole row),
/// is_rms_norm, gate (a SiLU gate z), norm_before_gate, bias, dtype, weight_dtype.
OpSpec layer_norm_op() {
  OpSpec spec;
  spec.family = "norm";
  spec.name = "layer_norm_fwd";
  spec.aliases = {"rms_norm", "rms_norm_gated", "rmsnorm_gated", "layer_norm"};
  // what the names say (an entry that says otherwise is an error): layer_norm is a LayerNorm, rms_norm an RMSNorm
  // (with or without the gate: its rows print "rms_norm,gate"), the *_gated ones a gated RMSNorm
  spec.alias_defaults = {{"layer_norm", {{"is_rms_norm", false}}},
                         {"rms_norm", {{"is_rms_norm", true}}},
                         {"rms_norm_gated", {{"is_rms_norm", true}, {"gate", true}}},
                         {"rmsnorm_gated", {{"is_rms_norm", true}, {"gate", true}}}};
  // what its rows print: --filter rms_norm takes the RMSNorm rows, rms_norm_gated the gated ones only (",gate",
  // ",gate-before", ",gate,w32"; its plain rms_norm and layer_norm,gate rows were selected as the op's)
  spec.row_names = {{"rms_norm", "rms_norm"},
                    {"layer_norm", "layer_norm"},
                    {"rms_norm_gated", "rms_norm,gate"},
                    {"rmsnorm_gated", "rms_norm,gate"}};
  spec.help = "gated RMSNorm / LayerNorm per group: x, z [tokens, hidden] -> out, rstd (and mean)";
  spec.params = {integer_param("tokens", "rows"),
                 integer_param("hidden", "N, the normalised width"),
                 integer_param("group_size", "G, dividing hidden (0: one group per row)", 0, 0, 16384),
                 bool_param("is_rms_norm", "RMSNorm (true) or LayerNorm (false)", true),
                 bool_param("gate", "multiply by silu(z)", false),
                 bool_param("norm_before_gate", "the gate after the norm (true) or before it (false)", true),
                 bool_param("bias", "add a bias [hidden]", false),
                 dtype_param(),
                 text_param("weight_dtype", "dtype of weight and bias (same: x's)", "same", {"same", "f32"})};
  spec.make = [](const CaseParams& p) -> std::unique_ptr<OpCase> {
    Spec s{p.integer("tokens"), p.integer("hidden"), p.integer("group_size")};
    bounded_product({{"tokens", s.rows}, {"hidden", s.N}});
    if (s.G > s.N || (s.G != 0 && s.N % s.G != 0)) {
      throw ParamError("group_size", "group_size " + std::to_string(s.G) + " does not divide hidden " + std::to_string(s.N));
    }
    if (s.G == 0 && s.N > 16384) {
      throw ParamError("hidden", "hidden " + std::to_string(s.N) + " in one group is more than 16384 (give group_size)");
    }
    s.rms = p.boolean("is_rms_norm");
    s.gate = !p.boolean("gate") ? NormGate::none : p.boolean("norm_before_gate") ? NormGate::after_norm : NormGate::before_norm;
    s.bias = p.boolean("bias");
    s.dtype = dtype_from_name("dtype", p.text("dtype"));
    s.wdtype = p.text("weight_dtype") == "f32" ? DType::f32 : s.dtype;
    return std::make_unique<NormCase>(s);
  };
  return spec;
}

}  // namespace

void register_norm_cases(Registry& r) {
  r.add_op(layer_norm_op());
  std::vector<Spec> all = qwen3_next();
  all.push_back(Spec{4096, 4096, 0, false, NormGate::after_norm, true});               // LayerNorm, bias, one group
  all.push_back(Spec{4096, 4096, 128, true, NormGate::before_norm});                  // Mamba-2 style: gate first
  all.push_back(Spec{4096, 8192, 0, true, NormGate::none});                           // plain RMSNorm, wide
  all.push_back(Spec{4096, 4096, 128, true, NormGate::after_norm, false, DType::bf16, DType::f32});  // f32 weight
  all.push_back(Spec{4096, 4096, 128, false, NormGate::after_norm, true, DType::f16, DType::f16});
  all.push_back(Spec{1024, 4096, 128, true, NormGate::after_norm, false, DType::f32, DType::f32});
  r.add("norm",
        "gated RMSNorm / LayerNorm (FLA layer_norm_fwd): Qwen3-Next GDN output norm (4096 wide, groups of 128, SiLU "
        "gate) at 1 / 64 / 4096 / 16384 tokens, LayerNorm with bias, gate before the norm, no gate, f32 weights, "
        "f16 and f32",
        true, make(all));
  r.add("qwen3-next-80b", "GDN output norm (4096 wide, groups of 128, SiLU gate)", true,
        make(qwen3_next()));  // the set exists: appends
}

}  // namespace fuseops::cli
