// Helpers shared by the CPU backends of the GDN ops (cpu/gdn.cpp, cpu/gdn_forward.cpp): strided offsets and the
// walk over sequences and chunks (element access: cpu/row_access.h).
#pragma once

#include <algorithm>
#include <cstdint>

#include "common/gdn_chunks.h"
#include "cpu/row_access.h"
#include "cuda/device_error.h"
#include "fuseops/error.h"
#include "ops/gdn_impl.h"

namespace fuseops::detail::cpu {

/// Element offset of (b, t, h) in a strided [B, T, heads(, inner)] tensor.
inline int64_t offset(const GdnIn& x, int64_t b, int64_t t, int64_t h) {
  return b * x.stride_b + t * x.stride_t + h * x.stride_h;
}
inline int64_t offset(const GdnOut& x, int64_t b, int64_t t, int64_t h) {
  return b * x.stride_b + t * x.stride_t + h * x.stride_h;
}

/// Calls fn(n, bounds) for every sequence n in order. A malformed sequence of cu_seqlens is recorded in the CPU error
/// record (index = the sequence) and runs on its bounds as sequence_bounds() clamps them into [0, T]
/// (common/gdn_chunks.h), as on CUDA: nothing outside the tensors is touched and rows outside every sequence's
/// clamped range are not written. In debug mode (FUSEOPS_DEBUG=1) a recorded error is raised.
template <typename Fn>
void for_each_sequence(const GdnGeometry& geo, Fn fn) {
  bool bad = false;
  for (int64_t n = 0; n < geo.N; ++n) {
    const SeqBounds s = sequence_bounds(geo, n);
    if (s.bad) {
      record_host_error(geo.cu_site, n);
      bad = true;
    }
    fn(n, s);
  }
  raise_recorded_in_debug(bad);
}

/// Calls fn(batch, first token, valid rows) for every chunk of every sequence, in order (see for_each_sequence).
template <typename Fn>
void for_each_chunk(const GdnGeometry& geo, Fn fn) {
  for_each_sequence(geo, [&](int64_t, const SeqBounds& s) {
    for (int64_t t0 = s.bos; t0 < s.eos; t0 += geo.BT) fn(s.batch, t0, std::min(geo.BT, s.eos - t0));
  });
}

}  // namespace fuseops::detail::cpu
