#include "testing/moe_run.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>

namespace fuseops::testing {
namespace {

/// A host tensor and, on a CUDA device, its device copy.
struct Placed {
  HostTensor host;
  std::unique_ptr<DeviceTensor> dev;
  Placed(HostTensor h, Device device) : host(std::move(h)) {
    if (device.is_cuda()) dev = std::make_unique<DeviceTensor>(host, device.index);
  }
  TensorView view() const { return dev ? dev->view() : host.view(); }
  HostTensor fetch() {
    if (dev) dev->copy_to(host);
    return host;
  }
};

HostTensor poisoned(DType dtype, std::vector<int64_t> shape) {
  HostTensor t(dtype, std::move(shape));
  t.poison();
  return t;
}

}  // namespace

void put_id(HostTensor& t, int64_t i, int64_t v) {
  i = i / t.cols() * t.row_pitch() + i % t.cols();
  if (t.dtype() == DType::i64) static_cast<int64_t*>(t.data())[i] = v;
  else static_cast<int32_t*>(t.data())[i] = static_cast<int32_t>(v);
}

const char* route_op_name(RouteOp op) {
  switch (op) {
    case RouteOp::topk_softmax: return "topk_softmax";
    case RouteOp::grouped_topk: return "grouped_topk";
    case RouteOp::moe_route: return "moe_route";
  }
  return "?";
}

std::string RouteProblem::describe() const {
  std::ostringstream os;
  os << route_op_name(op) << " " << dtype_name(dtype) << " T=" << T << " E=" << E << " k=" << k
     << (spec.scoring == MoeScoring::softmax ? " softmax" : " sigmoid") << " groups=" << spec.n_group << "/"
     << spec.topk_group << (spec.renormalize ? " renorm" : "") << " scale=" << spec.scale
     << (bias ? std::string(" bias ") + dtype_name(bias_dtype) : "") << " ids " << dtype_name(ids_dtype)
     << (row_pitch ? " pitch=" + std::to_string(row_pitch) : "") << (special_rows ? " special rows" : "");
  if (op == RouteOp::moe_route) os << " block_size=" << block_size;
  return os.str();
}

HostTensor make_logits(const RouteProblem& p, uint64_t seed) {
  HostTensor t(p.dtype, {p.T, p.E}, p.row_pitch);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (int64_t r = 0; r < p.T; ++r) {
    for (int64_t c = 0; c < p.E; ++c) t.set(r, c, normal(rng));
  }
  if (p.special_rows) {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < p.E; ++c) {
      if (p.T > 0) t.set(0, c, nan);                                        // all NaN
      if (p.T > 1) t.set(1, c, 0.25f);                                      // all equal
      if (p.T > 2) t.set(2, c, c % 5 == 0 ? nan : c % 7 == 1 ? inf : c % 3 == 0 ? -inf : normal(rng));
      if (p.T > 3) t.set(3, c, std::round(normal(rng)));                    // coarse values: many ties
      if (p.T > 4) t.set(4, c, c % 2 ? -inf : 1e30f);                       // overflowing magnitudes
    }
  }
  return t;
}

HostTensor make_bias(const RouteProblem& p, uint64_t seed) {
  HostTensor b(p.bias_dtype, {p.E});
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  for (int64_t e = 0; e < p.E; ++e) b.set(0, e, normal(rng));
  return b;
}

RouteOutputs run_route(const RouteProblem& p, const HostTensor& logits, const HostTensor* bias, Device device) {
  Placed x(logits, device), w(poisoned(DType::f32, {p.T, p.k}), device), ids(poisoned(p.ids_dtype, {p.T, p.k}), device);
  Placed src(poisoned(DType::i32, {p.T, p.k}), device);
  std::unique_ptr<Placed> b;
  if (bias) b = std::make_unique<Placed>(*bias, device);
  TensorView bv;
  if (b) bv = b->view();
  const TensorView* bp = b ? &bv : nullptr;
  const MoeAlignSizes sz = moe_align_sizes(p.T * p.k, p.E, p.block_size);
  Placed sorted(poisoned(DType::i32, {sz.sorted_len}), device), eids(poisoned(DType::i32, {sz.blocks}), device);
  Placed total(poisoned(DType::i32, {1}), device);
  switch (p.op) {
    case RouteOp::topk_softmax:
      topk_softmax(w.view(), ids.view(), src.view(), x.view(), p.spec.renormalize, bp);
      break;
    case RouteOp::grouped_topk:
      grouped_topk(w.view(), ids.view(), x.view(), bp, p.spec.n_group, p.spec.topk_group, p.spec.renormalize,
                   p.spec.scale, p.spec.scoring);
      break;
    case RouteOp::moe_route: {
      MoeRouterConfig c;
      c.scoring = p.spec.scoring;
      c.n_group = p.spec.n_group;
      c.topk_group = p.spec.topk_group;
      c.renormalize = p.spec.renormalize;
      c.routed_scaling_factor = p.spec.scale;
      moe_route(w.view(), ids.view(), sorted.view(), eids.view(), total.view(), x.view(), bp, c, p.block_size);
      break;
    }
  }
  if (device.is_cuda()) device_synchronize(device.index);
  return RouteOutputs{w.fetch(), ids.fetch(), src.fetch(), sorted.fetch(), eids.fetch(), total.fetch()};
}

reference::MoeComparison check_route(const RouteProblem& p, Device device, uint64_t seed) {
  const HostTensor logits = make_logits(p, seed);
  HostTensor bias;
  if (p.bias) bias = make_bias(p, seed);
  const RouteOutputs out = run_route(p, logits, p.bias ? &bias : nullptr, device);
  reference::RouterSpec spec = p.spec;
  spec.k = p.k;
  spec.scale = static_cast<float>(spec.scale);
  const reference::RouteGolden g = reference::route(logits, p.bias ? &bias : nullptr, spec);
  reference::MoeComparison c =
      reference::compare_route(g, out.weights, out.ids, p.op == RouteOp::topk_softmax ? &out.src_rows : nullptr);
  if (p.op == RouteOp::moe_route) {
    const MoeAlignSizes sz = moe_align_sizes(p.T * p.k, p.E, p.block_size);
    const reference::AlignGolden a = reference::align(out.ids, p.E, p.block_size, sz.sorted_len, sz.blocks, nullptr);
    const reference::MoeComparison s = reference::compare_align(a, out.sorted, out.expert_ids, out.total);
    if (!s.pass) {
      c.violations += s.violations;
      if (c.pass) c.detail = "schedule: " + s.detail;
      c.pass = false;
    }
  }
  return c;
}

std::string AlignProblem::describe() const {
  std::ostringstream os;
  os << "moe_align_block_size T=" << T << " k=" << k << " E=" << E << " block_size=" << block_size << " ids "
     << dtype_name(ids_dtype) << (pad_sorted_ids ? " pad_sorted_ids" : "") << " padding=" << padding_fraction
     << (expert_map ? " expert_map" : "") << (skewed ? " skewed" : "");
  if (ids_pitch > 0) os << " ids_pitch=" << ids_pitch;
  if (out_offset > 0) os << " out_offset=" << out_offset;
  return os.str();
}

HostTensor make_ids(const AlignProblem& p, uint64_t seed) {
  HostTensor ids(p.ids_dtype, {p.T, p.k}, p.ids_pitch);
  // The gaps between rows (a pitch above k) hold a valid expert: a schedule that read them would count it.
  for (int64_t t = 0; t + 1 < p.T; ++t) {
    for (int64_t c = p.k; c < ids.row_pitch(); ++c) {
      const int64_t off = t * ids.row_pitch() + c;
      if (p.ids_dtype == DType::i64) static_cast<int64_t*>(ids.data())[off] = p.E - 1;
      else static_cast<int32_t*>(ids.data())[off] = static_cast<int32_t>(p.E - 1);
    }
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<int64_t> perm(static_cast<size_t>(p.E));
  for (int64_t t = 0; t < p.T; ++t) {
    // Distinct experts per token (as a router produces), a few slots padded with -1.
    for (int64_t j = 0; j < p.k; ++j) {
      int64_t e;
      do {
        e = p.skewed && u(rng) < 0.9 ? static_cast<int64_t>(u(rng) * std::min<int64_t>(p.E, 4))
                                     : static_cast<int64_t>(u(rng) * p.E);
        e = std::min(e, p.E - 1);
        bool dup = false;
        for (int64_t i = 0; i < j; ++i) {
          const int64_t prev = static_cast<int64_t>(ids.get(t, i));
          dup = dup || prev == e;
        }
        if (!dup || p.k > p.E / 2) break;
      } while (true);
      put_id(ids, t * p.k + j, u(rng) < p.padding_fraction ? -1 : e);
    }
  }
  return ids;
}

HostTensor make_expert_map(const AlignProblem& p, uint64_t seed) {
  HostTensor m(DType::i32, {p.E});
  std::mt19937_64 rng(seed ^ 0x51ed27ull);
  std::vector<int32_t> local(static_cast<size_t>(p.E));
  std::iota(local.begin(), local.end(), 0);
  std::shuffle(local.begin(), local.end(), rng);
  for (int64_t e = 0; e < p.E; ++e) static_cast<int32_t*>(m.data())[e] = e % 3 == 1 ? -1 : local[e];
  return m;
}

AlignOutputs run_align(const AlignProblem& p, const HostTensor& ids, const HostTensor* expert_map, Device device) {
  const MoeAlignSizes sz = moe_align_sizes(p.T * p.k, p.E, p.block_size, p.pad_sorted_ids);
  constexpr int64_t kAfter = 5;
  const int64_t off = p.out_offset;
  Placed in(ids, device), sorted(poisoned(DType::i32, {off + sz.sorted_len + kAfter}), device);
  Placed eids(poisoned(DType::i32, {off + sz.blocks + kAfter}), device), total(poisoned(DType::i32, {1}), device);
  std::unique_ptr<Placed> map;
  if (expert_map) map = std::make_unique<Placed>(*expert_map, device);
  TensorView mv;
  if (map) mv = map->view();
  auto inner = [&](const Placed& buf, int64_t n) {
    return TensorView(static_cast<int32_t*>(buf.view().data) + off, DType::i32, device, {n});
  };
  moe_align_block_size(inner(sorted, sz.sorted_len), inner(eids, sz.blocks), total.view(), in.view(), p.E,
                       p.block_size, map ? &mv : nullptr);
  if (device.is_cuda()) device_synchronize(device.index);
  // The views' elements, and whether the words around them kept their poison.
  bool intact = true;
  auto part = [&](Placed& buf, int64_t n) {
    const HostTensor all = buf.fetch();
    HostTensor out(DType::i32, {n});
    const auto* a = static_cast<const int32_t*>(all.data());
    if (n > 0) std::memcpy(out.data(), a + off, out.bytes());  // an empty HostTensor has no buffer
    const HostTensor poison = poisoned(DType::i32, {1});
    const int32_t bad = *static_cast<const int32_t*>(poison.data());
    for (int64_t i = 0; i < off + n + kAfter; ++i) {
      if ((i < off || i >= off + n) && a[i] != bad) intact = false;
    }
    return out;
  };
  HostTensor s = part(sorted, sz.sorted_len), e = part(eids, sz.blocks);
  return AlignOutputs{std::move(s), std::move(e), total.fetch(), intact};
}

reference::MoeComparison check_align(const AlignProblem& p, Device device, uint64_t seed) {
  const HostTensor ids = make_ids(p, seed);
  HostTensor map;
  if (p.expert_map) map = make_expert_map(p, seed);
  const AlignOutputs out = run_align(p, ids, p.expert_map ? &map : nullptr, device);
  const MoeAlignSizes sz = moe_align_sizes(p.T * p.k, p.E, p.block_size, p.pad_sorted_ids);
  const reference::AlignGolden g =
      reference::align(ids, p.E, p.block_size, sz.sorted_len, sz.blocks, p.expert_map ? &map : nullptr);
  reference::MoeComparison c = reference::compare_align(g, out.sorted, out.expert_ids, out.total);
  if (!out.guards_intact) {
    if (c.pass) c.detail = "a word outside sorted_token_ids or expert_ids was written";
    c.pass = false;
    ++c.violations;
  }
  return c;
}

}  // namespace fuseops::testing
