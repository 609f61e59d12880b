"""Zipf exponent: recovered from samples of a known Zipf law; coverage by simulation (slow)."""

from __future__ import annotations

import numpy as np
import pytest

from tangentlab.errors import InsufficientSamplesError, ValidationError
from tangentlab.measure.zipf import fit_zipf, plot_zipf_fit, zipf_mle


def _stream(V, s, n, seed):
    p = np.arange(1, V + 1.0) ** -s
    return np.random.default_rng(seed).choice(V, size=n, p=p / p.sum())


def test_mle_is_exact_on_expected_counts():
    r = np.arange(1, 201)
    counts = 1e9 * r ** -1.3
    assert zipf_mle(r, counts, 1, 200) == pytest.approx(1.3, abs=1e-9)
    assert zipf_mle(r, counts, 5, 50) == pytest.approx(1.3, abs=1e-9)


@pytest.mark.parametrize("s", [0.8, 1.2])
def test_rank_mle_recovers_s_with_documents(s):
    tok = _stream(1000, s, 60_000, seed=3)
    doc = np.repeat(np.arange(300), 200)
    fit = fit_zipf(tok, doc, n_boot=100, seed=0)
    assert abs(fit.s - s) < 0.03  # one draw: coverage is the slow test's job
    assert fit.ci_low < fit.s < fit.ci_high and fit.ci_high - fit.ci_low < 0.1
    assert fit.n_units == 300 and fit.r_min == 1 and fit.r_max > 10
    assert "ranking half" in fit.rule


def test_csn_method_runs_and_reports_its_rule():
    tok = _stream(2000, 1.0, 40_000, seed=2)
    fit = fit_zipf(tok, method="csn", n_boot=20, seed=0)
    assert fit.method == "csn" and "c_min" in fit.rule
    assert 0.8 < fit.s < 1.2


def test_bad_inputs_are_typed_errors():
    with pytest.raises(ValidationError):
        fit_zipf(np.arange(100), method="ols")
    with pytest.raises(InsufficientSamplesError):
        fit_zipf(np.arange(5))
    with pytest.raises(InsufficientSamplesError):
        fit_zipf(np.arange(1000), n_boot=20)  # every type once: no rank range


def test_seed_reproducible_and_figure():
    tok = _stream(500, 1.1, 20_000, seed=0)
    a, b = fit_zipf(tok, n_boot=30, seed=4), fit_zipf(tok, n_boot=30, seed=4)
    assert a.to_dict() == b.to_dict()
    fig = plot_zipf_fit(a)
    assert len(fig.axes[0].lines) == 4


@pytest.mark.slow
def test_coverage_by_simulation():
    hits = 0
    reps = 40
    for rep in range(reps):
        tok = _stream(2000, 1.0, 100_000, seed=100 + rep)
        doc = np.repeat(np.arange(500), 200)
        f = fit_zipf(tok, doc, n_boot=100, seed=rep)
        hits += f.ci_low <= 1.0 <= f.ci_high
    assert hits / reps >= 0.85  # nominal 0.95; 40 replicates


def test_docstring_examples_run():
    import doctest

    import tangentlab.measure.zipf as mod

    res = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert res.attempted > 0 and res.failed == 0
