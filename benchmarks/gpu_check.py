"""GPU check: a Pythia-160m-sized GPT-NeoX, 4 sites, 64k tokens: plain training pass vs measure.

Run by ``benchmarks/gpu_check.sh`` (see there). Prints, for a random-initialized GPT-NeoX with
Pythia-160m's shape (d = 768, 12 layers, 12 heads, vocabulary 50304):

- tokens/s of a plain forward + backward (the model's own loss, parameter gradients);
- tokens/s of a full measure pass: :func:`tangentlab.empirical.capture.capture_batch` at 4 sites
  (site gradients by one backward), every site's rows streamed into float64 moment accumulators
  grouped by 5 frequency buckets, and per-batch energies of a rank-8 proxy and a 200-control pool
  (:func:`tangentlab.measure.batch_energies`): the per-token work of ``measure`` on the test half;
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
    from tangentlab.measure import MomentAccumulator, batch_energies, normal_controls

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
    print(f"gpu_check: {dev} ({torch.cuda.get_device_name(0) if dev == 'cuda' else 'cpu'}), "
          f"GPT-NeoX {n_params / 1e6:.1f}M parameters (d={args.d}, {L} layers), "
          f"{n_batches} batches x {args.batch} x {args.seq_len} = {tokens} tokens, sites {sites}")

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
    Q = np.linalg.qr(rng.standard_normal((args.d, 8)))[0]
    pool = normal_controls(Q, 200, 0)

    def measure() -> dict:
        model.eval()
        accs = {s: MomentAccumulator(args.d, groups=labels) for s in sites}
        energies = {}
        for x in batches:
            cap = capture_batch(loaded, sites, x, x, grads=True)
            rows = cap.rows
            for s in sites:
                G = cap.grads[s][rows].to(torch.float64)
                bucket = np.asarray(labels, dtype=object)[
                    np.arange(G.shape[0]) % len(labels)]
                accs[s].update(G, groups=bucket)
                be = batch_energies(Q, pool, [G])
                energies[s] = be if s not in energies else energies[s].concat(be)
        sync()
        return {"accs": accs, "energies": energies}

    plain()  # warm-up (kernels, allocator)
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    loss = plain()
    t_plain = time.perf_counter() - t0
    peak_plain = torch.cuda.max_memory_allocated() if dev == "cuda" else 0
    if dev == "cuda":
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    got = measure()
    t_measure = time.perf_counter() - t0
    peak_measure = torch.cuda.max_memory_allocated() if dev == "cuda" else 0

    values = [loss]
    for s in sites:
        C = got["accs"][s].second_moment()
        e = got["energies"][s]
        values += [float(np.trace(C)), float(e.tangent.sum()), float(e.controls.sum())]
    finite = all(math.isfinite(v) for v in values)
    ratio = t_measure / t_plain
    print(f"plain forward+backward: {tokens / t_plain:,.0f} tokens/s ({t_plain:.2f} s), loss {loss:.4f}")
    print(f"full measure (4 sites): {tokens / t_measure:,.0f} tokens/s ({t_measure:.2f} s)")
    print(f"ratio measure/plain time: {ratio:.3f} (target <= 1.2)")
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
