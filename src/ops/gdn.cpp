// GDN intra-chunk ops: validation (once, for every backend) and dispatch.
#include <cmath>
#include <string>

#include "core/dispatch.h"
#include "core/validate.h"
#include "cuda/device_error.h"
#include "fuseops/gdn.h"
#include "ops/gdn_impl.h"
#include "ops/gdn_validate.h"

namespace fuseops {
namespace detail {

std::string dims(std::initializer_list<int64_t> d) {
  std::string s = "[";
  bool first = true;
  for (int64_t x : d) {
    s += (first ? "" : ", ") + std::to_string(x);
    first = false;
  }
  return s + "]";
}

void check_chunk_size(const char* op, int64_t chunk_size) {
  if (chunk_size != 16 && chunk_size != 32 && chunk_size != 64) {
    fail_argument(op, "chunk_size", "16, 32 or 64", std::to_string(chunk_size));
  }
}

/// The backend's view (GdnIn or GdnOut) of a validated [B, T, heads(, ...)] tensor.
template <typename View>
View strided(const TensorView& v) {
  View r;
  r.data = v.data;
  r.dtype = v.dtype;
  r.stride_b = v.strides[0];
  r.stride_t = v.strides[1];
  r.stride_h = v.strides[2];
  return r;
}
GdnIn in_view(const TensorView& v) { return strided<GdnIn>(v); }
GdnOut out_view(const TensorView& v) { return strided<GdnOut>(v); }

/// [B, T, HV] of a per-token, per-head tensor.
void check_token_head(const char* op, const char* name, const TensorView& v, int64_t B, int64_t T, int64_t HV) {
  if (v.rank != 3) fail_argument(op, name, "rank 3 [B, T, HV]", v.shape_str());  // FLA's layout, not [T, HV]
  if (v.shape[0] != B || v.shape[1] != T || (HV >= 0 && v.shape[2] != HV)) {
    fail_argument(op, name, "shape [B, T, HV] = " + dims({B, T, HV >= 0 ? HV : v.shape[2]}), v.shape_str());
  }
}

/// Whether an op with no output elements must still run: cu_seqlens names sequences, whose bounds the backend checks
/// (a malformed cu_seqlens with T = 0 or no heads is recorded like any other; nothing is written).
bool has_sequences(const GdnGeometry& geo) { return geo.cu_seqlens != nullptr && geo.N > 0; }

int64_t cu_seqlens_count(const char* op, const TensorView& cu, int64_t T) {
  check_dtype(op, "cu_seqlens", cu, {DType::i32, DType::i64});
  check_layout(op, "cu_seqlens", cu);  // N (sizes, chunk slots) is taken from its dim before common_device()
  if (cu.rank != 1 || cu.shape[0] < 1) {
    fail_argument(op, "cu_seqlens", "rank 1 [N+1] with at least one entry ([0]: no sequences)", cu.shape_str());
  }
  if (cu.shape[0] == 1 && T > 0) {  // no sequence, yet tokens: malformed by its shape alone
    fail_argument(op, "cu_seqlens", "[N+1] with N >= 1 for T = " + std::to_string(T) + " tokens", "[1]");
  }
  return cu.shape[0] - 1;
}

/// cu_seqlens: [N+1] i32 / i64, B == 1; fills geo.cu_*.
void attach_cu_seqlens(const char* op, const TensorView* cu, const Device& device, GdnGeometry& geo) {
  if (!cu) {
    geo.N = geo.B;
    return;
  }
  cu_seqlens_count(op, *cu, geo.T);
  common_device(op, {{"cu_seqlens", cu}});  // layout, a data pointer, a valid device
  if (cu->shape[0] > 1 && cu->strides[0] != 1) {
    fail_argument(op, "cu_seqlens", "a contiguous tensor", "stride " + std::to_string(cu->strides[0]));
  }
  check_on_device(op, "cu_seqlens", *cu, device);
  if (geo.B != 1) {  // the inputs' batch dim, with cu_seqlens (named: a dim is no argument)
    fail_argument(op, "cu_seqlens",
                  "inputs of batch B = 1 with cu_seqlens (sequences packed along T; flatten the batch)",
                  "B = " + std::to_string(geo.B));
  }
  geo.cu_seqlens = cu->data;
  geo.cu_dtype = cu->dtype;
  geo.N = cu->shape[0] - 1;
  geo.cu_site = error_site(
      op, "cu_seqlens",
      "the index is a sequence n: expected 0 = cu_seqlens[0] <= cu_seqlens[n] <= cu_seqlens[n + 1] <= "
      "cu_seqlens[N] = T");
}

void allow_cu_seqlens_tail(const char* op, GdnGeometry& geo) {
  if (!geo.cu_seqlens) return;
  geo.cu_tail = true;
  geo.cu_site = error_site(op, "cu_seqlens",
                           "the index is a sequence n: expected 0 = cu_seqlens[0] <= cu_seqlens[n] <= "
                           "cu_seqlens[n + 1] <= cu_seqlens[N] <= T (tokens past cu_seqlens[N] are padding)");
}

namespace {
/// The backend's chunk_local_cumsum (a validated device).
void run_chunk_local_cumsum(const char* op, const CumsumArgs& a, const Device& device, Stream stream) {
  if (backend_for(op, device) == Backend::cuda) {
#if defined(FUSEOPS_WITH_CUDA)
    cuda::chunk_local_cumsum(a, device.index, stream.handle);
#else
    (void)stream;
#endif
  } else {
    cpu::chunk_local_cumsum(a);
  }
}
}  // namespace

void check_cu_seqlens_without_tokens(const char* op, const GdnGeometry& geo, const Device& device, Stream stream) {
  (void)backend_for(op, device);  // an empty CUDA tensor needs CUDA too
  if (geo.T != 0 || !has_sequences(geo)) return;
  CumsumArgs a;  // g and out: no rows (null data, never read or written)
  a.geo = geo;
  a.geo.HV = 1;
  a.geo.H = 1;
  run_chunk_local_cumsum(op, a, device, stream);
}

namespace {

/// Shared checks of kkt and the fused op; returns the device.
Device check_kkt(const char* op, const TensorView& out, const char* out_name, const TensorView& k, const TensorView* g,
                 const TensorView* beta, int64_t chunk_size, const TensorView* cu, KktArgs& a) {
  check_chunk_size(op, chunk_size);
  check_layouts(op, {{"k", &k}, {"g", g}, {"beta", beta}, {out_name, &out}});  // the others are compared with k's dims
  check_dtype(op, "k", k, kFloat);
  if (k.rank != 4) fail_argument(op, "k", "rank 4 [B, T, H, K]", k.shape_str());
  const int64_t B = k.shape[0], T = k.shape[1], H = k.shape[2], K = k.shape[3];
  if (K < 1 || K > 256) fail_argument(op, "k", "head dim K in [1, 256]", std::to_string(K) + " in " + k.shape_str());
  if (H < 1) fail_argument(op, "k", "at least one head", k.shape_str());
  if (K > 1 && k.strides[3] != 1) fail_argument(op, "k", "innermost stride 1", std::to_string(k.strides[3]));
  int64_t HV = g ? g->shape[g->rank > 2 ? 2 : 0] : beta ? beta->shape[beta->rank > 2 ? 2 : 0] : H;
  if (g) {
    check_dtype(op, "g", *g, {DType::f32});
    check_token_head(op, "g", *g, B, T, -1);
    HV = g->shape[2];
  }
  if (beta) {
    check_dtype(op, "beta", *beta, kFloat);
    check_token_head(op, "beta", *beta, B, T, g ? HV : -1);
    if (!g) HV = beta->shape[2];
  }
  if (HV < H || HV % H != 0) {
    fail_argument(op, g ? "g" : "beta", "HV (heads) a multiple of H = " + std::to_string(H) + ", at least H",
                  std::to_string(HV));
  }
  check_dtype(op, out_name, out, kFloat);
  if (out.rank != 4 || out.shape[0] != B || out.shape[1] != T || out.shape[2] != HV || out.shape[3] != chunk_size) {
    fail_argument(op, out_name, "shape [B, T, HV, BT] = " + dims({B, T, HV, chunk_size}), out.shape_str());
  }
  if (!out.is_contiguous()) fail_argument(op, out_name, "a contiguous tensor", "strided");
  const Device device = common_device(op, {{out_name, &out}, {"k", &k}});
  if (g) common_device(op, {{"k", &k}, {"g", g}});
  if (beta) common_device(op, {{"k", &k}, {"beta", beta}});
  check_disjoint(op, out_name, out, "k", k);
  if (g) check_disjoint(op, out_name, out, "g", *g);
  if (beta) check_disjoint(op, out_name, out, "beta", *beta);
  a.geo = gdn_geometry(B, T, H, HV, K, chunk_size);
  attach_cu_seqlens(op, cu, device, a.geo);
  if (cu) check_disjoint(op, out_name, out, "cu_seqlens", *cu);
  a.k = in_view(k);
  if (g) a.g = in_view(*g);
  if (beta) a.beta = in_view(*beta);
  return device;
}

}  // namespace
}  // namespace detail

void chunk_local_cumsum(TensorView out, TensorView g, int64_t chunk_size, const TensorView* cu_seqlens, bool reverse,
                        std::optional<double> scale, Stream stream) {
  using namespace detail;
  const char* op = "chunk_local_cumsum";
  check_chunk_size(op, chunk_size);
  // each view's own fields first, so a malformed g is named before out's shape is taken from its dims
  check_layouts(op, {{"g", &g}, {"out", &out}});
  check_dtype(op, "g", g, kFloat);
  if (g.rank != 3) fail_argument(op, "g", "rank 3 [B, T, HV]", g.shape_str());
  check_dtype(op, "out", out, {DType::f32});
  check_token_head(op, "out", out, g.shape[0], g.shape[1], g.shape[2]);
  const Device device = common_device(op, {{"out", &out}, {"g", &g}});
  CumsumArgs a;
  a.geo.B = g.shape[0];
  a.geo.T = g.shape[1];
  a.geo.HV = g.shape[2];
  a.geo.H = a.geo.HV;
  a.geo.BT = chunk_size;
  attach_cu_seqlens(op, cu_seqlens, device, a.geo);
  a.g = in_view(g);
  a.out = out_view(out);
  a.reverse = reverse;
  a.has_scale = scale.has_value();
  a.scale = scale ? fp32_argument(op, "scale", *scale) : 1.f;
  check_no_internal_overlap(op, "out", out);
  check_disjoint(op, "out", out, "g", g);
  if (cu_seqlens) check_disjoint(op, "out", out, "cu_seqlens", *cu_seqlens);
  (void)backend_for(op, device);  // first: an empty CUDA tensor needs CUDA too
  if (g.numel() == 0 && !has_sequences(a.geo)) return;
  run_chunk_local_cumsum(op, a, device, stream);
}

namespace detail {
namespace {
/// kkt (fused = false) or the fused kkt + solve (fused = true): the same checks, then the backend's function.
void run_kkt(const char* op, bool fused, TensorView out, TensorView k, const TensorView* g, const TensorView* beta,
             int64_t chunk_size, const TensorView* cu_seqlens, Stream stream) {
  KktArgs a;
  const Device device = check_kkt(op, out, fused ? "Ai" : "A", k, g, beta, chunk_size, cu_seqlens, a);
  const Backend backend = backend_for(op, device);  // first: an empty CUDA tensor needs CUDA too
  if (out.numel() == 0 && !(has_sequences(a.geo) && a.geo.H > 0)) return;
  if (backend == Backend::cuda) {
#if defined(FUSEOPS_WITH_CUDA)
    if (fused) {
      cuda::chunk_gated_delta_rule_fwd_kkt_solve(a, out_view(out), device.index, stream.handle);
    } else {
      cuda::chunk_scaled_dot_kkt_fwd(a, out_view(out), device.index, stream.handle);
    }
#else
    (void)stream;
#endif
  } else if (fused) {
    cpu::chunk_gated_delta_rule_fwd_kkt_solve(a, out_view(out));
  } else {
    cpu::chunk_scaled_dot_kkt_fwd(a, out_view(out));
  }
}
}  // namespace
}  // namespace detail

void chunk_scaled_dot_kkt_fwd(TensorView A, TensorView k, const TensorView* g, const TensorView* beta,
                              int64_t chunk_size, const TensorView* cu_seqlens, Stream stream) {
  detail::run_kkt("chunk_scaled_dot_kkt_fwd", false, A, k, g, beta, chunk_size, cu_seqlens, stream);
}

void chunk_gated_delta_rule_fwd_kkt_solve(TensorView Ai, TensorView k, const TensorView* g, const TensorView* beta,
                                          int64_t chunk_size, const TensorView* cu_seqlens, Stream stream) {
  detail::run_kkt("chunk_gated_delta_rule_fwd_kkt_solve", true, Ai, k, g, beta, chunk_size, cu_seqlens, stream);
}

void solve_tril(TensorView Ai, TensorView A, const TensorView* cu_seqlens, Stream stream) {
  using namespace detail;
  const char* op = "solve_tril";
  // each view's own fields first, so a malformed A is named before Ai is compared with its shape
  check_layouts(op, {{"A", &A}, {"Ai", &Ai}});
  check_dtype(op, "A", A, kFloat);
  if (A.rank != 4) fail_argument(op, "A", "rank 4 [B, T, HV, BT]", A.shape_str());
  const int64_t BT = A.shape[3];
  if (BT != 16 && BT != 32 && BT != 64) fail_argument(op, "A", "last dim BT in {16, 32, 64}", A.shape_str());
  if (A.strides[3] != 1) fail_argument(op, "A", "innermost stride 1", std::to_string(A.strides[3]));
  check_dtype(op, "Ai", Ai, kFloat);
  if (Ai.rank != 4 || Ai.shape[0] != A.shape[0] || Ai.shape[1] != A.shape[1] || Ai.shape[2] != A.shape[2] ||
      Ai.shape[3] != BT) {
    fail_argument(op, "Ai", "shape " + A.shape_str() + " (the shape of A)", Ai.shape_str());
  }
  if (!Ai.is_contiguous()) fail_argument(op, "Ai", "a contiguous tensor", "strided");
  const Device device = common_device(op, {{"Ai", &Ai}, {"A", &A}});
  GdnGeometry geo;
  geo.B = A.shape[0];
  geo.T = A.shape[1];
  geo.HV = A.shape[2];
  geo.H = geo.HV;
  geo.BT = BT;
  attach_cu_seqlens(op, cu_seqlens, device, geo);
  check_disjoint(op, "Ai", Ai, "A", A);
  if (cu_seqlens) check_disjoint(op, "Ai", Ai, "cu_seqlens", *cu_seqlens);
  const Backend backend = backend_for(op, device);  // first: an empty CUDA tensor needs CUDA too
  if (Ai.numel() == 0 && !has_sequences(geo)) return;
  if (backend == Backend::cuda) {
#if defined(FUSEOPS_WITH_CUDA)
    cuda::solve_tril(geo, in_view(A), out_view(Ai), device.index, stream.handle);
#else
    (void)stream;
#endif
  } else {
    cpu::solve_tril(geo, in_view(A), out_view(Ai));
  }
}

}  // namespace fuseops
