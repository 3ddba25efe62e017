// Case sets of the GDN forward (docs/ops/gdn.md): `gdn-prefill` runs chunk_gated_delta_rule on the ten anchor
// configurations of FlashQLA's / FlashInfer's published benchmarks (K = V = 128, bf16, an initial state per sequence, l2 normalisation of
// q and k in the kernel) and on Qwen3-Next-80B, and chunk_gated_delta_rule_with_states (the chunk states too, vLLM's
// return_intermediate_states) on one anchor; `gdn-decode` runs one decode step (one token per sequence) of the
// serving form, fused_recurrent_gated_delta_rule_update on an f32 state pool, and of the fused sigmoid-gating form,
// for 1, 64 and 256 sequences of Qwen3-Next-80B (H 16, HV 32). check() compares o and the final state (and the chunk
// states) with the float64 token recurrence (relative RMS, docs/ops/gdn.md "Tolerances"); for long prefill cases the
// golden runs on four value heads (the recurrence costs ~4 K V flops per token and head in double). bench() times the
// op alone; the FLA baseline runs side by side from bench/baselines/fla_gdn_forward.py.
#include <algorithm>
#include <numeric>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cases.h"
#include "fuseops/error.h"
#include "fuseops/gdn_forward.h"
#include "gpu.h"
#include "reference/gdn.h"
#include "reference/gdn_forward.h"
#include "testing/host_tensor.h"
#include "testing/parallel.h"

namespace fuseops::cli {
namespace {

using testing::HostTensor;

struct Spec {
  int64_t B = 1, T = 0, H = 16, HV = 32, K = 128, V = 128, BT = 64;
  std::vector<int64_t> seqlens;  ///< varlen (B = 1) when non-empty
  bool decode = false;           ///< one token per sequence (B sequences, T = 1), state pool
  bool sigmoid_gating = false;   ///< decode with the fused gating form
  bool pool = true;              ///< decode: the serving form on a state pool (false: fused_recurrent_gated_delta_rule)
  bool beta_per_channel = false; ///< decode with given gates: beta [B, T, HV, V] (FLA's per-channel beta)
  /// prefill: chunk_gated_delta_rule_with_states, its chunk states h [B, NS, HV, K, V] checked too
  bool states = false;
  DType dtype = DType::bf16;
  std::string label;
  bool varlen() const { return !seqlens.empty(); }
  int64_t N() const { return varlen() ? static_cast<int64_t>(seqlens.size()) : B; }
  /// NS of h (gdn_chunk_slots)
  int64_t slots() const { return gdn_chunk_slots(T, N(), BT, varlen()); }
  /// Elements of h
  int64_t h_numel() const { return B * slots() * HV * K * V; }
  /// dtype of h (chunk_gated_delta_rule_intermediate_dtype)
  DType h_dtype() const { return chunk_gated_delta_rule_intermediate_dtype(dtype, K, V); }
};

Spec prefill(int64_t H, int64_t HV, std::vector<int64_t> seqlens) {
  Spec s;
  s.H = H;
  s.HV = HV;
  std::string lens;
  if (seqlens.size() == 1) {
    s.T = seqlens[0];
    lens = std::to_string(s.T);
  } else {
    for (int64_t l : seqlens) s.T += l;
    const bool same = std::all_of(seqlens.begin(), seqlens.end(), [&](int64_t l) { return l == seqlens[0]; });
    if (same) {
      lens = std::to_string(seqlens.size()) + "x" + std::to_string(seqlens[0]);
    } else if (seqlens.size() <= 8) {  // the lengths themselves, so that two batches get two labels
      for (int64_t l : seqlens) lens += (lens.empty() ? "[" : ",") + std::to_string(l);
      lens += "]";
    } else {
      lens = std::to_string(seqlens.size()) + "seq," + std::to_string(s.T) + "tok";
    }
    s.seqlens = std::move(seqlens);
  }
  s.label = std::to_string(H) + "/" + std::to_string(HV) + ":" + lens;
  return s;
}

Spec decode(int64_t N, int64_t H, int64_t HV, bool gating) {
  Spec s;
  s.B = N;
  s.T = 1;
  s.H = H;
  s.HV = HV;
  s.decode = true;
  s.sigmoid_gating = gating;
  s.label = std::to_string(H) + "/" + std::to_string(HV) + ":N" + std::to_string(N) + (gating ? ",gating" : "");
  return s;
}

/// At most `rows` tokens (reduced CPU runs): fixed length shortens T, varlen cuts every sequence (seqlens_reduced),
/// decode keeps the first sequences, each cut to its first `rows` tokens (fused_recurrent_gated_delta_rule's seq_len;
/// the serving forms have one token per sequence). The chunked forward keeps at least two whole chunks and a partial
/// one (`span`, 161 tokens at chunk 64), whatever `rows` says, so that the state carried from chunk to chunk is
/// checked: fixed length in each batch row kept (all of them where `rows` holds a span for each, else the first
/// max(2, rows / span)); varlen in its first non-empty sequence, the others sharing at least as
/// many tokens again (seqlens_reduced: those past the budget dropped, as there). Every sequence at `span` would take
/// CI's sanitizer run of check 1.5 minutes longer; the GoogleTest suite runs varlen over many chunks.
Spec reduced(const Spec& s, int64_t rows) {
  if (!s.decode) {
    const int64_t span = 2 * s.BT + s.BT / 2 + 1;
    if (!s.varlen()) {
      if (rows >= s.B * span) return reduced_tokens(s, rows);
      // fewer rows than a span per batch row: the first batch rows (at least two, so that the batch index is
      // checked), each of `span` tokens (all 256 rows of a model's batch took 4 GB and minutes of float64 golden)
      Spec r = s;
      r.B = std::min(s.B, std::max<int64_t>(2, rows / span));
      r.T = std::min(s.T, span);
      return r;
    }
    Spec r = s;
    r.seqlens = seqlens_reduced_first(s.seqlens, rows, span);
    r.T = std::accumulate(r.seqlens.begin(), r.seqlens.end(), int64_t{0});
    return r;
  }
  if (rows >= s.B * s.T) return s;
  Spec r = s;
  r.T = std::min(s.T, std::max<int64_t>(1, rows));
  r.B = std::max<int64_t>(1, rows / r.T);
  return r;
}

struct HostInputs {
  HostTensor q, k, v, g, beta, h0, cu, idx, A_log, dt_bias;  ///< decode with gating: g holds a, beta holds b
  std::vector<int64_t> cu_values;
  std::vector<double> g_gold, beta_gold;  ///< the gates the golden uses
};

HostInputs make_inputs(const Spec& s, uint64_t seed) {
  HostInputs in;
  in.q = HostTensor(s.dtype, {s.B, s.T, s.H, s.K});
  in.k = HostTensor(s.dtype, {s.B, s.T, s.H, s.K});
  in.v = HostTensor(s.dtype, {s.B, s.T, s.HV, s.V});
  testing::fill_random_seeded(in.q, testing::Fill::normal, seed ^ 1);
  testing::fill_random_seeded(in.k, testing::Fill::normal, seed ^ 2);
  testing::fill_random_seeded(in.v, testing::Fill::normal, seed ^ 3);
  in.g = HostTensor(DType::f32, {s.B, s.T, s.HV});
  const int64_t beta_cols = s.beta_per_channel ? s.V : 1;  // betas per (token, value head)
  in.beta = s.beta_per_channel ? HostTensor(s.dtype, {s.B, s.T, s.HV, s.V}) : HostTensor(s.dtype, {s.B, s.T, s.HV});
  in.h0 = HostTensor(DType::f32, {s.N(), s.HV, s.K, s.V});
  testing::fill_random_seeded(in.h0, testing::Fill::normal, seed ^ 4);
  in.A_log = HostTensor(DType::f32, {s.HV});
  in.dt_bias = HostTensor(DType::f32, {s.HV});
  std::mt19937_64 rng(seed ^ 5);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t h = 0; h < s.HV; ++h) {
    in.A_log.set(0, h, static_cast<float>(0.5 * normal(rng)));
    in.dt_bias.set(0, h, static_cast<float>(normal(rng)));
  }
  const int64_t n = in.g.rows() * s.HV;
  in.g_gold.resize(static_cast<std::size_t>(n));
  in.beta_gold.resize(static_cast<std::size_t>(n * beta_cols));
  testing::parallel_chunks(in.g.rows(), 4096, [&](int64_t blk, int64_t r0, int64_t r1) {
    std::mt19937_64 r(seed ^ (0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(blk + 7)));
    std::normal_distribution<double> nd(0.0, 1.0);
    for (int64_t row = r0; row < r1; ++row) {
      for (int64_t h = 0; h < s.HV; ++h) {
        const double x = nd(r), y = nd(r);
        in.g.set(row, h, static_cast<float>(s.sigmoid_gating ? x : reference::log_sigmoid(x)));
        if (s.beta_per_channel) {  // (given gates only) one beta per value column, rows of the [B T HV, V] view
          for (int64_t c = 0; c < s.V; ++c) {
            const double yc = c == 0 ? y : nd(r);
            in.beta.set(row * s.HV + h, c, static_cast<float>(1.0 / (1.0 + std::exp(-yc))));
            in.beta_gold[(row * s.HV + h) * s.V + c] = in.beta.get(row * s.HV + h, c);
          }
          in.g_gold[row * s.HV + h] = in.g.get(row, h);
          continue;
        }
        in.beta.set(row, h, static_cast<float>(s.sigmoid_gating ? y : 1.0 / (1.0 + std::exp(-y))));
        const double gv = in.g.get(row, h), bv = in.beta.get(row, h);
        if (s.sigmoid_gating) {
          const double a = gv + in.dt_bias.get(0, h);
          in.g_gold[row * s.HV + h] = -std::exp(static_cast<double>(in.A_log.get(0, h))) * (a > 20 ? a : std::log1p(std::exp(a)));
          in.beta_gold[row * s.HV + h] = 1.0 / (1.0 + std::exp(-bv));
        } else {
          in.g_gold[row * s.HV + h] = gv;
          in.beta_gold[row * s.HV + h] = bv;
        }
      }
    }
  });
  if (s.varlen()) {
    in.cu_values = reference::cu_seqlens_of(s.seqlens);
    in.cu = testing::index_tensor(DType::i32, in.cu_values);
  }
  in.idx = HostTensor(DType::i32, {s.N()});
  for (int64_t i = 0; i < s.N(); ++i) static_cast<int32_t*>(in.idx.data())[i] = static_cast<int32_t>(i);
  return in;
}

/// Views of one run (host or device memory); ws / out / ht / h / pool are outputs.
struct Views {
  TensorView q, k, v, g, beta, h0, cu, idx, A_log, dt_bias, o, ht, ws, h;
  void run(const Spec& s, Stream stream) const {
    if (s.decode && !s.pool) {  // the plain recurrence: h0 read, the final state written to ht
      TensorView final_state = ht;
      fused_recurrent_gated_delta_rule(o, &final_state, q, k, v, &g, &beta, std::nullopt, &h0, true, nullptr, stream);
      return;
    }
    if (s.decode) {  // the pool is h0 (read and written in place)
      if (s.sigmoid_gating) {
        fused_sigmoid_gating_delta_rule_update(o, h0, A_log, g, dt_bias, q, k, v, beta, std::nullopt, idx, nullptr,
                                               true, nullptr, 1.0, 20.0, stream);
      } else {
        fused_recurrent_gated_delta_rule_update(o, h0, q, k, v, &g, &beta, std::nullopt, idx, nullptr, true, nullptr,
                                                stream);
      }
      return;
    }
    TensorView final_state = ht;
    if (s.states) {
      chunk_gated_delta_rule_with_states(o, h, &final_state, q, k, v, g, beta, std::nullopt, &h0, true,
                                         s.varlen() ? &cu : nullptr, ws, s.BT, stream);
      return;
    }
    chunk_gated_delta_rule(o, &final_state, q, k, v, g, beta, std::nullopt, &h0, true, s.varlen() ? &cu : nullptr, ws,
                           s.BT, stream);
  }
};

/// h of a states case (the intermediate dtype), poisoned; an empty tensor otherwise.
HostTensor states_of(const Spec& s) {
  if (!s.states) return HostTensor(DType::f32, {0});
  HostTensor h(s.h_dtype(), {s.B, s.slots(), s.HV, s.K, s.V});
  h.poison();
  return h;
}

std::size_t workspace_bytes(const Spec& s) {
  if (s.decode) return 16;
  const TensorView q(nullptr, s.dtype, Device::cpu(), {s.B, s.T, s.H, s.K});
  const TensorView v(nullptr, s.dtype, Device::cpu(), {s.B, s.T, s.HV, s.V});
  const TensorView cu(nullptr, DType::i32, Device::cpu(), {static_cast<int64_t>(s.seqlens.size()) + 1});
  return chunk_gated_delta_rule_workspace_size(q, v, s.varlen() ? &cu : nullptr, true, s.BT, s.states);
}

/// Bytes of h (states cases; 0 otherwise).
std::size_t states_bytes(const Spec& s) {
  return s.states ? static_cast<std::size_t>(s.h_numel()) * dtype_size(s.h_dtype()) : 0;
}

class ForwardBench : public BenchProblem {
 public:
  explicit ForwardBench(const Spec& s) : s_(s) {}
  std::size_t set_bytes() const override {
    const std::size_t es = dtype_size(s_.dtype), tok = static_cast<std::size_t>(s_.B * s_.T);
    const std::size_t beta = static_cast<std::size_t>(s_.beta_per_channel ? s_.V : 1) * es;
    return tok * (2 * s_.H * s_.K * es + 2 * s_.HV * s_.V * es + s_.HV * (4 + beta)) +
           static_cast<std::size_t>(s_.N() * s_.HV * s_.K * s_.V) * 8 + workspace_bytes(s_) + states_bytes(s_);
  }
  double bytes() const override {  // q, k, v, g, beta, o once; the state read once and written once; h written once
    const double es = static_cast<double>(dtype_size(s_.dtype)), tok = static_cast<double>(s_.B * s_.T);
    const double beta = (s_.beta_per_channel ? static_cast<double>(s_.V) : 1.0) * es;
    return tok * (2.0 * s_.H * s_.K * es + 2.0 * s_.HV * s_.V * es + s_.HV * (4.0 + beta)) +
           2.0 * 4.0 * static_cast<double>(s_.N() * s_.HV * s_.K * s_.V) + static_cast<double>(states_bytes(s_));
  }
  double flops() const override {  // docs/ops/gdn.md "Performance": the chunked algorithm's multiply-adds x 2
    const double tok = static_cast<double>(s_.B * s_.T), K = static_cast<double>(s_.K), V = static_cast<double>(s_.V);
    if (s_.decode) return tok * s_.HV * 2.0 * 4.0 * K * V;
    const double BT = static_cast<double>(s_.BT);
    return tok * s_.HV * 2.0 * (BT * (3.0 * K + 2.0 * V) + 3.0 * K * V);
  }
  void allocate(int sets) override {
    const HostInputs in = make_inputs(s_, 20261130);
    const Device dev = Device::cuda(0);
    for (int i = 0; i < sets; ++i) {
      Set st;
      for (const HostTensor* t : {&in.q, &in.k, &in.v, &in.g, &in.beta, &in.h0, &in.idx, &in.A_log, &in.dt_bias}) {
        st.inputs.push_back(std::make_unique<testing::DeviceTensor>(*t));
      }
      if (s_.varlen()) st.inputs.push_back(std::make_unique<testing::DeviceTensor>(in.cu));
      st.o = gpu::Buffer(static_cast<std::size_t>(s_.B * s_.T * s_.HV * s_.V) * dtype_size(s_.dtype));
      st.ht = gpu::Buffer(static_cast<std::size_t>(s_.N() * s_.HV * s_.K * s_.V) * 4);
      const std::size_t wsb = workspace_bytes(s_);
      st.ws = gpu::Buffer(wsb);
      if (s_.states) st.h = gpu::Buffer(states_bytes(s_));
      Views& v = st.views;
      v.q = st.inputs[0]->view();
      v.k = st.inputs[1]->view();
      v.v = st.inputs[2]->view();
      v.g = st.inputs[3]->view();
      v.beta = st.inputs[4]->view();
      v.h0 = st.inputs[5]->view();
      v.idx = st.inputs[6]->view();
      v.A_log = st.inputs[7]->view();
      v.dt_bias = st.inputs[8]->view();
      if (s_.varlen()) v.cu = st.inputs[9]->view();
      v.o = TensorView(st.o.get(), s_.dtype, dev, {s_.B, s_.T, s_.HV, s_.V});
      v.ht = TensorView(st.ht.get(), DType::f32, dev, {s_.N(), s_.HV, s_.K, s_.V});
      v.ws = TensorView(st.ws.get(), DType::f32, dev, {static_cast<int64_t>(wsb / 4)});
      if (s_.states) v.h = TensorView(st.h.get(), s_.h_dtype(), dev, {s_.B, s_.slots(), s_.HV, s_.K, s_.V});
      sets_.push_back(std::move(st));
    }
  }
  void run(int set, void* stream) override { sets_[set].views.run(s_, Stream(stream)); }
  bool run_baseline(int, void*) override { return false; }

 private:
  struct Set {
    std::vector<std::unique_ptr<testing::DeviceTensor>> inputs;
    gpu::Buffer o, ht, ws, h;
    Views views;
  };
  Spec s_;
  std::vector<Set> sets_;
};

class ForwardCase : public OpCase {
 public:
  explicit ForwardCase(const Spec& s) : s_(s) {
    family = "gdn";
    op = !s.decode ? (s.states ? "chunk_gated_delta_rule_with_states" : "chunk_gated_delta_rule")
         : !s.pool ? "fused_recurrent_gated_delta_rule"
         : s.sigmoid_gating ? "fused_sigmoid_gating_delta_rule_update"
                            : "fused_recurrent_gated_delta_rule_update";
    shape = s.label;
    baseline = "";
    dtype = s.dtype;
    rows = s.B * s.T;
    decode = s.decode;
  }

  CheckOutcome check(Device device, int64_t nrows, uint64_t seed) const override {
    const auto t0 = std::chrono::steady_clock::now();
    const Spec s = reduced(s_, nrows);
    const HostInputs in = make_inputs(s, seed);
    HostTensor o(s.dtype, {s.B, s.T, s.HV, s.V}), ht(DType::f32, {s.N(), s.HV, s.K, s.V});
    o.poison();
    ht.poison();
    HostTensor pool = in.h0;  // decode: the pool, updated in place
    HostTensor h = states_of(s);
    const bool in_pool = s.decode && s.pool;
    const std::size_t wsb = workspace_bytes(s);
    HostTensor ws(DType::f32, {static_cast<int64_t>(wsb / 4 + 1)});
    auto views_of = [&](auto view) {
      Views v;
      v.q = view(in.q);
      v.k = view(in.k);
      v.v = view(in.v);
      v.g = view(in.g);
      v.beta = view(in.beta);
      v.idx = view(in.idx);
      v.A_log = view(in.A_log);
      v.dt_bias = view(in.dt_bias);
      if (s.varlen()) v.cu = view(in.cu);
      return v;
    };
    if (device.is_cuda()) {
      std::vector<std::unique_ptr<testing::DeviceTensor>> keep;
      auto up = [&](const HostTensor& t) {
        keep.push_back(std::make_unique<testing::DeviceTensor>(t, device.index));
        return keep.back()->view();
      };
      Views v = views_of(up);
      testing::DeviceTensor od(o, device.index), hd(ht, device.index), pd(in_pool ? pool : in.h0, device.index),
          wd(ws, device.index), sd(h, device.index);
      v.o = od.view();
      v.ht = hd.view();
      v.h0 = pd.view();
      v.ws = wd.view();
      v.h = sd.view();
      v.run(s, Stream());
      testing::device_synchronize(device.index);
      od.copy_to(o);
      hd.copy_to(ht);
      if (in_pool) pd.copy_to(pool);
      if (s.states) sd.copy_to(h);
    } else {
      Views v = views_of([](const HostTensor& t) { return t.view(); });
      v.o = o.view();
      v.ht = ht.view();
      v.h0 = in_pool ? pool.view() : in.h0.view();
      v.ws = ws.view();
      v.h = h.view();
      v.run(s, Stream());
    }
    check_errors();

    reference::RecurrenceInputs ri;
    ri.q = &in.q;
    ri.k = &in.k;
    ri.v = &in.v;
    ri.g = in.g_gold;
    ri.beta = in.beta_gold;
    ri.beta_per_channel = s.beta_per_channel;
    ri.h0 = &in.h0;
    ri.scale = 1.0 / std::sqrt(static_cast<double>(s.K));
    ri.l2norm = true;
    // the chunked op rounds the normalised q, k to its intermediate dtype (the input dtype, or f32 at small head dims)
    ri.round_normalized = !s.decode && chunk_gated_delta_rule_intermediate_dtype(s.dtype, s.K, s.V) == s.dtype;
    ri.cu_seqlens = in.cu_values;
    ri.chunk_size = s.states ? s.BT : 0;  // the chunk-start states, in h's slots
    const double cost = static_cast<double>(s.B * s.T) * s.HV * s.K * s.V;
    if (cost > 4e9 && s.HV > 4) ri.heads = {0, s.HV / 3, (2 * s.HV) / 3, s.HV - 1};  // long cases: four value heads
    const reference::RecurrenceGolden gold = reference::gated_delta_rule_recurrence(ri);
    const HostTensor& state = in_pool ? pool : ht;
    double max_abs = 0;
    // h: only the slots of a chunk are written (gdn_chunk_slots)
    const std::vector<bool> chunk_slot =
        s.states ? reference::chunk_slots_used(s.B, s.T, s.BT, in.cu_values) : std::vector<bool>();
    auto rms = [&](const HostTensor& out, const std::vector<double>& ref, int64_t inner, double& err,
                   bool slots = false) {
      double e2 = 0, r2 = 0;
      bool finite = true;
      for (std::size_t e = 0; e < ref.size(); ++e) {
        const int64_t i = static_cast<int64_t>(e), head = (i / inner) % s.HV;
        if (!ri.heads.empty() && std::find(ri.heads.begin(), ri.heads.end(), head) == ri.heads.end()) continue;
        if (slots && !chunk_slot[i / (inner * s.HV)]) continue;
        const double x = out.get(i / out.cols(), i % out.cols());
        finite = finite && std::isfinite(x);
        if (std::isfinite(x)) max_abs = std::max(max_abs, std::abs(x - ref[e]));
        e2 += (x - ref[e]) * (x - ref[e]);
        r2 += ref[e] * ref[e];
      }
      err = r2 > 0 ? std::sqrt(e2 / r2) : std::sqrt(e2);
      return finite;
    };
    double eo = 0, es = 0, eh = 0;
    const bool fo = rms(o, gold.o, s.V, eo), fs = rms(state, gold.final_state, s.K * s.V, es);
    const bool fh = !s.states || rms(h, gold.chunk_states, s.K * s.V, eh, /*slots=*/true);
    const double limit = reference::gdn_forward_rel_rms_limit(s.dtype);
    CheckOutcome r;
    r.pass = fo && fs && fh && eo <= limit && es <= limit && eh <= limit;
    r.rel_rms_error = std::max({eo, es, eh});
    r.max_abs_error = max_abs;
    char h_err[32] = "", buf[192];
    if (s.states) std::snprintf(h_err, sizeof h_err, ", h %.2e", eh);
    std::snprintf(buf, sizeof buf, "rel RMS <= %.0e (o %.2e, final_state %.2e%s%s)", limit, eo, es, h_err,
                  ri.heads.empty() ? "" : ", 4 heads");
    r.tolerance = buf;
    if (!r.pass) r.detail = (fo && fs && fh) ? "relative RMS error above the limit" : "non-finite outputs";
    r.rows_checked = s.B * s.T;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  int64_t rows_at(int64_t nrows) const override {
    const Spec s = reduced(s_, nrows);
    return s.B * s.T;
  }
  double time_cpu_us(int64_t nrows) const override {
    const Spec s = reduced(s_, nrows);
    const HostInputs in = make_inputs(s, 1);
    HostTensor o(s.dtype, {s.B, s.T, s.HV, s.V}), ht(DType::f32, {s.N(), s.HV, s.K, s.V}), pool = in.h0;
    HostTensor ws(DType::f32, {static_cast<int64_t>(workspace_bytes(s) / 4 + 1)}), h = states_of(s);
    Views v;
    v.q = in.q.view();
    v.k = in.k.view();
    v.v = in.v.view();
    v.g = in.g.view();
    v.beta = in.beta.view();
    v.idx = in.idx.view();
    v.A_log = in.A_log.view();
    v.dt_bias = in.dt_bias.view();
    if (s.varlen()) v.cu = in.cu.view();
    v.o = o.view();
    v.ht = ht.view();
    v.h0 = pool.view();
    v.ws = ws.view();
    v.h = h.view();
    // the pool is updated in place: its values change from run to run, not the work
    return median_wall_us([&] { v.run(s, Stream()); });
  }

  std::unique_ptr<BenchProblem> bench() const override { return std::make_unique<ForwardBench>(s_); }

 private:
  Spec s_;
};

CaseFactory make(std::vector<Spec> specs) { return case_factory<ForwardCase>(std::move(specs)); }

/// Heads and head dims of the GDN forward hooks.
std::vector<ParamSpec> head_params() {
  return {integer_param("num_heads", "H, query / key heads"),
          integer_param("num_v_heads", "HV, value heads, a multiple of H (0: H)", 0, 0),
          integer_param("head_k_dim", "K", 128, 1, 256), integer_param("head_v_dim", "V", 128, 1, 256)};
}

/// `as_seqlens`: the user gave the tokens as seqlens (a single sequence runs as fixed length but its errors name the
/// key the user wrote).
Spec with_heads(Spec s, const CaseParams& p, bool as_seqlens = false) {
  s.H = p.integer("num_heads");
  s.HV = value_heads_of(p);
  s.K = p.integer("head_k_dim");
  s.V = p.integer("head_v_dim");
  s.dtype = dtype_from_name("dtype", p.text("dtype"));
  // the tokens as the user gave them: seq_len x batch (fixed length; the decode op's one-token steps: batch), or the
  // total of seqlens; the first factor names the key an error points at
  std::vector<std::pair<std::string, int64_t>> rows;
  if (s.varlen() || as_seqlens) {
    rows.emplace_back("seqlens", s.B * s.T);
  } else {
    if (!s.decode || s.T > 1) rows.emplace_back("seq_len", s.T);
    rows.emplace_back("batch", s.B);
  }
  rows.emplace_back("num_v_heads", s.HV);
  rows.emplace_back("head_v_dim", std::max(s.K, s.V));
  bounded_product(rows);
  bounded_product({{"batch", s.N()}, {"num_v_heads", s.HV}, {"head_k_dim", s.K}, {"head_v_dim", s.V}}, 36);  // states
  return s;
}

/// The case-file hook of chunk_gated_delta_rule (docs/cases.md): fixed length (batch, seq_len) or varlen (seqlens),
/// heads, head dims, chunk size, dtype; an initial state per sequence, q / k l2-normalised in the kernel.
OpSpec chunk_op() {
  OpSpec spec;
  spec.family = "gdn";
  spec.name = "chunk_gated_delta_rule";
  spec.help = "GDN chunked forward (prefill): q, k [B, T, H, K], v [B, T, HV, V] -> o, final state [N, HV, K, V]";
  spec.params = sequence_params();
  for (const ParamSpec& q : head_params()) spec.params.push_back(q);
  spec.params.push_back(chunk_size_param());
  spec.params.push_back(dtype_param());
  spec.make = [](const CaseParams& p) -> std::unique_ptr<OpCase> {
    const Sequences q = sequences_of(p);
    Spec s = q.seqlens.empty() ? Spec{} : prefill(1, 1, q.seqlens);
    if (q.seqlens.empty()) {
      s.B = q.batch;
      s.T = q.seq_len;
    } else if (q.seqlens.size() == 1) {  // one sequence: prefill() made it fixed length
      s.T = q.seqlens[0];
    }
    s.BT = chunk_size_of(p);
    s = with_heads(s, p, !q.seqlens.empty());
    // fixed length B x T prints as BBxT (B8x1024): 8x1024 is the label of 8 sequences of 1024 tokens (varlen)
    const std::string lens = q.seqlens.empty() ? (s.B > 1 ? "B" + std::to_string(s.B) + "x" : "") + std::to_string(s.T)
                                               : s.label.substr(s.label.find(':') + 1);
    s.label = std::to_string(s.H) + "/" + std::to_string(s.HV) + ":" + lens + (s.K != 128 || s.V != 128 ?
              ",k" + std::to_string(s.K) + "v" + std::to_string(s.V) : "") + (s.BT != 64 ? ",bt" + std::to_string(s.BT) : "");
    return std::make_unique<ForwardCase>(s);
  };
  return spec;
}

/// The case-file hooks of the decode ops (docs/cases.md): `batch` sequences; fused_recurrent_gated_delta_rule runs
/// seq_len tokens of each from an initial state to a final state, the serving forms one token of each on a state
/// pool (the fused sigmoid gating computes g and beta from the raw projections).
OpSpec decode_op(bool pool, bool gating) {
  OpSpec spec;
  spec.family = "gdn";
  spec.name = !pool ? "fused_recurrent_gated_delta_rule"
              : gating ? "fused_sigmoid_gating_delta_rule_update" : "fused_recurrent_gated_delta_rule_update";
  spec.help = !pool ? "GDN token recurrence: q, k, v of batch sequences of seq_len tokens, initial -> final state"
                    : "GDN decode step of batch sequences (one token each) on an f32 state pool, in place";
  spec.params = {integer_param("batch", "N, sequences")};
  if (!pool) spec.params.push_back(integer_param("seq_len", "tokens per sequence", 1, 1));
  for (const ParamSpec& q : head_params()) spec.params.push_back(q);
  spec.params.push_back(dtype_param());
  if (!gating) {
    spec.params.push_back(bool_param("beta_per_channel", "beta [B, T, HV, V], one per value column (FLA)", false));
  }
  spec.make = [pool, gating](const CaseParams& p) -> std::unique_ptr<OpCase> {
    Spec s = decode(p.integer("batch"), p.integer("num_heads"), 1, gating);
    s.pool = pool;
    if (!pool) s.T = p.integer("seq_len");
    s.beta_per_channel = !gating && p.boolean("beta_per_channel");
    s = with_heads(s, p);
    s.label = std::to_string(s.H) + "/" + std::to_string(s.HV) + ":N" + std::to_string(s.B) +
              (s.T > 1 ? "x" + std::to_string(s.T) : "") + (gating ? ",gating" : "") +
              (s.beta_per_channel ? ",beta_v" : "") +
              (s.K != 128 || s.V != 128 ? ",k" + std::to_string(s.K) + "v" + std::to_string(s.V) : "");
    return std::make_unique<ForwardCase>(s);
  };
  return spec;
}

}  // namespace

void register_gdn_forward_cases(Registry& r) {
  r.add_op(chunk_op());
  r.add_op(decode_op(false, false));
  r.add_op(decode_op(true, false));
  r.add_op(decode_op(true, true));
  const std::vector<int64_t> eight_1k(8, 1024), eight_4k(8, 4096);
  std::vector<Spec> pre = {prefill(2, 8, {32768}),  prefill(2, 8, {8192}),        prefill(2, 8, {2048}),
                           prefill(2, 8, eight_1k), prefill(16, 64, {32768}),     prefill(16, 64, {8192}),
                           prefill(16, 64, {4096, 4096}), prefill(16, 32, {8192}), prefill(16, 32, eight_4k),
                           prefill(2, 8, {16384, 16384}), prefill(16, 32, {4096}),  prefill(16, 32, {32768})};
  // vLLM's return_intermediate_states: one forward that also writes the chunk states (varlen, the slots of 8
  // sequences; the same shape as the 2/8 [8 x 1024] row, so that bench shows what the states cost)
  Spec states = prefill(2, 8, eight_1k);
  states.states = true;
  states.label += ",states";
  pre.push_back(states);
  r.add("gdn-prefill",
        "GDN chunked forward chunk_gated_delta_rule, K = V = 128, bf16, chunk 64, initial state per sequence, q/k "
        "l2norm in kernel: the 10 FlashQLA / FlashInfer H200 anchor configurations (h_qk/h_v: sequence lengths) and "
        "Qwen3-Next-80B (16/32) at 4096 and 32768 tokens; chunk_gated_delta_rule_with_states (the chunk states too) "
        "at 2/8 8x1024",
        true, make(pre));
  std::vector<Spec> dec;
  for (int64_t n : {1, 64, 256}) dec.push_back(decode(n, 16, 32, false));
  dec.push_back(decode(256, 16, 32, true));
  Spec per_channel = decode(64, 16, 32, false);
  per_channel.beta_per_channel = true;
  per_channel.label += ",beta_v";
  dec.push_back(per_channel);
  r.add("gdn-decode",
        "GDN decode step (one token per sequence) on an f32 state pool, Qwen3-Next-80B (H 16, HV 32, K = V = 128), "
        "bf16: 1, 64 and 256 sequences; 256 with the fused sigmoid gating; 64 with FLA's per-channel beta",
        true, make(dec));
  std::vector<Spec> qwen = {prefill(16, 32, {4096}), decode(256, 16, 32, false)};
  r.add("qwen3-next-80b", "chunk_gated_delta_rule at 4096 tokens, decode of 256 sequences", true,
        make(qwen));  // appends to the existing set
}

}  // namespace fuseops::cli
