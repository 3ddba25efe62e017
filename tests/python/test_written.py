"""The tensors ops write (the ``Tensor!`` / ``Tensor(a!)`` arguments of every op of torch.ops.fuseops) follow torch's
rules for in-place writes (bindings/torch/torch_utils.h, ``Written``): an inference tensor is written only inside
torch.inference_mode() (outside it a RuntimeError naming the op and the argument, before anything is written), and
each written tensor's autograd version counter is bumped once the op has run. Every op is checked on the raw calls
that the Python functions make on small valid inputs (recorded by a TorchDispatchMode), replayed with one change at a
time; the ops' schemas say which arguments are written, and every op that writes one must have been reached."""

import pytest
from common import DEVICES, torch
from test_opcheck_recorded import _gdn_calls, _moe_calls

import fuseops
from fuseops.compat import flaggems, vllm

TorchDispatchMode = pytest.importorskip("torch.utils._python_dispatch").TorchDispatchMode
F = torch.nn.functional
fwAD = pytest.importorskip("torch.autograd.forward_ad")


def _written_ops():
    """{op name: indices of its written arguments}, from the registered schemas (every overload of every op)."""
    ops = {}
    for s in torch._C._jit_get_all_schemas():
        if s.name.startswith("fuseops::"):
            written = [i for i, a in enumerate(s.arguments) if a.alias_info is not None and a.alias_info.is_write]
            if written:
                ops[(s.name[len("fuseops::"):], s.overload_name)] = written
    return ops


class _Recording(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._schema.name.startswith("fuseops::"):
            self.calls.append((func, args, kwargs))
        return func(*args, **kwargs)


def _other_calls(device):
    """The activations, the norm, the rotary embeddings and the intra-chunk ops (_gdn_calls and _moe_calls have the
    rest), each writing an output it is given or allocates."""
    gen = torch.Generator().manual_seed(5)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device)

    x, gate, up, dout = rand(4, 16), rand(4, 8), rand(4, 8), rand(4, 8)
    fuseops.silu_and_mul(x, out=torch.empty(4, 8, device=device))
    fuseops.gelu_and_mul(x, "tanh", out=torch.empty(4, 8, device=device))
    fuseops.gelu_tanh_and_mul(x, out=torch.empty(4, 8, device=device))
    fuseops.silu_and_mul_split(gate, up, out=torch.empty(4, 8, device=device))
    fuseops.gelu_and_mul_split(gate, up, out=torch.empty(4, 8, device=device))
    fuseops.silu_and_mul_backward(dout, gate, up)
    fuseops.gelu_and_mul_backward(dout, gate, up, "none")
    masked_m = torch.tensor([2, 0, 3], dtype=torch.int32, device=device)
    fuseops.silu_and_mul_masked(rand(3, 4, 16), masked_m)
    fuseops.gelu_and_mul_masked(rand(3, 4, 16), masked_m, "tanh")
    fuseops.layer_norm_fwd(rand(4, 16), rand(16), rand(16), z=rand(4, 16), group_size=8)

    cache = rand(32, 16)
    fuseops.rotary_embedding(torch.arange(5, device=device), rand(5, 32), rand(5, 16), 16, cache)
    fuseops.mrope(rand(5, 32), rand(5, 16), cache, torch.zeros(3, 5, dtype=torch.long, device=device), [2, 3, 3], 16,
                  16)
    fuseops.rotary_embedding_backward(torch.arange(5, device=device), rand(5, 32), rand(5, 16), 16, cache)
    fuseops.mrope_backward(rand(5, 32), rand(5, 16), cache, torch.zeros(3, 5, dtype=torch.long, device=device),
                           [2, 3, 3], 16, 16)
    q, k, cos, sin = rand(1, 5, 2, 16), rand(1, 5, 1, 16), rand(5, 8), rand(5, 8)
    fuseops.apply_rotary_pos_emb(q, k, cos, sin)
    fuseops.apply_rotary_pos_emb(q, k, cos, sin, inplace=True)

    kk = F.normalize(torch.randn(1, 70, 1, 16, generator=gen), dim=-1).to(device)
    g = fuseops.chunk_local_cumsum(F.logsigmoid(rand(1, 70, 2)), 64)
    beta = torch.rand(1, 70, 2, generator=gen).to(device)
    A = fuseops.chunk_scaled_dot_kkt_fwd(kk, g, beta)
    fuseops.solve_tril(A)


def _recorded(device):
    """The first recorded call of each op overload: {(name, overload): (func, args, kwargs)}."""
    with _Recording() as rec:
        _gdn_calls(device, torch.float32)
        _moe_calls(device, torch.float32)
        _other_calls(device)
    first = {}
    for func, args, kwargs in rec.calls:
        first.setdefault((func._schema.name[len("fuseops::"):], func._schema.overload_name), (func, args, kwargs))
    return first


# the in-place rotary op reports as the Python function that calls it (fuseops.apply_rotary_pos_emb(inplace=True))
_NAMED = {"apply_rotary_pos_emb_inplace": "apply_rotary_pos_emb"}


def _copied(args):
    return [a.clone() if isinstance(a, torch.Tensor) else a for a in args]


def _replays(device):
    ops = _written_ops()
    calls = _recorded(device)
    missing = sorted(set(ops) - set(calls))
    assert not missing, f"ops that write a tensor but no call reached: {missing}"
    for key, written in sorted(ops.items()):
        func, args, kwargs = calls[key]
        assert not kwargs, key  # the Python functions pass every argument positionally
        yield key[0], func, list(args), [i for i in written if isinstance(args[i], torch.Tensor)]


def test_every_op_but_the_allocating_ones_writes_a_tensor():
    # the schemas' alias annotations are what the replays below go by: only the functional overloads (which allocate
    # their output), the three library-wide ops and the GDN intermediate-dtype query write no tensor argument
    every = {(s.name[len("fuseops::"):], s.overload_name) for s in torch._C._jit_get_all_schemas()
             if s.name.startswith("fuseops::")}
    rest = every - set(_written_ops())
    assert rest == {(n, "functional") for n in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul",
                                                 "silu_and_mul_split", "gelu_and_mul_split")} | {
        ("check_errors", ""), ("clear_errors", ""), ("version", ""),
        ("chunk_gated_delta_rule_intermediate_dtype", "")}, sorted(rest)


@pytest.mark.parametrize("device", DEVICES)
def test_written_tensors_bump_their_version_counter(device):
    for name, func, args, written in _replays(device):
        args = _copied(args)
        before = [args[i]._version for i in written]
        func(*args)
        after = [args[i]._version for i in written]
        assert all(a > b for a, b in zip(after, before)), (name, before, after)


@pytest.mark.parametrize("device", DEVICES)
def test_inference_tensors_are_written_only_in_inference_mode(device):
    for name, func, args, written in _replays(device):
        for i in written:
            replay = _copied(args)
            with torch.inference_mode():
                replay[i] = torch.zeros_like(args[i])
            pattern = rf"^{_NAMED.get(name, name)}: \w+: an in-place write to an inference tensor outside "
            with pytest.raises(RuntimeError, match=pattern + r"torch.inference_mode\(\) is not allowed"):
                func(*replay)
            assert not replay[i].any(), (name, i)  # refused before anything was written
        # inside inference mode every tensor may be an inference tensor
        with torch.inference_mode():
            replay = _copied(args)
            func(*replay)
            assert all(replay[i].is_inference() for i in written)


def test_the_python_functions_name_their_own_arguments():
    # rotary_embedding_backward restates the op's query as grad_query (named_as), RuntimeErrors as ValueErrors
    with torch.inference_mode():
        grad = torch.randn(4, 32)
    with pytest.raises(RuntimeError, match=r"^rotary_embedding_backward: grad_query: an in-place write to an "
                                           "inference tensor"):
        fuseops.rotary_embedding_backward(torch.arange(4), grad, None, 16, torch.randn(16, 16))
    with pytest.raises(RuntimeError, match=r"^silu_and_mul: out: an in-place write to an inference tensor"):
        fuseops.silu_and_mul(torch.randn(4, 16), out=grad[:, :8])


@pytest.mark.parametrize("device", DEVICES)
def test_dual_tensors_of_forward_ad_are_refused(device):
    # the ops compute no tangent: a dual tensor anywhere (read or written) is a NotImplementedError naming it, as
    # torch's ops without a forward derivative raise, not an output that silently has no (or a stale) tangent
    for name, func, args, _ in _replays(device):
        floats = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()]
        for i in floats:  # (moe_align_block_size has none: integer tensors are never dual)
            replay = _copied(args)
            with fwAD.dual_level():
                replay[i] = fwAD.make_dual(replay[i], torch.zeros_like(replay[i]))
                with pytest.raises(NotImplementedError, match=rf"^{_NAMED.get(name, name)}: \w+: a dual tensor of "
                                                              "forward-mode AD"):
                    func(*replay)


def test_compat_functions_name_their_own_arguments():
    # the compat functions restate the errors of the functions they call in their own names and argument names
    with torch.inference_mode():
        frozen = torch.empty(4, 4)
    x = torch.randn(4, 16)
    cases = [
        (RuntimeError, r"^silu_and_mul_out: out: an in-place write to an inference tensor",
         lambda: flaggems.silu_and_mul_out(x[:, :4], x[:, 4:8], frozen)),
        (ValueError, r"^silu_and_mul: B: expected shape \[4, 4\] \(A's shape\)",
         lambda: flaggems.silu_and_mul(x[:, :4], x[:, 4:9])),
        (ValueError, r"^gelu_and_mul: y: ", lambda: flaggems.gelu_and_mul(x[:, :4], x[:, 4:9])),
        (ValueError, r"^topk_softmax: topk_indices: expected dtype",
         lambda: flaggems.topk_softmax(torch.empty(5, 4), torch.empty(5, 4), torch.empty(5, 4, dtype=torch.int32),
                                       torch.randn(5, 16))),
        (ValueError, r"^topk_softmax: topk_indices: expected dtype",
         lambda: vllm.topk_softmax(torch.empty(5, 4), torch.empty(5, 4), torch.empty(5, 4, dtype=torch.int32),
                                   torch.randn(5, 16))),
        (ValueError, r"^topk_softmax: bias: ",
         lambda: vllm.topk_softmax(torch.empty(5, 4), torch.empty(5, 4, dtype=torch.int32),
                                   torch.empty(5, 4, dtype=torch.int32), torch.randn(5, 16), bias=torch.randn(15))),
    ]
    ids = torch.zeros(3, 2, dtype=torch.int32)

    def align(experts_ids, num_tokens_post_pad):
        return lambda: vllm.moe_align_block_size(ids, 16, 4, torch.empty(100, dtype=torch.int32), experts_ids,
                                                 num_tokens_post_pad)

    i32 = dict(dtype=torch.int32)
    cases += [
        (ValueError, r"^moe_align_block_size: experts_ids: expected dtype",
         align(torch.empty(100), torch.empty(1, **i32))),
        (ValueError, r"^moe_align_block_size: num_tokens_post_pad: expected dtype",
         align(torch.empty(100, **i32), torch.empty(1))),
        # the raw op names its schema's argument (the C++ API's name too)
        (ValueError, r"^moe_align_block_size: num_tokens_post_pad: expected dtype",
         lambda: fuseops.ops.moe_align_block_size(ids, 16, 4, torch.empty(100, **i32), torch.empty(100, **i32),
                                                  torch.empty(1))),
    ]
    with torch.inference_mode():
        frozen_ids = torch.empty(100, **i32)
    cases.append((RuntimeError, r"^moe_align_block_size: experts_ids: an in-place write to an inference tensor",
                  align(frozen_ids, torch.empty(1, **i32))))
    for error, pattern, call in cases:
        with pytest.raises(error, match=pattern):
            call()


def test_compat_and_wrapper_errors_from_a_second_new_user_trial():
    # non-tensors get the library's ValueError in the caller's names (they reached torch's argument parser: a
    # RuntimeError naming the raw op's argument); flaggems.mrope names its own section arguments; vLLM's grouped_topk
    # checks topk against E by name; the masked forms name input; flaggems.topk_softmax refuses what requires grad
    logits, ids = torch.randn(5, 16), torch.empty(5, 4, dtype=torch.int32)
    q, k, cache, pos = torch.randn(4, 32), torch.randn(4, 32), torch.randn(16, 16), torch.zeros(3, 4, dtype=torch.long)
    cases = [
        (r"^topk_softmax: topk_indices: expected a torch.Tensor",
         lambda: vllm.topk_softmax(torch.empty(5, 4), [1, 2], ids, logits)),
        (r"^topk_softmax: bias: expected a torch.Tensor",
         lambda: vllm.topk_softmax(torch.empty(5, 4), ids, ids.clone(), logits, bias=[1.0])),
        (r"^silu_and_mul_out: out: expected a torch.Tensor",
         lambda: flaggems.silu_and_mul_out(logits[:, :8], logits[:, 8:], [1])),
        (r"^silu_and_mul: out: expected a torch.Tensor", lambda: vllm.silu_and_mul([1], logits)),
        (r"^silu_and_mul: input: expected a torch.Tensor", lambda: vllm.silu_and_mul(torch.empty(5, 8), [1])),
        (r"^gelu_and_mul_split: out: expected a torch.Tensor",
         lambda: fuseops.gelu_and_mul_split(logits[:, :8], logits[:, 8:], out="x")),
        (r"^mrope: section_t: expected an int", lambda: flaggems.mrope(q, k, cache, pos, 1.5, 3, 3, 16, 16)),
        (r"^mrope: is_neox_style: expected a bool",
         lambda: flaggems.mrope(q, k, cache, pos, 2, 3, 3, 16, 16, is_neox_style=2)),
        (r"^mrope: section_t, section_h, section_w: ", lambda: flaggems.mrope(q, k, cache, pos, 2, 3, 4, 16, 16)),
        (r"^grouped_topk: topk: expected an int in \[1, 16\]",
         lambda: vllm.grouped_topk(logits, 1, 1, 20, True, 1.0, None, 1)),
    ]
    for pattern, call in cases:
        with pytest.raises(ValueError, match=pattern):
            call()
    qd = torch.randn(3, 1, 1, 8)
    with pytest.raises(ValueError, match=r"^fused_recurrent_gated_delta_rule: ssm_state_indices: expected a torch"):
        fuseops.fused_recurrent_gated_delta_rule(qd, qd, qd, torch.zeros(3, 1, 1), torch.ones(3, 1, 1),
                                                 initial_state=torch.zeros(4, 1, 8, 8), ssm_state_indices=[0, 1, 2])
    with pytest.raises(RuntimeError, match=r"^silu_and_mul_masked: input: requires grad"):
        fuseops.silu_and_mul_masked(torch.randn(3, 4, 16, requires_grad=True), torch.tensor([1, 2, 3]))
    with pytest.raises(RuntimeError, match=r"^topk_softmax: gating_output: requires grad"):
        flaggems.topk_softmax(torch.empty(5, 4), ids, ids.clone(), logits.clone().requires_grad_())
    with pytest.raises(ValueError, match=r"^topk_softmax: topk_weights: expected a tensor that does not require grad"):
        flaggems.topk_softmax(torch.zeros(5, 4, requires_grad=True), ids, ids.clone(), logits)


def test_tensors_that_require_grad_given_for_numbers_are_refused():
    # a 0-dim tensor that requires grad for a float argument: float() cut it from the graph without a word
    s = torch.tensor(0.5, requires_grad=True)
    g = F.logsigmoid(torch.randn(1, 70, 2))
    with pytest.raises(RuntimeError, match=r"^chunk_local_cumsum: scale: requires grad"):
        fuseops.chunk_local_cumsum(g, 64, scale=s)
    with pytest.raises(RuntimeError, match=r"^layer_norm_fwd: eps: requires grad"):
        fuseops.layer_norm_fwd(torch.randn(4, 16), torch.ones(16), eps=torch.tensor(1e-6, requires_grad=True))
    with pytest.raises(RuntimeError, match=r"^grouped_topk: routed_scaling_factor: requires grad"):
        fuseops.grouped_topk(torch.randn(2, 8), 1, 1, 2, True, s)
    # a tensor with dims is no number (as for the ints), nor is a complex one
    for bad in (torch.tensor([[0.5]]), torch.tensor(1 + 0j), torch.tensor(1 + 2j), complex(1, 0)):
        with pytest.raises(ValueError, match=r"^chunk_local_cumsum: scale: expected a number"):
            fuseops.chunk_local_cumsum(g, 64, scale=bad)
    # without grad mode, or detached, it is a number
    with torch.no_grad():
        fuseops.chunk_local_cumsum(g, 64, scale=s)
    fuseops.chunk_local_cumsum(g, 64, scale=s.detach())


def test_dual_tensors_through_autograd_functions_are_refused():
    # apply_rotary_pos_emb(_backward) run through a Python autograd Function, which torch refuses for a dual input
    # without naming it ("You must implement the jvp function"): each tensor is refused by name, in place too
    def rope_args():
        return [torch.randn(1, 4, 2, 8), torch.randn(1, 4, 1, 8), torch.randn(6, 4), torch.randn(6, 4)]

    calls = [("apply_rotary_pos_emb", ("q", "k", "cos", "sin"), fuseops.apply_rotary_pos_emb, {}),
             ("apply_rotary_pos_emb", ("q", "k", "cos", "sin"), fuseops.apply_rotary_pos_emb, {"inplace": True}),
             ("apply_rotary_pos_emb", ("q", "k", "cos", "sin"), flaggems.apply_rotary_pos_emb, {}),
             ("apply_rotary_pos_emb_backward", ("grad_q", "grad_k", "cos", "sin"),
              fuseops.apply_rotary_pos_emb_backward, {})]
    for op, names, func, kwargs in calls:
        for i, name in enumerate(names):
            args = rope_args()
            with fwAD.dual_level():
                args[i] = fwAD.make_dual(args[i], torch.ones_like(args[i]))
                with pytest.raises(NotImplementedError,
                                   match=rf"^{op}: {name}: a dual tensor of forward-mode AD; fuseops computes no "
                                         r"tangent \(pass the primal"):
                    func(*args, **kwargs)
    # a dual incoming gradient, through the backward of an out-of-place call
    q, k, cos, sin = rope_args()
    q.requires_grad_()
    out_q, _ = fuseops.apply_rotary_pos_emb(q, k, cos, sin)
    with fwAD.dual_level():
        grad = fwAD.make_dual(torch.ones_like(out_q), torch.ones_like(out_q))
        with pytest.raises(NotImplementedError, match=r"^apply_rotary_pos_emb_backward: grad_q: a dual tensor"):
            torch.autograd.grad(out_q, q, grad)
    # the primal alone runs
    q, k, cos, sin = rope_args()
    with fwAD.dual_level():
        dual = fwAD.make_dual(q, torch.ones_like(q))
        out_q, _ = fuseops.apply_rotary_pos_emb(fwAD.unpack_dual(dual).primal, k, cos, sin)
    assert torch.equal(out_q, fuseops.apply_rotary_pos_emb(q, k, cos, sin)[0])


def test_dual_tensors_given_for_numbers_are_refused():
    # a 0-dim dual tensor for a float / int argument: float() dropped its tangent
    g = F.logsigmoid(torch.randn(1, 70, 2))
    with fwAD.dual_level():
        sd = fwAD.make_dual(torch.tensor(2.0), torch.tensor(1.0))
        with pytest.raises(NotImplementedError, match=r"^chunk_local_cumsum: scale: a dual tensor of forward-mode AD"):
            fuseops.chunk_local_cumsum(g, 64, scale=sd)
        with pytest.raises(NotImplementedError, match=r"^layer_norm_fwd: eps: a dual tensor"):
            fuseops.layer_norm_fwd(torch.randn(4, 16), torch.ones(16), eps=sd)
        # the wrappers restate the op's dual-tensor error in their own names
        with pytest.raises(NotImplementedError, match=r"^silu_and_mul: A: a dual tensor"):
            flaggems.silu_and_mul(fwAD.make_dual(torch.randn(4, 8), torch.ones(4, 8)), torch.randn(4, 8))
        with pytest.raises(NotImplementedError, match=r"^rotary_embedding_backward: grad_query: a dual tensor"):
            fuseops.rotary_embedding_backward(torch.arange(4), fwAD.make_dual(torch.randn(4, 32), torch.ones(4, 32)),
                                              None, 16, torch.randn(16, 16))
