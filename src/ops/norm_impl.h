// Internal interface between the gated norm (validation, ops/norm.cpp) and its backends.
#pragma once

#include <cstdint>

#include "core/validate.h"

namespace fuseops::detail {

/// Where the SiLU gate z applies.
enum class NormGate : int { none = 0, after_norm = 1, before_norm = 2 };

/// The largest group the kernels hold on chip (elements).
constexpr int64_t kMaxNormGroup = 16384;

/// out = norm(x (* silu(z))) * weight (+ bias) (* silu(z)) per (row, group); see include/fuseops/norm.h.
struct LayerNormArgs {
  RowMatrix out, x, z;          ///< [M, N], one dtype; z.data null without a gate
  const void* weight = nullptr;  ///< [N], contiguous
  const void* bias = nullptr;    ///< [N], contiguous; null: none
  DType w_dtype = DType::f32;    ///< dtype of weight and bias
  float* mean = nullptr;         ///< [ngroups * M] group-major; null: not stored
  float* rstd = nullptr;         ///< [ngroups * M] group-major; null: not stored
  int64_t group_size = 0, ngroups = 0;
  float eps = 1e-6f;
  NormGate gate = NormGate::none;
  bool rms = false;
};

namespace cpu {
void layer_norm_fwd(const LayerNormArgs& args);
}  // namespace cpu

#if defined(FUSEOPS_WITH_CUDA)
namespace cuda {
void layer_norm_fwd(const char* op, const LayerNormArgs& args, int device, void* stream);
/// Tests only: how many launches of the row-pipelined norm kernel (src/cuda/norm.cu) this process made.
int64_t norm_pipelined_launches_for_testing();
/// Tests only: how many launches of the per-item norm kernels staged weight and bias in shared memory.
int64_t norm_staged_launches_for_testing();
}  // namespace cuda
#endif

}  // namespace fuseops::detail
