"""The run-directory contract (tangentlab.contract): every producer's run directory, one writer."""

from __future__ import annotations

import dataclasses
import importlib
import json

import pytest

import tangentlab
from tangentlab.contract import (
    RunOutput,
    check_run,
    failed_checks,
    jsonable,
    read_checks,
    run_passed,
    write_run,
)
from tangentlab.errors import DataError, OutputPathError


def _output(passed=(True, False)) -> RunOutput:
    return RunOutput(rows=[{"metric": "x", "value": 1.5}],
                     checks=[{"name": f"c{i}", "passed": p} for i, p in enumerate(passed)],
                     figures={"f.png": b"\x89PNG"}, files={"extra.json": {"a": 1}},
                     extra={"note": "n"})


def test_write_run_writes_the_layout_and_the_manifest_counts(tmp_path):
    out = write_run(tmp_path / "run", kind="demo", config={"k": 1}, produce=_output,
                    seeds={"seed": 3}, quick=True)
    assert sorted(p.name for p in out.iterdir()) == [
        "checks.json", "extra.json", "f.png", "manifest.json", "results.csv"]
    m = json.loads((out / "manifest.json").read_text())
    assert (m["kind"], m["quick"], m["figures"], m["checks_passed"], m["checks_total"],
            m["note"], m["seeds"]) == ("demo", True, ["f.png"], 1, 2, "n", {"seed": 3})
    assert "run" in m["timings_s"]
    assert failed_checks(out) == ["c1"] and not run_passed(out)
    check_run(out, kind="demo", checks=True, needs=("f.png",))


def test_write_run_leaves_nothing_on_failure_and_refuses_another_kind(tmp_path):
    def boom() -> RunOutput:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_run(tmp_path / "run", kind="demo", config={}, produce=boom, seeds={}, quick=False)
    assert list(tmp_path.iterdir()) == []
    write_run(tmp_path / "run", kind="demo", config={}, produce=_output, seeds={}, quick=False)
    with pytest.raises(OutputPathError, match="'demo' run, not a 'other' run"):
        write_run(tmp_path / "run", kind="other", config={}, produce=_output, seeds={}, quick=False)


def test_a_synthetic_experiment_never_replaces_another_kind_of_run(tmp_path):
    """Before the contract, ``run_experiment`` replaced any earlier run (it gave no kind)."""
    from tangentlab.synthetic.experiments import run_experiment

    run = write_run(tmp_path / "run", kind="validate", config={}, produce=_output, seeds={},
                    quick=False)
    with pytest.raises(OutputPathError, match="'validate' run"):
        run_experiment("river-valley", run, quick=True)
    assert json.loads((run / "manifest.json").read_text())["kind"] == "validate"


def test_check_run_and_read_checks_refuse_what_is_missing(tmp_path):
    out = write_run(tmp_path / "run", kind="demo", config={}, seeds={}, quick=False,
                    produce=lambda: RunOutput(rows=[], checks=[]))
    with pytest.raises(DataError, match="no rows"):
        check_run(out)
    with pytest.raises(DataError, match="lists no check"):
        check_run(out, rows=False, checks=True)
    with pytest.raises(DataError, match="not a 'other' run"):
        check_run(out, kind="other", rows=False)
    with pytest.raises(DataError, match="holds no x.png"):
        check_run(out, rows=False, needs=("x.png",))
    assert not run_passed(out)  # no checks is not a pass
    (out / "checks.json").write_text('[{"name": "a"}]')
    with pytest.raises(DataError, match="passed"):
        read_checks(out)


def test_jsonable_is_strict_json():
    import numpy as np

    doc = jsonable({"a": np.float64("nan"), "b": (np.int64(2), float("inf")),
                    "c": np.arange(2), "d": np.bool_(True)})
    assert doc == {"a": None, "b": [2, "inf"], "c": [0, 1], "d": True}
    json.dumps(doc, allow_nan=False)


def _config_classes() -> list[type]:
    """Every Config subclass of the package (the modules defining one, found by their source)."""
    from pathlib import Path

    from tangentlab.config import Config

    root = Path(tangentlab.__file__).parent
    for path in root.rglob("*.py"):
        if "(Config)" in path.read_text():
            rel = path.relative_to(root.parent).with_suffix("")
            importlib.import_module(".".join(rel.parts).removesuffix(".__init__"))
    seen, todo = [], list(Config.__subclasses__())
    while todo:
        c = todo.pop()
        seen.append(c)
        todo += c.__subclasses__()
    return [c for c in seen if c.__module__.startswith("tangentlab.")]


def test_every_config_spells_its_quick_variant_one_way():
    from tangentlab.pipeline.reproduce import QUICK, ReproduceConfig

    classes = _config_classes()
    assert len(classes) >= 10
    for cls in classes:
        if cls is ReproduceConfig:  # its field ``quick`` is the flag every stage receives
            assert QUICK.quick
            continue
        assert isinstance(cls.quick(), cls), cls
    for name in ("visibility", "river-valley"):
        from tangentlab.synthetic.experiments import get

        exp = get(name)
        assert not hasattr(exp, "quick_config")
        assert exp.config_cls.quick() != exp.config_cls()


def test_every_producer_of_the_quick_reproduce_writes_the_contract(quick_reproduce):
    """Every row of the stage table, checked by its own output check and by the contract."""
    from tangentlab.contract import REPORT
    from tangentlab.pipeline.producers import check_output
    from tangentlab.pipeline.reproduce import QUICK, producers
    from tangentlab.runs import read_manifest

    run_dir, rc, err, _ = quick_reproduce(2)
    table = producers(QUICK)
    assert {p.name for p in table} >= {"theory", "validate", "report", "train/encoder",
                                       "measure/decoder", "synthetic/visibility"}
    for p in table:
        out = run_dir / (p.output or p.name)
        check_output(p, out)
        if p.name == REPORT:
            continue
        manifest = read_manifest(out)
        assert manifest["kind"] == p.check.get("kind", manifest["kind"]), p.name
        if "checks_total" in manifest:  # written through write_run
            checks = read_checks(out)
            assert manifest["checks_total"] == len(checks) > 0, p.name
            assert manifest["checks_passed"] == sum(c["passed"] for c in checks), p.name
            assert all((out / f).is_file() for f in manifest["figures"]), p.name
            assert manifest["quick"] == (p.name != "theory"), p.name


def test_the_producer_table_hashes_what_it_passes():
    from tangentlab.pipeline.reproduce import QUICK, build_stages, producers

    for p, s in zip(producers(QUICK), build_stages(QUICK)):
        assert s.name == p.name and dict(s.params) == dict(p.params)
        assert "device" not in s.params  # the device does not change the numbers
    assert dataclasses.is_dataclass(producers(QUICK)[0])
