// Warp-level tensor-core and asynchronous-copy primitives shared by the CUDA kernels: cp.async 16-byte copies,
// ldmatrix fragment loads (plain and transposed), the m16n8k16 f16 / bf16 mma with fp32 accumulators, and the
// m16n8k8 tf32 mma with its error-compensated (split hi / lo, "3xTF32") form.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "vec.cuh"

namespace fuseops::detail::cuda {

/// 16-byte asynchronous copy global -> shared; `fill` false writes 16 zero bytes and reads nothing. `dst`: a shared
/// memory address (as from __cvta_generic_to_shared, for addresses computed once and reused), or a generic pointer.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool fill) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(fill ? 16 : 0) : "memory");
}
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, bool fill) {
  cp_async_16(static_cast<uint32_t>(__cvta_generic_to_shared(dst)), src, fill);
}
/// BYTES (4, 8, 16, or a multiple of 16 as several 16-byte copies) asynchronous copy global -> shared, cached in L1
/// (cp.async.ca: data many blocks of an SM read, such as a norm's weight). Both addresses aligned to min(BYTES, 16).
template <int BYTES>
__device__ __forceinline__ void cp_async_ca(void* dst, const void* src) {
  static_assert(BYTES == 4 || BYTES == 8 || BYTES % 16 == 0, "cp.async copies 4, 8 or 16 bytes");
  constexpr int kPiece = BYTES < 16 ? BYTES : 16;
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
#pragma unroll
  for (int o = 0; o < BYTES; o += kPiece) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(d + o), "l"(static_cast<const char*>(src) + o),
                 "n"(kPiece)
                 : "memory");
  }
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

/// A 4-byte flag another block sets (ld.relaxed.gpu: read from L2, not from this SM's L1).
__device__ __forceinline__ unsigned ld_relaxed_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
/// A 4-byte counter other blocks raise (ld.acquire.gpu: the writes released before the value read are visible after).
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
/// Sets a flag other blocks poll (after a __threadfence() that orders this thread's earlier writes before it).
__device__ __forceinline__ void st_relaxed_gpu(unsigned* p, unsigned v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/// Waits until at most N of this thread's committed cp.async groups are still in flight.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/// d += A B for one 16 x 16 (row-major) by 16 x 8 (column-major) tile of f16 / bf16, fp32 accumulators.
template <typename TK>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<TK, __nv_bfloat16>) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// Four (x4) or two (x2) 8 x 8 16-bit matrices from shared memory into mma fragments: lane l gives the address of
/// row l % 8 of matrix l / 8; register m of every lane receives its fragment of matrix m.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x2(uint32_t& r0, uint32_t& r1, const void* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(a));
}
/// Transposed forms: each 8 x 8 matrix arrives transposed (for a B operand stored row-major, i.e. [k][n]).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t& r0, uint32_t& r1, const void* row) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(a));
}

/// Finite x rounded to tf32 (11 significant bits, to nearest, ties away from zero: what cvt.rna.tf32.f32 gives) as
/// the fp32 bit pattern (low 13 bits zero) that an mma .tf32 operand register holds. Two integer instructions (half an
/// ulp added to the magnitude, carrying into the exponent, then truncated); cvt.rna compiles to more on sm_90 (the
/// tensor-core inverse was ~240 instructions longer with it). Non-finite x is not supported (inf becomes NaN).
__device__ __forceinline__ uint32_t to_tf32(float x) { return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }

/// Error-compensated split of an fp32 value into two tf32 values: x = hi + lo + e with |e| <= 2^-22 |x|
/// (|x - hi| <= 2^-11 |x| is exact in fp32; lo is that difference rounded to tf32).
__device__ __forceinline__ void split_tf32(float x, uint32_t& hi, uint32_t& lo) {
  hi = to_tf32(x);
  lo = to_tf32(__fsub_rn(x, __uint_as_float(hi)));
}

/// d += A B for one 16 x 8 (row-major) by 8 x 8 (column-major) tile of tf32, fp32 accumulators. Fragments (g = lane
/// / 4, t = lane % 4): a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); b0 (k = t, n = g), b1 (k = t + 4,
/// n = g); d0 d1 (g, 2t, 2t + 1), d2 d3 (g + 8, 2t, 2t + 1).
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// d += A B with both operands given as split_tf32 pairs ("3xTF32"): the small cross terms first, then hi x hi; the
/// dropped lo x lo term and the two splits err by <= 3 * 2^-22 |a| |b| per product.
__device__ __forceinline__ void mma_m16n8k8_split(float (&d)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                                  uint32_t b0_hi, uint32_t b1_hi, uint32_t b0_lo, uint32_t b1_lo) {
  mma_m16n8k8_tf32(d, a_lo, b0_hi, b1_hi);
  mma_m16n8k8_tf32(d, a_hi, b0_lo, b1_lo);
  mma_m16n8k8_tf32(d, a_hi, b0_hi, b1_hi);
}

}  // namespace fuseops::detail::cuda
