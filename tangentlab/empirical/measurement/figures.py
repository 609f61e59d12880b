"""Figures of ``measure``.

Enrichment over training with its control band, and log-frequency against spread (first and last
checkpoint). Matplotlib with the Agg backend, set here.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["enrichment_figure", "frequency_figure"]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def enrichment_figure(rows, sites, path: str | Path) -> Path:
    """Enrichment (fixed proxy, all tokens) against step, one panel per site.

    The shaded band is the range of the individual controls' energies divided by their mean
    (what enrichment would look like for a control subspace); error bars are the bootstrap
    interval over test batches (controls redrawn). Step 0 is drawn at x = 0 of a symlog axis.
    Rows of the constrained space (``subspace`` set) are left out.
    """
    plt = _plt()
    fig, axes = plt.subplots(1, len(sites), figsize=(4.5 * len(sites), 3.4), squeeze=False)
    for ax, site in zip(axes[0], sites):
        def series(metric, site=site):
            pts = sorted((r["step"], r["value"], r.get("ci_low"), r.get("ci_high")) for r in rows
                         if r["metric"] == metric and r["site"] == site and r.get("proxy") == "fixed"
                         and r["bucket"] == "all" and isinstance(r.get("step"), int)
                         and r.get("subspace") is None
                         and r.get("checkpoint") not in ("early", "late", "trajectory"))
            return pts
        enr = series("enrichment")
        lo = series("control_enrichment_low")
        hi = series("control_enrichment_high")
        if enr:
            x = [p[0] for p in enr]
            y = [p[1] for p in enr]
            yerr = [[max(0.0, p[1] - p[2]) if p[2] == p[2] else 0 for p in enr],
                    [max(0.0, p[3] - p[1]) if p[3] == p[3] else 0 for p in enr]]
            ax.errorbar(x, y, yerr=yerr, marker="o", ms=3, lw=1.2, capsize=2, label="tangent proxy")
            ax.fill_between([p[0] for p in lo], [p[1] for p in lo], [p[1] for p in hi],
                            color="grey", alpha=0.3, label="controls (range)")
            ax.axhline(1.0, color="k", lw=0.6, ls="--")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel("training step")
        ax.set_ylabel("enrichment E_T / mean E_N")
        ax.set_title(site, fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def frequency_figure(scatter, sites, path: str | Path) -> Path:
    """log(1 + train count) against the equal-size spread, first and last checkpoint per site."""
    plt = _plt()
    fig, axes = plt.subplots(1, len(sites), figsize=(4.5 * len(sites), 3.4), squeeze=False)
    for ax, site in zip(axes[0], sites):
        data = scatter.get(site, {})
        steps = sorted(data)
        for step, colour in zip([steps[0], steps[-1]] if len(steps) > 1 else steps, ["C1", "C0"]):
            d = data[step]
            ax.scatter(d["logf"], d["spread"], s=4, alpha=0.5, color=colour, label=f"step {step}")
        ax.set_xlabel("log(1 + training count)")
        ax.set_ylabel("spread (k occurrences)")
        ax.set_title(site, fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
