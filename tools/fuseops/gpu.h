// GPU side of the command line: timing by CUDA-graph replay (README, The command line), the copy-rate and
// empty-kernel yardsticks, device buffers with random contents, and the baseline kernels the benchmark compares
// with. Every function throws fuseops::Error on a CUDA failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "fuseops/tensor.h"

namespace fuseops::cli::gpu {

struct DeviceInfo {
  std::string name;
  int sms = 0;
  std::size_t l2_bytes = 0;
  std::size_t free_bytes = 0;
};
DeviceInfo device_info(int device);

/// A device allocation freed on destruction.
class Buffer {
 public:
  Buffer() = default;
  explicit Buffer(std::size_t bytes);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* get() const { return ptr_; }
  std::size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

/// Copies `bytes` host bytes to device memory (synchronous).
void copy_to_device(void* dst, const void* src, std::size_t bytes);

/// Fills `count` elements of a float dtype with N(0, scale)-like random values from `seed` (never zeros).
void fill_random(void* data, DType dtype, int64_t count, uint64_t seed, float scale = 1.0f);

/// Median time per launch of `launch(i)` for i = 0 .. launches-1, captured in one CUDA graph and replayed
/// (after a warm-up replay) until `min_seconds` or `max_replays`; microseconds.
double time_graph_us(const std::function<void(int, void*)>& launch, int launches, double min_seconds = 0.2,
                     int max_replays = 50);

/// Device-to-device copy rate of a 1 GiB cudaMemcpyAsync, bytes read + written per second (TB/s).
double copy_rate_tbps();
/// Time of an empty kernel under the same graph timing, microseconds.
double empty_kernel_us();

/// Baselines: the gated activation as two kernels (activation rounded to the storage dtype, then the product),
/// as PyTorch eager computes `act(gate) * up`; and the backward as two kernels (dup, then dgate).
/// act: 0 silu, 1 gelu, 2 gelu_tanh. Matrices are [rows, d] with row strides in elements.
void unfused_act_and_mul(int act, DType dtype, void* out, const void* gate, const void* up, void* tmp, int64_t rows,
                         int64_t d, int64_t out_stride, int64_t gate_stride, int64_t up_stride, void* stream);
void unfused_act_and_mul_backward(int act, DType dtype, void* dgate, void* dup, const void* dout, const void* gate,
                                  const void* up, int64_t rows, int64_t d, void* stream);

/// One head set of the rope baseline: element (t, head, i) at data[t * token_stride + head * head_stride + i].
struct RopeHeadsView {
  void* data = nullptr;
  int64_t heads = 0, token_stride = 0, head_stride = 0;
};

/// Rope baseline, the unfused form (HF eager / vLLM's M-RoPE path): a gather kernel writes cos / sin of every token
/// and pair into `tmp` (f32 [T, rotary_dim]; positions i64 [axes, T], pair j uses axis axis_map[j] when axes = 3),
/// then one kernel per head set rotates in place, one thread per pair, reading the gathered angles.
void unfused_rope(DType dtype, const RopeHeadsView& q, const RopeHeadsView& k, int64_t tokens, int64_t rotary_dim,
                  bool is_neox, DType cache_dtype, const void* cos, const void* sin, int64_t cache_stride,
                  const int64_t* positions, int axes, const unsigned char* axis_map, void* tmp, void* stream);

}  // namespace fuseops::cli::gpu
