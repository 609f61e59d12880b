"""tangent-amplification: independent toy simulation, bounds, mutations."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from tangentlab.errors import ValidationError
from tangentlab.theory import get
from tangentlab.theory.amplification import (
    isotropy_score,
    normal_displacement_bound,
    normal_to_tangent_displacement,
    tangent_share,
)


def test_toy_closed_forms_match_independent_simulation():
    rng = np.random.default_rng(3)
    n, m, D, eta, lam, tau, sigma, kappa = 100_000, 2, 7, 0.05, 2.0, 0.7, 0.3, 1.2
    ustar = tau * rng.standard_normal((n, m))
    noise = sigma * rng.standard_normal((n, D))
    u = np.zeros((n, m))
    for k in range(41):
        if k in (0, 5, 40):
            x = noise.copy()
            x[:, :m] += u
            x[:, m] += 0.5 * kappa * np.sum(u * u, 1)  # A = kappa I: ||II||^2 = m kappa^2
            C = np.cov(x, rowvar=False)
            share = np.trace(C[:m, :m]) / np.trace(C)
            pr = np.trace(C) ** 2 / (D * np.trace(C @ C))
            kw = dict(step=k, eta=eta, lam=lam, tau=tau, ii_norm_sq=m * kappa**2, m=m, dim=D,
                      sigma=sigma)
            assert share == pytest.approx(tangent_share(**kw), rel=0.015)
            assert pr == pytest.approx(isotropy_score(**kw), rel=0.015)
        u = u - eta * lam * (u - ustar)  # gradient descent on lam/2 |u - u*|^2


def test_share_rises_iff_condition():
    # tau^2 ||II||^2 < 2 (D - m): the share ends above m/D; otherwise below
    lo = tangent_share(10_000, 0.1, tau=1.0, ii_norm_sq=1.0, m=2, dim=8, sigma=0.1)
    hi = tangent_share(10_000, 0.1, tau=1.0, ii_norm_sq=20.0, m=2, dim=8, sigma=0.1)
    assert lo > 2 / 8 > hi
    assert tangent_share(0, 0.1, m=2, dim=8) == pytest.approx(2 / 8)


def test_displacement_bound_holds_for_random_steps():
    rng = np.random.default_rng(4)
    for _ in range(200):
        kappa = rng.uniform(0.1, 3)
        u, du = rng.standard_normal(3), rng.standard_normal(3) * rng.uniform(0.01, 1)
        q = lambda w, kappa=kappa: 0.5 * kappa * w @ w  # noqa: E731
        normal = abs(q(u + du) - q(u))
        assert normal <= normal_displacement_bound(kappa, np.linalg.norm(u), 1.0,
                                                   np.linalg.norm(du)) + 1e-12
        ratio = normal / np.linalg.norm(du)
        assert ratio <= normal_to_tangent_displacement(kappa, np.linalg.norm(u), 1.0,
                                                       np.linalg.norm(du)) + 1e-12


def test_bad_parameters():
    with pytest.raises(ValidationError, match="dim must exceed m"):
        tangent_share(3, 0.1, m=4, dim=4)
    with pytest.raises(ValidationError):
        tangent_share(-1, 0.1)


def test_mutation_half_fails_verify():
    d = get("tangent-amplification").mutated("chart", lambda e: sp.Eq(e.lhs, 1))
    assert not d.verify(seed=0).passed
