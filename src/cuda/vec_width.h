// Host-side choice of the vector width of memory-bound kernels (cuda/vec.cuh loads and stores the vectors).
#pragma once

#include <cstdint>
#include <initializer_list>

#include "core/validate.h"

namespace fuseops::detail {

/// Whether `data` is aligned to `bytes` (a power of two).
inline bool aligned_to(const void* data, int64_t bytes) {
  return reinterpret_cast<std::uintptr_t>(data) % static_cast<std::uintptr_t>(bytes) == 0;
}

/// The widest vector (in elements, at most 16 bytes) that divides `cols`, every row stride (of matrices with more
/// than one row) and every base address.
inline int pick_vec(std::initializer_list<const RowMatrix*> ms, int64_t cols) {
  const int64_t esize = static_cast<int64_t>(dtype_size((*ms.begin())->dtype));
  for (int vec = static_cast<int>(16 / esize); vec > 1; vec /= 2) {
    bool ok = cols % vec == 0;
    for (const RowMatrix* m : ms) {
      ok = ok && (m->rows <= 1 || m->row_stride % vec == 0) && aligned_to(m->data, vec * esize);
    }
    if (ok) return vec;
  }
  return 1;
}

}  // namespace fuseops::detail
