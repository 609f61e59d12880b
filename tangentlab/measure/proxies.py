"""Tangent-proxy extractors with the scikit-learn estimator contract.

Each extractor fits a rank-r subspace ("tangent proxy") to activations X of shape ``(n, d)``:

- ``__init__`` only stores keyword parameters; the rank is ``n_components``, the seed
  ``random_state``; an unknown parameter raises ConfigError (values are checked in ``fit``);
- ``fit(X)`` returns ``self``; learned state ends in ``_``; ``components_`` has shape ``(r, d)``;
- ``transform(X)`` gives codes ``(n, r)``, ``inverse_transform(Z)`` reconstructions ``(n, d)``;
- ``basis()`` returns an orthonormal ``(d, r)`` basis of the proxy subspace (QR of
  ``components_.T`` with the positive-diagonal convention, except where a class says otherwise);
- ``get_params()`` / ``set_params(**params)`` (``sklearn.base.clone`` works).

Extractors: :class:`PCAProxy`, :class:`SemiNMFProxy`, :class:`ICAProxy`, :class:`TopKSAEProxy`;
:func:`make_proxy` builds one by name (``PROXY_NAMES``). A pretrained basis or dictionary
(an SAE decoder, a basis computed elsewhere) is a proxy too: :class:`BasisProxy`, or
``make_proxy("basis:PATH")`` (options after ``?``: ``basis:sae.safetensors?key=W_dec&select=energy``).

Example::

    >>> import numpy as np
    >>> from tangentlab.measure import make_proxy
    >>> X = np.random.default_rng(0).standard_normal((200, 6)) * np.r_[9, 8, 1, 1, 1, 1]
    >>> make_proxy("pca", n_components=2).fit(X).basis().shape
    (6, 2)
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np

from tangentlab.errors import ConfigError, ValidationError
from tangentlab.measure._validate import as_points, check_positive_int, check_rank, to_float64
from tangentlab.measure.subspace import orthonormalize
from tangentlab.registry import Registry
from tangentlab.typing import ArrayLike

__all__ = [
    "PCAProxy",
    "SemiNMFProxy",
    "ICAProxy",
    "TopKSAEProxy",
    "BasisProxy",
    "PROXY_NAMES",
    "make_proxy",
]


class _Proxy(abc.ABC):
    """Shared contract: parameters, validation, ``basis()``, the linear ``transform`` (abstract).

    A proxy implements :meth:`fit`; one whose codes are not linear overrides :meth:`transform`.
    """

    _param_names: tuple[str, ...] = ()

    def _store(self, params: dict[str, Any], unknown: dict[str, Any]) -> None:
        if unknown:
            raise ConfigError(
                f"{type(self).__name__} got unknown parameter(s) {sorted(unknown)}; "
                f"known: {list(self._param_names)}"
            )
        for k in self._param_names:
            setattr(self, k, params[k])

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters as a dict."""
        return {k: getattr(self, k) for k in self._param_names}

    def set_params(self, **params: Any):
        """Set constructor parameters; unknown names raise ConfigError. Returns self."""
        unknown = [k for k in params if k not in self._param_names]
        if unknown:
            raise ConfigError(
                f"{type(self).__name__} has no parameter(s) {sorted(unknown)}; "
                f"known: {list(self._param_names)}"
            )
        for k, v in params.items():
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._param_names)
        return f"{type(self).__name__}({args})"

    # -- helpers -------------------------------------------------------------------------------
    def _validate_fit(self, X: Any, extra_rows: int = 1) -> tuple[np.ndarray, int]:
        arr = to_float64(X, "X")
        d = arr.shape[1] if arr.ndim == 2 else 0
        X = as_points(arr, name="X")
        r = check_rank(self.n_components, d, name="n_components")
        if not isinstance(self.random_state, (int, np.integer)) or isinstance(self.random_state, bool):
            raise ConfigError(f"random_state must be an integer seed, got {self.random_state!r}")
        from tangentlab.errors import InsufficientSamplesError

        if X.shape[0] < r + extra_rows:
            raise InsufficientSamplesError(
                f"X has {X.shape[0]} rows but rank n_components={r} needs at least "
                f"{r + extra_rows}; pass more samples or lower the rank"
            )
        return X, r

    def _check_fitted(self) -> None:
        if not hasattr(self, "components_"):
            raise ValidationError(f"{type(self).__name__} is not fitted; call fit(X) first")

    def _validate_X(self, X: Any) -> np.ndarray:
        self._check_fitted()
        return as_points(X, name="X", dim=self.components_.shape[1])

    def _validate_Z(self, Z: Any) -> np.ndarray:
        self._check_fitted()
        return as_points(Z, name="Z", dim=self.components_.shape[0])

    def basis(self) -> np.ndarray:
        """Orthonormal basis ``(d, r)`` of the span of the rows of ``components_``."""
        self._check_fitted()
        return orthonormalize(self.components_.T)

    @abc.abstractmethod
    def fit(self, X: ArrayLike, y: Any = None) -> _Proxy:
        """Learn the proxy from ``X`` of shape (n, d); returns self."""

    def transform(self, X: ArrayLike) -> np.ndarray:
        """Codes of ``X``, shape (n, d) → (n, r): ``(X - mean_) @ components_.T``."""
        X = self._validate_X(X)
        return (X - self.mean_) @ self.components_.T

    def fit_transform(self, X: ArrayLike, y: Any = None) -> np.ndarray:
        """``fit(X).transform(X)``."""
        return self.fit(X).transform(X)


def _sign_fix(rows: np.ndarray) -> np.ndarray:
    """Flip each row so its largest-magnitude entry is positive (deterministic signs)."""
    idx = np.argmax(np.abs(rows), axis=1)
    signs = np.sign(rows[np.arange(rows.shape[0]), idx])
    signs[signs == 0] = 1.0
    return rows * signs[:, None]


class PCAProxy(_Proxy):
    """Principal subspace: the top ``n_components`` eigenvectors of the covariance of X.

    Params: ``n_components`` (rank r), ``center`` (True: covariance around the mean; False: the
    uncentred second moment ``X^T X / n``, the same convention as the energy oracle),
    ``random_state`` (unused; PCA is deterministic, kept for the common contract).

    Learned: ``components_`` ``(r, d)`` orthonormal rows, eigenvalue descending, each signed so its
    largest entry is positive; ``explained_variance_`` ``(r,)``; ``mean_`` ``(d,)`` (zeros when
    ``center=False``). ``transform(X) = (X - mean_) @ components_.T``.
    """

    _param_names = ("n_components", "center", "random_state")

    def __init__(self, n_components: int = 8, *, center: bool = True, random_state: int = 0,
                 **unknown: Any):
        self._store(dict(n_components=n_components, center=center, random_state=random_state),
                    unknown)

    def fit(self, X: ArrayLike, y: Any = None) -> PCAProxy:
        """Fit on activations ``X``, shape (n, d); returns ``self``."""
        X, r = self._validate_fit(X)
        self.mean_ = X.mean(axis=0) if self.center else np.zeros(X.shape[1])
        Xc = X - self.mean_
        M = Xc.T @ Xc / (X.shape[0] - 1 if self.center else X.shape[0])
        vals, vecs = np.linalg.eigh(M)
        order = np.argsort(vals)[::-1][:r]
        self.components_ = _sign_fix(vecs[:, order].T)
        self.explained_variance_ = vals[order]
        self.n_features_in_ = X.shape[1]
        return self

    def inverse_transform(self, Z: ArrayLike) -> np.ndarray:
        """Reconstruction of codes ``Z``, shape (n, r) → (n, d)."""
        Z = self._validate_Z(Z)
        return Z @ self.components_ + self.mean_


def _pos(A: np.ndarray) -> np.ndarray:
    return (np.abs(A) + A) / 2


def _neg(A: np.ndarray) -> np.ndarray:
    return (np.abs(A) - A) / 2


class SemiNMFProxy(_Proxy):
    """Semi-NMF (Ding, Li & Jordan 2010): ``X ~ Z D`` with codes ``Z >= 0``, dictionary D free.

    Convention: rows are samples. X ``(n, d)``, codes Z ``(n, r)`` non-negative, dictionary
    D ``(r, d)`` of any sign (in the paper's column convention ``X^T = F G^T`` with ``F = D^T``
    free and ``G = Z >= 0``). Alternating updates, each of which does not increase
    ``||X - Z D||_F^2``:

    - ``D = argmin ||X - Z D||`` (least squares, ``D = (Z^T Z)^+ Z^T X``);
    - ``Z <- Z * sqrt(((X D^T)^+ + Z (D D^T)^-) / ((X D^T)^- + Z (D D^T)^+))``, with
      ``A^+ = (|A| + A)/2`` and ``A^- = (|A| - A)/2``.

    Params: ``n_components`` (r), ``max_iter``, ``tol`` (stop when the relative loss decrease
    falls below it), ``init`` (``"kmeans"``: cluster indicators + 0.2 as in the paper, from
    scikit-learn KMeans seeded by ``random_state``; or ``"random"``: uniform(0.1, 1.1)),
    ``center`` (subtract the mean first; default False: concept extraction on raw activations),
    ``transform_iter`` (multiplicative updates with D fixed in ``transform``), ``random_state``.

    Learned: ``components_`` = D ``(r, d)``, ``codes_`` ``(n, r)``, ``mean_``, ``loss_history_``
    (``||X - Z D||_F^2`` after each iteration), ``n_iter_``. ``basis()`` is the QR of
    ``components_.T``: the dictionary's row span, orthonormalised.
    """

    _param_names = ("n_components", "max_iter", "tol", "init", "center", "transform_iter",
                    "random_state")

    def __init__(self, n_components: int = 8, *, max_iter: int = 200, tol: float = 1e-6,
                 init: str = "kmeans", center: bool = False, transform_iter: int = 200,
                 random_state: int = 0, **unknown: Any):
        self._store(dict(n_components=n_components, max_iter=max_iter, tol=tol, init=init,
                         center=center, transform_iter=transform_iter,
                         random_state=random_state), unknown)

    @staticmethod
    def _update_codes(X: np.ndarray, Z: np.ndarray, D: np.ndarray) -> np.ndarray:
        XD = X @ D.T
        DD = D @ D.T
        num = _pos(XD) + Z @ _neg(DD)
        den = _neg(XD) + Z @ _pos(DD)
        tiny = 1e-300
        return Z * np.sqrt(num / np.maximum(den, tiny))

    def _init_codes(self, X: np.ndarray, r: int) -> np.ndarray:
        if self.init == "kmeans":
            from sklearn.cluster import KMeans

            labels = KMeans(n_clusters=r, n_init=1, random_state=self.random_state).fit_predict(X)
            Z = np.full((X.shape[0], r), 0.2)
            Z[np.arange(X.shape[0]), labels] += 1.0
            return Z
        if self.init == "random":
            return np.random.default_rng(self.random_state).uniform(0.1, 1.1, (X.shape[0], r))
        raise ConfigError(f"init must be 'kmeans' or 'random', got {self.init!r}")

    def fit(self, X: ArrayLike, y: Any = None) -> SemiNMFProxy:
        """Fit on activations ``X``, shape (n, d); returns ``self``."""
        X, r = self._validate_fit(X)
        max_iter = check_positive_int(self.max_iter, "max_iter")
        self.mean_ = X.mean(axis=0) if self.center else np.zeros(X.shape[1])
        Xc = X - self.mean_
        Z = self._init_codes(Xc, r)
        D = np.linalg.lstsq(Z, Xc, rcond=None)[0]
        losses: list[float] = [float(np.sum((Xc - Z @ D) ** 2))]
        it = 0
        for it in range(1, max_iter + 1):  # noqa: B007
            Z = self._update_codes(Xc, Z, D)
            D = np.linalg.lstsq(Z, Xc, rcond=None)[0]
            losses.append(float(np.sum((Xc - Z @ D) ** 2)))
            prev, cur = losses[-2], losses[-1]
            if prev <= 0 or (prev - cur) <= self.tol * prev:
                break
        self.components_ = D
        self.codes_ = Z
        self.loss_history_ = np.asarray(losses)
        self.n_iter_ = it
        self.n_features_in_ = X.shape[1]
        return self

    def transform(self, X: ArrayLike) -> np.ndarray:
        """Non-negative codes ``(n, r)`` for X with D fixed (``transform_iter`` updates)."""
        X = self._validate_X(X) - self.mean_
        D = self.components_
        Z0 = X @ np.linalg.pinv(D)
        Z = np.maximum(Z0, 0) + 0.1 * (np.abs(Z0).mean() + 1e-12)
        for _ in range(check_positive_int(self.transform_iter, "transform_iter")):
            Z = self._update_codes(X, Z, D)
        return Z

    def inverse_transform(self, Z: ArrayLike) -> np.ndarray:
        """Reconstruction of codes ``Z``, shape (n, r) → (n, d)."""
        Z = self._validate_Z(Z)
        return Z @ self.components_ + self.mean_


class ICAProxy(_Proxy):
    """Independent components (scikit-learn ``FastICA``) as a proxy.

    Params: ``n_components`` (r), ``whiten`` (FastICA's, default ``"unit-variance"``), ``fun``,
    ``max_iter``, ``tol``, ``random_state``.

    Learned: ``components_`` ``(r, d)`` the unmixing matrix (scikit-learn's meaning: sources are
    ``(X - mean_) @ components_.T``), ``mixing_`` ``(d, r)``, ``mean_``. ``basis()`` is the QR of
    ``mixing_``, the source directions in data space. With whitening, that span equals the
    top-r PCA span: ICA changes the axes inside it, not the subspace.
    """

    _param_names = ("n_components", "whiten", "fun", "max_iter", "tol", "random_state")

    def __init__(self, n_components: int = 8, *, whiten: str = "unit-variance",
                 fun: str = "logcosh", max_iter: int = 500, tol: float = 1e-4,
                 random_state: int = 0, **unknown: Any):
        self._store(dict(n_components=n_components, whiten=whiten, fun=fun, max_iter=max_iter,
                         tol=tol, random_state=random_state), unknown)

    def fit(self, X: ArrayLike, y: Any = None) -> ICAProxy:
        """Fit on activations ``X``, shape (n, d); returns ``self``."""
        X, r = self._validate_fit(X, extra_rows=2)
        from sklearn.decomposition import FastICA

        ica = FastICA(n_components=r, whiten=self.whiten, fun=self.fun, max_iter=self.max_iter,
                      tol=self.tol, random_state=self.random_state)
        ica.fit(X)
        self._ica = ica
        self.components_ = np.asarray(ica.components_, dtype=np.float64)
        self.mixing_ = np.asarray(ica.mixing_, dtype=np.float64)
        self.mean_ = np.asarray(getattr(ica, "mean_", np.zeros(X.shape[1])), dtype=np.float64)
        self.n_iter_ = int(ica.n_iter_)
        self.n_features_in_ = X.shape[1]
        return self

    def inverse_transform(self, Z: ArrayLike) -> np.ndarray:
        """Reconstruction of codes ``Z``, shape (n, r) → (n, d)."""
        Z = self._validate_Z(Z)
        return Z @ self.mixing_.T + self.mean_

    def basis(self) -> np.ndarray:
        """Orthonormal ``(d, r)`` basis of span(``mixing_``)."""
        self._check_fitted()
        return orthonormalize(self.mixing_)


class TopKSAEProxy(_Proxy):
    """A small TopK sparse autoencoder (Makhzani & Frey 2013; Gao et al. 2024), trained in torch.

    ``z = TopK_k(ReLU((x - b_dec) W_enc + b_enc))``, ``x_hat = z W_dec + b_dec``, with
    ``n_components`` latents (r) and ``k`` active per row; loss mean squared error; Adam; decoder
    rows renormalised to unit norm after every step. ``b_dec`` starts at the data mean
    (``center=True``) or zero. Training is float32 on CPU, seeded by ``random_state`` through a
    ``torch.Generator`` (initialisation and mini-batches), so a seed gives identical weights.

    Params: ``n_components`` (r), ``k`` (default None = ``max(1, r // 2)``), ``n_steps``,
    ``batch_size``, ``lr``, ``center``, ``random_state``. Training uses one torch thread.

    Learned: ``components_`` = ``W_dec`` ``(r, d)`` unit rows, ``encoder_`` ``(d, r)``,
    ``encoder_bias_`` ``(r,)``, ``decoder_bias_`` ``(d,)``, ``loss_history_`` (per step).
    ``basis()`` is the QR of the decoder directions (dead latents keep their initial direction).
    """

    _param_names = ("n_components", "k", "n_steps", "batch_size", "lr", "center", "random_state")

    def __init__(self, n_components: int = 8, *, k: int | None = None, n_steps: int = 500,
                 batch_size: int = 256, lr: float = 1e-2, center: bool = True,
                 random_state: int = 0, **unknown: Any):
        self._store(dict(n_components=n_components, k=k, n_steps=n_steps,
                         batch_size=batch_size, lr=lr, center=center,
                         random_state=random_state), unknown)

    def _k(self, r: int) -> int:
        k = max(1, r // 2) if self.k is None else check_positive_int(self.k, "k")
        if k > r:
            raise ConfigError(f"k={k} active latents exceeds n_components={r}; need k <= r")
        return k

    @staticmethod
    def _encode(x, w_enc, b_enc, b_dec, k: int):
        import torch

        pre = torch.relu((x - b_dec) @ w_enc + b_enc)
        vals, idx = torch.topk(pre, k, dim=1)
        return torch.zeros_like(pre).scatter(1, idx, vals)

    def fit(self, X: ArrayLike, y: Any = None) -> TopKSAEProxy:
        """Train the SAE on X ``(n, d)``; returns self.

        Runs with one torch thread (restored afterwards): the model is tiny, and on a loaded
        2-core machine two threads made training about 10x slower.
        """
        import torch

        prev = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self._fit(X)
        finally:
            torch.set_num_threads(prev)

    def _fit(self, X: Any) -> TopKSAEProxy:
        import torch

        X, r = self._validate_fit(X)
        k = self._k(r)
        n_steps = check_positive_int(self.n_steps, "n_steps")
        batch = min(check_positive_int(self.batch_size, "batch_size"), X.shape[0])
        n, d = X.shape
        gen = torch.Generator().manual_seed(int(self.random_state))
        data = torch.from_numpy(X).to(torch.float32)
        w_dec = torch.randn(r, d, generator=gen)
        w_dec = w_dec / w_dec.norm(dim=1, keepdim=True)
        w_dec.requires_grad_(True)
        w_enc = w_dec.detach().T.clone().requires_grad_(True)
        b_enc = torch.zeros(r, requires_grad=True)
        b0 = data.mean(dim=0) if self.center else torch.zeros(d)
        b_dec = b0.clone().requires_grad_(True)
        opt = torch.optim.Adam([w_enc, b_enc, w_dec, b_dec], lr=float(self.lr))
        losses = np.empty(n_steps)
        for step in range(n_steps):
            idx = torch.randint(0, n, (batch,), generator=gen)
            x = data[idx]
            z = self._encode(x, w_enc, b_enc, b_dec, k)
            loss = ((z @ w_dec + b_dec - x) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                w_dec /= w_dec.norm(dim=1, keepdim=True).clamp_min(1e-12)
            losses[step] = float(loss.detach())
        self.components_ = w_dec.detach().to(torch.float64).numpy().copy()
        self.encoder_ = w_enc.detach().to(torch.float64).numpy().copy()
        self.encoder_bias_ = b_enc.detach().to(torch.float64).numpy().copy()
        self.decoder_bias_ = b_dec.detach().to(torch.float64).numpy().copy()
        self.k_ = k
        self.loss_history_ = losses
        self.n_features_in_ = d
        return self

    def transform(self, X: ArrayLike) -> np.ndarray:
        """Codes of ``X``, shape (n, d) → (n, r) (top-k sparse)."""
        import torch

        X = self._validate_X(X)
        z = self._encode(torch.from_numpy(X), torch.from_numpy(self.encoder_),
                         torch.from_numpy(self.encoder_bias_),
                         torch.from_numpy(self.decoder_bias_), self.k_)
        return z.numpy()

    def inverse_transform(self, Z: ArrayLike) -> np.ndarray:
        """Reconstruction of codes ``Z``, shape (n, r) → (n, d)."""
        Z = self._validate_Z(Z)
        return Z @ self.components_ + self.decoder_bias_


class BasisProxy(_Proxy):
    """A given basis or dictionary decoder as the proxy: read, oriented, selected, orthonormalised.

    Params: ``source`` (a ``.npy``/``.safetensors`` file, a SAELens or sparsify folder, or
    ``hub:ORG/NAME[/FOLDER]``; see :mod:`tangentlab.measure.dictionaries`), ``n_components``
    (r; None = every atom), ``orientation`` (``auto``, ``columns``: the matrix is (d, m), one atom
    per column; ``rows``: (m, d), one atom per row, as SAELens stores ``W_dec`` (d_sae, d_in) and
    sparsify ``W_dec`` (num_latents, d_in)), ``select`` (which r of m atoms when r < m: ``first``,
    ``energy``: the r unit atoms with the largest mean squared projection of the fitting data X,
    or ``auto``: ``energy`` for an overcomplete dictionary (m > d), else ``first``), ``key`` (the
    tensor in a safetensors file), ``random_state`` (unused; the common contract).

    The orientation rule (``auto``): a format that fixes it (SAE folders: rows) wins; otherwise the
    axis whose length equals the data's d is the feature axis; a square (d, d) matrix is read as
    columns. An axis ≠ d where the rule needs d is a :class:`~tangentlab.errors.ShapeError`
    naming both dimensions.

    ``fit(X)`` only reads X for its d (and for ``select="energy"``). Learned: ``components_``
    (r, d) orthonormal rows (QR of the selected atoms, positive-diagonal convention, so the first
    atom's direction is kept), ``atoms_`` (the selected atom indices), ``variant_`` (one line:
    source, format, orientation, selection, QR), ``source_`` (a dict for manifests).
    """

    _param_names = ("source", "n_components", "orientation", "select", "key", "random_state")

    def __init__(self, source: str = "", n_components: int | None = None, *,
                 orientation: str = "auto", select: str = "auto", key: str | None = None,
                 random_state: int = 0, **unknown: Any):
        self._store(dict(source=source, n_components=n_components, orientation=orientation,
                         select=select, key=key, random_state=random_state), unknown)

    def _orient(self, M: np.ndarray, fixed: str | None, d: int) -> tuple[np.ndarray, str]:
        o = self.orientation
        if o not in ("auto", "rows", "columns"):
            raise ConfigError(f"orientation must be auto, rows or columns; got {o!r}")
        if o == "auto":
            if fixed is not None:
                o = fixed
            elif M.shape[0] == d:
                o = "columns"
            elif M.shape[1] == d:
                o = "rows"
            else:
                from tangentlab.errors import ShapeError

                raise ShapeError(
                    f"basis {self.source!r} has shape {M.shape} but the activations have d={d}: "
                    f"neither dimension ({M.shape[0]} or {M.shape[1]}) equals d; was it trained "
                    "for another model or site?"
                )
        D = M if o == "columns" else M.T
        if D.shape[0] != d:
            from tangentlab.errors import ShapeError

            raise ShapeError(
                f"basis {self.source!r} read as {o} has dimension {D.shape[0]} (shape {M.shape}) "
                f"but the activations have d={d}; use the matching orientation or the dictionary "
                "of this model's site"
            )
        return D, o

    def fit(self, X: ArrayLike, y: Any = None) -> BasisProxy:
        """Fit on activations ``X``, shape (n, d) (used only to select atoms); returns ``self``."""
        from tangentlab.errors import RankError
        from tangentlab.measure.dictionaries import load_dictionary

        X = as_points(to_float64(X, "X"), name="X")
        d = X.shape[1]
        if not self.source:
            raise ConfigError("BasisProxy needs source= (a basis file, an SAE folder, or hub:...)")
        if self.select not in ("auto", "first", "energy"):
            raise ConfigError(f"select must be auto, first or energy; got {self.select!r}")
        dm = load_dictionary(self.source, key=self.key)
        if not np.all(np.isfinite(dm.matrix)):
            from tangentlab.errors import NonFiniteError

            raise NonFiniteError(f"basis {self.source!r} holds NaN or Inf entries")
        D, orient = self._orient(dm.matrix, dm.orientation, d)
        m = D.shape[1]
        r = m if self.n_components is None else check_positive_int(self.n_components, "n_components")
        if r > m:
            raise RankError(
                f"n_components={r} but basis {self.source!r} has only {m} atoms; lower the rank"
            )
        if r >= d:
            raise RankError(
                f"a rank-{r} proxy in dimension d={d} leaves no normal space; need r < d "
                f"(the basis has {m} atoms: pass n_components)"
            )
        sel = self.select if self.select != "auto" else ("energy" if m > d else "first")
        if r == m:
            idx = np.arange(m)
            sel = "all"
        elif sel == "first":
            idx = np.arange(r)
        else:
            norms = np.linalg.norm(D, axis=0)
            U = D / np.where(norms > 0, norms, 1.0)
            score = np.mean((X @ U) ** 2, axis=0) * (norms > 0)
            idx = np.sort(np.argsort(-score, kind="stable")[:r])
        Q = orthonormalize(D[:, idx])
        self.components_ = Q.T
        self.atoms_ = idx
        self.n_features_in_ = d
        key = f"[{dm.key}]" if dm.key else ""
        self.variant_ = (
            f"basis {dm.source}{key} ({dm.fmt}, {orient}, {m} atoms in d={d}), "
            f"{sel} {r} of {m}, QR-orthonormalised"
        )
        self.source_ = {"source": dm.source, "path": dm.path, "format": dm.fmt, "key": dm.key,
                        "orientation": orient, "shape": list(dm.matrix.shape), "atoms": m,
                        "select": sel, "rank": r, "meta": dm.meta}
        return self

    def transform(self, X: ArrayLike) -> np.ndarray:
        """Codes of ``X``, shape (n, d) → (n, r)."""
        X = self._validate_X(X)
        return X @ self.components_.T

    def inverse_transform(self, Z: ArrayLike) -> np.ndarray:
        """Reconstruction of codes ``Z``, shape (n, r) → (n, d)."""
        Z = self._validate_Z(Z)
        return Z @ self.components_


_PROXIES = Registry("proxy", {"pca": "tangentlab.measure.proxies:PCAProxy",
                              "seminmf": "tangentlab.measure.proxies:SemiNMFProxy",
                              "ica": "tangentlab.measure.proxies:ICAProxy",
                              "sae": "tangentlab.measure.proxies:TopKSAEProxy"},
                    known="choose one of", hint=", or basis:PATH")
PROXY_NAMES: tuple[str, ...] = _PROXIES.names()


def _basis_spec(spec: str) -> dict[str, Any]:
    """``PATH?key=K&select=S&orientation=O`` → BasisProxy parameters."""
    from urllib.parse import parse_qsl

    path, _, query = spec.partition("?")
    if not path:
        raise ConfigError("basis: needs a path, e.g. basis:decoder.npy or basis:hub:ORG/NAME/FOLDER")
    opts: dict[str, Any] = {"source": path}
    allowed = ("key", "select", "orientation")
    for k, v in parse_qsl(query, keep_blank_values=True):
        if k not in allowed:
            raise ConfigError(f"basis option {k!r} is unknown; use {', '.join(allowed)}")
        opts[k] = v
    return opts


def make_proxy(name: str, **params: Any) -> _Proxy:
    """A proxy by name (``PROXY_NAMES``), or a BasisProxy from ``basis:PATH[?key=&select=&orientation=]``.

    Unknown names raise UnknownNameError; unknown parameters raise ConfigError.
    """
    if str(name).startswith("basis:"):
        opts = _basis_spec(str(name)[len("basis:"):])
        clash = sorted(set(opts) & set(params))
        if clash:
            raise ConfigError(f"{clash} given both in {name!r} and as parameters")
        return BasisProxy(**opts, **params)
    if str(name).lower() not in _PROXIES:  # the names are case-insensitive
        _PROXIES.load(str(name))  # UnknownNameError naming the known ones
    return _PROXIES.load(str(name).lower())(**params)
