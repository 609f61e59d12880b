"""Helpers shared by the experiments: building manifolds from config names, intervals, plots."""

from __future__ import annotations

import numpy as np

from tangentlab.errors import ConfigError, TangentlabError

__all__ = ["build_manifold", "mean_ci", "rel_err", "new_figure", "max_normal_curvature"]

#: Default parameters per manifold name used by the experiments (curvatures of order 1).
DEFAULT_PARAMS: dict[str, dict] = {
    "circle": {"radius": 1.0},
    "helix": {"a": 1.0, "b": 0.5},
    "sphere": {"m": 2, "radius": 1.0},
    "flat-torus": {"r1": 1.0, "r2": 1.5},
    "torus": {"R": 2.0, "r": 1.0},
    "hyperbolic": {"y_min": 1.5, "y_max": 2.5},
    "immersion": {"m": 2, "native_dim": 5, "hidden": 16, "scale": 1.0, "seed": 0},
}


def build_manifold(name: str, ambient_dim: int, rotation_seed: int):
    """A manifold by config name, placed in R^ambient_dim; bad names/dims become ConfigError."""
    from tangentlab.synthetic.manifolds import make_manifold

    params = dict(DEFAULT_PARAMS.get(name, {}))
    try:
        return make_manifold(name, ambient_dim=ambient_dim, rotation_seed=rotation_seed, **params)
    except TangentlabError as exc:
        raise ConfigError(f"manifold {name!r} in R^{ambient_dim}: {exc}") from None


def mean_ci(values, z: float = 1.96) -> tuple[float, float, float]:
    """Mean and normal-approximation interval mean ± z·SE of independent replicates."""
    v = np.asarray(values, dtype=np.float64)
    mu = float(v.mean())
    if v.size < 2:
        return mu, float("nan"), float("nan")
    se = float(v.std(ddof=1) / np.sqrt(v.size))
    return mu, mu - z * se, mu + z * se


def rel_err(measured: float, predicted: float) -> float:
    return float(abs(measured - predicted) / abs(predicted)) if predicted != 0 else float("inf")


def new_figure(ncols: int = 1, width: float = 4.2, height: float = 3.2):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, ncols, figsize=(width * ncols, height), squeeze=False)
    return fig, axes[0]


def max_normal_curvature(ii: np.ndarray, seed: int = 0) -> float:
    """κ = max over unit v of ‖II(v, v)‖ from shape matrices ``ii`` of shape (k, m, m).

    Exact for m = 1; a fine angle grid for m = 2; for m >= 3 the max over 20000 random unit
    vectors (a lower bound, within ~1e-3 relative for small m).
    """
    ii = np.asarray(ii, dtype=np.float64)
    m = ii.shape[-1]
    if m == 1:
        V = np.ones((1, 1))
    elif m == 2:
        a = np.linspace(0, np.pi, 3601)
        V = np.stack([np.cos(a), np.sin(a)], axis=1)
    else:
        V = np.random.default_rng(seed).standard_normal((20000, m))
        V /= np.linalg.norm(V, axis=1, keepdims=True)
    vals = np.einsum("kij,ni,nj->nk", ii, V, V)
    return float(np.sqrt((vals**2).sum(1)).max())
