"""From eval batches to site statistics: the row plan and the capture pass of one checkpoint.

- :func:`plan_rows` decides, once per trajectory, which positions of each eval batch are rows, their
  token ids and frequency buckets, which rows are kept for fitting (``exclude_positions``), and the
  seeded fixed activation sample (the same rows at every checkpoint).
- :func:`collect_site_stats` runs the capture over the batches of one checkpoint and streams
  what the metrics need into :class:`~tangentlab.empirical.records.SiteStats`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tangentlab.empirical.records import RowPlan, SiteStats

__all__ = ["plan_rows", "collect_site_stats", "fit_samples"]


def plan_rows(eval_data, arch: str, *, exclude_positions: Sequence[int], sample_rows: int,
              seed: int) -> tuple[list[RowPlan], Any]:
    """One :class:`RowPlan` per eval batch, and the sorted distinct token ids ``(U,)`` of kept rows.

    The fixed sample draws ``min(sample_rows, kept rows)`` rows uniformly without replacement
    (seed ``[seed, 7]``) over the kept rows of all batches.
    """
    import numpy as np
    import torch

    raw = []
    for batch in eval_data.batches:
        inp, orig = batch.input_ids, batch.token_ids
        rows = torch.ones_like(inp, dtype=torch.bool)
        if arch == "decoder":
            rows[:, -1] = False
        T = inp.shape[1]
        pos = torch.arange(T)[None, :].expand_as(inp)
        keep = torch.ones_like(rows)
        for p in exclude_positions:
            keep &= pos != (p % T)
        tok = orig[rows].numpy()
        kept = keep[rows].numpy()
        bucket = np.searchsorted(eval_data.edges, np.log1p(eval_data.counts[tok]), side="right")
        raw.append((rows, tok, kept, bucket))
    total_kept = sum(int(r[2].sum()) for r in raw)
    rng = np.random.default_rng([seed, 7])
    n_s = min(sample_rows, total_kept)
    chosen = np.zeros(total_kept, dtype=bool)
    chosen[rng.choice(total_kept, size=n_s, replace=False)] = True
    plans, offset = [], 0
    for rows, tok, kept, bucket in raw:
        k = int(kept.sum())
        plans.append(RowPlan(rows=rows, tok=tok, kept=kept, bucket=bucket,
                             sample=chosen[offset:offset + k]))
        offset += k
    uniq = np.unique(np.concatenate([p.tok[p.kept] for p in plans]))
    return plans, uniq


class _SiteCollector:
    """Accumulates one site's statistics batch by batch; :meth:`finish` returns the record."""

    def __init__(self, d: int, n_batches: int, labels: Sequence[str], U: int, k: int):
        import numpy as np

        from tangentlab.measure import MomentAccumulator

        self.labels = list(labels)
        self.grad = MomentAccumulator(d, groups=self.labels)
        self.act = MomentAccumulator(d)
        self.batch_sums = np.zeros((n_batches, d, d))
        self.bucket_batch_sums = {lb: np.zeros((n_batches, d, d)) for lb in self.labels}
        self.sample: list = []
        self.sample_tokens: list = []
        self.tok_sum = np.zeros((U, d))
        self.tok_sq = np.zeros(U)
        self.tok_n = np.zeros(U, dtype=np.int64)
        self.tok_first = np.zeros((U, k, d))
        self.k = k
        self.loss_sum = 0.0
        self.n_targets = 0

    def add_gradients(self, b: int, G, plan: RowPlan) -> None:
        """Gradient rows ``G`` (n, d) float64 torch of batch ``b``."""
        import numpy as np
        import torch

        blabels = np.asarray(self.labels, dtype=object)[plan.bucket]
        self.grad.update(G, groups=blabels)
        self.batch_sums[b] = (G.T @ G).numpy()
        for j, lb in enumerate(self.labels):
            sel = torch.from_numpy(np.flatnonzero(plan.bucket == j))
            if sel.numel():
                Gj = G.index_select(0, sel)
                self.bucket_batch_sums[lb][b] = (Gj.T @ Gj).numpy()

    def add_activations(self, H, plan: RowPlan, tok_idx) -> None:
        """Activation rows ``H`` (n, d) float64 torch; ``tok_idx`` (n,) index into the token list."""
        import numpy as np

        self.act.update(H)
        kept = plan.kept
        Hk = H.numpy()[kept]
        tk = tok_idx[kept]
        self.sample.append(Hk[plan.sample])
        self.sample_tokens.append(plan.tok[kept][plan.sample])
        np.add.at(self.tok_sum, tk, Hk)
        np.add.at(self.tok_sq, tk, np.einsum("nd,nd->n", Hk, Hk))
        # first k occurrences of each token: occurrence index = earlier count + rank in batch
        order = np.argsort(tk, kind="stable")
        sorted_t = tk[order]
        start = np.r_[0, np.flatnonzero(np.diff(sorted_t)) + 1]
        rank = np.arange(len(tk)) - np.repeat(start, np.diff(np.r_[start, len(tk)]))
        occ = np.empty(len(tk), dtype=np.int64)
        occ[order] = rank
        occ += self.tok_n[tk]
        sel = occ < self.k
        self.tok_first[tk[sel], occ[sel]] = Hk[sel]
        self.tok_n += np.bincount(tk, minlength=len(self.tok_n))

    def finish(self) -> SiteStats:
        import numpy as np

        return SiteStats(
            grad=self.grad, act=self.act, batch_sums=self.batch_sums,
            bucket_batch_sums=self.bucket_batch_sums, sample=np.concatenate(self.sample),
            sample_tokens=np.concatenate(self.sample_tokens), tok_sum=self.tok_sum,
            tok_sq=self.tok_sq, tok_n=self.tok_n, tok_first=self.tok_first,
            loss_sum=self.loss_sum, n_targets=self.n_targets)


def collect_site_stats(loaded, sites: Sequence[str], eval_data, plans: Sequence[RowPlan], uniq, *,
                       spread_k: int, with_grads: bool = True) -> dict[str, SiteStats]:
    """Capture every eval batch once at ``sites``; returns {site: SiteStats}."""
    import numpy as np
    import torch

    from tangentlab.empirical.capture import capture_batch

    collectors: dict[str, _SiteCollector] = {}
    for b, (batch, plan) in enumerate(zip(eval_data.batches, plans, strict=True)):
        cap = capture_batch(loaded, sites, batch.input_ids, batch.labels, masked=batch.masked,
                            grads=with_grads)
        rows = plan.rows.to(cap.rows.device)
        if not torch.equal(rows & cap.rows, rows):
            rows = rows & cap.rows
        tok_idx = np.searchsorted(uniq, plan.tok)
        for site in cap.acts:
            H = cap.acts[site][rows].to(torch.float64).cpu()
            if site not in collectors:
                collectors[site] = _SiteCollector(H.shape[1], len(plans), eval_data.labels,
                                                  len(uniq), spread_k)
            col = collectors[site]
            if site in cap.grads:
                col.add_gradients(b, cap.grads[site][rows].to(torch.float64).cpu(), plan)
            col.add_activations(H, plan, tok_idx)
        if not math.isnan(cap.loss_sum):
            for col in collectors.values():
                col.loss_sum += cap.loss_sum
                col.n_targets += cap.n_targets
    return {s: c.finish() for s, c in collectors.items()}


def fit_samples(loaded, sites: Sequence[str], eval_data, plans: Sequence[RowPlan]) -> dict[str, Any]:
    """Forward passes only: the fixed activation sample of each site, {site: (n_s, d) float64}.

    The same rows that :func:`collect_site_stats` puts in ``SiteStats.sample``; used by the
    proxy schedule's pre-pass over the fit window.
    """
    import numpy as np
    import torch

    from tangentlab.empirical.capture import capture_batch

    out: dict[str, list] = {}
    for batch, plan in zip(eval_data.batches, plans, strict=True):
        if not plan.sample.any():
            continue
        cap = capture_batch(loaded, sites, batch.input_ids, batch.labels, masked=batch.masked,
                            grads=False)
        rows = plan.rows.to(cap.rows.device)
        if not torch.equal(rows & cap.rows, rows):
            rows = rows & cap.rows
        for site in cap.acts:
            H = cap.acts[site][rows].to(torch.float64).cpu().numpy()
            out.setdefault(site, []).append(H[plan.kept][plan.sample])
    return {s: np.concatenate(v) for s, v in out.items()}
