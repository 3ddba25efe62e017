// mbarrier and tensor-memory-accelerator primitives of sm_90: a tile of a tensor map copied into shared memory by one
// instruction (cp.async.bulk.tensor), completing on an mbarrier. Below sm_90 (a build that also lists an older
// architecture) they trap: the host launches the kernels that use them only where is_sm90_or_newer() holds.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace fuseops::detail::cuda {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FUSEOPS_SM90_ASM(...) asm volatile(__VA_ARGS__)
#else
#define FUSEOPS_SM90_ASM(...) __trap()
#endif

/// A phase of an mbarrier initialised with count 1 completes once its one arrival (mbar_arrive_expect, announcing the
/// bytes) and the copies' bytes have all arrived; waiting threads then see the copied bytes.
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  FUSEOPS_SM90_ASM("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
/// Makes initialised mbarriers visible to the asynchronous proxy (before a block barrier and their first use).
__device__ __forceinline__ void mbar_init_fence() { FUSEOPS_SM90_ASM("fence.mbarrier_init.release.cluster;" ::: "memory"); }
/// Orders this thread's earlier generic-proxy shared-memory accesses (e.g. cp.async writes that have completed) before
/// later asynchronous-proxy accesses to the same bytes; executed by every thread, then a block barrier, then the copy.
__device__ __forceinline__ void fence_proxy_async_shared() {
  FUSEOPS_SM90_ASM("fence.proxy.async.shared::cta;" ::: "memory");
}
/// Orders this thread's earlier generic-proxy accesses of global memory (an acquire that made other blocks' stores
/// visible) before its later asynchronous-proxy accesses (tensor-map copies of those bytes).
__device__ __forceinline__ void fence_proxy_async_global() {
  FUSEOPS_SM90_ASM("fence.proxy.async.global;" ::: "memory");
}
/// The one arrival of a phase, with the bytes its copies bring.
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
  FUSEOPS_SM90_ASM("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
                   : "memory");
}
/// One arrival without bytes (barriers that count threads, or the other lanes of a copy's phase).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  FUSEOPS_SM90_ASM("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
/// Waits until the phase of parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  }
#else
  (void)bar;
  (void)parity;
  __trap();
#endif
}
/// Hints the L2 to fetch the 128-byte line holding `p` (global memory); nothing is read into the SM and no value
/// depends on it.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(__cvta_generic_to_global(p)));
}
/// Hints the L2 to fetch the box of a 4-D tensor map at coordinates (c0 innermost .. c3); nothing is read into the
/// SM and no value depends on it. `map`: a __grid_constant__ kernel parameter.
__device__ __forceinline__ void tma_prefetch_4d(const CUtensorMap* map, int c0, int c1, int c2, int c3) {
  FUSEOPS_SM90_ASM("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];" ::"l"(
                       reinterpret_cast<uint64_t>(map)),
                   "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                   : "memory");
}
/// The box of a 4-D tensor map at coordinates (c0 innermost .. c3) -> shared address `dst` (aligned as the map's
/// swizzle needs: 1024 bytes for 128-byte swizzle), completing on `bar`. `map`: a __grid_constant__ kernel parameter.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                            uint64_t* bar) {
  FUSEOPS_SM90_ASM(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], "
      "[%6];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
}

/// The box of a 4-D tensor map at coordinates (c0 innermost .. c3) <- shared address `src` (laid out as the map's
/// swizzle says; elements past a dimension's end are not written), in this thread's current bulk group. The bytes
/// must have been fenced (fence_proxy_async_shared) after they were written and before a barrier that precedes this
/// call. `map`: a __grid_constant__ kernel parameter.
__device__ __forceinline__ void tma_store_4d(const CUtensorMap* map, int c0, int c1, int c2, int c3, uint32_t src) {
  FUSEOPS_SM90_ASM("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%1, %2, %3, %4}], [%5];" ::"l"(
                       reinterpret_cast<uint64_t>(map)),
                   "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(src)
                   : "memory");
}

/// The same for a 3-D tensor map.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, int c0, int c1, int c2,
                                            uint64_t* bar) {
  FUSEOPS_SM90_ASM(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
      : "memory");
}

/// Bulk load: `bytes` (a multiple of 16; both addresses 16-byte aligned) from global `src` to shared address `dst`,
/// completing on `bar` (whose phase expects them: mbar_arrive_expect). The destination's earlier generic accesses
/// must have been fenced (fence_proxy_async_shared) by the threads that made them, before a barrier that precedes
/// this call.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint64_t* bar) {
  FUSEOPS_SM90_ASM("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                   "l"(src), "r"(bytes), "r"(smem_addr(bar))
                   : "memory");
}

/// Bulk store: `bytes` (a multiple of 16; both addresses 16-byte aligned) from shared address `src` to global `dst`,
/// in this thread's current bulk group. The bytes must have been fenced (fence_proxy_async_shared) after they were
/// written and before a block barrier that precedes this call.
__device__ __forceinline__ void bulk_store(void* dst, uint32_t src, uint32_t bytes) {
  FUSEOPS_SM90_ASM("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(bytes)
                   : "memory");
}
/// Closes this thread's current bulk group.
__device__ __forceinline__ void bulk_commit() { FUSEOPS_SM90_ASM("cp.async.bulk.commit_group;" ::: "memory"); }
/// Waits until every bulk group of this thread has finished reading its shared-memory source (the bytes may be
/// overwritten once a block barrier follows).
__device__ __forceinline__ void bulk_wait_read() {
  FUSEOPS_SM90_ASM("cp.async.bulk.wait_group.read 0;" ::: "memory");
}
/// Waits until every bulk group of this thread is complete (its writes done).
__device__ __forceinline__ void bulk_wait() { FUSEOPS_SM90_ASM("cp.async.bulk.wait_group 0;" ::: "memory"); }

#undef FUSEOPS_SM90_ASM

}  // namespace fuseops::detail::cuda
