// Internal interface between the MoE routing ops (validation, ops/moe.cpp) and their backends.
#pragma once

#include <cstdint>

#include "core/validate.h"
#include "fuseops/moe.h"

namespace fuseops::detail {

/// A 1-D vector of any dtype with an element stride (absent when data == nullptr).
struct StridedVec {
  const void* data = nullptr;
  int64_t size = 0;
  int64_t stride = 1;
  DType dtype = DType::f32;
};

/// Top-k routing of T tokens over E experts (topk_softmax: softmax, n_group = topk_group = 1, scale 1).
struct RouteArgs {
  RowMatrix logits;            ///< [T, E] f32 | f16 | bf16
  StridedVec bias;             ///< [E] any float dtype, or absent
  RowMatrix weights;           ///< [T, k] f32
  RowMatrix ids;               ///< [T, k] i32 | i64
  RowMatrix src_rows;          ///< [T, k] i32 token_expert_indices (j*T + t), or data == nullptr
  int64_t T = 0, E = 0, k = 0;
  MoeScoring scoring = MoeScoring::softmax;
  int n_group = 1, topk_group = 1;
  bool renormalize = false;
  float scale = 1.0f;          ///< routed_scaling_factor
};

/// moe_align_block_size of numel = ids.rows * ids.cols expert ids (flat index = row * cols + col).
struct AlignArgs {
  RowMatrix ids;               ///< [T, k] i32 | i64
  int32_t* sorted = nullptr;   ///< sorted_token_ids [sorted_len], contiguous
  int64_t sorted_len = 0;
  int32_t* expert_ids = nullptr;  ///< [blocks], contiguous
  int64_t blocks = 0;
  int32_t* total = nullptr;    ///< num_tokens_post_pad [1]
  StridedVec expert_map;       ///< [E] i32, or absent
  int64_t E = 0, block_size = 1;
  uint32_t ids_site = 0, map_site = 0;  ///< error record sites (topk_ids, expert_map)
};

namespace cpu {
void route(const RouteArgs& args);
void align(const AlignArgs& args);
}  // namespace cpu

namespace cuda {
void route(const char* op, const RouteArgs& args, int device, void* stream);
void align(const char* op, const AlignArgs& args, int device, void* stream);
/// route() then align() of its ids, fused where the sizes allow.
void route_and_align(const char* op, const RouteArgs& route, const AlignArgs& align, int device, void* stream);
}  // namespace cuda

}  // namespace fuseops::detail
