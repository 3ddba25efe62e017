// Internal interface between the GDN forward ops (validation and the prefill pipeline, ops/gdn_forward.cpp) and
// their backends. Geometry, strided views and chunk lookup are those of the intra-chunk ops (ops/gdn_impl.h,
// common/gdn_chunks.h). All strides are in elements.
#pragma once

#include <cstdint>

#include "ops/gdn_impl.h"

namespace fuseops::detail {

/// A per-chunk state tensor h [B, NS, HV, K, V] (contiguous): slot s of batch row b, value head hv.
struct GdnStates {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t slots = 0;  ///< NS
};

/// l2 normalisation of rows: y = x / sqrt(sum x^2 + 1e-6), in f32, rounded to y's dtype. x, y: [B, T, H, K]. An
/// optional second pair x2 -> y2 (x2.data non-null) of the same shape (the forward's q and k) is normalised in the same
/// launch, its rows after the first pair's (on CUDA, where both pairs can take the same kernel form; else one launch
/// each).
struct L2NormArgs {
  GdnGeometry geo;  ///< B, T, H, K
  GdnIn x, x2;
  GdnOut y, y2;  ///< contiguous
};

struct WuArgs {
  GdnGeometry geo;  ///< BT = A.shape[3]
  int64_t V = 0;
  GdnIn k, v, beta, A, g;  ///< g optional
  GdnOut w, u;             ///< contiguous
  /// The intra-first form (chunk_gated_delta_rule_fwd_intra only): flags [HV][ready_stride] zeroed by the launch and
  /// set per (chunk, value head) once its w and u are stored, by a grid of `intra_blocks` blocks; nullptr otherwise.
  /// With the output-beside form, fwd_h's counters [HV][ready_stride] follow the flags and are zeroed with them.
  unsigned* ready = nullptr;
  int64_t ready_stride = 0;  ///< flags per value head (ready_flag_stride: fwd_h copies them 16 bytes at once)
  bool o_ready = false;      ///< the counters follow the flags
  int64_t intra_blocks = 0;
};

struct FwdHArgs {
  GdnGeometry geo;
  int64_t V = 0;
  GdnIn k, w, u, g;     ///< g optional
  const void* h0 = nullptr;  ///< [N, HV, K, V] contiguous, optional
  DType h0_dtype = DType::f32;
  GdnStates h;          ///< out
  GdnOut v_new;         ///< out, contiguous
  float* ht = nullptr;  ///< [N, HV, K, V] f32 contiguous, optional
  /// The intra-first form: the flags of WuArgs::ready (w and u are being produced by the intra kernel launched before;
  /// a chunk's copies wait for its flag) where chunk_gated_delta_rule_intra_first_blocks applies; nullptr otherwise.
  const unsigned* ready = nullptr;
  int64_t ready_stride = 0;  ///< flags per value head (a multiple of 4)
  /// The output-beside form (with `ready` only): counters [HV][ready_stride], zero at launch, to which each block adds
  /// 1 once its h and v_new rows of a chunk are stored (FwdOArgs::h_ready); nullptr otherwise.
  unsigned* o_ready = nullptr;
  /// The output stage fused into the recurrence (CUDA, chunk_gated_delta_rule_fwd_h_o only): q [B, T, H, K], o
  /// [B, T, HV, V] and scale as in FwdOArgs; unused by chunk_gated_delta_rule_fwd_h.
  GdnIn q;
  GdnOut o;
  float scale = 1.f;
};

struct FwdOArgs {
  GdnGeometry geo;
  int64_t V = 0;
  GdnIn q, k, v_new, g;  ///< g optional
  GdnStates h;
  GdnOut o;  ///< contiguous
  float scale = 1.f;
  /// The output-beside form (CUDA): fwd_h (FwdHArgs::o_ready) is still running; chunk slot c of value head hv is read
  /// once h_ready[hv * h_ready_stride + c] reaches h_ready_count. nullptr: fwd_h has completed.
  const unsigned* h_ready = nullptr;
  int64_t h_ready_stride = 0;
  unsigned h_ready_count = 0;
};

/// The decode recurrence: FLA form (h0 / ht) or pool form (pool_form).
struct DecodeArgs {
  GdnGeometry geo;
  int64_t V = 0;
  GdnIn q, k, v;
  GdnOut o;  ///< contiguous
  // gates: direct (g: optional [B, T, HV]; beta: optional [B, T, HV], or [B, T, HV, V] with beta_per_channel) or
  // fused sigmoid gating (a, b, A_log, dt_bias)
  bool fused_gating = false;
  GdnIn g, beta, a, b;
  /// beta [B, T, HV, V] (innermost stride 1): one beta per value column, v'[j] = beta[j] (v[j] - (S^T k)[j]), as FLA's
  /// fused_recurrent with IS_BETA_HEADWISE false
  bool beta_per_channel = false;
  GdnIn A_log, dt_bias;  ///< [HV] viewed with stride_h = stride; other strides 0
  float softplus_beta = 1.f, softplus_threshold = 20.f;
  float scale = 1.f;
  bool l2norm = false;
  // FLA form
  const void* h0 = nullptr;  ///< [N, HV, K, V] contiguous, optional
  DType h0_dtype = DType::f32;
  float* ht = nullptr;  ///< [N, HV, K, V] f32 contiguous, optional
  // pool form (pool_form; `pool` may be null when S = 0: then every index is padding or bad, nothing is read)
  bool pool_form = false;
  void* pool = nullptr;  ///< [S, HV, K, V], each slot's [HV, K, V] contiguous, slots pool_stride_s elements apart
  DType pool_dtype = DType::f32;
  int64_t pool_slots = 0;
  int64_t pool_stride_s = 0;  ///< elements from slot s to slot s + 1 (>= HV K V; vLLM's pools are padded pages)
  const void* indices = nullptr;  ///< [N] or [N, idx_cols], contiguous
  DType idx_dtype = DType::i32;
  int64_t idx_cols = 0;  ///< 0: [N]
  const void* num_accepted = nullptr;  ///< [N], optional
  DType acc_dtype = DType::i32;
  uint32_t idx_site = 0, acc_site = 0;
  uint32_t len_site = 0;  ///< cu_seqlens: a sequence longer than the idx_cols columns of [N, Tmax] indices
};

namespace cpu {
void l2norm_fwd(const L2NormArgs& a);
void recompute_w_u_fwd(const WuArgs& a);
void chunk_gated_delta_rule_fwd_h(const FwdHArgs& a);
void chunk_fwd_o(const FwdOArgs& a);
void fused_recurrent_gated_delta_rule(const DecodeArgs& a);
}  // namespace cpu

#if defined(FUSEOPS_WITH_CUDA)
namespace cuda {
void l2norm_fwd(const L2NormArgs& a, int device, void* stream);
/// The forward's prologue in one launch (gdn_recompute.cu): l2norm_fwd of the pair q, k (a.x2 set) and
/// chunk_local_cumsum of `ca`, with the values of the two ops. Returns false (nothing launched) where the pair does not
/// take the vector form (one dtype, 16-byte rows of 8 / 16 / 32 / 64 vectors), the chunk size is not 16 / 32 / 64, or
/// FUSEOPS_GDN_L2NORM_CUMSUM=0 or the testing switch below turned it off. Throws invalid_argument (naming
/// chunk_gated_delta_rule and g) where the cumsum's unit count does not fit in int64 (not reachable for a workspace
/// that fits in memory).
bool l2norm_cumsum_fwd(const L2NormArgs& la, const CumsumArgs& ca, int device, void* stream);
/// Tests only: `off` true makes the forward's launches that follow run l2norm_fwd and chunk_local_cumsum as two
/// kernels (as FUSEOPS_GDN_L2NORM_CUMSUM=0 does; same bytes).
void set_l2norm_cumsum_off_for_testing(bool off);
/// Tests only: how many launches of this process took the one-launch prologue.
int64_t l2norm_cumsum_launches_for_testing();
void recompute_w_u_fwd(const WuArgs& a, int device, void* stream);
/// kkt + solve_tril + recompute_w_u of the forward in one kernel (gdn_intra_fwd.cu): w and u of `a` (its A unused)
/// from k, v, g, beta; the same bytes as chunk_gated_delta_rule_fwd_kkt_solve (Ai in the input dtype) followed by
/// recompute_w_u_fwd. Returns false (nothing launched) unless k, v, w, u are of one 16-bit dtype.
bool chunk_gated_delta_rule_fwd_intra(const KktArgs& ka, const WuArgs& a, int device, void* stream);
/// Tests only: `off` true makes the intra kernel's launches that follow store w and u from the mma fragments, as
/// FUSEOPS_GDN_INTRA_BULK=0 does (instead of bulk copies of staged rows; same bytes).
void set_intra_bulk_off_for_testing(bool off);
/// Tests only: how many launches of the intra kernel in this process stored w and u by bulk copies.
int64_t intra_bulk_launches_for_testing();
/// Tests only: which kernel the forward's intra launches that follow take where its warp-per-unit form
/// (gdn_intra_fwd_warp.cu) can run: the launch rule (the warp kernel on grids of more than four units per SM, unless
/// FUSEOPS_GDN_INTRA_WARP=0; `=always`: every grid), `always` (every grid, also against the switch) or `never` (the
/// block kernel, also against the switch). Same bytes in every mode.
void set_intra_warp_for_testing(KktWarpForTesting mode);
/// Tests only: how many launches of this process took the warp-per-unit form of the intra kernel.
int64_t intra_warp_launches_for_testing();
/// Block shape of the warp-per-unit intra kernel (one unit per warp where units <= 12 per SM): `warps` per block and
/// the dynamic shared memory `smem` in bytes that holds an SM to the blocks the even spread needs.
struct IntraWarpGrid {
  int warps;
  std::size_t smem;
};
/// Tests only: the block shape the launch takes for `units` units on `sms` SMs of `sm_smem` bytes of shared memory
/// each, `reserved` of them taken per block (cudaDevAttrMaxSharedMemoryPerMultiprocessor,
/// cudaDevAttrReservedSharedMemoryPerBlock).
IntraWarpGrid intra_warp_grid_for_testing(int64_t units, int64_t sms, std::size_t sm_smem, std::size_t reserved);
/// The intra-first form of the forward: the intra kernel (a persistent grid walking (chunk, value head) items chunk
/// by chunk, setting WuArgs::ready flags) launched first, fwd_h right after it as its programmatic dependent, polling
/// the flags before a chunk's copies, so that the recurrence starts while later chunks are still being prepared. Never
/// a deadlock: the intra kernel waits for nothing fwd_h does, and fwd_h launches only once every intra block has
/// started (or, without programmatic launches, once the intra kernel is done). Returns the intra kernel's blocks (the
/// SMs fwd_h leaves free: its blocks take a whole SM each), 0 where the form does not apply. It applies to fwd_h's
/// variant of few heads: B = 1 without cu_seqlens, T >= 64 chunks, K = V = 128, BT = 64, 16-bit, sm_90a, programmatic
/// launches on, enough free SMs; FUSEOPS_GDN_INTRA_FIRST=0 turns it off.
int64_t chunk_gated_delta_rule_intra_first_blocks(const FwdHArgs& a, int device);
/// Returns the value each chunk's counter of a.o_ready reaches (fwd_h's blocks per value head) where the launch counts
/// them (the intra-first variant with o_ready set), else 0: only then may chunk_fwd_o be given the counters
/// (FwdOArgs::h_ready, h_ready_count).
unsigned chunk_gated_delta_rule_fwd_h(const FwdHArgs& a, int device, void* stream);
/// chunk_gated_delta_rule_fwd_h and chunk_fwd_o in one kernel (at 64 columns the warp-specialised kernel of
/// gdn_fwd_h_ws.cu, at 32 the fused-output variant of fwd_h in gdn_fwd_h.cu; both give the same bytes): o
/// from q, k, g, scale of `a` and each chunk's state and v_new while they are in the block, so h and v_new are never
/// written (a.h, a.v_new unused); ht as fwd_h. o gets the bytes that chunk_fwd_o's wgmma kernel (V a multiple of 128,
/// its switch on) gives from fwd_h's h and v_new; with V = 64 / 192 the staged path's mma.sync kernel sums in another
/// order. Applies where fwd_h takes its wgmma variant of 64 columns (K = 128, BT = 64, 16-bit, sm_90a, tensor maps,
/// N HV V / 64 >= 128 blocks) with V a multiple of 64, or of 32 columns (N HV V / 64 < 128 <= N HV V / 32 <= the SM
/// count: one block per SM) with V a multiple of 32; q 16-byte rows and o in q's dtype with pair stores;
/// FUSEOPS_GDN_FWD_HO=0 turns it off. Returns false (nothing launched) where it does not apply.
bool chunk_gated_delta_rule_fwd_h_o(const FwdHArgs& a, int device, void* stream);
/// Tests only: `off` true turns the fused-output form off for the launches that follow, as FUSEOPS_GDN_FWD_HO=0 does.
void set_fwd_h_o_off_for_testing(bool off);
/// Tests only: how many launches of this process took the fused-output form.
int64_t fwd_h_o_launches_for_testing();
/// Tests only: `off` true makes the fused-output form of 64-column blocks take the fwd_h_mma kernel's variant instead
/// of the warp-specialised kernel (gdn_fwd_h_ws.cu), as FUSEOPS_GDN_FWD_HO_WS=0 does; false returns to the switch.
void set_fwd_h_o_ws_off_for_testing(bool off);
/// Tests only: launches of the warp-specialised kernel in this process.
int64_t fwd_h_o_ws_launches_for_testing();
/// Tests only: `off` true makes the launches that follow take cp.async for the w and k tiles as
/// FUSEOPS_GDN_FWD_H_TMA=0 does (that switch is read once per process); false returns to the switch's setting.
/// Launches already issued are unaffected (the choice is made on the host at launch).
void set_fwd_h_tma_off_for_testing(bool off);
/// Tests only: `off` true makes the launches that follow take the mma.sync kernel where the wgmma variant would run, as
/// FUSEOPS_GDN_FWD_H_WGMMA=0 does (read once per process); false returns to the switch's setting.
void set_fwd_h_wgmma_off_for_testing(bool off);
/// Tests only: `off` true turns the intra-first form off for the launches that follow, as FUSEOPS_GDN_INTRA_FIRST=0
/// does; false returns to the switch's setting.
void set_intra_first_off_for_testing(bool off);
/// Tests only: how many fwd_h launches of this process took the intra-first form.
int64_t intra_first_launches_for_testing();
/// a.h_ready (the output-beside form) is read by the wgmma kernel only; the other kernels wait for fwd_h's grid.
void chunk_fwd_o(const FwdOArgs& a, int device, void* stream);
/// Whether the forward of fwd_h's arguments `a` and chunk_fwd_o's q, in the intra-first form, takes the output-beside
/// form (FwdHArgs::o_ready, FwdOArgs::h_ready): chunk_fwd_o's wgmma kernel launched while fwd_h still runs, reading
/// each chunk once fwd_h has stored it (gdn_fwd_o_wgmma.cu). q in 16-byte rows of k's dtype, a.h 16-byte aligned, the
/// wgmma kernel switched on; FUSEOPS_GDN_FWD_O_BESIDE=0 or the testing switch below turns it off.
bool fwd_o_beside_applies(const FwdHArgs& a, const GdnIn& q);
/// Tests only: `off` true turns the output-beside form off for the forwards that follow (same bytes).
void set_fwd_o_beside_off_for_testing(bool off);
/// Tests only: how many chunk_fwd_o launches of this process took the output-beside form.
int64_t fwd_o_beside_launches_for_testing();
void fused_recurrent_gated_delta_rule(const DecodeArgs& a, int device, void* stream);
/// Tests only: the decode launches that follow at K = 128 take lanes of `rows` state rows (8 or 16) in 2-warp blocks;
/// 0 returns to the launch rule (gdn_decode.cu). The results must not change: every sum runs in one fixed tree.
void set_decode_rows_for_testing(int rows);
/// Tests only: `off` true makes the decode launches that follow skip the L2 prefetch of the state two units ahead, as
/// FUSEOPS_GDN_DECODE_L2_PREFETCH=0 does; false returns to the switch's setting. A hint: results must not change.
void set_decode_l2_prefetch_off_for_testing(bool off);
}  // namespace cuda
#endif

}  // namespace fuseops::detail
