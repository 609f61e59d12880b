"""The reproduce job: its config, its real stage list, the CLI, and (slow) one real --quick run."""

from __future__ import annotations

import dataclasses
import importlib
import json

import pytest

from tangentlab.cli import main
from tangentlab.errors import ConfigError, TangentlabError
from tangentlab.pipeline.reproduce import (
    DEFAULT,
    QUICK,
    ReproduceConfig,
    build_stages,
    config_toml,
    new_run_dir,
    resolve_config,
)


def test_quick_variant_differs_only_where_it_should():
    assert DEFAULT.preset == "small" and not DEFAULT.quick
    assert QUICK.preset == "tiny" and QUICK.quick
    assert not QUICK.bridge_text and DEFAULT.bridge_text == "bible"  # no bridge-text stages
    assert dataclasses.replace(QUICK, preset="small", quick=False, measure_overrides=(),
                               bridge_text="bible") == DEFAULT


def test_quick_measure_overrides_come_from_the_empirical_quick_preset():
    from tangentlab.config import load_config
    from tangentlab.empirical.measurement.protocol import MeasureConfig

    mine = dict(item.split("=", 1) for item in QUICK.measure_overrides)
    assert mine, "the quick variant must lighten the measurement"
    resolved = load_config(MeasureConfig, overrides=mine)
    assert resolved == MeasureConfig.quick() != MeasureConfig()


def test_real_stage_graph_trains_first_and_reports_after_everything():
    from tangentlab.synthetic import names as synthetic_names

    names = [s.name for s in build_stages(DEFAULT)]
    assert names == [
        "train/encoder", "train/decoder", "measure/encoder", "measure/decoder", "validate",
        "theory", *[f"synthetic/{n}" for n in synthetic_names()], "bridge/encoder",
        "bridge/decoder", "report",
    ]
    by = {s.name: s for s in build_stages(DEFAULT)}
    assert by["measure/decoder"].depends == ("train/decoder",)
    assert by["bridge/decoder"].depends == ("train/decoder",)
    assert by["train/encoder"].resumable and by["report"].always
    assert set(by["report"].after) == set(names[:-1]) and by["report"].depends == ()
    assert by["report"].output_path == "report.html"
    # the quick flag and the preset reach the stages' hashed params
    q = {s.name: s for s in build_stages(QUICK)}
    assert q["train/encoder"].params["preset"] == "tiny" and q["synthetic/visibility"].params["quick"]
    # the validate stage knows how far the run trains (certificates validated later go
    # unchecked): the presets' steps, and the longest of the models after a train override
    assert q["validate"].params["trained_to"] == 60 and by["validate"].params["trained_to"] == 1000
    longer = dataclasses.replace(QUICK, train_overrides=("decoder:steps=90",))
    assert {s.name: s for s in build_stages(longer)}["validate"].params["trained_to"] == 90


def test_config_from_toml_and_overrides(tmp_path):
    path = tmp_path / "cfg.toml"
    path.write_text('[reproduce]\nseed = 3\narchs = ["decoder"]\ntrain_overrides = ["decoder:steps=5"]\n')
    cfg = resolve_config(quick=True, path=path, overrides=["corpus=bible", "synthetic=visibility"])
    assert (cfg.seed, cfg.archs, cfg.corpus, cfg.synthetic, cfg.preset) == (3, ("decoder",), "bible", ("visibility",), "tiny")
    names = [s.name for s in build_stages(cfg)]
    assert names == ["train/decoder", "measure/decoder", "validate", "theory", "synthetic/visibility",
                     "report"]
    assert build_stages(cfg)[0].params["overrides"] == {"steps": "5"}
    # the printed TOML loads back to the same config
    again = tmp_path / "again.toml"
    again.write_text(config_toml(cfg))
    assert resolve_config(path=again) == cfg


@pytest.mark.parametrize("override, match", [
    (["seed=abc"], "integer"),
    (["archs=encoder,mystery"], "archs"),
    (["device=tpu"], "device"),
    (["synthetic_overrides=visibility"], "experiment:key=value"),
    (["synthetic=visibility,mystery"], "mystery"),
    (["nonsense=1"], "unknown"),
])
def test_bad_config_is_a_config_error(override, match):
    with pytest.raises(TangentlabError, match=match):
        build_stages(resolve_config(overrides=override))


def test_cli_bad_input_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["reproduce", "--quick", "--out", str(out), "--set", "seed=x"]) == 2
    assert "seed" in capsys.readouterr().err and not out.exists()


def test_cli_print_config(capsys):
    assert main(["reproduce", "--quick", "--print-config", "--seed", "7"]) == 0
    text = capsys.readouterr().out
    assert "[reproduce]" in text and "seed = 7" in text and 'preset = "tiny"' in text


def test_new_run_dir_is_unique(tmp_path):
    a = new_run_dir(tmp_path)
    a.mkdir()
    b = new_run_dir(tmp_path)
    assert a != b and a.parent == b.parent == tmp_path


def test_resume_without_latest_is_a_clean_error(tmp_path, capsys):
    assert main(["reproduce", "--resume", "--runs-root", str(tmp_path)]) == 2
    assert "--resume found no" in capsys.readouterr().err


def test_config_rejects_duplicate_names():
    with pytest.raises(ConfigError):
        ReproduceConfig(archs=("encoder", "encoder"))


def test_importing_the_report_package_stays_light():
    import subprocess
    import sys

    code = ("import sys, tangentlab.report, tangentlab.commands.reproduce, tangentlab.commands.report; "
            "print(','.join(m for m in ('torch', 'pandas', 'matplotlib', 'sympy', 'transformers') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_cli_exit_code_reflects_failed_stages_and_theory_checks(tmp_path, monkeypatch, capsys):
    rp = importlib.import_module("tangentlab.pipeline.reproduce")
    from tests.report.fixtures import fixture_stages

    monkeypatch.setattr(rp, "build_stages", lambda cfg: fixture_stages()[:-1])
    assert main(["reproduce", "--quick", "--out", str(tmp_path / "ok")]) == 0

    monkeypatch.setattr(rp, "build_stages", lambda cfg: fixture_stages(fail_train_decoder=True)[:-1])
    assert main(["reproduce", "--quick", "--out", str(tmp_path / "failed")]) == 1
    err = capsys.readouterr().err
    assert "stage train/decoder failed: RuntimeError: boom" in err
    assert "stage measure/decoder skipped: depends on train/decoder, which failed" in err

    monkeypatch.setattr(rp, "build_stages", lambda cfg: fixture_stages(theory_fail=True)[:-1])
    assert main(["reproduce", "--quick", "--out", str(tmp_path / "theory")]) == 1
    assert "theory checks failed" in capsys.readouterr().err


def test_cli_resume_continues_latest(tmp_path, monkeypatch):
    rp = importlib.import_module("tangentlab.pipeline.reproduce")
    from tests.report.fixtures import fixture_stages

    monkeypatch.setattr(rp, "build_stages", lambda cfg: fixture_stages()[:2])
    assert main(["reproduce", "--quick", "--runs-root", str(tmp_path)]) == 0
    first = (tmp_path / "latest").resolve()
    assert main(["reproduce", "--quick", "--resume", "--runs-root", str(tmp_path)]) == 0
    assert (tmp_path / "latest").resolve() == first
    assert [p.name for p in tmp_path.iterdir() if not p.is_symlink()] == [first.name]
    manifest = json.loads((first / "manifest.json").read_text())
    assert all(rec["reused"] for rec in manifest["stages"].values())


def test_cli_out_that_is_a_file_is_one_line_exit_2(tmp_path, capsys):
    target = tmp_path / "a-file"
    target.write_text("mine")
    assert main(["reproduce", "--quick", "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is an existing file" in err[0]
    assert target.read_text() == "mine"


def test_a_second_reproduce_on_a_locked_run_is_refused(tmp_path, capsys):
    import subprocess
    import sys

    out = tmp_path / "run"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time; from tangentlab.runs import run_lock\n"
         "with run_lock(sys.argv[1], command='someone else'):\n"
         "    print('locked', flush=True); time.sleep(60)\n", str(out)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        assert main(["reproduce", "--quick", "--out", str(out)]) == 4
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert "someone else" in err and str(holder.pid) in err
    assert not (out / "manifest.json").exists()


def test_external_measures_are_validated():
    cfg = resolve_config(quick=True, overrides=["external_measures=pythia=runs/p,olmo=runs/o"])
    assert cfg.external_measures == ("pythia=runs/p", "olmo=runs/o")
    with pytest.raises(ConfigError, match="must look like NAME=DIR"):
        resolve_config(overrides=["external_measures=no-folder"])
