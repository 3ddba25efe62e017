// CUDA backend of moe_align_block_size: one launch of a thread block cluster (moe_align.cuh).
#include <algorithm>

#include "cuda/launch.h"
#include "cuda/moe_align.cuh"
#include "cuda/moe_launch.h"
#include "ops/moe_impl.h"

namespace fuseops::detail::cuda {
namespace {

__global__ void __launch_bounds__(1024) align_kernel(AlignParams p) {
  pdl_wait_and_release();
  extern __shared__ int smem[];
  const int cl = static_cast<int>(cluster_blocks()), rank = static_cast<int>(cluster_rank());
  const int chunk = (p.numel + cl - 1) / cl;
  const int lo = min(p.numel, rank * chunk), hi = min(p.numel, lo + chunk);
  align_schedule(p, lo, hi, smem);
}

}  // namespace

AlignParams align_params(const AlignArgs& a, int device) {
  AlignParams p{};
  p.ids = a.ids.data;
  p.ids_stride = a.ids.row_stride;
  p.ids_cols = static_cast<int>(std::max<int64_t>(a.ids.cols, 1));
  p.ids_i64 = a.ids.dtype == DType::i64;
  p.numel = static_cast<int>(a.ids.rows * a.ids.cols);
  p.sorted = a.sorted;
  p.sorted_len = static_cast<int>(a.sorted_len);
  p.expert_ids = a.expert_ids;
  p.blocks = static_cast<int>(a.blocks);
  p.total = a.total;
  p.expert_map = static_cast<const int32_t*>(a.expert_map.data);
  p.map_stride = a.expert_map.stride;
  p.E = static_cast<int>(a.E);
  p.block_size = static_cast<int>(a.block_size);
  p.record = cuda_error_record(device);
  p.ids_site = a.ids_site;
  p.map_site = a.map_site;
  return p;
}

AlignShape align_shape(int64_t numel, int64_t E, int device) {
  AlignShape s;
  s.warps = static_cast<int>(std::min<int64_t>(32, std::max<int64_t>(1, kAlignSmemWords / E - 4)));
  s.smem = static_cast<std::size_t>(align_smem_words(s.warps, E)) * sizeof(int);
  s.cluster = 1;
  if (is_sm90_or_newer(device)) {
    s.cluster = static_cast<unsigned>(std::min<int64_t>(kMaxCluster, std::max<int64_t>(1, (numel + kIdsPerBlock - 1) / kIdsPerBlock)));
  }
  return s;
}

void align(const char* op, const AlignArgs& args, int device, void* stream) {
  DeviceGuard guard(device, op);
  auto s = static_cast<cudaStream_t>(stream);
  const AlignParams p = align_params(args, device);
  const AlignShape shape = align_shape(p.numel, args.E, device);
  allow_smem(align_kernel, shape.smem, op);
  launch_kernel_cluster(align_kernel, dim3(shape.cluster), dim3(32 * shape.warps), shape.smem, s, device,
                        shape.cluster, p);
  after_launch(op, s, device);
}

}  // namespace fuseops::detail::cuda
