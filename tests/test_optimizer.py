"""make_adam: every implementation computes the same Adam update; bad names are refused."""
import pytest
import torch

from tutorial_lib.training.optimizer import make_adam


def _train(implementation: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(50, 8, generator=gen))
    bias = torch.nn.Parameter(torch.zeros(8))
    opt = make_adam([weight, bias], lr=1e-2, betas=(0.9, 0.98), weight_decay=1e-4, implementation=implementation)
    for _ in range(30):
        opt.zero_grad()
        loss = ((weight.sum(0) + bias - 1.0) ** 2).sum() + weight.pow(3).mean()
        loss.backward()
        opt.step()
    return torch.cat([weight.detach().flatten(), bias.detach()])


@pytest.mark.parametrize("implementation", ["fused", "foreach", "auto"])
def test_every_implementation_matches_the_plain_loop(implementation):
    reference = _train("loop")
    assert torch.allclose(_train(implementation), reference, atol=1e-5, rtol=1e-5)
    start = torch.cat([torch.randn(50, 8, generator=torch.Generator().manual_seed(0)).flatten(), torch.zeros(8)])
    assert (reference - start).abs().max() > 0.1  # the comparison is between parameters that actually moved


def test_the_plain_loop_is_adam_written_out():
    """The reference itself against Adam by hand: L2 weight decay added to the gradient, m and v with the
    betas, bias correction, eps 1e-8 (torch.optim.Adam's definition, which every implementation must share)."""
    lr, (b1, b2), wd, eps = 1e-2, (0.9, 0.98), 1e-4, 1e-8
    w = torch.randn(50, 8, generator=torch.Generator().manual_seed(0))
    bias = torch.zeros(8)
    m = [torch.zeros_like(w), torch.zeros_like(bias)]
    v = [torch.zeros_like(w), torch.zeros_like(bias)]
    for step in range(1, 31):
        w_, b_ = w.clone().requires_grad_(), bias.clone().requires_grad_()
        (((w_.sum(0) + b_ - 1.0) ** 2).sum() + w_.pow(3).mean()).backward()
        new = []
        for i, (p, g) in enumerate(((w, w_.grad), (bias, b_.grad))):
            g = g + wd * p
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            m_hat, v_hat = m[i] / (1 - b1 ** step), v[i] / (1 - b2 ** step)
            new.append(p - lr * m_hat / (v_hat.sqrt() + eps))
        w, bias = new
    torch.testing.assert_close(_train("loop"), torch.cat([w.flatten(), bias]), atol=1e-5, rtol=1e-5)


def test_auto_picks_the_fused_kernel_on_cpu():
    opt = make_adam([torch.nn.Parameter(torch.zeros(3))], lr=1e-3)
    assert opt.param_groups[0]["fused"] is True


def test_unknown_implementation_is_refused():
    with pytest.raises(ValueError, match="implementation must be one of"):
        make_adam([torch.nn.Parameter(torch.zeros(3))], lr=1e-3, implementation="fast")


def test_auto_falls_back_when_the_fused_kernel_is_refused(monkeypatch):
    real_adam = torch.optim.Adam

    def no_fused(*args, **kwargs):
        if kwargs.get("fused"):
            raise RuntimeError("fused=True requires ... supported devices")
        return real_adam(*args, **kwargs)

    monkeypatch.setattr(torch.optim, "Adam", no_fused)
    opt = make_adam([torch.nn.Parameter(torch.zeros(3))], lr=1e-3)
    assert opt.param_groups[0]["foreach"] is True and not opt.param_groups[0]["fused"]
    with pytest.raises(RuntimeError, match="implementation='fused' is not available"):
        make_adam([torch.nn.Parameter(torch.zeros(3))], lr=1e-3, implementation="fused")
