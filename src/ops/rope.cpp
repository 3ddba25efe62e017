// Rotary embeddings: validation (once, for every backend) and dispatch. The three public forms become one
// RopeArgs (ops/rope_impl.h).
#include <algorithm>
#include <initializer_list>
#include <string>
#include <utility>

#include "core/dispatch.h"
#include "core/validate.h"
#include "cuda/device_error.h"
#include "fuseops/rope.h"
#include "ops/rope_impl.h"

namespace fuseops {
namespace detail {
namespace {

constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::f16, DType::bf16};
constexpr std::initializer_list<DType> kIndex = {DType::i32, DType::i64};

std::string dims_str(const int64_t* d, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

/// The single stride that steps through dims [0, lead) of `v` flattened (size-1 dims ignored), or fails; `fallback`
/// when no stride is needed (at most one element, or none: zero tokens).
int64_t flat_stride(const char* op, const char* name, const TensorView& v, int lead, int64_t fallback) {
  if (dims_product(op, name, v, lead, "token dims") == 0) return fallback;
  int64_t stride = -1, extent = 0;
  for (int i = lead - 1; i >= 0; --i) {
    if (v.shape[i] == 1) continue;
    if (stride < 0) {
      stride = v.strides[i];
    } else if (v.strides[i] != extent) {
      fail_argument(op, name, "token dims that flatten with one stride", "strides " + dims_str(v.strides, v.rank) +
                                                                            " for " + v.shape_str());
    }
    extent = v.strides[i] * v.shape[i];
  }
  return stride < 0 ? fallback : stride;
}

/// `v` is [lead dims..., H * head_size] or [lead dims..., H, head_size] with the given lead dims; `lead_from` (or
/// null) says where they come from, for the message (e.g. "the token dims of positions").
RopeHeads heads_of(const char* op, const char* name, const TensorView& v, const int64_t* lead, int nlead,
                   int64_t head_size, bool allow_flat, const char* lead_from = nullptr) {
  check_dtype(op, name, v, kFloat);
  const std::string want = "shape " + dims_str(lead, nlead) + (lead_from ? std::string(" (") + lead_from + ")" : "") +
                           (allow_flat ? " + [H * head_size] or [H, head_size]" : " + [H, head_size]");
  const int tail = v.rank - nlead;
  bool ok = (tail == 2 || (allow_flat && tail == 1));
  for (int i = 0; ok && i < nlead; ++i) ok = v.shape[i] == lead[i];
  if (!ok) fail_argument(op, name, want + " (head_size " + std::to_string(head_size) + ")", v.shape_str());
  RopeHeads h;
  h.data = v.data;
  if (tail == 1) {
    const int64_t w = v.shape[v.rank - 1];
    if (w % head_size != 0) {
      fail_argument(op, name, "last dim a multiple of head_size " + std::to_string(head_size), v.shape_str());
    }
    h.heads = w / head_size;
    h.head_stride = head_size;
  } else {
    if (v.shape[v.rank - 1] != head_size) {
      fail_argument(op, name, "last dim head_size = " + std::to_string(head_size), v.shape_str());
    }
    h.heads = v.shape[v.rank - 2];
    h.head_stride = v.strides[v.rank - 2];
  }
  if (head_size > 1 && v.shape[v.rank - 1] > 1 && v.strides[v.rank - 1] != 1) {
    fail_argument(op, name, "innermost stride 1", "stride " + std::to_string(v.strides[v.rank - 1]));
  }
  h.token_stride = flat_stride(op, name, v, nlead, 0);
  if (h.heads <= 1) h.head_stride = 0;  // never used; as flat_stride's for a size-1 token dim, so that views that
                                        // differ only there are the same view (in place), not an overlap
  h.out = h.data;
  h.out_token_stride = h.token_stride;
  h.out_head_stride = h.head_stride;
  return h;
}

/// The rotated parts ([tokens, heads, r] at the given strides) of distinct (token, head) pairs do not overlap, by a
/// sufficient rule: the strides nest (the smaller at least r, the larger at least the span of the smaller's dim).
/// Conservative: interleaved strides that share no element (token stride 5, head stride 7 at r = 2) are refused too.
void check_self_overlap(const char* op, const char* name, int64_t tokens, int64_t heads, int64_t r, int64_t ts,
                        int64_t hs) {
  if (tokens == 0 || heads == 0) return;  // no elements
  std::pair<int64_t, int64_t> d[2] = {{ts, tokens}, {hs, heads}};  // (stride, size)
  if (d[0].first > d[1].first) std::swap(d[0], d[1]);
  int64_t extent = r;
  for (auto& [stride, size] : d) {
    if (size <= 1) continue;
    if (stride < extent) {
      fail_argument(op, name, "nested token and head strides (the smaller >= rotary_dim " + std::to_string(r) +
                                  ", the larger >= the other dim's span), so that no two rotated parts can overlap",
                    "token stride " + std::to_string(ts) +
                        (heads > 1 ? ", head stride " + std::to_string(hs) : std::string(" (one head)")));
    }
    extent = stride * (size - 1) + extent;
  }
}

/// Smallest integer >= a / b for b > 0.
int64_t ceil_div(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }

/// Whether rope_heads_overlap decides exactly for these token strides: equal ones, or one token (its token strides
/// are never used); otherwise overlapping extents count as an overlap.
bool overlap_rule_exact(int64_t ta, int64_t tb, int64_t tokens) { return ta == tb || tokens <= 1; }

}  // namespace

bool rope_heads_overlap(const void* da, int64_t na, int64_t ta, int64_t hsa, const void* db, int64_t nb, int64_t tb,
                        int64_t hsb, int64_t tokens, int64_t r, DType dtype) {
  if (!da || !db || na == 0 || nb == 0 || tokens == 0) return false;
  const int64_t e = static_cast<int64_t>(dtype_size(dtype));
  const int64_t w = r * e;  // bytes of one rotated part
  const int64_t delta = static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(db)) -
                        static_cast<int64_t>(reinterpret_cast<std::uintptr_t>(da));
  const auto span = [&](int64_t n, int64_t ts, int64_t hs) { return ((tokens - 1) * ts + (n - 1) * hs) * e + w; };
  if (delta >= span(na, ta, hsa) || -delta >= span(nb, tb, hsb)) return false;  // disjoint extents
  if (!overlap_rule_exact(ta, tb, tokens)) return true;  // conservative
  // b's part (token t + dt, head g) starts x = delta + g HB - h HA + dt TS bytes after a's (token t, head h); they
  // meet iff -w < x < w for some head g in [0, nb) and token offset dt in [-dmax, dmax]. Per head h of a, the shorter
  // of the two ranges is walked and the other solved for: the first value past -w, then whether it is below w.
  const int64_t TS = ta * e, HA = hsa * e, HB = hsb * e;
  const int64_t dmax = (tokens == 1 || TS == 0) ? 0 : tokens - 1;
  const auto meets = [w](int64_t c, int64_t step, int64_t count) {  // c + k step in (-w, w) for some k in [0, count)
    if (step == 0) return c > -w && c < w;
    const int64_t k = std::max<int64_t>(0, ceil_div(-w + 1 - c, step));
    return k < count && c + k * step < w;
  };
  for (int64_t h = 0; h < na; ++h) {
    const int64_t c = delta - h * HA;
    if (nb <= 2 * dmax + 1) {
      for (int64_t g = 0; g < nb; ++g) {
        if (meets(c + g * HB - dmax * TS, TS, 2 * dmax + 1)) return true;
      }
    } else {
      for (int64_t dt = -dmax; dt <= dmax; ++dt) {
        if (meets(c + dt * TS, HB, nb)) return true;
      }
    }
  }
  return false;
}

namespace {

/// Error unless the rotated parts of head sets `a` (in `a_name`) and `b` share no element (see heads_overlap).
void check_heads_disjoint(const char* op, const char* a_name, const void* da, int64_t na, int64_t ta, int64_t hsa,
                          const char* b_name, const void* db, int64_t nb, int64_t tb, int64_t hsb, int64_t tokens,
                          int64_t r, DType dtype) {
  if (rope_heads_overlap(da, na, ta, hsa, db, nb, tb, hsb, tokens, r, dtype)) {
    // proven where the rule is exact; else only the address ranges meet
    fail_argument(op, a_name, std::string("no overlap with ") + b_name,
                  overlap_rule_exact(ta, tb, tokens) ? std::string("overlapping memory")
                         : "overlapping address ranges (token strides of " + std::to_string(ta) + " elements (" + a_name +
                               ") and " + std::to_string(tb) + " (" + b_name + "); the test is exact for equal " +
                               "token strides or one token, conservative otherwise: use views with equal token " +
                               "strides, or separate buffers)");
  }
}

/// positions (or position_ids): dtype, device, one token stride. lead_axes 3: [3, T] (dim 0 the axis, dim 1 the
/// tokens, any strides); else every dim is a token dim.
void attach_positions(const char* op, const char* name, const TensorView& p, const Device& device, int lead_axes,
                      RopeArgs& a) {
  check_dtype(op, name, p, kIndex);
  common_device(op, {{name, &p}});
  check_on_device(op, name, p, device);
  a.positions = p.data;
  a.pos_dtype = p.dtype;
  if (lead_axes == 3) {
    a.pos_token_stride = p.strides[1];
    a.pos_axis_stride = p.strides[0];
  } else {
    a.pos_token_stride = flat_stride(op, name, p, p.rank, 1);
  }
  a.error_site = error_site(op, name);
}

/// cos_sin_cache [max_position, r]: cos = first half of a row, sin = second half.
void attach_cache(const char* op, const TensorView& cache, int64_t head_size, RopeArgs& a) {
  check_dtype(op, "cos_sin_cache", cache, kFloat);
  if (cache.rank != 2) fail_argument(op, "cos_sin_cache", "rank 2 [max_position, rotary_dim]", cache.shape_str());
  const int64_t r = cache.shape[1];
  if (r < 2 || r % 2 != 0 || r > head_size || r > 2 * kRopeMaxPairs) {
    fail_argument(op, "cos_sin_cache", "an even rotary_dim = shape[1] in [2, min(head_size " +
                                           std::to_string(head_size) + ", " + std::to_string(2 * kRopeMaxPairs) + ")]",
                  cache.shape_str());
  }
  if (cache.strides[1] != 1) {
    fail_argument(op, "cos_sin_cache", "innermost stride 1", "stride " + std::to_string(cache.strides[1]));
  }
  a.rotary_dim = r;
  a.cache_dtype = cache.dtype;
  a.cos = cache.data;
  // (an empty cache may have no data: never offset a null pointer; every position is then out of range, none read)
  a.sin = cache.data ? static_cast<const char*>(cache.data) + (r / 2) * static_cast<int64_t>(dtype_size(cache.dtype))
                     : nullptr;
  a.cos_stride = a.sin_stride = cache.strides[0];
  a.max_position = cache.shape[0];
}

void check_head_size(const char* op, int64_t head_size) {
  if (head_size < 2) fail_argument(op, "head_size", "a head size >= 2", std::to_string(head_size));
}

/// The tensors a rope op writes (`written`) share no memory with the ones it only reads (`read`: the cache or cos /
/// sin, the positions), which it reads while it writes.
void check_reads_not_written(const char* op, std::initializer_list<std::pair<const char*, const TensorView*>> written,
                             std::initializer_list<std::pair<const char*, const TensorView*>> read) {
  for (const auto& [wn, w] : written) {
    if (!w) continue;
    for (const auto& [rn, r] : read) {
      if (r) check_disjoint(op, wn, *w, rn, *r);
    }
  }
}

/// Runs the rotation described by `a` (its sets checked) on the backend of `device`.
void run(const char* op, const RopeArgs& a, const Device& device, Stream stream) {
  const Backend backend = backend_for(op, device);  // first: an empty CUDA tensor needs CUDA too
  if (a.tokens == 0 || a.q.heads + a.k.heads == 0) return;
  if (backend == Backend::cuda) {
#if defined(FUSEOPS_WITH_CUDA)  // else backend_for() has thrown `unsupported`
    cuda::rope(op, a, device.index, stream.handle);
#else
    (void)stream;
#endif
  } else {
    cpu::rope(a);
  }
}

/// The in-place forms (query and key are rotated where they are): each set's rotated parts are distinct, and key's
/// share nothing with query's; then run.
void finish_and_run(const char* op, RopeArgs& a, const Device& device, Stream stream, const char* qn,
                    const char* kn) {
  check_self_overlap(op, qn, a.tokens, a.q.heads, a.rotary_dim, a.q.token_stride, a.q.head_stride);
  if (a.k.data) check_self_overlap(op, kn, a.tokens, a.k.heads, a.rotary_dim, a.k.token_stride, a.k.head_stride);
  if (a.k.data) {
    check_heads_disjoint(op, kn, a.k.data, a.k.heads, a.k.token_stride, a.k.head_stride, qn, a.q.data, a.q.heads,
                         a.q.token_stride, a.q.head_stride, a.tokens, a.rotary_dim, a.dtype);
  }
  run(op, a, device, stream);
}

void vllm_form(const char* op, TensorView positions, TensorView query, const TensorView* key, int64_t head_size,
               TensorView cache, bool is_neox, bool inverse, Stream stream, const char* qn, const char* kn) {
  check_head_size(op, head_size);
  check_dtype(op, qn, query, kFloat);
  if (key) check_same_dtype(op, kn, *key, qn, query);
  const Device device = key ? common_device(op, {{qn, &query}, {kn, key}, {"cos_sin_cache", &cache}})
                            : common_device(op, {{qn, &query}, {"cos_sin_cache", &cache}});
  check_layout(op, "positions", positions);  // its dims are the token dims query and key are compared with
  if (positions.rank < 1 || positions.rank > 2) {
    fail_argument(op, "positions", "rank 1 [T] or 2 [B, S]", positions.shape_str());
  }
  RopeArgs a;
  a.dtype = query.dtype;
  a.is_neox = is_neox;
  a.inverse = inverse;
  attach_positions(op, "positions", positions, device, 1, a);
  attach_cache(op, cache, head_size, a);
  a.tokens = dims_product(op, "positions", positions, positions.rank, "token dims");
  constexpr const char* kFrom = "the token dims of positions";
  a.q = heads_of(op, qn, query, positions.shape, positions.rank, head_size, true, kFrom);
  if (key) a.k = heads_of(op, kn, *key, positions.shape, positions.rank, head_size, true, kFrom);
  check_reads_not_written(op, {{qn, &query}, {kn, key}}, {{"cos_sin_cache", &cache}, {"positions", &positions}});
  finish_and_run(op, a, device, stream, qn, kn);
}

/// The M-RoPE axis of each pair, from the layouts' definitions (docs/ops/rope.md).
void fill_axes(MropeLayout layout, const std::array<int64_t, 3>& s, int64_t pairs, RopeArgs& a) {
  for (int64_t j = 0; j < pairs; ++j) {
    switch (layout) {
      case MropeLayout::chunked: a.set_axis(j, j < s[0] ? 0 : j < s[0] + s[1] ? 1 : 2); break;
      case MropeLayout::interleaved:
        a.set_axis(j, (j % 3 == 1 && j < 3 * s[1]) ? 1 : (j % 3 == 2 && j < 3 * s[2]) ? 2 : 0);
        break;
      case MropeLayout::interleaved_glm: break;  // below
    }
  }
  if (layout == MropeLayout::interleaved_glm) {
    // Pair j takes axis j % 3 while that axis has quota left, else the next axis (cyclically) that has.
    int64_t left[3] = {s[0], s[1], s[2]};
    for (int64_t j = 0; j < pairs; ++j) {
      int ax = static_cast<int>(j % 3);
      while (left[ax] == 0) ax = (ax + 1) % 3;  // the sections sum to `pairs`: some axis has quota left
      a.set_axis(j, ax);
      --left[ax];
    }
  }
}

void mrope_form(const char* op, TensorView positions, TensorView query, const TensorView* key, int64_t head_size,
                int64_t rotary_dim, TensorView cache, const std::array<int64_t, 3>& section, bool is_neox,
                MropeLayout layout, bool inverse, Stream stream, const char* qn, const char* kn) {
  check_head_size(op, head_size);
  if (layout != MropeLayout::chunked && layout != MropeLayout::interleaved &&
      layout != MropeLayout::interleaved_glm) {
    fail_argument(op, "layout", "chunked | interleaved | interleaved_glm",
                  "code " + std::to_string(static_cast<int>(layout)));
  }
  check_dtype(op, qn, query, kFloat);
  if (key) check_same_dtype(op, kn, *key, qn, query);
  const Device device = key ? common_device(op, {{qn, &query}, {kn, key}, {"cos_sin_cache", &cache}})
                            : common_device(op, {{qn, &query}, {"cos_sin_cache", &cache}});
  RopeArgs a;
  a.dtype = query.dtype;
  a.is_neox = is_neox;
  a.inverse = inverse;
  // rotary_dim is given explicitly here: a value no cache could fit is named as rotary_dim, not as the cache
  if (rotary_dim < 2 || rotary_dim % 2 != 0 || rotary_dim > head_size || rotary_dim > 2 * kRopeMaxPairs) {
    fail_argument(op, "rotary_dim", "an even value in [2, min(head_size " + std::to_string(head_size) + ", " +
                                        std::to_string(2 * kRopeMaxPairs) + ")]",
                  std::to_string(rotary_dim));
  }
  attach_cache(op, cache, head_size, a);
  if (rotary_dim != a.rotary_dim) {
    fail_argument(op, "rotary_dim", "cos_sin_cache.shape[1] = " + std::to_string(a.rotary_dim),
                  std::to_string(rotary_dim));
  }
  check_layout(op, "positions", positions);  // its last dim is T, which query and key are compared with
  const bool three = positions.rank == 2;
  if (!(positions.rank == 1 || (three && positions.shape[0] == 3))) {
    fail_argument(op, "positions", "shape [3, T] or [T]", positions.shape_str());
  }
  attach_positions(op, "positions", positions, device, three ? 3 : 1, a);
  a.tokens = positions.shape[positions.rank - 1];
  const int64_t pairs = a.rotary_dim / 2;
  {  // checked with 1-D positions too (then unused: every pair takes the one position, as vLLM)
    const std::string got = "[" + std::to_string(section[0]) + ", " + std::to_string(section[1]) + ", " +
                            std::to_string(section[2]) + "]";
    // Each section in [0, pairs] before the sum, so that the sum cannot wrap.
    bool ok = true;
    for (int64_t s : section) ok = ok && s >= 0 && s <= pairs;
    if (!ok || section[0] + section[1] + section[2] != pairs) {
      fail_argument(op, "mrope_section", "3 sections >= 0 summing to rotary_dim / 2 = " + std::to_string(pairs), got);
    }
  }
  if (three) {
    a.num_axes = 3;
    fill_axes(layout, section, pairs, a);
  }
  const int64_t lead[1] = {a.tokens};
  constexpr const char* kFrom = "the tokens of positions";
  a.q = heads_of(op, qn, query, lead, 1, head_size, true, kFrom);
  if (key) a.k = heads_of(op, kn, *key, lead, 1, head_size, true, kFrom);
  check_reads_not_written(op, {{qn, &query}, {kn, key}}, {{"cos_sin_cache", &cache}, {"positions", &positions}});
  finish_and_run(op, a, device, stream, qn, kn);
}

void flaggems_form(const char* op, TensorView q_out, TensorView k_out, TensorView q, TensorView k, TensorView cos,
                   TensorView sin, const TensorView* position_ids, bool interleaved, bool inverse, Stream stream,
                   const char* names[4]) {
  const char *qon = names[0], *kon = names[1], *qn = names[2], *kn = names[3];
  check_dtype(op, qn, q, kFloat);
  check_same_dtype(op, kn, k, qn, q);
  check_same_dtype(op, qon, q_out, qn, q);
  check_same_dtype(op, kon, k_out, qn, q);
  check_dtype(op, "cos", cos, kFloat);
  check_same_dtype(op, "sin", sin, "cos", cos);
  const Device device = common_device(
      op, {{qon, &q_out}, {kon, &k_out}, {qn, &q}, {kn, &k}, {"cos", &cos}, {"sin", &sin}});
  if (q.rank < 2) fail_argument(op, qn, "rank >= 2 [tokens..., Hq, D]", q.shape_str());
  const int nlead = q.rank - 2;
  const int64_t D = q.shape[q.rank - 1];
  if (D < 2 || D % 2 != 0 || D > 2 * kRopeMaxPairs) {
    fail_argument(op, qn, "an even head dim D in [2, " + std::to_string(2 * kRopeMaxPairs) + "]", q.shape_str());
  }
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"cos", &cos}, {"sin", &sin}}) {
    if (t->rank != 2 || t->shape[1] != D / 2) {
      fail_argument(op, name, "shape [max_seq, D / 2 = " + std::to_string(D / 2) + "]", t->shape_str());
    }
    if (t->strides[1] != 1) fail_argument(op, name, "innermost stride 1", "stride " + std::to_string(t->strides[1]));
  }
  if (sin.shape[0] != cos.shape[0]) fail_argument(op, "sin", "the shape of cos " + cos.shape_str(), sin.shape_str());
  RopeArgs a;
  a.dtype = q.dtype;
  a.is_neox = !interleaved;
  a.inverse = inverse;
  a.rotary_dim = D;
  a.cache_dtype = cos.dtype;
  a.cos = cos.data;
  a.sin = sin.data;
  a.cos_stride = cos.strides[0];
  a.sin_stride = sin.strides[0];
  a.max_position = cos.shape[0];
  a.tokens = dims_product(op, qn, q, nlead, "token dims");
  a.q = heads_of(op, qn, q, q.shape, nlead, D, false);
  a.k = heads_of(op, kn, k, q.shape, nlead, D, false);
  if (position_ids) {
    const TensorView& p = *position_ids;
    check_layout(op, "position_ids", p);  // its own fields before its dims are compared with q's
    bool same = p.rank == nlead;
    for (int i = 0; same && i < nlead; ++i) same = p.shape[i] == q.shape[i];
    if (!same) {
      fail_argument(op, "position_ids", "shape " + dims_str(q.shape, nlead) + " (the token dims of q)", p.shape_str());
    }
    attach_positions(op, "position_ids", p, device, 1, a);
  } else {
    if (q.rank != 4) fail_argument(op, qn, "rank 4 [B, S, Hq, D] without position_ids", q.shape_str());
    a.seq_len = q.shape[1];
    if (a.seq_len > a.max_position) {
      fail_argument(op, "cos", "at least S = " + std::to_string(a.seq_len) + " rows without position_ids",
                    cos.shape_str());
    }
  }
  // Outputs: the inputs themselves (in place) or views of the same shapes that overlap nothing else.
  const RopeHeads qo = heads_of(op, qon, q_out, q.shape, nlead, D, false);
  const RopeHeads ko = heads_of(op, kon, k_out, q.shape, nlead, D, false);
  if (qo.heads != a.q.heads) {
    fail_argument(op, qon, "the shape of " + std::string(qn) + " " + q.shape_str(), q_out.shape_str());
  }
  if (ko.heads != a.k.heads) {
    fail_argument(op, kon, "the shape of " + std::string(kn) + " " + k.shape_str(), k_out.shape_str());
  }
  auto same_view = [](const RopeHeads& o, const RopeHeads& i) {
    return o.data == i.data && o.token_stride == i.token_stride && o.head_stride == i.head_stride;
  };
  const bool q_in_place = same_view(qo, a.q), k_in_place = same_view(ko, a.k);
  a.q.out = qo.data;
  a.q.out_token_stride = qo.token_stride;
  a.q.out_head_stride = qo.head_stride;
  a.k.out = ko.data;
  a.k.out_token_stride = ko.token_stride;
  a.k.out_head_stride = ko.head_stride;
  // the heads of a set as (data, heads, token stride, head stride), for the exact overlap checks
  struct Set {
    const char* name;
    const void* data;
    int64_t heads, ts, hs;
  };
  const Set q_in{qn, a.q.data, a.q.heads, a.q.token_stride, a.q.head_stride};
  const Set k_in{kn, a.k.data, a.k.heads, a.k.token_stride, a.k.head_stride};
  const Set q_o{qon, a.q.out, a.q.heads, a.q.out_token_stride, a.q.out_head_stride};
  const Set k_o{kon, a.k.out, a.k.heads, a.k.out_token_stride, a.k.out_head_stride};
  const auto disjoint = [&](const Set& x, const Set& y) {
    check_heads_disjoint(op, x.name, x.data, x.heads, x.ts, x.hs, y.name, y.data, y.heads, y.ts, y.hs, a.tokens, D,
                         a.dtype);
  };
  // What is written (q_out, k_out) is distinct within itself, shares nothing with the other output, and nothing with
  // an input it is not (an output that is its own input is rotated in place, element by element). The inputs are
  // only read: q and k may overlap each other (autograd passes one gradient for both outputs of q_embed + k_embed).
  check_self_overlap(op, qon, a.tokens, qo.heads, D, qo.token_stride, qo.head_stride);
  check_self_overlap(op, kon, a.tokens, ko.heads, D, ko.token_stride, ko.head_stride);
  if (!q_in_place) disjoint(q_o, q_in);
  if (!k_in_place) disjoint(k_o, k_in);
  disjoint(k_in, q_o);
  disjoint(k_o, q_in);
  disjoint(k_o, q_o);
  check_reads_not_written(op, {{qon, &q_out}, {kon, a.k.data ? &k_out : nullptr}},
                          {{"cos", &cos}, {"sin", &sin}, {"position_ids", position_ids}});
  run(op, a, device, stream);
}

}  // namespace
}  // namespace detail

MropeLayout parse_mrope_layout(const std::string& layout) {
  if (layout == "chunked") return MropeLayout::chunked;
  if (layout == "interleaved") return MropeLayout::interleaved;
  if (layout == "interleaved_glm") return MropeLayout::interleaved_glm;
  throw Error(ErrorKind::invalid_argument,
              "mrope: layout: expected \"chunked\" | \"interleaved\" | \"interleaved_glm\", got " +
                  quoted_text(layout));
}

const char* mrope_layout_name(MropeLayout layout) {
  switch (layout) {
    case MropeLayout::chunked: return "chunked";
    case MropeLayout::interleaved: return "interleaved";
    case MropeLayout::interleaved_glm: return "interleaved_glm";
  }
  return "?";
}

void rotary_embedding(TensorView positions, TensorView query, const TensorView* key, int64_t head_size,
                      TensorView cos_sin_cache, bool is_neox, bool inverse, Stream stream) {
  detail::vllm_form("rotary_embedding", positions, query, key, head_size, cos_sin_cache, is_neox, inverse, stream,
                    "query", "key");
}

void rotary_embedding_backward(TensorView positions, TensorView grad_query, const TensorView* grad_key,
                               int64_t head_size, TensorView cos_sin_cache, bool is_neox, Stream stream) {
  detail::vllm_form("rotary_embedding_backward", positions, grad_query, grad_key, head_size, cos_sin_cache, is_neox,
                    true, stream, "grad_query", "grad_key");
}

void apply_rotary_pos_emb(TensorView q_out, TensorView k_out, TensorView q, TensorView k, TensorView cos,
                          TensorView sin, const TensorView* position_ids, bool rotary_interleaved, bool inverse,
                          Stream stream) {
  const char* names[4] = {"q_out", "k_out", "q", "k"};
  detail::flaggems_form("apply_rotary_pos_emb", q_out, k_out, q, k, cos, sin, position_ids, rotary_interleaved,
                        inverse, stream, names);
}

void apply_rotary_pos_emb_backward(TensorView grad_q_out, TensorView grad_k_out, TensorView grad_q,
                                   TensorView grad_k, TensorView cos, TensorView sin, const TensorView* position_ids,
                                   bool rotary_interleaved, Stream stream) {
  const char* names[4] = {"grad_q_out", "grad_k_out", "grad_q", "grad_k"};
  detail::flaggems_form("apply_rotary_pos_emb_backward", grad_q_out, grad_k_out, grad_q, grad_k, cos, sin,
                        position_ids, rotary_interleaved, true, stream, names);
}

void mrope(TensorView positions, TensorView query, const TensorView* key, int64_t head_size, int64_t rotary_dim,
           TensorView cos_sin_cache, const std::array<int64_t, 3>& mrope_section, bool is_neox, MropeLayout layout,
           bool inverse, Stream stream) {
  detail::mrope_form("mrope", positions, query, key, head_size, rotary_dim, cos_sin_cache, mrope_section, is_neox,
                     layout, inverse, stream, "query", "key");
}

void mrope_backward(TensorView positions, TensorView grad_query, const TensorView* grad_key, int64_t head_size,
                    int64_t rotary_dim, TensorView cos_sin_cache, const std::array<int64_t, 3>& mrope_section,
                    bool is_neox, MropeLayout layout, Stream stream) {
  detail::mrope_form("mrope_backward", positions, grad_query, grad_key, head_size, rotary_dim, cos_sin_cache,
                     mrope_section, is_neox, layout, true, stream, "grad_query", "grad_key");
}

}  // namespace fuseops
