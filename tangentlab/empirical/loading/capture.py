"""Capture activations and true per-token gradients at named sites, with hooks that prove they fired.

One forward and one backward pass of the model's own training loss (MLM on the masked positions
for an encoder, next-token for a decoder) give, at every requested site, the activations h_i and
the gradients g_i = ∂L/∂h_i of the *summed* per-token loss L (not the mean, so a row's gradient
does not depend on the batch size). Parameters are frozen during capture (``requires_grad`` off)
and gradients are taken with ``torch.autograd.grad`` with respect to the site tensors only.

Row selection (``CaptureBatch.rows``): real (non-padding) tokens; for a decoder, the last position
of each window (no target, gradient exactly zero) is excluded. For an encoder ``masked`` marks
the positions whose tokens were masked (the loss lives there; every position gets a gradient).

Sites are returned under the names the caller gave: ask for ``blocks.-1.hook_resid_post`` and
``acts`` and ``grads`` hold ``blocks.-1.hook_resid_post`` (an alias in, the same alias out; two
names of one site are an error). ``edit`` may name a site by any of its names.

A site whose hook never fired, fired twice in one pass, produced a tensor of the wrong shape, or
whose gradient did not reach it (disconnected), raises :class:`~tangentlab.errors.CaptureError`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tangentlab.errors import CaptureError, ValidationError

__all__ = ["CaptureBatch", "capture_batch", "edit_activations", "edited_losses",
           "row_scale_whitener", "site_hooks", "token_losses"]


@dataclass
class CaptureBatch:
    """What one capture pass returns.

    Attributes:
        acts: site → activations, shape (B, T, d), detached.
        grads: site → ∂L/∂h, shape (B, T, d) (empty dict when ``grads=False`` or no LM head).
        input_ids: shape (B, T).
        rows: bool (B, T): positions that are rows (real tokens; decoder: with a target).
        masked: bool (B, T): MLM-masked positions (all False for a decoder).
        loss_sum: the summed per-token loss L (float; NaN without an LM head).
        n_targets: number of positions that carry a loss term.
    """

    acts: dict[str, Any]
    grads: dict[str, Any]
    input_ids: Any
    rows: Any
    masked: Any
    loss_sum: float
    n_targets: int


@contextlib.contextmanager
def site_hooks(model, sites: Sequence[str], *, make_leaf: bool, edit=None) -> Iterator[dict]:
    """Register forward hooks on ``sites``; yields a dict site → list of captured outputs.

    The dict's keys are the names in ``sites`` as given (aliases kept).
    ``make_leaf``: when a site's output does not require grad (frozen parameters upstream), it
    is replaced by a detached copy that does, so the gradient can be taken with respect to it.
    ``edit``: optional ``{site: fn(tensor) -> tensor}`` applied to the output (ablation/steering);
    its keys may be any name of a hooked site.

    Raises:
        CaptureError: two names of one site, or an ``edit`` for a site that is not hooked.
    """
    from tangentlab.empirical.loading.sites import normalize_site, site_module

    store: dict[str, list] = {}
    handles = []
    canonical: dict[str, str] = {}  # canonical name → the name asked for
    edits: dict[str, Any] = {}

    def make(key: str, site: str):
        def hook(_mod, _inp, output):
            out = output[0] if isinstance(output, tuple) else output
            if make_leaf and not out.requires_grad:
                out = out.detach().requires_grad_(True)
            if site in edits:
                out = edits[site](out)
            store[key].append(out)
            if isinstance(output, tuple):
                return (out,) + tuple(output[1:])
            return out

        return hook

    try:
        for s in sites:
            name = normalize_site(model, s)
            if name in canonical:
                also = "" if canonical[name] == s else f" (as {canonical[name]!r} and {s!r})"
                raise CaptureError(f"site {name!r} was requested twice{also}")
            canonical[name] = s
            store[s] = []
            handles.append(site_module(model, name).register_forward_hook(make(s, name)))
        for k, fn in (edit or {}).items():
            name = normalize_site(model, k)
            if name not in canonical:
                raise CaptureError(f"edit names site {k!r}, which is not captured "
                                   f"(sites: {', '.join(canonical.values())})")
            edits[name] = fn
        yield store
    finally:
        for h in handles:
            h.remove()


def token_losses(logits, labels, arch: str):
    """Per-position loss, shape (B, T) (0 where there is no target), and the target mask (B, T).

    Decoder: position t predicts label t+1 (last position: no target). Encoder: positions with
    label != -100 (the masked ones).
    """
    import torch
    import torch.nn.functional as F

    from tangentlab.empirical.loading.models import to_stat

    B, T, V = logits.shape
    if arch == "decoder":
        tgt = torch.full_like(labels, -100)
        tgt[:, :-1] = labels[:, 1:]
    else:
        tgt = labels
    valid = tgt != -100
    # float32 or wider (never down: a float64 finite-difference check must stay float64)
    ce = F.cross_entropy(to_stat(logits).reshape(-1, V), tgt.clamp_min(0).reshape(-1),
                         reduction="none").reshape(B, T)
    return ce * valid, valid


def capture_batch(loaded, sites: Sequence[str], input_ids, labels=None, *, attention_mask=None,
                  masked=None, grads: bool = True, edit=None) -> CaptureBatch:
    """One forward (+ backward when ``grads``) pass; see the module docstring.

    Args:
        loaded: a :class:`~tangentlab.empirical.loading.models.LoadedModel`.
        sites: site names (see :mod:`tangentlab.empirical.loading.sites`); ``acts`` and ``grads`` are
            keyed by these names as given (an alias in, the same alias out).
        input_ids: (B, T) int tensor.
        labels: (B, T), -100 where no loss (encoder), or the inputs (decoder; shifted inside).
            Required when ``grads`` or the loss is wanted.
        attention_mask: optional (B, T) 1/0 (padding = 0).
        masked: optional (B, T) bool, the MLM-masked positions (recorded).
        grads: also run the backward pass and return the gradient rows at every site.
        edit: optional {site: fn} to modify activations (ablation/steering).

    Activations and gradients come back in float32 or wider whatever the forward pass's dtype
    (a bfloat16 or float16 model's rows are cast, so statistics never run in half precision).
    """
    import torch

    from tangentlab.empirical.loading.models import to_stat

    model = loaded.model
    dev = next(model.parameters()).device
    input_ids = input_ids.to(dev)
    B, T = input_ids.shape
    want_loss = labels is not None and loaded.head
    grads = grads and want_loss
    am = torch.ones_like(input_ids) if attention_mask is None else attention_mask.to(dev)
    saved = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        ctx = torch.enable_grad() if grads else torch.no_grad()
        with ctx, site_hooks(model, sites, make_leaf=grads, edit=edit) as store:
            out = model(input_ids=input_ids, attention_mask=am)
            _check_fired(store, B, T)
            loss_sum, n_targets, gmap = float("nan"), 0, {}
            if want_loss:
                per_tok, valid = token_losses(out.logits, labels.to(dev), loaded.arch)
                valid = valid & am.bool()
                if loaded.arch == "decoder":
                    valid[:, :-1] &= am[:, 1:].bool()
                loss = (per_tok * valid).sum()
                loss_sum, n_targets = float(loss.detach()), int(valid.sum())
                if grads:
                    gmap = _site_gradients(loss, store)
            acts = {s: to_stat(v[0].detach()) for s, v in store.items()}
    finally:
        for p, r in zip(model.parameters(), saved):
            p.requires_grad_(r)
    rows = am.bool().clone()
    if loaded.arch == "decoder":
        rows[:, -1] = False
        rows[:, :-1] &= am[:, 1:].bool()
    mk = torch.zeros_like(rows) if masked is None else masked.to(dev).bool()
    return CaptureBatch(acts=acts, grads=gmap, input_ids=input_ids, rows=rows, masked=mk,
                        loss_sum=loss_sum, n_targets=n_targets)


def _check_fired(store: dict, B: int, T: int) -> None:
    """Every site's hook fired exactly once, with a (B, T, d) activation; else a CaptureError."""
    for site, got in store.items():
        if len(got) != 1:
            raise CaptureError(
                f"hook at site {site!r} fired {len(got)} times in one forward pass "
                "(expected exactly once)"
            )
        h = got[0]
        if h.ndim != 3 or h.shape[:2] != (B, T):
            raise CaptureError(
                f"site {site!r} produced shape {tuple(h.shape)}, expected ({B}, {T}, d)"
            )


def _site_gradients(loss, store: dict) -> dict:
    """∂loss/∂h at every site of ``store`` (each (B, T, d), in the statistics' dtype).

    Raises:
        CaptureError: the loss is detached from every site, does not depend on one of them, or a
            gradient's shape is not its activation's.
    """
    import torch

    from tangentlab.empirical.loading.models import to_stat

    names = list(store)
    if not loss.requires_grad:
        raise CaptureError(
            f"sites {names!r} lost their gradient: the loss is detached from "
            "every captured activation"
        )
    gs = torch.autograd.grad(loss, [store[s][0] for s in names], allow_unused=True)
    gmap = {}
    for s, g in zip(names, gs):
        if g is None:
            raise CaptureError(
                f"site {s!r} lost its gradient: the loss does not depend on it "
                "through autograd (a detached or unused module?)"
            )
        if g.shape != store[s][0].shape:
            raise CaptureError(f"gradient at {s!r} has shape {tuple(g.shape)}")
        gmap[s] = to_stat(g.detach())
    return gmap


def edit_activations(hv, *, mu, bases, shifts, weight=None, z=None, noise=None, whiten=None):
    """The K edits of :func:`edited_losses` applied to stacked activations (torch, no gradients).

    ``hv``: (K, nb, T, d), the clean activations repeated once per variant; ``mu``: (d,);
    ``bases``: (K, d, r); ``shifts``: (K, d); ``weight``: optional (1, nb, T, 1) of 0/1, the
    positions edited; ``z``: (nb, T, r) standard normals and ``noise``: (K, d, r) bases N_k (both
    or neither); ``whiten``: (d, d) ``Σ^{-1/2} / sqrt(rank Σ)`` of the edited rows
    (:func:`row_scale_whitener`), needed with noise.

    Variant k: ``h − ((h − mu) B_k) B_kᵀ + shift_k + ρ z N_kᵀ`` at the edited positions, with
    ``ρ² = ‖(h − mu) Σ^{-1/2}‖² / rank Σ`` the row's own scale (issue 33): for rows
    ``h = mu + s Σ^{1/2} g`` (a scale mixture, g standard normal) ρ ≈ s, and E[ρ²] = 1 over the
    rows Σ describes. z is drawn independently of h, so the noise adds the same covariance
    ``N_k N_kᵀ`` and mean squared displacement ``tr(N_k N_kᵀ)`` as unscaled noise; what changes
    is how the displacement is spread over rows: a heavy-tailed row (large s) is moved far by the
    noise as by the shrink along B_k and by a full ablation, so edits matched on the mean
    displacement also move the same rows by similar shares. (Whitened, one dominant direction, a
    rogue axis or a massive activation, does not decide a row's scale; the raw norm along B_k
    would add a chi-square's spread of its own, which a convex per-row cost reads as an effect.)
    Returns the edited (K, nb, T, d).
    """
    import torch

    coef = torch.einsum("kbtd,kdr->kbtr", hv - mu, bases)
    delta = -torch.einsum("kbtr,kdr->kbtd", coef, bases) + shifts[:, None, None, :]
    if noise is not None:
        if z is None or whiten is None:
            raise ValidationError("noise needs z (nb, T, r) and whiten (d, d), the edited rows' "
                                  "Sigma^(-1/2) (row_scale_whitener)")
        white = (hv[:1] - mu) @ whiten  # (1, nb, T, d): every variant edits the same clean rows
        rho = torch.sqrt((white * white).sum(-1, keepdim=True))
        delta = delta + rho * torch.einsum("btr,kdr->kbtd", z, noise)
    return hv + (delta if weight is None else weight * delta)


def row_scale_whitener(cov, *, rtol: float = 1e-10):
    """``Σ^{-1/2} / sqrt(rank Σ)`` (d, d) as a numpy float64 array, on the range of ``cov``.

    ``‖(h − mu) W‖²`` then has mean 1 over rows of covariance ``cov`` (d, d). Eigenvalues below
    ``rtol`` times the largest are left out (their directions get 0), so a rank-deficient
    covariance (a LayerNorm's all-ones direction) whitens on its range.
    """
    import numpy as np

    S = np.asarray(cov, dtype=np.float64)
    w, U = np.linalg.eigh((S + S.T) / 2)
    keep = w > rtol * max(float(w.max()), 0.0)
    if not keep.any():
        raise ValidationError("the edited rows hold no variance: no row scale can be read")
    return (U[:, keep] / np.sqrt(w[keep])) @ U[:, keep].T / np.sqrt(keep.sum())


def edited_losses(loaded, site: str, input_ids, labels, *, bases, shifts, mu,
                  mask=None, max_batch: int = 64, noise=None, noise_seed: int = 0,
                  whiten=None):
    """Summed loss of the batch under K edits of the activations at ``site`` (no gradients).

    Variant k replaces each activation h by ``h − ((h − mu) B_k) B_kᵀ + shift_k`` (mean-ablation
    of span(B_k), then a constant shift). ``bases``: (K, d, r) orthonormal (zeros = no ablation);
    ``shifts``: (K, d); ``mu``: (d,); ``mask``: optional (batch, seq) of 0/1, the positions edited
    (the others are left unchanged; None = every position). Variants run stacked along the batch
    axis, at most ``max_batch`` rows per forward pass. ``noise``: optional (K, d, r) bases N_k;
    variant k then also adds ``ρ z N_kᵀ`` at the edited positions, z a standard normal (batch,
    seq, r) drawn once from ``noise_seed`` and shared by every variant (common random numbers),
    ρ the row's own scale, read through ``whiten`` (d, d) (:func:`edit_activations`).
    Returns (loss_sum (K,), n_targets (K,)).
    """
    import numpy as np
    import torch

    model = loaded.model
    p0 = next(model.parameters())
    dev, dtype = p0.device, p0.dtype
    B = torch.as_tensor(np.asarray(bases), dtype=dtype, device=dev)
    S = torch.as_tensor(np.asarray(shifts), dtype=dtype, device=dev)
    m = torch.as_tensor(np.asarray(mu), dtype=dtype, device=dev)
    w = (None if mask is None else
         torch.as_tensor(np.asarray(mask), dtype=dtype, device=dev)[None, :, :, None])
    K = B.shape[0]
    nb = input_ids.shape[0]
    N = z = None
    Wt = None
    if noise is not None:
        N = torch.as_tensor(np.asarray(noise), dtype=dtype, device=dev)
        Wt = torch.as_tensor(np.asarray(whiten), dtype=dtype, device=dev)
        gen = torch.Generator().manual_seed(int(noise_seed))
        z = torch.randn((*input_ids.shape, N.shape[-1]), generator=gen,
                        dtype=torch.float64).to(dtype=dtype, device=dev)  # (nb, T, r)
    per = max(1, max_batch // nb)
    losses = np.zeros(K)
    counts = np.zeros(K, dtype=np.int64)
    for k0 in range(0, K, per):
        k1 = min(K, k0 + per)
        kk = k1 - k0

        def edit(h, k0k=slice(k0, k1), kk=kk):
            hv = h.reshape(kk, nb, *h.shape[1:])  # (kk, nb, T, d)
            out = edit_activations(hv, mu=m, bases=B[k0k], shifts=S[k0k], weight=w, z=z,
                                   noise=None if N is None else N[k0k],
                                   whiten=Wt)
            return out.reshape(h.shape)

        ids = input_ids.repeat(kk, 1)
        lab = labels.repeat(kk, 1)
        with torch.no_grad(), site_hooks(model, [site], make_leaf=False, edit={site: edit}) as st:
            out = model(input_ids=ids.to(dev))
            if len(next(iter(st.values()))) != 1:
                raise CaptureError(f"hook at site {site!r} did not fire exactly once")
            per_tok, valid = token_losses(out.logits, lab.to(dev), loaded.arch)
        losses[k0:k1] = per_tok.reshape(kk, nb, -1).sum(dim=(1, 2)).double().cpu().numpy()
        counts[k0:k1] = valid.reshape(kk, nb, -1).sum(dim=(1, 2)).cpu().numpy()
    return losses, counts
