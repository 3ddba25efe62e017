// Case sets of the GDN intra-chunk stage (docs/ops/gdn.md): chunk_gated_delta_rule_fwd_kkt_solve on the anchor
// shapes of issue 4 (FLA's published benchmark shapes) and on Qwen3-Next-80B. check() runs the fused op and our unfused chain (kkt into
// an f32 scratch, then solve_tril) on realistic inputs (L2-normalised keys, g = chunk-local cumsum of log-sigmoid
// decays, beta = sigmoid), requires them to be byte-identical, and compares the fused result with the float64 golden
// (element bounds and the relative-RMS criterion). bench() times the fused op against the unfused chain.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cases.h"
#include "fuseops/error.h"
#include "fuseops/gdn.h"
#include "gpu.h"
#include "reference/gdn.h"
#include "testing/compare.h"
#include "testing/host_tensor.h"
#include "testing/parallel.h"

namespace fuseops::cli {
namespace {

using testing::HostTensor;

struct Spec {
  int64_t B = 1, T = 0, H = 1, HV = 1, K = 128, BT = 64;
  std::vector<int64_t> seqlens;  ///< varlen (B = 1, T = the sum) when non-empty
  DType dtype = DType::bf16;     ///< k, beta and the output (chunk_local_cumsum: g)
  bool reverse = false;          ///< chunk_local_cumsum
  double scale = 1.0;            ///< chunk_local_cumsum
  std::string label;
  bool varlen() const { return !seqlens.empty(); }
};

Spec fixed(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K) {
  Spec s;
  s.B = B;
  s.T = T;
  s.H = H;
  s.HV = HV;
  s.K = K;
  s.label = std::to_string(B) + "x" + std::to_string(T) + "x" + std::to_string(H) + "x" + std::to_string(K);
  if (HV != H) s.label += ",hv" + std::to_string(HV);
  return s;
}

Spec varlen(std::vector<int64_t> seqlens, int64_t H, int64_t HV, int64_t K) {
  Spec s = fixed(1, 0, H, HV, K);
  for (int64_t l : seqlens) s.T += l;
  s.label = std::to_string(seqlens.size()) + "seq:" + std::to_string(s.T) + "x" + std::to_string(H) + "x" +
            std::to_string(K) + (HV != H ? ",hv" + std::to_string(HV) : "");
  s.seqlens = std::move(seqlens);
  return s;
}

/// The case at `rows` tokens at most (reduced CPU runs): varlen keeps the sequences cut with their structure kept
/// (seqlens_reduced); fixed length keeps B and shortens T while each batch row keeps a chunk (min(T, BT) tokens),
/// else keeps the first max(2, rows / chunk) batch rows at rows / that many tokens each (a model's batch of 256
/// sequences kept one token per row, which leaves no pair of tokens in a chunk to check).
Spec reduced(const Spec& s, int64_t rows) {
  const int64_t chunk = std::min(s.T, s.BT);
  if (s.varlen() || rows >= s.B * s.T || chunk == 0 || rows / s.B >= chunk) return reduced_tokens(s, rows);
  Spec r = s;
  r.B = std::min(s.B, std::max<int64_t>(2, rows / chunk));
  r.T = std::min(s.T, std::max<int64_t>(1, rows / r.B));
  return r;
}

std::vector<int64_t> cu_of(const Spec& s) { return s.varlen() ? reference::cu_seqlens_of(s.seqlens) : std::vector<int64_t>{}; }

int64_t total_chunks(const Spec& s) {
  if (!s.varlen()) return s.B * ((s.T + s.BT - 1) / s.BT);
  int64_t n = 0;
  for (int64_t l : s.seqlens) n += (l + s.BT - 1) / s.BT;
  return n;
}

/// Realistic inputs, generated in parallel with per-block generators (the same values for any thread count).
struct HostInputs {
  HostTensor k, g, beta, cu;
  std::vector<int64_t> cu_values;
};

HostInputs make_inputs(const Spec& s, uint64_t seed) {
  HostInputs in;
  in.k = HostTensor(s.dtype, {s.B, s.T, s.H, s.K});
  in.beta = HostTensor(s.dtype, {s.B, s.T, s.HV});
  in.g = HostTensor(DType::f32, {s.B, s.T, s.HV});
  auto rng_for = [&](uint64_t stream, int64_t block) {
    return std::mt19937_64(seed ^ (0x9e3779b97f4a7c15ULL * (stream * 1000003ULL + static_cast<uint64_t>(block) + 1)));
  };
  testing::parallel_chunks(in.k.rows(), 2048, [&](int64_t blk, int64_t r0, int64_t r1) {
    std::mt19937_64 rng = rng_for(1, blk);
    std::normal_distribution<double> normal(0.0, 1.0);
    std::vector<double> row(static_cast<std::size_t>(s.K));
    for (int64_t r = r0; r < r1; ++r) {
      double n2 = 0;
      for (double& x : row) {
        x = normal(rng);
        n2 += x * x;
      }
      const double f = 1.0 / std::sqrt(n2);
      for (int64_t c = 0; c < s.K; ++c) in.k.set(r, c, static_cast<float>(row[c] * f));
    }
  });
  testing::parallel_chunks(in.beta.rows(), 4096, [&](int64_t blk, int64_t r0, int64_t r1) {
    std::mt19937_64 rng = rng_for(2, blk);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t h = 0; h < s.HV; ++h) in.beta.set(r, h, static_cast<float>(1.0 / (1.0 + std::exp(-normal(rng)))));
  });
  in.cu_values = cu_of(s);
  const std::vector<reference::GdnChunk> chunks = reference::gdn_chunks(s.B, s.T, s.BT, in.cu_values);
  testing::parallel_chunks(static_cast<int64_t>(chunks.size()), 64, [&](int64_t blk, int64_t c0, int64_t c1) {
    std::mt19937_64 rng = rng_for(3, blk);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (int64_t c = c0; c < c1; ++c) {
      const reference::GdnChunk& ch = chunks[c];
      for (int64_t h = 0; h < s.HV; ++h) {
        double sum = 0;  // chunk-local cumsum of log-sigmoid decays, natural log
        for (int64_t i = 0; i < ch.len; ++i) {
          const double x = normal(rng);
          sum += reference::log_sigmoid(x);
          in.g.set(ch.batch * s.T + ch.row0 + i, h, static_cast<float>(sum));
        }
      }
    }
  });
  if (s.varlen()) in.cu = testing::index_tensor(DType::i32, in.cu_values);
  return in;
}

/// The views of one input / output set (host or device memory).
struct Views {
  TensorView k, g, beta, cu, out, A32;
  bool varlen = false;
  void fused(int64_t BT, Stream stream) const {
    chunk_gated_delta_rule_fwd_kkt_solve(out, k, &g, &beta, BT, varlen ? &cu : nullptr, stream);
  }
  /// Our unfused chain: kkt into the f32 scratch, then solve_tril into `into`.
  void unfused(int64_t BT, const TensorView& into, Stream stream) const {
    chunk_scaled_dot_kkt_fwd(A32, k, &g, &beta, BT, varlen ? &cu : nullptr, stream);
    solve_tril(into, A32, varlen ? &cu : nullptr, stream);
  }
};

class GdnBench : public BenchProblem {
 public:
  explicit GdnBench(const Spec& s) : s_(s) {}
  std::size_t set_bytes() const override {
    const std::size_t es = dtype_size(s_.dtype), tokens = static_cast<std::size_t>(s_.B * s_.T);
    return tokens * (s_.H * s_.K * es + s_.HV * (4 + es) + s_.HV * s_.BT * (es + 4)) + 4 * (s_.seqlens.size() + 1);
  }
  /// k read once per key head, g (f32) and beta once per value head, the output written once.
  double bytes() const override {
    const double es = static_cast<double>(dtype_size(s_.dtype)), tokens = static_cast<double>(s_.B * s_.T);
    return tokens * (s_.H * s_.K * es + s_.HV * (4.0 + es) + s_.HV * s_.BT * es);
  }
  /// The Gram matrices: 2 BT^2 K per chunk and key head.
  double flops() const override {
    return 2.0 * static_cast<double>(total_chunks(s_)) * s_.H * s_.BT * s_.BT * s_.K;
  }
  void allocate(int sets) override {
    const HostInputs in = make_inputs(s_, 20261130);
    const std::vector<int64_t> shape = {s_.B, s_.T, s_.HV, s_.BT};
    for (int i = 0; i < sets; ++i) {
      Set set;
      set.k = std::make_unique<testing::DeviceTensor>(in.k);
      set.g = std::make_unique<testing::DeviceTensor>(in.g);
      set.beta = std::make_unique<testing::DeviceTensor>(in.beta);
      if (s_.varlen()) set.cu = std::make_unique<testing::DeviceTensor>(in.cu);
      set.out = gpu::Buffer(static_cast<std::size_t>(s_.B * s_.T * s_.HV * s_.BT) * dtype_size(s_.dtype));
      set.A32 = gpu::Buffer(static_cast<std::size_t>(s_.B * s_.T * s_.HV * s_.BT) * 4);
      const Device dev = Device::cuda(0);
      set.views.k = set.k->view();
      set.views.g = set.g->view();
      set.views.beta = set.beta->view();
      if (set.cu) set.views.cu = set.cu->view();
      set.views.varlen = s_.varlen();
      set.views.out = TensorView(set.out.get(), s_.dtype, dev, {s_.B, s_.T, s_.HV, s_.BT});
      set.views.A32 = TensorView(set.A32.get(), DType::f32, dev, {s_.B, s_.T, s_.HV, s_.BT});
      sets_.push_back(std::move(set));
    }
  }
  void run(int set, void* stream) override { sets_[set].views.fused(s_.BT, Stream(stream)); }
  bool run_baseline(int set, void* stream) override {
    sets_[set].views.unfused(s_.BT, sets_[set].views.out, Stream(stream));
    return true;
  }

 private:
  struct Set {
    std::unique_ptr<testing::DeviceTensor> k, g, beta, cu;
    gpu::Buffer out, A32;
    Views views;
  };
  Spec s_;
  std::vector<Set> sets_;
};

class KktSolveCase : public OpCase {
 public:
  explicit KktSolveCase(const Spec& s) : s_(s) {
    family = "gdn";
    op = "kkt_solve";
    shape = s.label;
    baseline = "unfused (kkt f32 + solve_tril)";
    dtype = s.dtype;
    rows = s.B * s.T;
    decode = false;
  }

  CheckOutcome check(Device device, int64_t nrows, uint64_t seed) const override {
    const auto t0 = std::chrono::steady_clock::now();
    const Spec s = reduced(s_, nrows);
    const HostInputs in = make_inputs(s, seed);
    const std::vector<int64_t> shape4 = {s.B, s.T, s.HV, s.BT};
    HostTensor fused(s.dtype, shape4), unfused(s.dtype, shape4), A32(DType::f32, shape4);
    fused.poison();
    unfused.poison();
    A32.poison();
    if (device.is_cuda()) {
      testing::DeviceTensor k(in.k, device.index), g(in.g, device.index), beta(in.beta, device.index),
          out(fused, device.index), base(unfused, device.index), a(A32, device.index);
      std::unique_ptr<testing::DeviceTensor> cu;
      if (s.varlen()) cu = std::make_unique<testing::DeviceTensor>(in.cu, device.index);
      const Views v{k.view(), g.view(), beta.view(), cu ? cu->view() : TensorView(), out.view(), a.view(), s.varlen()};
      v.fused(s.BT, Stream());
      v.unfused(s.BT, base.view(), Stream());
      testing::device_synchronize(device.index);
      out.copy_to(fused);
      base.copy_to(unfused);
    } else {
      const Views v{in.k.view(), in.g.view(), in.beta.view(), s.varlen() ? in.cu.view() : TensorView(), fused.view(),
                    A32.view(), s.varlen()};
      v.fused(s.BT, Stream());
      v.unfused(s.BT, unfused.view(), Stream());
    }
    check_errors();

    // The golden, one (chunk, value head) at a time, in parallel blocks merged in order.
    reference::KktInputs gi;
    gi.k = &in.k;
    gi.g = &in.g;
    gi.beta = &in.beta;
    gi.chunk_size = s.BT;
    gi.cu_seqlens = in.cu_values;
    const std::vector<reference::GdnChunk> chunks = reference::gdn_chunks(s.B, s.T, s.BT, in.cu_values);
    const testing::Tolerance tol = reference::gdn_tolerance(reference::GdnStage::kkt_solve, s.dtype, s.K, s.BT);
    const int64_t work = static_cast<int64_t>(chunks.size()) * s.HV, block = 32;
    const int64_t nblocks = (work + block - 1) / block;
    std::vector<testing::ComparisonAccumulator> acc(static_cast<std::size_t>(nblocks),
                                                    testing::ComparisonAccumulator(s.dtype, tol, s.BT));
    std::vector<double> err2(nblocks, 0.0), ref2(nblocks, 0.0);
    std::vector<int64_t> count(nblocks, 0), nonfinite(nblocks, 0);
    testing::parallel_chunks(work, block, [&](int64_t blk, int64_t w0, int64_t w1) {
      for (int64_t w = w0; w < w1; ++w) {
        const reference::GdnChunk& c = chunks[w / s.HV];
        const int64_t hv = w % s.HV;
        const reference::ChunkGolden gold = reference::kkt_solve_chunk(gi, c, hv);
        for (int64_t i = 0; i < c.len; ++i) {
          const int64_t r = (c.batch * s.T + c.row0 + i) * s.HV + hv;  // row of the [B*T*HV, BT] output
          for (int64_t j = 0; j < s.BT; ++j) {
            const double ref = j < c.len ? gold.X[i * c.len + j] : 0.0;
            const double sens = j < c.len ? gold.X_sens[i * c.len + j] : 0.0;
            const double o = fused.get(r, j);
            acc[blk].add(r * s.BT + j, o, ref, sens);
            if (!std::isfinite(o)) {
              ++nonfinite[blk];
              continue;
            }
            err2[blk] += (o - ref) * (o - ref);
            ref2[blk] += ref * ref;
            ++count[blk];
          }
        }
      }
    });
    testing::ComparisonAccumulator total(s.dtype, tol, s.BT);
    double e2 = 0, r2 = 0;
    int64_t n = 0, bad = 0;
    for (int64_t b = 0; b < nblocks; ++b) {
      total.merge(acc[b]);
      e2 += err2[b];
      r2 += ref2[b];
      n += count[b];
      bad += nonfinite[b];
    }
    const testing::Comparison c = total.finish();
    const double limit = reference::gdn_rel_rms_limit(s.dtype);
    const bool rms_ok = bad == 0 && std::sqrt(e2) <= limit * std::sqrt(r2) + tol.atol * std::sqrt(static_cast<double>(n));
    const bool same = fused.bytes() == 0 || std::memcmp(fused.data(), unfused.data(), fused.bytes()) == 0;

    CheckOutcome o;
    o.pass = c.pass && rms_ok && same;
    o.max_abs_error = c.max_abs_error;
    o.rel_rms_error = r2 > 0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
    char buf[64];
    o.tolerance = tol.describe() + ", ==unfused";
    if (!same) o.detail = "fused and unfused (kkt f32 + solve_tril) results differ in bytes";
    if (!c.pass) o.detail += (o.detail.empty() ? "" : "; ") + c.detail;
    if (!rms_ok) {
      std::snprintf(buf, sizeof buf, "relative RMS error above %.2e", limit);
      o.detail += (o.detail.empty() ? "" : "; ") + std::string(buf) + (bad ? " (non-finite outputs)" : "");
    }
    o.rows_checked = s.B * s.T;
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return o;
  }

  int64_t rows_at(int64_t nrows) const override {
    const Spec s = reduced(s_, nrows);
    return s.B * s.T;
  }
  double time_cpu_us(int64_t nrows) const override {
    const Spec s = reduced(s_, nrows);
    const HostInputs in = make_inputs(s, 1);
    HostTensor out(s.dtype, {s.B, s.T, s.HV, s.BT});
    const Views v{in.k.view(), in.g.view(), in.beta.view(), s.varlen() ? in.cu.view() : TensorView(), out.view(),
                  TensorView(), s.varlen()};
    return median_wall_us([&] { v.fused(s.BT, Stream()); });
  }

  std::unique_ptr<BenchProblem> bench() const override { return std::make_unique<GdnBench>(s_); }

 private:
  Spec s_;
};

// ---------------------------------------------------------------------------------------------------------------
// chunk_local_cumsum: g [B, T, HV] (log-sigmoid decays in the spec's dtype) -> out [B, T, HV] f32, compared with the
// float64 golden (element bounds of gdn_tolerance(cumsum) and the relative-RMS criterion). No built-in baseline.

struct CumsumInputs {
  HostTensor g, cu;
  std::vector<int64_t> cu_values;
};

CumsumInputs make_cumsum_inputs(const Spec& s, uint64_t seed) {
  CumsumInputs in;
  in.g = HostTensor(s.dtype, {s.B, s.T, s.HV});
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t r = 0; r < in.g.rows(); ++r) {
    for (int64_t h = 0; h < s.HV; ++h) {
      const double x = normal(rng);
      in.g.set(r, h, static_cast<float>(reference::log_sigmoid(x)));
    }
  }
  in.cu_values = cu_of(s);
  if (s.varlen()) in.cu = testing::index_tensor(DType::i32, in.cu_values);
  return in;
}

void run_cumsum(const Spec& s, const TensorView& out, const TensorView& g, const TensorView* cu, Stream stream) {
  chunk_local_cumsum(out, g, s.BT, s.varlen() ? cu : nullptr, s.reverse,
                     s.scale == 1.0 ? std::nullopt : std::optional<double>(s.scale), stream);
}

class CumsumBench : public BenchProblem {
 public:
  explicit CumsumBench(const Spec& s) : s_(s) {}
  std::size_t set_bytes() const override { return static_cast<std::size_t>(bytes()) + 4 * (s_.seqlens.size() + 1); }
  /// g read once, the f32 output written once.
  double bytes() const override {
    return static_cast<double>(s_.B * s_.T * s_.HV) * (static_cast<double>(dtype_size(s_.dtype)) + 4.0);
  }
  void allocate(int sets) override {
    const CumsumInputs in = make_cumsum_inputs(s_, 20261130);
    for (int i = 0; i < sets; ++i) {
      Set set;
      set.g = std::make_unique<testing::DeviceTensor>(in.g);
      if (s_.varlen()) set.cu = std::make_unique<testing::DeviceTensor>(in.cu);
      set.out = gpu::Buffer(static_cast<std::size_t>(s_.B * s_.T * s_.HV) * 4);
      sets_.push_back(std::move(set));
    }
  }
  void run(int set, void* stream) override {
    const Set& st = sets_[set];
    const TensorView out(st.out.get(), DType::f32, Device::cuda(0), {s_.B, s_.T, s_.HV});
    const TensorView cu = st.cu ? st.cu->view() : TensorView();
    run_cumsum(s_, out, st.g->view(), &cu, Stream(stream));
  }
  bool run_baseline(int, void*) override { return false; }

 private:
  struct Set {
    std::unique_ptr<testing::DeviceTensor> g, cu;
    gpu::Buffer out;
  };
  Spec s_;
  std::vector<Set> sets_;
};

class CumsumCase : public OpCase {
 public:
  explicit CumsumCase(const Spec& s) : s_(s) {
    family = "gdn";
    op = "chunk_local_cumsum";
    shape = s.label;
    dtype = s.dtype;
    rows = s.B * s.T;
  }

  CheckOutcome check(Device device, int64_t nrows, uint64_t seed) const override {
    const auto t0 = std::chrono::steady_clock::now();
    const Spec s = reduced(s_, nrows);
    const CumsumInputs in = make_cumsum_inputs(s, seed);
    HostTensor out(DType::f32, {s.B, s.T, s.HV});
    out.poison();
    if (device.is_cuda()) {
      testing::DeviceTensor g(in.g, device.index), o(out, device.index);
      std::unique_ptr<testing::DeviceTensor> cu;
      if (s.varlen()) cu = std::make_unique<testing::DeviceTensor>(in.cu, device.index);
      const TensorView cv = cu ? cu->view() : TensorView();
      run_cumsum(s, o.view(), g.view(), &cv, Stream());
      testing::device_synchronize(device.index);
      o.copy_to(out);
    } else {
      const TensorView cv = in.cu.view();
      run_cumsum(s, out.view(), in.g.view(), &cv, Stream());
    }
    check_errors();
    const reference::GdnGolden gold = reference::chunk_local_cumsum(in.g, s.BT, in.cu_values, s.reverse, s.scale);
    const testing::Tolerance tol = reference::gdn_tolerance(reference::GdnStage::cumsum, DType::f32, 0, s.BT);
    const testing::Comparison c = testing::compare(out, gold.value, gold.sensitivity, tol);
    const reference::RmsCheck rms = reference::gdn_rms_check(out, gold.value);
    CheckOutcome o;
    o.pass = c.pass && rms.pass;
    o.max_abs_error = c.max_abs_error;
    o.rel_rms_error = rms.rel_rms_error;
    o.tolerance = tol.describe();
    o.detail = !c.pass     ? c.detail
               : rms.pass  ? ""
               : rms.nonfinite > 0
                   ? std::to_string(rms.nonfinite) + " non-finite outputs where the golden is finite and in fp32's " +
                         "range (left out of the errors shown)"
                   : "relative RMS error above the limit";
    o.rows_checked = s.B * s.T;
    o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return o;
  }

  int64_t rows_at(int64_t nrows) const override {
    const Spec s = reduced(s_, nrows);
    return s.B * s.T;
  }
  double time_cpu_us(int64_t nrows) const override {
    const Spec s = reduced(s_, nrows);
    const CumsumInputs in = make_cumsum_inputs(s, 1);
    HostTensor out(DType::f32, {s.B, s.T, s.HV});
    const TensorView cv = in.cu.view();
    return median_wall_us([&] { run_cumsum(s, out.view(), in.g.view(), &cv, Stream()); });
  }

  std::unique_ptr<BenchProblem> bench() const override { return std::make_unique<CumsumBench>(s_); }

 private:
  Spec s_;
};

CaseFactory make(std::vector<Spec> specs) { return case_factory<KktSolveCase>(std::move(specs)); }

/// Qwen3-Next-80B-A3B linear attention: 16 key heads, 32 value heads, head dim 128.
std::vector<Spec> qwen3_next() { return {fixed(1, 4096, 16, 32, 128), fixed(1, 32768, 16, 32, 128)}; }

/// The Spec of a GDN hook's sequences and heads (H = 1 and K = 0 where the op has none: chunk_local_cumsum's g and
/// output are [B, T, HV], no row per head). The size bound counts the op's largest tensor: k [B, T, H, K] or the
/// output [B, T, HV, BT] when the op has a head dim, else g [B, T, HV].
Spec gdn_spec_of(const CaseParams& p, int64_t H, int64_t HV, int64_t K) {
  const Sequences q = sequences_of(p);
  Spec s = q.seqlens.empty() ? fixed(q.batch, q.seq_len, H, HV, std::max<int64_t>(K, 1))
                             : varlen(q.seqlens, H, HV, std::max<int64_t>(K, 1));
  s.BT = chunk_size_of(p);
  s.dtype = dtype_from_name("dtype", p.text("dtype"));
  // fixed length: seq_len and batch as two factors, so that the message shows each value under its own name
  std::vector<std::pair<std::string, int64_t>> factors;
  if (q.seqlens.empty()) {
    factors = {{"seq_len", q.seq_len}, {"batch", q.batch}};
  } else {
    factors = {{"seqlens", q.tokens()}};
  }
  factors.emplace_back("num_v_heads", HV);
  if (K > 0) factors.emplace_back(K >= s.BT ? "head_k_dim" : "chunk_size", std::max(K, s.BT));
  bounded_product(factors);
  return s;
}

/// The case-file hook of chunk_gated_delta_rule_fwd_kkt_solve (docs/cases.md): fixed length (batch, seq_len) or
/// varlen (seqlens, batch 1), heads, head dim, chunk size, dtype.
OpSpec kkt_solve_op() {
  OpSpec spec;
  spec.family = "gdn";
  spec.name = "chunk_gated_delta_rule_fwd_kkt_solve";
  spec.aliases = {"kkt_solve"};
  spec.help = "GDN intra-chunk stage, fused kkt + solve_tril: k [B, T, H, K] -> (I + A)^-1 [B, T, HV, BT]";
  spec.params = sequence_params();
  for (ParamSpec q : {integer_param("num_heads", "H, key heads"),
                      integer_param("num_v_heads", "HV, value heads, a multiple of H (0: H)", 0, 0),
                      integer_param("head_k_dim", "K", 128, 1, 256), chunk_size_param(),
                      dtype_param()}) {
    spec.params.push_back(q);
  }
  spec.make = [](const CaseParams& p) -> std::unique_ptr<OpCase> {
    Spec s = gdn_spec_of(p, p.integer("num_heads"), value_heads_of(p), p.integer("head_k_dim"));
    if (s.BT != 64) s.label += ",bt" + std::to_string(s.BT);
    return std::make_unique<KktSolveCase>(s);
  };
  return spec;
}

/// The case-file hook of chunk_local_cumsum (docs/cases.md): sequences, value heads, chunk size, reverse, scale and
/// the dtype of g.
OpSpec cumsum_op() {
  OpSpec spec;
  spec.family = "gdn";
  spec.name = "chunk_local_cumsum";
  spec.help = "chunk-local cumsum of the log-decays: g [B, T, HV] -> f32 [B, T, HV], restarting every chunk";
  spec.params = sequence_params();
  for (ParamSpec q : {integer_param("num_v_heads", "HV, value heads"), chunk_size_param(),
                      bool_param("reverse", "sum from t to the chunk's end", false),
                      ParamSpec{"scale", ParamKind::number, "multiplies the sums", 1.0, {}, 0, INT64_MAX},
                      dtype_param("f32")}) {
    spec.params.push_back(q);
  }
  spec.make = [](const CaseParams& p) -> std::unique_ptr<OpCase> {
    Spec s = gdn_spec_of(p, 1, p.integer("num_v_heads"), 0);
    s.reverse = p.boolean("reverse");
    s.scale = p.checkable_scale("scale", "sums");
    const std::string seqs = s.varlen() ? std::to_string(s.seqlens.size()) + "seq:" + std::to_string(s.T)
                                        : std::to_string(s.B) + "x" + std::to_string(s.T);
    s.label = seqs + "x" + std::to_string(s.HV) + (s.BT != 64 ? ",bt" + std::to_string(s.BT) : "") +
              (s.reverse ? ",rev" : "") + (s.scale != 1.0 ? ",x" + value_text(ParamValue{s.scale}) : "");
    return std::make_unique<CumsumCase>(s);
  };
  return spec;
}

}  // namespace

void register_gdn_cases(Registry& r) {
  r.add_op(kkt_solve_op());
  r.add_op(cumsum_op());

  std::vector<Spec> anchors;
  for (auto [B, T, H] : std::vector<std::array<int64_t, 3>>{{1, 256, 8},    {1, 512, 8},    {1, 1024, 8},
                                                            {1, 2048, 8},   {2, 2048, 4},   {1, 4096, 4},
                                                            {1, 8192, 2},   {1, 8192, 4},   {1, 8192, 8},
                                                            {1, 8192, 16},  {1, 16384, 8},  {2, 16384, 16},
                                                            {2, 16384, 32}}) {
    anchors.push_back(fixed(B, T, H, H, 128));
  }
  for (const Spec& s : qwen3_next()) anchors.push_back(s);
  anchors.push_back(varlen({1, 63, 64, 65, 500, 1000, 2047, 4096}, 16, 32, 128));
  r.add("gdn-kkt-solve",
        "GDN intra-chunk stage (kkt + solve_tril, fused), chunk 64, bf16: the 13 FLA anchor shapes (B, T, H, K) with "
        "HV = H, Qwen3-Next-80B (H 16, HV 32) at T 4096 / 32768, a varlen batch of 8 sequences",
        true, make(anchors));
  r.add("qwen3-next-80b", "GDN kkt + solve_tril (H 16, HV 32, K 128) and chunk_local_cumsum at T 4096 / 32768", true,
        make(qwen3_next()));  // the set exists: appends
  r.add("qwen3-next-80b", "", true, [] {
    std::vector<std::unique_ptr<OpCase>> cases;
    for (const Spec& q : qwen3_next()) {
      Spec s = q;
      s.dtype = DType::f32;
      s.label = "1x" + std::to_string(s.T) + "x" + std::to_string(s.HV);
      cases.push_back(std::make_unique<CumsumCase>(s));
    }
    return cases;
  });
}

}  // namespace fuseops::cli
