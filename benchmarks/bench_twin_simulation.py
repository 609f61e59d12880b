"""Benchmark: seconds per end-to-end twin simulation, ours against the way before issue 35's cuts.

Runs, in one process, ``--rounds`` rounds of the same simulations of a planted twin of RUN
(``tangentlab validate --end-to-end --like RUN``), alternating two ways:

- (a) ours: :func:`tangentlab.validate.end_to_end.simulate` as it is (the measurement draws no
  figures, and the eval text's encoding is remembered across the trajectories of one process);
- (b) before: the same simulations drawing both figures and encoding the eval text afresh for
  every measurement (``encode_documents``'s memory emptied, ``figures=True``).

Both ways give the same statuses (checked: the benchmark stops if they differ). It prints the
seconds per simulation of each, the ratio (b)/(a), and the components the cuts remove (the
measurement's own "figures" timer, and the seconds spent encoding).

Usage::

    python benchmarks/bench_twin_simulation.py RUN            # 2 rounds x 2 simulations
    python benchmarks/bench_twin_simulation.py RUN --rounds 3 --scenarios effect,no-effect,drift

RUN is a reproduce run (``tangentlab reproduce --quick --out RUN`` makes a small one). Run it on
a quiet machine (``uptime``); the first round warms the imports and is reported apart.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def _before():
    """The way before: figures drawn, no encoding remembered."""
    import tangentlab.empirical.loading.tokenizer as tok
    import tangentlab.empirical.measurement.protocol as protocol

    real_measure, keep = protocol.measure_trajectory, tok._ENCODED_KEEP

    def with_figures(*args, **kw):
        kw["figures"] = True
        return real_measure(*args, **kw)

    protocol.measure_trajectory = with_figures
    tok._ENCODED_KEEP = 0
    tok._ENCODED.clear()
    try:
        yield
    finally:
        protocol.measure_trajectory, tok._ENCODED_KEEP = real_measure, keep


@contextmanager
def _encoding_timer(box: list[float]):
    """Add the seconds spent in ``encode_documents`` (both ways' encodings) to ``box[0]``."""
    import tangentlab.empirical.loading.data as data
    import tangentlab.empirical.loading.tokenizer as tok

    real = tok.encode_documents

    def timed(*args, **kw):
        t = time.perf_counter()
        try:
            return real(*args, **kw)
        finally:
            box[0] += time.perf_counter() - t

    tok.encode_documents = data.encode_documents = timed
    try:
        yield
    finally:
        tok.encode_documents = data.encode_documents = real


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", help="a reproduce run directory to twin")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--scenarios", default="effect,no-effect")
    args = ap.parse_args(argv)

    import tangentlab.validate.end_to_end as e2e
    from tangentlab._runtime import torch_threads
    from tangentlab.validate.twin import twin_setting

    cfg = twin_setting(args.run, sims=1)
    text = e2e._shared_text(cfg)
    names = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    work = Path(tempfile.mkdtemp(prefix="bench-twin-"))
    times: dict[str, list[float]] = {"ours": [], "before": []}
    encoding = {"ours": [0.0], "before": [0.0]}
    with torch_threads(1):
        for rnd in range(args.rounds + 1):
            got = {}
            for way in ("before", "ours") if rnd % 2 else ("ours", "before"):
                box = encoding[way] if rnd else [0.0]
                t = time.perf_counter()
                with _encoding_timer(box), (_before() if way == "before" else _nothing()):
                    got[way] = [e2e.simulate(cfg, n, rnd, text, work / way).statuses
                                for n in names]
                if rnd:  # round 0 warms the imports
                    times[way].append((time.perf_counter() - t) / len(names))
            if got["ours"] != got["before"]:
                print("the two ways gave different statuses:", got)
                return 1
    n = args.rounds * len(names)
    a, b = (sum(times[w]) / len(times[w]) for w in ("ours", "before"))
    spread = {w: f"{min(times[w]):.2f}-{max(times[w]):.2f}" for w in times}
    print(f"twin of {args.run}: {cfg.units} unit(s), {len(cfg.steps)} checkpoints; "
          f"{args.rounds} rounds x {len(names)} simulations ({', '.join(names)}), 1 thread")
    print(f"(a) ours:   {a:.2f} s per simulation (round means {spread['ours']})")
    print(f"(b) before: {b:.2f} s per simulation (round means {spread['before']})")
    print(f"ratio (b)/(a): {b / a:.2f}")
    print(f"encoding per simulation: ours {encoding['ours'][0] / n:.2f} s, before "
          f"{encoding['before'][0] / n:.2f} s; figures are the rest of the difference")
    return 0


@contextmanager
def _nothing():
    yield


if __name__ == "__main__":
    raise SystemExit(main())
