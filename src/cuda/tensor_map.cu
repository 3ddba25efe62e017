// Tensor maps of 16-bit tensors (tensor_map.h).
#include "cuda/tensor_map.h"

#include <cuda_runtime.h>

#include <algorithm>

namespace fuseops::detail::cuda {
namespace {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/// cuTensorMapEncodeTiled from the driver, or null.
EncodeTiled encode_tiled() {
  static const EncodeTiled fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<EncodeTiled>(nullptr);
    }
    return reinterpret_cast<EncodeTiled>(p);
  }();
  return fn;
}

}  // namespace

bool tensor_map_16b_sw128(CUtensorMap* map, DType dt, int rank, const void* base, const int64_t* dims,
                          const int64_t* strides, const uint32_t* box) {
  const EncodeTiled encode = encode_tiled();
  if (!encode || rank < 1 || rank > 5 || (dt != DType::bf16 && dt != DType::f16)) return false;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] < 1) return false;  // the driver refuses an empty dimension
  }
  cuuint64_t d[5], st[4];
  cuuint32_t bx[5], es[5];
  for (int i = 0; i < rank; ++i) {
    d[i] = static_cast<cuuint64_t>(dims[i]);
    bx[i] = box[i];
    es[i] = 1;
    if (i > 0) st[i - 1] = static_cast<cuuint64_t>(strides[i - 1]) * 2;
  }
  const CUtensorMapDataType type = dt == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return encode(map, type, static_cast<cuuint32_t>(rank), const_cast<void*>(base), d, st, bx, es,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

bool gdn_rows_map(CUtensorMap* map, const GdnIn& x, DType dt, int64_t inner, int64_t heads, const GdnGeometry& geo) {
  // Views with a zero stride (batch, head or token broadcasts) are not given to the driver: cp.async then.
  if ((geo.B > 1 && x.stride_b == 0) || (heads > 1 && x.stride_h == 0) || (geo.T > 1 && x.stride_t == 0)) return false;
  const int64_t dims[4] = {inner, heads, geo.T, geo.B};
  // B = 1: the batch stride is never stepped; any multiple of 8 elements is a valid map stride
  const int64_t strides[3] = {x.stride_h, x.stride_t, geo.B == 1 ? std::max<int64_t>(x.stride_b, 8) : x.stride_b};
  const uint32_t box[4] = {64, 1, static_cast<uint32_t>(geo.BT), 1};
  return tensor_map_16b_sw128(map, dt, 4, x.data, dims, strides, box);
}

}  // namespace fuseops::detail::cuda
