"""In-loop measurement: the energy test inside our own training loop, every ``k`` steps.

At steps k, 2k, ... (and the final step) the callback captures one fixed eval batch at one site,
fits a rank-r PCA proxy on the batch's activations (refit each time), and runs
``tangentlab.measure.control_test`` on the batch's gradient second moment against 20 matched-rank
controls. Rows (step, site, energy_tangent, energy_control_mean, enrichment, p_value, oracle,
position, loss) go to ``inloop.csv`` in the run directory (rewritten atomically each time).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["InLoopMeasure"]

_COLUMNS = ("step", "site", "energy_tangent", "energy_control_mean", "enrichment", "p_value",
            "oracle", "position", "loss_per_token")


class InLoopMeasure:
    """Training callback (see module docstring). ``batch`` = (inputs, labels, masked), (B, T)."""

    def __init__(self, run_dir: str | Path, arch: str, batch, *, every: int, site: str,
                 rank: int, final_step: int, seed: int = 0, n_controls: int = 20,
                 start_step: int = 0):
        self.path = Path(run_dir) / "inloop.csv"
        self.arch = arch
        self.batch = batch
        self.every = int(every)
        self.site = site
        self.rank = int(rank)
        self.final_step = int(final_step)
        self.seed = int(seed)
        self.n_controls = int(n_controls)
        self.rows: list[dict[str, Any]] = self._read(start_step)

    def _read(self, upto: int) -> list[dict[str, Any]]:
        if not self.path.is_file() or upto <= 0:
            return []
        out = []
        lines = self.path.read_text().splitlines()
        for line in lines[1:]:
            vals = line.split(",")
            row = dict(zip(_COLUMNS, vals))
            if int(row["step"]) <= upto:
                out.append({k: (v if k == "site" else float(v)) for k, v in row.items()}
                           | {"step": int(row["step"])})
        return out

    def measure(self, model, step: int) -> dict[str, Any]:
        """Run the test now on ``model`` and return the row (also appended and written)."""
        from tangentlab.empirical.capture import capture_batch
        from tangentlab.empirical.models import LoadedModel
        from tangentlab.empirical.sites import normalize_site
        from tangentlab.measure import control_test, make_proxy
        from tangentlab.runs import atomic_write_text

        lm = LoadedModel(model=model, arch=self.arch, family=model.config.model_type, head=True,
                         tie_embeddings=False, path="")
        site = normalize_site(model, self.site)
        inp, lab, masked = self.batch
        cap = capture_batch(lm, [site], inp, lab, masked=masked)
        rows = cap.rows
        H = cap.acts[site][rows].double().cpu().numpy()
        G = cap.grads[site][rows].double().cpu().numpy()
        Q = make_proxy("pca", n_components=self.rank, random_state=self.seed).fit(H).basis()
        res = control_test(Q, G.T @ G / len(G), self.n_controls, self.seed)
        row = {"step": int(step), "site": site, "energy_tangent": res.energy,
               "energy_control_mean": res.control_mean, "enrichment": res.enrichment,
               "p_value": res.p_value, "oracle": res.oracle, "position": res.position,
               "loss_per_token": cap.loss_sum / max(cap.n_targets, 1)}
        self.rows.append(row)
        text = ",".join(_COLUMNS) + "\n" + "".join(
            ",".join(str(r[c]) if c == "site" else repr(float(r[c])) if c != "step" else str(r[c])
                     for c in _COLUMNS) + "\n" for r in self.rows)
        atomic_write_text(self.path, text)
        return row

    def __call__(self, state) -> None:
        if self.every > 0 and (state.step % self.every == 0 or state.step == self.final_step):
            self.measure(state.model, state.step)
