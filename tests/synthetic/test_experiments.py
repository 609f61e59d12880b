"""The five experiments at quick settings: agreement with theory, reproducibility, bad configs."""

from __future__ import annotations

import json

import pytest

from tangentlab.cli import main
from tangentlab.commands.synthetic import EXPERIMENTS
from tangentlab.config import config_to_dict
from tangentlab.errors import ConfigError, UnknownNameError
from tangentlab.synthetic.experiments import get, names, resolve_config, run_experiment


def _checks(path):
    return {c["name"]: c for c in json.loads((path / "checks.json").read_text())}


def test_registry_matches_cli_list():
    assert names() == list(EXPERIMENTS)
    with pytest.raises(UnknownNameError):
        get("no-such-experiment")


@pytest.fixture(scope="module")
def quick_runs(quick_reproduce):
    """Each quick experiment's run directory, read from the suite's shared quick reproduce.

    ``reproduce --quick`` runs every registered experiment at its quick settings through
    ``run_experiment(name, run/synthetic/<name>, quick=True, seed=0)`` (seed 0 is every quick
    config's default), so the agreement tests read those directories instead of running the
    experiments a second time.
    """
    run_dir, rc, err, _ = quick_reproduce(2)

    def run(name):
        path = run_dir / "synthetic" / name
        assert (path / "checks.json").is_file(), f"the quick reproduce wrote no {path}:\n{err[-2000:]}"
        manifest = json.loads((path / "manifest.json").read_text())
        assert manifest["kind"] == f"synthetic/{name}" and manifest["config"]["seed"] == 0
        quick = json.loads(json.dumps(config_to_dict(resolve_config(get(name), quick=True))))
        assert manifest["config"] == quick, "the reproduce's experiment config is not the quick one"
        return path

    return run


@pytest.mark.slow
def test_visibility_agrees_with_theory(quick_runs):
    path = quick_runs("visibility")
    checks = _checks(path)
    assert {"results.csv", "manifest.json", "checks.json", "visibility.png"} <= {
        p.name for p in path.iterdir()}
    for name, c in checks.items():
        assert c["passed"], (name, c)
    att = [c for n, c in checks.items() if n.startswith("attenuation")]
    assert att and all(c["measured"] < 1 for c in att)
    assert (path / "visibility.png").stat().st_size < 200_000


@pytest.mark.slow
def test_gradient_ratio_bound_and_counterexample(quick_runs):
    checks = _checks(quick_runs("gradient-ratio"))
    assert checks["counterexample: ratio bound fails"]["passed"]
    for name, c in checks.items():
        assert c["passed"], (name, c)


@pytest.mark.slow
def test_amplification_tangent_share(quick_runs):
    checks = _checks(quick_runs("amplification"))
    assert checks["tangent share vs closed form (SGD, chart head)"]["passed"]
    assert checks["isotropy score vs closed form (SGD, chart head)"]["passed"]
    assert checks["one-step displacement within the normal/tangent bound (SGD, chart head)"]["passed"]
    rises = [c for n, c in checks.items() if n.startswith("tangent share rises")]
    assert len(rises) == 6 and all(c["passed"] for c in rises)


@pytest.mark.slow
def test_proxy_recovery_calibration(quick_runs):
    checks = _checks(quick_runs("proxy-recovery"))
    assert checks["planted case at the p floor: sphere"]["passed"]
    assert checks["null enrichment about 1: sphere"]["passed"]
    assert checks["null p-values spread out: sphere"]["passed"]
    assert checks["pca rank 2 recovers the tangent space of sphere"]["passed"]


@pytest.mark.slow
def test_river_valley_exact_schedules(quick_runs):
    checks = _checks(quick_runs("river-valley"))
    for name in ("valley hitting time: gd", "valley hitting time: two-stage-exact",
                 "oscillation band: sign-exact", "two-stage schedule is fastest: two-stage-exact",
                 "matrix sensing hitting time: gd, signal"):
        assert checks[name]["passed"], checks[name]


def test_same_seed_gives_identical_results(tmp_path):
    over = {"manifolds": "circle,sphere", "n_samples": "400", "n_batches": "2", "spreads": "0.05",
            "n_points": "1", "zipf_s": "1.0", "pin_alpha": "0.5", "n_types": "20",
            "n_occurrences": "500", "per_type": "5", "n_reps": "2"}
    a = run_experiment("visibility", tmp_path / "a", quick=True, overrides=over, seed=3)
    b = run_experiment("visibility", tmp_path / "b", quick=True, overrides=over, seed=3)
    c = run_experiment("visibility", tmp_path / "c", quick=True, overrides=over, seed=4)
    assert (a / "results.csv").read_bytes() == (b / "results.csv").read_bytes()
    assert (a / "results.csv").read_bytes() != (c / "results.csv").read_bytes()
    manifest = json.loads((a / "manifest.json").read_text())
    assert manifest["kind"] == "synthetic/visibility" and manifest["config"]["seed"] == 3


@pytest.mark.parametrize("name,overrides,needle", [
    ("visibility", {"ambient_dim": "2"}, "must be below the ambient dimension"),
    ("visibility", {"spreads": "-0.1"}, "spread"),
    ("proxy-recovery", {"ranks": "1"}, "below the manifold dimension"),
    ("gradient-ratio", {"n_samples": "lots"}, "integer"),
    ("amplification", {"optimizers": "lbfgs"}, "'optimizers' has item 'lbfgs', which must be one of"),
    ("amplification", {"log_every": "1000"}, "log_every must be <= steps"),
    ("river-valley", {"methods": "gd,gd"}, "must not list an item twice"),
    ("river-valley", {"eta": "5.0"}, "diverges"),
])
def test_bad_configs_are_config_errors(name, overrides, needle):
    with pytest.raises(ConfigError, match=needle):
        resolve_config(get(name), quick=True, overrides=overrides)


@pytest.mark.parametrize("argv", [
    ["synthetic", "run", "visibility", "--quick", "--set", "ambient_dim=2"],
    ["synthetic", "run", "proxy-recovery", "--quick", "--set", "ranks=1,4"],
    ["synthetic", "run", "visibility", "--quick", "--set", "t0=abc"],
    ["synthetic", "run", "no-such-experiment", "--quick"],
])
def test_cli_bad_input_exit_2_and_no_output(tmp_path, capsys, argv):
    out = tmp_path / "out"
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tangentlab: error:")
    assert not out.exists()
    assert not any(p.name.startswith(".out") for p in tmp_path.iterdir())


def test_cli_list_and_toml_config(tmp_path, capsys):
    assert main(["synthetic", "list"]) == 0
    listed = capsys.readouterr().out
    assert all(n in listed for n in EXPERIMENTS)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[river-valley]\nmax_steps = 300\nsensing_steps = 60\nmethods = ["gd", "sign-exact"]\n')
    out = tmp_path / "rv"
    assert main(["synthetic", "run", "river-valley", "--quick", "--config", str(cfg),
                 "--out", str(out)]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["config"]["max_steps"] == 300 and manifest["config"]["methods"] == ["gd", "sign-exact"]
    assert "valley hitting time: gd" in _checks(out)


def test_failed_run_leaves_no_partial_output(tmp_path, monkeypatch):
    exp = get("river-valley")

    def boom(cfg):
        raise RuntimeError("simulated failure mid-run")

    monkeypatch.setattr(exp, "run", boom)
    with pytest.raises(RuntimeError):
        run_experiment("river-valley", tmp_path / "x", quick=True)
    assert list(tmp_path.iterdir()) == []


def test_package_level_api():
    import tangentlab.synthetic as syn

    assert syn.names() == list(EXPERIMENTS)
    exp = syn.get("river-valley")
    cfg = exp.config_cls.quick()
    assert type(cfg) is exp.config_cls and exp.default_config() != cfg
    assert syn.run_experiment is run_experiment
    with pytest.raises(AttributeError):
        syn.not_a_name  # noqa: B018


def test_experiment_is_abstract_and_the_two_check_types_are_distinct():
    from tangentlab.synthetic.experiments import AgreementCheck, Experiment
    from tangentlab.theory import DerivationCheck

    with pytest.raises(TypeError, match="abstract"):
        Experiment()
    assert AgreementCheck is not DerivationCheck
    assert {f for f in AgreementCheck.__dataclass_fields__} >= {"measured", "predicted", "tolerance"}
