"""The cost model's arithmetic (issue 21, item 4)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tangentlab.measure.cost_model import (
    DEVICES,
    PYTHIA,
    Device,
    StatsShape,
    device_bytes_per_site,
    largest_d,
    model_cost,
    predict,
    stats_flops,
)


def test_stats_flops_count_the_cheaper_route_and_grow_as_d_squared_at_large_d():
    s = StatsShape(d=768)
    f = stats_flops(s)
    M = s.columns
    assert M == 401 * 8
    # 768: every row projected (2 d M) is cheaper than the buckets' Gram matrices
    assert f["test: energies"] == pytest.approx(2 * 2 * 768 * M)
    assert f["test: moments"] == 4 * 768 ** 2
    big = stats_flops(StatsShape(d=16384))  # moments (d^2) outgrow the projections (d M)
    assert big["test: moments"] > big["test: energies"]
    assert f["test: moments"] < f["test: energies"]
    assert f["per_token"] == pytest.approx(s.sites * (f["test_row"] + f["fit_row"]) / 2)


def test_model_cost_is_six_flops_per_parameter_plus_attention():
    m = PYTHIA["160m"]
    mc = model_cost(m)
    assert mc["plain_flops"] == pytest.approx(6 * m.matmul_params + 12 * 12 * 128 * 768)
    assert mc["passes_flops"] == pytest.approx(mc["plain_flops"] / 2)  # frozen weights


def test_predictions_order_devices_as_their_float64_rates():
    m, s = PYTHIA["160m"], StatsShape(d=768)
    h100 = predict(m, s, DEVICES["h100"])
    consumer = predict(m, s, DEVICES["consumer"])
    assert consumer["ratio"] > 3 * h100["ratio"] and 0 < h100["stats_share"] < 0.5
    # compensated float32 runs the statistics at the float32 rate
    c32 = predict(m, replace(s, itemsize=4), DEVICES["consumer"])
    assert c32["ratio"] < consumer["ratio"] / 3
    slow = Device("x", 1e9, 1e6, 1e12)
    assert predict(m, s, slow)["stats_share"] > 0.99
    grad_only = predict(m, s, DEVICES["h100"], halves=False)
    assert grad_only["passes_s"] > h100["passes_s"]


def test_device_memory_is_quadratic_in_d_and_independent_of_tokens_seen():
    a = sum(device_bytes_per_site(StatsShape(d=1024)).values())
    b = sum(device_bytes_per_site(StatsShape(d=2048)).values())
    assert 2.5 < b / a < 4
    assert device_bytes_per_site(StatsShape(d=768))["grad moments (buckets + total)"] == \
        6 * (768 ** 2 + 768) * 8
    d = largest_d(24e9, StatsShape(d=768))
    assert d % 128 == 0
    assert sum(device_bytes_per_site(StatsShape(d=d)).values()) * 4 <= 24e9
    assert sum(device_bytes_per_site(StatsShape(d=d + 128)).values()) * 4 > 24e9


def test_host_work_and_a_measured_plain_pass_enter_the_prediction():
    from tangentlab.measure.cost_model import DEVICES, ModelShape, StatsShape, predict

    m, s, dev = ModelShape("small", 128, 4, 2.6e6, vocab=4096), StatsShape(d=128), DEVICES["h100"]
    base = predict(m, s, dev)
    assert base["host_s"] == 0.0
    hosted = predict(m, s, dev, host_s=0.5, tokens=8192)
    assert hosted["stats_s"] == pytest.approx(base["stats_s"] + 0.5 / 8192 + hosted["transfer_s"])
    assert hosted["ratio"] > base["ratio"] and hosted["host_s"] == pytest.approx(0.5 / 8192)
    anchored = predict(m, s, dev, plain_s=1e-4)
    assert anchored["plain_s"] == 1e-4
    # the passes keep their FLOP share of the plain pass (3P + 3 attn of 6P + 6 attn: a half)
    assert anchored["passes_s"] == pytest.approx(0.5e-4)
    with pytest.raises(ValueError, match="tokens"):
        predict(m, s, dev, host_s=0.5)


def test_the_host_link_copies_enter_an_accelerators_prediction_per_checkpoint():
    from dataclasses import replace

    from tangentlab.measure.cost_model import (
        DEVICES,
        Device,
        ModelShape,
        StatsShape,
        predict,
        transfer_bytes,
    )

    s = StatsShape(d=768)
    tb = transfer_bytes(s)
    # 4 sites x 2 proxies x (plain, 1-constrained) bases of (768, 401 x 8); 5 buckets + total +
    # activations moments of (d^2 + d), float64
    assert tb["to device"] == 4 * 2 * 2 * 768 * 401 * 8 * 8
    assert tb["to host"] == 4 * 7 * (768 ** 2 + 768) * 8
    assert transfer_bytes(s, act_moments=False)["to host"] == 4 * 6 * (768 ** 2 + 768) * 8
    m, dev = ModelShape("pythia-160m", 768, 12, 162e6), DEVICES["h100"]
    got = predict(m, s, dev, tokens=65536)
    want = (tb["to device"] / dev.to_device + tb["to host"] / dev.to_host) / 65536
    assert got["transfer_s"] == pytest.approx(want)
    # spread over twice the tokens, half the cost per token; none without tokens or a link
    assert predict(m, s, dev, tokens=131072)["transfer_s"] == pytest.approx(want / 2)
    assert predict(m, s, dev)["transfer_s"] == 0.0
    cpu = Device("cpu", 1e11, 5e10, 1e10)
    assert predict(m, s, cpu, tokens=65536)["transfer_s"] == 0.0
    slow = predict(m, s, replace(dev, to_host=dev.to_host / 10), tokens=65536)
    assert slow["stats_s"] > got["stats_s"] and slow["ratio"] > got["ratio"]


def test_host_seconds_times_every_part_on_one_blas_thread():
    from threadpoolctl import threadpool_info

    from tangentlab.measure.cost_model import StatsShape
    from tangentlab.measure.host_cost import HOST_PARTS, ONCE_PARTS, host_seconds

    before = {i["filepath"]: i["num_threads"] for i in threadpool_info()}
    small = StatsShape(d=16, sites=1, pool=8, full=8, test_batches=3, sample_rows=64, tokens=50)
    one = host_seconds(small, n_controls=4, n_boot=20)
    two = host_seconds(StatsShape(d=16, sites=2, pool=8, full=8, test_batches=3,
                                  sample_rows=64, tokens=50), n_controls=4, n_boot=20, once=True)
    assert set(one) == set(HOST_PARTS) | {"total"}
    assert all(v > 0 for v in one.values())
    assert one["total"] == pytest.approx(sum(one[k] for k in HOST_PARTS))
    after = {i["filepath"]: i["num_threads"] for i in threadpool_info()}
    assert set(two) == set(HOST_PARTS) | set(ONCE_PARTS) | {"total"}
    assert two["total"] > 0 and {k: after[k] for k in before} == before  # limits restored


def test_host_seconds_times_only_the_parts_asked_for():
    from tangentlab.errors import ValidationError
    from tangentlab.measure.cost_model import StatsShape
    from tangentlab.measure.host_cost import host_seconds

    small = StatsShape(d=40, sites=2, pool=8, full=8, test_batches=3, sample_rows=64, tokens=50)
    got = host_seconds(small, only=("energy streams (build)",))
    assert set(got) == {"energy streams (build)", "total"}
    assert got["total"] == got["energy streams (build)"] > 0
    with pytest.raises(ValidationError, match="unknown parts"):
        host_seconds(small, only=("energy stream build",))
