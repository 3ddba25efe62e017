// Warpgroup tensor-core primitives of sm_90 (wgmma): the asynchronous m64nNk16 f16 / bf16 product with fp32
// accumulators, A from registers and B from shared memory through a matrix descriptor, its fences, and the
// transposed 8 x 8 matrix store (stmatrix) that writes accumulator fragments as a K-major operand tile. wgmma exists
// on sm_90a only: code for any other target traps, and the host launches the kernels that use them only where the
// code that runs is sm_90a.
//
// Layout used here (the canonical K-major layout with 128-byte swizzle): a B operand of N rows (n) by 64 columns
// (k, 16-bit) is N rows of 128 bytes, 16-byte group c of row n stored at group c ^ (n % 8), the tile 1024-byte
// aligned; 8-row groups are 1024 bytes apart (the descriptor's stride byte offset); a k-step of 16 columns starts
// 32 bytes further into the rows (the hardware applies the swizzle to the address bits, so the start address may
// point inside a 128-byte row). Operands wider than 64 columns are several such tiles ("boxes").
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "common/wgmma_desc.h"

namespace fuseops::detail::cuda {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FUSEOPS_WGMMA_ARCH 1
#else
#define FUSEOPS_WGMMA_ARCH 0
#endif

/// Orders this warpgroup's register accesses (accumulators, A fragments) before the wgmma that follow.
__device__ __forceinline__ void wgmma_fence() {
#if FUSEOPS_WGMMA_ARCH
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
/// Closes the group of wgmma issued so far by this warpgroup.
__device__ __forceinline__ void wgmma_commit() {
#if FUSEOPS_WGMMA_ARCH
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#else
  __trap();
#endif
}
/// Waits until at most N committed groups are pending; the accumulators of the others may then be read.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
#if FUSEOPS_WGMMA_ARCH
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#else
  __trap();
#endif
}
/// Keeps the compiler from moving accesses of the accumulator registers across a wgmma wait.
template <int R>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// The wgmma instructions, one per form (RS: A from registers, SS: A from shared memory) and shape, used by wgmma_rs
// and wgmma_ss below; T is the operand type suffix (".bf16.bf16" or ".f16.f16"), which FUSEOPS_WGMMA_TYPED picks from
// kBf16. Operands: the accumulators d[0 .. N / 2 - 1] in order, then those of the form.
#define FUSEOPS_WGMMA_D4 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
#define FUSEOPS_WGMMA_D8 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
#define FUSEOPS_WGMMA_D16 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
#define FUSEOPS_WGMMA_D32 "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define FUSEOPS_WGMMA_IN_RS "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d), "n"(kTransB)
#define FUSEOPS_WGMMA_IN_SS "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(kTransB), "n"(kTransA)
#define FUSEOPS_WGMMA_TYPED(WGMMA) \
  if constexpr (kBf16) { \
    WGMMA(".bf16.bf16"); \
  } else { \
    WGMMA(".f16.f16"); \
  }
#define FUSEOPS_WGMMA_RS_M64N8K16(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n8k16.f32" T " {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, %10;\n}\n" \
               : FUSEOPS_WGMMA_D4 \
               : FUSEOPS_WGMMA_IN_RS)

#define FUSEOPS_WGMMA_RS_M64N16K16(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n16k16.f32" T " {%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, %14;\n}\n" \
               : FUSEOPS_WGMMA_D8 \
               : FUSEOPS_WGMMA_IN_RS)

#define FUSEOPS_WGMMA_RS_M64N32K16(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n32k16.f32" T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n" \
               : FUSEOPS_WGMMA_D16 \
               : FUSEOPS_WGMMA_IN_RS)

#define FUSEOPS_WGMMA_RS_M64N64K16(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32" T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n" \
               : FUSEOPS_WGMMA_D32 \
               : FUSEOPS_WGMMA_IN_RS)

#define FUSEOPS_WGMMA_SS_M64N8K16(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n8k16.f32" T " {%0, %1, %2, %3}, %4, %5, p, 1, 1, %8, %7;\n}\n" \
               : FUSEOPS_WGMMA_D4 \
               : FUSEOPS_WGMMA_IN_SS)

#define FUSEOPS_WGMMA_SS_M64N16K16(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n16k16.f32" T " {%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, %12, %11;\n}\n" \
               : FUSEOPS_WGMMA_D8 \
               : FUSEOPS_WGMMA_IN_SS)

#define FUSEOPS_WGMMA_SS_M64N32K16(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n32k16.f32" T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, %20, %19;\n}\n" \
               : FUSEOPS_WGMMA_D16 \
               : FUSEOPS_WGMMA_IN_SS)

#define FUSEOPS_WGMMA_SS_M64N64K16(T) \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
               "wgmma.mma_async.sync.aligned.m64n64k16.f32" T " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %36, %35;\n}\n" \
               : FUSEOPS_WGMMA_D32 \
               : FUSEOPS_WGMMA_IN_SS)

/// d (+)= A B for the warpgroup: A 64 x 16 from registers (each warp w of the group its rows 16 w .. 16 w + 15, the
/// mma.sync m16n8k16 A fragment), B 16 x N from shared memory through `desc` (K-major), d 64 x N fp32 with the
/// m16n8 accumulator layout per warp and 8-column tile (d[4 j .. 4 j + 3] for columns 8 j ..). scale_d 0: d = A B.
/// TRANS_B: B is MN-major (wgmma_desc_sw128_mn). Asynchronous: d must not be touched until wgmma_commit() and wgmma_wait() (and a wgmma_fence() must precede the
/// first wgmma after d or a was written by other instructions).
template <typename TK, int N, bool TRANS_B = false>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc, int scale_d) {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64, "N in {8, 16, 32, 64}");
  constexpr bool kBf16 = std::is_same_v<TK, __nv_bfloat16>;
  constexpr int kTransB = TRANS_B ? 1 : 0;
#if FUSEOPS_WGMMA_ARCH
  if constexpr (N == 8) {
    FUSEOPS_WGMMA_TYPED(FUSEOPS_WGMMA_RS_M64N8K16)
  } else if constexpr (N == 16) {
    FUSEOPS_WGMMA_TYPED(FUSEOPS_WGMMA_RS_M64N16K16)
  } else if constexpr (N == 32) {
    FUSEOPS_WGMMA_TYPED(FUSEOPS_WGMMA_RS_M64N32K16)
  } else if constexpr (N == 64) {
    FUSEOPS_WGMMA_TYPED(FUSEOPS_WGMMA_RS_M64N64K16)
  }
#else
  (void)d;
  (void)a;
  (void)desc;
  (void)scale_d;
  (void)kBf16;
  (void)kTransB;
  __trap();
#endif
}

/// d (+)= A B for the warpgroup with both operands in shared memory (`desc_a` for A 64 x 16, `desc_b` for B 16 x N;
/// K-major, or M- / N-major with TRANS_A / TRANS_B and wgmma_desc_sw128_mn); otherwise as wgmma_rs.
template <typename TK, int N, bool TRANS_B = false, bool TRANS_A = false>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64, "N in {8, 16, 32, 64}");
  constexpr bool kBf16 = std::is_same_v<TK, __nv_bfloat16>;
  constexpr int kTransB = TRANS_B ? 1 : 0, kTransA = TRANS_A ? 1 : 0;
#if FUSEOPS_WGMMA_ARCH
  if constexpr (N == 8) {
    FUSEOPS_WGMMA_TYPED(FUSEOPS_WGMMA_SS_M64N8K16)
  } else if constexpr (N == 16) {
    FUSEOPS_WGMMA_TYPED(FUSEOPS_WGMMA_SS_M64N16K16)
  } else if constexpr (N == 32) {
    FUSEOPS_WGMMA_TYPED(FUSEOPS_WGMMA_SS_M64N32K16)
  } else if constexpr (N == 64) {
    FUSEOPS_WGMMA_TYPED(FUSEOPS_WGMMA_SS_M64N64K16)
  }
#else
  (void)d;
  (void)desc_a;
  (void)desc_b;
  (void)scale_d;
  (void)kBf16;
  (void)kTransB;
  (void)kTransA;
  __trap();
#endif
}

/// Four 8 x 8 16-bit matrices from mma fragments (register m of every lane: its fragment of matrix m) stored to
/// shared memory: lane l gives the shared address of row l % 8 of matrix l / 8. TRANS: that row receives column l % 8
/// of the fragment matrix (stored transposed); otherwise its row l % 8.
template <bool TRANS>
__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
#if FUSEOPS_WGMMA_ARCH
  if constexpr (TRANS) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0),
                 "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
  } else {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(r0), "r"(r1),
                 "r"(r2), "r"(r3)
                 : "memory");
  }
#else
  (void)addr;
  (void)r0;
  (void)r1;
  (void)r2;
  (void)r3;
  __trap();
#endif
}
/// Two matrices (x2), transposed: lanes 0-15 give the row addresses.
__device__ __forceinline__ void stmatrix_x2_trans(uint32_t addr, uint32_t r0, uint32_t r1) {
#if FUSEOPS_WGMMA_ARCH
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n" ::"r"(addr), "r"(r0), "r"(r1)
               : "memory");
#else
  (void)addr;
  (void)r0;
  (void)r1;
  __trap();
#endif
}

#undef FUSEOPS_WGMMA_ARCH
#undef FUSEOPS_WGMMA_D4
#undef FUSEOPS_WGMMA_D8
#undef FUSEOPS_WGMMA_D16
#undef FUSEOPS_WGMMA_D32
#undef FUSEOPS_WGMMA_IN_RS
#undef FUSEOPS_WGMMA_IN_SS
#undef FUSEOPS_WGMMA_TYPED
#undef FUSEOPS_WGMMA_RS_M64N8K16
#undef FUSEOPS_WGMMA_RS_M64N16K16
#undef FUSEOPS_WGMMA_RS_M64N32K16
#undef FUSEOPS_WGMMA_RS_M64N64K16
#undef FUSEOPS_WGMMA_SS_M64N8K16
#undef FUSEOPS_WGMMA_SS_M64N16K16
#undef FUSEOPS_WGMMA_SS_M64N32K16
#undef FUSEOPS_WGMMA_SS_M64N64K16

}  // namespace fuseops::detail::cuda
