// Float64 / exact-integer golden of the MoE routing ops (see moe.h).
#include "reference/moe.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>
#include <sstream>

namespace fuseops::reference {
namespace {

/// NaN -> -FLT_MAX, +-inf -> +-FLT_MAX (docs/ops/moe.md, "Semantics").
double sanitize(double x) {
  if (std::isnan(x)) return -static_cast<double>(FLT_MAX);
  return std::min(std::max(x, -static_cast<double>(FLT_MAX)), static_cast<double>(FLT_MAX));
}

int64_t id_at(const testing::HostTensor& t, int64_t r, int64_t c) {
  const int64_t i = r * t.row_pitch() + c;
  return t.dtype() == DType::i64 ? static_cast<const int64_t*>(t.data())[i] : static_cast<const int32_t*>(t.data())[i];
}

/// Indices 0..n-1 ordered by value descending, lower index first among equal values.
std::vector<int64_t> order_desc(const double* v, int64_t n) {
  std::vector<int64_t> idx(static_cast<size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[a] > v[b]; });
  return idx;
}

}  // namespace

RouteGolden route(const testing::HostTensor& logits, const testing::HostTensor* bias, const RouterSpec& spec) {
  RouteGolden g;
  g.T = logits.rows();
  g.E = logits.cols();
  g.k = spec.k;
  g.n_group = spec.n_group;
  g.topk_group = spec.topk_group;
  g.has_bias = bias != nullptr;
  g.renormalize = spec.renormalize;
  g.softmax = spec.scoring == MoeScoring::softmax;
  g.scale = spec.scale;
  const int64_t T = g.T, E = g.E, k = g.k, NG = spec.n_group, G = E / NG;
  g.logit.resize(T * E);
  g.score.resize(T * E);
  g.key.resize(T * E);
  g.group_score.resize(T * NG);
  g.kept.assign(T * NG, 0);
  g.ids.resize(T * k);
  g.weights.resize(T * k);
  for (int64_t t = 0; t < T; ++t) {
    double* x = &g.logit[t * E];
    double* s = &g.score[t * E];
    double* key = &g.key[t * E];
    for (int64_t e = 0; e < E; ++e) x[e] = sanitize(logits.get(t, e));
    if (spec.scoring == MoeScoring::softmax) {
      const double m = *std::max_element(x, x + E);
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += std::exp(x[e] - m);
      for (int64_t e = 0; e < E; ++e) s[e] = std::exp(x[e] - m) / sum;
    } else {
      for (int64_t e = 0; e < E; ++e) s[e] = 1.0 / (1.0 + std::exp(-x[e]));
    }
    for (int64_t e = 0; e < E; ++e) key[e] = bias ? s[e] + sanitize(bias->get(0, e)) : x[e];
    // Groups: top-2 sum of the biased keys (the max key without a bias); the best topk_group survive.
    for (int64_t gi = 0; gi < NG; ++gi) {
      std::vector<double> members(key + gi * G, key + (gi + 1) * G);
      std::sort(members.begin(), members.end(), std::greater<double>());
      g.group_score[t * NG + gi] = (bias && G >= 2) ? members[0] + members[1] : members[0];
    }
    const std::vector<int64_t> gorder = order_desc(&g.group_score[t * NG], NG);
    for (int64_t i = 0; i < spec.topk_group; ++i) g.kept[t * NG + gorder[i]] = 1;
    std::vector<double> masked(key, key + E);
    for (int64_t e = 0; e < E; ++e) {
      if (!g.kept[t * NG + e / G]) masked[e] = -INFINITY;
    }
    const std::vector<int64_t> order = order_desc(masked.data(), E);
    double sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += s[order[j]];
    for (int64_t j = 0; j < k; ++j) {
      g.ids[t * k + j] = order[j];
      double w = s[order[j]];
      if (spec.renormalize) w = sum > 0 ? w / sum : 1.0 / static_cast<double>(k);
      g.weights[t * k + j] = w * spec.scale;
    }
  }
  return g;
}

AlignGolden align(const testing::HostTensor& ids, int64_t num_experts, int64_t block_size, int64_t sorted_len,
                  int64_t blocks, const testing::HostTensor* expert_map) {
  AlignGolden g;
  const int64_t cols = ids.cols(), numel = ids.rows() * cols;
  std::vector<std::pair<int64_t, int64_t>> routed;  // (local expert, flat index)
  for (int64_t i = 0; i < numel; ++i) {
    int64_t e = id_at(ids, i / cols, i % cols);
    if (e == -1) continue;
    if (e < -1 || e >= num_experts) {
      if (g.first_bad_id < 0) g.first_bad_id = i;
      continue;
    }
    if (expert_map) {
      const int64_t l = static_cast<const int32_t*>(expert_map->data())[e];
      if (l == -1) continue;
      if (l < -1 || l >= num_experts) {
        if (g.first_bad_map < 0 || e < g.first_bad_map) g.first_bad_map = e;
        continue;
      }
      e = l;
    }
    routed.emplace_back(e, i);
  }
  std::stable_sort(routed.begin(), routed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  g.sorted.assign(static_cast<size_t>(sorted_len), static_cast<int32_t>(numel));
  g.expert_ids.assign(static_cast<size_t>(blocks), -1);
  int64_t pos = 0;
  for (size_t r = 0; r < routed.size();) {
    const int64_t e = routed[r].first;
    size_t end = r;
    for (; end < routed.size() && routed[end].first == e; ++end) {
      g.sorted[pos + static_cast<int64_t>(end - r)] = static_cast<int32_t>(routed[end].second);
    }
    const int64_t padded = (static_cast<int64_t>(end - r) + block_size - 1) / block_size * block_size;
    for (int64_t b = pos / block_size; b < (pos + padded) / block_size; ++b) g.expert_ids[b] = static_cast<int32_t>(e);
    pos += padded;
    r = end;
  }
  g.total = static_cast<int32_t>(pos);
  return g;
}

MoeComparison compare_route(const RouteGolden& g, const testing::HostTensor& weights, const testing::HostTensor& ids,
                            const testing::HostTensor* src_rows) {
  MoeComparison c;
  const int64_t T = g.T, E = g.E, k = g.k, NG = g.n_group, G = E / NG;
  const double u = std::ldexp(1.0, -24);
  std::ostringstream tol;
  tol << "ids exact (bias: near-ties 2^-16); w: 2^-24(32+E/4+4k+2|a|)|ref|";
  c.tolerance = tol.str();
  double err2 = 0, ref2 = 0;
  auto fail = [&](int64_t t, const std::string& what) {
    ++c.violations;
    if (c.pass) {
      std::ostringstream os;
      os << "token " << t << ": " << what;
      c.detail = os.str();
    }
    c.pass = false;
  };
  for (int64_t t = 0; t < T; ++t) {
    const double* key = &g.key[t * E];
    const double* s = &g.score[t * E];
    const double* x = &g.logit[t * E];
    // A group decision within rounding of a tie makes the golden's ids one valid answer among others.
    bool group_near_tie = false;
    if (g.topk_group < NG && g.has_bias) {
      std::vector<double> gs(&g.group_score[t * NG], &g.group_score[t * NG] + NG);
      std::sort(gs.begin(), gs.end(), std::greater<double>());
      const double a = gs[g.topk_group - 1], b = gs[g.topk_group];
      group_near_tie = a != b && std::fabs(a - b) <= std::ldexp(1.0, -16) * (1 + std::fabs(a));
    }
    std::vector<int64_t> out(k);
    bool ids_ok = true;
    for (int64_t j = 0; j < k; ++j) {
      out[j] = id_at(ids, t, j);
      if (out[j] < 0 || out[j] >= E) {
        fail(t, "id " + std::to_string(out[j]) + " at slot " + std::to_string(j) + " out of range");
        ids_ok = false;
        break;
      }
      for (int64_t i = 0; i < j; ++i) {
        if (out[i] == out[j]) {
          fail(t, "duplicate id " + std::to_string(out[j]));
          ids_ok = false;
        }
      }
      if (src_rows && id_at(*src_rows, t, j) != j * T + t) {
        fail(t, "token_expert_indices[" + std::to_string(j) + "] = " + std::to_string(id_at(*src_rows, t, j)) +
                    ", expected " + std::to_string(j * T + t));
      }
    }
    if (!ids_ok) continue;
    if (!group_near_tie) {
      for (int64_t j = 0; j < k; ++j) {
        const int64_t r = g.ids[t * k + j];
        if (out[j] == r) continue;
        const double d = std::fabs(key[out[j]] - key[r]);
        const bool near = g.has_bias && d != 0 && d <= std::ldexp(1.0, -16) * (1 + std::fabs(key[r]));
        if (!near || !g.kept[t * NG + out[j] / G]) {
          std::ostringstream os;
          os << "slot " << j << ": id " << out[j] << " (key " << key[out[j]] << "), expected " << r << " (key " << key[r]
             << ")";
          fail(t, os.str());
          break;
        }
      }
    }
    // Weights: the golden's weights of the returned ids.
    double sum = 0, mmax = -INFINITY;
    for (int64_t e = 0; e < E; ++e) mmax = std::max(mmax, x[e]);
    for (int64_t j = 0; j < k; ++j) sum += s[out[j]];
    for (int64_t j = 0; j < k; ++j) {
      double ref = s[out[j]];
      if (g.renormalize) ref = sum > 0 ? ref / sum : 1.0 / static_cast<double>(k);
      ref *= g.scale;
      const double arg = g.softmax ? std::fabs(x[out[j]] - mmax) : std::fabs(x[out[j]]);
      const double bound = u * (32 + E / 4.0 + 4.0 * k + 2 * std::min(arg, 1e6)) * std::fabs(ref) + std::ldexp(1.0, -126);
      const double w = weights.get(t, j);
      const double err = std::fabs(w - ref);
      if (!(err <= bound)) {
        std::ostringstream os;
        os << "weight " << j << " (id " << out[j] << ") = " << w << ", expected " << ref << " (bound " << bound << ")";
        fail(t, os.str());
      }
      if (std::isfinite(err)) {
        c.max_abs_error = std::max(c.max_abs_error, err);
        err2 += err * err;
      }
      ref2 += ref * ref;
    }
  }
  c.rel_rms_error = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  return c;
}

MoeComparison compare_align(const AlignGolden& g, const testing::HostTensor& sorted,
                            const testing::HostTensor& expert_ids, const testing::HostTensor& total) {
  MoeComparison c;
  c.tolerance = "exact";
  auto check = [&](const char* name, const testing::HostTensor& t, const std::vector<int32_t>& ref) {
    const int32_t* v = static_cast<const int32_t*>(t.data());
    for (size_t i = 0; i < ref.size(); ++i) {
      if (v[i] != ref[i]) {
        ++c.violations;
        if (c.pass) c.detail = std::string(name) + "[" + std::to_string(i) + "] = " + std::to_string(v[i]) +
                               ", expected " + std::to_string(ref[i]);
        c.pass = false;
      }
    }
  };
  check("num_tokens_post_pad", total, {g.total});
  check("sorted_token_ids", sorted, g.sorted);
  check("expert_ids", expert_ids, g.expert_ids);
  return c;
}

}  // namespace fuseops::reference
