// Shared by the CPU and CUDA backends of the GDN forward ops: the per-chunk state slot of a chunk, the decode gates
// and the pool-form slot lookup (robust to bad device-resident values).
#pragma once

#include <cmath>
#include <cstdint>

#include "common/gdn_chunks.h"
#include "ops/gdn_forward_impl.h"

namespace fuseops::detail {

/// Slot in h of the chunk starting at token t0 of sequence n (first token bos): see gdn_chunk_slots(). Fixed length:
/// the chunk index (t0 - bos) / BT. Varlen: n for chunk 0, else N + (t0 - 1) / BT (the one multiple of BT in the
/// previous chunk, which no other chunk >= 1 shares).
FUSEOPS_HD int64_t chunk_slot(const GdnGeometry& g, int64_t n, int64_t bos, int64_t t0) {
  if (!g.cu_seqlens) return (t0 - bos) / g.BT;
  return t0 == bos ? n : g.N + (t0 - 1) / g.BT;
}

/// Element offset of state (b, slot, hv) in h [B, NS, HV, K, V].
FUSEOPS_HD int64_t state_offset(const GdnStates& h, int64_t b, int64_t slot, int64_t hv, int64_t HV, int64_t KV) {
  return ((b * h.slots + slot) * HV + hv) * KV;
}

/// Index entry i of an i32 / i64 device-resident array.
FUSEOPS_HD int64_t load_index(const void* p, DType dtype, int64_t i) {
  return dtype == DType::i32 ? static_cast<const int32_t*>(p)[i] : static_cast<const int64_t*>(p)[i];
}

/// Element offset of value head hv's [K, V] state (KV = K V elements) in pool slot `slot` (pool form). KV is the
/// caller's own product: recomputing it here cost the fast decode kernels a spill (sm_90a, -Xptxas -v).
FUSEOPS_HD int64_t pool_offset(const DecodeArgs& a, int64_t slot, int64_t hv, int64_t KV) {
  return slot * a.pool_stride_s + hv * KV;
}

/// A pool index is bad unless it is -1 (padding) or in [0, S).
FUSEOPS_HD bool bad_pool_index(const DecodeArgs& a, int64_t s) { return s < -1 || s >= a.pool_slots; }

/// The pool slots of sequence n (pool form). start: the slot read first (-1: padding, skip the sequence).
/// A bad value sets `bad_site` / `bad_index` (to be recorded) and makes the sequence padding.
struct PoolSeq {
  int64_t start;
  uint32_t bad_site;
  int64_t bad_index;
};
FUSEOPS_HD PoolSeq pool_sequence(const DecodeArgs& a, int64_t n, int64_t len) {
  int64_t col = 0;
  if (a.idx_cols > 0) {
    if (a.num_accepted) {
      const int64_t accepted = load_index(a.num_accepted, a.acc_dtype, n);  // in [1, idx_cols]; checked before
      if (accepted < 1 || accepted > a.idx_cols) return PoolSeq{-1, a.acc_site, n};  // the - 1 (INT64_MIN)
      col = accepted - 1;
    }
    if (len > a.idx_cols) return PoolSeq{-1, a.len_site, n};
  }
  const int64_t e = a.idx_cols > 0 ? n * a.idx_cols + col : n;
  const int64_t s = load_index(a.indices, a.idx_dtype, e);
  if (bad_pool_index(a, s)) return PoolSeq{-1, a.idx_site, e};
  return PoolSeq{s, 0u, 0};
}
/// Slot written after token t (0-based within the sequence) of sequence n, or -1 (none or padding); `bad` when the
/// entry is < -1 or >= S (a bad value: not written, recorded by the caller).
FUSEOPS_HD int64_t pool_write_slot(const DecodeArgs& a, int64_t n, int64_t t, int64_t len, bool* bad) {
  *bad = false;
  int64_t e;
  if (a.idx_cols > 0) {
    e = n * a.idx_cols + t;
  } else {
    if (t != len - 1) return -1;
    e = n;
  }
  const int64_t s = load_index(a.indices, a.idx_dtype, e);
  if (bad_pool_index(a, s)) {
    *bad = true;
    return -1;
  }
  return s;
}

/// softplus as vLLM's gating: log(1 + exp(beta x)) / beta, or x where beta x > threshold.
FUSEOPS_HD float softplus_gate(float x, float beta, float threshold) {
  const float bx = beta * x;
  return bx <= threshold ? log1pf(expf(bx)) / beta : x;
}
FUSEOPS_HD float sigmoid_gate(float x) { return 1.f / (1.f + expf(-x)); }

}  // namespace fuseops::detail
