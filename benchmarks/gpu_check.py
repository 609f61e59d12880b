"""GPU check: a Pythia-160m-sized GPT-NeoX, 4 sites, 64k tokens: plain training pass vs measure.

Run by ``benchmarks/gpu_check.sh`` (see there). Prints, for a random-initialized GPT-NeoX with
Pythia-160m's shape (d = 768, 12 layers, 12 heads, vocabulary 50304):

- tokens/s of a plain forward + backward (the model's own loss, parameter gradients);
- tokens/s of a full measure pass with the device-resident core that ``measure`` runs
  (:func:`tangentlab.empirical.loading.capture.capture_batch` at 4 sites; per site the bucketed
  gradient moments, :meth:`~tangentlab.measure.MomentAccumulator.update_indexed`; two
  :class:`~tangentlab.measure.EnergyStream` of a rank-8 proxy with 200 complement and 200
  full-space controls, bucketed, and two in the complement of 𝟙 on G U, each pair sharing one
  projection per batch (:class:`~tangentlab.measure.EnergyStreamGroup`); the forced-direction
  cosines; all on the device, to the host once at the end);
- the split: the passes alone (``capture_batch`` over the same batches) and the statistics
  (measure − passes), and beside it the prediction of :mod:`tangentlab.measure.cost_model`
  for this device (its rates timed here) and for the nominal H100 / consumer classes;
- their ratio (measure time / plain time; target <= 1.2) and the peak GPU memory.

Also, unless ``--no-exactness``: the rows of ``--exact-batches`` batches captured once, copied to
the host as float64, and the statistics run on them on the CPU in float64 (the reference), on the
device in float64 (tolerance 1e-12 relative) and in float32-compensated (1e-6).

Exit status: 1 without CUDA (unless ``--allow-cpu``, a smoke test of the code path), 2 when any
result is not finite, 3 when the device statistics leave their tolerance, 0 otherwise.
"""

from __future__ import annotations

import argparse
import math
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=65536)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--d", type=int, default=768)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--allow-cpu", action="store_true", help="smoke-test on the CPU (tiny sizes)")
    ap.add_argument("--exact-batches", type=int, default=2,
                    help="batches whose captured rows the exactness check runs again (default 2)")
    ap.add_argument("--no-exactness", action="store_true",
                    help="skip the check of the device statistics against the CPU's float64")
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print("gpu_check: CUDA is not available (torch.cuda.is_available() is False)", file=sys.stderr)
        return 1
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from tangentlab.empirical.loading.capture import capture_batch
    from tangentlab.measure.cost_model import DEVICES, ModelShape, StatsShape, calibrate, predict
    from tangentlab.measure.precision import resolve_precision

    torch.manual_seed(0)
    heads = max(1, args.d // 64)
    cfg = GPTNeoXConfig(vocab_size=args.vocab, hidden_size=args.d, num_hidden_layers=args.layers,
                        num_attention_heads=heads, intermediate_size=4 * args.d,
                        max_position_embeddings=max(2048, args.seq_len), rotary_pct=0.25,
                        use_parallel_residual=True, tie_word_embeddings=False)
    model = GPTNeoXForCausalLM(cfg).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    n_batches = max(1, args.tokens // (args.batch * args.seq_len))
    g = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=g)
               for _ in range(n_batches)]
    tokens = n_batches * args.batch * args.seq_len
    L = args.layers
    sites = [f"blocks.{i}.resid_post" for i in sorted({0, L // 3, 2 * L // 3, L - 1})]
    prec = resolve_precision("auto", dev)
    print(f"gpu_check: {dev} ({torch.cuda.get_device_name(0) if dev == 'cuda' else 'cpu'}), "
          f"GPT-NeoX {n_params / 1e6:.1f}M parameters (d={args.d}, {L} layers), "
          f"{n_batches} batches x {args.batch} x {args.seq_len} = {tokens} tokens, sites {sites}, "
          f"statistics {prec.name}")

    def sync():
        if dev == "cuda":
            torch.cuda.synchronize()

    def plain() -> float:
        model.train()
        total = 0.0
        for x in batches:
            model.zero_grad(set_to_none=True)
            loss = model(input_ids=x.to(dev), labels=x.to(dev)).loss
            loss.backward()
            total += float(loss.detach())
        sync()
        return total / len(batches)

    loaded = _loaded(model)
    labels = [f"b{i}" for i in range(5)]
    ones, proxies = make_proxies(args.d)
    U = torch.from_numpy(ones.basis).to(dev, prec.dtype)

    def passes() -> None:
        model.eval()
        for x in batches:
            capture_batch(loaded, sites, x, x, grads=True)
        sync()

    def measure(phases: dict) -> dict:
        """The measure pass; ``phases`` gets its seconds: build (the statistics' objects and
        bases, host work done once per checkpoint), batches (capture + statistics, per batch),
        finish (to the host, once per checkpoint)."""
        model.eval()
        t0 = time.perf_counter()
        stats = Statistics(args.d, sites, labels, proxies, U, prec.dtype)
        sync()
        t1 = time.perf_counter()
        for x in batches:
            cap = capture_batch(loaded, sites, x, x, grads=True)
            for s in sites:
                stats.add(s, cap.grads[s][cap.rows], cap.acts[s][cap.rows])
        sync()
        t2 = time.perf_counter()
        out = stats.finish()
        sync()
        phases.update(build=t1 - t0, batches=t2 - t1, finish=time.perf_counter() - t2)
        return out

    plain()  # warm-up (kernels, allocator; the capture runs the same kernels)
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    loss = plain()
    t_plain = time.perf_counter() - t0
    peak_plain = torch.cuda.max_memory_allocated() if dev == "cuda" else 0
    t0 = time.perf_counter()
    passes()
    t_passes = time.perf_counter() - t0
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    # twice: the first measure of a process also loads the float64 kernels (once per process);
    # a trajectory's later checkpoints run warm, so the ratio is the second's
    cold, warm = {}, {}
    t0 = time.perf_counter()
    measure(cold)
    t_cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    got = measure(warm)
    t_measure = time.perf_counter() - t0
    peak_measure = torch.cuda.max_memory_allocated() if dev == "cuda" else 0

    exact_ok = True
    if not args.no_exactness:
        exact_ok = exactness(loaded, sites, batches[:args.exact_batches], labels, proxies,
                             ones.basis, dev)

    values = [loss]
    for s in sites:
        C = got[s]["grad"].second_moment()
        values.append(float(np.trace(C)))
        for per, cons in got[s]["energies"].values():
            values += [float(sum(e.tangent.sum() for e in per)), float(cons[0].controls.sum())]
        values.append(got[s]["forced"]["ones_sum"])
    finite = all(math.isfinite(v) for v in values)
    ratio = t_measure / t_plain
    t_stats = t_measure - t_passes
    print(f"plain forward+backward: {tokens / t_plain:,.0f} tokens/s ({t_plain:.2f} s), loss {loss:.4f}")
    print(f"full measure (4 sites): {tokens / t_measure:,.0f} tokens/s ({t_measure:.2f} s; the "
          f"process's first measure {t_cold:.2f} s)")
    print(f"ratio measure/plain time: {ratio:.3f} (target <= 1.2; first measure "
          f"{t_cold / t_plain:.3f})")
    print(f"measured split: passes alone {t_passes:.2f} s ({t_passes / t_plain:.2f}x plain), "
          f"statistics {t_stats:.2f} s ({100 * t_stats / t_measure:.0f}% of the measure): build "
          f"{warm['build']:.2f} s, batches {warm['batches'] - t_passes:.2f} s beyond the passes, "
          f"finish {warm['finish']:.2f} s (first measure: {cold['build']:.2f}, "
          f"{cold['batches'] - t_passes:.2f}, {cold['finish']:.2f} s)")
    # the cost model for these shapes (every batch here is a gradient batch: the test half)
    shape = ModelShape("gpu_check", args.d, L, n_params, vocab=args.vocab, seq_len=args.seq_len)
    stats = StatsShape(d=args.d, sites=len(sites), batch_rows=args.batch * (args.seq_len - 1),
                       test_batches=n_batches, itemsize=8 if prec.name == "float64" else 4)
    # the host side of building the streams (numpy checks, the pools held for the device),
    # timed here at this shape: the part of the build no device count sees
    from tangentlab.measure.host_cost import host_seconds

    build_s = host_seconds(StatsShape(d=args.d, sites=len(sites)),
                           only=("energy streams (build)",))["total"]
    print(f"host build of the streams, timed on random inputs: {build_s:.2f} s")
    here = calibrate(dev)
    if here.to_device:
        print(f"host link, timed: to the device {here.to_device / 1e9:.1f} GB/s, to the host "
              f"{here.to_host / 1e9:.1f} GB/s (pageable, 64 MiB float64)")
    for dv in (here, *DEVICES.values()):
        # per checkpoint: the bases to the device, the gradient moments back (no activation
        # moments here); spread over this check's tokens
        p = predict(shape, stats, dv, halves=False, tokens=tokens, act_moments=False,
                    host_s=build_s)
        print(f"cost model, {dv.name}: measure/plain {p['ratio']:.2f}x, statistics share "
              f"{100 * p['stats_share']:.0f}% (passes {p['passes_s'] * tokens:.2f} s, statistics "
              f"{p['stats_s'] * tokens:.2f} s of which host build {build_s:.2f} s and host-link "
              f"copies {p['transfer_s'] * tokens:.2f} s, plain {p['plain_s'] * tokens:.2f} s "
              "predicted)")
    print(f"peak GPU memory: plain {peak_plain / 2**30:.2f} GiB, measure {peak_measure / 2**30:.2f} GiB")
    if not finite:
        print(f"gpu_check: a result is not finite: {values}", file=sys.stderr)
        return 2
    if not exact_ok:
        print("gpu_check: the device statistics are outside their tolerance of the CPU's float64",
              file=sys.stderr)
        return 3
    return 0


def make_proxies(d: int, seed: int = 0):
    """The 𝟙-complement and two random rank-8 proxies ("fixed", "refit"), as ``measure`` holds them.

    Returns ``(ones, proxies)``: ``ones`` a ComplementSpace of 𝟙; ``proxies[k] = ((Q, complement
    pool, full pool), (Qc, pool, full pool))`` with 200 controls each, one full-space pool per
    shape shared by the proxies (as ``measure``).
    """
    import numpy as np

    from tangentlab.measure import (
        complement_space,
        full_space_controls,
        normal_controls,
        restrict_to_complement,
    )

    rng = np.random.default_rng(seed)
    ones = complement_space(np.ones((d, 1)) / np.sqrt(d))
    proxies, full = {}, {}
    for k in ("fixed", "refit"):
        Q = np.linalg.qr(rng.standard_normal((d, 8)))[0]
        Qc = restrict_to_complement(Q, ones.forced)
        for B in (Q, Qc):
            full.setdefault(B.shape, full_space_controls(B, 200, 0))
        proxies[k] = ((Q, normal_controls(Q, 200, 0), full[Q.shape]),
                      (Qc, normal_controls(Qc, 200, 0), full[Qc.shape]))
    return ones, proxies


class Statistics:
    """The statistics ``measure`` keeps per site, fed one batch's test rows at a time.

    Per site: the bucketed gradient moments (:class:`MomentAccumulator`), for each proxy
    ("fixed", "refit") an :class:`EnergyStream` of the plain rows (5 buckets) and one of the rows
    in the complement of 𝟙 (``G @ U``), the proxies sharing one projection per batch
    (:class:`EnergyStreamGroup`), and the forced-direction cosine sums. Everything stays on the
    rows' device in ``dtype`` until :meth:`finish`.

    Args:
        d: width; sites: site names; labels: the 5 bucket labels.
        proxies: ``{name: ((Q, complement pool, full pool), (Qc, pool, full pool))}`` (numpy).
        U: ``(d, d - 1)`` tensor, an orthonormal basis of the complement of 𝟙, on the device.
        dtype: the statistics' torch dtype (float64, or float32 for float32-compensated).
    """

    def __init__(self, d, sites, labels, proxies, U, dtype):
        from tangentlab.measure import EnergyStream, EnergyStreamGroup, MomentAccumulator

        self.sites, self.labels, self.U, self.dtype = sites, labels, U, dtype
        self.accs = {s: MomentAccumulator(d, groups=labels) for s in sites}
        self.streams = {s: {k: (EnergyStream(*p[0][:2], full_controls=p[0][2],
                                             n_groups=len(labels)),
                                EnergyStream(*p[1][:2], full_controls=p[1][2]))
                            for k, p in proxies.items()} for s in sites}
        self.groups = {s: (EnergyStreamGroup([a for a, _ in self.streams[s].values()]),
                           EnergyStreamGroup([b for _, b in self.streams[s].values()]))
                       for s in sites}
        self.forced = {}

    def add(self, site, G, H) -> None:
        """One batch's rows at ``site``: gradients ``G`` and activations ``H``, ``(n, d)``."""
        import torch

        from tangentlab.measure.constrained import forced_cosine_parts

        G, H = G.to(self.dtype), H.to(self.dtype)
        bucket = torch.arange(G.shape[0], device=G.device) % len(self.labels)
        self.accs[site].update_indexed(G, bucket)
        self.groups[site][0].add(G, bucket)
        self.groups[site][1].add(G @ self.U.to(G.device, self.dtype))
        parts = forced_cosine_parts(G, H)
        old = self.forced.get(site)
        self.forced[site] = parts if old is None else {
            k: (torch.maximum(old[k], v) if k.endswith("_max") else old[k] + v)
            for k, v in parts.items()}

    def finish(self) -> dict:
        """Per site: ``{"grad": host MomentAccumulator, "energies": {proxy: (plain, 𝟙-constrained)
        lists of BatchEnergies}, "forced": {name: float}}``."""
        return {s: {"grad": self.accs[s].to_host(),
                    "energies": {k: (a.finish(), b.finish())
                                 for k, (a, b) in self.streams[s].items()},
                    "forced": {k: float(v) for k, v in self.forced[s].items()}}
                for s in self.sites}


def flatten(out: dict) -> dict:
    """Every number of :meth:`Statistics.finish` as named float64 arrays (for comparisons)."""
    import numpy as np

    flat = {}
    for s, o in out.items():
        acc = o["grad"]
        for g in (None, *acc.group_labels):
            flat[f"{s}/moment[{g}]"] = acc.second_moment(g)
        for k, (plain, cons) in o["energies"].items():
            for tag, per in (("plain", plain), ("1-constrained", cons)):
                for j, e in enumerate(per):
                    for f in ("tangent", "controls", "trace"):
                        flat[f"{s}/{k}/{tag}/group{j}/{f}"] = np.asarray(getattr(e, f), float)
        n = max(o["forced"]["n"], 1.0)
        for k, v in o["forced"].items():
            if k.endswith("_sum"):  # the mean |cosine| over the usable rows, a number in [0, 1]
                flat[f"{s}/forced/{k[:-4]}_mean"] = np.asarray([v / n])
    return flat


def _relative_gaps(a: dict, b: dict) -> dict:
    """Per kind of number, the largest gap of ``a`` from the reference ``b``.

    Energies and traces (sums of squares, no cancellation): elementwise relative. Moments (entries
    can cancel to near 0): relative to the array's largest entry. Mean |cosines| (bounded by 1,
    and near 0 where a norm forces the gradient off 𝟙): absolute, i.e. relative to their scale 1.
    """
    import numpy as np

    gaps = {"energies (elementwise)": 0.0, "moments (scale)": 0.0, "mean |cosines| (absolute)": 0.0}
    for name, ref in b.items():
        got = a[name]
        diff = np.abs(got - ref)
        if "/moment[" in name:
            key, gap = "moments (scale)", diff.max() / max(np.abs(ref).max(), 1e-300)
        elif "/forced/" in name:
            key, gap = "mean |cosines| (absolute)", diff.max()
        else:
            key = "energies (elementwise)"
            gap = float((diff / np.maximum(np.abs(ref), 1e-300)).max()) if ref.size else 0.0
        gaps[key] = max(gaps[key], float(gap))
    return gaps


def exactness(loaded, sites, batches, labels, proxies, ones_basis, dev) -> bool:
    """The device core against the CPU's float64 on the same captured rows; True when in tolerance.

    The rows of ``batches`` are captured once on ``dev`` and copied to the host as float64; the
    statistics then run on them three ways: on the CPU in float64 (the reference, the path the
    CPU tests pin), on ``dev`` in float64 (tolerance 1e-12 relative) and on ``dev`` in
    float32-compensated (tolerance 1e-6 relative on the energies, as the CPU tests of
    :mod:`tangentlab.measure.precision`). The model's own float32 pass is not compared: it is
    the same rows for all three.
    """
    import torch

    from tangentlab.empirical.loading.capture import capture_batch
    from tangentlab.measure.precision import precision_scope

    rows = []
    for x in batches:
        cap = capture_batch(loaded, sites, x, x, grads=True)
        rows.append({s: (cap.grads[s][cap.rows].double().cpu(), cap.acts[s][cap.rows].double().cpu())
                     for s in sites})
    U_host = torch.from_numpy(ones_basis)

    def run(device: str, name: str) -> dict:
        with precision_scope(name, device):
            dtype = torch.float64 if name == "float64" else torch.float32
            stats = Statistics(U_host.shape[0], sites, labels, proxies, U_host.to(device), dtype)
            for per_site in rows:
                for s, (G, H) in per_site.items():
                    stats.add(s, G.to(device), H.to(device))
            return flatten(stats.finish())

    ref = run("cpu", "float64")
    n = sum(v.size for v in ref.values())
    ok = True
    print(f"exactness: {len(rows)} batches' captured rows, {n} numbers per path, against the CPU's "
          f"float64")
    for device, name, tol in ((dev, "float64", 1e-12), (dev, "float32-compensated", 1e-6)):
        gaps = _relative_gaps(run(device, name), ref)
        within = all(g <= tol for g in gaps.values())
        ok &= within
        print(f"exactness, {device} {name}: " + ", ".join(f"{k} {v:.1e}" for k, v in gaps.items())
              + f" (tolerance {tol:.0e}: {'within' if within else 'OUTSIDE'})")
    return ok


def _loaded(model):
    """A LoadedModel for ``model`` whatever extra fields the record has grown."""
    import dataclasses

    from tangentlab.empirical.loading.models import LoadedModel

    known = {"model": model, "arch": "decoder", "family": "gpt_neox", "head": True,
             "tie_embeddings": False}
    kwargs = {f.name: known.get(f.name) for f in dataclasses.fields(LoadedModel)
              if f.name in known or (f.default is dataclasses.MISSING
                                     and f.default_factory is dataclasses.MISSING)}
    return LoadedModel(**kwargs)


if __name__ == "__main__":
    sys.exit(main())
