"""torch.compile(fullgraph=True) traces through the functional ops (the fakes of _fake.py), forward and backward,
and gives what eager gives."""

import pytest
from common import DEVICES, requires_compile, torch

import fuseops

pytestmark = requires_compile


class GatedMLP(torch.nn.Module):
    """up-projection, a gated activation, down-projection: a transformer MLP block."""

    def __init__(self, hidden, inner, kind):
        super().__init__()
        self.up = torch.nn.Linear(hidden, 2 * inner)
        self.down = torch.nn.Linear(inner, hidden)
        self.kind = kind

    def forward(self, x):
        h = self.up(x)
        if self.kind == "silu":
            a = fuseops.silu_and_mul(h)
        elif self.kind == "gelu_split":
            d = h.shape[-1] // 2
            a = fuseops.gelu_and_mul_split(h[..., :d], h[..., d:], "tanh")
        else:
            a = fuseops.gelu_and_mul(h, "none")
        return self.down(a)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["silu", "gelu", "gelu_split"])
def test_compile_fullgraph_forward_backward(device, kind):
    torch._dynamo.reset()
    model = GatedMLP(64, 96, kind).to(device)
    # CUDA: inductor; CPU: aot_eager (same Dynamo + AOTAutograd tracing, no C++ compiler needed at run time).
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    x = torch.randn(2, 5, 64, device=device, requires_grad=True)
    x_eager = x.detach().clone().requires_grad_()
    y = compiled(x)
    y_eager = model(x_eager)
    torch.testing.assert_close(y, y_eager, rtol=1e-4, atol=1e-5)
    dy = torch.randn_like(y)
    y.backward(dy)
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    y_eager.backward(dy)
    torch.testing.assert_close(x.grad, x_eager.grad, rtol=1e-4, atol=1e-5)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_compile_no_grad_and_out(device):
    torch._dynamo.reset()

    def f(x, out):
        fuseops.gelu_tanh_and_mul(x, out=out)
        return fuseops.silu_and_mul_split(x[:, :8], x[:, 8:]) + out

    backend = "inductor" if device == "cuda" else "aot_eager"
    x = torch.randn(4, 16, device=device)
    out, out_eager = torch.empty(4, 8, device=device), torch.empty(4, 8, device=device)
    got = torch.compile(f, fullgraph=True, backend=backend)(x, out)
    torch.testing.assert_close(got, f(x, out_eager))
    torch.testing.assert_close(out, out_eager)
