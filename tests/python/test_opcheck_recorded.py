"""torch.library.opcheck on the raw op calls that the Python functions of the GDN forward and decode and of MoE routing
make (schema and alias annotations, fake kernels, AOT dispatch), on CPU and CUDA. Each function runs once on small
valid inputs with its module's ``ops`` replaced by a recorder; every recorded call is then checked by opcheck. The
recording runs on any torch (it asserts which ops were reached); opcheck needs torch >= 2.4. The activation and norm
ops are in test_opcheck.py, the GDN intra-chunk ops in test_gdn.py, the rotary ops in test_rope.py."""

import pytest
from common import DEVICES, requires_opcheck, torch

import fuseops
from fuseops import gdn, moe
from fuseops.compat import vllm

F = torch.nn.functional

RECORDED_OPS = {
    "recompute_w_u_fwd", "chunk_gated_delta_rule_fwd_h", "chunk_fwd_o", "chunk_gated_delta_rule",
    "chunk_gated_delta_rule_with_states",
    "fused_recurrent_gated_delta_rule", "fused_recurrent_gated_delta_rule.pool",
    "fused_recurrent_gated_delta_rule_update",
    "fused_sigmoid_gating_delta_rule_update", "topk_softmax", "grouped_topk", "moe_align_block_size", "moe_route",
}


class _Recorder:
    """Stands in for ``torch.ops.fuseops`` in a module: ``ops.name(...)``, ``ops.name.default(...)`` and
    ``ops.name.overload(...)`` record (name, overload, args, kwargs) and run the real op; name is "op" for the default
    overload, "op.overload" for another."""

    def __init__(self, calls):
        self._calls = calls

    def __getattr__(self, name):
        packet_of_op = getattr(fuseops.ops, name)
        calls = self._calls

        def recording(label, overload):
            def call(*args, **kwargs):
                calls.append((label, overload, args, kwargs))
                return overload(*args, **kwargs)
            return call

        class Packet:
            def __call__(self, *args, **kwargs):
                return recording(name, packet_of_op.default)(*args, **kwargs)

            def __getattr__(self, overload_name):
                label = name if overload_name == "default" else f"{name}.{overload_name}"
                return recording(label, getattr(packet_of_op, overload_name))

        return Packet()


def _gdn_calls(device, dtype):
    gen = torch.Generator().manual_seed(3)
    T, H, HV, K, V = 70, 1, 2, 16, 16
    q = torch.randn(1, T, H, K, generator=gen).to(dtype).to(device)
    k = F.normalize(torch.randn(1, T, H, K, generator=gen), dim=-1).to(dtype).to(device)
    v = torch.randn(1, T, HV, V, generator=gen).to(dtype).to(device)
    graw = F.logsigmoid(torch.randn(1, T, HV, generator=gen)).to(device)
    beta = torch.rand(1, T, HV, generator=gen).to(dtype).to(device)
    cu = torch.tensor([0, 30, 30, T], dtype=torch.int32, device=device)
    h0 = torch.randn(3, HV, K, V, generator=gen).to(device)

    fuseops.chunk_gated_delta_rule(q, k, v, graw, beta, initial_state=h0, output_final_state=True,
                                   use_qk_l2norm_in_kernel=True, cu_seqlens=cu)
    g = fuseops.chunk_local_cumsum(graw, 64, cu_seqlens=cu)
    A = fuseops.chunk_gated_delta_rule_fwd_kkt_solve(k, g, beta, cu_seqlens=cu)
    w, u = fuseops.recompute_w_u_fwd(k, v, beta, A, g, cu_seqlens=cu)
    h, v_new, _ = fuseops.chunk_gated_delta_rule_fwd_h(k, w, u, g, initial_state=h0, output_final_state=True,
                                                       cu_seqlens=cu)
    fuseops.chunk_fwd_o(q, k, v_new, h, g, scale=0.25, cu_seqlens=cu)
    # the chunk states: one call of chunk_gated_delta_rule_with_states, in fuseops' slots and in vLLM's order
    fuseops.chunk_gated_delta_rule_with_states(q, k, v, graw, beta, initial_state=h0, output_final_state=True,
                                               cu_seqlens=cu, chunk_size=16)
    vllm.chunk_gated_delta_rule(q, k, v, graw, beta, None, h0, True, cu, False, True, True)

    # decode: FLA's form, the state pool (slot -1 is padding) and vLLM's fused sigmoid gating
    N = 3
    qd, kd, vd = q[:, :N].transpose(0, 1), k[:, :N].transpose(0, 1), v[:, :N].transpose(0, 1)
    gd, bd = graw[:, :N].transpose(0, 1), beta[:, :N].transpose(0, 1)
    fuseops.fused_recurrent_gated_delta_rule(qd, kd, vd, gd, bd, initial_state=h0, output_final_state=True)
    pool = torch.randn(5, HV, K, V, generator=gen).to(device)
    slots = torch.tensor([4, -1, 0], dtype=torch.int32, device=device)
    fuseops.fused_recurrent_gated_delta_rule(qd, kd, vd, gd, bd, initial_state=pool, inplace_final_state=True,
                                             ssm_state_indices=slots, use_qk_l2norm_in_kernel=True)
    # the C++ API's name of the serving form (torch.ops.fuseops.fused_recurrent_gated_delta_rule_update), called as
    # the Python function calls its .pool overload
    gdn.ops.fused_recurrent_gated_delta_rule_update(torch.empty_like(vd), pool, qd, kd, vd, gd, bd, None, slots, None,
                                                    True, None)
    A_log, dt_bias = torch.randn(HV, generator=gen).to(device), torch.randn(HV, generator=gen).to(device)
    a, b = torch.randn(N, 1, HV, generator=gen).to(device), torch.randn(N, 1, HV, generator=gen).to(device)
    fuseops.fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, 1.0, 20.0, qd, kd, vd, b, pool, slots,
                                                   use_qk_l2norm_in_kernel=True)


def _moe_calls(device, dtype):
    gen = torch.Generator().manual_seed(4)
    tokens, E = 5, 16
    logits = torch.randn(tokens, E, generator=gen).to(dtype).to(device)
    bias = torch.randn(E, generator=gen).to(device)
    fuseops.topk_softmax(logits, 4, renormalize=True)
    fuseops.grouped_topk(logits, 4, 2, 3, True, 2.5, bias=bias)
    _, ids = fuseops.topk_softmax(logits, 3)[:2]
    fuseops.moe_align_block_size(ids, 4, E)
    fuseops.moe_route(logits, 4, 8, renormalize=True, bias=bias, scoring="sigmoid", n_group=4, topk_group=2)


def recorded(device, dtype):
    calls = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gdn, "ops", _Recorder(calls))
        mp.setattr(moe, "ops", _Recorder(calls))
        _gdn_calls(device, dtype)
        _moe_calls(device, dtype)
    return calls


@pytest.mark.parametrize("device", DEVICES)
def test_every_recorded_op_is_reached(device):
    calls = recorded(device, torch.float32)
    names = {name for name, _, _, _ in calls}
    assert RECORDED_OPS <= names, sorted(RECORDED_OPS - names)


@requires_opcheck
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_opcheck_recorded(device, dtype):
    checked = set()
    for name, overload, args, kwargs in recorded(device, dtype):
        if name in RECORDED_OPS:
            torch.library.opcheck(overload, args, kwargs)
            checked.add(name)
    assert checked == RECORDED_OPS
