"""Benchmark of the empirical protocol on the ``small`` decoder (d=128, 4 layers, vocab 4096).

Prints, in one process:

1. plain forward+backward over N tokens (the floor: one backward pass) against a full measure of
   one checkpoint over the same N tokens (all default sites, 20 controls, oracle, frequency
   buckets with the batch bootstrap, IsoScore*, fixed and refit proxies, frequency-geometry);
   target ratio <= 1.3; the split (the passes alone, the statistics) beside the prediction of
   :mod:`tangentlab.measure.cost_model` at this CPU's rates (timed by ``calibrate``);
2. the causal check (ablation + steering, extra forward passes by design): cost per control;
3. training tokens/s with the in-loop measurement every k steps against none (target <= 10%).

``--split`` also prints where the statistics' time goes inside those same measures, measured (each
part's library call wrapped in a timer), not modelled: the passes, the per-batch energies, the
moments, the control pools, the proxy fits, the energy tests, the frequency correlations, and
what is left. The bridge (theory against measurement, run after the checkpoints and outside the
per-checkpoint timers) is switched off there, since its own passes would count in the split.

``--set KEY=VALUE`` (repeatable) measures under other ``MeasureConfig`` settings, for example
``--set control_pool=50 --set n_boot=200`` to see how much of the statistics' share is the
statistical design (the control pools, the bootstrap replicates) rather than overhead.

Usage: python benchmarks/bench_measure.py [--batches 4] [--repeats 3] [--skip-causal] [--skip-train]
       [--split] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

#: --split: (label, module, attribute[, class]) of each timed part; the label sums its calls
SPLIT_PARTS = (
    ("passes (capture_batch)", "tangentlab.empirical.loading.capture", "capture_batch", None),
    ("per-batch energies", "tangentlab.measure.batch_energy", "add", "EnergyStreamGroup"),
    ("per-batch energies", "tangentlab.measure.batch_energy", "_setup", "EnergyStream"),
    ("per-batch energies", "tangentlab.measure.batch_energy", "finish", "EnergyStream"),
    ("moments", "tangentlab.measure.moments", "update", "MomentAccumulator"),
    ("moments", "tangentlab.measure.moments", "update_indexed", "MomentAccumulator"),
    ("forced-direction cosines", "tangentlab.measure.constrained", "forced_cosine_parts", None),
    ("control pools", "tangentlab.empirical.measurement.protocol", "energy_test_subspaces", None),
    ("proxy fits", "tangentlab.empirical.measurement.proxy_schedule", "proxies", "ProxySchedule"),
    ("proxy fits", "tangentlab.empirical.measurement.proxy_schedule", "fit_fixed", "ProxySchedule"),
    ("energy tests (bootstrap + oracle)", "tangentlab.empirical.measurement.protocol", "energy_rows", None),
    ("frequency correlations", "tangentlab.empirical.measurement.protocol", "frequency_rows", None),
    ("isotropy share", "tangentlab.empirical.measurement.protocol", "isotropy_share_rows", None),
    ("representation metrics", "tangentlab.empirical.measurement.protocol", "representation_rows", None),
)


def _install_split_timers() -> dict:
    """Wrap each :data:`SPLIT_PARTS` call in a timer; returns the {label: seconds} it fills."""
    import functools
    import importlib

    spent: dict[str, float] = {}
    running: set[str] = set()  # labels timing now: a nested call of the same label (a group's
    for label, module, name, cls in SPLIT_PARTS:  # add running each stream's _setup) counts once
        owner = importlib.import_module(module)
        owner = getattr(owner, cls) if cls else owner
        inner = getattr(owner, name)

        @functools.wraps(inner)
        def timed(*a, _inner=inner, _label=label, **k):
            if _label in running:
                return _inner(*a, **k)
            running.add(_label)
            t0 = time.perf_counter()
            try:
                return _inner(*a, **k)
            finally:
                running.discard(_label)
                spent[_label] = spent.get(_label, 0.0) + time.perf_counter() - t0

        setattr(owner, name, timed)
    return spent


def _print_split(splits: list[dict], totals: list[float]) -> None:
    """Each part's median seconds over the measures, and what the parts leave of the total."""
    labels = list(dict.fromkeys(label for label, *_ in SPLIT_PARTS))
    med = {k: statistics.median(s.get(k, 0.0) for s in splits) for k in labels}
    rest = statistics.median(t - sum(s.values()) for s, t in zip(splits, totals))
    print("  SPLIT, measured inside the measures (median seconds of each part; the passes run in "
          "the measure, cold after each load):")
    for k in labels:
        print(f"    {k:36s} {med[k]:.3f}")
    print(f"    {'the rest (indexing, copies, rows)':36s} {rest:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=4,
                    help="eval batches of 16 x 128 tokens (the eval text holds 5 disjoint ones)")
    ap.add_argument("--steps", type=int, default=100, help="training steps per timing run")
    ap.add_argument("--every", type=int, default=50, help="in-loop measurement period k")
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--skip-causal", action="store_true", help="stop after the measure (part 1)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="timed runs of the plain pass and of the passes alone (median)")
    ap.add_argument("--split", action="store_true",
                    help="time the parts of the statistics inside the measures (part 1)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a MeasureConfig override of the measure in part 1 (repeatable)")
    args = ap.parse_args()
    os.environ.setdefault("TANGENTLAB_QUIET", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from tangentlab.empirical.measurement.protocol import measure_trajectory
    from tangentlab.empirical.training.train import train_model

    root = Path(tempfile.mkdtemp(prefix="bench_measure_"))
    # A small decoder trajectory with only steps 0 and 1 (we time measurement, not learning).
    run = train_model("decoder", root / "run", preset="small", device="cpu",
                      overrides={"steps": 1, "n_checkpoints": 2, "measure_every": 0})
    ck = run / "checkpoints" / "step_000001"
    B, T = 16, 128
    N = args.batches * B * T

    # 1a. plain forward + backward of the training loss over the same N tokens
    from tangentlab.empirical.loading.corpus import load_frequency_table, load_texts
    from tangentlab.empirical.loading.data import make_eval_data
    from tangentlab.empirical.loading.models import load_model
    from tangentlab.empirical.loading.tokenizer import load_tokenizer

    lm = load_model(ck)
    tok = load_tokenizer(run / "tokenizer")
    ev = make_eval_data(tok, "decoder", texts=load_texts(run / "eval.jsonl"),
                        counts=load_frequency_table(run / "frequency.csv"), frequency_source="run",
                        n_batches=args.batches, batch_size=B, seq_len=T, seed=0, n_buckets=5)
    model = lm.model
    from tangentlab.empirical.loading.capture import capture_batch
    from tangentlab.empirical.loading.sites import normalize_site
    from tangentlab.empirical.measurement.protocol import MeasureConfig

    sites = [normalize_site(model, s) for s in MeasureConfig().sites]  # the measure's sites

    def plain_pass() -> float:
        t0 = time.perf_counter()
        for inp, lab, _, _ in ev.batches:
            model(input_ids=inp, labels=lab).loss.backward()
        model.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    def passes_alone() -> float:
        # the passes of a measure without any statistic: forward over the fit half, forward +
        # backward (to the sites, parameters frozen) over the test half
        t0 = time.perf_counter()
        for b in ev.batches:
            capture_batch(lm, sites, b.input_ids, b.labels, masked=b.masked,
                          grads=b.half == "test")
        return time.perf_counter() - t0

    # Both timings warm up once, then take the median of --repeats runs, interleaved, so that
    # neither is a cold first call (a cold passes-alone timing read 1.02 s against 0.63 s warm,
    # and made the statistics' share look smaller than it is).
    plain_pass(), passes_alone()
    plains, passes_runs = [], []
    for _ in range(args.repeats):
        plains.append(plain_pass())
        passes_runs.append(passes_alone())
    plain, passes = statistics.median(plains), statistics.median(passes_runs)

    # 1b. a full measure of that one checkpoint (no causal check), same batches, and as many
    # torch threads as the plain pass (by default a measurement inherits the training's thread
    # count, 1 for the small preset, which would compare one thread against all cores)
    threads = torch.get_num_threads()
    common = {"n_batches": args.batches, "batch_size": B, "seq_len": T, "threads": threads}
    from tangentlab.config import parse_overrides

    extra = parse_overrides(args.set)  # --set overrides of the measure (part 1 only)
    if args.split:  # the bridge (after the checkpoints, outside the per-checkpoint timers)
        extra.setdefault("bridge", "false")  # would add its own passes to the split's
    runs_t, splits = [], []
    spent = _install_split_timers() if args.split else None
    for k in range(args.repeats):  # the median of each component over --repeats measures
        if spent is not None:
            spent.clear()
        m1 = measure_trajectory(ck, root / f"m1_{k}", device="cpu", overrides={
            **common, "causal": False, "eval_text": str(run / "eval.jsonl"), **extra})
        man1 = json.loads((m1 / "manifest.json").read_text())
        runs_t.append(man1["timings_s"])
        if spent is not None:
            splits.append(dict(spent))
    t1 = {key: statistics.median(t.get(key, 0.0) for t in runs_t) for key in runs_t[0]}
    per_ckpt_runs = [t.get("capture", 0) + t.get("proxy_fit", 0) + t.get("metrics", 0)
                     for t in runs_t]
    per_ckpt = statistics.median(per_ckpt_runs)
    print(f"N = {N} tokens ({args.batches} batches of {B}x{T}), torch threads {threads} "
          f"(plain and measure; the measure's manifest says {man1['torch_threads']})")
    print(f"plain forward+backward: {plain:.2f} s (median of {args.repeats}: "
          f"{', '.join(f'{x:.2f}' for x in plains)})")

    print(f"measure of one checkpoint (capture {t1.get('capture', 0):.2f} + proxy fit "
          f"{t1.get('proxy_fit', 0):.2f} + metrics {t1.get('metrics', 0):.2f}, medians): "
          f"{per_ckpt:.2f} s (runs: {', '.join(f'{x:.2f}' for x in per_ckpt_runs)})")
    print(f"RATIO measure / plain = {per_ckpt / plain:.2f}  (target <= 1.3)")
    print(f"  of which the passes alone (capture_batch over the same batches, timed apart): "
          f"{passes:.2f} s (runs {', '.join(f'{x:.2f}' for x in passes_runs)}); statistics = "
          f"measure - passes = {per_ckpt - passes:.2f} s "
          f"({100 * (per_ckpt - passes) / per_ckpt:.0f}% of the measure)")
    print(f"  whole measure call incl. load {t1.get('load', 0):.2f}, data {t1.get('data', 0):.2f}, "
          f"figures {t1.get('figures', 0):.2f}, theory-against-measurement bridge "
          f"{t1.get('bridge', 0):.2f} s (at three phases of a trajectory, not per checkpoint)")
    if splits:
        _print_split(splits, per_ckpt_runs)
    print(f"  statistics precision: {man1['statistics_dtype']['dtype']}"
          + (f"; measure settings changed: {extra}" if extra else ""))

    # the cost model's prediction for this model, these batches and this CPU (rates timed now)
    from tangentlab.measure.cost_model import ModelShape, StatsShape, calibrate, predict

    mcfg = model.config
    d = int(getattr(mcfg, "hidden_size", None) or mcfg.n_embd)
    layers = int(getattr(mcfg, "num_hidden_layers", None) or mcfg.n_layer)
    shape = ModelShape("small", d, layers, sum(p.numel() for p in model.parameters()),
                       vocab=int(mcfg.vocab_size), seq_len=T)
    n_fit = sum(1 for b in ev.batches if b.half == "fit")
    stats = StatsShape(d=d, sites=len(sites), batch_rows=B * (T - 1),
                       test_batches=len(ev.batches) - n_fit,
                       sample_rows=min(MeasureConfig().sample_rows, n_fit * B * (T - 1)),
                       tokens=len({int(t) for b in ev.batches if b.half == "fit"
                                   for t in b.token_ids.reshape(-1)}))
    cpu = calibrate("cpu")
    roof = predict(shape, stats, cpu)
    # the frequency correlations run over the tokens with repeated geometry occurrences (the n
    # of the measure's freq_distance_raw rows), not over every distinct fit token
    import csv
    from dataclasses import replace

    from tangentlab.measure.host_cost import host_seconds

    with open(m1 / "results.csv", newline="") as fh:
        corr_tokens = max([3] + [int(float(r["n"])) for r in csv.DictReader(fh)
                                 if r["metric"].startswith("freq_distance_raw") and r["n"]])
    host = host_seconds(replace(stats, tokens=corr_tokens), repeats=3,
                        once=True)  # a one-checkpoint measure pays them all
    pred = predict(shape, stats, cpu, host_s=host["total"], tokens=N, plain_s=plain / N)
    measured_ratio, measured_share = per_ckpt / plain, (per_ckpt - passes) / per_ckpt
    print(f"COST MODEL ({cpu.name}: fp32 {cpu.fp32 / 1e9:.1f}, fp64 {cpu.fp64 / 1e9:.1f} "
          f"GFLOP/s)")
    print(f"  roofline alone: measure/plain {roof['ratio']:.2f}, statistics share "
          f"{100 * roof['stats_share']:.0f}%; plain {roof['plain_s'] * N:.2f} s (measured "
          f"{plain:.2f}), passes {roof['passes_s'] * N:.2f} s (measured {passes:.2f}), per-token "
          f"statistics {roof['stats_s'] * N:.2f} s")
    print(f"  per-checkpoint host work, timed on random inputs of this shape ({corr_tokens} "
          "correlated tokens, as in the measure's rows): "
          + ", ".join(f"{k} {v:.3f}" for k, v in host.items() if k != "total")
          + f"; total {host['total']:.2f} s (measured proxy fit + metrics "
          f"{t1.get('proxy_fit', 0) + t1.get('metrics', 0):.2f} s)")
    err = pred["ratio"] / measured_ratio - 1
    print(f"  PREDICTION (passes from the measured plain pass by FLOP share, per-token statistics "
          f"by roofline, plus the host work): measure/plain {pred['ratio']:.2f} (measured "
          f"{measured_ratio:.2f}, {100 * err:+.0f}%, target within 30%), statistics share "
          f"{100 * pred['stats_share']:.0f}% (measured {100 * measured_share:.0f}%); passes "
          f"{pred['passes_s'] * N:.2f} s (measured {passes:.2f}), statistics "
          f"{pred['stats_s'] * N:.2f} s (measured {per_ckpt - passes:.2f})")

    # 2. causal check: ablation + steering over the same N tokens, 5 controls
    if args.skip_causal:
        return
    nc = 5
    m2 = measure_trajectory(ck, root / "m2", device="cpu", overrides={
        **common, "causal": True, "causal_controls": nc, "causal_batches": args.batches,
        "causal_checkpoints": 1, "eval_text": str(run / "eval.jsonl")})
    t2 = json.loads((m2 / "manifest.json").read_text())["timings_s"]
    n_sites = len(sites)
    variants_per_control = 1 + 2  # one ablation + two steering sizes (defaults)
    per_control = t2["causal"] / n_sites / (nc + 1)
    print(f"causal check ({nc} controls + tangent, {n_sites} sites, {variants_per_control} forward "
          f"variants each): {t2['causal']:.2f} s = {per_control:.2f} s per control per site "
          f"over N tokens ({per_control / plain:.2f}x a plain forward+backward)")

    # 3. training throughput with and without the in-loop measurement
    if not args.skip_train:
        rates, share = {}, {}
        for k in (0, args.every):
            r = train_model("decoder", root / f"train_k{k}", preset="small", device="cpu",
                            overrides={"steps": args.steps, "n_checkpoints": 2, "measure_every": k})
            man = json.loads((r / "manifest.json").read_text())
            tokens = args.steps * 32 * 128
            train_s = man["timings_s"]["train"]  # includes the callbacks
            cb_s = man["timings_s"].get("callbacks", 0.0)
            rates[k] = tokens / train_s
            share[k] = cb_s / max(train_s - cb_s, 1e-9)
            print(f"training, in-loop every {k or 'never'}: {rates[k]:.0f} tokens/s "
                  f"(callbacks {cb_s:.2f} s of {train_s:.2f} s)")
        print(f"IN-LOOP OVERHEAD at k={args.every}, same run (callback time / training time): "
              f"{100 * share[args.every]:.1f}% (target <= 10%)")
        print(f"  across the two runs (tokens/s none / with): {100 * (rates[0] / rates[args.every] - 1):.1f}%"
              " (sensitive to other load on the machine between the runs)")


if __name__ == "__main__":
    main()
