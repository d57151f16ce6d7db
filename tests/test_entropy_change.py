"""Entropy-change estimators against finite differences on a small tabular softmax (float64)."""

from __future__ import annotations

import pytest
import torch

from healtrl.functional import token_entropy_change
from healtrl.kernels import fused_logprob_entropy


def entropy_of(z: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(z, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def finite_difference(z, a, adv, lr):
    """H after one policy-gradient step z += lr * A * (e_a - p), minus H before (exact, tiny step)."""
    p = torch.softmax(z, dim=-1)
    step = lr * adv[:, None] * (torch.nn.functional.one_hot(a, z.size(-1)).double() - p)
    return entropy_of(z + step) - entropy_of(z)


def stats(z, a):
    logp_all = torch.log_softmax(z, dim=-1)
    p = logp_all.exp()
    logp = logp_all.gather(-1, a[:, None]).squeeze(-1)
    return logp, -(p * logp_all).sum(-1), (p * p).sum(-1), (p * p * logp_all).sum(-1)


@pytest.fixture
def tabular():
    gen = torch.Generator().manual_seed(0)
    n, v = 64, 7
    z = (
        torch.randn(n, v, generator=gen, dtype=torch.float64)
        * torch.linspace(0.2, 4.0, n, dtype=torch.float64)[:, None]
    )
    a = torch.randint(0, v, (n,), generator=gen)
    adv = torch.randn(n, generator=gen, dtype=torch.float64)
    return z, a, adv


def test_exact_matches_finite_difference(tabular):
    z, a, adv = tabular
    lr = 1e-6
    logp, entropy, s2, s2l = stats(z, a)
    predicted = token_entropy_change(logp, entropy, adv, estimator="exact", sum_p2=s2, sum_p2_logp=s2l, lr=lr)
    measured = finite_difference(z, a, adv, lr)
    # Second-order remainder is O(lr^2); float32 output rounding ~1e-7 relative.
    torch.testing.assert_close(predicted.double(), measured, rtol=1e-4, atol=1e-12)


def test_exact_with_kernel_power_sums(tabular):
    """The kernel's power sums (hidden = identity, so logits = z) feed the exact estimator."""
    z, a, adv = tabular
    res = fused_logprob_entropy(z.float(), torch.eye(z.size(1)), a, power_sums=True)
    predicted = token_entropy_change(
        res.logp, res.entropy, adv.float(), estimator="exact", sum_p2=res.sum_p2, sum_p2_logp=res.sum_p2_logp, lr=1e-6
    )
    torch.testing.assert_close(predicted.double(), finite_difference(z, a, adv, 1e-6), rtol=2e-3, atol=1e-10)


def test_heuristics_are_their_formulas_and_differ_from_exact(tabular):
    z, a, adv = tabular
    logp, entropy, s2, s2l = stats(z, a)
    p = logp.exp()
    opefo = token_entropy_change(logp, entropy, adv, estimator="opefo", lr=0.5)
    steer = token_entropy_change(logp, entropy, adv, estimator="steer", lr=0.5)
    torch.testing.assert_close(opefo.double(), -0.5 * adv * (1 - p) ** 2 * (logp + entropy))  # OPEFO eq. 6
    torch.testing.assert_close(steer.double(), -0.5 * adv * (1 - p) * (logp + entropy))
    exact = token_entropy_change(logp, entropy, adv, estimator="exact", sum_p2=s2, sum_p2_logp=s2l, lr=0.5)
    measured = finite_difference(z, a, adv, 1e-6) * 0.5e6
    # The heuristics are not the first-order change: they err where the exact form does not.
    assert (opefo.double() - measured).abs().max() > 100 * (exact.double() - measured).abs().max()


def test_hand_computed_two_token_case():
    """V = 2, p = (0.8, 0.2), sampled token 0, A = 1, lr = 1: each estimator by hand."""
    p0, p1 = 0.8, 0.2
    import math

    h = -(p0 * math.log(p0) + p1 * math.log(p1))
    logp = torch.tensor([math.log(p0)])
    gap = math.log(p0) + h
    s2, s2l = p0**2 + p1**2, p0**2 * math.log(p0) + p1**2 * math.log(p1)
    kw = dict(sum_p2=torch.tensor([s2]), sum_p2_logp=torch.tensor([s2l]))
    one, ent = torch.tensor([1.0]), torch.tensor([h])
    assert token_entropy_change(logp, ent, one).item() == pytest.approx(-(0.2**2) * gap, rel=1e-6)
    assert token_entropy_change(logp, ent, one, estimator="steer").item() == pytest.approx(-0.2 * gap, rel=1e-6)
    exact = -(p0 * gap - (s2l + h * s2))
    assert token_entropy_change(logp, ent, one, estimator="exact", **kw).item() == pytest.approx(exact, rel=1e-6)
    # Two tokens: dH/dz0 = -p0 p1 log(p0/p1), step on token 0 moves z0 - z1 by 2 * p1 -> exact = -2 p0 p1^2 log(p0/p1)
    assert exact == pytest.approx(-2 * p0 * p1**2 * math.log(p0 / p1), rel=1e-9)


def test_shapes_and_errors():
    logp, ent = torch.full((3, 5), -1.0), torch.full((3, 5), 1.5)
    out = token_entropy_change(logp, ent, torch.tensor([1.0, -1.0, 0.0]))
    assert out.shape == (3, 5) and (out[0] < 0).all() and (out[1] > 0).all() and (out[2] == 0).all()
    with pytest.raises(ValueError, match="power_sums=True"):
        token_entropy_change(logp, ent, torch.ones(3), estimator="exact")
    with pytest.raises(ValueError, match="Unknown entropy-change estimator"):
        token_entropy_change(logp, ent, torch.ones(3), estimator="nope")
