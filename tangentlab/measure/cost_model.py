"""A cost model of ``measure``: FLOPs, bytes and device memory of the statistics against the model.

Arithmetic only (no torch at import): counts what the device-resident core
(:mod:`tangentlab.empirical.measurement.collect`, :class:`~tangentlab.measure.EnergyStream`,
:class:`~tangentlab.measure.MomentAccumulator`) does per row, and what a GPT-NeoX forward and
backward costs per token, then turns both into seconds with a roofline per device
(``max(FLOPs / rate, bytes / bandwidth)``). ``benchmarks/bench_measure.py`` and
``benchmarks/gpu_check.py`` print its prediction beside the measured split; ``docs/scale.md``
holds its tables (``python benchmarks/cost_model.py``).

Counts (one site, one row; a multiply-add is 2 FLOPs; M = (1 + K + K_f) r basis columns):

- test half, per gradient row: moments 2·2d² (the batch's centred Gram matrix, then each
  bucket's); per proxy the bucketed energies, the cheaper of 2dM (project every row) and
  2d² + 2Ld²M/n (each bucket's Gram matrix, L buckets, n rows per batch); the 𝟙⊥ rows G U
  (2d(d−1)) and per proxy their energies in d−1 dimensions (ungrouped, same rule with L = 1);
  the forced-direction cosines (about 12d);
- fit half, per activation row: moments 2d², per-token sums 3d.

The model: ``6 P + 12 L T d`` FLOPs per token for a training forward+backward (P the parameters
in matrix products: the blocks and the unembedding; the attention scores ``2 L T d`` forward);
``measure`` freezes the parameters, so its test half costs ``4 P + 8 L T d`` (no weight
gradients) and its fit half ``2 P + 4 L T d`` (forward only).

Example::

    >>> from tangentlab.measure.cost_model import StatsShape, stats_flops
    >>> round(stats_flops(StatsShape(d=768))["per_token"] / 1e6)  # MFLOP per eval token, 4 sites
    49
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["StatsShape", "ModelShape", "Device", "DEVICES", "PYTHIA", "stats_flops",
           "stats_bytes", "transfer_bytes", "model_cost", "predict", "device_bytes_per_site",
           "largest_d", "model_bytes", "calibrate", "calibrate_cpu"]


@dataclass(frozen=True)
class StatsShape:
    """What the statistics of one checkpoint are made of (defaults: ``MeasureConfig``'s).

    ``batch_rows``: rows per eval batch (4 × 128); ``itemsize``: bytes per statistic (8 for
    float64, 4 for compensated float32); ``tokens``: distinct geometry tokens (the per-token sums
    are (tokens, d)); ``sample_rows``: activation rows kept (fit sample and test rows each).
    """

    d: int
    sites: int = 4
    rank: int = 8
    pool: int = 200
    full: int = 200
    proxies: int = 2
    buckets: int = 5
    batch_rows: int = 512
    test_batches: int = 32
    itemsize: int = 8
    tokens: int = 4096
    sample_rows: int = 4096

    @property
    def columns(self) -> int:
        """M = (1 + K + K_f) r, the basis columns of one proxy's stream."""
        return (1 + self.pool + self.full) * self.rank


def _energy_flops(d: int, M: int, n: int, groups: int) -> float:
    """Per-row FLOPs of one stream: the cheaper route (:func:`_grouped_energy_sums`'s rule)."""
    return min(2.0 * d * M, 2.0 * d * d + 2.0 * groups * d * d * M / n)


def stats_flops(s: StatsShape) -> dict[str, float]:
    """FLOPs of the statistics: per test row and per fit row of one site, and per eval token.

    ``per_token`` is for all sites, averaged over the two halves (each half is half the
    tokens).
    """
    d, M, n = s.d, s.columns, s.batch_rows
    test = {
        "moments": 4.0 * d * d,
        "energies": s.proxies * _energy_flops(d, M, n, s.buckets),
        "complement rows (G U)": 2.0 * d * (d - 1),
        "complement energies": s.proxies * _energy_flops(d - 1, M, n, 1),
        "cosines": 12.0 * d,
    }
    fit = {"moments": 2.0 * d * d, "per-token sums": 3.0 * d}
    out = {f"test: {k}": v for k, v in test.items()}
    out.update({f"fit: {k}": v for k, v in fit.items()})
    out["test_row"] = sum(test.values())
    out["fit_row"] = sum(fit.values())
    out["per_token"] = s.sites * (out["test_row"] + out["fit_row"]) / 2
    return out


def stats_bytes(s: StatsShape) -> dict[str, float]:
    """Device memory traffic of the statistics per row (one site) and per eval token (all sites).

    Test row: the gradient and activation rows read in the model's float32 and written and read
    once in the statistics' dtype; the projections ``(n, M)`` written and read per proxy (row
    route) and the bases read once per batch; the (d, d) moments read and written three times
    per batch (total and each bucket present). Fit row: the activation row and the moment
    update. Transfers to the host (once per checkpoint) are left out: O(d²), not per token.
    """
    d, M, n, b = s.d, s.columns, s.batch_rows, s.itemsize
    test = (2 * 4 * d + 2 * 2 * b * d
            + 2 * s.proxies * (2 * b * M + b * d * M / n)
            + (1 + s.buckets) * 3 * b * d * d / n)
    fit = 4 * d + 2 * b * d + 3 * b * d * d / n
    return {"test_row": test, "fit_row": fit, "per_token": s.sites * (test + fit) / 2}


def transfer_bytes(s: StatsShape, *, act_moments: bool = True) -> dict[str, float]:
    """Bytes across the host link once per checkpoint, all sites (an accelerator only).

    To the device: each stream's bases ``(d, M)``, per proxy plain and 𝟙-constrained. To the
    host: the gradient moments (each bucket and the total, ``d² + d`` each) and, with
    ``act_moments``, the activation moments, in the statistics' dtype (the per-batch energies
    are ``O(batches · controls)``, left out). Independent of the tokens, so at a few batches per
    checkpoint these copies, not the per-row arithmetic, can be most of the statistics (measured
    on an H200, ``docs/scale.md``).
    """
    d, b = s.d, s.itemsize
    moments = (s.buckets + 1 + int(act_moments)) * (d * d + d) * b
    h2d = s.sites * 2 * s.proxies * d * s.columns * b
    d2h = s.sites * moments
    return {"to device": float(h2d), "to host": float(d2h), "total": float(h2d + d2h)}


@dataclass(frozen=True)
class ModelShape:
    """A GPT-NeoX: hidden size, layers, vocabulary, total parameters, sequence length."""

    name: str
    d: int
    layers: int
    params: float
    vocab: int = 50304
    seq_len: int = 128

    @property
    def matmul_params(self) -> float:
        """Parameters in matrix products: the blocks (12 L d²) and the unembedding (d V)."""
        return 12.0 * self.layers * self.d ** 2 + self.d * self.vocab


#: Pythia's sizes (Biderman et al. 2023, table 1): total parameters, d, layers.
PYTHIA = {
    "70m": ModelShape("pythia-70m", 512, 6, 70_426_624),
    "160m": ModelShape("pythia-160m", 768, 12, 162_322_944),
    "410m": ModelShape("pythia-410m", 1024, 24, 405_334_016),
    "1b": ModelShape("pythia-1b", 2048, 16, 1_011_781_632),
    "1.4b": ModelShape("pythia-1.4b", 2048, 24, 1_414_647_808),
    "2.8b": ModelShape("pythia-2.8b", 2560, 32, 2_775_208_960),
    "6.9b": ModelShape("pythia-6.9b", 4096, 32, 6_857_302_016),
    "12b": ModelShape("pythia-12b", 5120, 36, 11_846_072_320),
}


def model_cost(m: ModelShape) -> dict[str, float]:
    """FLOPs and bytes per token: a training forward+backward, and measure's two passes.

    Bytes: the weights read once per pass of a 512-token batch (float32) and about 34 d float32
    activations per layer and token written and read (a rough count; the passes are
    compute-bound at these sizes).
    """
    P, attn = m.matmul_params, 2.0 * m.layers * m.seq_len * m.d
    act = 34 * 4 * m.d * m.layers
    w = 4 * m.params / 512
    return {"plain_flops": 6 * P + 6 * attn, "plain_bytes": 3 * w + 3 * act,
            # the halves: a forward (fit), a forward + activation backward (test)
            "passes_flops": (2 * P + 2 * attn + 4 * P + 4 * attn) / 2,
            "passes_bytes": (w + act + 2 * w + 2 * act) / 2,
            "test_pass_flops": 4 * P + 4 * attn, "test_pass_bytes": 2 * w + 2 * act}


@dataclass(frozen=True)
class Device:
    """Sustained rates: float32 and float64 FLOP/s of large matrix products, bytes/s of memory.

    ``to_device`` / ``to_host``: bytes/s of a plain (pageable) copy across the host link, for
    :func:`transfer_bytes`; None on the CPU, whose statistics never leave host memory.
    """

    name: str
    fp32: float
    fp64: float
    bandwidth: float
    note: str = field(default="", compare=False)
    to_device: float | None = None
    to_host: float | None = None


#: Nominal peaks times 0.6 (a sustained GEMM fraction; the same for every device). The host
#: link: the PCIe generation's x16 peak times 0.6 as well (64 GB/s for 5.0, 32 for 4.0), an
#: optimistic figure for pageable copies (``docs/scale.md`` has what an H200 measured).
DEVICES = {
    "h100": Device("H100 SXM (full-rate fp64)", 0.6 * 67e12, 0.6 * 67e12, 0.6 * 3.35e12,
                   "fp32 67 TFLOP/s (no TF32), fp64 tensor cores 67 TFLOP/s, 3.35 TB/s, "
                   "PCIe 5.0 x16", 0.6 * 64e9, 0.6 * 64e9),
    "consumer": Device("consumer GPU (1/64 fp64, RTX 4090-class)", 0.6 * 82.6e12,
                       0.6 * 82.6e12 / 64, 0.6 * 1.01e12,
                       "fp32 82.6 TFLOP/s, fp64 1.29 TFLOP/s, 1.01 TB/s, PCIe 4.0 x16",
                       0.6 * 32e9, 0.6 * 32e9),
}


def predict(m: ModelShape, s: StatsShape, dev: Device, *, halves: bool = True,
            host_s: float = 0.0, tokens: int | None = None, plain_s: float | None = None,
            act_moments: bool = True) -> dict[str, float]:
    """Seconds per token of the plain pass, measure's passes and its statistics; their ratios.

    The statistics run at ``dev.fp64`` in float64 (``s.itemsize == 8``), else at ``dev.fp32``
    (compensated float32). ``halves``: the tokens are split into a fit half and a test half
    (``measure``); False: every token is a gradient row (``gpu_check.py``).

    ``host_s``: the per-checkpoint host work in seconds (:func:`tangentlab.measure.host_cost.
    host_seconds`, the same on any device), spread over ``tokens`` eval tokens per checkpoint;
    it is added to the statistics (``host_s`` per token in the result). ``plain_s``: a measured
    plain forward+backward in seconds per token; the passes are then that times their FLOP
    share (``passes_flops / plain_flops``) instead of a roofline, which on a small model is far
    too optimistic (kernel overheads, not FLOPs, set its speed). Without them the prediction is
    the roofline alone, as in ``docs/scale.md``'s large-model tables.

    With ``tokens``, on a device with a host link (``dev.to_device``), the per-checkpoint copies
    of :func:`transfer_bytes` (``act_moments`` as there) are spread over the tokens too and
    added to the statistics (``transfer_s`` per token in the result).
    """
    mc = model_cost(m)
    if halves:
        fl, by = stats_flops(s)["per_token"], stats_bytes(s)["per_token"]
        pf, pb = mc["passes_flops"], mc["passes_bytes"]
    else:
        fl, by = s.sites * stats_flops(s)["test_row"], s.sites * stats_bytes(s)["test_row"]
        pf, pb = mc["test_pass_flops"], mc["test_pass_bytes"]
    rate = dev.fp64 if s.itemsize == 8 else dev.fp32
    plain = max(mc["plain_flops"] / dev.fp32, mc["plain_bytes"] / dev.bandwidth)
    passes = max(pf / dev.fp32, pb / dev.bandwidth)
    if plain_s is not None:
        plain, passes = plain_s, plain_s * pf / mc["plain_flops"]
    if host_s and not tokens:
        raise ValueError("host_s needs tokens, the eval tokens per checkpoint it is spread over")
    host = host_s / tokens if host_s else 0.0
    transfer = 0.0
    if tokens and dev.to_device and dev.to_host:
        tb = transfer_bytes(s, act_moments=act_moments)
        transfer = (tb["to device"] / dev.to_device + tb["to host"] / dev.to_host) / tokens
    stats = max(fl / rate, by / dev.bandwidth) + host + transfer
    return {"plain_s": plain, "passes_s": passes, "stats_s": stats, "host_s": host,
            "transfer_s": transfer, "ratio": (passes + stats) / plain,
            "stats_share": stats / (passes + stats)}


def device_bytes_per_site(s: StatsShape) -> dict[str, float]:
    """Device memory of one site's statistics at one checkpoint: O(d² + batches · controls).

    The geometry occurrences (O(tokens · d)) go to the host batch by batch and are not counted.
    """
    d, b = s.d, s.itemsize
    comp = 2 if b == 4 else 1  # compensated float32 keeps a second copy of every running sum
    return {
        "grad moments (buckets + total)": comp * (s.buckets + 1) * (d * d + d) * b,
        "act moments": comp * (d * d + d) * b,
        "update temporaries (~4 d^2)": 4 * d * d * b,
        "bases (plain + 1-constrained)": 2 * s.proxies * s.columns * d * b,
        "row projections (n x M, one batch)": s.batch_rows * s.columns * b,
        "per-token sums (tokens x d)": comp * s.tokens * (d + 1) * b,
        "kept rows (fit sample + test rows)": 2 * s.sample_rows * d * b,
        # plain: every bucket and the total; 1-constrained: the total
        "per-batch energies": s.proxies * (s.buckets + 2) * s.test_batches
        * (1 + s.pool + s.full + 2) * b,
    }


def largest_d(budget_bytes: float, s: StatsShape) -> int:
    """The largest d (a multiple of 128) whose ``s.sites`` sites fit in ``budget_bytes``."""
    d = 0
    while sum(device_bytes_per_site(replace(s, d=d + 128)).values()) * s.sites <= budget_bytes:
        d += 128
    return d


def model_bytes(m: ModelShape, batch_tokens: int = 512) -> float:
    """Device memory of a frozen float32 model and one batch's backward (activations ~34 d L)."""
    return 4 * m.params + batch_tokens * m.layers * 34 * m.d * 4


def calibrate(device: str = "cpu", n: int = 768, m: int = 3208, rows: int = 512) -> Device:
    """A device's rates, timed now: float32 and float64 matrix products, and a copy's bandwidth.

    The products are (rows, n) by (n, m), the copy float32. Run it on a quiet machine; it takes
    about a second. On a device without float64 (MPS) the float64 rate is the float32 one (the
    statistics run in compensated float32 there). On an accelerator, also the host link, 64 MiB
    of float64 each way as the statistics copy it: a plain ``.to()`` to the device
    (``to_device``), :func:`~tangentlab.measure.precision.to_host64` back (``to_host``).
    """
    import time

    import torch

    def sync():
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def rate(fn, work: float) -> float:
        fn()
        sync()
        reps, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < 0.3:
            fn()
            reps += 1
        sync()
        return work * reps / (time.perf_counter() - t0)

    from tangentlab.measure.precision import supports_float64

    out = {}
    for dt in (torch.float32, torch.float64):
        if dt == torch.float64 and not supports_float64(device):
            out[dt] = out[torch.float32]
            continue
        a = torch.randn(rows, n, dtype=dt, device=device)
        b = torch.randn(n, m, dtype=dt, device=device)
        out[dt] = rate(lambda a=a, b=b: a @ b, 2.0 * rows * n * m)
    x = torch.empty(1 << 25, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    bw = rate(lambda: y.copy_(x), 2.0 * x.numel() * 4)
    where = (f"this CPU ({torch.get_num_threads()} threads, timed)" if device == "cpu"
             else f"{device}, timed")
    if device == "cpu":
        return Device(where, out[torch.float32], out[torch.float64], bw)
    # the host link as the statistics use it: the bases go over in plain .to() copies of
    # pageable memory, the moments come back through page-locked buffers (to_host64)
    from tangentlab.measure.precision import to_host64

    host = torch.ones(1 << 23, dtype=torch.float64)  # 64 MiB
    on_dev = host.to(device)
    h2d = rate(lambda: host.to(device), 8.0 * host.numel())
    d2h = rate(lambda: to_host64(on_dev), 8.0 * host.numel())
    return Device(where, out[torch.float32], out[torch.float64], bw, to_device=h2d, to_host=d2h)


def calibrate_cpu() -> Device:
    """:func:`calibrate` on the CPU."""
    return calibrate("cpu")
