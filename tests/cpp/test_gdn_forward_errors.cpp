// Error paths of the GDN forward ops: every bad argument raises fuseops::Error naming the op and the argument, before
// anything is written.
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "gdn_forward_test_util.h"

namespace fuseops_test::gdn_forward {
namespace {

constexpr DType f32 = DType::f32, bf16 = DType::bf16, i32 = DType::i32;

/// Host tensors of a small valid problem (B = 1, T = 8, H = 1, HV = 2, K = 16, V = 8, BT = 16).
struct Valid {
  HostTensor q{bf16, {1, 8, 1, 16}}, k{bf16, {1, 8, 1, 16}}, v{bf16, {1, 8, 2, 8}}, g{f32, {1, 8, 2}},
      beta{f32, {1, 8, 2}}, o{bf16, {1, 8, 2, 8}}, ht{f32, {1, 2, 16, 8}}, h0{f32, {1, 2, 16, 8}},
      A{bf16, {1, 8, 2, 16}}, w{bf16, {1, 8, 2, 16}}, u{bf16, {1, 8, 2, 8}}, h{bf16, {1, 1, 2, 16, 8}},
      vn{bf16, {1, 8, 2, 8}}, hs{f32, {1, 1, 2, 16, 8}}, pool{f32, {4, 2, 16, 8}}, idx{i32, {1}}, ws{f32, {1 << 16}}, cu{i32, {2}},
      A_log{f32, {2}}, dt_bias{f32, {2}};
  Valid() {
    static_cast<int32_t*>(cu.data())[1] = 8;
  }
};

// Every error is raised before anything is written (the file's promise): outputs filled with a byte pattern are
// unchanged after calls refused by each op's last checks (initial_state, cu_seqlens, g, scale, the pool's indices).
TEST(GdnForwardErrors, ErrorsWriteNothing) {
  Valid x;
  const std::vector<HostTensor*> outs = {&x.o, &x.ht, &x.ws, &x.w, &x.u, &x.h, &x.vn, &x.hs, &x.pool};
  for (HostTensor* t : outs) std::memset(t->data(), 0x5a, t->bytes());
  const std::vector<HostTensor> before = [&] {
    std::vector<HostTensor> b;
    for (HostTensor* t : outs) b.push_back(*t);
    return b;
  }();
  HostTensor h0_bad(f32, {2, 2, 16, 8}), cu_f32(f32, {2}), g_bad(f32, {1, 8, 3}), idx_f32(f32, {1});
  TensorView ht = x.ht.view();
  const TensorView h0 = x.h0.view(), h0b = h0_bad.view(), cu = x.cu.view(), cub = cu_f32.view(), g = x.g.view(),
                   gb = g_bad.view(), beta = x.beta.view();
  EXPECT_THROW(fuseops::chunk_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), g, beta,
                                               std::nullopt, &h0b, false, &cu, x.ws.view(), 16),
               fuseops::Error);
  EXPECT_THROW(fuseops::chunk_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), g, beta,
                                               std::nullopt, &h0, false, &cub, x.ws.view(), 16),
               fuseops::Error);
  EXPECT_THROW(fuseops::chunk_gated_delta_rule_with_states(x.o.view(), x.hs.view(), &ht, x.q.view(), x.k.view(),
                                                           x.v.view(), g, beta, std::nullopt, &h0, false, &cub,
                                                           x.ws.view(), 16),
               fuseops::Error);
  EXPECT_THROW(fuseops::recompute_w_u_fwd(x.w.view(), x.u.view(), x.k.view(), x.v.view(), beta, x.A.view(), &gb, &cu),
               fuseops::Error);
  EXPECT_THROW(fuseops::chunk_gated_delta_rule_fwd_h(x.h.view(), x.vn.view(), &ht, x.k.view(), x.w.view(),
                                                     x.u.view(), &g, &h0b, 16, nullptr),
               fuseops::Error);
  EXPECT_THROW(fuseops::chunk_fwd_o(x.o.view(), x.q.view(), x.k.view(), x.vn.view(), x.h.view(), &g,
                                    std::numeric_limits<double>::quiet_NaN(), 16, nullptr),
               fuseops::Error);
  EXPECT_THROW(fuseops::fused_recurrent_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), &g,
                                                         &beta, std::nullopt, &h0b, false, &cu),
               fuseops::Error);
  EXPECT_THROW(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), x.q.view(), x.k.view(),
                                                                x.v.view(), &g, &beta, std::nullopt, idx_f32.view(),
                                                                nullptr, false, &cu),
               fuseops::Error);
  for (std::size_t i = 0; i < outs.size(); ++i) {
    EXPECT_EQ(std::memcmp(outs[i]->data(), before[i].data(), before[i].bytes()), 0) << "output " << i << " written";
  }
}

TEST(GdnForwardErrors, ChunkGatedDeltaRule) {
  Valid x;
  TensorView ht = x.ht.view(), h0 = x.h0.view(), cu = x.cu.view();
  const char* op = "chunk_gated_delta_rule";
  auto call = [&](TensorView o, TensorView q, TensorView k, TensorView v, TensorView g, TensorView beta,
                  const TensorView* h0p, const TensorView* cup, TensorView ws, int64_t bt = 16) {
    fuseops::chunk_gated_delta_rule(o, &ht, q, k, v, g, beta, std::nullopt, h0p, false, cup, ws, bt);
  };
  EXPECT_NO_THROW(call(x.o.view(), x.q.view(), x.k.view(), x.v.view(), x.g.view(), x.beta.view(), &h0, &cu,
                       x.ws.view()));
  // a default TensorView() is no workspace: refused by the size check where tokens need one, accepted with none
  EXPECT_ARG_ERROR(call(x.o.view(), x.q.view(), x.k.view(), x.v.view(), x.g.view(), x.beta.view(), &h0, &cu,
                        TensorView()),
                   op, "workspace", "at least", "got 0 bytes");
  {
    HostTensor q0(bf16, {1, 0, 1, 16}), v0(bf16, {1, 0, 2, 8}), g0(f32, {1, 0, 2}), o0(bf16, {1, 0, 2, 8});
    EXPECT_EQ(fuseops::chunk_gated_delta_rule_workspace_size(q0.view(), v0.view(), nullptr, false, 16), 0u);
    EXPECT_NO_THROW(fuseops::chunk_gated_delta_rule(o0.view(), &ht, q0.view(), q0.view(), v0.view(), g0.view(),
                                                    g0.view(), std::nullopt, &h0, false, nullptr, TensorView(), 16));
  }
  HostTensor q3(bf16, {1, 8, 16}), qf(f32, {1, 8, 1, 16}), v3heads(bf16, {1, 8, 3, 8}), big(bf16, {1, 8, 1, 300});
  HostTensor g_bad(f32, {1, 8, 3}), o_bad(f32, {1, 8, 2, 8}), h0_bad(f32, {2, 2, 16, 8}), small_ws(f32, {4});
  HostTensor cu64(DType::f32, {2});
  EXPECT_ARG_ERROR(call(x.o.view(), q3.view(), x.k.view(), x.v.view(), x.g.view(), x.beta.view(), &h0, &cu, x.ws.view()), op, "q");
  EXPECT_ARG_ERROR(call(x.o.view(), big.view(), big.view(), x.v.view(), x.g.view(), x.beta.view(), &h0, &cu, x.ws.view()), op, "q");
  EXPECT_ARG_ERROR(call(x.o.view(), x.q.view(), qf.view(), x.v.view(), x.g.view(), x.beta.view(), &h0, &cu, x.ws.view()), op, "k");
  EXPECT_ARG_ERROR(call(x.o.view(), x.q.view(), x.k.view(), x.v.view(), g_bad.view(), x.beta.view(), &h0, &cu, x.ws.view()), op, "g");
  EXPECT_ARG_ERROR(call(x.o.view(), x.q.view(), x.k.view(), x.v.view(), x.g.view(), g_bad.view(), &h0, &cu, x.ws.view()), op, "beta");
  EXPECT_ARG_ERROR(call(o_bad.view(), x.q.view(), x.k.view(), x.v.view(), x.g.view(), x.beta.view(), &h0, &cu, x.ws.view()), op, "o");
  EXPECT_ARG_ERROR(call(x.o.view(), x.q.view(), x.k.view(), x.v.view(), x.g.view(), x.beta.view(), nullptr, &cu, small_ws.view()), op, "workspace");
  EXPECT_ARG_ERROR(call(x.o.view(), x.q.view(), x.k.view(), x.v.view(), x.g.view(), x.beta.view(), nullptr, &cu, x.ws.view(), 48), op, "chunk_size");
  const TensorView h0b = h0_bad.view(), cub = cu64.view();
  EXPECT_ARG_ERROR(call(x.o.view(), x.q.view(), x.k.view(), x.v.view(), x.g.view(), x.beta.view(), &h0b, &cu, x.ws.view()), op, "initial_state");
  EXPECT_ARG_ERROR(call(x.o.view(), x.q.view(), x.k.view(), x.v.view(), x.g.view(), x.beta.view(), &h0, &cub, x.ws.view()), op, "cu_seqlens");
  // cu_seqlens [0] (no sequence) with T = 8 tokens: malformed by its shape, an error before anything runs
  HostTensor cu_none(i32, {1});
  const TensorView cun = cu_none.view();
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule(x.o.view(), nullptr, x.q.view(), x.k.view(), x.v.view(), x.g.view(),
                                                   x.beta.view(), std::nullopt, nullptr, false, &cun, x.ws.view(), 16),
                   op, "cu_seqlens");
  // ... named as cu_seqlens also when states are passed (their [N, ...] shape comes from it: N = 0 would blame them)
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), x.g.view(),
                                                   x.beta.view(), std::nullopt, &h0, false, &cun, x.ws.view(), 16),
                   op, "cu_seqlens", "N >= 1");
  // HV not a multiple of H
  HostTensor q2(bf16, {1, 8, 2, 16}), v3(bf16, {1, 8, 3, 8});
  EXPECT_ARG_ERROR(call(x.o.view(), q2.view(), q2.view(), v3.view(), x.g.view(), x.beta.view(), &h0, &cu, x.ws.view()), op, "v");
  // an output overlapping an input
  EXPECT_ARG_ERROR(call(x.v.view(), x.q.view(), x.k.view(), x.v.view(), x.g.view(), x.beta.view(), &h0, &cu, x.ws.view()), op, "o");
  TensorView nan_scale_o = x.o.view();
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule(nan_scale_o, &ht, x.q.view(), x.k.view(), x.v.view(), x.g.view(),
                                                   x.beta.view(), std::nan(""), &h0, false, &cu, x.ws.view(), 16),
                   op, "scale");
}

// chunk_gated_delta_rule_with_states: chunk_gated_delta_rule's checks (named chunk_gated_delta_rule_with_states) and
// h's: shape [B, NS, HV, K, V] (NS = gdn_chunk_slots: with cu_seqlens N + ceil(T / BT)), the intermediate dtype (f32
// for 16-bit inputs with K or V < 32), contiguous, on the op's device, no overlap with any other argument (h named,
// o included); the workspace of the size the query gives with with_states, not a byte less.
TEST(GdnForwardErrors, WithStates) {
  Valid x;
  TensorView ht = x.ht.view(), h0 = x.h0.view(), cu = x.cu.view();
  const char* op = "chunk_gated_delta_rule_with_states";
  auto call = [&](TensorView o, TensorView h, TensorView q, const TensorView* cup, TensorView ws) {
    fuseops::chunk_gated_delta_rule_with_states(o, h, &ht, q, x.k.view(), x.v.view(), x.g.view(), x.beta.view(),
                                                std::nullopt, &h0, false, cup, ws, 16);
  };
  // B = 1, T = 8, HV = 2, K = 16, V = 8, BT = 16: NS = 1 at fixed length, N + 1 = 2 with cu_seqlens [0, 8]; bf16
  // inputs with K and V < 32: f32 intermediates, so h is f32
  HostTensor hf(f32, {1, 1, 2, 16, 8}), h2(f32, {1, 2, 2, 16, 8}), hb(bf16, {1, 1, 2, 16, 8});
  EXPECT_NO_THROW(call(x.o.view(), hf.view(), x.q.view(), nullptr, x.ws.view()));
  EXPECT_NO_THROW(call(x.o.view(), h2.view(), x.q.view(), &cu, x.ws.view()));
  EXPECT_ARG_ERROR(call(x.o.view(), hf.view(), x.q.view(), &cu, x.ws.view()), op, "h",
                   "shape [B, NS, HV, K, V] = [1, 2, 2, 16, 8]", "got [1, 1, 2, 16, 8]");
  HostTensor h4(f32, {1, 1, 2, 16});
  EXPECT_ARG_ERROR(call(x.o.view(), h4.view(), x.q.view(), nullptr, x.ws.view()), op, "h", "[B, NS, HV, K, V]");
  EXPECT_ARG_ERROR(call(x.o.view(), hb.view(), x.q.view(), nullptr, x.ws.view()), op, "h",
                   "dtype f32 (chunk_gated_delta_rule_intermediate_dtype of q's dtype bf16, K = 16, V = 8)",
                   "got bf16");
  HostTensor h_pitched(f32, {1, 1, 2, 16, 8}, 9);  // rows of 8 in rows of 9: strided
  EXPECT_ARG_ERROR(call(x.o.view(), h_pitched.view(), x.q.view(), nullptr, x.ws.view()), op, "h",
                   "a contiguous tensor", "strided");
  // on another device than the others (a view that is never read: the check comes first)
  const TensorView h_cuda(hf.data(), f32, fuseops::Device::cuda(0), {1, 1, 2, 16, 8});
  EXPECT_ARG_ERROR(call(x.o.view(), h_cuda, x.q.view(), nullptr, x.ws.view()), op, "h", "device cpu");
  // overlaps: h over o's memory, over the workspace's, over q's (q read as bf16 rows, h viewed as f32 there)
  HostTensor big(f32, {2, 2, 16, 8});
  const TensorView h_big(big.data(), f32, fuseops::Device::cpu(), {1, 1, 2, 16, 8});
  const TensorView o_in_h(static_cast<float*>(big.data()) + 8, bf16, fuseops::Device::cpu(), {1, 8, 2, 8});
  EXPECT_ARG_ERROR(call(o_in_h, h_big, x.q.view(), nullptr, x.ws.view()), op, "h", "no overlap with o");
  const TensorView h_in_ws(x.ws.data(), f32, fuseops::Device::cpu(), {1, 1, 2, 16, 8});
  EXPECT_ARG_ERROR(call(x.o.view(), h_in_ws, x.q.view(), nullptr, x.ws.view()), op, "h", "no overlap with workspace");
  const TensorView q_in_h(big.data(), bf16, fuseops::Device::cpu(), {1, 8, 1, 16});
  EXPECT_ARG_ERROR(call(x.o.view(), h_big, q_in_h, nullptr, x.ws.view()), op, "h", "no overlap with q");
  // the workspace the query gives with with_states (less than without: no chunk states in it) and not a byte less
  const std::size_t with = fuseops::chunk_gated_delta_rule_workspace_size(x.q.view(), x.v.view(), nullptr, false, 16,
                                                                           true);
  const std::size_t without = fuseops::chunk_gated_delta_rule_workspace_size(x.q.view(), x.v.view(), nullptr, false, 16);
  EXPECT_LT(with, without);
  EXPECT_EQ(fuseops::chunk_gated_delta_rule_workspace_size_for("chunk_gated_delta_rule_with_states", x.q.view(),
                                                               x.k.view(), x.v.view(), nullptr, false, 16, true),
            with);
  ASSERT_EQ(with % 4, 0u);
  const TensorView ws_exact(x.ws.data(), f32, fuseops::Device::cpu(), {static_cast<int64_t>(with / 4)});
  const TensorView ws_short(x.ws.data(), DType::i32, fuseops::Device::cpu(), {static_cast<int64_t>(with / 4) - 1});
  EXPECT_NO_THROW(call(x.o.view(), hf.view(), x.q.view(), nullptr, ws_exact));
  EXPECT_ARG_ERROR(call(x.o.view(), hf.view(), x.q.view(), nullptr, ws_short), op, "workspace",
                   "(chunk_gated_delta_rule_workspace_size with with_states)");
  // chunk_gated_delta_rule's own checks, under this op's name
  HostTensor qf(f32, {1, 8, 1, 16});
  EXPECT_ARG_ERROR(call(x.o.view(), hf.view(), qf.view(), nullptr, x.ws.view()), op, "k");
}

// cu_seqlens inside an output is an error (the op would overwrite the sequence bounds it reads): the chunked forward
// (o, final_state), the stages, the decode ops, the intra-chunk ops (Ai, the cumsum's out). cu_seqlens [0, 8] is
// written into the output's first words and viewed there as int32.
TEST(GdnForwardErrors, CuSeqlensInsideAnOutput) {
  Valid x;
  TensorView ht = x.ht.view(), h0 = x.h0.view(), g = x.g.view(), beta = x.beta.view();
  auto inside = [](HostTensor& t) {
    auto* w = static_cast<int32_t*>(t.data());
    w[0] = 0;
    w[1] = 8;
    return TensorView(t.data(), i32, t.view().device, {2});
  };
  const TensorView cu_o = inside(x.o), cu_ht = inside(x.ht);
  const char* op = "chunk_gated_delta_rule";
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), x.g.view(),
                                                   x.beta.view(), std::nullopt, &h0, false, &cu_o, x.ws.view(), 16),
                   op, "o", "no overlap with cu_seqlens");
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), x.g.view(),
                                                   x.beta.view(), std::nullopt, &h0, false, &cu_ht, x.ws.view(), 16),
                   op, "final_state", "no overlap with cu_seqlens");
  const TensorView cu_ws = inside(x.ws);
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), x.g.view(),
                                                   x.beta.view(), std::nullopt, &h0, false, &cu_ws, x.ws.view(), 16),
                   op, "workspace", "no overlap with cu_seqlens");
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), &g,
                                                             &beta, std::nullopt, &h0, false, &cu_o),
                   "fused_recurrent_gated_delta_rule", "o", "no overlap with cu_seqlens");
  HostTensor h2(bf16, {1, 2, 2, 16, 8});  // varlen: N + ceil(T / BT) = 2 chunk slots
  const TensorView cu_w = inside(x.w), cu_h = inside(h2);
  EXPECT_ARG_ERROR(fuseops::recompute_w_u_fwd(x.w.view(), x.u.view(), x.k.view(), x.v.view(), x.beta.view(),
                                              x.A.view(), &g, &cu_w),
                   "recompute_w_u_fwd", "w", "no overlap with cu_seqlens");
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_fwd_h(h2.view(), x.vn.view(), &ht, x.k.view(), x.w.view(),
                                                         x.u.view(), &g, &h0, 16, &cu_h),
                   "chunk_gated_delta_rule_fwd_h", "h", "no overlap with cu_seqlens");
  const TensorView cu_A = inside(x.A), cu_g = inside(x.g);
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_fwd_kkt_solve(x.A.view(), x.k.view(), &g, &beta, 16, &cu_A),
                   "chunk_gated_delta_rule_fwd_kkt_solve", "Ai", "no overlap with cu_seqlens");
  HostTensor gin(f32, {1, 8, 2});
  EXPECT_ARG_ERROR(fuseops::chunk_local_cumsum(x.g.view(), gin.view(), 16, &cu_g), "chunk_local_cumsum", "out",
                   "no overlap with cu_seqlens");
}

// The workspace query validates q, v, cu_seqlens, chunk_size and names itself, or the op a binding sizes it for.
TEST(GdnForwardErrors, MissingCudaDeviceBeforeTheWorkspace) {
  // cuda:N with N = the number of devices never exists. The device is the first thing wrong to report (it said the
  // workspace was too small), also when there are no tokens (that returned silently). The views point at host
  // memory and are never read.
  Valid x;
  const int n = fuseops::cuda_device_count();
  const fuseops::Device dev = fuseops::Device::cuda(n);
  const std::string name = "cuda:" + std::to_string(n);
  const char* op = "chunk_gated_delta_rule";
  auto on = [&](HostTensor& t) { return t.view_at(t.data(), dev); };
  HostTensor q0(bf16, {1, 0, 1, 16}), v0(bf16, {1, 0, 2, 8}), g0(f32, {1, 0, 2}), o0(bf16, {1, 0, 2, 8});
  for (bool empty : {false, true}) {
    SCOPED_TRACE(empty ? "T = 0" : "T = 8");
    auto run = [&] {
      if (empty) {
        fuseops::chunk_gated_delta_rule(on(o0), nullptr, on(q0), on(q0), on(v0), on(g0), on(g0), std::nullopt,
                                        nullptr, false, nullptr, TensorView(), 16);
      } else {
        fuseops::chunk_gated_delta_rule(on(x.o), nullptr, on(x.q), on(x.k), on(x.v), on(x.g), on(x.beta),
                                        std::nullopt, nullptr, false, nullptr, TensorView(), 16);
      }
    };
    if (!fuseops::built_with_cuda()) {
      EXPECT_TRUE(raises(run, fuseops::ErrorKind::unsupported, {op, name, "no CUDA backend"}));
    } else if (n == 0) {
      EXPECT_TRUE(raises(run, fuseops::ErrorKind::unsupported, {op, name, "no CUDA device"}));
    } else {
      EXPECT_ARG_ERROR(run(), op, "device", "got " + name);
    }
  }
}

TEST(GdnForwardErrors, IntermediateDtypeQuery) {
  const char* op = "chunk_gated_delta_rule_intermediate_dtype";
  EXPECT_EQ(fuseops::chunk_gated_delta_rule_intermediate_dtype(bf16, 128, 128), bf16);
  EXPECT_EQ(fuseops::chunk_gated_delta_rule_intermediate_dtype(fuseops::DType::f16, 16, 128), f32);
  EXPECT_EQ(fuseops::chunk_gated_delta_rule_intermediate_dtype(f32, 8, 8), f32);
  // an index dtype or a head dim the op refuses is an error (i32 came back as i32)
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_intermediate_dtype(i32, 128, 128), op, "dtype");
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_intermediate_dtype(bf16, 0, 128), op, "head_k_dim");
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_intermediate_dtype(bf16, 128, 257), op, "head_v_dim");
}

TEST(GdnForwardErrors, WorkspaceQuery) {
  Valid x;
  HostTensor q2(bf16, {1, 8, 2, 16}), v3(bf16, {1, 8, 3, 8}), cuf(f32, {2});
  const TensorView cu = x.cu.view(), cub = cuf.view();
  EXPECT_GT(fuseops::chunk_gated_delta_rule_workspace_size(x.q.view(), x.v.view(), &cu, true, 16), 0u);
  // (without k the query cannot tell whether q or v is wrong: the message names v and shows q's heads)
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_workspace_size(q2.view(), v3.view(), &cu, false, 16),
                   "chunk_gated_delta_rule_workspace_size", "v", "(H: the heads of q [1, 8, 2, 16])", "got 3");
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_workspace_size_for("chunk_gated_delta_rule", q2.view(), v3.view(),
                                                                      &cu, false, 16),
                   "chunk_gated_delta_rule", "v");
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_workspace_size_for("chunk_gated_delta_rule", x.q.view(),
                                                                      x.v.view(), &cub, false, 16),
                   "chunk_gated_delta_rule", "cu_seqlens");
  // a null op name: the query's own name (the message was a std::logic_error from std::string(nullptr))
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_workspace_size_for(nullptr, q2.view(), v3.view(), &cu, false, 16),
                   "chunk_gated_delta_rule_workspace_size", "v");
  EXPECT_GT(fuseops::chunk_gated_delta_rule_workspace_size_for(nullptr, x.q.view(), x.v.view(), &cu, true, 16), 0u);
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_workspace_size_for("", q2.view(), v3.view(), &cu, false, 16),
                   "chunk_gated_delta_rule_workspace_size", "v");
  // with k, the op's own blame: q where k fits v and q does not (the two-tensor query can only name v)
  HostTensor q3(bf16, {1, 8, 3, 16}), k1(bf16, {1, 8, 1, 16}), v2(bf16, {1, 8, 2, 8});
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_workspace_size_for("chunk_gated_delta_rule", q3.view(), k1.view(),
                                                                      v2.view(), &cu, false, 16),
                   "chunk_gated_delta_rule", "q", "(k's shape)");
  EXPECT_EQ(fuseops::chunk_gated_delta_rule_workspace_size_for("chunk_gated_delta_rule", x.q.view(), x.k.view(),
                                                               x.v.view(), &cu, true, 16),
            fuseops::chunk_gated_delta_rule_workspace_size(x.q.view(), x.v.view(), &cu, true, 16));
  HostTensor cu_none(i32, {1});  // no sequence, yet T = 8 tokens
  const TensorView cun = cu_none.view();
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_workspace_size(x.q.view(), x.v.view(), &cun, false, 16),
                   "chunk_gated_delta_rule_workspace_size", "cu_seqlens", "N >= 1");
  // sizes whose workspace passes 64 bits (views over a small buffer: never read): an error, not a wrapped count
  std::vector<float> buf(16);
  const TensorView huge(buf.data(), f32, fuseops::Device::cpu(), {1, int64_t{3} << 50, 1, 256});
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_workspace_size(huge, huge, nullptr, false, 64),
                   "chunk_gated_delta_rule_workspace_size", "q", "fits in 64 bits");
  EXPECT_ARG_ERROR(fuseops::gdn_chunk_slots(-5, 1, 64, false), "gdn_chunk_slots", "T");
  EXPECT_ARG_ERROR(fuseops::gdn_chunk_slots(10, -3, 64, true), "gdn_chunk_slots", "N");
}

// Slot counts and workspace sizes near INT64_MAX: exact where they fit, an error naming the cause where they do not
// (no signed overflow: (T + BT - 1) / BT and N + ceil(T / BT) wrapped before).
TEST(GdnForwardErrors, SizesNearInt64Max) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(fuseops::gdn_chunk_slots(kMax, 0, 16, false), kMax / 16 + 1);
  EXPECT_EQ(fuseops::gdn_chunk_slots(kMax - 63, 7, 64, true), 7 + kMax / 64);
  EXPECT_EQ(fuseops::gdn_chunk_slots(kMax, kMax - kMax / 16 - 1, 16, true), kMax);
  EXPECT_ARG_ERROR(fuseops::gdn_chunk_slots(kMax, kMax, 16, true), "gdn_chunk_slots", "N", "within int64");
  EXPECT_ARG_ERROR(fuseops::gdn_chunk_slots(kMax, kMax - kMax / 16, 16, true), "gdn_chunk_slots", "N");
  // cu_seqlens whose N alone takes the chunk slots (or the chunk states' bytes) past 64 bits: named, not q
  Valid x;
  std::vector<int32_t> cu_buf(4);
  for (int64_t n1 : {kMax, int64_t{1} << 62, int64_t{1} << 56}) {
    SCOPED_TRACE(n1);
    const TensorView cu(cu_buf.data(), i32, fuseops::Device::cpu(), {n1});
    EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_workspace_size(x.q.view(), x.v.view(), &cu, true, 16),
                     "chunk_gated_delta_rule_workspace_size", "cu_seqlens", "fit");
  }
}

TEST(GdnForwardErrors, Stages) {
  Valid x;
  TensorView ht = x.ht.view(), g = x.g.view();
  HostTensor A_bad(bf16, {1, 8, 2, 24}), w_bad(bf16, {1, 8, 2, 15}), h_bad(bf16, {1, 2, 2, 16, 8}), gh(DType::f16, {1, 8, 2});
  const TensorView ghv = gh.view();
  EXPECT_NO_THROW(fuseops::recompute_w_u_fwd(x.w.view(), x.u.view(), x.k.view(), x.v.view(), x.beta.view(), x.A.view(), &g));
  EXPECT_ARG_ERROR(fuseops::recompute_w_u_fwd(x.w.view(), x.u.view(), x.k.view(), x.v.view(), x.beta.view(), A_bad.view(), &g),
                   "recompute_w_u_fwd", "A");
  EXPECT_ARG_ERROR(fuseops::recompute_w_u_fwd(w_bad.view(), x.u.view(), x.k.view(), x.v.view(), x.beta.view(), x.A.view(), &g),
                   "recompute_w_u_fwd", "w");
  EXPECT_ARG_ERROR(fuseops::recompute_w_u_fwd(x.w.view(), x.u.view(), x.k.view(), x.v.view(), x.beta.view(), x.A.view(), &ghv),
                   "recompute_w_u_fwd", "g");
  EXPECT_ARG_ERROR(fuseops::recompute_w_u_fwd(x.w.view(), x.w.view(), x.k.view(), x.v.view(), x.beta.view(), x.A.view(), &g),
                   "recompute_w_u_fwd", "u");
  EXPECT_NO_THROW(fuseops::chunk_gated_delta_rule_fwd_h(x.h.view(), x.vn.view(), &ht, x.k.view(), x.w.view(), x.u.view(), &g,
                                                        nullptr, 16));
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_fwd_h(h_bad.view(), x.vn.view(), &ht, x.k.view(), x.w.view(), x.u.view(), &g,
                                                         nullptr, 16),
                   "chunk_gated_delta_rule_fwd_h", "h");
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_fwd_h(x.h.view(), x.vn.view(), &ht, x.k.view(), w_bad.view(), x.u.view(), &g,
                                                         nullptr, 16),
                   "chunk_gated_delta_rule_fwd_h", "w");
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_fwd_h(x.h.view(), x.vn.view(), &ht, x.k.view(), x.w.view(), x.u.view(), &g,
                                                         nullptr, 17),
                   "chunk_gated_delta_rule_fwd_h", "chunk_size");
  HostTensor ht_bf(bf16, {1, 2, 16, 8});
  TensorView htb = ht_bf.view();
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_fwd_h(x.h.view(), x.vn.view(), &htb, x.k.view(), x.w.view(), x.u.view(), &g,
                                                         nullptr, 16),
                   "chunk_gated_delta_rule_fwd_h", "final_state");
  EXPECT_NO_THROW(fuseops::chunk_fwd_o(x.o.view(), x.q.view(), x.k.view(), x.vn.view(), x.h.view(), &g, 0.25, 16));
  EXPECT_ARG_ERROR(fuseops::chunk_fwd_o(x.o.view(), x.q.view(), x.k.view(), x.vn.view(), h_bad.view(), &g, 0.25, 16),
                   "chunk_fwd_o", "h");
  EXPECT_ARG_ERROR(fuseops::chunk_fwd_o(x.o.view(), x.q.view(), x.k.view(), x.vn.view(), x.h.view(), &g, 0.25, 17),
                   "chunk_fwd_o", "chunk_size");
  HostTensor vn1(bf16, {1, 8, 1, 8});  // one value head where g and h have two: v_new is the odd one out
  EXPECT_ARG_ERROR(fuseops::chunk_fwd_o(x.o.view(), x.q.view(), x.k.view(), vn1.view(), x.h.view(), &g, 0.25, 16),
                   "chunk_fwd_o", "v_new", "HV = 2");
  EXPECT_ARG_ERROR(fuseops::chunk_fwd_o(x.vn.view(), x.q.view(), x.k.view(), x.vn.view(), x.h.view(), &g, 0.25, 16),
                   "chunk_fwd_o", "o");
}

TEST(GdnForwardErrors, Decode) {
  Valid x;
  TensorView ht = x.ht.view(), g = x.g.view(), beta = x.beta.view(), h0 = x.h0.view();
  const char* op = "fused_recurrent_gated_delta_rule";
  EXPECT_NO_THROW(fuseops::fused_recurrent_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), &g,
                                                            &beta, std::nullopt, &h0));
  HostTensor h0_bad(f32, {1, 2, 8, 16});
  const TensorView h0b = h0_bad.view();
  // beta per head [B, T, HV] or per value column [B, T, HV, V] (FLA's per-channel beta); any other rank or shape is
  // named with the expected one, in both direct-gate forms
  HostTensor beta4(f32, {1, 8, 2, 8}), beta4_v(f32, {1, 8, 2, 7}), beta4_hv(DType::f16, {1, 8, 1, 8}),
      beta5(f32, {1, 8, 2, 8, 1}), beta4_i32(i32, {1, 8, 2, 8}), beta4_wide(bf16, {1, 8, 2, 16});
  TensorView beta4_strided = beta4_wide.view();  // innermost stride 2
  beta4_strided.shape[3] = 8;
  beta4_strided.strides[3] = 2;
  const TensorView b4 = beta4.view(), b4v = beta4_v.view(), b4hv = beta4_hv.view(), b5 = beta5.view(),
                   b4i = beta4_i32.view();
  EXPECT_NO_THROW(fuseops::fused_recurrent_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), &g,
                                                            &b4, std::nullopt, &h0));
  EXPECT_NO_THROW(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), x.q.view(), x.k.view(),
                                                                   x.v.view(), &g, &b4, std::nullopt, x.idx.view()));
  for (bool pool : {false, true}) {
    const char* name = pool ? "fused_recurrent_gated_delta_rule_update" : op;
    const auto call = [&](const TensorView& b) {
      if (pool) {
        fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), x.q.view(), x.k.view(), x.v.view(),
                                                         &g, &b, std::nullopt, x.idx.view());
      } else {
        fuseops::fused_recurrent_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), &g, &b,
                                                  std::nullopt, &h0);
      }
    };
    EXPECT_ARG_ERROR(call(b4v), name, "beta", "expected shape [B, T, HV, V] = [1, 8, 2, 8], got [1, 8, 2, 7]");
    EXPECT_ARG_ERROR(call(b4hv), name, "beta", "expected shape [B, T, HV, V] = [1, 8, 2, 8], got [1, 8, 1, 8]");
    EXPECT_ARG_ERROR(call(b5), name, "beta", "expected rank 3 [B, T, HV] or rank 4 [B, T, HV, V]");
    HostTensor beta3_v(f32, {1, 8, 8});  // [B, T, V]: a per-column beta without its head dim, told both forms
    EXPECT_ARG_ERROR(call(beta3_v.view()), name, "beta",
                     "expected shape [B, T, HV] = [1, 8, 2] or, per value column, [B, T, HV, V] = [1, 8, 2, 8], got "
                     "[1, 8, 8]");
    EXPECT_ARG_ERROR(call(b4i), name, "beta", "dtype");
    EXPECT_ARG_ERROR(call(beta4_strided), name, "beta", "innermost stride 1");
  }
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), &g,
                                                             &beta, std::nullopt, &h0b),
                   op, "initial_state");
  const char* up = "fused_recurrent_gated_delta_rule_update";
  EXPECT_NO_THROW(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), x.q.view(), x.k.view(),
                                                                   x.v.view(), &g, &beta, std::nullopt, x.idx.view()));
  HostTensor pool_bad(i32, {4, 2, 16, 8}), pool_shape(f32, {4, 2, 8, 16}), idx_bad(i32, {0}), idx2(i32, {1, 8}),
      idx_short(i32, {1, 3}), idxf(f32, {1}), acc(i32, {1}), acc_bad(i32, {0}), idx_more(i32, {3}), idx2_more(i32, {3, 8});
  const HostTensor acc_more = ft::index_tensor(i32, {3}, {1, 1, 1});
  const TensorView accv = acc.view(), accb = acc_bad.view();
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), pool_bad.view(), x.q.view(), x.k.view(),
                                                                    x.v.view(), &g, &beta, std::nullopt, x.idx.view()),
                   up, "state_pool");
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), pool_shape.view(), x.q.view(), x.k.view(),
                                                                    x.v.view(), &g, &beta, std::nullopt, x.idx.view()),
                   up, "state_pool", "[S, HV, K, V] = [4, 2, 16, 8]");
  // a pool of the wrong rank has no slot count: the rule shows the letter S, not a number
  HostTensor pool_rank3(f32, {2, 16, 8});
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), pool_rank3.view(), x.q.view(), x.k.view(),
                                                                    x.v.view(), &g, &beta, std::nullopt, x.idx.view()),
                   up, "state_pool", "[S, HV, K, V] = [S, 2, 16, 8]");
  // slots may lie further apart (vLLM's padded pages) but not overlap, and each slot must be contiguous
  HostTensor pool_mem(f32, {4 * 2 * 16 * 16 * 2});
  const TensorView pm = pool_mem.view();
  const TensorView overlapping(pm.data, f32, pm.device, {4, 2, 16, 8}, {200, 128, 8, 1}),
      padded_rows(pm.data, f32, pm.device, {4, 2, 16, 8}, {512, 256, 16, 1}),
      padded_slots(pm.data, f32, pm.device, {4, 2, 16, 8}, {264, 128, 8, 1});
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), overlapping, x.q.view(), x.k.view(),
                                                                    x.v.view(), &g, &beta, std::nullopt, x.idx.view()),
                   up, "state_pool", "stride(0) >= HV K V = 256", "stride(0) = 200");
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), padded_rows, x.q.view(), x.k.view(),
                                                                    x.v.view(), &g, &beta, std::nullopt, x.idx.view()),
                   up, "state_pool", "each slot [HV, K, V] contiguous", "strides [512, 256, 16, 1]");
  EXPECT_NO_THROW(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), padded_slots, x.q.view(), x.k.view(),
                                                                   x.v.view(), &g, &beta, std::nullopt, x.idx.view()));
  // the same form under vLLM's name names that op and the pool initial_state
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule(x.o.view(), overlapping, x.q.view(), x.k.view(),
                                                             x.v.view(), &g, &beta, std::nullopt, x.idx.view()),
                   "fused_recurrent_gated_delta_rule", "initial_state", "stride(0) >= HV K V = 256");
  EXPECT_NO_THROW(fuseops::fused_recurrent_gated_delta_rule(x.o.view(), padded_slots, x.q.view(), x.k.view(),
                                                            x.v.view(), &g, &beta, std::nullopt, x.idx.view()));
  // one slot: stride(0) is any value (torch leaves a size-1 dim's stride free), an empty pool any strides
  const TensorView one_slot(pm.data, f32, pm.device, {1, 2, 16, 8}, {0, 128, 8, 1}),
      empty_pool(pm.data, f32, pm.device, {0, 2, 16, 8}, {1, 1, 1, 1});
  EXPECT_NO_THROW(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), one_slot, x.q.view(), x.k.view(),
                                                                   x.v.view(), &g, &beta, std::nullopt, x.idx.view()));
  EXPECT_NO_THROW(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), empty_pool, x.q.view(), x.k.view(),
                                                                   x.v.view(), &g, &beta, std::nullopt, x.idx.view()));
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), x.q.view(), x.k.view(),
                                                                    x.v.view(), &g, &beta, std::nullopt, idx_bad.view()),
                   up, "ssm_state_indices", "[N'] or [N', Tmax] with N' >= N = 1 (the batch B of q)", "got [0]");
  // more rows than N: vLLM's CUDA-graph decode passes the padded batch's indices with the real sequences' cu_seqlens
  // (rows past N are never read: test_gdn_forward_decode.cpp, rows_past_n)
  const TensorView acc_more_v = acc_more.view();
  EXPECT_NO_THROW(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), x.q.view(), x.k.view(),
                                                                   x.v.view(), &g, &beta, std::nullopt, idx_more.view()));
  EXPECT_NO_THROW(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), x.q.view(), x.k.view(),
                                                                   x.v.view(), &g, &beta, std::nullopt,
                                                                   idx2_more.view(), &acc_more_v));
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), x.q.view(), x.k.view(),
                                                                    x.v.view(), &g, &beta, std::nullopt, idxf.view()),
                   up, "ssm_state_indices");
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), x.q.view(), x.k.view(),
                                                                    x.v.view(), &g, &beta, std::nullopt, x.idx.view(), &accv),
                   up, "num_accepted_tokens");
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), x.q.view(), x.k.view(),
                                                                    x.v.view(), &g, &beta, std::nullopt, idx2.view(), &accb),
                   up, "num_accepted_tokens", "shape [N'] with N' >= N = 1", "got [0]");
  // fixed length T = 8: an [N, Tmax] row of 3 slots cannot name the slot of every token (a shape error, not data)
  const TensorView acc_ok = acc.view();
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), x.q.view(), x.k.view(),
                                                                    x.v.view(), &g, &beta, std::nullopt,
                                                                    idx_short.view(), &acc_ok),
                   up, "ssm_state_indices");
  const char* sg = "fused_sigmoid_gating_delta_rule_update";
  EXPECT_NO_THROW(fuseops::fused_sigmoid_gating_delta_rule_update(x.o.view(), x.pool.view(), x.A_log.view(), x.g.view(),
                                                                  x.dt_bias.view(), x.q.view(), x.k.view(), x.v.view(),
                                                                  x.beta.view(), std::nullopt, x.idx.view()));
  HostTensor alog_bad(f32, {3});
  // the gating form's b stays per head [B, T, HV] (vLLM's has no per-channel form)
  EXPECT_ARG_ERROR(fuseops::fused_sigmoid_gating_delta_rule_update(x.o.view(), x.pool.view(), x.A_log.view(), x.g.view(),
                                                                   x.dt_bias.view(), x.q.view(), x.k.view(), x.v.view(),
                                                                   b4, std::nullopt, x.idx.view()),
                   sg, "b", "expected rank 3 [B, T, HV]");
  EXPECT_ARG_ERROR(fuseops::fused_sigmoid_gating_delta_rule_update(x.o.view(), x.pool.view(), alog_bad.view(), x.g.view(),
                                                                   x.dt_bias.view(), x.q.view(), x.k.view(), x.v.view(),
                                                                   x.beta.view(), std::nullopt, x.idx.view()),
                   sg, "A_log");
  EXPECT_ARG_ERROR(fuseops::fused_sigmoid_gating_delta_rule_update(x.o.view(), x.pool.view(), x.A_log.view(), x.g.view(),
                                                                   alog_bad.view(), x.q.view(), x.k.view(), x.v.view(),
                                                                   x.beta.view(), std::nullopt, x.idx.view()),
                   sg, "dt_bias");
  EXPECT_ARG_ERROR(fuseops::fused_sigmoid_gating_delta_rule_update(x.o.view(), x.pool.view(), x.A_log.view(), x.A_log.view(),
                                                                   x.dt_bias.view(), x.q.view(), x.k.view(), x.v.view(),
                                                                   x.beta.view(), std::nullopt, x.idx.view()),
                   sg, "a");
  EXPECT_ARG_ERROR(fuseops::fused_sigmoid_gating_delta_rule_update(x.o.view(), x.pool.view(), x.A_log.view(), x.g.view(),
                                                                   x.dt_bias.view(), x.q.view(), x.k.view(), x.v.view(),
                                                                   x.beta.view(), std::nullopt, x.idx.view(), nullptr,
                                                                   false, nullptr, 0.0),
                   sg, "softplus_beta");
  // its pool and indices under vLLM's names for this function (initial_state_source, initial_state_indices), also
  // in the rules of the other arguments that mention them
  EXPECT_ARG_ERROR(fuseops::fused_sigmoid_gating_delta_rule_update(x.o.view(), pool_shape.view(), x.A_log.view(),
                                                                   x.g.view(), x.dt_bias.view(), x.q.view(), x.k.view(),
                                                                   x.v.view(), x.beta.view(), std::nullopt, x.idx.view()),
                   sg, "initial_state_source");
  EXPECT_ARG_ERROR(fuseops::fused_sigmoid_gating_delta_rule_update(x.o.view(), x.pool.view(), x.A_log.view(), x.g.view(),
                                                                   x.dt_bias.view(), x.q.view(), x.k.view(), x.v.view(),
                                                                   x.beta.view(), std::nullopt, idxf.view()),
                   sg, "initial_state_indices");
  EXPECT_ARG_ERROR(fuseops::fused_sigmoid_gating_delta_rule_update(x.o.view(), x.pool.view(), x.A_log.view(), x.g.view(),
                                                                   x.dt_bias.view(), x.q.view(), x.k.view(), x.v.view(),
                                                                   x.beta.view(), std::nullopt, x.idx.view(), &accv),
                   sg, "num_accepted_tokens", "absent with [N] initial_state_indices");
}

// A first input whose fields are corrupt (a rank its arrays cannot hold, a negative dim: the fields are public) is
// named itself, never read past its arrays, and never reported against a valid argument compared with its dims (a k
// with T = -4 made recompute_w_u_fwd and chunk_gated_delta_rule_fwd_h name A and w: "expected [1, -4, ...]").
TEST(GdnForwardErrors, MalformedFirstInputNamedItself) {
  Valid x;
  TensorView ht = x.ht.view(), g = x.g.view(), beta = x.beta.view(), cu = x.cu.view();
  for (int bad = 0; bad < kMalformedWays; ++bad) {
    SCOPED_TRACE(bad);
    auto corrupt = [bad](TensorView t) { return malformed(t, bad, 1); };  // how 2: T = -4
    const std::string got = malformed_message(bad);
    const TensorView q = corrupt(x.q.view()), k = corrupt(x.k.view());
    EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule(x.o.view(), &ht, q, x.k.view(), x.v.view(), g, beta, std::nullopt,
                                                     nullptr, false, &cu, x.ws.view(), 16),
                     "chunk_gated_delta_rule", "q", got);
    EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_workspace_size(q, x.v.view(), &cu, false, 16),
                     "chunk_gated_delta_rule_workspace_size", "q", got);
    EXPECT_ARG_ERROR(fuseops::recompute_w_u_fwd(x.w.view(), x.u.view(), k, x.v.view(), beta, x.A.view(), &g),
                     "recompute_w_u_fwd", "k", got);
    EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_fwd_h(x.h.view(), x.vn.view(), &ht, k, x.w.view(), x.u.view(), &g,
                                                           nullptr, 16),
                     "chunk_gated_delta_rule_fwd_h", "k", got);
    EXPECT_ARG_ERROR(fuseops::chunk_fwd_o(x.o.view(), q, x.k.view(), x.vn.view(), x.h.view(), &g, 0.25, 16),
                     "chunk_fwd_o", "q", got);
    EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule(x.o.view(), &ht, q, x.k.view(), x.v.view(), &g, &beta,
                                                               std::nullopt, nullptr),
                     "fused_recurrent_gated_delta_rule", "q", got);
    EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), q, x.k.view(),
                                                                      x.v.view(), &g, &beta, std::nullopt,
                                                                      x.idx.view()),
                     "fused_recurrent_gated_delta_rule_update", "q", got);
    EXPECT_ARG_ERROR(fuseops::fused_sigmoid_gating_delta_rule_update(x.o.view(), x.pool.view(), x.A_log.view(), g,
                                                                     x.dt_bias.view(), q, x.k.view(), x.v.view(), beta,
                                                                     std::nullopt, x.idx.view()),
                     "fused_sigmoid_gating_delta_rule_update", "q", got);
  }
}

// A shape mismatch names the argument that disagrees with the others: q defines B, T, H, K (as FLA) and k must match
// it, unless k fits the values and q does not (then q is named); v (A, w) is named when the two per-head tensors
// beside it agree on a head count it does not have.
TEST(GdnForwardErrors, NamesTheArgumentThatDisagrees) {
  Valid x;  // H = 1, HV = 2
  TensorView ht = x.ht.view(), h0 = x.h0.view(), g = x.g.view(), beta = x.beta.view();
  HostTensor q3(bf16, {1, 8, 3, 16}), k2(bf16, {1, 8, 2, 16}), v4(bf16, {1, 8, 4, 8}), A4(bf16, {1, 8, 4, 16}),
      w4(bf16, {1, 8, 4, 16});
  // chunk_fwd_o: q with 3 heads, where k (1) and v_new, g, h (2) agree
  EXPECT_ARG_ERROR(fuseops::chunk_fwd_o(x.o.view(), q3.view(), x.k.view(), x.vn.view(), x.h.view(), &g, 0.25, 16),
                   "chunk_fwd_o", "q", "[B, T, H, K] (k's shape) = [1, 8, 1, 16]", "got [1, 8, 3, 16]");
  // both fit the values: q defines H, k is named
  EXPECT_ARG_ERROR(fuseops::chunk_fwd_o(x.o.view(), x.q.view(), k2.view(), x.vn.view(), x.h.view(), &g, 0.25, 16),
                   "chunk_fwd_o", "k", "[B, T, H, K] (q's shape) = [1, 8, 1, 16]", "got [1, 8, 2, 16]");
  const char* op = "chunk_gated_delta_rule";
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule(x.o.view(), &ht, q3.view(), x.k.view(), x.v.view(), x.g.view(),
                                                   x.beta.view(), std::nullopt, &h0, false, nullptr, x.ws.view(), 16),
                   op, "q", "(k's shape)");
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), v4.view(), x.g.view(),
                                                   x.beta.view(), std::nullopt, &h0, false, nullptr, x.ws.view(), 16),
                   op, "v", "value heads of g and beta, HV = 2");
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule(x.o.view(), &ht, q3.view(), x.k.view(), x.v.view(), &g,
                                                             &beta, std::nullopt, &h0),
                   "fused_recurrent_gated_delta_rule", "q", "(k's shape)");
  EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), v4.view(), &g,
                                                             &beta, std::nullopt, &h0),
                   "fused_recurrent_gated_delta_rule", "v", "value heads of g and beta");
  EXPECT_ARG_ERROR(fuseops::fused_sigmoid_gating_delta_rule_update(x.o.view(), x.pool.view(), x.A_log.view(),
                                                                   x.g.view(), x.dt_bias.view(), x.q.view(),
                                                                   x.k.view(), v4.view(), x.beta.view(), std::nullopt,
                                                                   x.idx.view()),
                   "fused_sigmoid_gating_delta_rule_update", "v", "value heads of a and b");
  EXPECT_ARG_ERROR(fuseops::recompute_w_u_fwd(x.w.view(), x.u.view(), x.k.view(), x.v.view(), x.beta.view(),
                                              A4.view(), &g),
                   "recompute_w_u_fwd", "A", "value heads of v and beta");
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule_fwd_h(x.h.view(), x.vn.view(), &ht, x.k.view(), w4.view(),
                                                         x.u.view(), &g, nullptr, 16),
                   "chunk_gated_delta_rule_fwd_h", "w", "value heads of u and g");
}

// Float scalars are used in fp32: a value outside fp32's range (inf there) or a nonzero value that rounds to 0 there is
// an error naming the op and the argument, not an output of inf or a silent 0. 0 itself is valid.
TEST(GdnForwardErrors, ScalarsMustBeFp32) {
  Valid x;
  TensorView ht = x.ht.view(), h0 = x.h0.view(), g = x.g.view(), beta = x.beta.view();
  for (double bad : {1e300, 1e39, -1e39, 1e-300, -1e-50, std::nan("")}) {
    SCOPED_TRACE(bad);
    EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), x.g.view(),
                                                     x.beta.view(), bad, &h0, false, nullptr, x.ws.view(), 16),
                     "chunk_gated_delta_rule", "scale", "finite in fp32");
    EXPECT_ARG_ERROR(fuseops::chunk_fwd_o(x.o.view(), x.q.view(), x.k.view(), x.vn.view(), x.h.view(), &g, bad, 16),
                     "chunk_fwd_o", "scale", "finite in fp32");
    EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(),
                                                               &g, &beta, bad, &h0),
                     "fused_recurrent_gated_delta_rule", "scale", "finite in fp32");
    EXPECT_ARG_ERROR(fuseops::fused_recurrent_gated_delta_rule_update(x.o.view(), x.pool.view(), x.q.view(),
                                                                      x.k.view(), x.v.view(), &g, &beta, bad,
                                                                      x.idx.view()),
                     "fused_recurrent_gated_delta_rule_update", "scale", "finite in fp32");
    auto gating = [&](double scale, double sp_beta, double sp_threshold) {
      fuseops::fused_sigmoid_gating_delta_rule_update(x.o.view(), x.pool.view(), x.A_log.view(), x.g.view(),
                                                      x.dt_bias.view(), x.q.view(), x.k.view(), x.v.view(),
                                                      x.beta.view(), scale, x.idx.view(), nullptr, false, nullptr,
                                                      sp_beta, sp_threshold);
    };
    const char* sg = "fused_sigmoid_gating_delta_rule_update";
    EXPECT_ARG_ERROR(gating(bad, 1.0, 20.0), sg, "scale", "finite in fp32");
    EXPECT_ARG_ERROR(gating(0.25, std::fabs(bad), 20.0), sg, "softplus_beta", "> 0", "finite in fp32");
    EXPECT_ARG_ERROR(gating(0.25, 1.0, bad), sg, "softplus_threshold", "finite in fp32");
  }
  EXPECT_ARG_ERROR(fuseops::chunk_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), x.g.view(),
                                                   x.beta.view(), 1e39, &h0, false, nullptr, x.ws.view(), 16),
                   "chunk_gated_delta_rule", "scale", "got 1e+39");  // the number given, not fp32's inf
  EXPECT_NO_THROW(fuseops::chunk_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), x.g.view(),
                                                  x.beta.view(), 0.0, &h0, false, nullptr, x.ws.view(), 16));
  EXPECT_NO_THROW(fuseops::chunk_fwd_o(x.o.view(), x.q.view(), x.k.view(), x.vn.view(), x.h.view(), &g, 3e38, 16));
  EXPECT_NO_THROW(fuseops::fused_recurrent_gated_delta_rule(x.o.view(), &ht, x.q.view(), x.k.view(), x.v.view(), &g,
                                                            &beta, 1e-40, &h0));  // an fp32 subnormal: kept
}

}  // namespace
}  // namespace fuseops_test::gdn_forward
