"""DDP training on 2 gloo ranks (CPU): the single-process losses, rank 0 writes, kill and resume.

Each test launches ``python -m tangentlab empirical train ... --nproc 2`` (torch's elastic
launcher on a free loopback port) and compares with an in-process single-process run of the
same config.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

TINY = ["--preset", "tiny", "--set", "measure_every=0", "--device", "cpu"]


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    env.update({"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TANGENTLAB_QUIET": "1"})
    env.pop("TANGENTLAB_FAULT", None)
    env.update(extra)
    return env


def _cli(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tangentlab", *args], capture_output=True,
                          text=True, env=_env(**env), timeout=300)


def _losses(run: Path) -> dict[int, float]:
    lines = (run / "train_log.csv").read_text().splitlines()[1:]
    return {int(x.split(",")[0]): float(x.split(",")[1]) for x in lines}


def _single(arch: str, out: Path, steps: int) -> Path:
    from tangentlab.empirical import train_model

    return train_model(arch, out, preset="tiny", device="cpu", seed=0,
                       overrides={"measure_every": 0, "steps": steps})


def _weights(run: Path, step: int):
    from safetensors.numpy import load_file

    return load_file(str(run / "checkpoints" / f"step_{step:06d}" / "model.safetensors"))


def _assert_same_training(ref: Path, run: Path, steps: int) -> None:
    a, b = _losses(ref), _losses(run)
    assert sorted(a) == sorted(b) == list(range(1, steps + 1))
    for s in a:  # same global batch, same data order: equal up to the reduction order
        assert abs(a[s] - b[s]) <= 1e-5 * abs(a[s]), (s, a[s], b[s])
    wa, wb = _weights(ref, steps), _weights(run, steps)
    assert wa.keys() == wb.keys()
    import numpy as np

    for k in wa:
        np.testing.assert_allclose(wb[k], wa[k], rtol=0, atol=1e-4, err_msg=k)


def test_ddp_encoder_matches_single_process(tmp_path):
    """MLM: ranks hold different numbers of masked tokens, the loss is still the global mean."""
    steps = 6
    ref = _single("encoder", tmp_path / "one", steps)
    out, system_tmp = tmp_path / "two", tmp_path / "system-tmp"
    system_tmp.mkdir()
    r = _cli(["empirical", "train", "--arch", "encoder", "--out", str(out), "--nproc", "2",
              "--set", f"steps={steps}", *TINY], TMPDIR=str(system_tmp))
    assert r.returncode == 0, r.stderr
    # the launcher, its fork server and the elastic agent's rank folders left nothing behind
    assert sorted(p.name for p in system_tmp.iterdir()) == []
    assert r.stdout.strip() == str(out)  # rank 0 alone printed the run directory
    _assert_same_training(ref, out, steps)
    man = json.loads((out / "manifest.json").read_text())
    assert man["distributed"] == {"world_size": 2, "backend": "gloo",
                                  "rank_devices": {"0": "cpu", "1": "cpu"}}
    single = json.loads((ref / "manifest.json").read_text())["distributed"]
    assert single["world_size"] == 1 and single["backend"] is None
    # rank 0 alone wrote: the same files as the single-process run, no stray temporaries
    names = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    assert names == sorted(p.relative_to(ref).as_posix() for p in ref.rglob("*"))


@pytest.mark.parametrize("killed", [1])
def test_ddp_kill_one_rank_then_resume(tmp_path, killed):
    """A rank killed part-way ends the run (one error line, no manifest); --resume finishes
    it with the single-process losses and weights."""
    steps = 12
    ref = _single("decoder", tmp_path / "one", steps)
    out = tmp_path / "two"
    args = ["empirical", "train", "--arch", "decoder", "--out", str(out), "--nproc", "2",
            "--set", f"steps={steps}", *TINY]
    r = _cli(args, TANGENTLAB_FAULT=f"train_step:8:{killed}")
    assert r.returncode != 0
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("tangentlab: error:")]
    assert len(errors) == 1, r.stderr
    assert not (out / "manifest.json").exists()
    done = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert done[-1] == "step_000006" and not [n for n in done if n.startswith(".")]
    r = _cli(args + ["--resume"])
    assert r.returncode == 0, r.stderr
    _assert_same_training(ref, out, steps)
    assert json.loads((out / "manifest.json").read_text())["resumed_from"] == 6


def test_sigterm_to_the_launcher_stops_every_rank_with_one_line_naming_it(tmp_path):
    """SIGTERM to ``--nproc``'s launcher while rank 0 writes a checkpoint: the elastic agent
    stops both ranks, and the one line says why ("stopped by SIGTERM", which the launcher told
    rank 0 before the agent stopped it), not "another rank stopped part-way"; exit 143, none of
    torch's own log lines, no manifest."""
    import signal

    from tests.killing import start_paused

    out = tmp_path / "two"
    args = ["empirical", "train", "--arch", "decoder", "--out", str(out), "--nproc", "2",
            "--set", "steps=12", *TINY]
    system_tmp = tmp_path / "system-tmp"
    system_tmp.mkdir()
    proc = start_paused(args, "checkpoint:6", tmp_path,
                        env={"TANGENTLAB_FAULT": "", "TMPDIR": str(system_tmp)})
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert [ln for ln in err.splitlines() if ln.strip()] == [
        "tangentlab: error: stopped by SIGTERM; no results were written"], err
    assert not (out / "manifest.json").exists()
    assert sorted(p.name for p in system_tmp.iterdir()) == []  # a stopped launch cleans up too
