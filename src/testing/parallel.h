// A minimal parallel loop for host-side golden and comparison work on large tensors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace fuseops::testing {

/// Calls fn(chunk, begin, end) for the chunks [k*chunk_size, min(n, (k+1)*chunk_size)) of [0, n), on up to
/// hardware_concurrency threads. Chunks are fixed by chunk_size, so results that depend on the chunk are the
/// same for any thread count.
template <typename Fn>
void parallel_chunks(int64_t n, int64_t chunk_size, Fn fn) {
  if (n <= 0) return;
  const int64_t chunks = (n + chunk_size - 1) / chunk_size;
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(chunks, std::thread::hardware_concurrency()));
  if (threads == 1) {
    for (int64_t k = 0; k < chunks; ++k) fn(k, k * chunk_size, std::min(n, (k + 1) * chunk_size));
    return;
  }
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([=, &fn] {
      for (int64_t k = t; k < chunks; k += threads) fn(k, k * chunk_size, std::min(n, (k + 1) * chunk_size));
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace fuseops::testing
