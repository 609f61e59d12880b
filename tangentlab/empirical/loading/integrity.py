"""Trajectory integrity: are the checkpoints what their step labels say?

Public suites serve revisions that are not what their names say: in Pythia, step0, step1 and
step2 hold identical weights for every model, and most pythia-2.8b branches once served
late-training weights. Before a trajectory is measured, :func:`check_trajectory` reads every
checkpoint's weights once, streamed tensor by tensor (safetensors lazily with ``safe_open``,
``.bin`` through ``torch.load(mmap=True)``), and records per checkpoint:

- ``weights_sha256``: sha256 over the per-tensor digests in sorted key order, each digest being
  sha256 of ``name | dtype | shape | raw bytes``; ``n_tensors`` and ``n_bytes``;
- a *sketch*: up to :data:`SKETCH_PER_TENSOR` elements of every floating tensor at positions fixed
  by its name and size (the same elements in every checkpoint of one architecture), in float64.
  Distances between sketches stand for distances between weights (each tensor weighted by its
  root-mean-square difference, not by its size).

Three findings, each a warning in the manifest (``integrity``) and a results row
(``checkpoint_integrity_warning``, one per finding, plus ``checkpoint_integrity_warnings``, the
count, 0 when clean):

- ``duplicate``: two checkpoints under different steps with the same ``weights_sha256``;
- ``out_of_order``: a checkpoint whose weights sit far out of step order. With ``a_i`` its sketch
  distance from the first checkpoint and ``b_i`` from the last, checkpoint i (neither the first
  nor the last) is flagged when a *later* checkpoint j is more than twice as far from the last
  one (``(1 − m) b_j > b_i``, j not the last; m = :data:`OUT_OF_ORDER_MARGIN` = 0.5), or more
  than twice as close to the first one (``a_j < (1 − m) a_i``). A branch that serves final
  weights early has ``b_i ≈ 0``; ordinary training moves away from the first and towards the
  last roughly monotonically, well inside a factor of 2 (identical early checkpoints, as
  Pythia's step0–step2, have equal distances and are not flagged here, only as duplicates);
- ``step_label``: the steps in the labels (the trailing integer of the revision or folder name)
  are not increasing in the trajectory's step order, or disagree with the recorded step.

``on_duplicate`` decides what happens: ``warn`` (default) records the warnings and measures every
checkpoint; ``error`` raises :class:`~tangentlab.errors.CheckpointError` naming every finding;
``skip`` drops the later checkpoints of each duplicate group (the lowest step is kept) and every
out-of-order checkpoint, and records which (step-label findings are only recorded). A checkpoint
is never judged out of order against a later checkpoint that repeats the reference it is measured
from (the first, or the last): that copy is a duplicate and reported as one, so with steps 0, 3
and 5 where 5 repeats 0, ``skip`` drops step 5 alone and keeps step 3. :func:`console_lines`
gives the lines the CLI prints: one per finding under ``warn``, and what was dropped under
``skip``.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tangentlab.errors import CheckpointError, ConfigError

if TYPE_CHECKING:  # annotations only
    import numpy as np

__all__ = ["ON_DUPLICATE", "OUT_OF_ORDER_MARGIN", "SKETCH_PER_TENSOR", "WeightsDigest",
           "IntegrityReport", "hash_checkpoint", "check_trajectory", "integrity_rows", "console_lines"]

#: The choices of ``--on-duplicate``.
ON_DUPLICATE = ("warn", "error", "skip")
#: Relative margin of the out-of-order rule (a factor 1 / (1 − m) = 2 between distances).
OUT_OF_ORDER_MARGIN = 0.5
#: Elements of each floating tensor kept in the sketch.
SKETCH_PER_TENSOR = 2048

_TRAILING_INT = re.compile(r"(\d+)(?!.*\d)")


@dataclass(frozen=True)
class WeightsDigest:
    """What :func:`hash_checkpoint` read: the digest, sizes and the sketch (float64, (m,))."""

    sha256: str
    n_tensors: int
    n_bytes: int
    sketch: np.ndarray | None = field(repr=False, default=None)


def _tensors(path: Path, stack):
    """{name: getter} of every weight of a checkpoint directory (files held open by ``stack``)."""
    import torch

    out = {}

    def add(key, get):
        if key in out:
            raise CheckpointError(f"checkpoint {str(path)!r} stores tensor {key!r} twice")
        out[key] = get

    st = sorted(path.glob("*.safetensors"))
    if st:
        from safetensors import safe_open

        for f in st:
            try:
                fh = stack.enter_context(safe_open(str(f), framework="pt"))
                keys = list(fh.keys())  # noqa: SIM118 (safe_open has no __iter__)
            except Exception as exc:  # noqa: BLE001 - any unreadable file is one typed error
                raise CheckpointError(f"weights file {str(f)!r} is corrupt or unreadable: "
                                      f"{str(exc).splitlines()[0] if str(exc) else exc!r}"
                                      ) from None
            for key in keys:
                add(key, lambda fh=fh, key=key: fh.get_tensor(key))
        return out
    bins = sorted(path.glob("*.bin"))
    if not bins:
        raise CheckpointError(f"checkpoint {str(path)!r} has no weights (*.safetensors or *.bin)")
    for f in bins:
        try:
            sd = torch.load(str(f), map_location="cpu", mmap=True, weights_only=True)
        except Exception as exc:  # noqa: BLE001 - any unreadable file is one typed error
            raise CheckpointError(f"weights file {str(f)!r} is corrupt or unreadable: "
                                  f"{str(exc).splitlines()[0] if str(exc) else exc!r}") from None
        for key, t in sd.items():
            add(key, lambda t=t: t)
    return out


def hash_checkpoint(path: str | Path) -> WeightsDigest:
    """Stream the weights of the checkpoint directory ``path`` into a :class:`WeightsDigest`.

    Tensors are read one at a time in sorted key order (a safetensors file stays memory-mapped;
    only one tensor is materialised at once).
    """
    from contextlib import ExitStack

    import numpy as np
    import torch

    p = Path(path)
    top = hashlib.sha256()
    n_bytes = 0
    parts = []
    with ExitStack() as stack:
        getters = _tensors(p, stack)
        for key in sorted(getters):
            t = getters[key]().detach().cpu().contiguous()
            raw = t.reshape(-1).view(torch.uint8).numpy() if t.numel() else np.zeros(0, np.uint8)
            h = hashlib.sha256(f"{key}|{t.dtype}|{tuple(t.shape)}|".encode())
            h.update(memoryview(raw))
            top.update(h.digest())
            n_bytes += raw.size
            if t.is_floating_point() and t.numel():
                n = t.numel()
                rng = np.random.default_rng([zlib.crc32(key.encode()), n])
                idx = np.sort(rng.choice(n, size=min(n, SKETCH_PER_TENSOR), replace=False))
                parts.append(t.reshape(-1)[torch.from_numpy(idx)].to(torch.float64).numpy())
    sketch = np.concatenate(parts) if parts else np.zeros(0)
    return WeightsDigest(sha256=top.hexdigest(), n_tensors=len(getters), n_bytes=int(n_bytes),
                         sketch=sketch)


@dataclass
class IntegrityReport:
    """The findings over one trajectory, and the checkpoints kept.

    ``checkpoints``: one record per checkpoint (name, step, ``weights_sha256``, sizes, sketch
    distances from the first and the last); ``warnings``: {kind, checkpoints, steps, message};
    ``skipped``: names dropped under ``skip``; ``kept``: the checkpoints to measure.
    """

    on_duplicate: str
    checkpoints: list[dict]
    warnings: list[dict]
    skipped: list[str]
    kept: list

    def manifest(self) -> dict:
        """The manifest's ``integrity`` record (JSON-ready)."""
        return {"on_duplicate": self.on_duplicate, "margin": OUT_OF_ORDER_MARGIN,
                "sketch_per_tensor": SKETCH_PER_TENSOR, "checkpoints": self.checkpoints,
                "warnings": self.warnings, "skipped": self.skipped,
                "rule": "sha256 over per-tensor sha256 (name|dtype|shape|bytes) in sorted key "
                        "order; out of order: a distance to the last (first) checkpoint more "
                        "than 1/(1-margin) times another in the wrong step order"}


def _label_step(ck) -> int | None:
    m = _TRAILING_INT.search(str(ck.revision or ck.name))
    return int(m.group(1)) if m else None


def _findings(cks, digests) -> list[dict]:
    import numpy as np

    out: list[dict] = []
    by_hash: dict[str, list[int]] = {}
    for i, dg in enumerate(digests):
        if dg is not None:
            by_hash.setdefault(dg.sha256, []).append(i)
    for idx in by_hash.values():
        if len(idx) > 1:
            names = [cks[i].name for i in idx]
            out.append({"kind": "duplicate", "checkpoints": names,
                        "steps": [cks[i].step for i in idx],
                        "message": f"checkpoints {', '.join(names)} (steps "
                                   f"{', '.join(str(cks[i].step) for i in idx)}) hold identical "
                                   "weights"})
    ok = [i for i, dg in enumerate(digests) if dg is not None]
    if len(ok) >= 3 and len({digests[i].sketch.size for i in ok}) == 1:
        S = np.stack([digests[i].sketch for i in ok])
        a = np.linalg.norm(S - S[0], axis=1)
        b = np.linalg.norm(S - S[-1], axis=1)
        f = 1 - OUT_OF_ORDER_MARGIN
        n = len(ok)
        h = [digests[i].sha256 for i in ok]
        for pos in range(1, n - 1):
            # A later copy of the reference checkpoint (the first for "near", the last for "far")
            # is a duplicate, reported as such; it says nothing about the order of pos.
            far = [j for j in range(pos + 1, n - 1) if f * b[j] > b[pos] and h[j] != h[-1]]
            near = [j for j in range(pos + 1, n) if a[j] < f * a[pos] and h[j] != h[0]]
            if not (far or near):
                continue
            ck = cks[ok[pos]]
            j = (far or near)[0]
            why = (f"its weights are closer to the last checkpoint than those of the later "
                   f"{cks[ok[j]].name!r} (distance {b[pos]:.4g} against {b[j]:.4g})" if far else
                   f"its weights are farther from the first checkpoint than those of the "
                   f"later {cks[ok[j]].name!r} (distance {a[pos]:.4g} against {a[j]:.4g})")
            out.append({"kind": "out_of_order", "checkpoints": [ck.name], "steps": [ck.step],
                        "message": f"checkpoint {ck.name!r} (step {ck.step}) sits out of step "
                                   f"order: {why}"})
    labels = [_label_step(c) for c in cks]
    known = [(c, s) for c, s in zip(cks, labels) if s is not None]
    bad = [c for c, s in known if s != c.step]
    seq = [s for _, s in known]
    if any(b2 <= a2 for a2, b2 in zip(seq, seq[1:])) or bad:
        out.append({"kind": "step_label", "checkpoints": [c.name for c, _ in known],
                    "steps": [c.step for c, _ in known],
                    "message": "step labels " + ", ".join(f"{c.name}={c.step}" for c, _ in known)
                               + " are not increasing with the recorded steps, or disagree "
                               "with them"})
    return out


def check_trajectory(checkpoints: Sequence, *, on_duplicate: str = "warn",
                     hasher=hash_checkpoint) -> IntegrityReport:
    """Hash every checkpoint, find duplicates, out-of-order weights and bad step labels.

    ``checkpoints``: :class:`~tangentlab.empirical.loading.checkpoints.Checkpoint` records in step order.
    A GGUF checkpoint is recorded as not hashed. See the module docstring for the rules and
    ``on_duplicate``.

    Raises:
        ConfigError: an unknown ``on_duplicate``.
        CheckpointError: ``on_duplicate="error"`` and a finding; or unreadable weights.
    """
    import numpy as np

    if on_duplicate not in ON_DUPLICATE:
        raise ConfigError(f"on_duplicate must be one of {', '.join(ON_DUPLICATE)}; "
                          f"got {on_duplicate!r}")
    cks = list(checkpoints)
    digests = [None if c.gguf_file else hasher(c.path) for c in cks]
    ok = [d for d in digests if d is not None]
    same = len({d.sketch.size for d in ok}) == 1 if ok else False
    recs = []
    for c, dg in zip(cks, digests):
        rec: dict[str, Any] = {"checkpoint": c.name, "step": c.step}
        if dg is None:
            rec["weights_sha256"] = None
            rec["note"] = "GGUF file: not hashed"
        else:
            rec.update(weights_sha256=dg.sha256, n_tensors=dg.n_tensors, n_bytes=dg.n_bytes)
            if same:
                rec["distance_from_first"] = float(np.linalg.norm(dg.sketch - ok[0].sketch))
                rec["distance_from_last"] = float(np.linalg.norm(dg.sketch - ok[-1].sketch))
        recs.append(rec)
    warnings = _findings(cks, digests)
    if warnings and on_duplicate == "error":
        raise CheckpointError(
            "trajectory integrity: " + "; ".join(w["message"] for w in warnings)
            + " (pass --on-duplicate warn to measure anyway, or skip to drop them)")
    skipped: list[str] = []
    if on_duplicate == "skip":
        for w in warnings:
            if w["kind"] == "duplicate":
                skipped += w["checkpoints"][1:]
            elif w["kind"] == "out_of_order":
                skipped += w["checkpoints"]
    kept = [c for c in cks if c.name not in set(skipped)]
    if not kept:
        raise CheckpointError("trajectory integrity: every checkpoint was skipped")
    return IntegrityReport(on_duplicate=on_duplicate, checkpoints=recs, warnings=warnings,
                           skipped=sorted(set(skipped), key=[c.name for c in cks].index),
                           kept=kept)


def console_lines(report: IntegrityReport) -> list[str]:
    """The lines to print on the console for ``report``: one per finding, then what was dropped.

    Under ``warn`` each finding is one line saying that every checkpoint is still measured; under
    ``skip`` each finding is one line and a last line names the checkpoints dropped. A clean
    trajectory gives no line.
    """
    if report.on_duplicate == "skip":
        tail = "; dropped" if report.skipped else "; nothing dropped"
        lines = [f"integrity: {w['message']}{tail if w['kind'] != 'step_label' else '; recorded only'}"
                 for w in report.warnings]
        if report.skipped:
            lines.append(f"integrity: --on-duplicate skip dropped {', '.join(report.skipped)}; "
                         f"measuring {', '.join(f'{c.name}@{c.step}' for c in report.kept)}")
        return lines
    return [f"integrity warning: {w['message']}; every checkpoint is measured "
            "(--on-duplicate skip drops the later copy, error stops)" for w in report.warnings]


def integrity_rows(report: IntegrityReport, base) -> list[dict]:
    """Results rows: one ``checkpoint_integrity_warning`` per finding and the count.

    ``base``: a :class:`~tangentlab.empirical.measurement.records.RowBase`; each finding's row names its
    first checkpoint and step and carries ``kind``, ``note`` (the message) and ``skipped``.
    """
    by_name = {c["checkpoint"]: c["step"] for c in report.checkpoints}
    rows = [base.with_(checkpoint="trajectory").row(
        "checkpoint_integrity_warnings", len(report.warnings), bucket="all",
        n=len(report.checkpoints), on_duplicate=report.on_duplicate)]
    for w in report.warnings:
        name = w["checkpoints"][0]
        rows.append(base.with_(checkpoint=name, step=by_name.get(name)).row(
            "checkpoint_integrity_warning", 1.0, bucket="all", kind=w["kind"], note=w["message"],
            skipped=any(c in report.skipped for c in w["checkpoints"])))
    return rows
