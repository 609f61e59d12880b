"""Revision selections of a checkpoint suite: step names, ``log:K``, ``all``, explicit lists.

Pure functions of names (no network, no cache), used by :mod:`tangentlab.empirical.loading.hub`:

- :func:`parse_revision_spec`: ``main`` (default) or any single ref; ``step0,step1000,step143000``:
  those refs, in step order; ``REV=STEP`` gives a ref's step by hand (``main=143000``); ``all``:
  every ref of the repository whose name carries a step; ``log:K``: K refs log-spaced in step
  among those (step 0 kept when present).
- :func:`parse_step`: the step a revision name carries: Pythia ``step1000``, OLMo
  ``stepN-tokensM`` and ``stage1-stepN-tokensM``, SmolLM2 ``step-125000``, ``checkpoint-500``.
- :func:`select_revisions`: the ``(revision, step)`` pairs a selection picks among a
  repository's refs. A name without a step is an error when more than one revision is measured (a
  trajectory needs an order), unless the steps are given (``REV=STEP`` or ``steps=``); a lone
  revision gets step 0.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from tangentlab.errors import CheckpointError, ConfigError, UnknownNameError

__all__ = ["parse_step", "parse_revision_spec", "log_spaced_indices", "select_revisions",
           "sample_names"]

_STEP = re.compile(r"(?:^|[-_/])(?:step|global_step|checkpoint|ckpt)[-_]?(\d+)(?=$|[-_/.])",
                   re.IGNORECASE)
_LOG = re.compile(r"^log:(\d+)$")


def parse_step(revision: str) -> int | None:
    """The training step a revision name carries, or None (``main``, ``v1.0``, ...)."""
    m = _STEP.search(str(revision))
    return int(m.group(1)) if m else None


def parse_revision_spec(spec: str | Sequence[str] | None) -> tuple[str, object]:
    """Parse a revision selection into ``(mode, value)``.

    - ``None``/``""`` → ``("list", [("main", None)])``;
    - ``"all"`` → ``("all", None)``; ``"log:K"`` → ``("log", K)``;
    - ``"a,b=100,c"`` or a sequence → ``("list", [(name, step or None), ...])``.

    Raises:
        ConfigError: ``log:0``, an empty name, or a ``REV=STEP`` whose step is not an integer.
    """
    if spec is None or (isinstance(spec, str) and not spec.strip()):
        return "list", [("main", None)]
    if isinstance(spec, str):
        s = spec.strip()
        if s == "all":
            return "all", None
        m = _LOG.match(s)
        if m:
            k = int(m.group(1))
            if k < 1:
                raise ConfigError(f"revisions {spec!r}: log:K needs K >= 1")
            return "log", k
        if s.startswith("log"):
            raise ConfigError(f"revisions {spec!r}: write log:K with an integer K, e.g. log:12")
        items = [x.strip() for x in s.split(",")]
    else:
        items = [str(x).strip() for x in spec]
    out: list[tuple[str, int | None]] = []
    for it in items:
        name, eq, step = it.partition("=")
        name = name.strip()
        if not name:
            raise ConfigError(
                f"revisions {spec!r} holds an empty name; use e.g. step0,step1000 or log:12 or all"
            )
        st = None
        if eq:
            try:
                st = int(step)
            except ValueError:
                raise ConfigError(f"revision {it!r}: the step after '=' must be an integer") from None
        out.append((name, st))
    return "list", out


def log_spaced_indices(steps: Sequence[int], k: int) -> list[int]:
    """Indices of ``k`` entries of the sorted distinct ``steps`` spread evenly in log(step).

    Step 0 (when present) is always kept; the others are the entries nearest, in log space, to
    ``k`` (or ``k - 1``) geometrically spaced targets from the smallest positive step to the
    largest, each entry used once. ``k >= len(steps)`` keeps them all.
    """
    n = len(steps)
    if k >= n:
        return list(range(n))
    chosen: list[int] = []
    pos = [i for i, s in enumerate(steps) if s > 0]
    if len(pos) < n:  # step 0 present
        chosen.append(next(i for i, s in enumerate(steps) if s <= 0))
    m = k - len(chosen)
    if m <= 0:
        return sorted(chosen)
    lo, hi = math.log(steps[pos[0]]), math.log(steps[pos[-1]])
    targets = [lo + (hi - lo) * j / (m - 1) for j in range(m)] if m > 1 else [hi]
    free = list(pos)
    for t in targets:
        best = min(free, key=lambda i: (abs(math.log(steps[i]) - t), steps[i]))
        chosen.append(best)
        free.remove(best)
    return sorted(chosen)


def select_revisions(available: Sequence[str], spec: str | Sequence[str] | None, *,
                     steps: Sequence[int] | None = None,
                     repo_id: str = "") -> list[tuple[str, int]]:
    """The ``(revision, step)`` pairs a selection picks, ordered by step.

    ``available``: the repository's refs (used by ``all`` and ``log:K``, and to name the refs
    when a listed one is missing). ``steps``: explicit steps, one per listed revision.

    Raises:
        UnknownNameError: a listed revision is not among ``available`` (when ``available`` is
            given), or ``all``/``log:K`` find no revision with a step.
        CheckpointError: a step cannot be read from a name (and was not given), or two
            revisions share a step.
        ConfigError: ``steps`` does not match the listed revisions.
    """
    mode, value = parse_revision_spec(spec)
    label = f" of {repo_id!r}" if repo_id else ""
    if mode in ("all", "log"):
        if steps is not None:
            raise ConfigError("steps= can only go with an explicit list of revisions, not all/log:K")
        stepped = sorted(((r, parse_step(r)) for r in available if parse_step(r) is not None),
                         key=lambda x: (x[1], x[0]))
        if not stepped:
            raise UnknownNameError(
                f"no revision{label} carries a training step in its name (refs: "
                f"{sample_names(available)}); list them with steps, e.g. main=143000"
            )
        pairs: list[tuple[str, int]] = []
        seen: set[int] = set()
        for r, s in stepped:  # one revision per step (the first name in sort order)
            if s not in seen:
                seen.add(s)
                pairs.append((r, int(s)))
        if mode == "log":
            idx = log_spaced_indices([s for _, s in pairs], int(value))
            pairs = [pairs[i] for i in idx]
        return pairs
    listed: list[tuple[str, int | None]] = list(value)  # type: ignore[arg-type]
    if steps is not None:
        steps = list(steps)
        if len(steps) != len(listed):
            raise ConfigError(f"{len(steps)} steps given for {len(listed)} revisions; give one each")
        listed = [(r, int(s)) for (r, _), s in zip(listed, steps)]
    if available:
        avail = set(available)
        missing = [r for r, _ in listed if r not in avail and not re.fullmatch(r"[0-9a-f]{40}", r)]
        if missing:
            raise UnknownNameError(
                f"revision {missing[0]!r} is not a ref{label}; available: {sample_names(available)}"
            )
    out: list[tuple[str, int]] = []
    for r, s in listed:
        if s is None:
            s = parse_step(r)
        if s is None:
            if len(listed) == 1:
                s = 0
            else:
                raise CheckpointError(
                    f"cannot read a training step from revision {r!r}{label}; name revisions like "
                    f"step1000 or stepN-tokensM, or give the step as {r}=STEP"
                )
        out.append((r, int(s)))
    all_steps = [s for _, s in out]
    if len(set(all_steps)) != len(all_steps):
        raise CheckpointError(f"revisions {[r for r, _ in out]}{label} share steps {all_steps}")
    return sorted(out, key=lambda x: x[1])


def sample_names(names: Sequence[str], k: int = 8) -> str:
    """``"a, b, c"``, or the first ``k`` names and ``"... (N in all)"``; ``"none"`` when empty."""
    names = list(names)
    if not names:
        return "none"
    head = ", ".join(names[:k])
    return head + (f", ... ({len(names)} in all)" if len(names) > k else "")
