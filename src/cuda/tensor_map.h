// Tensor maps of 16-bit tensors for the tensor-memory-accelerator copies of sm_90 kernels (cuTensorMapEncodeTiled,
// reached through the runtime's driver entry point: the library links no driver library).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "fuseops/tensor.h"
#include "ops/gdn_impl.h"

namespace fuseops::detail::cuda {

/// A 16-bit tensor (dt f16 or bf16) of `rank` <= 5 dimensions at `base` (16-byte aligned), dims[0] innermost (stride
/// 1), strides[i] the element stride of dimension i + 1 (multiples of 8 elements), as a tensor map with boxes
/// box[0] x ... (box[0] = 64 elements: one 128-byte row, stored with 128-byte swizzle: 16-byte group c of box row r at
/// group c ^ (r % 8)); reads past a dimension's end fill zeros. False (the map unusable) where a dimension is empty or
/// the driver refuses it.
bool tensor_map_16b_sw128(CUtensorMap* map, DType dt, int rank, const void* base, const int64_t* dims,
                          const int64_t* strides, const uint32_t* box);

/// A GDN input [B, T, heads, inner] (16-byte rows; inner = K or V) as a 4-D tensor map (inner, heads, T, B), boxes
/// of 64 x 1 x geo.BT x 1 (a chunk's rows of one head, 64 columns per box). False for a broadcast view (a zero batch,
/// head or token stride where that dimension has more than one entry: no map is made with a zero stride) or where the
/// driver refuses it.
bool gdn_rows_map(CUtensorMap* map, const GdnIn& x, DType dt, int64_t inner, int64_t heads, const GdnGeometry& geo);

}  // namespace fuseops::detail::cuda
