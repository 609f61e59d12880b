"""GPU check: a Pythia-160m-sized GPT-NeoX, 4 sites, 64k tokens: plain training pass vs measure.

Run by ``benchmarks/gpu_check.sh`` (see there). Prints, for a random-initialized GPT-NeoX with
Pythia-160m's shape (d = 768, 12 layers, 12 heads, vocabulary 50304):

- tokens/s of a plain forward + backward (the model's own loss, parameter gradients);
- tokens/s of a full measure pass with the device-resident core that ``measure`` runs
  (:func:`tangentlab.empirical.capture.capture_batch` at 4 sites; per site the bucketed
  gradient moments, :meth:`~tangentlab.measure.MomentAccumulator.update_indexed`; two
  :class:`~tangentlab.measure.EnergyStream` of a rank-8 proxy with 200 complement and 200
  full-space controls, bucketed, and two in the complement of 𝟙 on G U, each pair sharing one
  projection per batch (:class:`~tangentlab.measure.EnergyStreamGroup`); the forced-direction
  cosines; all on the device, to the host once at the end);
- the split: the passes alone (``capture_batch`` over the same batches) and the statistics
  (measure − passes), and beside it the prediction of :mod:`tangentlab.measure.cost_model`
  for this device (its rates timed here) and for the nominal H100 / consumer classes;
- their ratio (measure time / plain time; target <= 1.2) and the peak GPU memory.

Exit status: 1 without CUDA (unless ``--allow-cpu``, a smoke test of the code path), 2 when any
result is not finite, 0 otherwise.
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
    args = ap.parse_args(argv)

    import numpy as np
    import torch

    if not torch.cuda.is_available() and not args.allow_cpu:
        print("gpu_check: CUDA is not available (torch.cuda.is_available() is False)", file=sys.stderr)
        return 1
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    from tangentlab.empirical.capture import capture_batch
    from tangentlab.measure import (
        EnergyStream,
        EnergyStreamGroup,
        MomentAccumulator,
        complement_space,
        full_space_controls,
        normal_controls,
        restrict_to_complement,
    )
    from tangentlab.measure.constrained import forced_cosine_parts
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
    rng = np.random.default_rng(0)
    ones = complement_space(np.ones((args.d, 1)) / np.sqrt(args.d))
    proxies, full = {}, {}  # one full-space pool per shape, shared by the proxies (as measure)
    for k in ("fixed", "refit"):
        Q = np.linalg.qr(rng.standard_normal((args.d, 8)))[0]
        Qc = restrict_to_complement(Q, ones.forced)
        for B in (Q, Qc):
            full.setdefault(B.shape, full_space_controls(B, 200, 0))
        proxies[k] = ((Q, normal_controls(Q, 200, 0), full[Q.shape]),
                      (Qc, normal_controls(Qc, 200, 0), full[Qc.shape]))
    U = torch.from_numpy(ones.basis).to(dev, prec.dtype)

    def passes() -> None:
        model.eval()
        for x in batches:
            capture_batch(loaded, sites, x, x, grads=True)
        sync()

    def measure() -> dict:
        model.eval()
        accs = {s: MomentAccumulator(args.d, groups=labels) for s in sites}
        streams = {s: {k: (EnergyStream(*p[0][:2], full_controls=p[0][2], n_groups=5),
                           EnergyStream(*p[1][:2], full_controls=p[1][2]))
                       for k, p in proxies.items()} for s in sites}
        # the proxies share one projection per batch, plain and 𝟙-constrained (as measure)
        groups = {s: (EnergyStreamGroup([a for a, _ in streams[s].values()]),
                      EnergyStreamGroup([b for _, b in streams[s].values()])) for s in sites}
        forced = {}
        for x in batches:
            cap = capture_batch(loaded, sites, x, x, grads=True)
            rows = cap.rows
            for s in sites:
                G = cap.grads[s][rows].to(prec.dtype)
                H = cap.acts[s][rows].to(prec.dtype)
                bucket = torch.arange(G.shape[0], device=G.device) % len(labels)
                accs[s].update_indexed(G, bucket)
                groups[s][0].add(G, bucket)
                groups[s][1].add(G @ U)
                parts = forced_cosine_parts(G, H)
                forced[s] = parts if s not in forced else {
                    k: (torch.maximum(forced[s][k], v) if k.endswith("_max") else forced[s][k] + v)
                    for k, v in parts.items()}
        out = {s: {"grad": accs[s].to_host(),
                   "energies": {k: (a.finish(), b.finish()) for k, (a, b) in streams[s].items()},
                   "forced": {k: float(v) for k, v in forced[s].items()}} for s in sites}
        sync()
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
    t0 = time.perf_counter()
    got = measure()
    t_measure = time.perf_counter() - t0
    peak_measure = torch.cuda.max_memory_allocated() if dev == "cuda" else 0

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
    print(f"full measure (4 sites): {tokens / t_measure:,.0f} tokens/s ({t_measure:.2f} s)")
    print(f"ratio measure/plain time: {ratio:.3f} (target <= 1.2)")
    print(f"measured split: passes alone {t_passes:.2f} s ({t_passes / t_plain:.2f}x plain), "
          f"statistics {t_stats:.2f} s ({100 * t_stats / t_measure:.0f}% of the measure)")
    # the cost model for these shapes (every batch here is a gradient batch: the test half)
    shape = ModelShape("gpu_check", args.d, L, n_params, vocab=args.vocab, seq_len=args.seq_len)
    stats = StatsShape(d=args.d, sites=len(sites), batch_rows=args.batch * (args.seq_len - 1),
                       test_batches=n_batches, itemsize=8 if prec.name == "float64" else 4)
    for dv in (calibrate(dev), *DEVICES.values()):
        p = predict(shape, stats, dv, halves=False)
        print(f"cost model, {dv.name}: measure/plain {p['ratio']:.2f}x, statistics share "
              f"{100 * p['stats_share']:.0f}% (passes {p['passes_s'] * tokens:.2f} s, statistics "
              f"{p['stats_s'] * tokens:.2f} s, plain {p['plain_s'] * tokens:.2f} s predicted)")
    print(f"peak GPU memory: plain {peak_plain / 2**30:.2f} GiB, measure {peak_measure / 2**30:.2f} GiB")
    if not finite:
        print(f"gpu_check: a result is not finite: {values}", file=sys.stderr)
        return 2
    return 0


def _loaded(model):
    """A LoadedModel for ``model`` whatever extra fields the record has grown."""
    import dataclasses

    from tangentlab.empirical.models import LoadedModel

    known = {"model": model, "arch": "decoder", "family": "gpt_neox", "head": True,
             "tie_embeddings": False}
    kwargs = {f.name: known.get(f.name) for f in dataclasses.fields(LoadedModel)
              if f.name in known or (f.default is dataclasses.MISSING
                                     and f.default_factory is dataclasses.MISSING)}
    return LoadedModel(**kwargs)


if __name__ == "__main__":
    sys.exit(main())
