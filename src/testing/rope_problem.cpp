#include "testing/rope_problem.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>

#include "fuseops/error.h"
#include "reference/rope.h"
#include "testing/parallel.h"

namespace fuseops::testing {
namespace {

/// Where one head set (q, k or an output) lives: buffer `buf`, element (t, head, i) at
/// offset + t * ts + head * hs + i.
struct Place {
  int buf = -1;
  int64_t offset = 0, ts = 0, hs = 0, heads = 0;
  int64_t at(int64_t t, int64_t head, int64_t i) const { return offset + t * ts + head * hs + i; }
};

struct Problem {
  RopeSpec s;
  std::vector<HostTensor> bufs, snapshot;
  Place q, k, qo, ko;
  HostTensor positions, cache, cos, sin;
  int64_t seq = 1;  ///< tokens per batch row

  int add_buffer(int64_t elems) {
    bufs.emplace_back(s.dtype, std::vector<int64_t>{elems});
    return static_cast<int>(bufs.size() - 1);
  }
};

bool heads_dim(const RopeSpec& s) { return s.heads_dim || s.head_pad > 0 || s.op == RopeOp::apply_rotary_pos_emb; }
int64_t head_stride(const RopeSpec& s) { return s.head_size + s.head_pad; }

/// Lays out q, k (and the outputs) in their buffers.
void lay_out(Problem& p) {
  const RopeSpec& s = p.s;
  const int64_t hs = head_stride(s), T = s.tokens;
  const bool key = s.has_key || s.op == RopeOp::apply_rotary_pos_emb;
  if (s.fused_qkv) {
    const int64_t w = (s.q_heads + 2 * s.k_heads) * hs + s.token_pad;
    const int b = p.add_buffer(T * w);
    p.q = Place{b, 0, w, hs, s.q_heads};
    p.k = Place{b, s.q_heads * hs, w, hs, key ? s.k_heads : 0};
  } else {
    const int64_t wq = s.q_heads * hs + s.token_pad, wk = s.k_heads * hs + s.token_pad;
    p.q = Place{p.add_buffer(T * wq), 0, wq, hs, s.q_heads};
    p.k = key ? Place{p.add_buffer(T * wk), 0, wk, hs, s.k_heads} : Place{};
  }
  p.qo = p.q;
  p.ko = p.k;
  if (s.out_of_place) {
    const int64_t wq = s.q_heads * hs + s.token_pad, wk = s.k_heads * hs + s.token_pad;
    p.qo = Place{p.add_buffer(T * wq), 0, wq, hs, s.q_heads};
    p.ko = Place{p.add_buffer(T * wk), 0, wk, hs, s.k_heads};
  }
}

void make_inputs(Problem& p, uint64_t seed) {
  const RopeSpec& s = p.s;
  for (std::size_t b = 0; b < p.bufs.size(); ++b) {
    const bool output = s.out_of_place && (static_cast<int>(b) == p.qo.buf || static_cast<int>(b) == p.ko.buf);
    if (output) p.bufs[b].poison();
    else fill_random_seeded(p.bufs[b], s.fill, seed + 31 * b);
  }
  p.snapshot = p.bufs;

  // Positions: random rows of the cache, at token 0 the last row (axis 0) and the two rows before it (M-RoPE axes 1
  // and 2: distinct positions, so that even a 1-token case tells the section layouts apart), out-of-range values at
  // the bad tokens.
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::uniform_int_distribution<int64_t> row(0, s.max_position - 1);
  const int axes = s.op == RopeOp::mrope ? s.mrope_axes : 1;
  std::vector<int64_t> shape = {s.tokens};
  if (axes == 3) shape = {3, s.tokens};
  if (s.batch > 0 && s.op != RopeOp::mrope) shape = {s.batch, s.tokens / s.batch};
  p.seq = s.batch > 0 ? s.tokens / s.batch : s.tokens;
  p.positions = HostTensor(s.pos_dtype, shape);
  for (int a = 0; a < axes; ++a) {
    for (int64_t t = 0; t < s.tokens; ++t) {
      int64_t v = t == 0 ? std::max<int64_t>(0, s.max_position - 1 - a) : row(rng);
      if (std::find(s.bad_tokens.begin(), s.bad_tokens.end(), t) != s.bad_tokens.end() && a == (t % axes)) {
        v = (t % 2 == 0) ? s.max_position : -1;
      }
      const int64_t i = a * s.tokens + t;
      if (s.pos_dtype == DType::i32) static_cast<int32_t*>(p.positions.data())[i] = static_cast<int32_t>(v);
      else static_cast<int64_t*>(p.positions.data())[i] = v;
    }
  }

  // The cache from the float64 angles, rounded to its dtype (the golden reads the rounded values back).
  const std::vector<double> inv = reference::rope_inv_freq(s.theta, s.rotary_dim);
  const int64_t h = s.rotary_dim / 2;
  if (s.op == RopeOp::apply_rotary_pos_emb) {
    p.cos = HostTensor(s.cache_dtype, {s.max_position, h});
    p.sin = HostTensor(s.cache_dtype, {s.max_position, h});
  } else {
    p.cache = HostTensor(s.cache_dtype, {s.max_position, s.rotary_dim});
  }
  for (int64_t r = 0; r < s.max_position; ++r) {
    const std::vector<double> cs = reference::rope_cache_row(inv, r);
    for (int64_t j = 0; j < h; ++j) {
      if (s.op == RopeOp::apply_rotary_pos_emb) {
        p.cos.set(r, j, static_cast<float>(cs[j]));
        p.sin.set(r, j, static_cast<float>(cs[h + j]));
      } else {
        p.cache.set(r, j, static_cast<float>(cs[j]));
        p.cache.set(r, h + j, static_cast<float>(cs[h + j]));
      }
    }
  }
}

/// The view of a head set at `base` (host or device memory of its buffer).
TensorView heads_view(const Problem& p, const Place& pl, void* base, Device dev) {
  const RopeSpec& s = p.s;
  char* data = static_cast<char*>(base) + pl.offset * static_cast<int64_t>(dtype_size(s.dtype));
  int64_t shape[5], strides[5];
  int rank = 0;
  if (s.batch > 0 && s.op != RopeOp::mrope) {
    shape[rank] = s.batch, strides[rank++] = p.seq * pl.ts;
    shape[rank] = p.seq, strides[rank++] = pl.ts;
  } else {
    shape[rank] = s.tokens, strides[rank++] = pl.ts;
  }
  if (heads_dim(s)) {
    shape[rank] = pl.heads, strides[rank++] = pl.hs;
    shape[rank] = s.head_size, strides[rank++] = 1;
  } else {
    shape[rank] = pl.heads * s.head_size, strides[rank++] = 1;
  }
  return TensorView::from_arrays(data, s.dtype, dev, rank, shape, strides);
}

void call_op(const Problem& p, const std::vector<void*>& base, Device dev, void* pos_data, void* cache_data,
             void* cos_data, void* sin_data) {
  const RopeSpec& s = p.s;
  const TensorView q = heads_view(p, p.q, base[p.q.buf], dev);
  const TensorView k = p.k.buf >= 0 ? heads_view(p, p.k, base[p.k.buf], dev) : TensorView();
  const TensorView* key = p.k.buf >= 0 ? &k : nullptr;
  TensorView pos = p.positions.view_at(pos_data, dev);
  switch (s.op) {
    case RopeOp::rotary_embedding: {
      const TensorView cache = p.cache.view_at(cache_data, dev);
      if (s.backward) rotary_embedding_backward(pos, q, key, s.head_size, cache, s.is_neox);
      else rotary_embedding(pos, q, key, s.head_size, cache, s.is_neox, s.inverse);
      return;
    }
    case RopeOp::mrope: {
      const TensorView cache = p.cache.view_at(cache_data, dev);
      if (s.backward) {
        mrope_backward(pos, q, key, s.head_size, s.rotary_dim, cache, s.section, s.is_neox, s.layout);
      } else {
        mrope(pos, q, key, s.head_size, s.rotary_dim, cache, s.section, s.is_neox, s.layout, s.inverse);
      }
      return;
    }
    case RopeOp::apply_rotary_pos_emb: {
      const TensorView qo = heads_view(p, p.qo, base[p.qo.buf], dev);
      const TensorView ko = heads_view(p, p.ko, base[p.ko.buf], dev);
      const TensorView cos = p.cos.view_at(cos_data, dev), sin = p.sin.view_at(sin_data, dev);
      const TensorView* ids = s.position_ids ? &pos : nullptr;
      if (s.backward) apply_rotary_pos_emb_backward(qo, ko, q, k, cos, sin, ids, !s.is_neox);
      else apply_rotary_pos_emb(qo, ko, q, k, cos, sin, ids, !s.is_neox, s.inverse);
      return;
    }
  }
}

void run(Problem& p, Device dev) {
  if (!dev.is_cuda()) {
    std::vector<void*> base;
    for (HostTensor& b : p.bufs) base.push_back(b.data());
    call_op(p, base, dev, p.positions.data(), p.cache.data(), p.cos.data(), p.sin.data());
    return;
  }
  std::vector<std::unique_ptr<DeviceTensor>> d;
  std::vector<void*> base;
  for (const HostTensor& b : p.bufs) {
    d.push_back(std::make_unique<DeviceTensor>(b, dev.index));
    base.push_back(d.back()->data());
  }
  DeviceTensor pos(p.positions, dev.index), cache(p.cache, dev.index), cos(p.cos, dev.index), sin(p.sin, dev.index);
  call_op(p, base, dev, pos.data(), cache.data(), cos.data(), sin.data());
  device_synchronize(dev.index);
  for (std::size_t b = 0; b < p.bufs.size(); ++b) d[b]->copy_to(p.bufs[b]);
}

int64_t position_of(const Problem& p, int axis, int64_t t) {
  if (p.s.op == RopeOp::apply_rotary_pos_emb && !p.s.position_ids) return t % p.seq;
  const int64_t i = axis * p.s.tokens + t;
  return p.s.pos_dtype == DType::i32 ? static_cast<const int32_t*>(p.positions.data())[i]
                                     : static_cast<const int64_t*>(p.positions.data())[i];
}

}  // namespace

const char* rope_op_name(RopeOp op, bool backward) {
  switch (op) {
    case RopeOp::rotary_embedding: return backward ? "rotary_embedding_backward" : "rotary_embedding";
    case RopeOp::apply_rotary_pos_emb: return backward ? "apply_rotary_pos_emb_backward" : "apply_rotary_pos_emb";
    case RopeOp::mrope: return backward ? "mrope_backward" : "mrope";
  }
  return "?";
}

std::string describe(const RopeSpec& s) {
  std::string d = std::string(rope_op_name(s.op, s.backward)) + " " + dtype_name(s.dtype) +
                  " T=" + std::to_string(s.tokens) + " Hq=" + std::to_string(s.q_heads) +
                  " Hk=" + std::to_string(s.has_key || s.op == RopeOp::apply_rotary_pos_emb ? s.k_heads : 0) +
                  " D=" + std::to_string(s.head_size) + " r=" + std::to_string(s.rotary_dim) +
                  (s.is_neox ? " neox" : " gptj") + " cache=" + dtype_name(s.cache_dtype) +
                  " pos=" + dtype_name(s.pos_dtype);
  if (s.op == RopeOp::mrope) {
    d += std::string(" ") + mrope_layout_name(s.layout) + (s.mrope_axes == 3 ? "" : " 1-D positions") + " [" +
         std::to_string(s.section[0]) + "," + std::to_string(s.section[1]) + "," + std::to_string(s.section[2]) + "]";
  }
  if (s.inverse) d += " inverse";
  if (s.fused_qkv) d += " fused-qkv";
  if (s.head_pad || s.token_pad) d += " padded";
  if (s.batch) d += " batch=" + std::to_string(s.batch);
  if (s.out_of_place) d += " out-of-place";
  if (s.op == RopeOp::apply_rotary_pos_emb && !s.position_ids) d += " no-position-ids";
  if (!s.bad_tokens.empty()) d += " bad-positions=" + std::to_string(s.bad_tokens.size());
  return d + " fill=" + fill_name(s.fill);
}

Tolerance rope_tolerance(DType dtype) { return Tolerance::for_dtype(dtype, 4); }

bool RopeOutcome::pass() const { return cmp.pass && changed == 0 && error == expected_error; }

std::string RopeOutcome::detail() const {
  std::string d;
  if (!cmp.pass) d += "golden: " + cmp.detail + " (" + std::to_string(cmp.violations) + " violations); ";
  if (changed) d += std::to_string(changed) + " elements changed that must not: " + first_changed + "; ";
  if (error != expected_error) d += "check_errors raised \"" + error + "\", expected \"" + expected_error + "\"";
  return d;
}

RopeOutcome run_rope_check(const RopeSpec& spec, Device device, uint64_t seed) {
  Problem p;
  p.s = spec;
  lay_out(p);
  make_inputs(p, seed);
  clear_errors();
  run(p, device);
  RopeOutcome out;
  try {
    check_errors();
  } catch (const Error& e) {
    out.error = e.what();
  }
  const RopeSpec& s = spec;
  const int axes = s.op == RopeOp::mrope ? s.mrope_axes : 1;
  if (!s.bad_tokens.empty()) {
    int64_t first = -1;
    for (int64_t t : s.bad_tokens) {
      const int64_t flat = (t % axes) * s.tokens + t;
      if (first < 0 || flat < first) first = flat;
    }
    const char* arg = s.op == RopeOp::apply_rotary_pos_emb ? "position_ids" : "positions";
    out.expected_error = std::string(rope_op_name(s.op, s.backward)) + ": " + arg + ": value out of range at index " +
                         std::to_string(first);
  }
  // check_errors' message goes on with where it was recorded; keep the part the op decides.
  if (!out.error.empty() && !out.expected_error.empty() && out.error.rfind(out.expected_error, 0) == 0) {
    out.error = out.expected_error;
  }

  const int64_t r = s.rotary_dim, h = r / 2;
  const std::vector<int> axis =
      s.op == RopeOp::mrope && axes == 3 ? reference::mrope_axes(s.layout, s.section, h) : std::vector<int>(h, 0);
  const bool inverse = s.inverse || s.backward;
  out.tolerance = rope_tolerance(s.dtype);
  const Place sets[2][2] = {{p.q, p.qo}, {p.k, p.ko}};
  const int64_t heads = p.q.heads + p.k.heads;

  // Marks of the elements compared with the golden; every other element must be bitwise unchanged.
  std::vector<std::vector<uint8_t>> mark(p.bufs.size());
  for (std::size_t b = 0; b < p.bufs.size(); ++b) mark[b].assign(static_cast<std::size_t>(p.bufs[b].numel()), 0);
  const int64_t block = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, heads * r / 64));
  const int64_t chunks = (s.tokens + block - 1) / block;
  std::vector<ComparisonAccumulator> acc(static_cast<std::size_t>(std::max<int64_t>(chunks, 1)),
                                         ComparisonAccumulator(s.dtype, out.tolerance, r));
  parallel_chunks(s.tokens, block, [&](int64_t c, int64_t t0, int64_t t1) {
    std::vector<double> x(static_cast<std::size_t>(r)), cs(static_cast<std::size_t>(h)), sn(cs), y, sens;
    for (int64_t t = t0; t < t1; ++t) {
      int64_t pos[3] = {0, 0, 0};
      bool valid = true;
      for (int a = 0; a < axes; ++a) {
        pos[a] = position_of(p, a, t);
        valid = valid && pos[a] >= 0 && pos[a] < s.max_position;
      }
      if (valid) {
        for (int64_t j = 0; j < h; ++j) {
          const int64_t row = pos[axis[j]];
          cs[j] = s.op == RopeOp::apply_rotary_pos_emb ? p.cos.get(row, j) : p.cache.get(row, j);
          sn[j] = s.op == RopeOp::apply_rotary_pos_emb ? p.sin.get(row, j) : p.cache.get(row, h + j);
        }
      }
      for (int set = 0; set < 2; ++set) {
        const Place& in = sets[set][0];
        const Place& o = sets[set][1];
        if (in.buf < 0) continue;
        const bool copy = o.buf != in.buf;
        if (!valid && !copy) continue;  // in place: unchanged (checked below)
        for (int64_t head = 0; head < in.heads; ++head) {
          for (int64_t i = 0; i < r; ++i) x[i] = p.snapshot[in.buf].get(0, in.at(t, head, i));
          if (valid) {
            reference::rope_head(x, cs, sn, s.is_neox, inverse, y, sens);
          } else {
            y = x;
            sens.assign(x.size(), 0.0);
          }
          const int64_t hid = (set == 0 ? 0 : p.q.heads) + head;
          for (int64_t i = 0; i < r; ++i) {
            acc[c].add((t * heads + hid) * r + i, p.bufs[o.buf].get(0, o.at(t, head, i)), y[i], sens[i]);
          }
        }
      }
    }
  });
  ComparisonAccumulator total(s.dtype, out.tolerance, r);
  for (const ComparisonAccumulator& a : acc) total.merge(a);
  out.cmp = total.finish();

  for (int64_t t = 0; t < s.tokens; ++t) {
    bool valid = true;
    for (int a = 0; a < axes; ++a) {
      const int64_t v = position_of(p, a, t);
      valid = valid && v >= 0 && v < s.max_position;
    }
    for (int set = 0; set < 2; ++set) {
      const Place& in = sets[set][0];
      const Place& o = sets[set][1];
      if (in.buf < 0 || (!valid && o.buf == in.buf)) continue;
      for (int64_t head = 0; head < o.heads; ++head) {
        for (int64_t i = 0; i < r; ++i) mark[o.buf][o.at(t, head, i)] = 1;
      }
    }
  }
  const std::size_t es = dtype_size(s.dtype);
  for (std::size_t b = 0; b < p.bufs.size(); ++b) {
    const auto* now = static_cast<const unsigned char*>(p.bufs[b].data());
    const auto* was = static_cast<const unsigned char*>(p.snapshot[b].data());
    for (int64_t i = 0; i < p.bufs[b].numel(); ++i) {
      if (mark[b][i] || std::memcmp(now + i * es, was + i * es, es) == 0) continue;
      if (out.changed++ == 0) {
        out.first_changed = "buffer " + std::to_string(b) + " element " + std::to_string(i) + ": " +
                            std::to_string(p.bufs[b].get(0, i)) + " was " + std::to_string(p.snapshot[b].get(0, i));
      }
    }
  }
  return out;
}

}  // namespace fuseops::testing
