#include "test_util.h"

#include <cstring>
#include <stdexcept>
#include <sstream>

namespace fuseops_test {

using fuseops::GeluApproximate;
using fuseops::detail::Act;

uint64_t run_seed() {
  static const uint64_t seed = ft::seed_from_env_or_clock();
  return seed;
}

std::mt19937_64 test_rng() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "";
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across platforms, unlike std::hash
  for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
  std::seed_seq seq{static_cast<uint32_t>(run_seed()), static_cast<uint32_t>(run_seed() >> 32),
                    static_cast<uint32_t>(h), static_cast<uint32_t>(h >> 32)};
  return std::mt19937_64(seq);
}

std::string take_device_error(int device) {
  try {
    fuseops::check_errors(device);
  } catch (const fuseops::Error& e) {
    EXPECT_EQ(e.kind(), fuseops::ErrorKind::device_value) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "check_errors() did not raise";
  return "";
}

const char* where_name(Where where) { return where == Where::cpu ? "cpu" : "cuda"; }

bool cuda_available() { return fuseops::built_with_cuda() && fuseops::cuda_device_count() > 0; }

int64_t Region::rows() const {
  int64_t r = 1;
  for (std::size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
  return r;
}

Workspace::Workspace(Where where, DType dtype) : where_(where), dtype_(dtype) {}
Workspace::~Workspace() = default;

int Workspace::buffer(int64_t elems) {
  host_.emplace_back(dtype_, std::vector<int64_t>{elems});
  host_.back().poison();
  return static_cast<int>(host_.size()) - 1;
}

Region Workspace::region(std::vector<int64_t> shape, int64_t offset, int64_t pitch) {
  Region r;
  r.shape = std::move(shape);
  r.offset = offset;
  r.pitch = pitch > 0 ? pitch : r.cols();
  r.buffer = buffer(r.end());
  return r;
}

void Workspace::write(const Region& r, const HostTensor& compact) {
  if (r.cols() == 0) return;  // no bytes (and possibly no buffers to point at)
  const std::size_t es = fuseops::dtype_size(dtype_);
  auto* dst = static_cast<unsigned char*>(host_[r.buffer].data());
  const auto* src = static_cast<const unsigned char*>(compact.data());
  for (int64_t i = 0; i < r.rows(); ++i) {
    std::memcpy(dst + (r.offset + i * r.pitch) * es, src + i * compact.row_pitch() * es, r.cols() * es);
  }
}

HostTensor Workspace::read(const Region& r) const {
  HostTensor out(dtype_, r.shape);
  if (r.cols() == 0) return out;
  const std::size_t es = fuseops::dtype_size(dtype_);
  const auto* src = static_cast<const unsigned char*>(host_[r.buffer].data());
  auto* dst = static_cast<unsigned char*>(out.data());
  for (int64_t i = 0; i < r.rows(); ++i) {
    std::memcpy(dst + i * r.cols() * es, src + (r.offset + i * r.pitch) * es, r.cols() * es);
  }
  return out;
}

void Workspace::upload() {
  snapshot_ = host_;
  device_.clear();
  if (where_ == Where::cuda) {
    for (const HostTensor& h : host_) device_.push_back(std::make_unique<ft::DeviceTensor>(h));
  }
}

TensorView Workspace::view(const Region& r) const {
  if (where_ == Where::cuda && static_cast<std::size_t>(r.buffer) >= device_.size()) {
    throw std::logic_error("test workspace: view() of a CUDA buffer before upload() allocated it");
  }
  const HostTensor& h = host_[r.buffer];
  char* base = static_cast<char*>(where_ == Where::cuda ? device_[r.buffer]->data() : const_cast<void*>(h.data()));
  if (base) base += r.offset * static_cast<int64_t>(fuseops::dtype_size(dtype_));
  std::vector<int64_t> strides(r.shape.size(), 1);
  int64_t running = r.pitch;
  for (int i = static_cast<int>(r.shape.size()) - 2; i >= 0; --i) {
    strides[i] = running;
    running *= r.shape[i];
  }
  const fuseops::Device dev = where_ == Where::cuda ? fuseops::Device::cuda(0) : fuseops::Device::cpu();
  return TensorView::from_arrays(base, dtype_, dev, static_cast<int32_t>(r.shape.size()), r.shape.data(),
                                 strides.data());
}

void Workspace::download() {
  if (where_ != Where::cuda) return;
  ft::device_synchronize(0);
  for (std::size_t i = 0; i < host_.size(); ++i) device_[i]->copy_to(host_[i]);
}

::testing::AssertionResult Workspace::unchanged_outside(const std::vector<Region>& written) const {
  const std::size_t es = fuseops::dtype_size(dtype_);
  for (std::size_t b = 0; b < host_.size(); ++b) {
    std::vector<bool> covered(static_cast<std::size_t>(host_[b].numel()), false);
    for (const Region& r : written) {
      if (r.buffer != static_cast<int>(b)) continue;
      for (int64_t i = 0; i < r.rows(); ++i)
        for (int64_t c = 0; c < r.cols(); ++c) covered[r.offset + i * r.pitch + c] = true;
    }
    const auto* now = static_cast<const unsigned char*>(host_[b].data());
    const auto* was = static_cast<const unsigned char*>(snapshot_[b].data());
    for (std::size_t e = 0; e < covered.size(); ++e) {
      if (!covered[e] && std::memcmp(now + e * es, was + e * es, es) != 0) {
        return ::testing::AssertionFailure() << "buffer " << b << " element " << e
                                             << " outside every output was modified (now " << host_[b].get(0, e)
                                             << ", was " << snapshot_[b].get(0, e) << ")";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------------------------------------------

int num_outputs(Form form) { return form == Form::backward ? 2 : 1; }
int num_args(Form form) { return form == Form::fused ? 2 : form == Form::split ? 3 : 5; }

std::vector<std::string> arg_names(Form form) {
  switch (form) {
    case Form::fused: return {"out", "input"};
    case Form::split: return {"out", "gate", "up"};
    case Form::backward: return {"dgate", "dup", "dout", "gate", "up"};
  }
  return {};
}

const std::vector<OpCase>& all_ops() {
  using V = std::vector<TensorView>;
  static const std::vector<OpCase> ops = {
      {"silu_and_mul", Form::fused, Act::silu, [](const V& a) { fuseops::silu_and_mul(a[0], a[1]); }},
      {"gelu_and_mul_none", Form::fused, Act::gelu,
       [](const V& a) { fuseops::gelu_and_mul(a[0], a[1], GeluApproximate::none); }},
      {"gelu_and_mul_tanh", Form::fused, Act::gelu_tanh,
       [](const V& a) { fuseops::gelu_and_mul(a[0], a[1], GeluApproximate::tanh); }},
      {"gelu_tanh_and_mul", Form::fused, Act::gelu_tanh, [](const V& a) { fuseops::gelu_tanh_and_mul(a[0], a[1]); }},
      {"silu_and_mul_split", Form::split, Act::silu,
       [](const V& a) { fuseops::silu_and_mul_split(a[0], a[1], a[2]); }},
      {"gelu_and_mul_split_none", Form::split, Act::gelu,
       [](const V& a) { fuseops::gelu_and_mul_split(a[0], a[1], a[2], GeluApproximate::none); }},
      {"gelu_and_mul_split_tanh", Form::split, Act::gelu_tanh,
       [](const V& a) { fuseops::gelu_and_mul_split(a[0], a[1], a[2], GeluApproximate::tanh); }},
      {"silu_and_mul_backward", Form::backward, Act::silu,
       [](const V& a) { fuseops::silu_and_mul_backward(a[0], a[1], a[2], a[3], a[4]); }},
      {"gelu_and_mul_backward_none", Form::backward, Act::gelu,
       [](const V& a) { fuseops::gelu_and_mul_backward(a[0], a[1], a[2], a[3], a[4], GeluApproximate::none); }},
      {"gelu_and_mul_backward_tanh", Form::backward, Act::gelu_tanh,
       [](const V& a) { fuseops::gelu_and_mul_backward(a[0], a[1], a[2], a[3], a[4], GeluApproximate::tanh); }},
  };
  return ops;
}

std::vector<fuseops::reference::Golden> golden(const OpCase& op, const std::vector<HostTensor>& in) {
  namespace ref = fuseops::reference;
  switch (op.form) {
    case Form::fused: return {ref::act_and_mul_fused(op.act, in[0])};
    case Form::split: return {ref::act_and_mul(op.act, in[0], in[1])};
    case Form::backward: {
      ref::GoldenBackward g = ref::act_and_mul_backward(op.act, in[0], in[1], in[2]);
      return {std::move(g.dgate), std::move(g.dup)};
    }
  }
  return {};
}

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::contiguous: return "contiguous";
    case Layout::pitched: return "pitched";
    case Layout::misaligned: return "misaligned";
    case Layout::shared: return "shared";
  }
  return "?";
}

namespace {
std::vector<int64_t> with_last(std::vector<int64_t> lead, int64_t last) {
  lead.push_back(last);
  return lead;
}

/// Regions of every argument in declaration order.
std::vector<Region> plan(Workspace& ws, Form form, Layout layout, const std::vector<int64_t>& lead, int64_t d) {
  const int n = num_args(form);
  std::vector<Region> regions;
  if (layout == Layout::shared) {
    int64_t rows = 1;
    for (int64_t l : lead) rows *= l;
    auto halves = [&](int64_t width, std::vector<int64_t> firsts) {  // views at these columns of one buffer
      const int buf = ws.buffer(rows == 0 ? 0 : rows * width);
      for (int64_t col : firsts) {
        Region r;
        r.buffer = buf;
        r.offset = col;
        r.pitch = width;
        r.shape = with_last(lead, col == d && form == Form::fused ? 2 * d : d);
        regions.push_back(r);
      }
    };
    if (form == Form::fused) {
      halves(3 * d, {0, d});  // out | input
    } else {
      if (form == Form::backward) halves(2 * d, {0, d});  // dgate | dup
      else regions.push_back(ws.region(with_last(lead, d)));
      if (form == Form::backward) regions.push_back(ws.region(with_last(lead, d)));  // dout
      halves(2 * d, {0, d});  // gate | up
    }
    return regions;
  }
  for (int i = 0; i < n; ++i) {
    const int64_t cols = form == Form::fused && i == 1 ? 2 * d : d;
    const int64_t offset = layout == Layout::misaligned ? 1 : 0;
    const int64_t pitch = layout == Layout::pitched ? cols + 16 : layout == Layout::misaligned ? cols + 1 : cols;
    regions.push_back(ws.region(with_last(lead, cols), offset, pitch));
  }
  return regions;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}
}  // namespace

void check_op(const OpCase& op, Where where, DType dtype, const std::vector<int64_t>& lead, int64_t d,
              Layout layout, ft::Fill fill, std::mt19937_64& rng) {
  std::ostringstream what;
  what << op.name << " on " << where_name(where) << ", " << fuseops::dtype_name(dtype) << ", out "
       << shape_str(with_last(lead, d)) << ", " << layout_name(layout) << ", fill " << ft::fill_name(fill)
       << ", FUSEOPS_SEED=" << run_seed();
  SCOPED_TRACE(what.str());
  Workspace ws(where, dtype);
  const std::vector<Region> regions = plan(ws, op.form, layout, lead, d);
  const int nout = num_outputs(op.form);
  std::vector<HostTensor> inputs;
  for (int i = nout; i < num_args(op.form); ++i) {
    inputs.emplace_back(dtype, regions[i].shape);
    ft::fill_random(inputs.back(), fill, rng);
    ws.write(regions[i], inputs.back());
  }
  ws.upload();
  std::vector<TensorView> views;
  for (const Region& r : regions) views.push_back(ws.view(r));
  op.call(views);
  ws.download();

  const std::vector<fuseops::reference::Golden> gold = golden(op, inputs);
  const ft::Tolerance tol = ft::Tolerance::for_dtype(dtype, 16);
  const std::vector<std::string> names = arg_names(op.form);
  for (int o = 0; o < nout; ++o) {
    const ft::Comparison c =
        ft::compare(ws.read(regions[o]), gold[o].value, gold[o].sensitivity, tol, gold[o].flush_scale);
    EXPECT_TRUE(c.pass) << names[o] << ": " << c.violations << " of " << c.count << " elements outside "
                        << tol.describe() << "; first: " << c.detail << "; rel rms " << c.rel_rms_error;
  }
  EXPECT_TRUE(ws.unchanged_outside(std::vector<Region>(regions.begin(), regions.begin() + nout)));
}

::testing::AssertionResult same_bytes(const HostTensor& a, const HostTensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype() || a.bytes() != b.bytes()) {
    return ::testing::AssertionFailure() << "different shapes or dtypes";
  }
  if (a.bytes() == 0 || std::memcmp(a.data(), b.data(), a.bytes()) == 0) return ::testing::AssertionSuccess();
  const std::size_t es = fuseops::dtype_size(a.dtype());
  const auto* pa = static_cast<const unsigned char*>(a.data());
  const auto* pb = static_cast<const unsigned char*>(b.data());
  int64_t first = -1, count = 0;
  for (std::size_t e = 0; e < a.bytes() / es; ++e) {
    if (std::memcmp(pa + e * es, pb + e * es, es) != 0) {
      if (first < 0) first = static_cast<int64_t>(e);
      ++count;
    }
  }
  const int64_t cols = a.cols();
  return ::testing::AssertionFailure() << count << " elements differ; first: element " << first << " (row "
                                       << first / cols << ", col " << first % cols << "): " << a.get(first / cols, first % cols)
                                       << " vs " << b.get(first / cols, first % cols);
}

}  // namespace fuseops_test
