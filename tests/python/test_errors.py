"""Bad arguments raise ValueError naming the op and the argument (README: bad arguments are a
ValueError), and never write into anything."""

import re

import pytest
from common import DEVICES, poisoned, randn, requires_cuda, torch

import fuseops


@pytest.mark.parametrize("device", DEVICES)
def test_dtype_not_supported_by_torch_binding(device):
    x = torch.randn(4, 16, dtype=torch.float64, device=device)
    with pytest.raises(ValueError, match=r"silu_and_mul: input: unsupported dtype torch\.float64"):
        fuseops.silu_and_mul(x, out=torch.empty(4, 8, device=device))
    with pytest.raises(ValueError, match=r"silu_and_mul_split: gate: unsupported dtype torch\.float64"):
        fuseops.silu_and_mul_split(x, x)


@pytest.mark.parametrize("device", DEVICES)
def test_dtype_not_supported_by_op(device):
    x = torch.ones(4, 16, dtype=torch.int32, device=device)
    with pytest.raises(ValueError, match=r"gelu_and_mul: input: expected dtype f32 \| f16 \| bf16, got i32"):
        fuseops.gelu_and_mul(x)


@pytest.mark.parametrize("device", DEVICES)
def test_mixed_dtypes(device):
    gate = randn((4, 8), torch.bfloat16, device)
    with pytest.raises(ValueError, match=r"silu_and_mul_split: up: expected dtype bf16"):
        fuseops.silu_and_mul_split(gate, gate.float())
    with pytest.raises(ValueError, match=r"silu_and_mul: out: expected dtype bf16"):
        fuseops.silu_and_mul(randn((4, 16), torch.bfloat16, device), out=torch.empty(4, 8, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_odd_last_dim(device):
    with pytest.raises(ValueError, match=r"silu_and_mul: input: expected an even last dim 2\*d >= 2, got 7"):
        fuseops.silu_and_mul(randn((3, 7), torch.float16, device))
    with pytest.raises(ValueError, match=r"gelu_tanh_and_mul: input: expected an even last dim"):
        fuseops.gelu_tanh_and_mul(randn((3, 1), torch.float16, device))


@pytest.mark.parametrize("device", DEVICES)
def test_shapes(device):
    with pytest.raises(ValueError, match=r"silu_and_mul: out: expected shape \[3, 4\]"):
        fuseops.silu_and_mul(randn((3, 8), torch.float32, device), out=torch.empty(3, 5, device=device))
    with pytest.raises(ValueError, match=r"gelu_and_mul_split: up: expected shape \[3, 8\]"):
        fuseops.gelu_and_mul_split(randn((3, 8), torch.float32, device), randn((3, 9), torch.float32, device))
    with pytest.raises(ValueError, match=r"silu_and_mul: input: expected rank >= 1"):
        fuseops.silu_and_mul(torch.tensor(1.0, device=device))
    with pytest.raises(ValueError, match=r"silu_and_mul: input: expected rank <= 8"):
        fuseops.silu_and_mul(torch.ones([1] * 9 + [4], device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_strides(device):
    x = randn((16, 6), torch.float32, device).t()  # [6, 16], innermost stride 6
    with pytest.raises(ValueError, match=r"silu_and_mul: input: expected innermost stride 1"):
        fuseops.silu_and_mul(x)


@pytest.mark.parametrize("device", DEVICES)
def test_out_aliasing_input(device):
    x = randn((4, 16), torch.float32, device)
    before = x.clone()
    with pytest.raises(ValueError, match=r"silu_and_mul: out: expected no overlap with input"):
        fuseops.silu_and_mul(x, out=x[:, :8])
    gate, up = x[:, :8], x[:, 8:]
    with pytest.raises(ValueError, match=r"silu_and_mul_split: out: expected no overlap with up"):
        fuseops.silu_and_mul_split(gate, up, out=up)
    with pytest.raises(ValueError, match=r"silu_and_mul_backward: dgate: expected no overlap with gate"):
        fuseops.silu_and_mul_backward(up, gate, up, dgate=gate, dup=torch.empty_like(gate))
    grad = torch.empty(4, 12, device=device)
    with pytest.raises(ValueError, match=r"gelu_and_mul_backward: dup: expected no overlap with dgate"):
        fuseops.gelu_and_mul_backward(gate, gate, up, dgate=grad[:, :8], dup=grad[:, 4:])
    assert torch.equal(x, before), "an input was written"


@pytest.mark.parametrize("device", DEVICES)
def test_out_positional(device):
    """A second positional tensor is never taken as `out` (vLLM's order is fuseops.compat.vllm)."""
    x, y = randn((4, 16), torch.float32, device), poisoned((4, 8), torch.float32, device)
    for fn in (fuseops.silu_and_mul, fuseops.gelu_tanh_and_mul):
        with pytest.raises(ValueError, match=rf"{fn.__name__}: out: expected a keyword argument .*compat\.vllm"):
            fn(x, y)
    with pytest.raises(ValueError, match=r"gelu_and_mul: approximate: .*got a Tensor; out is keyword-only"):
        fuseops.gelu_and_mul(x, y)
    with pytest.raises(ValueError, match=r"silu_and_mul_split: out: expected a keyword argument"):
        fuseops.silu_and_mul_split(x[:, :8], x[:, 8:], y)
    with pytest.raises(ValueError, match=r"gelu_and_mul_split: approximate: .*got a Tensor"):
        fuseops.gelu_and_mul_split(x[:, :8], x[:, 8:], y)
    with pytest.raises(ValueError, match=r"silu_and_mul_backward: dgate: expected keyword arguments"):
        fuseops.silu_and_mul_backward(y, y, y, y)
    # the backward's outputs are dgate and dup (it has no out)
    with pytest.raises(ValueError, match=r"^gelu_and_mul_backward: approximate: .*got a Tensor; dgate, dup are "
                                         r"keyword-only \(dgate=..., dup=...\)$"):
        fuseops.gelu_and_mul_backward(y, y, y, y)
    assert torch.isnan(y).all(), "the positional tensor was written"


@pytest.mark.parametrize("device", DEVICES)
def test_approximate(device):
    x = randn((4, 16), torch.float32, device)
    with pytest.raises(ValueError, match=r'gelu_and_mul: approximate: expected "none" \| "tanh", got \'erf\''):
        fuseops.gelu_and_mul(x, "erf")
    with pytest.raises(ValueError, match=r'gelu_and_mul: approximate: expected "none" \| "tanh", got "erf"'):
        fuseops.ops.gelu_and_mul(torch.empty(4, 8, device=device), x, "erf")  # the binding's own check


def test_not_a_tensor():
    with pytest.raises(ValueError, match=r"silu_and_mul: input: expected a torch.Tensor, got list"):
        fuseops.silu_and_mul([1.0, 2.0])


def test_a_tensor_that_is_not_dense_is_named():
    # sparse, mkldnn and quantized tensors would reach torch's dispatcher, whose error names no argument
    x = torch.randn(4, 16)
    with pytest.raises(ValueError, match=r"^silu_and_mul: input: expected a dense \(strided\) tensor, got a tensor of "
                                         r"layout torch.sparse_coo$"):
        fuseops.silu_and_mul(x.to_sparse())
    with pytest.raises(ValueError, match=r"^topk_softmax: gating_output: expected a dense \(strided\) tensor, got a "
                                         r"quantized tensor$"):
        fuseops.topk_softmax(torch.quantize_per_tensor(x, 0.1, 0, torch.qint8), 2)
    cu = torch.tensor([0, 3, 8], dtype=torch.int32).to_sparse()  # cu_seqlens has its own reader in the GDN functions
    with pytest.raises(ValueError, match=r"^solve_tril: cu_seqlens: expected a dense \(strided\) tensor, got a tensor "
                                         r"of layout torch.sparse_coo$"):
        fuseops.solve_tril(torch.zeros(1, 8, 1, 16), cu_seqlens=cu)
    bias = torch.zeros(16).to_sparse()
    with pytest.raises(ValueError, match=r"^grouped_topk: bias: expected a dense"):
        fuseops.grouped_topk(x, 2, 1, 1, True, bias=bias)


def test_a_named_tensor_is_named():
    # torch's own error for a named tensor in a custom op speaks of TorchScript and names no argument
    x = torch.randn(4, 16).refine_names("N", "C")
    with pytest.raises(ValueError, match=r"^silu_and_mul: input: expected a tensor without dimension names, got names "
                                         r"\('N', 'C'\) \(drop them with .rename\(None\)\)$"):
        fuseops.silu_and_mul(x)
    with pytest.raises(ValueError, match=r"^silu_and_mul: out: expected a tensor without dimension names"):
        fuseops.silu_and_mul(x.rename(None), out=torch.empty(4, 8).refine_names("N", None))


@pytest.mark.parametrize("device", DEVICES)
def test_negative_and_conjugate_bits(device):
    # A tensor with torch's negative bit (torch._neg_view) or conjugate bit: torch's fallback for those bits expects
    # an op to return each tensor it writes, which these ops do not; it failed on an internal assert after the op had
    # run (query rotated, key not). A written one is refused by name before anything runs; a read one is materialised.
    pos = torch.arange(4, device=device)
    cache = torch.randn(16, 8, device=device)
    q = torch.randn(4, 16, device=device)
    key = torch._neg_view(torch.randn(4, 8, device=device))
    assert key.is_neg()
    q_before = q.clone()
    with pytest.raises(ValueError, match=r"^rotary_embedding: key: expected a tensor without torch's negative bit "
                                         r"\(the op writes it in place\), got one with it \(resolve it first: "
                                         r"\.resolve_neg\(\)\)$"):
        fuseops.rotary_embedding(pos, q, key, 8, cache)
    assert torch.equal(q, q_before)
    with pytest.raises(ValueError, match=r"^rotary_embedding: key: expected a tensor without torch's negative bit"):
        fuseops.ops.rotary_embedding(pos, q, key, 8, cache, True, False)  # the raw op alike
    assert torch.equal(q, q_before)
    z = torch.randn(4, 16, dtype=torch.complex64, device=device).conj()
    with pytest.raises(ValueError, match=r"^silu_and_mul: out: expected a tensor without torch's negative bit"):
        fuseops.silu_and_mul(torch.randn(4, 16, device=device), out=z.imag[:, :8])
    # named as the call's other errors name it: apply_rotary_pos_emb in place, the backward's gradients with inverse
    cs, sn = cache[:, :4].contiguous(), cache[:, 4:].contiguous()
    q4, k4 = torch.randn(1, 4, 2, 8, device=device), torch.randn(1, 4, 1, 8, device=device)
    with pytest.raises(ValueError, match=r"^apply_rotary_pos_emb: q: expected a tensor without torch's negative bit"):
        fuseops.apply_rotary_pos_emb(torch._neg_view(q4), k4, cs, sn, inplace=True)
    with pytest.raises(ValueError, match=r"^apply_rotary_pos_emb_backward: grad_q_out: expected a tensor without"):
        fuseops.ops.apply_rotary_pos_emb(torch._neg_view(torch.empty_like(q4)), torch.empty_like(k4), q4, k4, cs, sn,
                                         None, False, True)
    # read-only: the values the bit gives
    x = torch._neg_view(torch.randn(4, 16, device=device))
    assert torch.equal(fuseops.silu_and_mul(x), fuseops.silu_and_mul(x.resolve_neg()))
    k = key.resolve_neg()
    got_q, got_k = fuseops.apply_rotary_pos_emb(q.view(1, 4, 2, 8), torch._neg_view(k).view(1, 4, 1, 8),
                                                cache[:, :4].contiguous(), cache[:, 4:].contiguous())
    want_q, want_k = fuseops.apply_rotary_pos_emb(q.view(1, 4, 2, 8), (-k).view(1, 4, 1, 8),
                                                  cache[:, :4].contiguous(), cache[:, 4:].contiguous())
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)


@requires_cuda
def test_devices_differ():
    x = randn((4, 16), torch.float32, "cuda")
    with pytest.raises(ValueError, match=r"silu_and_mul: input: expected device cuda:0 \(the device of out\), got cpu"):
        fuseops.ops.silu_and_mul(torch.empty(4, 8, device="cuda"), x.cpu())
    with pytest.raises(ValueError, match=r"silu_and_mul_split: up: expected device"):
        fuseops.silu_and_mul_split(x[:, :8], x[:, 8:].cpu())



def test_a_meta_tensor_among_real_ones_is_a_device_error():
    # Such a call reaches the op's Meta kernel (its fake, python/fuseops/_fake.py), not the C++ op: it still raises the
    # device error naming the argument, never returns outputs that were not written.
    x = torch.randn(4, 16)
    with pytest.raises(ValueError, match=r"^layer_norm_fwd: weight: expected device cpu \(the device of x\), got meta"):
        fuseops.layer_norm_fwd(x, torch.randn(16, device="meta"))
    with pytest.raises(ValueError, match=r"^silu_and_mul: out: expected device cpu \(the device of input\), got meta"):
        fuseops.silu_and_mul(x, out=torch.empty(4, 8, device="meta"))
    q, g = torch.randn(1, 8, 2, 16), torch.randn(1, 8, 2).sigmoid().log()
    want = r"^chunk_gated_delta_rule: cu_seqlens: expected device cpu \(the device of q\), got meta"
    with pytest.raises(ValueError, match=want):
        fuseops.chunk_gated_delta_rule(q, q, q, g, g.exp(), cu_seqlens=torch.tensor([0, 8], device="meta"))
    # the first tensor on meta: named itself, not the next one
    with pytest.raises(ValueError, match=r"^layer_norm_fwd: x: expected device cpu \(the device of weight\), got meta"):
        fuseops.layer_norm_fwd(torch.randn(4, 16, device="meta"), torch.randn(16))
    # every tensor on meta: no data to compute on (no outputs of unchecked shapes either)
    with pytest.raises(ValueError, match=r"^silu_and_mul: input: expected device kind cpu or cuda, got meta"):
        fuseops.silu_and_mul(torch.empty(4, 16, device="meta"))
    # a raw op whose binding names the call otherwise (the backward form of apply_rotary_pos_emb)
    grad = torch.randn(4, 2, 8)
    with pytest.raises(ValueError, match=r"^apply_rotary_pos_emb_backward: grad_k: expected device cpu \(the device of "
                                         r"grad_q\), got meta"):
        fuseops.apply_rotary_pos_emb_backward(grad, torch.randn(4, 1, 8, device="meta"), torch.randn(16, 4),
                                              torch.randn(16, 4))
    with pytest.raises(ValueError, match=r"^apply_rotary_pos_emb: sin: expected device cpu"):
        fuseops.apply_rotary_pos_emb(grad, torch.randn(4, 1, 8), torch.randn(16, 4), torch.randn(16, 4, device="meta"),
                                     inplace=True)
    # a 0-dim meta tensor given for a number has no value: named, not torch's dispatcher error
    with pytest.raises(ValueError, match=r"^topk_softmax: topk: expected an int .*got a meta tensor"):
        fuseops.topk_softmax(torch.randn(4, 8), torch.tensor(2, device="meta"))
    with pytest.raises(ValueError, match=r"^rmsnorm_fn: eps: expected a number, got a meta tensor"):
        fuseops.rmsnorm_fn(x, torch.randn(16), None, eps=torch.tensor(1e-6, device="meta"))


def test_required_tensors_never_say_or_none():
    # a required tensor given a non-tensor reads "expected a torch.Tensor, got ..." ("or None" only where None is
    # taken): the norms' weight, the compat forms' outputs
    from fuseops.compat import flaggems, vllm
    x = torch.randn(2, 8)
    cases = [
        ("rmsnorm_fn: weight", lambda: fuseops.rmsnorm_fn(x, 5, None)),
        ("layernorm_fn: weight", lambda: fuseops.layernorm_fn(x, [1.0], None)),
        ("layer_norm_fwd: weight", lambda: fuseops.layer_norm_fwd(x, None)),
        ("silu_and_mul: out", lambda: vllm.silu_and_mul(3, x)),
        ("gelu_tanh_and_mul: out", lambda: vllm.gelu_tanh_and_mul(None, x)),
        ("topk_softmax: topk_weights", lambda: vllm.topk_softmax(1, None, None, x)),
        ("topk_softmax: token_expert_indices",
         lambda: flaggems.topk_softmax(torch.empty(2, 1), torch.empty(2, 1, dtype=torch.int32), [0], x)),
    ]
    for prefix, call in cases:
        with pytest.raises(ValueError, match=f"^{prefix}: expected a torch.Tensor, got [A-Za-z]+$"):
            call()
    with pytest.raises(ValueError, match="^rmsnorm_fn: bias: expected a torch.Tensor or None, got int$"):
        fuseops.rmsnorm_fn(x, torch.ones(8), 3)


def test_raw_ops_quote_text_arguments_with_escapes():
    # a NUL, a newline or a quote in a text argument is escaped (a NUL had cut the message short)
    x = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r'^gelu_and_mul: approximate: expected "none" \| "tanh", got "tan\\x00h\\n\\""$'):
        fuseops.ops.gelu_and_mul(torch.empty(4, 4), x, 'tan\x00h\n"')
    q = torch.randn(2, 4, 64)
    with pytest.raises(ValueError, match=r'mrope: layout: .*got "chun\\x00ked"$'):
        fuseops.ops.mrope(torch.zeros(3, 2, dtype=torch.int64), q, None, 64, 64, torch.randn(8, 64), [8, 12, 12], True,
                          "chun\x00ked")


def test_numbers_past_the_float_range_are_refused():
    # float() reads Decimal('1e-400') as 0.0 and Decimal('1e400') as inf: refused by name, never run as 0 / inf
    from decimal import Decimal
    from fractions import Fraction
    g = -torch.rand(1, 64, 2)
    for tiny in (Decimal("1e-400"), Fraction(1, 10**400), Decimal("-1e-400")):
        with pytest.raises(ValueError, match=r"^chunk_local_cumsum: scale: expected a number in the float range, .*"
                                             r"\(it reads as -?0\.0\)$"):
            fuseops.chunk_local_cumsum(g, 64, scale=tiny)
    with pytest.raises(ValueError, match=r"^rmsnorm_fn: eps: expected a number in the float range, .*reads as inf"):
        fuseops.rmsnorm_fn(torch.randn(2, 8), torch.ones(8), None, eps=Decimal("1e400"))
    out = fuseops.chunk_local_cumsum(g, 64, scale=Decimal("0.5"))  # in range: taken as the float it is
    assert torch.equal(out, fuseops.chunk_local_cumsum(g, 64, scale=0.5))
    assert torch.equal(fuseops.chunk_local_cumsum(g, 64, scale=Decimal(0)), torch.zeros_like(g))


def test_public_names_are_the_ops():
    # `from fuseops.compat.vllm import *` (and the package's) gives the ops, not the argument helpers they import
    import inspect

    from fuseops.compat import flaggems, vllm

    for mod in (fuseops, vllm, flaggems):
        defined = {n for n, f in vars(mod).items()
                   if inspect.isfunction(f) and f.__module__ == mod.__name__ and not n.startswith("_")}
        assert defined <= set(mod.__all__), (mod.__name__, defined - set(mod.__all__))
        for name in mod.__all__:
            assert hasattr(mod, name), (mod.__name__, name)
    for helper in ("bool_arg", "int_arg", "named_as", "written_arg", "ops"):
        assert helper not in vllm.__all__ and helper not in flaggems.__all__
    star = {}
    exec("from fuseops.compat import *", star)
    assert star["vllm"] is vllm and star["flaggems"] is flaggems


def test_functional_fakes_raise_the_ops_shape_errors():
    # under tracing the functional overloads' fakes size the output: they raise the op's ValueError for the shapes
    # they cannot size from (a rank-0 input was an IndexError there, an odd width traced to a wrong shape)
    from fuseops import _fake
    for op in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        fake = _fake.FUNCTIONAL[f"{op}.functional"]
        for x in (torch.tensor(1.0), torch.randn(3, 7), torch.randn(3, 0)):
            with pytest.raises(ValueError) as eager:
                getattr(fuseops, op)(x)
            with pytest.raises(ValueError, match=f"^{re.escape(str(eager.value))}$"):
                fake(x)
        assert fake(torch.randn(2, 5, 8)).shape == (2, 5, 4)
