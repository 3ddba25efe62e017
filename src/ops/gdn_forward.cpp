// GDN forward ops: validation (once, for every backend), dispatch, and the prefill pipeline of
// chunk_gated_delta_rule (l2norm -> chunk_local_cumsum -> fused kkt + solve -> recompute_w_u -> fwd_h -> fwd_o).
#include <cmath>
#include <string>

#include "core/dispatch.h"
#include "core/validate.h"
#include "cuda/device_error.h"
#include "fuseops/gdn_forward.h"
#include "common/gdn_chunks.h"
#include "ops/gdn_forward_impl.h"
#include "ops/gdn_impl.h"
#include "ops/gdn_validate.h"

#if defined(FUSEOPS_WITH_CUDA)
#define FUSEOPS_GDN_RUN(op, device, stream, fn, args)                   \
  do {                                                                  \
    if (backend_for(op, device) == Backend::cuda) {                     \
      cuda::fn(args, (device).index, (stream).handle);                  \
    } else {                                                            \
      cpu::fn(args);                                                    \
    }                                                                   \
  } while (0)
#else
#define FUSEOPS_GDN_RUN(op, device, stream, fn, args) \
  do {                                                \
    (void)(stream);                                   \
    (void)backend_for(op, device);                    \
    cpu::fn(args);                                    \
  } while (0)
#endif

namespace fuseops {
namespace detail {
namespace {

using std::to_string;

/// Rank-4 [B, T, heads, dim] float input with innermost stride 1; heads / dim < 0: any. Returns nothing; names the
/// expected shape in the error.
void check_input4(const char* op, const char* name, const TensorView& t, int64_t B, int64_t T, int64_t heads,
                  int64_t dim, const char* dims_name) {
  check_dtype(op, name, t, kFloat);
  if (t.rank != 4) fail_argument(op, name, std::string("rank 4 ") + dims_name, t.shape_str());
  if ((B >= 0 && t.shape[0] != B) || (T >= 0 && t.shape[1] != T) || (heads >= 0 && t.shape[2] != heads) ||
      (dim >= 0 && t.shape[3] != dim)) {
    fail_argument(op, name, std::string("shape ") + dims_name + " = " +
                                dims({B >= 0 ? B : t.shape[0], T >= 0 ? T : t.shape[1],
                                      heads >= 0 ? heads : t.shape[2], dim >= 0 ? dim : t.shape[3]}),
                  t.shape_str());
  }
  if (t.shape[3] > 1 && t.strides[3] != 1) fail_argument(op, name, "innermost stride 1", to_string(t.strides[3]));
}

/// Head dim in [1, 256].
void check_head_dim(const char* op, const char* name, const TensorView& t) {
  if (t.shape[3] < 1 || t.shape[3] > 256) {
    fail_argument(op, name, "head dim in [1, 256]", to_string(t.shape[3]) + " in " + t.shape_str());
  }
  if (t.shape[2] < 1) fail_argument(op, name, "at least one head", t.shape_str());
}

/// A contiguous output of exactly `shape`.
void check_output(const char* op, const char* name, const TensorView& t, std::initializer_list<DType> dtypes,
                  std::initializer_list<int64_t> shape, const char* dims_name) {
  check_dtype(op, name, t, dtypes);
  bool ok = t.rank == static_cast<int32_t>(shape.size());
  int i = 0;
  for (int64_t d : shape) ok = ok && t.shape[i++] == d;
  if (!ok) fail_argument(op, name, std::string("shape ") + dims_name + " = " + dims(shape), t.shape_str());
  if (!t.is_contiguous()) fail_argument(op, name, "a contiguous tensor", "strided");
}

/// A state [N, HV, K, V], contiguous.
void check_state(const char* op, const char* name, const TensorView& t, std::initializer_list<DType> dtypes, int64_t N,
                 int64_t HV, int64_t K, int64_t V) {
  check_output(op, name, t, dtypes, {N, HV, K, V}, "[N, HV, K, V]");
}

/// HV a multiple of H = h_of.shape[2] (the heads of `h_name`, named in the message), at least H (H >= 1 is checked
/// before).
void check_grouping(const char* op, const char* name, int64_t HV, const char* h_name, const TensorView& h_of) {
  const int64_t H = h_of.shape[2];
  if (HV < H || HV % H != 0) {
    fail_argument(op, name,
                  "HV (heads) a multiple of H = " + to_string(H) + ", at least H (H: the heads of " + h_name + " " +
                      h_of.shape_str() + ")",
                  to_string(HV));
  }
}

/// The optional g of the stage ops: the f32 chunk-local cumsum [B, T, HV].
void check_cumsum_g(const char* op, const TensorView* g, int64_t B, int64_t T, int64_t HV) {
  if (!g) return;
  check_dtype(op, "g", *g, {DType::f32});
  check_token_head(op, "g", *g, B, T, HV);
}

struct QkvDims {
  int64_t B, T, H, HV, K, V;
};

/// Whether x [B, T, H, K] fits the values v [B, T, HV, V]: both rank 4, the same B and T, H >= 1 dividing HV.
bool fits_values(const TensorView& x, const TensorView& v) {
  return x.rank == 4 && v.rank == 4 && x.shape[0] == v.shape[0] && x.shape[1] == v.shape[1] && x.shape[2] >= 1 &&
         v.shape[2] % x.shape[2] == 0;
}

/// q, k [B, T, H, K] (one shape) and v (named `v_name`) [B, T, HV, V] with HV a multiple of H. q defines B, T, H, K
/// (as FLA) and k must match it, unless k fits v and q does not: then q is the argument that disagrees with the others
/// and the error names it (against k's shape). A v that fits neither is named.
QkvDims check_qkv(const char* op, const TensorView& q, const TensorView& k, const TensorView& v, const char* v_name) {
  const bool q_odd = !fits_values(q, v) && fits_values(k, v);
  const TensorView& ref = q_odd ? k : q;
  const TensorView& other = q_odd ? q : k;
  const char* ref_name = q_odd ? "k" : "q";
  check_input4(op, ref_name, ref, -1, -1, -1, -1, "[B, T, H, K]");
  check_head_dim(op, ref_name, ref);
  const int64_t B = ref.shape[0], T = ref.shape[1], H = ref.shape[2], K = ref.shape[3];
  check_input4(op, q_odd ? "q" : "k", other, B, T, H, K,
               q_odd ? "[B, T, H, K] (k's shape)" : "[B, T, H, K] (q's shape)");
  check_input4(op, v_name, v, B, T, -1, -1, "[B, T, HV, V]");
  check_head_dim(op, v_name, v);
  check_grouping(op, v_name, v.shape[2], ref_name, ref);
  return {B, T, H, v.shape[2], K, v.shape[3]};
}

/// When the per-head tensors `a` and `b` (null: absent) agree on a value-head count (dim 2) that `v` (dim 2) does not
/// have, v is the argument that disagrees with the others: an error naming it (else each is checked against v).
void check_value_heads(const char* op, const char* v_name, const TensorView& v, const char* a_name,
                       const TensorView* a, const char* b_name, const TensorView* b) {
  if (!a || !b || v.rank < 3 || a->rank < 3 || b->rank < 3) return;
  const int64_t HV = a->shape[2];
  if (b->shape[2] == HV && v.shape[2] != HV) {
    fail_argument(op, v_name, std::string("the value heads of ") + a_name + " and " + b_name + ", HV = " + to_string(HV),
                  v.shape_str());
  }
}

/// No output overlaps itself, and every pair (output, other) is disjoint.
void check_outputs_disjoint(const char* op, std::initializer_list<NamedView> outputs,
                            std::initializer_list<NamedView> all) {
  for (const NamedView& o : outputs) {
    if (!o.view) continue;
    check_no_internal_overlap(op, o.name, *o.view);
    for (const NamedView& x : all) {
      if (!x.view || x.view == o.view) continue;
      check_disjoint(op, o.name, *o.view, x.name, *x.view);
    }
  }
}

/// initial_state as the overlap checks see it: none when it IS final_state (the same data, dtype, shape and strides:
/// an in-place update, as FLA's `initial_state=ht, output_final_state` reuse), else itself, so that any other overlap
/// with final_state is an error. In place is safe in every kernel that reads initial_state and writes final_state
/// (chunk_gated_delta_rule_fwd_h, which chunk_gated_delta_rule runs, and the recurrence, CPU and CUDA): each
/// (sequence, value head, column slice) is one unit whose threads read their state elements before they write the same
/// elements, no other unit touches them, and no other stage reads initial_state (chunk_fwd_o reads the copy in h).
const TensorView* state_for_overlap(const TensorView* initial_state, const TensorView* final_state) {
  if (!initial_state || !final_state) return initial_state;
  const TensorView &a = *initial_state, &b = *final_state;
  bool same = a.data == b.data && a.dtype == b.dtype && a.rank == b.rank;
  for (int i = 0; same && i < a.rank; ++i) same = a.shape[i] == b.shape[i] && a.strides[i] == b.strides[i];
  return same ? nullptr : initial_state;
}

GdnStates states_view(const TensorView& h) {
  GdnStates s;
  s.data = h.data;
  s.dtype = h.dtype;
  s.slots = h.shape[1];
  return s;
}

GdnIn vector_view(const TensorView& t) {  // [HV] as (0, 0, stride)
  GdnIn r;
  r.data = t.data;
  r.dtype = t.dtype;
  r.stride_h = t.strides[0];
  return r;
}

/// scale as the kernels use it (fp32); none: K^-0.5.
float default_scale(const char* op, std::optional<double> scale, int64_t K) {
  return fp32_argument(op, "scale", scale.value_or(1.0 / std::sqrt(static_cast<double>(K))));
}

/// gdn_chunk_slots for `op`: a slot count past int64 (N + ceil(T / BT) with cu_seqlens) is an error naming `n_name`
/// (the argument that gave N: ceil(T / BT) <= T fits).
int64_t chunk_slots(const char* op, const char* n_name, int64_t T, int64_t N, int64_t chunk_size, bool varlen) {
  check_chunk_size(op, chunk_size);
  if (T < 0) fail_argument(op, "T", ">= 0", to_string(T));
  if (N < 0) fail_argument(op, n_name, "N >= 0", to_string(N));
  const int64_t per_row = chunks_of(T, chunk_size);
  int64_t slots = per_row;
  if (varlen && __builtin_add_overflow(N, per_row, &slots)) {
    fail_argument(op, n_name, "N sequences with N + ceil(T / chunk_size) chunk slots within int64",
                  "N = " + to_string(N) + " with T = " + to_string(T));
  }
  return slots;
}

// ------------------------------------------------------------------------------------------------------------
// Workspace of chunk_gated_delta_rule

struct FwdLayout {
  std::size_t qn = 0, kn = 0, gcum = 0, Ai = 0, w = 0, u = 0, v_new = 0, h = 0, total = 0;
};

/// Byte offsets of the intermediates (each 256-byte aligned): gcum in f32, the others in
/// chunk_gated_delta_rule_intermediate_dtype(). A size past 64 bits is an argument error of `op` naming q (the sizes
/// come from q and v), or cu_seqlens when its sequence count N alone takes the chunk states h past 64 bits (NS = N +
/// ceil(T / BT) slots).
FwdLayout fwd_layout(const char* op, int64_t B, int64_t T, int64_t H, int64_t HV, int64_t K, int64_t V, int64_t N,
                     int64_t NS, int64_t BT, DType dtype, bool l2norm, bool varlen) {
  const int64_t ei = static_cast<int64_t>(dtype_size(chunk_gated_delta_rule_intermediate_dtype(dtype, K, V)));
  FwdLayout L;
  int64_t at = 0;
  // elem * sizes rounded up to 256 bytes, added at `at`: the new end, or -1 past 64 bits
  auto end_after = [&](std::initializer_list<int64_t> sizes, int64_t elem) {
    int64_t bytes = elem, end = 0;
    bool overflow = false;
    for (int64_t d : sizes) overflow = overflow || __builtin_mul_overflow(bytes, d, &bytes);
    overflow = overflow || __builtin_add_overflow(bytes, int64_t{255}, &bytes) ||
               __builtin_add_overflow(at, bytes / 256 * 256, &end);
    return overflow ? int64_t{-1} : end;
  };
  auto take = [&](std::initializer_list<int64_t> sizes, int64_t elem) {
    const int64_t end = end_after(sizes, elem);
    if (end < 0) {
      fail_argument(op, "q", "sizes whose workspace fits in 64 bits", "B T H K HV V = " + dims({B, T, H, K, HV, V}));
    }
    const int64_t off = at;
    at = end;
    return static_cast<std::size_t>(off);
  };
  if (l2norm) {
    L.qn = take({B, T, H, K}, ei);
    L.kn = take({B, T, H, K}, ei);
  }
  L.gcum = take({B, T, HV}, 4);
  L.Ai = take({B, T, HV, BT}, ei);
  L.w = take({B, T, HV, K}, ei);
  L.u = take({B, T, HV, V}, ei);
  L.v_new = take({B, T, HV, V}, ei);
  if (varlen && end_after({B, NS, HV, K, V}, ei) < 0 && end_after({B, NS - N, HV, K, V}, ei) >= 0) {
    fail_argument(op, "cu_seqlens", "N sequences whose chunk states (workspace) fit in 64 bits",
                  "N = " + to_string(N) + " (B T H K HV V = " + dims({B, T, H, K, HV, V}) + ")");
  }
  L.h = take({B, NS, HV, K, V}, ei);
  L.total = static_cast<std::size_t>(at);
  return L;
}

/// A contiguous [B, T, heads, dim] (dim 0: [B, T, heads]) view at `base + offset`.
GdnOut contiguous_out(void* base, std::size_t offset, DType dtype, int64_t T, int64_t heads, int64_t dim) {
  GdnOut r;
  r.data = static_cast<unsigned char*>(base) + offset;
  r.dtype = dtype;
  const int64_t inner = dim > 0 ? dim : 1;
  r.stride_h = inner;
  r.stride_t = heads * inner;
  r.stride_b = T * heads * inner;
  return r;
}
}  // namespace
}  // namespace detail

DType chunk_gated_delta_rule_intermediate_dtype(DType dtype, int64_t head_k_dim, int64_t head_v_dim) {
  const char* op = "chunk_gated_delta_rule_intermediate_dtype";
  if (dtype != DType::f32 && dtype != DType::f16 && dtype != DType::bf16) {
    detail::fail_argument(op, "dtype", "f32, f16 or bf16 (the dtype of q, k and v)", dtype_name(dtype));
  }
  if (head_k_dim < 1 || head_k_dim > 256) {
    detail::fail_argument(op, "head_k_dim", "1 to 256", std::to_string(head_k_dim));
  }
  if (head_v_dim < 1 || head_v_dim > 256) {
    detail::fail_argument(op, "head_v_dim", "1 to 256", std::to_string(head_v_dim));
  }
  constexpr int64_t kSmallHeadDim = 32;
  const bool small = head_k_dim < kSmallHeadDim || head_v_dim < kSmallHeadDim;
  return small && (dtype == DType::bf16 || dtype == DType::f16) ? DType::f32 : dtype;
}

int64_t gdn_chunk_slots(int64_t T, int64_t N, int64_t chunk_size, bool varlen) {
  return detail::chunk_slots("gdn_chunk_slots", "N", T, N, chunk_size, varlen);
}

void recompute_w_u_fwd(TensorView w, TensorView u, TensorView k, TensorView v, TensorView beta, TensorView A,
                       const TensorView* g, const TensorView* cu_seqlens, Stream stream) {
  using namespace detail;
  const char* op = "recompute_w_u_fwd";
  // each view's own fields first: the others' shapes are compared with dims taken from k, A and v
  check_layouts(op, {{"k", &k}, {"A", &A}, {"v", &v}, {"beta", &beta}, {"g", g}, {"w", &w}, {"u", &u}});
  check_input4(op, "k", k, -1, -1, -1, -1, "[B, T, H, K]");
  check_head_dim(op, "k", k);
  const int64_t B = k.shape[0], T = k.shape[1], H = k.shape[2], K = k.shape[3];
  check_input4(op, "A", A, B, T, -1, -1, "[B, T, HV, BT]");
  check_value_heads(op, "A", A, "v", &v, "beta", &beta);
  const int64_t HV = A.shape[2], BT = A.shape[3];
  if (BT != 16 && BT != 32 && BT != 64) fail_argument(op, "A", "last dim BT in {16, 32, 64}", A.shape_str());
  check_grouping(op, "A", HV, "k", k);
  check_input4(op, "v", v, B, T, HV, -1, "[B, T, HV, V]");
  check_head_dim(op, "v", v);
  const int64_t V = v.shape[3];
  check_dtype(op, "beta", beta, kFloat);
  check_token_head(op, "beta", beta, B, T, HV);
  check_cumsum_g(op, g, B, T, HV);
  check_output(op, "w", w, kFloat, {B, T, HV, K}, "[B, T, HV, K]");
  check_output(op, "u", u, kFloat, {B, T, HV, V}, "[B, T, HV, V]");
  const Device device = common_device(op, {{"w", &w}, {"u", &u}, {"k", &k}, {"v", &v}, {"beta", &beta}, {"A", &A}});
  if (g) common_device(op, {{"k", &k}, {"g", g}});
  WuArgs a;
  a.geo = gdn_geometry(B, T, H, HV, K, BT);
  attach_cu_seqlens(op, cu_seqlens, device, a.geo);
  check_outputs_disjoint(op, {{"w", &w}, {"u", &u}},
                         {{"w", &w}, {"u", &u}, {"k", &k}, {"v", &v}, {"beta", &beta}, {"A", &A}, {"g", g},
                          {"cu_seqlens", cu_seqlens}});
  a.V = V;
  a.k = in_view(k);
  a.v = in_view(v);
  a.beta = in_view(beta);
  a.A = in_view(A);
  if (g) a.g = in_view(*g);
  a.w = out_view(w);
  a.u = out_view(u);
  if (w.numel() == 0) return check_cu_seqlens_without_tokens(op, a.geo, device, stream);
  FUSEOPS_GDN_RUN(op, device, stream, recompute_w_u_fwd, a);
}

void chunk_gated_delta_rule_fwd_h(TensorView h, TensorView v_new, TensorView* final_state, TensorView k,
                                  TensorView w, TensorView u, const TensorView* g, const TensorView* initial_state,
                                  int64_t chunk_size, const TensorView* cu_seqlens, Stream stream) {
  using namespace detail;
  const char* op = "chunk_gated_delta_rule_fwd_h";
  check_chunk_size(op, chunk_size);
  // each view's own fields first: the others' shapes are compared with dims taken from k, w and u
  check_layouts(op, {{"k", &k}, {"w", &w}, {"u", &u}, {"g", g}, {"h", &h}, {"v_new", &v_new},
                     {"final_state", final_state}, {"initial_state", initial_state}});
  check_input4(op, "k", k, -1, -1, -1, -1, "[B, T, H, K]");
  check_head_dim(op, "k", k);
  const int64_t B = k.shape[0], T = k.shape[1], H = k.shape[2], K = k.shape[3];
  check_input4(op, "w", w, B, T, -1, K, "[B, T, HV, K]");
  check_value_heads(op, "w", w, "u", &u, "g", g);
  const int64_t HV = w.shape[2];
  check_grouping(op, "w", HV, "k", k);
  check_input4(op, "u", u, B, T, HV, -1, "[B, T, HV, V]");
  check_head_dim(op, "u", u);
  const int64_t V = u.shape[3];
  check_cumsum_g(op, g, B, T, HV);
  FwdHArgs a;
  a.geo = gdn_geometry(B, T, H, HV, K, chunk_size);
  const Device device = common_device(op, {{"k", &k}, {"w", &w}, {"u", &u}});
  attach_cu_seqlens(op, cu_seqlens, device, a.geo);
  const int64_t N = a.geo.N;
  const int64_t NS = chunk_slots(op, "cu_seqlens", T, N, chunk_size, cu_seqlens != nullptr);
  check_output(op, "h", h, kFloat, {B, NS, HV, K, V}, "[B, NS, HV, K, V]");
  check_output(op, "v_new", v_new, kFloat, {B, T, HV, V}, "[B, T, HV, V]");
  if (final_state) check_state(op, "final_state", *final_state, {DType::f32}, N, HV, K, V);
  if (initial_state) check_state(op, "initial_state", *initial_state, kFloat, N, HV, K, V);
  common_device(op, {{"k", &k}, {"h", &h}, {"v_new", &v_new}});
  if (g) common_device(op, {{"k", &k}, {"g", g}});
  if (final_state) common_device(op, {{"k", &k}, {"final_state", final_state}});
  if (initial_state) common_device(op, {{"k", &k}, {"initial_state", initial_state}});
  check_outputs_disjoint(op, {{"h", &h}, {"v_new", &v_new}, {"final_state", final_state}},
                         {{"h", &h}, {"v_new", &v_new}, {"final_state", final_state}, {"k", &k}, {"w", &w},
                          {"u", &u}, {"g", g}, {"initial_state", state_for_overlap(initial_state, final_state)},
                          {"cu_seqlens", cu_seqlens}});
  a.V = V;
  a.k = in_view(k);
  a.w = in_view(w);
  a.u = in_view(u);
  if (g) a.g = in_view(*g);
  if (initial_state) {
    a.h0 = initial_state->data;
    a.h0_dtype = initial_state->dtype;
  }
  a.h = states_view(h);
  a.v_new = out_view(v_new);
  a.ht = final_state ? static_cast<float*>(final_state->data) : nullptr;
  if (N == 0 || (T == 0 && !final_state)) return check_cu_seqlens_without_tokens(op, a.geo, device, stream);
  FUSEOPS_GDN_RUN(op, device, stream, chunk_gated_delta_rule_fwd_h, a);
}

void chunk_fwd_o(TensorView o, TensorView q, TensorView k, TensorView v_new, TensorView h, const TensorView* g,
                 double scale, int64_t chunk_size, const TensorView* cu_seqlens, Stream stream) {
  using namespace detail;
  const char* op = "chunk_fwd_o";
  check_chunk_size(op, chunk_size);
  // each view's own fields first: the others' shapes are compared with dims taken from q, k and v_new
  check_layouts(op, {{"q", &q}, {"k", &k}, {"v_new", &v_new}, {"h", &h}, {"g", g}, {"o", &o}});
  check_value_heads(op, "v_new", v_new, "g", g, "h", &h);
  const auto [B, T, H, HV, K, V] = check_qkv(op, q, k, v_new, "v_new");
  check_cumsum_g(op, g, B, T, HV);
  FwdOArgs a;
  a.scale = fp32_argument(op, "scale", scale);
  a.geo = gdn_geometry(B, T, H, HV, K, chunk_size);
  const Device device = common_device(op, {{"o", &o}, {"q", &q}, {"k", &k}, {"v_new", &v_new}, {"h", &h}});
  if (g) common_device(op, {{"q", &q}, {"g", g}});
  attach_cu_seqlens(op, cu_seqlens, device, a.geo);
  const int64_t NS = chunk_slots(op, "cu_seqlens", T, a.geo.N, chunk_size, cu_seqlens != nullptr);
  check_dtype(op, "h", h, kFloat);
  if (h.rank != 5 || h.shape[0] != B || h.shape[1] != NS || h.shape[2] != HV || h.shape[3] != K || h.shape[4] != V) {
    fail_argument(op, "h", "shape [B, NS, HV, K, V] = " + dims({B, NS, HV, K, V}), h.shape_str());
  }
  if (!h.is_contiguous()) fail_argument(op, "h", "a contiguous tensor", "strided");
  check_output(op, "o", o, kFloat, {B, T, HV, V}, "[B, T, HV, V]");
  check_outputs_disjoint(op, {{"o", &o}},
                         {{"q", &q}, {"k", &k}, {"v_new", &v_new}, {"h", &h}, {"g", g}, {"cu_seqlens", cu_seqlens}});
  a.V = V;
  a.q = in_view(q);
  a.k = in_view(k);
  a.v_new = in_view(v_new);
  if (g) a.g = in_view(*g);
  a.h = states_view(h);
  a.o = out_view(o);
  if (o.numel() == 0) return check_cu_seqlens_without_tokens(op, a.geo, device, stream);
  FUSEOPS_GDN_RUN(op, device, stream, chunk_fwd_o, a);
}

namespace detail {
namespace {

/// Shapes of the top-level op from q and v (validated by the caller).
struct FwdDims {
  int64_t B, T, H, HV, K, V, N, NS;
};

/// k: q for the workspace query (which has no k).
FwdDims forward_dims(const char* op, const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView* cu, int64_t BT) {
  check_chunk_size(op, BT);
  check_layouts(op, {{"q", &q}, {"k", &k}, {"v", &v}});  // the sizes (workspace) are computed from their dims
  const QkvDims s = check_qkv(op, q, k, v, "v");
  FwdDims d{s.B, s.T, s.H, s.HV, s.K, s.V, s.B, 0};
  if (cu) d.N = cu_seqlens_count(op, *cu, d.T);
  d.NS = chunk_slots(op, "cu_seqlens", d.T, d.N, BT, cu != nullptr);
  return d;
}

}  // namespace
}  // namespace detail

std::size_t chunk_gated_delta_rule_workspace_size_for(const char* op, const TensorView& q, const TensorView& k,
                                                      const TensorView& v, const TensorView* cu_seqlens,
                                                      bool use_qk_l2norm_in_kernel, int64_t chunk_size,
                                                      bool with_states) {
  using namespace detail;
  if (op == nullptr || *op == '\0') op = "chunk_gated_delta_rule_workspace_size";  // the messages need a name
  const FwdDims d = forward_dims(op, q, k, v, cu_seqlens, chunk_size);
  const FwdLayout L = fwd_layout(op, d.B, d.T, d.H, d.HV, d.K, d.V, d.N, d.NS, chunk_size, q.dtype,
                                 use_qk_l2norm_in_kernel, cu_seqlens != nullptr);
  return with_states ? L.h : L.total;
}

std::size_t chunk_gated_delta_rule_workspace_size_for(const char* op, const TensorView& q, const TensorView& v,
                                                      const TensorView* cu_seqlens, bool use_qk_l2norm_in_kernel,
                                                      int64_t chunk_size) {
  return chunk_gated_delta_rule_workspace_size_for(op, q, q, v, cu_seqlens, use_qk_l2norm_in_kernel, chunk_size);
}

std::size_t chunk_gated_delta_rule_workspace_size(const TensorView& q, const TensorView& v,
                                                  const TensorView* cu_seqlens, bool use_qk_l2norm_in_kernel,
                                                  int64_t chunk_size, bool with_states) {
  return chunk_gated_delta_rule_workspace_size_for("chunk_gated_delta_rule_workspace_size", q, q, v, cu_seqlens,
                                                   use_qk_l2norm_in_kernel, chunk_size, with_states);
}

namespace detail {
namespace {

/// chunk_gated_delta_rule, and with `h` (chunk_gated_delta_rule_with_states, `op`) its chunk states written to h
/// instead of the workspace: the workspace then needs no region for them (fwd_layout's h, its last region), and on
/// CUDA the form that keeps them in the kernel (chunk_gated_delta_rule_fwd_h_o) is not taken.
void chunk_forward(const char* op, TensorView o, TensorView* h, TensorView* final_state, TensorView q, TensorView k,
                   TensorView v, TensorView g, TensorView beta, std::optional<double> scale,
                   const TensorView* initial_state, bool use_qk_l2norm_in_kernel, const TensorView* cu_seqlens,
                   TensorView workspace, int64_t chunk_size, Stream stream) {
  // a default TensorView() (rank 0, no data) is no workspace: 0 bytes on the op's device, enough where the size query
  // says 0 (no tokens), else refused by the size check below
  if (workspace.rank == 0 && workspace.data == nullptr) workspace = TensorView(nullptr, q.dtype, q.device, {0});
  // each view's own fields first: the others' shapes are compared with dims taken from q and v
  check_layouts(op, {{"q", &q}, {"k", &k}, {"v", &v}, {"g", &g}, {"beta", &beta}, {"initial_state", initial_state},
                     {"o", &o}, {"h", h}, {"final_state", final_state}});
  check_value_heads(op, "v", v, "g", &g, "beta", &beta);
  const FwdDims d = forward_dims(op, q, k, v, cu_seqlens, chunk_size);
  check_same_dtype(op, "k", k, "q", q);
  check_same_dtype(op, "v", v, "q", q);
  check_dtype(op, "g", g, kFloat);
  check_token_head(op, "g", g, d.B, d.T, d.HV);
  check_dtype(op, "beta", beta, kFloat);
  check_token_head(op, "beta", beta, d.B, d.T, d.HV);
  if (initial_state) check_state(op, "initial_state", *initial_state, kFloat, d.N, d.HV, d.K, d.V);
  check_output(op, "o", o, {q.dtype}, {d.B, d.T, d.HV, d.V}, "[B, T, HV, V]");
  if (final_state) check_state(op, "final_state", *final_state, {DType::f32}, d.N, d.HV, d.K, d.V);
  const DType it = chunk_gated_delta_rule_intermediate_dtype(q.dtype, d.K, d.V);
  if (h) {
    if (h->dtype != it) {
      fail_argument(op, "h",
                    std::string("dtype ") + dtype_name(it) + " (chunk_gated_delta_rule_intermediate_dtype of q's " +
                        "dtype " + dtype_name(q.dtype) + ", K = " + to_string(d.K) + ", V = " + to_string(d.V) + ")",
                    dtype_name(h->dtype));
    }
    check_output(op, "h", *h, {it}, {d.B, d.NS, d.HV, d.K, d.V}, "[B, NS, HV, K, V]");
  }
  const float s = default_scale(op, scale, d.K);
  const Device device =
      common_device(op, {{"o", &o}, {"q", &q}, {"k", &k}, {"v", &v}, {"g", &g}, {"beta", &beta}, {"workspace", &workspace}});
  if (initial_state) common_device(op, {{"q", &q}, {"initial_state", initial_state}});
  if (h) common_device(op, {{"q", &q}, {"h", h}});
  if (final_state) common_device(op, {{"q", &q}, {"final_state", final_state}});
  GdnGeometry geo = gdn_geometry(d.B, d.T, d.H, d.HV, d.K, chunk_size);
  attach_cu_seqlens(op, cu_seqlens, device, geo);
  // CUDA tensors on a machine (or build) without CUDA: that error first, not the workspace's, and also when there is
  // nothing to compute
  (void)backend_for(op, device);
  const FwdLayout L =
      fwd_layout(op, d.B, d.T, d.H, d.HV, d.K, d.V, d.N, d.NS, chunk_size, q.dtype, use_qk_l2norm_in_kernel,
                 cu_seqlens != nullptr);
  if (!workspace.is_contiguous()) fail_argument(op, "workspace", "a contiguous tensor", "strided");
  const std::size_t ws_bytes = static_cast<std::size_t>(workspace.numel()) * dtype_size(workspace.dtype);
  const std::size_t ws_needed = h ? L.h : L.total;  // with h, the chunk states' region (the last) is not used
  if (ws_bytes < ws_needed) {
    fail_argument(op, "workspace",
                  "at least " + std::to_string(ws_needed) + " bytes (chunk_gated_delta_rule_workspace_size" +
                      (h ? " with with_states)" : ")"),
                  std::to_string(ws_bytes) + " bytes");
  }
  if (ws_needed > 0 && reinterpret_cast<std::uintptr_t>(workspace.data) % 16 != 0) {
    fail_argument(op, "workspace", "a 16-byte aligned data pointer", "misaligned");
  }
  // (h first: an overlap of h with any other argument, o included, names h)
  check_outputs_disjoint(op, {{"h", h}, {"o", &o}, {"final_state", final_state}, {"workspace", &workspace}},
                         {{"h", h}, {"o", &o}, {"final_state", final_state}, {"workspace", &workspace}, {"q", &q},
                          {"k", &k}, {"v", &v}, {"g", &g}, {"beta", &beta},
                          {"initial_state", state_for_overlap(initial_state, final_state)}, {"cu_seqlens", cu_seqlens}});
  if (d.N == 0 || (d.T == 0 && !final_state)) return check_cu_seqlens_without_tokens(op, geo, device, stream);

  void* ws = workspace.data;
  GdnIn qn = in_view(q), kn = in_view(k);
  FwdHArgs ha;
  ha.geo = geo;
  ha.V = d.V;
  ha.k = kn;
  ha.w = as_in(contiguous_out(ws, L.w, it, d.T, d.HV, d.K));
  ha.u = as_in(contiguous_out(ws, L.u, it, d.T, d.HV, d.V));
  ha.g = as_in(contiguous_out(ws, L.gcum, DType::f32, d.T, d.HV, 0));
  if (initial_state) {
    ha.h0 = initial_state->data;
    ha.h0_dtype = initial_state->dtype;
  }
  ha.h.data = h ? h->data : static_cast<unsigned char*>(ws) + L.h;
  ha.h.dtype = it;
  ha.h.slots = d.NS;
  ha.v_new = contiguous_out(ws, L.v_new, it, d.T, d.HV, d.V);
  ha.ht = final_state ? static_cast<float*>(final_state->data) : nullptr;
  if (d.T > 0) {
    CumsumArgs ca;
    ca.geo = geo;
    ca.geo.H = d.HV;
    ca.g = in_view(g);
    ca.out = contiguous_out(ws, L.gcum, DType::f32, d.T, d.HV, 0);
    bool cumsum_done = false;
    if (use_qk_l2norm_in_kernel) {
      L2NormArgs la;  // q and k in one launch
      la.geo = geo;
      la.x = in_view(q);
      la.y = contiguous_out(ws, L.qn, it, d.T, d.H, d.K);
      la.x2 = in_view(k);
      la.y2 = contiguous_out(ws, L.kn, it, d.T, d.H, d.K);
#if defined(FUSEOPS_WITH_CUDA)
      // CUDA: the cumsum in the same launch where the pair takes the vector form (the same values)
      if (backend_for(op, device) == Backend::cuda) {
        cumsum_done = cuda::l2norm_cumsum_fwd(la, ca, device.index, stream.handle);
      }
#endif
      if (!cumsum_done) FUSEOPS_GDN_RUN(op, device, stream, l2norm_fwd, la);
      qn = as_in(la.y);
      kn = as_in(la.y2);
      ha.k = kn;
    }
    if (!cumsum_done) FUSEOPS_GDN_RUN(op, device, stream, chunk_local_cumsum, ca);

    KktArgs ka;
    ka.geo = geo;
    ka.k = kn;
    ka.g = as_in(ca.out);
    ka.beta = in_view(beta);
    const GdnOut Ai = contiguous_out(ws, L.Ai, it, d.T, d.HV, chunk_size);
    WuArgs wa;
    wa.geo = geo;
    wa.V = d.V;
    wa.k = kn;
    wa.v = in_view(v);
    wa.beta = in_view(beta);
    wa.A = as_in(Ai);
    wa.g = ka.g;
    wa.w = contiguous_out(ws, L.w, it, d.T, d.HV, d.K);
    wa.u = contiguous_out(ws, L.u, it, d.T, d.HV, d.V);
    // CUDA, 16-bit: kkt, inverse and w / u in one kernel (the same bytes); otherwise the two stages via Ai.
    bool fused = false;
#if defined(FUSEOPS_WITH_CUDA)
    if (backend_for(op, device) == Backend::cuda) {
      // the intra-first form (gdn_forward_impl.h): its flags, and the output-beside form's counters after them,
      // take the Ai region, unused by the fused intra kernel (2 HV ready_stride 4-byte words, ~HV T / 8 bytes,
      // against its T HV chunk_size elements)
      const int64_t blocks = cuda::chunk_gated_delta_rule_intra_first_blocks(ha, device.index);
      if (blocks > 0) {
        wa.ready = reinterpret_cast<unsigned*>(static_cast<unsigned char*>(ws) + L.Ai);
        wa.ready_stride = ready_flag_stride(geo);
        wa.intra_blocks = blocks;
        ha.ready = wa.ready;
        ha.ready_stride = wa.ready_stride;
        // the output-beside form: fwd_h's counters after the flags (zeroed with them by the intra launch)
        wa.o_ready = cuda::fwd_o_beside_applies(ha, qn);
        if (wa.o_ready) ha.o_ready = wa.ready + d.HV * wa.ready_stride;
      }
      fused = cuda::chunk_gated_delta_rule_fwd_intra(ka, wa, device.index, stream.handle);
      if (!fused) {
        ha.ready = nullptr;  // no flags will be set: fwd_h must not poll them
        ha.o_ready = nullptr;
        cuda::chunk_gated_delta_rule_fwd_kkt_solve(ka, Ai, device.index, stream.handle);
      }
    } else {
      cpu::chunk_gated_delta_rule_fwd_kkt_solve(ka, Ai);
    }
#else
    cpu::chunk_gated_delta_rule_fwd_kkt_solve(ka, Ai);
#endif
    if (!fused) FUSEOPS_GDN_RUN(op, device, stream, recompute_w_u_fwd, wa);
#if defined(FUSEOPS_WITH_CUDA)
    // CUDA: the output stage inside the recurrence where that form applies (h and v_new then stay in the kernel, so
    // not where the chunk states are asked for)
    if (!h && backend_for(op, device) == Backend::cuda) {
      FwdHArgs hoa = ha;
      hoa.q = qn;
      hoa.o = out_view(o);
      hoa.scale = s;
      if (cuda::chunk_gated_delta_rule_fwd_h_o(hoa, device.index, stream.handle)) return;
    }
#endif
  }
  unsigned counted = 0;  // CUDA: the count fwd_h's counters of ha.o_ready reach (the output-beside form), else 0
#if defined(FUSEOPS_WITH_CUDA)
  if (backend_for(op, device) == Backend::cuda) {
    counted = cuda::chunk_gated_delta_rule_fwd_h(ha, device.index, stream.handle);
  } else {
    cpu::chunk_gated_delta_rule_fwd_h(ha);
  }
#else
  FUSEOPS_GDN_RUN(op, device, stream, chunk_gated_delta_rule_fwd_h, ha);
#endif
  if (d.T == 0) return;

  FwdOArgs oa;
  oa.geo = geo;
  oa.V = d.V;
  oa.q = qn;
  oa.k = kn;
  oa.v_new = as_in(ha.v_new);
  oa.g = ha.g;
  oa.h = ha.h;
  oa.o = out_view(o);
  oa.scale = s;
  if (counted > 0) {
    oa.h_ready = ha.o_ready;
    oa.h_ready_stride = ha.ready_stride;
    oa.h_ready_count = counted;
  }
  FUSEOPS_GDN_RUN(op, device, stream, chunk_fwd_o, oa);
}

}  // namespace
}  // namespace detail

void chunk_gated_delta_rule(TensorView o, TensorView* final_state, TensorView q, TensorView k, TensorView v,
                            TensorView g, TensorView beta, std::optional<double> scale,
                            const TensorView* initial_state, bool use_qk_l2norm_in_kernel,
                            const TensorView* cu_seqlens, TensorView workspace, int64_t chunk_size, Stream stream) {
  detail::chunk_forward("chunk_gated_delta_rule", o, nullptr, final_state, q, k, v, g, beta, scale, initial_state,
                        use_qk_l2norm_in_kernel, cu_seqlens, workspace, chunk_size, stream);
}

void chunk_gated_delta_rule_with_states(TensorView o, TensorView h, TensorView* final_state, TensorView q,
                                        TensorView k, TensorView v, TensorView g, TensorView beta,
                                        std::optional<double> scale, const TensorView* initial_state,
                                        bool use_qk_l2norm_in_kernel, const TensorView* cu_seqlens,
                                        TensorView workspace, int64_t chunk_size, Stream stream) {
  detail::chunk_forward("chunk_gated_delta_rule_with_states", o, &h, final_state, q, k, v, g, beta, scale,
                        initial_state, use_qk_l2norm_in_kernel, cu_seqlens, workspace, chunk_size, stream);
}

// ------------------------------------------------------------------------------------------------------------
// Decode

namespace detail {
namespace {

/// Shared checks of the three decode ops: q, k, v, o, scale, cu_seqlens; fills a.geo, a.V, views, scale, l2norm. The
/// two per-token gates (g and beta, or a and b; null: absent) are only consulted to name v when they agree against it.
Device check_decode(const char* op, const TensorView& o, const TensorView& q, const TensorView& k,
                    const TensorView& v, std::optional<double> scale, bool l2norm, const TensorView* cu,
                    DecodeArgs& a, const char* g_name, const TensorView* g, const char* beta_name,
                    const TensorView* beta) {
  // each view's own fields first: the others' shapes are compared with dims taken from q (or k) and v
  check_layouts(op, {{"q", &q}, {"k", &k}, {"v", &v}, {g_name, g}, {beta_name, beta}, {"o", &o}});
  check_value_heads(op, "v", v, g_name, g, beta_name, beta);
  const auto [B, T, H, HV, K, V] = check_qkv(op, q, k, v, "v");
  check_same_dtype(op, "k", k, "q", q);  // as chunk_gated_delta_rule (FLA: one dtype, o = q.new_empty)
  check_same_dtype(op, "v", v, "q", q);
  check_output(op, "o", o, {q.dtype}, {B, T, HV, V}, "[B, T, HV, V]");
  const Device device = common_device(op, {{"o", &o}, {"q", &q}, {"k", &k}, {"v", &v}});
  a.geo = gdn_geometry(B, T, H, HV, K, 64);
  attach_cu_seqlens(op, cu, device, a.geo);
  a.V = V;
  a.q = in_view(q);
  a.k = in_view(k);
  a.v = in_view(v);
  a.o = out_view(o);
  a.scale = default_scale(op, scale, K);
  a.l2norm = l2norm;
  return device;
}

void check_gate(const char* op, const char* name, const TensorView* t, const DecodeArgs& a, const Device& device,
                GdnIn& view) {
  if (!t) return;
  check_dtype(op, name, *t, kFloat);
  check_token_head(op, name, *t, a.geo.B, a.geo.T, a.geo.HV);
  check_on_device(op, name, *t, device);
  common_device(op, {{name, t}});
  view = in_view(*t);
}

/// beta of the direct-gate decode ops: per head [B, T, HV], or per value column [B, T, HV, V] with innermost stride 1
/// (FLA's fused_recurrent: IS_BETA_HEADWISE = beta.ndim != v.ndim), which sets a.beta_per_channel.
void check_decode_beta(const char* op, const TensorView* beta, DecodeArgs& a, const Device& device) {
  if (beta && beta->rank == 3 && (beta->shape[0] != a.geo.B || beta->shape[1] != a.geo.T ||
                                  beta->shape[2] != a.geo.HV)) {  // both forms told (a [B, T, V] was meant per column)
    check_dtype(op, "beta", *beta, kFloat);
    fail_argument(op, "beta", "shape [B, T, HV] = " + dims({a.geo.B, a.geo.T, a.geo.HV}) + " or, per value column, " +
                  "[B, T, HV, V] = " + dims({a.geo.B, a.geo.T, a.geo.HV, a.V}), beta->shape_str());
  }
  if (!beta || beta->rank == 3) return check_gate(op, "beta", beta, a, device, a.beta);
  check_dtype(op, "beta", *beta, kFloat);
  if (beta->rank != 4) {
    fail_argument(op, "beta", "rank 3 [B, T, HV] or rank 4 [B, T, HV, V]", beta->shape_str());
  }
  check_input4(op, "beta", *beta, a.geo.B, a.geo.T, a.geo.HV, a.V, "[B, T, HV, V]");
  check_on_device(op, "beta", *beta, device);
  common_device(op, {{"beta", beta}});
  a.beta = in_view(*beta);
  a.beta_per_channel = true;
}

/// The argument names of a serving form's state pool and slot indices: `state_pool` / `ssm_state_indices`
/// (fused_recurrent_gated_delta_rule_update, after vLLM's fused_recurrent_gated_delta_rule), or vLLM's
/// `initial_state_source` / `initial_state_indices` (fused_sigmoid_gating_delta_rule_update). Errors, the recorded bad
/// indices included, name the op's own arguments.
struct PoolNames {
  const char* pool;
  const char* indices;
};
constexpr PoolNames kPoolNames{"state_pool", "ssm_state_indices"};
constexpr PoolNames kStateNames{"initial_state", "ssm_state_indices"};  // vLLM's fused_recurrent_gated_delta_rule
constexpr PoolNames kSourceNames{"initial_state_source", "initial_state_indices"};

/// Pool, indices and num_accepted_tokens of the serving forms (argument names `names`).
void check_pool(const char* op, const PoolNames& names, const TensorView& pool, const TensorView& idx,
                const TensorView* acc, const Device& device, DecodeArgs& a) {
  check_layouts(op, {{names.pool, &pool}, {names.indices, &idx}, {"num_accepted_tokens", acc}});
  check_dtype(op, names.pool, pool, {DType::f32, DType::bf16, DType::f16});  // vLLM's mamba_ssm_cache_dtype choices
  if (pool.rank != 4 || pool.shape[1] != a.geo.HV || pool.shape[2] != a.geo.K || pool.shape[3] != a.V) {
    // S is the pool's own slot count: shown as the letter where the rank is wrong
    const std::string hkv = dims({a.geo.HV, a.geo.K, a.V});
    fail_argument(op, names.pool,
                  "shape [S, HV, K, V] = [" + (pool.rank == 4 ? std::to_string(pool.shape[0]) : std::string("S")) +
                      ", " + hkv.substr(1),
                  pool.shape_str());
  }
  // Each slot [HV, K, V] contiguous; the slots may lie further apart (vLLM's state pools are views into padded pages
  // shared with the conv state: torch.as_strided with stride(0) = the page's elements), but must not overlap.
  TensorView slot = pool;
  slot.shape[0] = 1;
  const int64_t per = a.geo.HV * a.geo.K * a.V;
  if (pool.numel() > 0 && !slot.is_contiguous()) {  // (an empty pool: no element out of place, as torch's rule)
    fail_argument(op, names.pool, "each slot [HV, K, V] contiguous (strides [s, K V, V, 1] with s >= HV K V)",
                  "strides " + dims({pool.strides[0], pool.strides[1], pool.strides[2], pool.strides[3]}));
  }
  if (pool.shape[0] > 1 && pool.strides[0] < per) {
    fail_argument(op, names.pool, "slots that do not overlap: stride(0) >= HV K V = " + std::to_string(per),
                  "stride(0) = " + std::to_string(pool.strides[0]));
  }
  check_dtype(op, names.indices, idx, {DType::i32, DType::i64});
  // At least N rows: vLLM's CUDA-graph decode passes cu_seqlens[:num_decodes + 1] with the indices of the whole
  // padded batch (its gdn_attn builder fills the rows past num_decodes with -1); rows n >= N are never read, as in
  // vLLM's kernel, whose grid comes from cu_seqlens.
  const int64_t N = a.geo.N;
  if (!((idx.rank == 1 && idx.shape[0] >= N) || (idx.rank == 2 && idx.shape[0] >= N && idx.shape[1] >= 1))) {
    fail_argument(op, names.indices,
                  "shape [N'] or [N', Tmax] with N' >= N = " + std::to_string(N) +
                      (a.geo.cu_seqlens ? " (the sequences of cu_seqlens)" : " (the batch B of q)") + " and Tmax >= 1",
                  idx.shape_str());
  }
  if (!idx.is_contiguous()) fail_argument(op, names.indices, "a contiguous tensor", "strided");
  if (idx.rank == 2 && a.geo.cu_seqlens == nullptr && idx.shape[1] < a.geo.T) {
    // fixed length: every sequence has T tokens, so an [N, Tmax] row shorter than T cannot name each token's slot
    // (varlen lengths are on the device: a token past its row is recorded there)
    fail_argument(op, names.indices, "[N, Tmax] with Tmax >= T = " + std::to_string(a.geo.T), idx.shape_str());
  }
  common_device(op, {{names.pool, &pool}, {names.indices, &idx}});
  check_on_device(op, names.pool, pool, device);
  check_on_device(op, names.indices, idx, device);
  if (acc) {
    if (idx.rank != 2) {
      fail_argument(op, "num_accepted_tokens", std::string("absent with [N] ") + names.indices, "a tensor");
    }
    check_dtype(op, "num_accepted_tokens", *acc, {DType::i32, DType::i64});
    if (acc->rank != 1 || acc->shape[0] < N) {  // rows past N: vLLM's padded batch, never read
      fail_argument(op, "num_accepted_tokens", "shape [N'] with N' >= N = " + std::to_string(N), acc->shape_str());
    }
    if (!acc->is_contiguous()) fail_argument(op, "num_accepted_tokens", "a contiguous tensor", "strided");
    common_device(op, {{"num_accepted_tokens", acc}});
    check_on_device(op, "num_accepted_tokens", *acc, device);
    a.num_accepted = acc->data;
    a.acc_dtype = acc->dtype;
    a.acc_site = error_site(op, "num_accepted_tokens", "the index is a sequence n: expected 1 <= "
                            "num_accepted_tokens[n] <= Tmax; the sequence is skipped as padding");
  }
  allow_cu_seqlens_tail(op, a.geo);  // vLLM's CUDA-graph padded decode steps: cu_seqlens[N] < T, the tail is padding
  a.pool_form = true;
  a.pool = pool.data;
  a.pool_dtype = pool.dtype;
  a.pool_slots = pool.shape[0];
  a.pool_stride_s = pool.shape[0] > 1 ? pool.strides[0] : per;
  a.indices = idx.data;
  a.idx_dtype = idx.dtype;
  a.idx_cols = idx.rank == 2 ? idx.shape[1] : 0;
  a.idx_site = error_site(op, names.indices,
                          idx.rank == 2 ? "the index is the flat n * Tmax + t of [N, Tmax]: expected -1 (padding) or a "
                                          "slot in [0, S) of the state pool"
                                        : "expected -1 (padding) or a slot in [0, S) of the state pool");
  const std::string len_rule = std::string("the index is a sequence n with more tokens than the Tmax columns of ") +
                               names.indices + " [N, Tmax]: it is skipped as padding";
  a.len_site = error_site(op, "cu_seqlens", len_rule.c_str());  // (the site keeps a copy)
}

}  // namespace
}  // namespace detail

void fused_recurrent_gated_delta_rule(TensorView o, TensorView* final_state, TensorView q, TensorView k,
                                      TensorView v, const TensorView* g, const TensorView* beta,
                                      std::optional<double> scale, const TensorView* initial_state,
                                      bool use_qk_l2norm_in_kernel, const TensorView* cu_seqlens, Stream stream) {
  using namespace detail;
  const char* op = "fused_recurrent_gated_delta_rule";
  DecodeArgs a;
  const Device device =
      check_decode(op, o, q, k, v, scale, use_qk_l2norm_in_kernel, cu_seqlens, a, "g", g, "beta", beta);
  check_gate(op, "g", g, a, device, a.g);
  check_decode_beta(op, beta, a, device);
  const int64_t N = a.geo.N, HV = a.geo.HV, K = a.geo.K, V = a.V;
  check_layouts(op, {{"initial_state", initial_state}, {"final_state", final_state}});
  if (initial_state) {
    check_state(op, "initial_state", *initial_state, kFloat, N, HV, K, V);
    common_device(op, {{"q", &q}, {"initial_state", initial_state}});
    a.h0 = initial_state->data;
    a.h0_dtype = initial_state->dtype;
  }
  if (final_state) {
    check_state(op, "final_state", *final_state, {DType::f32}, N, HV, K, V);
    common_device(op, {{"q", &q}, {"final_state", final_state}});
    a.ht = static_cast<float*>(final_state->data);
  }
  check_outputs_disjoint(op, {{"o", &o}, {"final_state", final_state}},
                         {{"o", &o}, {"final_state", final_state}, {"q", &q}, {"k", &k}, {"v", &v}, {"g", g},
                          {"beta", beta}, {"initial_state", state_for_overlap(initial_state, final_state)},
                          {"cu_seqlens", cu_seqlens}});
  if (N == 0 || (a.geo.T == 0 && !final_state)) return check_cu_seqlens_without_tokens(op, a.geo, device, stream);
  FUSEOPS_GDN_RUN(op, device, stream, fused_recurrent_gated_delta_rule, a);
}

namespace detail {
namespace {

/// The serving form with direct gates under the names of op `op` (its pool and indices named `names`).
void decode_pool(const char* op, const PoolNames& names, TensorView o, TensorView pool, TensorView q, TensorView k,
                 TensorView v, const TensorView* g, const TensorView* beta, std::optional<double> scale,
                 TensorView indices, const TensorView* num_accepted_tokens, bool use_qk_l2norm_in_kernel,
                 const TensorView* cu_seqlens, Stream stream) {
  DecodeArgs a;
  const Device device =
      check_decode(op, o, q, k, v, scale, use_qk_l2norm_in_kernel, cu_seqlens, a, "g", g, "beta", beta);
  check_gate(op, "g", g, a, device, a.g);
  check_decode_beta(op, beta, a, device);
  check_pool(op, names, pool, indices, num_accepted_tokens, device, a);
  check_outputs_disjoint(op, {{"o", &o}, {names.pool, &pool}},
                         {{"o", &o}, {names.pool, &pool}, {"q", &q}, {"k", &k}, {"v", &v}, {"g", g},
                          {"beta", beta}, {names.indices, &indices},
                          {"num_accepted_tokens", num_accepted_tokens}, {"cu_seqlens", cu_seqlens}});
  (void)backend_for(op, device);  // first: an empty CUDA tensor needs CUDA too
  if (a.geo.N == 0) return;  // T = 0: each sequence is empty, but its pool indices are checked (as at T > 0)
  FUSEOPS_GDN_RUN(op, device, stream, fused_recurrent_gated_delta_rule, a);
}

}  // namespace
}  // namespace detail

void fused_recurrent_gated_delta_rule_update(TensorView o, TensorView state_pool, TensorView q, TensorView k,
                                             TensorView v, const TensorView* g, const TensorView* beta,
                                             std::optional<double> scale, TensorView ssm_state_indices,
                                             const TensorView* num_accepted_tokens, bool use_qk_l2norm_in_kernel,
                                             const TensorView* cu_seqlens, Stream stream) {
  detail::decode_pool("fused_recurrent_gated_delta_rule_update", detail::kPoolNames, o, state_pool, q, k, v, g, beta,
                      scale, ssm_state_indices, num_accepted_tokens, use_qk_l2norm_in_kernel, cu_seqlens, stream);
}

void fused_recurrent_gated_delta_rule(TensorView o, TensorView initial_state, TensorView q, TensorView k,
                                      TensorView v, const TensorView* g, const TensorView* beta,
                                      std::optional<double> scale, TensorView ssm_state_indices,
                                      const TensorView* num_accepted_tokens, bool use_qk_l2norm_in_kernel,
                                      const TensorView* cu_seqlens, Stream stream) {
  detail::decode_pool("fused_recurrent_gated_delta_rule", detail::kStateNames, o, initial_state, q, k, v, g, beta,
                      scale, ssm_state_indices, num_accepted_tokens, use_qk_l2norm_in_kernel, cu_seqlens, stream);
}

void fused_sigmoid_gating_delta_rule_update(TensorView o, TensorView initial_state_source, TensorView A_log,
                                            TensorView a_in, TensorView dt_bias, TensorView q, TensorView k,
                                            TensorView v, TensorView b, std::optional<double> scale,
                                            TensorView initial_state_indices,
                                            const TensorView* num_accepted_tokens, bool use_qk_l2norm_in_kernel,
                                            const TensorView* cu_seqlens, double softplus_beta,
                                            double softplus_threshold, Stream stream) {
  using namespace detail;
  const char* op = "fused_sigmoid_gating_delta_rule_update";
  DecodeArgs a;
  const Device device =
      check_decode(op, o, q, k, v, scale, use_qk_l2norm_in_kernel, cu_seqlens, a, "a", &a_in, "b", &b);
  a.fused_gating = true;
  check_gate(op, "a", &a_in, a, device, a.a);
  check_gate(op, "b", &b, a, device, a.b);
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"A_log", &A_log}, {"dt_bias", &dt_bias}}) {
    check_layout(op, name, *t);
    check_dtype(op, name, *t, kFloat);
    if (t->rank != 1 || t->shape[0] != a.geo.HV) fail_argument(op, name, "shape [HV] = " + dims({a.geo.HV}), t->shape_str());
    common_device(op, {{name, t}});
    check_on_device(op, name, *t, device);
  }
  a.A_log = vector_view(A_log);
  a.dt_bias = vector_view(dt_bias);
  a.softplus_beta = fp32_argument(op, "softplus_beta", softplus_beta, "> 0", softplus_beta > 0);
  a.softplus_threshold = fp32_argument(op, "softplus_threshold", softplus_threshold);
  check_pool(op, kSourceNames, initial_state_source, initial_state_indices, num_accepted_tokens, device, a);
  check_outputs_disjoint(op, {{"o", &o}, {"initial_state_source", &initial_state_source}},
                         {{"o", &o}, {"initial_state_source", &initial_state_source}, {"q", &q}, {"k", &k},
                          {"v", &v}, {"a", &a_in}, {"b", &b}, {"A_log", &A_log}, {"dt_bias", &dt_bias},
                          {"initial_state_indices", &initial_state_indices},
                          {"num_accepted_tokens", num_accepted_tokens},
                          {"cu_seqlens", cu_seqlens}});
  (void)backend_for(op, device);  // first: an empty CUDA tensor needs CUDA too
  if (a.geo.N == 0) return;  // T = 0: each sequence is empty, but its pool indices are checked (as at T > 0)
  FUSEOPS_GDN_RUN(op, device, stream, fused_recurrent_gated_delta_rule, a);
}

}  // namespace fuseops
