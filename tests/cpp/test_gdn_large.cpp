// Large grids for the GDN intra-chunk ops on the CUDA backend: more (sequence, value head) pairs than a grid
// dimension holds (N * HV > 65535), and an output of more than 2^31 elements (64-bit offsets). CUDA only: the CPU
// backend has no grid, and these sizes would be slow in CI.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "gdn_test_util.h"
#include "ops/gdn_impl.h"

#if defined(FUSEOPS_WITH_CUDA)
#include <cuda_runtime.h>
#endif

namespace fuseops_test::gdn {
namespace {

namespace ref = fuseops::reference;

// 2050 sequences of 16 tokens with HV = 32: N * HV = 65600 > 65535 (FLA's many-documents case), grouped heads; every
// op against the golden, fused == unfused; chunk_local_cumsum on the same layout.
TEST(GdnLargeGrid, ManySequences) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng = test_rng();
  Spec s = varlen(std::vector<int64_t>(2050, 16), 16, 32, 32, 64);
  s.out_dtype = DType::bf16;
  ASSERT_GT(static_cast<int64_t>(s.seqlens.size()) * s.HV, 65535);
  check_spec(Where::cuda, s, rng);

  // chunk_local_cumsum over the same sequences.
  const std::vector<int64_t> cu = cu_seqlens_of(s.seqlens);
  HostTensor g(DType::f32, {1, s.T, s.HV});
  std::normal_distribution<double> normal(0.0, 1.0);
  for (int64_t r = 0; r < g.rows(); ++r)
    for (int64_t h = 0; h < s.HV; ++h) g.set(r, h, static_cast<float>(-std::log1p(std::exp(normal(rng)))));
  Placed in(Where::cuda, g), out(Where::cuda, DType::f32, g.shape()), cup(Where::cuda, ft::index_tensor(DType::i32, cu));
  for (Placed* p : {&in, &out, &cup}) p->upload();
  const TensorView cv = cup.view();
  fuseops::chunk_local_cumsum(out.view(), in.view(), 64, &cv);
  for (Placed* p : {&in, &out, &cup}) p->download();
  EXPECT_TRUE(out.untouched_outside(true));
  EXPECT_TRUE(matches_golden(out.read(), ref::chunk_local_cumsum(g, 64, cu), ref::GdnStage::cumsum, 0, 64));
}


// Grids of more than one wave take the pipelined kkt / fused kernel (each block walks many (chunk, key head) items
// and copies the next item's k rows while it inverts the current one); the other tests mostly fit in one wave. (The
// tensors are placed misaligned, so the fused op takes this kernel too rather than the warp kernel that aligned
// 16-bit chunk-64 grids take: GdnIntraWarp, and MoreThan2Pow31Elements below.) Its
// walk over items with grouped value heads, keys that take the scalar (K = 100) and the f32 copy paths, every chunk
// size, strided inputs, and varlen batches with empty and partial sequences: each against the golden, fused ==
// unfused and deterministic (check_spec).
TEST(GdnLargeGrid, PipelinedWalk) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
  std::mt19937_64 rng = test_rng();
  std::vector<Spec> specs;
  Spec a = fixed(1, 64 * 300 + 17, 2, 4, 100, 64);  // 301 chunks x 2 key heads, 2 value heads each
  a.out_dtype = DType::bf16;
  specs.push_back(a);
  Spec b = fixed(2, 32 * 300, 1, 1, 64, 32);
  b.k_dtype = DType::f32;
  b.strided = true;
  specs.push_back(b);
  std::vector<int64_t> lens;
  for (int i = 0; i < 700; ++i) lens.push_back(std::vector<int64_t>{0, 1, 15, 16, 17, 40, 64, 100}[i % 8]);
  Spec c = varlen(lens, 1, 3, 128, 16);
  c.out_dtype = DType::f16;
  specs.push_back(c);
  Spec d = varlen(lens, 2, 2, 128, 64);
  d.out_dtype = DType::bf16;
  d.cu_dtype = DType::i32;
  specs.push_back(d);
  for (const Spec& s : specs) check_spec(Where::cuda, s, rng);
}

// Ai of [1, 2^20 + 37, 32, 64] bf16: 2^31 + 75776 elements (4.3 GB); the last, partial chunk starts exactly at
// element 2^31. The inputs repeat one random 64-token chunk (g is chunk-local, so every chunk has the same values).
// Sampled chunks (first, around 2^31, last, random) are compared with the golden and, byte for byte, with the unfused
// chain (kkt into an 8.6 GB f32 A + solve_tril); a guard after the output stays poisoned. The fused op takes the warp
// kernel here (gdn_intra_warp.cu); the block kernels, run after it on the same grid, give the same bytes.
TEST(GdnLargeGrid, MoreThan2Pow31Elements) {
  FUSEOPS_SKIP_WITHOUT_CUDA();
#if defined(FUSEOPS_WITH_CUDA)
  const int64_t BT = 64, H = 32, HV = 32, K = 16, T = (int64_t{1} << 20) + 37;
  const int64_t row = HV * BT;  // output elements per token
  ASSERT_GT(T * row, int64_t{1} << 31);
  std::mt19937_64 rng = test_rng();
  Spec pattern = fixed(1, BT, H, HV, K, BT);
  pattern.out_dtype = DType::bf16;
  const Inputs in = make_inputs(pattern, rng);
  SCOPED_TRACE(pattern.describe());

  const size_t guard = 4096;
  const size_t out_bytes = static_cast<size_t>(T * row) * 2;
  DeviceBuffer k(static_cast<size_t>(T * H * K) * 2), g(static_cast<size_t>(T * HV) * 4),
      beta(static_cast<size_t>(T * HV) * 2), fused(out_bytes + guard), A(static_cast<size_t>(T * row) * 4),
      unfused(out_bytes);
  for (const DeviceBuffer* b : {&k, &g, &beta, &fused, &A, &unfused}) {
    if (b->status != cudaSuccess) {
      GTEST_SKIP() << "cudaMalloc for a 2^31-element output failed (" << cudaGetErrorString(b->status)
                   << "): needs about 19 GB of device memory";
    }
  }
  fill_by_repetition(k.ptr, static_cast<size_t>(T * H * K) * 2, in.k.data(), in.k.bytes());
  fill_by_repetition(g.ptr, static_cast<size_t>(T * HV) * 4, in.g.data(), in.g.bytes());
  fill_by_repetition(beta.ptr, static_cast<size_t>(T * HV) * 2, in.beta.data(), in.beta.bytes());
  ASSERT_EQ(cudaMemset(fused.ptr, 0xff, out_bytes + guard), cudaSuccess);  // 0xffff: a bf16 NaN
  ASSERT_EQ(cudaMemset(unfused.ptr, 0xff, out_bytes), cudaSuccess);

  const fuseops::Device dev = fuseops::Device::cuda(0);
  const TensorView kv(k.ptr, DType::bf16, dev, {1, T, H, K}), gv(g.ptr, DType::f32, dev, {1, T, HV}),
      bv(beta.ptr, DType::bf16, dev, {1, T, HV});
  namespace dc = fuseops::detail::cuda;
  const int64_t warp_launches = dc::kkt_warp_launches_for_testing();
  fuseops::chunk_gated_delta_rule_fwd_kkt_solve(TensorView(fused.ptr, DType::bf16, dev, {1, T, HV, BT}), kv, &gv, &bv,
                                                BT);
  EXPECT_EQ(dc::kkt_warp_launches_for_testing(), warp_launches + 1) << "the warp kernel (a grid of many waves)";
  const TensorView Av(A.ptr, DType::f32, dev, {1, T, HV, BT});
  fuseops::chunk_scaled_dot_kkt_fwd(Av, kv, &gv, &bv, BT);
  fuseops::solve_tril(TensorView(unfused.ptr, DType::bf16, dev, {1, T, HV, BT}), Av);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_NO_THROW(fuseops::check_errors(0));

  // Goldens of a full chunk and of the partial last chunk (its first 37 tokens).
  const ref::GdnGolden full = ref::kkt_solve(in.golden_inputs(pattern));
  const int64_t tail = T % BT;
  HostTensor k_tail(DType::bf16, {1, tail, H, K}), g_tail(DType::f32, {1, tail, HV}), b_tail(DType::bf16, {1, tail, HV});
  std::memcpy(k_tail.data(), in.k.data(), k_tail.bytes());
  std::memcpy(g_tail.data(), in.g.data(), g_tail.bytes());
  std::memcpy(b_tail.data(), in.beta.data(), b_tail.bytes());
  ref::KktInputs tail_in = in.golden_inputs(pattern);
  tail_in.k = &k_tail;
  tail_in.g = &g_tail;
  tail_in.beta = &b_tail;
  const ref::GdnGolden partial = ref::kkt_solve(tail_in);

  const int64_t chunks = (T + BT - 1) / BT, boundary = (int64_t{1} << 31) / row / BT;  // chunk starting at 2^31
  std::vector<int64_t> sample = {0, 1, chunks / 2, boundary - 1, boundary, chunks - 1};
  for (int i = 0; i < 3; ++i) sample.push_back(static_cast<int64_t>(rng() % chunks));
  for (int64_t c : sample) {
    const int64_t L = std::min(BT, T - c * BT);
    SCOPED_TRACE("chunk " + std::to_string(c) + " (" + std::to_string(L) + " tokens)");
    HostTensor got(DType::bf16, {1, L, HV, BT}), base(DType::bf16, {1, L, HV, BT});
    const size_t offset = static_cast<size_t>(c * BT * row) * 2;
    ASSERT_EQ(cudaMemcpy(got.data(), static_cast<char*>(fused.ptr) + offset, got.bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(base.data(), static_cast<char*>(unfused.ptr) + offset, base.bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(matches_golden(got, L == BT ? full : partial, ref::GdnStage::kkt_solve, K, BT));
    EXPECT_TRUE(same_bytes(got, base)) << "fused != solve_tril(kkt in f32)";
  }
  // The block kernels on the same grid (into the unfused chain's buffer, now compared): the same bytes.
  dc::set_kkt_warp_for_testing(dc::KktWarpForTesting::never);
  fuseops::chunk_gated_delta_rule_fwd_kkt_solve(TensorView(unfused.ptr, DType::bf16, dev, {1, T, HV, BT}), kv, &gv,
                                                &bv, BT);
  dc::set_kkt_warp_for_testing(dc::KktWarpForTesting::rule);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (int64_t c : sample) {
    const int64_t L = std::min(BT, T - c * BT);
    SCOPED_TRACE("chunk " + std::to_string(c) + ", block kernels");
    HostTensor got(DType::bf16, {1, L, HV, BT}), block(DType::bf16, {1, L, HV, BT});
    const size_t offset = static_cast<size_t>(c * BT * row) * 2;
    ASSERT_EQ(cudaMemcpy(got.data(), static_cast<char*>(fused.ptr) + offset, got.bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    ASSERT_EQ(cudaMemcpy(block.data(), static_cast<char*>(unfused.ptr) + offset, block.bytes(),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_TRUE(same_bytes(got, block)) << "warp kernel != block kernels";
  }
  std::vector<unsigned char> after(guard);
  ASSERT_EQ(cudaMemcpy(after.data(), static_cast<char*>(fused.ptr) + out_bytes, guard, cudaMemcpyDeviceToHost),
            cudaSuccess);
  EXPECT_TRUE(std::all_of(after.begin(), after.end(), [](unsigned char b) { return b == 0xff; }))
      << "written past the end of the output";
#endif
}

}  // namespace
}  // namespace fuseops_test::gdn
