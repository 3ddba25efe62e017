// A minimal parallel loop for host-side golden and comparison work on large tensors.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

namespace fuseops::testing {

/// Calls fn(chunk, begin, end) for the chunks [k*chunk_size, min(n, (k+1)*chunk_size)) of [0, n), on up to
/// hardware_concurrency threads. Chunks are fixed by chunk_size, so results that depend on the chunk are the
/// same for any thread count. The first exception fn throws (std::bad_alloc of a large golden, an Error) is rethrown
/// here once every thread has stopped (it escaped its thread: std::terminate); a thread that cannot be started (a
/// memory limit) leaves its stripe of chunks to the calling thread.
template <typename Fn>
void parallel_chunks(int64_t n, int64_t chunk_size, Fn fn) {
  if (n <= 0) return;
  const int64_t chunks = (n + chunk_size - 1) / chunk_size;
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(chunks, std::thread::hardware_concurrency()));
  if (threads == 1) {
    for (int64_t k = 0; k < chunks; ++k) fn(k, k * chunk_size, std::min(n, (k + 1) * chunk_size));
    return;
  }
  std::mutex failed_mutex;
  std::exception_ptr failed;
  auto stripe = [=, &fn, &failed, &failed_mutex](int64_t t) {
    try {
      for (int64_t k = t; k < chunks; k += threads) fn(k, k * chunk_size, std::min(n, (k + 1) * chunk_size));
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failed_mutex);
      if (!failed) failed = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(threads));
  int64_t started = 0;
  try {
    for (; started < threads; ++started) pool.emplace_back(stripe, started);
  } catch (const std::system_error&) {  // no more threads: the remaining stripes run here
  }
  for (int64_t t = started; t < threads; ++t) stripe(t);
  for (auto& th : pool) th.join();
  if (failed) std::rethrow_exception(failed);
}

}  // namespace fuseops::testing
