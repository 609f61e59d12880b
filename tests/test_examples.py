"""Every script in examples/ runs at its quick settings and prints what it promises."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def run_example(monkeypatch, capsys):
    """``run(name, *args, cwd=...) -> stdout``: the script run as ``__main__`` in this process.

    In-process (``runpy``) rather than a subprocess, so that each example does not pay for
    importing numpy, torch and transformers again; the script still runs exactly as
    ``python examples/NAME ARGS`` would, from ``cwd``, and must exit 0.
    """
    def run(name: str, *args: str, cwd: Path) -> str:
        monkeypatch.chdir(cwd)
        monkeypatch.setattr(sys, "argv", [str(EXAMPLES / name), *args])
        capsys.readouterr()
        with pytest.raises(SystemExit) as exit_:
            runpy.run_path(str(EXAMPLES / name), run_name="__main__")
        out, err = capsys.readouterr()
        assert exit_.value.code in (0, None), err[-3000:]
        return out

    return run


def test_every_example_is_tested():
    tested = {"measure_your_arrays.py", "toy_manifold.py", "measure_checkpoints.py"}
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_measure_your_arrays_synthetic_and_from_files(tmp_path, run_example):
    out = run_example("measure_your_arrays.py", "--quick", cwd=tmp_path)
    enrichment = float(re.search(r"enrichment over matched-rank normal controls: ([\d.]+)", out)[1])
    assert enrichment > 3  # the synthetic gradients share the activations' top directions
    assert re.search(r"activations: IsoScore [\d.]+, mean cosine", out)
    # the same measurement on arrays the user saved: isotropic gradients show no enrichment
    import numpy as np

    rng = np.random.default_rng(1)
    np.save(tmp_path / "acts.npy", rng.standard_normal((400, 12)) * np.r_[np.full(3, 5.0), np.ones(9)])
    np.save(tmp_path / "grads.npy", rng.standard_normal((400, 12)))
    out = run_example("measure_your_arrays.py", "--acts", "acts.npy", "--grads", "grads.npy",
               "--rank", "3", cwd=tmp_path)
    assert "activations (400, 12), gradients (400, 12)" in out
    enrichment = float(re.search(r"enrichment over matched-rank normal controls: ([\d.]+)", out)[1])
    assert 0.5 < enrichment < 1.6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acts.npy", "grads.npy"]


@pytest.mark.slow
def test_toy_manifold(tmp_path, run_example):
    out = run_example("toy_manifold.py", "--quick", "--out", "vis", cwd=tmp_path)
    assert "true Gauss curvature 1.000" in out
    vis = [float(v) for v in re.findall(r"visibility \(normal/tangent variance\) ([\d.]+)", out)]
    assert len(vis) == 3 and vis[0] < vis[1] < vis[2]  # curvature shows at larger scales
    passed, total = map(int, re.search(r"visibility experiment: (\d+)/(\d+) checks", out).groups())
    assert total > 0 and passed == total
    assert (tmp_path / "vis" / "results.csv").is_file()


@pytest.mark.slow
def test_measure_checkpoints(tmp_path, run_example):
    out = run_example("measure_checkpoints.py", "--quick", "--out", "m", cwd=tmp_path)
    assert "trained a tiny decoder: ['step_000000', 'step_000001', 'step_000003', 'step_000012']" in out
    rows = re.findall(r"step +(\d+)  (blocks\.\d+\.resid_post) +([\d.]+) \[([\d.]+), ([\d.]+)\]", out)
    keys = [(int(s), site) for s, site, *_ in rows]
    assert len(keys) == len(set(keys))  # each (step, site) once (it printed twice, two values)
    assert set(keys) == {(s, f"blocks.{b}.resid_post") for s in (0, 1, 3, 12) for b in (0, 1)}
    assert all(float(lo) <= float(v) <= float(hi) for *_, v, lo, hi in rows)
    assert (tmp_path / "m" / "manifest.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]  # training went to a temp folder
