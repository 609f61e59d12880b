"""In-loop measurement: the energy test inside our own training loop, every ``k`` steps.

At steps k, 2k, ... (and the final step) the callback captures one fixed eval batch at one site.
The batch's sequences are split once, by the same seeded rule as ``measure``
(:func:`tangentlab.empirical.loading.data.split_halves`), into a fit half and a test half: a rank-r PCA
proxy is fitted on the fit half's activations (refit each time), and
``tangentlab.measure.control_test`` runs on the test half's gradient second moment against 20
matched-rank controls, so the proxy never borrows the noise of the gradients it is tested on. The rows go to ``inloop.csv`` in the run directory through
:func:`tangentlab.runs.write_results`, in the tidy one-number-per-row form of every results table
(``experiment = empirical/inloop``, one row per metric: energy_tangent, energy_control_mean,
enrichment, p_value, oracle, position, loss_per_token; ``split`` names the fit and test
sequences), rewritten atomically each time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["InLoopMeasure", "INLOOP_METRICS", "INLOOP_NAME"]

#: The file the callback writes in the training run directory.
INLOOP_NAME = "inloop.csv"
#: The metrics of each in-loop measurement, in the order they are written.
INLOOP_METRICS = ("energy_tangent", "energy_control_mean", "enrichment", "p_value", "oracle",
                  "position", "loss_per_token")
_INT_COLUMNS = ("step", "n", "layer", "seed")


def _parse_cell(column: str, cell: str) -> Any:
    if cell == "":
        return None
    if column in _INT_COLUMNS:
        return int(cell)
    if column in ("value", "ci_low", "ci_high", "prediction"):
        return float(cell)
    return cell


class InLoopMeasure:
    """Training callback (see module docstring). ``batch`` = (inputs, labels, masked), (B, T)."""

    def __init__(self, run_dir: str | Path, arch: str, batch, *, every: int, site: str,
                 rank: int, final_step: int, seed: int = 0, n_controls: int = 20,
                 start_step: int = 0):
        self.path = Path(run_dir) / INLOOP_NAME
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
        """The rows already written for steps ≤ ``upto`` (a resumed run keeps them)."""
        import csv

        if not self.path.is_file() or upto <= 0:
            return []
        with self.path.open(newline="") as f:
            rows = [{k: _parse_cell(k, v) for k, v in r.items()} for r in csv.DictReader(f)]
        return [r for r in rows if r["step"] is not None and r["step"] <= upto]

    def measure(self, model, step: int) -> list[dict[str, Any]]:
        """Run the test now on ``model``; returns its rows (also appended and written)."""
        from tangentlab.empirical.loading.capture import capture_batch
        from tangentlab.empirical.loading.data import split_halves
        from tangentlab.empirical.loading.models import LoadedModel
        from tangentlab.empirical.loading.sites import normalize_site
        from tangentlab.measure import control_test, make_proxy
        from tangentlab.runs import write_results

        lm = LoadedModel(model=model, arch=self.arch, family=model.config.model_type, head=True,
                         tie_embeddings=False, path="")
        site = normalize_site(model, self.site)
        inp, lab, masked = self.batch
        cap = capture_batch(lm, [site], inp, lab, masked=masked)
        fit_seq, test_seq = split_halves(inp.shape[0], self.seed)
        fit_rows = cap.rows.clone()
        fit_rows[test_seq] = False
        test_rows = cap.rows.clone()
        test_rows[fit_seq] = False
        H = cap.acts[site][fit_rows].double().cpu().numpy()
        G = cap.grads[site][test_rows].double().cpu().numpy()
        Q = make_proxy("pca", n_components=self.rank, random_state=self.seed).fit(H).basis()
        res = control_test(Q, G.T @ G / len(G), self.n_controls, self.seed)
        values = {"energy_tangent": res.energy, "energy_control_mean": res.control_mean,
                  "enrichment": res.enrichment, "p_value": res.p_value, "oracle": res.oracle,
                  "position": res.position,
                  "loss_per_token": cap.loss_sum / max(cap.n_targets, 1)}
        new = [{"experiment": "empirical/inloop", "arch": self.arch, "step": int(step),
                "site": site, "bucket": "all", "method": "pca", "proxy": "refit",
                "metric": m, "value": float(values[m]), "seed": self.seed,
                "split": "fit sequences " + " ".join(map(str, fit_seq)) + "; test sequences "
                         + " ".join(map(str, test_seq)),
                "n": int(cap.n_targets) if m == "loss_per_token" else int(len(G))}
               for m in INLOOP_METRICS]
        self.rows.extend(new)
        write_results(self.rows, self.path)
        return new

    def __call__(self, state) -> None:
        """The training callback: measure at every ``every``-th step and at the last one."""
        if self.every > 0 and (state.step % self.every == 0 or state.step == self.final_step):
            self.measure(state.model, state.step)
