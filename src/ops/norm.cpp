// Gated norm: validation (once, for every backend) and dispatch.
#include <cmath>
#include <string>

#include "core/dispatch.h"
#include "fuseops/norm.h"
#include "ops/norm_impl.h"

namespace fuseops {
namespace detail {
namespace {

constexpr std::initializer_list<DType> kFloatTypes = {DType::f32, DType::f16, DType::bf16};

/// weight / bias: [N], stride 1, f32 or x's dtype.
void check_affine(const char* op, const char* name, const TensorView& v, const TensorView& x, int64_t N) {
  if (v.dtype != DType::f32 && v.dtype != x.dtype) {
    const std::string of_x = std::string(dtype_name(x.dtype)) + " (the dtype of x)";
    fail_argument(op, name, "dtype " + (x.dtype == DType::f32 ? of_x : "f32 or " + of_x), dtype_name(v.dtype));
  }
  if (v.rank != 1 || v.shape[0] != N) fail_argument(op, name, "shape [N] = [" + std::to_string(N) + "]", v.shape_str());
  if (N > 1 && v.strides[0] != 1) fail_argument(op, name, "stride 1", "stride " + std::to_string(v.strides[0]));
}

/// mean / rstd: f32 [ngroups * M], contiguous.
float* check_stat(const char* op, const char* name, const TensorView* v, int64_t count) {
  if (!v) return nullptr;
  check_dtype(op, name, *v, {DType::f32});
  if (v->rank != 1 || v->shape[0] != count) {
    fail_argument(op, name, "shape [N / group_size * M] = [" + std::to_string(count) + "]", v->shape_str());
  }
  if (count > 1 && v->strides[0] != 1) fail_argument(op, name, "stride 1", "stride " + std::to_string(v->strides[0]));
  return static_cast<float*>(v->data);
}

void run(const char* op, TensorView out, const TensorView* mean, const TensorView* rstd, TensorView x,
         TensorView weight, const TensorView* bias, const TensorView* z, double eps, int64_t group_size,
         bool norm_before_gate, bool is_rms_norm, Stream stream) {
  // each view's own fields first (rank, dims, strides, span), so a malformed x is named before out is compared to it
  check_layouts(op, {{"x", &x}, {"out", &out}, {"z", z}});
  check_dtype(op, "x", x, kFloatTypes);
  if (x.rank < 1) fail_argument(op, "x", "rank >= 1 [..., N]", "rank 0");
  const int64_t N = x.shape[x.rank - 1];
  if (N < 1) fail_argument(op, "x", "a last dim N >= 1", x.shape_str());
  check_same_dtype(op, "out", out, "x", x);
  check_shape_like(op, "out", out, "x", x, N);
  if (z) {
    check_same_dtype(op, "z", *z, "x", x);
    check_shape_like(op, "z", *z, "x", x, N);
  }
  check_affine(op, "weight", weight, x, N);
  if (bias) {
    check_same_dtype(op, "bias", *bias, "weight", weight);  // first: weight's dtype is the rule (weight is checked)
    check_affine(op, "bias", *bias, x, N);
  }
  if (group_size < 0 || (group_size > 0 && N % group_size != 0)) {
    fail_argument(op, "group_size", "0 (none: N) or a divisor of N = " + std::to_string(N), std::to_string(group_size));
  }
  const int64_t G = group_size == 0 ? N : group_size;
  if (G > kMaxNormGroup) {
    fail_argument(op, group_size == 0 ? "x" : "group_size",
                  "a group of at most " + std::to_string(kMaxNormGroup) + " elements (held on chip)",
                  std::to_string(G));
  }
  const float eps32 = fp32_argument(op, "eps", eps, ">= 0", eps >= 0);
  if (is_rms_norm && mean) fail_argument(op, "mean", "none for RMSNorm (is_rms_norm: no mean)", "a tensor");

  const Device device = common_device(op, {{"out", &out}, {"x", &x}, {"weight", &weight}});
  if (z) common_device(op, {{"x", &x}, {"z", z}});
  if (bias) common_device(op, {{"x", &x}, {"bias", bias}});
  if (mean) common_device(op, {{"x", &x}, {"mean", mean}});
  if (rstd) common_device(op, {{"x", &x}, {"rstd", rstd}});

  LayerNormArgs a;
  a.x = as_row_matrix(op, "x", x);
  a.out = as_row_matrix(op, "out", out);
  if (z) a.z = as_row_matrix(op, "z", *z);
  const int64_t M = a.x.rows;
  a.group_size = G;
  a.ngroups = N / G;
  a.mean = check_stat(op, "mean", mean, a.ngroups * M);
  a.rstd = check_stat(op, "rstd", rstd, a.ngroups * M);

  check_no_overlap(op, "out", a.out, "x", a.x);
  if (z) check_no_overlap(op, "out", a.out, "z", a.z);
  check_disjoint(op, "out", out, "weight", weight);
  if (bias) check_disjoint(op, "out", out, "bias", *bias);
  const NamedView others[] = {{"out", &out}, {"x", &x}, {"z", z}, {"weight", &weight}, {"bias", bias}};
  for (const auto& [name, stat] : {std::pair<const char*, const TensorView*>{"mean", mean}, {"rstd", rstd}}) {
    if (!stat) continue;
    for (const NamedView& o : others) {
      if (o.view) check_disjoint(op, name, *stat, o.name, *o.view);
    }
  }
  if (mean && rstd) check_disjoint(op, "rstd", *rstd, "mean", *mean);

  a.weight = weight.data;
  a.bias = bias ? bias->data : nullptr;
  a.w_dtype = weight.dtype;
  a.eps = eps32;
  a.gate = !z ? NormGate::none : norm_before_gate ? NormGate::after_norm : NormGate::before_norm;
  a.rms = is_rms_norm;
  const Backend backend = backend_for(op, device);  // first: an empty CUDA tensor needs CUDA too
  if (M == 0) return;
  if (backend == Backend::cuda) {
#if defined(FUSEOPS_WITH_CUDA)  // else backend_for() has thrown `unsupported`
    cuda::layer_norm_fwd(op, a, device.index, stream.handle);
#else
    (void)stream;
#endif
  } else {
    cpu::layer_norm_fwd(a);
  }
}

}  // namespace
}  // namespace detail

void layer_norm_fwd(TensorView out, const TensorView* mean, const TensorView* rstd, TensorView x, TensorView weight,
                    const TensorView* bias, const TensorView* z, double eps, int64_t group_size, bool norm_before_gate,
                    bool is_rms_norm, Stream stream) {
  detail::run("layer_norm_fwd", out, mean, rstd, x, weight, bias, z, eps, group_size, norm_before_gate, is_rms_norm,
              stream);
}

void rms_norm_gated(TensorView out, const TensorView* rstd, TensorView x, TensorView weight, const TensorView* bias,
                    const TensorView* z, double eps, int64_t group_size, bool norm_before_gate, Stream stream) {
  detail::run("rms_norm_gated", out, nullptr, rstd, x, weight, bias, z, eps, group_size, norm_before_gate, true,
              stream);
}

}  // namespace fuseops
