// torch kernels of the rotary embeddings: convert, guard, current stream, call (include/fuseops/rope.h).
#include <array>

#include "fuseops/rope.h"

#include "ops.h"
#include "torch_utils.h"

namespace fuseops::torch_binding {
namespace {

// Parsed here so that no std::string crosses into the library (see activation.cpp).
MropeLayout layout_of(const char* op, c10::string_view layout) {
  if (layout == "chunked") return MropeLayout::chunked;
  if (layout == "interleaved") return MropeLayout::interleaved;
  if (layout == "interleaved_glm") return MropeLayout::interleaved_glm;
  TORCH_CHECK_VALUE(false, op, ": layout: expected \"chunked\" | \"interleaved\" | \"interleaved_glm\", got ",
                    quoted_text(std::string_view(layout.data(), layout.size())));
  return MropeLayout::chunked;  // unreachable
}

}  // namespace

namespace {

/// The vLLM-form ops (rotary_embedding, mrope and their backward): positions, query / key written in place under the
/// names `qn` / `kn`, the cache; `call(p, q, k, c, stream)` runs the library op, which names itself in its errors, the
/// deferred position errors included (the backward ops are their own torch ops so that these name the backward).
template <typename Call>
void vllm_form(const char* op, const char* qn, const char* kn, const at::Tensor& positions, at::Tensor& query,
               const c10::optional<at::Tensor>& key, const at::Tensor& cos_sin_cache, const Call& call) {
  Written written;
  const TensorView p = to_view(op, "positions", positions);
  const TensorView c = to_view(op, "cos_sin_cache", cos_sin_cache);
  const TensorView q = written.add(op, qn, query);
  auto k = written.add(op, kn, key);
  run_on_device_of(query, written, [&](Stream s) { call(p, q, k.get(), c, s); });
}

std::array<int64_t, 3> section_of(const char* op, at::IntArrayRef mrope_section) {
  TORCH_CHECK_VALUE(mrope_section.size() == 3, op, ": mrope_section: expected 3 sections [s_t, s_h, s_w], got ",
                    mrope_section.size(), " values");
  return {mrope_section[0], mrope_section[1], mrope_section[2]};
}

}  // namespace

void rotary_embedding(const at::Tensor& positions, at::Tensor& query, const c10::optional<at::Tensor>& key,
                      int64_t head_size, const at::Tensor& cos_sin_cache, bool is_neox, bool inverse) {
  vllm_form("rotary_embedding", "query", "key", positions, query, key, cos_sin_cache,
            [&](TensorView p, TensorView q, const TensorView* k, TensorView c, Stream s) {
              fuseops::rotary_embedding(p, q, k, head_size, c, is_neox, inverse, s);
            });
}

void rotary_embedding_backward(const at::Tensor& positions, at::Tensor& grad_query,
                               const c10::optional<at::Tensor>& grad_key, int64_t head_size,
                               const at::Tensor& cos_sin_cache, bool is_neox) {
  vllm_form("rotary_embedding_backward", "grad_query", "grad_key", positions, grad_query, grad_key, cos_sin_cache,
            [&](TensorView p, TensorView q, const TensorView* k, TensorView c, Stream s) {
              fuseops::rotary_embedding_backward(p, q, k, head_size, c, is_neox, s);
            });
}

const char* apply_rotary_error_op(bool inverse) {
  return inverse ? "apply_rotary_pos_emb_backward" : "apply_rotary_pos_emb";
}

std::string apply_rotary_error_arg(bool inverse, const std::string& name) {
  const bool rotated = name == "q" || name == "k" || name == "q_out" || name == "k_out";
  return inverse && rotated ? "grad_" + name : name;
}

namespace {

/// apply_rotary_pos_emb and its in-place form (q_out = q, k_out = k): errors name the form's own written arguments;
/// inverse = the backward (python/fuseops/rope.py, apply_rotary_pos_emb_backward), whose errors name its gradients.
void apply_rotary(bool inplace, at::Tensor& q_out, at::Tensor& k_out, const at::Tensor& q, const at::Tensor& k,
                  const at::Tensor& cos, const at::Tensor& sin, const c10::optional<at::Tensor>& position_ids,
                  bool rotary_interleaved, bool inverse) {
  const char* op = apply_rotary_error_op(inverse);
  Written written;
  const std::string q_in = apply_rotary_error_arg(inverse, "q"), k_in = apply_rotary_error_arg(inverse, "k");
  const TensorView qv = to_view(op, q_in.c_str(), q), kv = to_view(op, k_in.c_str(), k);
  const TensorView cv = to_view(op, "cos", cos), sv = to_view(op, "sin", sin);
  const OptionalView ids(op, "position_ids", position_ids);
  const std::string q_name = inplace ? q_in : apply_rotary_error_arg(inverse, "q_out");
  const std::string k_name = inplace ? k_in : apply_rotary_error_arg(inverse, "k_out");
  const TensorView qo = written.add(op, q_name.c_str(), q_out), ko = written.add(op, k_name.c_str(), k_out);
  run_on_device_of(q, written, [&](Stream s) {
    if (inverse) {
      fuseops::apply_rotary_pos_emb_backward(qo, ko, qv, kv, cv, sv, ids.get(), rotary_interleaved, s);
    } else {
      fuseops::apply_rotary_pos_emb(qo, ko, qv, kv, cv, sv, ids.get(), rotary_interleaved, false, s);
    }
  });
}

}  // namespace

void apply_rotary_pos_emb(at::Tensor& q_out, at::Tensor& k_out, const at::Tensor& q, const at::Tensor& k,
                          const at::Tensor& cos, const at::Tensor& sin, const c10::optional<at::Tensor>& position_ids,
                          bool rotary_interleaved, bool inverse) {
  apply_rotary(false, q_out, k_out, q, k, cos, sin, position_ids, rotary_interleaved, inverse);
}

void apply_rotary_pos_emb_inplace(at::Tensor& q, at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
                                  const c10::optional<at::Tensor>& position_ids, bool rotary_interleaved,
                                  bool inverse) {
  apply_rotary(true, q, k, q, k, cos, sin, position_ids, rotary_interleaved, inverse);
}

void mrope(const at::Tensor& positions, at::Tensor& query, const c10::optional<at::Tensor>& key, int64_t head_size,
           int64_t rotary_dim, const at::Tensor& cos_sin_cache, at::IntArrayRef mrope_section, bool is_neox,
           c10::string_view layout, bool inverse) {
  constexpr const char* op = "mrope";
  const std::array<int64_t, 3> section = section_of(op, mrope_section);
  const MropeLayout l = layout_of(op, layout);
  vllm_form(op, "query", "key", positions, query, key, cos_sin_cache,
            [&](TensorView p, TensorView q, const TensorView* k, TensorView c, Stream s) {
              fuseops::mrope(p, q, k, head_size, rotary_dim, c, section, is_neox, l, inverse, s);
            });
}

void mrope_backward(const at::Tensor& positions, at::Tensor& grad_query, const c10::optional<at::Tensor>& grad_key,
                    int64_t head_size, int64_t rotary_dim, const at::Tensor& cos_sin_cache,
                    at::IntArrayRef mrope_section, bool is_neox, c10::string_view layout) {
  constexpr const char* op = "mrope_backward";
  const std::array<int64_t, 3> section = section_of(op, mrope_section);
  const MropeLayout l = layout_of(op, layout);
  vllm_form(op, "grad_query", "grad_key", positions, grad_query, grad_key, cos_sin_cache,
            [&](TensorView p, TensorView q, const TensorView* k, TensorView c, Stream s) {
              fuseops::mrope_backward(p, q, k, head_size, rotary_dim, c, section, is_neox, l, s);
            });
}

}  // namespace fuseops::torch_binding
