// Case set `gdn-fwd-o`: the output stage chunk_fwd_o on its own (docs/ops/gdn-log.md "chunk_fwd_o kernel") on anchor
// shapes of `gdn-prefill` (K = V = 128, bf16, chunk 64), so that the stage's time can be set against its floors.
// check() compares o with the stage's float64 golden (reference::fwd_o_golden) from the same stored inputs, on at
// most kCheckTokens tokens; bench() counts the bytes the stage must move (q and k once per key head, v_new, the h of
// every chunk, g, o) and the causal multiply-adds. No in-binary baseline (FLA's chunk_fwd_o is timed inside its whole
// forward, bench/baselines/fla_gdn_forward.py).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cases.h"
#include "fuseops/error.h"
#include "fuseops/gdn.h"
#include "fuseops/gdn_forward.h"
#include "gpu.h"
#include "reference/gdn.h"
#include "reference/gdn_forward.h"
#include "testing/host_tensor.h"

namespace fuseops::cli {
namespace {

using testing::HostTensor;

constexpr int64_t kCheckTokens = 2048;  ///< the golden costs ~HV (K V + BT (K + V)) double flops per token

struct Spec {
  int64_t B = 1, T = 0, H = 16, HV = 64, K = 128, V = 128, BT = 64;
  std::vector<int64_t> seqlens;  ///< varlen (B = 1) when non-empty
  DType dtype = DType::bf16;
  std::string label;
  bool varlen() const { return !seqlens.empty(); }
  int64_t N() const { return varlen() ? static_cast<int64_t>(seqlens.size()) : B; }
  int64_t NS() const { return gdn_chunk_slots(T, N(), BT, varlen()); }
  /// Chunks of all sequences (the states h the stage reads).
  int64_t chunks() const {
    if (!varlen()) return B * ((T + BT - 1) / BT);
    int64_t n = 0;
    for (int64_t l : seqlens) n += (l + BT - 1) / BT;
    return n;
  }
};

Spec stage(int64_t H, int64_t HV, std::vector<int64_t> seqlens, const std::string& lens) {
  Spec s;
  s.H = H;
  s.HV = HV;
  s.T = std::accumulate(seqlens.begin(), seqlens.end(), int64_t{0});
  if (seqlens.size() > 1) s.seqlens = std::move(seqlens);
  s.label = std::to_string(H) + "/" + std::to_string(HV) + ":" + lens;
  return s;
}

/// Host inputs: q, k, v_new, h normal in the dtype; g the chunk-local cumsum (f32, by the library's CPU backend) of
/// log-sigmoid decays.
struct Inputs {
  HostTensor q, k, v_new, h, g, cu;
  std::vector<int64_t> cu_values;
};

Inputs make_inputs(const Spec& s, uint64_t seed) {
  Inputs in;
  in.q = HostTensor(s.dtype, {s.B, s.T, s.H, s.K});
  in.k = HostTensor(s.dtype, {s.B, s.T, s.H, s.K});
  in.v_new = HostTensor(s.dtype, {s.B, s.T, s.HV, s.V});
  in.h = HostTensor(s.dtype, {s.B, s.NS(), s.HV, s.K, s.V});
  testing::fill_random_seeded(in.q, testing::Fill::normal, seed ^ 1);
  testing::fill_random_seeded(in.k, testing::Fill::normal, seed ^ 2);
  testing::fill_random_seeded(in.v_new, testing::Fill::normal, seed ^ 3);
  testing::fill_random_seeded(in.h, testing::Fill::normal, seed ^ 4);
  HostTensor raw(DType::f32, {s.B, s.T, s.HV});
  testing::fill_random_seeded(raw, testing::Fill::normal, seed ^ 5);
  for (int64_t r = 0; r < raw.rows(); ++r) {
    for (int64_t h = 0; h < s.HV; ++h) raw.set(r, h, static_cast<float>(reference::log_sigmoid(raw.get(r, h))));
  }
  in.g = HostTensor(DType::f32, {s.B, s.T, s.HV});
  if (s.varlen()) {
    in.cu_values = reference::cu_seqlens_of(s.seqlens);
    in.cu = testing::index_tensor(DType::i32, in.cu_values);
  }
  const TensorView cu = s.varlen() ? in.cu.view() : TensorView{};
  chunk_local_cumsum(in.g.view(), raw.view(), s.BT, s.varlen() ? &cu : nullptr);
  return in;
}

/// The inputs in the order run_stage() takes their views (cu_seqlens only when varlen).
std::vector<const HostTensor*> tensors(const Spec& s, const Inputs& in) {
  std::vector<const HostTensor*> t = {&in.q, &in.k, &in.v_new, &in.h, &in.g};
  if (s.varlen()) t.push_back(&in.cu);
  return t;
}

/// Runs chunk_fwd_o with scale K^-0.5 on views of the inputs (host or device) into o.
void run_stage(const Spec& s, const TensorView& o, const std::vector<TensorView>& in, Stream stream) {
  const TensorView g = in[4];
  chunk_fwd_o(o, in[0], in[1], in[2], in[3], &g, 1.0 / std::sqrt(static_cast<double>(s.K)), s.BT,
              s.varlen() ? &in[5] : nullptr, stream);
}

std::vector<TensorView> host_views(const Spec& s, const Inputs& in) {
  std::vector<TensorView> v;
  for (const HostTensor* t : tensors(s, in)) v.push_back(t->view());
  return v;
}

/// Device copies of the inputs (kept alive in `keep`) and their views.
std::vector<TensorView> device_views(const Spec& s, const Inputs& in, int device,
                                     std::vector<std::unique_ptr<testing::DeviceTensor>>& keep) {
  std::vector<TensorView> v;
  for (const HostTensor* t : tensors(s, in)) {
    keep.push_back(std::make_unique<testing::DeviceTensor>(*t, device));
    v.push_back(keep.back()->view());
  }
  return v;
}

class FwdOBench : public BenchProblem {
 public:
  explicit FwdOBench(const Spec& s) : s_(s) {}
  std::size_t set_bytes() const override {
    const std::size_t es = dtype_size(s_.dtype), tok = static_cast<std::size_t>(s_.B * s_.T);
    return tok * (2 * s_.H * s_.K * es + 2 * s_.HV * s_.V * es + s_.HV * 4) +
           static_cast<std::size_t>(s_.B * s_.NS() * s_.HV * s_.K * s_.V) * es;
  }
  double bytes() const override {  // q, k, v_new, g, o once; h of every chunk once
    const double es = static_cast<double>(dtype_size(s_.dtype)), tok = static_cast<double>(s_.B * s_.T);
    return tok * (2.0 * s_.H * s_.K * es + 2.0 * s_.HV * s_.V * es + 4.0 * s_.HV) +
           static_cast<double>(s_.chunks() * s_.HV * s_.K * s_.V) * es;
  }
  double flops() const override {  // docs/ops/gdn-log.md "chunk_fwd_o kernel": 2 ((BT + 1) / 2 (K + V) + K V)
    const double K = static_cast<double>(s_.K), V = static_cast<double>(s_.V), BT = static_cast<double>(s_.BT);
    return static_cast<double>(s_.B * s_.T) * s_.HV * 2.0 * ((BT + 1.0) / 2.0 * (K + V) + K * V);
  }
  void allocate(int sets) override {
    const Inputs in = make_inputs(s_, 20261130);
    for (int i = 0; i < sets; ++i) {
      Set st;
      st.views = device_views(s_, in, 0, st.inputs);
      st.o = gpu::Buffer(static_cast<std::size_t>(s_.B * s_.T * s_.HV * s_.V) * dtype_size(s_.dtype));
      st.ov = TensorView(st.o.get(), s_.dtype, Device::cuda(0), {s_.B, s_.T, s_.HV, s_.V});
      sets_.push_back(std::move(st));
    }
  }
  void run(int set, void* stream) override { run_stage(s_, sets_[set].ov, sets_[set].views, Stream(stream)); }
  bool run_baseline(int, void*) override { return false; }

 private:
  struct Set {
    std::vector<std::unique_ptr<testing::DeviceTensor>> inputs;
    std::vector<TensorView> views;
    gpu::Buffer o;
    TensorView ov;
  };
  Spec s_;
  std::vector<Set> sets_;
};

class FwdOCase : public OpCase {
 public:
  explicit FwdOCase(const Spec& s) : s_(s) {
    family = "gdn";
    op = "chunk_fwd_o";
    shape = s.label;
    dtype = s.dtype;
    rows = s.B * s.T;
  }

  CheckOutcome check(Device device, int64_t nrows, uint64_t seed) const override {
    const auto t0 = std::chrono::steady_clock::now();
    const Spec s = reduced_tokens(s_, std::min(nrows, kCheckTokens));
    const Inputs in = make_inputs(s, seed);
    HostTensor o(s.dtype, {s.B, s.T, s.HV, s.V});
    o.poison();
    if (device.is_cuda()) {
      std::vector<std::unique_ptr<testing::DeviceTensor>> keep;
      const std::vector<TensorView> views = device_views(s, in, device.index, keep);
      testing::DeviceTensor od(o, device.index);
      run_stage(s, od.view(), views, Stream());
      testing::device_synchronize(device.index);
      od.copy_to(o);
    } else {
      run_stage(s, o.view(), host_views(s, in), Stream());
    }
    check_errors();
    const reference::StageInputs si{s.B, s.T, s.H, s.HV, s.K, s.V, s.BT, in.cu_values, in.g.to_double()};
    std::vector<double> ref;
    reference::fwd_o_golden(si, in.q.to_double(), in.k.to_double(), in.v_new.to_double(), in.h.to_double(),
                            1.0 / std::sqrt(static_cast<double>(s.K)), ref);
    const reference::ForwardCheck c = reference::gdn_forward_check(o, ref, s.dtype);
    CheckOutcome r;
    r.pass = c.pass;
    r.rel_rms_error = c.rel_rms_error;
    r.max_abs_error = c.max_abs_error;
    char buf[96];
    std::snprintf(buf, sizeof buf, "rel RMS <= %.0e (o %.2e)", c.limit, c.rel_rms_error);
    r.tolerance = buf;
    if (!r.pass) r.detail = c.nonfinite > 0 ? "non-finite outputs" : "relative RMS error above the limit";
    r.rows_checked = s.B * s.T;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  int64_t rows_at(int64_t nrows) const override {
    const Spec s = reduced_tokens(s_, nrows);
    return s.B * s.T;
  }
  double time_cpu_us(int64_t nrows) const override {
    const Spec s = reduced_tokens(s_, nrows);
    const Inputs in = make_inputs(s, 1);
    HostTensor o(s.dtype, {s.B, s.T, s.HV, s.V});
    const std::vector<TensorView> views = host_views(s, in);
    return median_wall_us([&] { run_stage(s, o.view(), views, Stream()); });
  }

  std::unique_ptr<BenchProblem> bench() const override { return std::make_unique<FwdOBench>(s_); }

 private:
  Spec s_;
};

}  // namespace

void register_gdn_fwd_o_cases(Registry& r) {
  const std::vector<Spec> specs = {stage(16, 64, {32768}, "32768"), stage(16, 64, {8192}, "8192"),
                                   stage(16, 64, {4096, 4096}, "2x4096"), stage(16, 32, {8192}, "8192"),
                                   stage(2, 8, {32768}, "32768")};
  r.add("gdn-fwd-o",
        "GDN output stage chunk_fwd_o alone (its tensor-core kernel), K = V = 128, bf16, chunk 64, anchor shapes of "
        "gdn-prefill (h_qk/h_v: sequence lengths)",
        false, case_factory<FwdOCase>(specs));
}

}  // namespace fuseops::cli
