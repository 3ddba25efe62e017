// Large grids on the CUDA backend: more rows than a grid dimension holds (65535), more rows than the capped grid
// covers in one pass (so the grid-stride loop runs), and tensors of more than 2^31 elements (64-bit offsets).
#include <algorithm>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "test_util.h"

#if defined(FUSEOPS_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace fuseops_test {
namespace {

TEST(ActivationLargeGrid, RowsBeyondGridLimits) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng = test_rng();
  for (const OpCase& op : all_ops()) {
    check_op(op, Where::cuda, DType::bf16, {70000}, 8, Layout::contiguous, ft::Fill::normal, rng);
    check_op(op, Where::cuda, DType::f16, {70000}, 3, Layout::misaligned, ft::Fill::adversarial, rng);
    // 2^20 + 7 rows of one element: 8 rows per block, so the row grid (capped at 65535) loops.
    check_op(op, Where::cuda, DType::f32, {(1 << 20) + 7}, 1, Layout::contiguous, ft::Fill::wide, rng);
    if (HasFailure()) return;
  }
}

#if defined(FUSEOPS_WITH_CUDA)
/// Row r of `dst` ([rows, cols] contiguous) equals pattern row r % pattern.rows().
void fill_rows_by_repetition(void* dst, int64_t rows, const HostTensor& pattern) {
  const size_t row_bytes = pattern.cols() * fuseops::dtype_size(pattern.dtype());
  fill_by_repetition(dst, rows * row_bytes, pattern.data(), pattern.rows() * row_bytes);
}
#endif

// bf16 tensors of (2^17 + 3) x 2^14 > 2^31 elements (4.3 GB each; the fused input 8.6 GB). Inputs repeat 7
// random rows; sampled output rows (first, last, around element 2^31) are compared with the golden.
TEST(ActivationLargeGrid, MoreThan2Pow31Elements) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
#if defined(FUSEOPS_WITH_CUDA)
  const int64_t rows = (int64_t{1} << 17) + 3, d = int64_t{1} << 14, pattern_rows = 7;
  const DType dtype = DType::bf16;
  std::mt19937_64 rng = test_rng();
  for (const char* name : {"silu_and_mul", "gelu_and_mul_split_tanh", "silu_and_mul_backward"}) {
    const OpCase& op = *std::find_if(all_ops().begin(), all_ops().end(), [&](const OpCase& o) { return o.name == name; });
    SCOPED_TRACE(op.name + ", FUSEOPS_SEED=" + std::to_string(run_seed()));
    const int nout = num_outputs(op.form), nargs = num_args(op.form);
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    std::vector<HostTensor> patterns;
    std::vector<TensorView> views;
    for (int i = 0; i < nargs; ++i) {
      const int64_t cols = op.form == Form::fused && i == 1 ? 2 * d : d;
      const size_t bytes = rows * cols * fuseops::dtype_size(dtype);
      bufs.push_back(std::make_unique<DeviceBuffer>(bytes));
      if (bufs.back()->status != cudaSuccess) {
        GTEST_SKIP() << "cudaMalloc of " << bytes / 1e9 << " GB failed: " << cudaGetErrorString(bufs.back()->status);
      }
      if (i < nout) {
        ASSERT_EQ(cudaMemset(bufs.back()->ptr, 0xff, bytes), cudaSuccess);  // 0xffff: a bf16 NaN
      } else {
        patterns.emplace_back(dtype, std::vector<int64_t>{pattern_rows, cols});
        ft::fill_random(patterns.back(), ft::Fill::normal, rng);
        fill_rows_by_repetition(bufs.back()->ptr, rows, patterns.back());
      }
      views.push_back(TensorView(bufs.back()->ptr, dtype, fuseops::Device::cuda(0), {rows, cols}));
    }
    ASSERT_GT(rows * d, int64_t{1} << 31);
    op.call(views);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    const std::vector<fuseops::reference::Golden> gold = golden(op, patterns);
    const ft::Tolerance tol = ft::Tolerance::for_dtype(dtype, 16);
    const int64_t boundary = (int64_t{1} << 31) / d;  // first row at element offset 2^31
    std::vector<int64_t> sample = {0, 1, pattern_rows, rows / 2, boundary - 1, boundary, boundary + 1, rows - 1};
    for (int k = 0; k < 4; ++k) sample.push_back(static_cast<int64_t>(rng() % rows));
    for (int o = 0; o < nout; ++o) {
      for (int64_t r : sample) {
        HostTensor row(dtype, {1, d});
        ASSERT_EQ(cudaMemcpy(row.data(), static_cast<char*>(bufs[o]->ptr) + r * d * 2, d * 2, cudaMemcpyDeviceToHost),
                  cudaSuccess);
        const int64_t p = r % pattern_rows;
        const std::vector<double> ref(gold[o].value.begin() + p * d, gold[o].value.begin() + (p + 1) * d);
        const std::vector<double> sens(gold[o].sensitivity.begin() + p * d, gold[o].sensitivity.begin() + (p + 1) * d);
        const ft::Comparison c = ft::compare(row, ref, sens, tol);
        EXPECT_TRUE(c.pass) << arg_names(op.form)[o] << " row " << r << ": " << c.detail;
      }
    }
  }
#endif
}

}  // namespace
}  // namespace fuseops_test
