import json

import numpy as np
import pytest

from tangentlab.empirical.measurement.protocol import (
    MeasureConfig,
    SiteStats,
    energy_rows,
    isotropy_share_rows,
    measure_trajectory,
)
from tangentlab.empirical.measurement.records import RowBase
from tangentlab.errors import ConfigError
from tangentlab.measure import MomentAccumulator
from tangentlab.runs import read_results
from tests.empirical.conftest import TEST_MEASURE

REQUIRED = [
    "energy_tangent", "energy_control_mean", "enrichment", "enrichment_ci_low",
    "enrichment_ci_high", "p_value", "baseline", "oracle", "position", "delta_isoscore_tangent",
    "delta_isoscore_control_mean", "freq_distance_pearson", "freq_distance_spearman",
    "trajectory_variance_spearman", "ablation_loss_tangent", "ablation_loss_control_mean",
]


def _stats_from_rows(G, Q, n_batches=32, pool=200):
    """A site record of gradient rows ``G`` (n, d): per-batch energies of Q and its pool."""
    from tangentlab.measure import batch_energies, normal_controls

    d = G.shape[1]
    labels = ["f1", "f2"]
    groups = np.array(labels)[np.arange(len(G)) % 2]
    acc = MomentAccumulator(d, groups=labels)
    acc.update(G, groups=groups)
    parts = np.array_split(np.arange(len(G)), n_batches)
    P = normal_controls(Q, pool, 0)
    energies = {("fixed", "all"): batch_energies(Q, P, [G[p] for p in parts])}
    for lb in labels:
        energies[("fixed", lb)] = batch_energies(Q, P, [G[p][groups[p] == lb] for p in parts])
    return SiteStats(act=None, sample=None, sample_tokens=None, tok_sum=None, tok_sq=None,
                     tok_n=None, geo_rows=None, geo_tokens=None, grad=acc, energies=energies)


def _metric(rows, name, bucket="all"):
    return [r for r in rows if r["metric"] == name and r["bucket"] == bucket][0]


def test_planted_tangent_energy_hits_the_p_floor_and_null_does_not():
    rng = np.random.default_rng(0)
    d, r = 24, 3
    Q = np.linalg.qr(rng.standard_normal((d, r)))[0]
    cfg = MeasureConfig(n_controls=20, n_boot=100)
    base = RowBase(site="s", step=0)
    null = rng.standard_normal((2000, d))
    planted = null + 3.0 * rng.standard_normal((2000, r)) @ Q.T
    p_rows = energy_rows(_stats_from_rows(planted, Q), "fixed", cfg, base)
    n_rows = energy_rows(_stats_from_rows(null, Q), "fixed", cfg, base)
    assert _metric(p_rows, "p_value")["value"] == pytest.approx(1 / 21)
    assert _metric(p_rows, "enrichment")["value"] > 5
    assert _metric(p_rows, "enrichment_ci_low")["value"] > 3
    assert _metric(p_rows, "p_value", "f1")["value"] == pytest.approx(1 / 21)
    assert _metric(n_rows, "p_value")["value"] > 1 / 21
    e = _metric(n_rows, "enrichment")
    assert e["ci_low"] < 1.0 < e["ci_high"]
    iso_p = isotropy_share_rows(Q, _stats_from_rows(planted, Q), cfg, base)
    # removing a planted high-variance subspace raises isotropy more than removing a control
    assert _metric(iso_p, "delta_isoscore_tangent")["value"] > _metric(
        iso_p, "delta_isoscore_control_mean")["band_high"]  # the controls' spread, not a CI


def test_results_table_has_every_metric(measured):
    for arch, run in measured.items():
        df = read_results(run)
        missing = [m for m in REQUIRED if m not in set(df.metric)]
        assert not missing, (arch, missing)
        for col in ("checkpoint", "step", "site", "bucket", "model", "arch", "proxy"):
            assert col in df.columns
        assert set(df.arch.dropna()) == {arch}
        # step 0 is measured like every other checkpoint; buckets f1..f5 and all
        enr = df[(df.metric == "enrichment") & (df.proxy == "fixed")]
        assert 0 in set(enr.step.dropna().astype(int))
        assert {"all", "f1", "f5"} <= set(enr.bucket)
        assert {"early", "late", "trajectory"} <= set(df.checkpoint)
        assert set(df.proxy.dropna()) == {"fixed", "refit"}
        assert df[df.metric == "p_value"].value.between(1 / 21 - 1e-12, 1).all()
        corr = df[df.metric.str.startswith("freq_distance")]
        assert corr.value.dropna().between(-1, 1).all() and corr.ci_low.notna().any()
        man = json.loads((run / "manifest.json").read_text())
        assert man["arch"] == arch and man["tie_embeddings"] is True
        assert man["fit_window"]["steps"][0] == 0
        assert max(man["fit_window"]["steps"]) <= 0.3 * man["fit_window"]["max_step"]
        assert (run / "enrichment.png").stat().st_size > 1000
        assert (run / "frequency_distance.png").stat().st_size > 1000


def _spy_fit_halves(monkeypatch) -> list[bool]:
    """Record ``sample_only`` of every fit-half collection (pre-pass and main pass)."""
    import tangentlab.empirical.measurement.collect as collect
    import tangentlab.empirical.measurement.protocol as protocol

    calls: list[bool] = []
    real = protocol.collect_fit_half

    def spy(*args, **kwargs):
        calls.append(kwargs.get("sample_only", False))
        return real(*args, **kwargs)

    monkeypatch.setattr(protocol, "collect_fit_half", spy)  # the main pass
    monkeypatch.setattr(collect, "collect_fit_half", spy)  # the pre-pass
    return calls


def _n_checkpoints(run) -> int:
    return len(json.loads((run / "manifest.json").read_text())["checkpoints"])


#: The re-measurements below leave out the bridge (bridge.csv, not results.csv), which forwards
#: the fit half once more at each of its three phases by design (tests/empirical/bridge/test_run.py).
NO_BRIDGE = {**TEST_MEASURE, "bridge": False}


def test_same_seed_same_results(measured, tiny_runs, tmp_path, monkeypatch):
    """Same bytes again; the pre-pass kept the fit-window fit halves (none forwarded twice);
    drawing no figures (as the end-to-end battery's simulations do) changes no number."""
    calls = _spy_fit_halves(monkeypatch)
    again = measure_trajectory(tiny_runs["decoder"], tmp_path / "again", device="cpu", seed=0,
                               overrides=NO_BRIDGE, figures=False)
    assert (again / "results.csv").read_bytes() == (measured["decoder"] / "results.csv").read_bytes()
    assert sorted(p.name for p in measured["decoder"].glob("*.png")) == [
        "enrichment.png", "frequency_distance.png"] and not list(again.glob("*.png"))
    assert calls == [False] * _n_checkpoints(measured["decoder"])  # one full fit half each


def test_fit_halves_forwarded_twice_give_the_same_results(measured, tiny_runs, tmp_path,
                                                         monkeypatch):
    """With no memory to keep fit halves (TANGENTLAB_FIT_CACHE_MB=0) the pre-pass runs
    sample-only passes and the main pass forwards every fit half again: the fixture's bytes."""
    calls = _spy_fit_halves(monkeypatch)
    monkeypatch.setenv("TANGENTLAB_FIT_CACHE_MB", "0")  # keep none
    again = measure_trajectory(tiny_runs["decoder"], tmp_path / "again", device="cpu", seed=0,
                               overrides=NO_BRIDGE)
    assert calls.count(True) >= 1 and calls.count(False) == _n_checkpoints(measured["decoder"])
    assert (again / "results.csv").read_bytes() == (measured["decoder"] / "results.csv").read_bytes()


def test_config_validation():
    with pytest.raises(ConfigError):
        MeasureConfig(n_batches=1)
    with pytest.raises(ConfigError, match="fit half and a test half"):
        MeasureConfig(n_batches=3)
    with pytest.raises(ConfigError, match="control_pool"):
        MeasureConfig(n_controls=20, control_pool=10)
    with pytest.raises(ConfigError):
        MeasureConfig(sites=())


def test_activation_only_model_without_lm_head(tiny_runs, tmp_path):
    """A bare encoder (like all-MiniLM-L6) has no loss: activation metrics only, said so."""
    from transformers import BertConfig, BertModel

    from tangentlab.empirical.loading.tokenizer import load_tokenizer
    from tangentlab.runs import read_manifest

    tok = load_tokenizer(tiny_runs["encoder"] / "tokenizer")
    d = tmp_path / "bare"
    BertModel(BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=2, intermediate_size=64,
                         max_position_embeddings=64)).save_pretrained(d)
    tok.save_pretrained(d)
    out = measure_trajectory(d, tmp_path / "m", device="cpu", overrides={
        "eval_text": "bible", "max_docs": 60, "n_batches": 4, "batch_size": 4, "seq_len": 32,
        "threads": 1})
    metrics = set(read_results(out).metric)
    assert "representation_isoscore_star" in metrics and "freq_distance_spearman" in metrics
    assert not metrics & {"enrichment", "energy_tangent", "ablation_loss_tangent"}
    assert read_manifest(out)["activation_only"] is True
    assert not (out / "enrichment.png").exists()


def test_checkpoints_folder_of_a_run_measures_like_the_run(measured, tiny_runs, tmp_path):
    """``measure RUN/checkpoints`` (what reproduce passes) uses the run's held-out documents."""
    out = measure_trajectory(tiny_runs["decoder"] / "checkpoints", tmp_path / "ck", device="cpu",
                             seed=0, overrides=TEST_MEASURE)
    assert (out / "results.csv").read_bytes() == (measured["decoder"] / "results.csv").read_bytes()
