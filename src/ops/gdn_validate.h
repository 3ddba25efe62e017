// Validation helpers shared by the GDN op families (ops/gdn.cpp, ops/gdn_forward.cpp).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "fuseops/tensor.h"
#include "ops/gdn_impl.h"

namespace fuseops::detail {

constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::f16, DType::bf16};

/// "[2, 64, 128]".
std::string dims(std::initializer_list<int64_t> d);
/// chunk_size in {16, 32, 64}.
void check_chunk_size(const char* op, int64_t chunk_size);
/// The backend's view of a validated [B, T, heads(, ...)] tensor.
GdnIn in_view(const TensorView& v);
GdnOut out_view(const TensorView& v);
/// [B, T, HV] of a per-token, per-head tensor (HV < 0: any).
void check_token_head(const char* op, const char* name, const TensorView& v, int64_t B, int64_t T, int64_t HV);
/// The sequence count N of cu_seqlens [N+1] (i32 / i64, rank 1; N >= 1 when there are tokens): its shape alone,
/// no data read.
int64_t cu_seqlens_count(const char* op, const TensorView& cu, int64_t T);
/// cu_seqlens: [N+1] i32 / i64 on `device`, B == 1; fills geo.cu_* and geo.N (B without cu_seqlens).
void attach_cu_seqlens(const char* op, const TensorView* cu, const Device& device, GdnGeometry& geo);
/// After attach_cu_seqlens, for the decode pool forms: cu_seqlens[N] may be less than T (GdnGeometry::cu_tail), and a
/// malformed cu_seqlens is recorded under that rule. Nothing without cu_seqlens.
void allow_cu_seqlens_tail(const char* op, GdnGeometry& geo);
/// For an op that has nothing to compute at T = 0: its N >= 1 cu_seqlens entries are still checked, as every GDN op
/// checks them (docs/ops/gdn.md, Variable length). Runs chunk_local_cumsum's chunk walk over zero tokens and one
/// head, which records a malformed cu_seqlens against the calling op (geo.cu_site) and reads or writes no row; `op`
/// (the calling op) is named in the backend's errors. Checks the backend of `device` (a CUDA tensor without CUDA is an
/// error with no elements too); runs nothing unless geo.T == 0 and cu_seqlens names N >= 1 sequences.
void check_cu_seqlens_without_tokens(const char* op, const GdnGeometry& geo, const Device& device, Stream stream);

}  // namespace fuseops::detail
