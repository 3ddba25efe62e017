// Chunk geometry shared by the CPU and CUDA backends of the GDN ops: sequence bounds from cu_seqlens (robust to
// malformed values) and the map from a chunk slot to (sequence, chunk).
#pragma once

#include <cstdint>

#include "common/hd.h"
#include "ops/gdn_impl.h"

namespace fuseops::detail {

FUSEOPS_HD int64_t load_cu(const GdnGeometry& g, int64_t i) {
  return g.cu_dtype == DType::i32 ? static_cast<const int32_t*>(g.cu_seqlens)[i]
                                  : static_cast<const int64_t*>(g.cu_seqlens)[i];
}

/// Token range [bos, eos) of sequence n, within [0, T] and never decreasing. `bad` is set when cu_seqlens is
/// malformed at n (cu[0] != 0, cu[N] != T (cu[N] > T where g.cu_tail), a decreasing pair, or a value outside [0, T]).
struct SeqBounds {
  int64_t batch, bos, eos;
  bool bad;
};
FUSEOPS_HD SeqBounds sequence_bounds(const GdnGeometry& g, int64_t n) {
  if (!g.cu_seqlens) return SeqBounds{n, 0, g.T, false};
  const int64_t a = load_cu(g, n), b = load_cu(g, n + 1);
  const bool bad =
      a < 0 || a > g.T || b < a || b > g.T || (n == 0 && a != 0) || (n + 1 == g.N && b != g.T && !g.cu_tail);
  const int64_t bos = a < 0 ? 0 : (a > g.T ? g.T : a);
  const int64_t eos = b < bos ? bos : (b > g.T ? g.T : b);
  return SeqBounds{0, bos, eos, bad};
}

/// ceil(len / bt) for len >= 0, bt >= 1, without the signed overflow of (len + bt - 1) / bt near INT64_MAX.
FUSEOPS_HD int64_t chunks_of(int64_t len, int64_t bt) { return len / bt + (len % bt != 0 ? 1 : 0); }

/// The ready flags of the forward's intra-first form (WuArgs::ready, FwdHArgs::ready): one 4-byte word per (value
/// head, chunk), set by the intra kernel once the chunk's w and u rows are stored and polled by fwd_h; each value head
/// has ready_flag_stride words, a multiple of 4, so that fwd_h may read them four at a time. Fixed length: B ceil4(NT)
/// (the intra-first form has B = 1). Varlen: 4 (N + NT) (no form takes the flags with cu_seqlens).
FUSEOPS_HD int64_t ready_flag_stride(const GdnGeometry& g) {
  return g.cu_seqlens ? 4 * (g.N + chunks_of(g.T, g.BT)) : g.B * ((chunks_of(g.T, g.BT) + 3) / 4 * 4);
}

}  // namespace fuseops::detail
