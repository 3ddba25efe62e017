// fuseops public API: rotary position embeddings (RoPE), multimodal RoPE (M-RoPE) and their backward.
//
// Math (docs/ops/rope.md). Let r = rotary_dim (even), h = r / 2, and for pair j < h let c_j = cos(theta_j(p)),
// s_j = sin(theta_j(p)) as read from the cache row of the token's position p. Only the first r dims of each head
// are touched; dims [r, head_size) pass through unchanged.
//  - NeoX ("rotate half", is_neox = true, FlagGems rotary_interleaved = false): pairs (j, j + h),
//      y_j = x_j c_j - x_{j+h} s_j,   y_{j+h} = x_{j+h} c_j + x_j s_j.
//  - GPT-J (interleaved, is_neox = false, rotary_interleaved = true): pairs (2j, 2j + 1),
//      y_{2j} = x_{2j} c_j - x_{2j+1} s_j,   y_{2j+1} = x_{2j+1} c_j + x_{2j} s_j.
//  - inverse = true rotates by -theta (s_j -> -s_j): the exact inverse, and the gradient with respect to the input
//    (the rotation is orthogonal, so dL/dx = R(-theta) dL/dy). The *_backward functions are that rotation.
// The math is fp32 with one rounding at the store, whatever the storage dtypes.
//
// Common rules:
//  - query / key (q / k) dtypes f32, f16 or bf16, the same for both; the cache (cos_sin_cache, cos, sin) f32, f16
//    or bf16, independently of query (vLLM-new and FlashInfer accept an fp32 cache with bf16 activations).
//  - query / key are views [tokens..., H * head_size] or [tokens..., H, head_size]: innermost stride 1; token and
//    head strides are free (views into one fused qkv buffer work, each with its own token stride), but the rotated
//    parts of different (token, head) pairs must not overlap, and query's must not overlap key's.
//  - positions: i32 or i64 on the tensors' device. A position outside [0, rows of the cache) is never read past:
//    that token is left unrotated (in place: unchanged; out of place: copied) and the op records the fault in the
//    device error record without synchronising; fuseops::check_errors() raises it as
//    "<op>: positions: value out of range at index <i>" (i = flat index into positions), and FUSEOPS_DEBUG=1
//    raises it right after the op.
//  - rotary_dim <= 512 (h <= 256 pairs); zero tokens is valid (nothing is launched;
//    the device is still checked, as in every op).
// Errors: fuseops::Error (invalid_argument) naming the argument for any violation of the above; unsupported when
// a CUDA tensor reaches a build without CUDA; device_failure if a launch fails.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "fuseops/tensor.h"

namespace fuseops {

/// Largest rotary_dim (and apply_rotary_pos_emb head dim D) the rope ops accept: 256 rotated pairs.
inline constexpr int64_t kRopeMaxRotaryDim = 512;

/// Rotates query (and key, when given) in place, as vLLM `rotary_embedding(positions, query, key, head_size,
/// cos_sin_cache, is_neox)` (csrc/pos_encoding_kernels.cu; vLLM-new adds `inverse`).
/// positions: [tokens...] i32 / i64 (1-D [T] or 2-D [B, S]); query: [tokens..., Hq * head_size] or
/// [tokens..., Hq, head_size]; key: the same with Hk heads (Hq and Hk independent), or nullptr;
/// cos_sin_cache: [max_position, rotary_dim], row p = [cos theta_0 .. cos theta_{h-1}, sin theta_0 .. sin theta_{h-1}];
/// rotary_dim even, 2 <= rotary_dim <= head_size.
void rotary_embedding(TensorView positions, TensorView query, const TensorView* key, int64_t head_size,
                      TensorView cos_sin_cache, bool is_neox, bool inverse = false, Stream stream = {});

/// Gradient of rotary_embedding with respect to query and key, in place: rotary_embedding with inverse = true on
/// the incoming gradients (the same arguments otherwise).
void rotary_embedding_backward(TensorView positions, TensorView grad_query, const TensorView* grad_key,
                               int64_t head_size, TensorView cos_sin_cache, bool is_neox, Stream stream = {});

/// As FlagGems `apply_rotary_pos_emb(q, k, cos, sin, position_ids, rotary_interleaved, inplace)`
/// (src/flag_gems/fused/rotary_embedding.py), writing q_out and k_out.
/// q: [tokens..., Hq, D]; k: [tokens..., Hk, D] (same leading dims); cos, sin: [max_seq, D / 2];
/// position_ids: [tokens...] i32 / i64, or nullptr: then q is [B, S, Hq, D] and the position of token (b, s) is s
/// (S <= max_seq is checked). Every dim of q is rotated (rotary_dim = D). q_out / k_out: the shapes of q / k; either
/// the same views as q / k (in place) or views that overlap no input and not each other. The common rules on query /
/// key apply to what is written: q and k, when both only read (out of place), may overlap or be one view.
void apply_rotary_pos_emb(TensorView q_out, TensorView k_out, TensorView q, TensorView k, TensorView cos,
                          TensorView sin, const TensorView* position_ids, bool rotary_interleaved,
                          bool inverse = false, Stream stream = {});

/// Gradient of apply_rotary_pos_emb: apply_rotary_pos_emb with inverse = true on the incoming gradients. The
/// arguments keep apply_rotary_pos_emb's order (outputs first): grad_q / grad_k are READ (the incoming gradients,
/// dL/dq_out and dL/dk_out of the forward) and grad_q_out / grad_k_out are WRITTEN (dL/dq, dL/dk); pass the same
/// views to do it in place. Python's apply_rotary_pos_emb_backward(grad_q, grad_k, ...) takes the incoming gradients
/// and returns the results.
void apply_rotary_pos_emb_backward(TensorView grad_q_out, TensorView grad_k_out, TensorView grad_q,
                                   TensorView grad_k, TensorView cos, TensorView sin, const TensorView* position_ids,
                                   bool rotary_interleaved, Stream stream = {});

/// Which M-RoPE axis (temporal 0, height 1, width 2) each frequency pair j < h takes its position from.
enum class MropeLayout : int {
  chunked = 0,          ///< Qwen2-VL / Qwen2.5-VL: j < s_t -> T, j < s_t + s_h -> H, else W
  interleaved = 1,      ///< Qwen3-VL: H where j % 3 == 1 and j < 3 s_h, W where j % 3 == 2 and j < 3 s_w, else T
  /// FlagGems' GLM map (is_interleaved_glm + axis_map; the map issue 6 names for GLM-4.1V): round-robin T, H, W over
  /// j, skipping axes whose section is used up. HF and vLLM run GLM-4.1V itself with `chunked` and GPT-J pairs
  /// (transformers glm4v apply_multimodal_rotary_pos_emb; vLLM's config has no mrope_interleaved): docs/ops/rope.md.
  interleaved_glm = 2,
};

/// Parses "chunked" / "interleaved" / "interleaved_glm"; throws Error naming `layout` otherwise.
MropeLayout parse_mrope_layout(const std::string& layout);
/// "chunked", "interleaved" or "interleaved_glm".
const char* mrope_layout_name(MropeLayout layout);

/// Multimodal RoPE in place, as vLLM `MRotaryEmbedding` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) and FlagGems `mrope`
/// (src/flag_gems/fused/mrope.py; is_interleaved, is_interleaved_glm, is_neox_style): pair j is rotated by the
/// angle of the cache row of positions[axis(j), t] (axis(j) from `layout` and `mrope_section`).
/// positions: [3, T] i32 / i64 (rows temporal, height, width), or [T] (ordinary RoPE); query: [T, Hq * head_size]
/// or [T, Hq, head_size]; key: the same with Hk heads, or nullptr; cos_sin_cache: [max_position, rotary_dim] as in
/// rotary_embedding; mrope_section: [s_t, s_h, s_w] >= 0 with s_t + s_h + s_w = rotary_dim / 2.
/// With [3, T] positions every row must be in range (a bad one leaves the token unrotated and is recorded).
void mrope(TensorView positions, TensorView query, const TensorView* key, int64_t head_size, int64_t rotary_dim,
           TensorView cos_sin_cache, const std::array<int64_t, 3>& mrope_section, bool is_neox,
           MropeLayout layout = MropeLayout::chunked, bool inverse = false, Stream stream = {});

/// Gradient of mrope with respect to query and key, in place: mrope with inverse = true.
void mrope_backward(TensorView positions, TensorView grad_query, const TensorView* grad_key, int64_t head_size,
                    int64_t rotary_dim, TensorView cos_sin_cache, const std::array<int64_t, 3>& mrope_section,
                    bool is_neox, MropeLayout layout = MropeLayout::chunked, Stream stream = {});

}  // namespace fuseops
