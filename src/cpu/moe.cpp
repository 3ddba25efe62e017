// CPU backend of the MoE routing ops: the same rules as the CUDA kernels (common/moe_math.h), token by token in
// fp32, and a counting sort for the schedule.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/half.h"
#include "common/moe_math.h"
#include "cuda/device_error.h"
#include "ops/moe_impl.h"

namespace fuseops::detail::cpu {
namespace {

float load_float(const void* data, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f16: return f16_to_float(static_cast<const uint16_t*>(data)[i]);
    case DType::bf16: return bf16_to_float(static_cast<const uint16_t*>(data)[i]);
    default: return static_cast<const float*>(data)[i];
  }
}

int64_t load_id(const RowMatrix& m, int64_t r, int64_t c) {
  const int64_t i = r * m.row_stride + c;
  return m.dtype == DType::i64 ? static_cast<const int64_t*>(m.data)[i] : static_cast<const int32_t*>(m.data)[i];
}

void store_id(const RowMatrix& m, int64_t r, int64_t c, int64_t v) {
  const int64_t i = r * m.row_stride + c;
  if (m.dtype == DType::i64) static_cast<int64_t*>(m.data)[i] = v;
  else static_cast<int32_t*>(m.data)[i] = static_cast<int32_t>(v);
}

/// Index of the best entry of `key` (highest key, lowest index on ties) among those with `usable` set; -1 if none.
int64_t argmax(const std::vector<float>& key, const std::vector<char>& usable) {
  int64_t best = -1;
  for (int64_t e = 0; e < static_cast<int64_t>(key.size()); ++e) {
    if (usable[e] && (best < 0 || key[e] > key[best])) best = e;
  }
  return best;
}

struct Scratch {
  std::vector<float> s, key, group_score;
  std::vector<char> usable, group_usable;
};

void route_token(const RouteArgs& a, int64_t t, Scratch& w) {
  const int64_t E = a.E;
  w.s.resize(E);
  w.key.resize(E);
  const char* row = static_cast<const char*>(a.logits.data) +
                    t * a.logits.row_stride * static_cast<int64_t>(dtype_size(a.logits.dtype));
  float m = -FLT_MAX;
  for (int64_t e = 0; e < E; ++e) {
    w.key[e] = moe_sanitize(load_float(row, a.logits.dtype, e));
    m = std::max(m, w.key[e]);
  }
  if (a.scoring == MoeScoring::softmax) {
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += (w.s[e] = expf(w.key[e] - m));
    for (int64_t e = 0; e < E; ++e) w.s[e] /= sum;
  } else {
    for (int64_t e = 0; e < E; ++e) w.s[e] = moe_sigmoid(w.key[e]);
  }
  if (a.bias.data) {
    for (int64_t e = 0; e < E; ++e) w.key[e] = w.s[e] + moe_sanitize(load_float(a.bias.data, a.bias.dtype, e * a.bias.stride));
  }
  w.usable.assign(E, 1);
  if (a.topk_group < a.n_group) {
    const int64_t G = E / a.n_group;
    w.group_score.assign(a.n_group, 0);
    for (int g = 0; g < a.n_group; ++g) {
      float top1 = -INFINITY, top2 = -INFINITY;
      for (int64_t e = g * G; e < (g + 1) * G; ++e) {
        if (w.key[e] > top1) {
          top2 = top1;
          top1 = w.key[e];
        } else if (w.key[e] > top2) {
          top2 = w.key[e];
        }
      }
      w.group_score[g] = !a.bias.data ? top1 : G == 1 ? top1 : top1 + top2;
    }
    w.group_usable.assign(a.n_group, 1);
    std::vector<char> kept(a.n_group, 0);
    for (int i = 0; i < a.topk_group; ++i) {
      const int64_t g = argmax(w.group_score, w.group_usable);
      w.group_usable[g] = 0;
      kept[g] = 1;
    }
    for (int64_t e = 0; e < E; ++e) w.usable[e] = kept[e / G];
  }
  float wsum = 0;
  std::vector<float> picked(a.k);
  for (int64_t j = 0; j < a.k; ++j) {
    const int64_t e = argmax(w.key, w.usable);  // never -1: k <= candidates (validated)
    w.usable[e] = 0;
    picked[j] = w.s[e];
    wsum += picked[j];
    store_id(a.ids, t, j, e);
    if (a.src_rows.data) static_cast<int32_t*>(a.src_rows.data)[t * a.src_rows.row_stride + j] = static_cast<int32_t>(j * a.T + t);
  }
  float* out = static_cast<float*>(a.weights.data) + t * a.weights.row_stride;
  for (int64_t j = 0; j < a.k; ++j) {
    float v = picked[j];
    if (a.renormalize) v = wsum > 0 ? v / wsum : 1.0f / static_cast<float>(a.k);
    out[j] = v * a.scale;
  }
}

}  // namespace

void route(const RouteArgs& a) {
  Scratch w;
  for (int64_t t = 0; t < a.T; ++t) route_token(a, t, w);
}

void align(const AlignArgs& a) {
  const int64_t numel = a.ids.rows * a.ids.cols;
  const int64_t E = a.E, bs = a.block_size;
  std::vector<int32_t> local(static_cast<size_t>(numel));  // expert of each flat index, -1 when skipped
  std::vector<int64_t> count(E + 1, 0);
  bool bad = false;
  for (int64_t r = 0, i = 0; r < a.ids.rows; ++r) {
    for (int64_t c = 0; c < a.ids.cols; ++c, ++i) {
      int64_t e = load_id(a.ids, r, c);
      local[i] = -1;
      if (e == -1) continue;
      if (e < -1 || e >= E) {
        record_host_error(a.ids_site, i);
        bad = true;
        continue;
      }
      if (a.expert_map.data) {
        const int64_t g = e;
        e = static_cast<const int32_t*>(a.expert_map.data)[g * a.expert_map.stride];
        if (e == -1) continue;
        if (e < -1 || e >= E) {
          record_host_error(a.map_site, g);
          bad = true;
          continue;
        }
      }
      local[i] = static_cast<int32_t>(e);
      ++count[e];
    }
  }
  std::vector<int64_t> start(E + 1, 0);
  for (int64_t e = 0; e < E; ++e) start[e + 1] = start[e] + moe_round_up(count[e], bs);
  const int64_t total = start[E];
  std::fill(a.sorted, a.sorted + a.sorted_len, static_cast<int32_t>(numel));
  std::vector<int64_t> pos(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < numel; ++i) {
    if (local[i] >= 0) a.sorted[pos[local[i]]++] = static_cast<int32_t>(i);
  }
  std::fill(a.expert_ids, a.expert_ids + a.blocks, -1);
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t b = start[e] / bs; b < start[e + 1] / bs; ++b) a.expert_ids[b] = static_cast<int32_t>(e);
  }
  *a.total = static_cast<int32_t>(total);
  raise_recorded_in_debug(bad);
}

}  // namespace fuseops::detail::cpu
