// Case sets of the gated activations: check against the golden, and benchmark against the unfused two-kernel
// form (activation rounded to the storage dtype, then the product: what PyTorch eager computes).
#include <algorithm>
#include <cmath>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cases.h"
#include "fuseops/activation.h"
#include "fuseops/error.h"
#include "gpu.h"
#include "reference/activation.h"
#include "testing/compare.h"
#include "testing/host_tensor.h"
#include "testing/parallel.h"

namespace fuseops::cli {
namespace {

using detail::Act;
using testing::Fill;
using testing::HostTensor;

enum class Form { fused, split, backward };

struct Spec {
  Act act;
  Form form;
  int64_t rows, d;
  DType dtype;
  Fill fill;
};

GeluApproximate approx(Act a) { return a == Act::gelu_tanh ? GeluApproximate::tanh : GeluApproximate::none; }

std::string op_name(Act a, Form f) {
  const bool silu = a == Act::silu;
  switch (f) {
    case Form::fused: return silu ? "silu_and_mul" : a == Act::gelu ? "gelu_and_mul" : "gelu_tanh_and_mul";
    case Form::split: return silu ? "silu_and_mul_split" : a == Act::gelu ? "gelu_and_mul_split" : "gelu_and_mul_split(tanh)";
    case Form::backward:
      return silu ? "silu_and_mul_backward" : a == Act::gelu ? "gelu_and_mul_backward" : "gelu_and_mul_backward(tanh)";
  }
  return "?";
}

/// Calls the public op on views (host or device).
void run_op(const Spec& s, const std::vector<TensorView>& out, const std::vector<TensorView>& in, Stream stream) {
  switch (s.form) {
    case Form::fused:
      if (s.act == Act::silu) silu_and_mul(out[0], in[0], stream);
      else if (s.act == Act::gelu) gelu_and_mul(out[0], in[0], GeluApproximate::none, stream);
      else gelu_tanh_and_mul(out[0], in[0], stream);
      return;
    case Form::split:
      if (s.act == Act::silu) silu_and_mul_split(out[0], in[0], in[1], stream);
      else gelu_and_mul_split(out[0], in[0], in[1], approx(s.act), stream);
      return;
    case Form::backward:
      if (s.act == Act::silu) silu_and_mul_backward(out[0], out[1], in[0], in[1], in[2], stream);
      else gelu_and_mul_backward(out[0], out[1], in[0], in[1], in[2], approx(s.act), stream);
      return;
  }
}

class ActivationBench : public BenchProblem {
 public:
  explicit ActivationBench(const Spec& s) : s_(s) {}
  std::size_t set_bytes() const override { return elems_per_set() * dtype_size(s_.dtype); }
  double bytes() const override {
    return static_cast<double>((s_.form == Form::backward ? 5 : 3) * s_.rows * s_.d * dtype_size(s_.dtype));
  }
  void allocate(int sets) override {
    const int64_t n = s_.rows * s_.d;
    for (int k = 0; k < sets; ++k) {
      gpu::Buffer b(set_bytes());
      // inputs first (random), outputs and the baseline's intermediate after them
      const int64_t inputs = s_.form == Form::backward ? 3 * n : 2 * n;
      gpu::fill_random(b.get(), s_.dtype, inputs, 1000 + k);
      sets_.push_back(std::move(b));
    }
  }
  void run(int set, void* stream) override {
    std::vector<TensorView> out, in;
    views(set, out, in);
    run_op(s_, out, in, Stream(stream));
  }
  bool run_baseline(int set, void* stream) override {
    char* base = static_cast<char*>(sets_[set].get());
    const int64_t n = s_.rows * s_.d, es = static_cast<int64_t>(dtype_size(s_.dtype));
    const int act = static_cast<int>(s_.act);
    if (s_.form == Form::backward) {
      gpu::unfused_act_and_mul_backward(act, s_.dtype, base + 3 * n * es, base + 4 * n * es, base, base + n * es,
                                        base + 2 * n * es, s_.rows, s_.d, stream);
    } else if (s_.form == Form::fused) {
      // input [rows, 2d] at 0, out [rows, d] at 2n, tmp [rows, d] at 3n
      gpu::unfused_act_and_mul(act, s_.dtype, base + 2 * n * es, base, base + s_.d * es, base + 3 * n * es, s_.rows,
                               s_.d, s_.d, 2 * s_.d, 2 * s_.d, stream);
    } else {
      gpu::unfused_act_and_mul(act, s_.dtype, base + 2 * n * es, base, base + n * es, base + 3 * n * es, s_.rows,
                               s_.d, s_.d, s_.d, s_.d, stream);
    }
    return true;
  }

 private:
  std::size_t elems_per_set() const {
    const int64_t n = s_.rows * s_.d;
    return static_cast<std::size_t>(s_.form == Form::backward ? 5 * n : 4 * n);  // fwd: in 2n, out n, tmp n
  }
  void views(int set, std::vector<TensorView>& out, std::vector<TensorView>& in) const {
    char* base = static_cast<char*>(sets_[set].get());
    const int64_t n = s_.rows * s_.d, es = static_cast<int64_t>(dtype_size(s_.dtype));
    const Device dev = Device::cuda(0);
    auto mat = [&](int64_t offset_elems, int64_t cols) {
      return TensorView(base + offset_elems * es, s_.dtype, dev, {s_.rows, cols});
    };
    if (s_.form == Form::fused) {
      in = {mat(0, 2 * s_.d)};
      out = {mat(2 * n, s_.d)};
    } else if (s_.form == Form::split) {
      in = {mat(0, s_.d), mat(n, s_.d)};
      out = {mat(2 * n, s_.d)};
    } else {
      in = {mat(0, s_.d), mat(n, s_.d), mat(2 * n, s_.d)};
      out = {mat(3 * n, s_.d), mat(4 * n, s_.d)};
    }
  }
  Spec s_;
  std::vector<gpu::Buffer> sets_;
};

class ActivationCase : public OpCase {
 public:
  explicit ActivationCase(const Spec& s) : s_(s) {
    family = "activation";
    op = op_name(s.act, s.form);
    shape = std::to_string(s.rows) + "x" + std::to_string(s.d);
    baseline = "unfused";
    dtype = s.dtype;
    rows = s.rows;
    decode = s.rows <= 64;
  }

  CheckOutcome check(Device device, int64_t nrows, uint64_t seed) const override {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t d = s_.d;
    std::vector<HostTensor> in, out;
    if (s_.form == Form::fused) {
      in.emplace_back(s_.dtype, std::vector<int64_t>{nrows, 2 * d});
    } else {
      for (int k = 0; k < (s_.form == Form::split ? 2 : 3); ++k) in.emplace_back(s_.dtype, std::vector<int64_t>{nrows, d});
    }
    for (int k = 0; k < (s_.form == Form::backward ? 2 : 1); ++k) out.emplace_back(s_.dtype, std::vector<int64_t>{nrows, d});
    for (std::size_t k = 0; k < in.size(); ++k) testing::fill_random_seeded(in[k], s_.fill, seed + 17 * k);
    for (HostTensor& o : out) o.poison();

    if (device.is_cuda()) {
      std::vector<std::unique_ptr<testing::DeviceTensor>> din, dout;
      std::vector<TensorView> vin, vout;
      for (const HostTensor& h : in) {
        din.push_back(std::make_unique<testing::DeviceTensor>(h, device.index));
        vin.push_back(din.back()->view());
      }
      for (const HostTensor& h : out) {
        dout.push_back(std::make_unique<testing::DeviceTensor>(h, device.index));
        vout.push_back(dout.back()->view());
      }
      run_op(s_, vout, vin, Stream());
      testing::device_synchronize(device.index);
      for (std::size_t k = 0; k < out.size(); ++k) dout[k]->copy_to(out[k]);
    } else {
      std::vector<TensorView> vin, vout;
      for (const HostTensor& h : in) vin.push_back(h.view());
      for (const HostTensor& h : out) vout.push_back(h.view());
      run_op(s_, vout, vin, Stream());
    }

    const testing::Tolerance tol = testing::Tolerance::for_dtype(s_.dtype, 16);
    const int64_t block = std::max<int64_t>(1, 65536 / std::max<int64_t>(1, d));
    const int64_t chunks = (nrows + block - 1) / block;
    std::vector<std::vector<testing::ComparisonAccumulator>> acc(
        static_cast<std::size_t>(chunks),
        std::vector<testing::ComparisonAccumulator>(out.size(), testing::ComparisonAccumulator(s_.dtype, tol, d)));
    testing::parallel_chunks(nrows, block, [&](int64_t k, int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = 0; c < d; ++c) {
          const int64_t i = r * d + c;
          if (s_.form == Form::backward) {
            const auto v = reference::act_and_mul_backward_at(s_.act, in[0].get(r, c), in[1].get(r, c), in[2].get(r, c));
            acc[k][0].add(i, out[0].get(r, c), v.dgate.value, v.dgate.sensitivity, v.dgate.flush_scale);
            acc[k][1].add(i, out[1].get(r, c), v.dup.value, v.dup.sensitivity, v.dup.flush_scale);
          } else {
            const double g = in[0].get(r, c);
            const double u = s_.form == Form::fused ? in[0].get(r, d + c) : in[1].get(r, c);
            const auto v = reference::act_and_mul_at(s_.act, g, u);
            acc[k][0].add(i, out[0].get(r, c), v.value, v.sensitivity, v.flush_scale);
          }
        }
      }
    });
    CheckOutcome result;
    result.pass = true;
    for (std::size_t o = 0; o < out.size(); ++o) {
      testing::ComparisonAccumulator total(s_.dtype, tol, d);
      for (auto& a : acc) total.merge(a[o]);
      const testing::Comparison c = total.finish();
      result.max_abs_error = std::max(result.max_abs_error, c.max_abs_error);
      result.rel_rms_error = std::max(result.rel_rms_error, c.rel_rms_error);
      if (!c.pass && result.pass) {
        result.pass = false;
        result.detail = (out.size() > 1 ? (o == 0 ? "dgate: " : "dup: ") : "") + c.detail;
      }
    }
    result.tolerance = tol.describe();
    result.rows_checked = nrows;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return result;
  }

  double time_cpu_us(int64_t nrows) const override {
    std::vector<HostTensor> in, out;
    const int64_t d = s_.d;
    in.emplace_back(s_.dtype, std::vector<int64_t>{nrows, s_.form == Form::fused ? 2 * d : d});
    for (int k = 1; k < (s_.form == Form::fused ? 1 : s_.form == Form::split ? 2 : 3); ++k) {
      in.emplace_back(s_.dtype, std::vector<int64_t>{nrows, d});
    }
    for (int k = 0; k < (s_.form == Form::backward ? 2 : 1); ++k) out.emplace_back(s_.dtype, std::vector<int64_t>{nrows, d});
    for (std::size_t k = 0; k < in.size(); ++k) testing::fill_random_seeded(in[k], Fill::normal, 1 + k);
    std::vector<TensorView> vin, vout;
    for (const HostTensor& h : in) vin.push_back(h.view());
    for (const HostTensor& h : out) vout.push_back(h.view());
    return median_wall_us([&] { run_op(s_, vout, vin, Stream()); });
  }

  std::unique_ptr<BenchProblem> bench() const override { return std::make_unique<ActivationBench>(s_); }

 private:
  Spec s_;
};

// ---------------------------------------------------------------------------------------------------------------
// The masked expert-major form: input [E, T_max, 2d], masked_m [E]; `busy` experts hold `busy_rows` valid rows, the
// others none. Bytes count the valid rows only (2d read + d written per row, and masked_m). Baseline: the dense
// silu_and_mul over all E * T_max rows, what a caller without the masked op runs.

struct MaskedSpec {
  Act act;
  int64_t E, T_max, d, busy, busy_rows;
  DType dtype;
};

/// masked_m: experts spread evenly over [0, E) are busy (busy_rows each, at most T_max), the rest 0.
std::vector<int32_t> masked_counts(const MaskedSpec& s, int64_t T_max) {
  std::vector<int32_t> m(static_cast<std::size_t>(s.E), 0);
  for (int64_t k = 0; k < s.busy; ++k) m[k * s.E / s.busy] = static_cast<int32_t>(std::min(s.busy_rows, T_max));
  return m;
}

void run_masked(const MaskedSpec& s, const TensorView& out, const TensorView& in, const TensorView& m, Stream st) {
  if (s.act == Act::silu) silu_and_mul_masked(out, in, m, st);
  else gelu_and_mul_masked(out, in, m, approx(s.act), st);
}

/// Valid rows of the case at T_max = T: busy experts x min(busy_rows, T).
int64_t valid_rows(const MaskedSpec& s, int64_t T) { return s.busy * std::min(s.busy_rows, T); }

/// Bytes the op moves at T_max = T: the valid rows read (2d) and written (d), and masked_m (int32).
double masked_bytes(const MaskedSpec& s, int64_t T) {
  return 3.0 * static_cast<double>(valid_rows(s, T)) * static_cast<double>(s.d) * dtype_size(s.dtype) + 4.0 * s.E;
}

class MaskedBench : public BenchProblem {
 public:
  explicit MaskedBench(const MaskedSpec& s) : s_(s) {}
  std::size_t set_bytes() const override { return 3 * rows() * s_.d * dtype_size(s_.dtype) + 4 * s_.E; }
  double bytes() const override { return masked_bytes(s_, s_.T_max); }
  void allocate(int sets) override {
    const std::vector<int32_t> m = masked_counts(s_, s_.T_max);
    for (int k = 0; k < sets; ++k) {
      gpu::Buffer b(set_bytes());
      gpu::fill_random(b.get(), s_.dtype, 2 * rows() * s_.d, 3000 + k);
      gpu::copy_to_device(counts(b), m.data(), m.size() * sizeof(int32_t));
      sets_.push_back(std::move(b));
    }
  }
  void run(int set, void* stream) override {
    const Device dev = Device::cuda(0);
    char* base = static_cast<char*>(sets_[set].get());
    const TensorView in(base, s_.dtype, dev, {s_.E, s_.T_max, 2 * s_.d});
    const TensorView out(base + 2 * rows() * s_.d * dtype_size(s_.dtype), s_.dtype, dev, {s_.E, s_.T_max, s_.d});
    run_masked(s_, out, in, TensorView(counts(sets_[set]), DType::i32, dev, {s_.E}), Stream(stream));
  }
  bool run_baseline(int set, void* stream) override {
    const Device dev = Device::cuda(0);
    char* base = static_cast<char*>(sets_[set].get());
    const TensorView in(base, s_.dtype, dev, {rows(), 2 * s_.d});
    const TensorView out(base + 2 * rows() * s_.d * dtype_size(s_.dtype), s_.dtype, dev, {rows(), s_.d});
    if (s_.act == Act::silu) silu_and_mul(out, in, Stream(stream));
    else gelu_and_mul(out, in, approx(s_.act), Stream(stream));
    return true;
  }

 private:
  int64_t rows() const { return s_.E * s_.T_max; }
  void* counts(const gpu::Buffer& b) const { return static_cast<char*>(b.get()) + 3 * rows() * s_.d * dtype_size(s_.dtype); }
  MaskedSpec s_;
  std::vector<gpu::Buffer> sets_;
};

class MaskedCase : public OpCase {
 public:
  explicit MaskedCase(const MaskedSpec& s) : s_(s) {
    family = "activation";
    op = s.act == Act::silu ? "silu_and_mul_masked" : s.act == Act::gelu ? "gelu_and_mul_masked" : "gelu_and_mul_masked(tanh)";
    shape = std::to_string(s.E) + "x" + std::to_string(s.T_max) + "x" + std::to_string(s.d) + ":" +
            std::to_string(s.busy) + "@" + std::to_string(s.busy_rows);
    baseline = "dense silu_and_mul over E*T_max rows";
    dtype = s.dtype;
    rows = s.T_max;  // check(rows) runs with T_max reduced to `rows`
    decode = s.busy * s.busy_rows <= 64;
  }

  /// The op at T_max = nrows on random inputs; the valid rows are compared with the golden, the others must keep
  /// their poison.
  CheckOutcome check(Device device, int64_t nrows, uint64_t seed) const override {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t T = nrows, d = s_.d;
    HostTensor in(s_.dtype, {s_.E * T, 2 * d}), out(s_.dtype, {s_.E * T, d}), m(DType::i32, {s_.E});
    testing::fill_random_seeded(in, Fill::normal, seed);
    out.poison();
    const std::vector<int32_t> counts = masked_counts(s_, T);
    std::copy(counts.begin(), counts.end(), static_cast<int32_t*>(m.data()));
    auto shaped = [&](const TensorView& v, int64_t w) {
      return TensorView(v.data, v.dtype, v.device, {s_.E, T, w});
    };
    if (device.is_cuda()) {
      testing::DeviceTensor din(in, device.index), dout(out, device.index), dm(m, device.index);
      run_masked(s_, shaped(dout.view(), d), shaped(din.view(), 2 * d), dm.view(), Stream());
      testing::device_synchronize(device.index);
      dout.copy_to(out);
    } else {
      run_masked(s_, shaped(out.view(), d), shaped(in.view(), 2 * d), m.view(), Stream());
    }
    check_errors();
    const testing::Tolerance tol = testing::Tolerance::for_dtype(s_.dtype, 16);
    // One accumulator per expert (in parallel), merged in expert order.
    std::vector<testing::ComparisonAccumulator> acc(static_cast<std::size_t>(s_.E),
                                                    testing::ComparisonAccumulator(s_.dtype, tol, d));
    std::vector<char> written(static_cast<std::size_t>(s_.E), 0);
    testing::parallel_chunks(s_.E, 1, [&](int64_t e, int64_t, int64_t) {
      for (int64_t r = 0; r < T; ++r) {
        const int64_t row = e * T + r;
        for (int64_t c = 0; c < d; ++c) {
          if (r < counts[e]) {
            const auto v = reference::act_and_mul_at(s_.act, in.get(row, c), in.get(row, d + c));
            acc[e].add(row * d + c, out.get(row, c), v.value, v.sensitivity, v.flush_scale);
          } else if (!std::isnan(out.get(row, c))) {
            written[e] = 1;
          }
        }
      }
    });
    testing::ComparisonAccumulator total(s_.dtype, tol, d);
    for (const auto& a : acc) total.merge(a);
    const bool untouched = std::find(written.begin(), written.end(), 1) == written.end();
    const testing::Comparison c = total.finish();
    CheckOutcome o;
    o.pass = c.pass && untouched;
    o.max_abs_error = c.max_abs_error;
    o.rel_rms_error = c.rel_rms_error;
    o.tolerance = tol.describe();
    o.detail = !untouched ? "a row past masked_m was written" : c.detail;
    o.rows_checked = T;
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return o;
  }

  double time_cpu_us(int64_t nrows) const override {
    HostTensor in(s_.dtype, {s_.E * nrows, 2 * s_.d}), out(s_.dtype, {s_.E * nrows, s_.d}), m(DType::i32, {s_.E});
    testing::fill_random_seeded(in, Fill::normal, 1);
    const std::vector<int32_t> counts = masked_counts(s_, nrows);
    std::copy(counts.begin(), counts.end(), static_cast<int32_t*>(m.data()));
    const TensorView vin(in.data(), s_.dtype, Device::cpu(), {s_.E, nrows, 2 * s_.d});
    const TensorView vout(out.data(), s_.dtype, Device::cpu(), {s_.E, nrows, s_.d});
    return median_wall_us([&] { run_masked(s_, vout, vin, m.view(), Stream()); });
  }

  std::unique_ptr<BenchProblem> bench() const override { return std::make_unique<MaskedBench>(s_); }

  /// The bytes of the valid rows at T_max = nrows (the work follows the valid rows, not T_max).
  double bytes_at(int64_t nrows) const override { return masked_bytes(s_, nrows); }
  double time_scale_to_full(int64_t nrows) const override {
    const int64_t ran = std::max<int64_t>(valid_rows(s_, nrows), 1);
    return static_cast<double>(valid_rows(s_, s_.T_max)) / static_cast<double>(ran);
  }

 private:
  MaskedSpec s_;
};

CaseFactory make_masked(std::vector<MaskedSpec> specs) { return case_factory<MaskedCase>(std::move(specs)); }

CaseFactory make(std::vector<Spec> specs) { return case_factory<ActivationCase>(std::move(specs)); }

std::vector<Spec> rows_of(Act a, Form f, int64_t d, std::initializer_list<int64_t> rows, DType t = DType::bf16) {
  std::vector<Spec> v;
  for (int64_t r : rows) v.push_back(Spec{a, f, r, d, t, Fill::normal});
  return v;
}

std::vector<Spec> concat(std::initializer_list<std::vector<Spec>> parts) {
  std::vector<Spec> v;
  for (const auto& p : parts) v.insert(v.end(), p.begin(), p.end());
  return v;
}

/// The case-file hook of one activation op (docs/cases.md): tokens, d, dtype, fill and, for the gelu forms that
/// take it, approximate.
OpSpec activation_op(Act act, Form form) {
  OpSpec spec;
  spec.family = "activation";
  spec.name = op_name(act, form);
  spec.help = "gated activation: x [tokens, 2d] (or gate and up [tokens, d]) -> out [tokens, d]";
  spec.params = {integer_param("tokens", "rows (tokens)"), integer_param("d", "output width (intermediate size)"),
                 dtype_param(),
                 text_param("fill", "input values: normal N(0,1), wide (1e-3..300), adversarial (inf, NaN, large)",
                            "normal", {"normal", "wide", "adversarial"})};
  const bool takes_approximate = act == Act::gelu;  // approximate: tanh runs the gelu_tanh form
  if (takes_approximate) spec.params.push_back(text_param("approximate", "gelu formula: none (erf) or tanh", "none", {"none", "tanh"}));
  spec.make = [act, form, takes_approximate](const CaseParams& p) -> std::unique_ptr<OpCase> {
    const int64_t rows = p.integer("tokens"), d = p.integer("d");
    bounded_product({{"tokens", rows}, {"d", d}}, 39);  // x is [tokens, 2d]
    const Act a = takes_approximate && p.text("approximate") == "tanh" ? Act::gelu_tanh : act;
    const std::string f = p.text("fill");
    const Fill fill = f == "wide" ? Fill::wide : f == "adversarial" ? Fill::adversarial : Fill::normal;
    return std::make_unique<ActivationCase>(Spec{a, form, rows, d, dtype_from_name("dtype", p.text("dtype")), fill});
  };
  return spec;
}

/// The case-file hook of the masked expert-major forms (docs/cases.md): input [num_experts, max_tokens, 2d] with
/// busy_experts experts (0: all) holding tokens_per_expert valid rows each, the others none.
OpSpec masked_op(Act act) {
  OpSpec spec;
  spec.family = "activation";
  spec.name = act == Act::silu ? "silu_and_mul_masked" : "gelu_and_mul_masked";
  spec.help = "masked expert-major gated activation: x [E, T_max, 2d], masked_m [E] -> out [E, T_max, d]";
  spec.params = {integer_param("num_experts", "E, local experts"),
                 integer_param("max_tokens", "T_max, rows per expert"),
                 integer_param("tokens_per_expert", "valid rows (masked_m) of each busy expert, <= max_tokens", std::nullopt, 0),
                 integer_param("d", "output width (expert intermediate size)"),
                 integer_param("busy_experts", "experts with valid rows, spread evenly (0: all)", 0, 0),
                 dtype_param()};
  if (act == Act::gelu) spec.params.push_back(text_param("approximate", "gelu formula: none (erf) or tanh", "none", {"none", "tanh"}));
  spec.make = [act](const CaseParams& p) -> std::unique_ptr<OpCase> {
    const int64_t E = p.integer("num_experts"), T = p.integer("max_tokens"), d = p.integer("d");
    const int64_t rows = p.integer("tokens_per_expert"), busy = p.integer("busy_experts") == 0 ? E : p.integer("busy_experts");
    bounded_product({{"max_tokens", T}, {"num_experts", E}, {"d", d}}, 39);
    if (T > INT32_MAX) throw ParamError("max_tokens", "max_tokens " + std::to_string(T) + " is more than 2^31 - 1");
    if (E > kMaxMaskedExperts) {
      throw ParamError("num_experts", "num_experts " + std::to_string(E) + " is more than " +
                                          std::to_string(kMaxMaskedExperts) + " (the masked forms' limit)");
    }
    if (rows > T) {
      throw ParamError("tokens_per_expert",
                       "tokens_per_expert " + std::to_string(rows) + " is more than max_tokens " + std::to_string(T));
    }
    if (busy > E) {
      throw ParamError("busy_experts", "busy_experts " + std::to_string(busy) + " is more than num_experts " + std::to_string(E));
    }
    const Act a = act == Act::gelu && p.text("approximate") == "tanh" ? Act::gelu_tanh : act;
    return std::make_unique<MaskedCase>(MaskedSpec{a, E, T, d, busy, rows, dtype_from_name("dtype", p.text("dtype"))});
  };
  return spec;
}

}  // namespace

void register_activation_cases(Registry& r) {
  for (Form f : {Form::fused, Form::split, Form::backward}) {
    r.add_op(activation_op(Act::silu, f));
    r.add_op(activation_op(Act::gelu, f));
  }
  r.add_op(activation_op(Act::gelu_tanh, Form::fused));
  r.add_op(masked_op(Act::silu));
  r.add_op(masked_op(Act::gelu));

  const Act silu = Act::silu, gelu = Act::gelu, tanh = Act::gelu_tanh;
  r.add("llama3-8b", "Llama-3-8B: MLP intermediate 14336 (SwiGLU), decode and prefill; training backward", true,
        make(concat({rows_of(silu, Form::fused, 14336, {1, 64, 4096, 8192}),
                     rows_of(silu, Form::backward, 14336, {4096})})));
  r.add("mixtral-8x7b", "Mixtral-8x7B: expert intermediate 14336 (SwiGLU)", true,
        make(rows_of(silu, Form::fused, 14336, {1, 64, 4096, 8192})));
  r.add("qwen3-next-80b",
        "Qwen3-Next-80B-A3B: MoE expert intermediate 512 (SwiGLU); 40960 rows = 4096 tokens x 10 experts", true,
        make(rows_of(silu, Form::fused, 512, {1, 64, 4096, 8192, 40960})));
  // DeepEP low-latency layout: 64 local experts, up to 4096 tokens each, expert intermediate 2048; 8 busy experts.
  const MaskedSpec moe_masked{silu, 64, 4096, 2048, 8, 4096, DType::bf16};
  r.add("moe-masked",
        "masked expert-major silu_and_mul (E 64, T_max 4096, d 2048): 8 experts full, the rest empty; all 64 at 64 "
        "rows; decode (8 experts x 1 row); gelu none / tanh (T_max 1024, 16 experts x 1000 rows)",
        true,
        make_masked({moe_masked, MaskedSpec{silu, 64, 4096, 2048, 64, 64, DType::bf16},
                     MaskedSpec{silu, 64, 4096, 2048, 8, 1, DType::bf16},
                     MaskedSpec{gelu, 64, 1024, 2048, 16, 1000, DType::bf16},
                     MaskedSpec{tanh, 64, 1024, 2048, 16, 1000, DType::f16}}));
  r.add("qwen3-next-80b", "masked silu_and_mul (E 64, T_max 4096, d 2048, 8 experts full)", true,
        make_masked({moe_masked}));
  r.add("qwen2.5-vl-vit", "Qwen2.5-VL vision MLP: intermediate 3420 (d % 8 != 0: 8-byte vectors)", true,
        make(rows_of(silu, Form::fused, 3420, {1, 64, 4096, 8192})));
  std::vector<Spec> flagos;
  for (Act a : {silu, gelu, tanh}) {
    for (auto [m, n] : std::vector<std::pair<int64_t, int64_t>>{
             {1, 14336}, {64, 14336}, {4096, 4096}, {8192, 8192}, {1024, 11008}, {2048, 13824}, {8192, 14336}}) {
      flagos.push_back(Spec{a, Form::fused, m, n, DType::bf16, Fill::normal});
    }
  }
  r.add("flagos", "FlagOS / FlagGems benchmark shapes: activations (M, N), x [M, 2N], silu and gelu none / tanh", true,
        make(flagos));
  std::vector<Spec> dtypes;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    for (Act a : {silu, gelu, tanh}) {
      for (Form f : {Form::fused, Form::split, Form::backward}) {
        dtypes.push_back(Spec{a, f, 64, 3420, t, Fill::wide});
        dtypes.push_back(Spec{a, f, 33, 1001, t, Fill::adversarial});
      }
      dtypes.push_back(Spec{a, Form::fused, 4096, 4096, t, Fill::normal});
    }
  }
  r.add("activation-dtypes",
        "every activation op and form in f32 / f16 / bf16, odd widths, wide and adversarial (inf, NaN) values", false,
        make(dtypes));
}

}  // namespace fuseops::cli
