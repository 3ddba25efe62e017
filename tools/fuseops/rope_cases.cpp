// Case sets of the rotary embeddings (docs/ops/rope.md): rotary_embedding, mrope and apply_rotary_pos_emb on the
// shapes of real models and of FlagOS' benchmark. check() runs testing/rope_problem.h (golden comparison, untouched
// elements bitwise unchanged); bench() times the op against the unfused form (gather cos / sin of every token into
// an f32 scratch, then rotate q and k one thread per pair: HF eager and vLLM's M-RoPE path).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <vector>

#include "cases.h"
#include "fuseops/rope.h"
#include "gpu.h"
#include "reference/rope.h"
#include "testing/rope_problem.h"

namespace fuseops::cli {
namespace {

using testing::RopeOp;

struct Spec {
  RopeOp op = RopeOp::rotary_embedding;
  int64_t tokens = 1, hq = 1, hk = 1, d = 128, r = 128;
  bool neox = true;
  MropeLayout layout = MropeLayout::chunked;
  std::array<int64_t, 3> section = {0, 0, 0};
  int64_t head_stride = 0;  ///< 0: d (DeepSeek's q_pe: 192)
  int64_t batch = 0;        ///< apply_rotary_pos_emb: q [batch, tokens / batch, Hq, D]
  bool backward = false;
  double theta = 10000;
  int64_t max_position = 32768;
  DType dtype = DType::bf16, cache_dtype = DType::bf16;

  int axes() const { return op == RopeOp::mrope ? 3 : 1; }
  int64_t hs() const { return head_stride ? head_stride : d; }
};

/// max_position where a case does not give it: the anchors' script's for apply_rotary_pos_emb (the sequence, at
/// least 4096 rows), the hooks' default otherwise.
int64_t default_max_position(const Spec& s) {
  return s.batch > 0 ? std::max<int64_t>(s.tokens / s.batch, 4096) : 32768;
}

/// "4096x32/8x128" (tokens x Hq / Hk x D), then "r64" (rotary_dim < D), "j" (GPT-J), ",hs192" (head stride),
/// ",B4" (batch of apply_rotary_pos_emb), ",sec24/20/20" (mrope_section), ",theta500000" (theta != 10000), ",mp8192"
/// (max_position != default_max_position), ",cache f32" (cache dtype != data dtype): every parameter that tells two
/// cases of one op apart; bench/baselines parses it.
std::string shape_of(const Spec& s) {
  std::string v = std::to_string(s.tokens) + "x" + std::to_string(s.hq) + "/" + std::to_string(s.hk) + "x" +
                  std::to_string(s.d);
  if (s.r != s.d) v += "r" + std::to_string(s.r);
  v += s.neox ? "" : "j";
  if (s.head_stride) v += ",hs" + std::to_string(s.head_stride);
  if (s.batch) v += ",B" + std::to_string(s.batch);
  if (s.op == RopeOp::mrope) {
    const auto& sec = s.section;
    v += ",sec" + std::to_string(sec[0]) + "/" + std::to_string(sec[1]) + "/" + std::to_string(sec[2]);
  }
  if (s.theta != 10000) {  // as config.json writes it: 1000000, not 1e+06
    const bool whole = s.theta < 1e15 && std::floor(s.theta) == s.theta;
    v += ",theta" + (whole ? std::to_string(static_cast<int64_t>(s.theta)) : value_text(ParamValue{s.theta}));
  }
  if (s.max_position != default_max_position(s)) v += ",mp" + std::to_string(s.max_position);
  return s.cache_dtype == s.dtype ? v : v + ",cache " + dtype_name(s.cache_dtype);
}

std::string op_of(const Spec& s) {
  std::string o = testing::rope_op_name(s.op, s.backward);
  if (s.op == RopeOp::mrope) o += std::string("(") + mrope_layout_name(s.layout) + ")";
  return o;
}

testing::RopeSpec check_spec(const Spec& s, int64_t tokens, bool cpu) {
  testing::RopeSpec r;
  r.op = s.op;
  r.dtype = s.dtype;
  r.cache_dtype = s.cache_dtype;
  r.q_heads = s.hq;
  r.k_heads = s.hk;
  r.head_size = s.d;
  r.rotary_dim = s.r;
  r.is_neox = s.neox;
  r.backward = s.backward;
  r.head_pad = s.hs() - s.d;
  r.theta = s.theta;
  r.max_position = cpu ? std::min<int64_t>(s.max_position, 4096) : s.max_position;
  r.layout = s.layout;
  r.section = s.section;
  r.tokens = tokens;
  if (s.batch > 0) {
    r.batch = std::min(s.batch, std::max<int64_t>(tokens, 1));
    r.tokens = tokens / r.batch * r.batch;
    r.out_of_place = true;  // FlagGems' default (inplace=False)
  }
  return r;
}

/// Host tensors of positions and the cache (or cos and sin) for the benchmark: prefill positions t (M-RoPE: t, a
/// 16-wide grid's row and column).
struct Tables {
  testing::HostTensor pos, cache, cos, sin;
};

Tables make_tables(const Spec& s) {
  Tables t;
  const int64_t h = s.r / 2, rows = s.max_position;
  t.pos = s.batch > 0 ? testing::HostTensor(DType::i64, {s.batch, s.tokens / s.batch})
                      : testing::HostTensor(DType::i64, s.axes() == 3 ? std::vector<int64_t>{3, s.tokens}
                                                                      : std::vector<int64_t>{s.tokens});
  auto* p = static_cast<int64_t*>(t.pos.data());
  const int64_t seq = s.batch > 0 ? s.tokens / s.batch : s.tokens;
  for (int64_t i = 0; i < s.tokens; ++i) {
    p[i] = (i % seq) % rows;
    if (s.axes() == 3) {
      p[s.tokens + i] = (i / 16) % rows;
      p[2 * s.tokens + i] = (i % 16) % rows;
    }
  }
  const std::vector<double> inv = reference::rope_inv_freq(s.theta, s.r);
  const bool split = s.op == RopeOp::apply_rotary_pos_emb;
  if (split) {
    t.cos = testing::HostTensor(s.cache_dtype, {rows, h});
    t.sin = testing::HostTensor(s.cache_dtype, {rows, h});
  } else {
    t.cache = testing::HostTensor(s.cache_dtype, {rows, s.r});
  }
  for (int64_t row = 0; row < rows; ++row) {
    const std::vector<double> cs = reference::rope_cache_row(inv, row);
    for (int64_t j = 0; j < h; ++j) {
      if (split) {
        t.cos.set(row, j, static_cast<float>(cs[j]));
        t.sin.set(row, j, static_cast<float>(cs[h + j]));
      } else {
        t.cache.set(row, j, static_cast<float>(cs[j]));
        t.cache.set(row, h + j, static_cast<float>(cs[h + j]));
      }
    }
  }
  return t;
}

/// The op's views over q / k (and outputs) buffers laid out as [T, H, hs] rows, positions and tables.
struct Views {
  TensorView q, k, qo, ko, pos, cache, cos, sin;
};

TensorView heads_view(const Spec& s, void* data, int64_t heads, Device dev) {
  const int64_t ts = heads * s.hs();
  if (s.batch > 0) {
    const int64_t seq = s.tokens / s.batch;
    return TensorView(data, s.dtype, dev, {s.batch, seq, heads, s.d}, {seq * ts, ts, s.hs(), 1});
  }
  return TensorView(data, s.dtype, dev, {s.tokens, heads, s.d}, {ts, s.hs(), 1});
}

void run_op(const Spec& s, const Views& v, Stream stream) {
  switch (s.op) {
    case RopeOp::rotary_embedding:
      if (s.backward) rotary_embedding_backward(v.pos, v.q, &v.k, s.d, v.cache, s.neox, stream);
      else rotary_embedding(v.pos, v.q, &v.k, s.d, v.cache, s.neox, false, stream);
      return;
    case RopeOp::mrope:
      mrope(v.pos, v.q, &v.k, s.d, s.r, v.cache, s.section, s.neox, s.layout, false, stream);
      return;
    case RopeOp::apply_rotary_pos_emb:
      apply_rotary_pos_emb(v.qo, v.ko, v.q, v.k, v.cos, v.sin, &v.pos, !s.neox, false, stream);
      return;
  }
}

std::size_t heads_bytes(const Spec& s, int64_t heads) {
  return static_cast<std::size_t>(s.tokens * heads * s.hs()) * dtype_size(s.dtype);
}

class RopeBench : public BenchProblem {
 public:
  explicit RopeBench(const Spec& s) : s_(s) {}
  std::size_t set_bytes() const override {
    const std::size_t io = heads_bytes(s_, s_.hq) + heads_bytes(s_, s_.hk);
    return (s_.batch > 0 ? 2 : 1) * io + tables_.pos.bytes() + tables_.cache.bytes() + tables_.cos.bytes() +
           tables_.sin.bytes();
  }
  /// Rotated parts read and written, the positions, one cache value per pair and per cos / sin.
  double bytes() const override {
    const double es = static_cast<double>(dtype_size(s_.dtype)), ce = static_cast<double>(dtype_size(s_.cache_dtype));
    return static_cast<double>(s_.tokens) * (2.0 * (s_.hq + s_.hk) * s_.r * es + 8.0 * s_.axes() + s_.r * ce);
  }
  double flops() const override { return 3.0 * static_cast<double>(s_.tokens) * (s_.hq + s_.hk) * s_.r; }
  void allocate(int sets) override {
    const Device dev = Device::cuda(0);
    for (int i = 0; i < sets; ++i) {
      Set set;
      set.q = gpu::Buffer(heads_bytes(s_, s_.hq));
      set.k = gpu::Buffer(heads_bytes(s_, s_.hk));
      gpu::fill_random(set.q.get(), s_.dtype, s_.tokens * s_.hq * s_.hs(), 100 + 2 * i);
      gpu::fill_random(set.k.get(), s_.dtype, s_.tokens * s_.hk * s_.hs(), 101 + 2 * i);
      set.pos = std::make_unique<testing::DeviceTensor>(tables_.pos);
      set.v.q = heads_view(s_, set.q.get(), s_.hq, dev);
      set.v.k = heads_view(s_, set.k.get(), s_.hk, dev);
      set.v.pos = set.pos->view();
      if (s_.op == RopeOp::apply_rotary_pos_emb) {
        set.qo = gpu::Buffer(heads_bytes(s_, s_.hq));
        set.ko = gpu::Buffer(heads_bytes(s_, s_.hk));
        set.v.qo = heads_view(s_, set.qo.get(), s_.hq, dev);
        set.v.ko = heads_view(s_, set.ko.get(), s_.hk, dev);
        set.cos = std::make_unique<testing::DeviceTensor>(tables_.cos);
        set.sin = std::make_unique<testing::DeviceTensor>(tables_.sin);
        set.v.cos = set.cos->view();
        set.v.sin = set.sin->view();
      } else {
        set.cache = std::make_unique<testing::DeviceTensor>(tables_.cache);
        set.v.cache = set.cache->view();
      }
      sets_.push_back(std::move(set));
    }
    tmp_ = gpu::Buffer(static_cast<std::size_t>(std::max<int64_t>(s_.tokens * s_.r, 1)) * 4);
    axes_.assign(static_cast<std::size_t>(s_.r / 2), 0);
    if (s_.axes() == 3) {
      std::vector<int> a = reference::mrope_axes(s_.layout, s_.section, s_.r / 2);
      std::copy(a.begin(), a.end(), axes_.begin());
    }
  }
  void run(int set, void* stream) override { run_op(s_, sets_[set].v, Stream(stream)); }
  bool run_baseline(int set, void* stream) override {
    const Set& st = sets_[set];
    const bool split = s_.op == RopeOp::apply_rotary_pos_emb;
    const int64_t h = s_.r / 2;
    gpu::RopeHeadsView q{st.q.get(), s_.hq, s_.hq * s_.hs(), s_.hs()}, k{st.k.get(), s_.hk, s_.hk * s_.hs(), s_.hs()};
    const void* cos = split ? st.cos->data() : st.cache->data();
    const void* sin =
        split ? st.sin->data() : static_cast<const char*>(st.cache->data()) + h * dtype_size(s_.cache_dtype);
    gpu::unfused_rope(s_.dtype, q, k, s_.tokens, s_.r, s_.neox, s_.cache_dtype, cos, sin, split ? h : s_.r,
                      static_cast<const int64_t*>(st.pos->data()), s_.axes(), axes_.data(), tmp_.get(), stream);
    return true;
  }

 private:
  struct Set {
    gpu::Buffer q, k, qo, ko;
    std::unique_ptr<testing::DeviceTensor> pos, cache, cos, sin;
    Views v;
  };
  Spec s_;
  Tables tables_ = make_tables(s_);
  std::vector<Set> sets_;
  gpu::Buffer tmp_;
  std::vector<unsigned char> axes_;
};

class RopeCase : public OpCase {
 public:
  explicit RopeCase(const Spec& s) : s_(s) {
    family = "rope";
    op = op_of(s);
    shape = shape_of(s);
    baseline = "gather+rotate";
    dtype = s.dtype;
    rows = s.tokens;
    decode = s.tokens <= 64;
  }

  CheckOutcome check(Device device, int64_t nrows, uint64_t seed) const override {
    const auto t0 = std::chrono::steady_clock::now();
    const testing::RopeSpec spec = check_spec(s_, nrows, !device.is_cuda());
    const testing::RopeOutcome o = testing::run_rope_check(spec, device, seed);
    CheckOutcome r;
    r.pass = o.pass();
    r.max_abs_error = o.cmp.max_abs_error;
    r.rel_rms_error = o.cmp.rel_rms_error;
    r.tolerance = o.tolerance.describe();
    r.detail = o.pass() ? "" : o.detail();
    r.rows_checked = spec.tokens;  // a whole number of apply_rotary_pos_emb sequences: at most nrows
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  }

  double time_cpu_us(int64_t nrows) const override {
    Spec s = s_;
    s.tokens = s.batch > 0 ? std::max<int64_t>(nrows / s.batch, 1) * s.batch : nrows;
    s.max_position = std::min<int64_t>(s.max_position, 4096);
    const Tables t = make_tables(s);
    testing::HostTensor q(s.dtype, {s.tokens * s.hq * s.hs()}), k(s.dtype, {s.tokens * s.hk * s.hs()});
    testing::HostTensor qo = q, ko = k;
    testing::fill_random_seeded(q, testing::Fill::normal, 1);
    testing::fill_random_seeded(k, testing::Fill::normal, 2);
    const Device cpu = Device::cpu();
    Views v;
    v.q = heads_view(s, q.data(), s.hq, cpu);
    v.k = heads_view(s, k.data(), s.hk, cpu);
    v.qo = heads_view(s, qo.data(), s.hq, cpu);
    v.ko = heads_view(s, ko.data(), s.hk, cpu);
    v.pos = t.pos.view();
    v.cache = t.cache.view();
    v.cos = t.cos.view();
    v.sin = t.sin.view();
    return median_wall_us([&] { run_op(s, v, Stream()); });
  }

  std::unique_ptr<BenchProblem> bench() const override { return std::make_unique<RopeBench>(s_); }

 private:
  Spec s_;
};

CaseFactory make(std::vector<Spec> specs) { return case_factory<RopeCase>(std::move(specs)); }

/// `proto` at each token count.
std::vector<Spec> at_tokens(Spec proto, std::initializer_list<int64_t> tokens) {
  std::vector<Spec> v;
  for (int64_t t : tokens) {
    proto.tokens = t;
    v.push_back(proto);
  }
  return v;
}

Spec rope(int64_t hq, int64_t hk, int64_t d, int64_t r, bool neox, double theta) {
  Spec s;
  s.hq = hq, s.hk = hk, s.d = d, s.r = r, s.neox = neox, s.theta = theta;
  return s;
}

Spec mrope_spec(int64_t hq, int64_t hk, int64_t d, int64_t r, bool neox, MropeLayout layout,
                std::array<int64_t, 3> section, double theta) {
  Spec s = rope(hq, hk, d, r, neox, theta);
  s.op = RopeOp::mrope;
  s.layout = layout;
  s.section = section;
  return s;
}

Spec flaggems(int64_t b, int64_t seq, int64_t hq, int64_t hk, int64_t d, bool neox) {
  Spec s = rope(hq, hk, d, d, neox, 10000);
  s.op = RopeOp::apply_rotary_pos_emb;
  s.batch = b;
  s.tokens = b * seq;
  s.max_position = default_max_position(s);  // as the anchors' script
  return s;
}

/// The parameters every rope hook takes (docs/cases.md).
std::vector<ParamSpec> rope_params(bool rotary_dim, bool head_stride, bool apply) {
  std::vector<ParamSpec> v = {integer_param("tokens", "T (all sequences)"), integer_param("num_heads", "Hq, query heads"),
                              integer_param("num_kv_heads", "Hk, key heads"),
                              integer_param("head_size", "D (even)", std::nullopt, 2)};
  if (rotary_dim) v.push_back(integer_param("rotary_dim", "rotated dims, even, <= head_size (0: head_size)", 0, 0));
  if (head_stride) v.push_back(integer_param("head_stride", "elements between heads, >= head_size (0: head_size)", 0, 0));
  v.push_back(bool_param("is_neox", "NeoX (true: halves) or GPT-J (false: adjacent pairs)", true));
  v.push_back(ParamSpec{"theta", ParamKind::number, "rope base", 10000.0, {}, 0, INT64_MAX});
  v.push_back(apply ? integer_param("max_position", "rows of cos / sin (0: the sequence, at least 4096)", 0, 0,
                                    int64_t{1} << 24)
                    : integer_param("max_position", "rows of the cos / sin cache", 32768, 1, int64_t{1} << 24));
  v.push_back(dtype_param());
  v.push_back(text_param("cache_dtype", "dtype of the cos / sin cache (same: the data's)", "same", {"same", "f32", "f16", "bf16"}));
  return v;
}

/// The Spec of a rope hook's parameters, with the checks common to every rope op.
Spec rope_spec_of(const CaseParams& p, RopeOp op) {
  Spec s;
  s.op = op;
  s.tokens = p.integer("tokens");
  s.hq = p.integer("num_heads");
  s.hk = p.integer("num_kv_heads");
  s.d = p.integer("head_size");
  s.r = p.has("rotary_dim") && p.integer("rotary_dim") != 0 ? p.integer("rotary_dim") : s.d;
  s.head_stride = p.has("head_stride") ? p.integer("head_stride") : 0;
  s.neox = p.boolean("is_neox");
  s.theta = p.number("theta");
  s.max_position = p.integer("max_position");
  s.dtype = dtype_from_name("dtype", p.text("dtype"));
  s.cache_dtype = p.text("cache_dtype") == "same" ? s.dtype : dtype_from_name("cache_dtype", p.text("cache_dtype"));
  if (s.d % 2 != 0) throw ParamError("head_size", "head_size " + std::to_string(s.d) + " is odd");
  if (s.r % 2 != 0 || s.r > s.d) {
    throw ParamError("rotary_dim", "rotary_dim " + std::to_string(s.r) + " must be even and <= head_size " + std::to_string(s.d));
  }
  if (s.r > kRopeMaxRotaryDim) {  // rotary_dim is head_size where not given (and apply_rotary_pos_emb has none)
    const bool given = p.has("rotary_dim") && p.integer("rotary_dim") != 0;
    throw ParamError(given ? "rotary_dim" : "head_size", std::string(given ? "rotary_dim " : "head_size ") +
                                                             std::to_string(s.r) + " is above the ops' limit of " +
                                                             std::to_string(kRopeMaxRotaryDim) + " rotated dims");
  }
  if (s.head_stride != 0 && s.head_stride < s.d) {
    throw ParamError("head_stride", "head_stride " + std::to_string(s.head_stride) + " is below head_size " + std::to_string(s.d));
  }
  if (!(s.theta > 1.0) || !std::isfinite(s.theta)) throw ParamError("theta", "theta must be finite and above 1");
  const char* const row = s.head_stride ? "head_stride" : "head_size";  // the elements a head takes, by name
  bounded_product({{"tokens", s.tokens}, {"num_heads", s.hq}, {row, s.hs()}});
  bounded_product({{"tokens", s.tokens}, {"num_kv_heads", s.hk}, {row, s.hs()}});
  return s;
}

OpSpec rope_op(RopeOp op, bool backward) {
  OpSpec spec;
  spec.family = "rope";
  spec.name = testing::rope_op_name(op, backward);
  const bool mrope = op == RopeOp::mrope, apply = op == RopeOp::apply_rotary_pos_emb;
  spec.help = apply ? "rotary embedding of q, k [batch, seq, H, D] from cos / sin tables (FlagGems), out of place"
              : mrope ? "multimodal rotary embedding (3 position axes) of q, k [T, H, D] in place"
                      : "rotary embedding of q, k [T, H, D] in place from a cos / sin cache (vLLM)";
  if (mrope) {  // the printed names, each implying its layout where the entry gives none (it ran chunked)
    spec.aliases = {"mrope(chunked)", "mrope(interleaved)", "mrope(interleaved_glm)"};
    for (const char* layout : {"chunked", "interleaved", "interleaved_glm"}) {
      spec.alias_defaults[std::string("mrope(") + layout + ")"] = {{"mrope_layout", std::string(layout)}};
    }
  }
  spec.params = rope_params(!apply, op == RopeOp::rotary_embedding, apply);
  if (apply) spec.params.insert(spec.params.begin() + 1, integer_param("batch", "sequences; tokens = batch x seq", 1));
  if (mrope) {
    ParamSpec section;
    section.name = "mrope_section";
    section.kind = ParamKind::int_list;
    section.help = "[s_t, s_h, s_w], summing to rotary_dim / 2";
    spec.params.push_back(section);  // required
    spec.params.push_back(text_param("mrope_layout", "axis of each pair: chunked (Qwen2-VL, and GLM-4.1V with GPT-J "
                                     "pairs as HF / vLLM run it), interleaved (Qwen3-VL), interleaved_glm (FlagGems' GLM "
                                     "map)", "chunked", {"chunked", "interleaved", "interleaved_glm"}));
  }
  spec.make = [op, backward, mrope, apply](const CaseParams& p) -> std::unique_ptr<OpCase> {
    Spec s = rope_spec_of(p, op);
    s.backward = backward;
    if (apply) {
      s.batch = p.integer("batch");
      if (s.tokens % s.batch != 0) {
        throw ParamError("batch", "tokens " + std::to_string(s.tokens) + " is not a multiple of batch " + std::to_string(s.batch));
      }
      if (s.max_position == 0) s.max_position = default_max_position(s);
    }
    if (mrope) {
      const std::vector<int64_t>& sec = p.int_list("mrope_section");
      if (sec.size() != 3) throw ParamError("mrope_section", "expected 3 values [s_t, s_h, s_w], got " + std::to_string(sec.size()));
      for (const int64_t v : sec) {  // each in [0, rotary_dim / 2] first, so that the sum cannot wrap
        if (v < 0 || v > s.r / 2) {
          throw ParamError("mrope_section", "a section is " + std::to_string(v) + ", not in [0, rotary_dim / 2 = " +
                                                std::to_string(s.r / 2) + "]");
        }
      }
      if (sec[0] + sec[1] + sec[2] != s.r / 2) {
        throw ParamError("mrope_section", "the sections sum to " + std::to_string(sec[0] + sec[1] + sec[2]) +
                                              ", not rotary_dim / 2 = " + std::to_string(s.r / 2));
      }
      s.section = {sec[0], sec[1], sec[2]};
      const std::string l = p.text("mrope_layout");
      s.layout = l == "interleaved" ? MropeLayout::interleaved : l == "interleaved_glm" ? MropeLayout::interleaved_glm
                                                                                       : MropeLayout::chunked;
    }
    return std::make_unique<RopeCase>(s);
  };
  return spec;
}

}  // namespace

void register_rope_cases(Registry& r) {
  r.add_op(rope_op(RopeOp::rotary_embedding, false));
  r.add_op(rope_op(RopeOp::rotary_embedding, true));
  r.add_op(rope_op(RopeOp::apply_rotary_pos_emb, false));
  r.add_op(rope_op(RopeOp::mrope, false));
  const std::initializer_list<int64_t> tokens = {1, 64, 4096, 16384};
  Spec llama = rope(32, 8, 128, 128, true, 500000);
  std::vector<Spec> llama_cases = at_tokens(llama, tokens);
  llama.backward = true;
  llama.tokens = 4096;
  llama_cases.push_back(llama);
  r.add("llama3-8b", "rotary_embedding Hq 32, Hk 8, D 128, theta 500000 (backward at 4096 tokens)", true,
        make(llama_cases));
  r.add("qwen3-next-80b", "rotary_embedding rotary 64 of head 256, Hq 16, Hk 2", true,
        make(at_tokens(rope(16, 2, 256, 64, true, 10000000), tokens)));
  Spec ds = rope(128, 1, 64, 64, false, 10000);
  ds.head_stride = 192;  // q_pe: the last 64 dims of each 192-wide q head
  r.add("deepseek-v3", "MLA rope part (q_pe 128 heads, head stride 192; k_pe 1 head), rotary 64, GPT-J",
        true, make(at_tokens(ds, tokens)));
  r.add("qwen3-vl", "Qwen3-VL-30B-A3B: M-RoPE interleaved [24, 20, 20], Hq 32, Hk 4, D 128", true,
        make(at_tokens(mrope_spec(32, 4, 128, 128, true, MropeLayout::interleaved, {24, 20, 20}, 5000000), tokens)));
  r.add("qwen2.5-vl", "Qwen2.5-VL-7B: M-RoPE chunked [16, 24, 24], Hq 28, Hk 4, D 128", true,
        make(at_tokens(mrope_spec(28, 4, 128, 128, true, MropeLayout::chunked, {16, 24, 24}, 1000000), tokens)));
  // GLM-4.1V: FlagGems' GLM round-robin map (the layout issue 6 names for it) and chunked, the layout HF and vLLM run
  // the model with (docs/ops/rope.md)
  std::vector<Spec> glm = at_tokens(mrope_spec(32, 2, 128, 64, false, MropeLayout::interleaved_glm, {8, 12, 12}, 10000),
                                    tokens);
  for (const Spec& s : at_tokens(mrope_spec(32, 2, 128, 64, false, MropeLayout::chunked, {8, 12, 12}, 10000), tokens)) {
    glm.push_back(s);
  }
  r.add("glm-4.1v", "GLM-4.1V-9B: M-RoPE [8, 12, 12], rotary 64 of 128, GPT-J, Hq 32, Hk 2: FlagGems' GLM round-robin "
        "map, and chunked as HF / vLLM run the model", true, make(glm));
  std::vector<Spec> flagos;
  for (bool neox : {true, false}) {
    flagos.push_back(flaggems(4, 2048, 32, 32, 128, neox));
    flagos.push_back(flaggems(1, 4096, 32, 32, 64, neox));
    flagos.push_back(flaggems(8, 1024, 16, 16, 128, neox));
    flagos.push_back(flaggems(1, 8192, 32, 8, 128, neox));
  }
  flagos.push_back(flaggems(64, 1, 32, 8, 128, true));
  r.add("flagos", "apply_rotary_pos_emb (B, S, Hq, D) NeoX and GPT-J, 64 decode tokens", true, make(flagos));
  std::vector<Spec> dtypes;
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const std::vector<DType> caches = t == DType::f32 ? std::vector<DType>{t} : std::vector<DType>{DType::f32, t};
    for (DType c : caches) {
      Spec s = rope(8, 2, 128, 80, true, 10000);
      s.dtype = t, s.cache_dtype = c, s.tokens = 257;
      dtypes.push_back(s);
      s = mrope_spec(8, 2, 128, 128, false, MropeLayout::interleaved, {24, 20, 20}, 1000000);
      s.dtype = t, s.cache_dtype = c, s.tokens = 257;
      dtypes.push_back(s);
      s = flaggems(2, 100, 4, 2, 64, false);
      s.dtype = t, s.cache_dtype = c;
      dtypes.push_back(s);
    }
  }
  r.add("rope-dtypes", "rotary embeddings in f32 / f16 / bf16 with fp32 and same-dtype caches, partial rotary 80",
        false, make(dtypes));
}

}  // namespace fuseops::cli
