"""The planted model family: loads like any checkpoint, its sites fire, its planted truth is measured."""

from __future__ import annotations

import pytest

from tangentlab.errors import ConfigError


@pytest.fixture(scope="module")
def text():
    from tangentlab.validate.planted_trajectories import shared_text

    return shared_text("wikipedia", 512, max_train_tokens=60_000)


@pytest.fixture(scope="module")
def trajectory(text, tmp_path_factory):
    """Step 0 without enrichment (k = 1), step 100 with the planted factor k = 3."""
    from tangentlab.validate.planted_trajectories import PlantedSpec, write_trajectory

    spec = PlantedSpec(steps=(0, 100), curve="flat", k_end=3.0, seed=3)
    return write_trajectory(spec, tmp_path_factory.mktemp("planted") / "run", text)


def test_pure_function_of_ids_and_local_context():
    import torch

    from tangentlab.validate.planted import PlantedConfig, PlantedForCausalLM, context_keys

    m = PlantedForCausalLM(PlantedConfig(vocab_size=300, hidden_size=16, planted_rank=2,
                                         context_size=3))
    ids = torch.randint(0, 300, (2, 20), generator=torch.Generator().manual_seed(0))
    a, b = m(input_ids=ids).logits, m(input_ids=ids.clone()).logits
    assert torch.equal(a, b)
    keys = context_keys(ids, 3)
    shifted = torch.cat([torch.full((2, 5), 7), ids], dim=1)  # same ids, 5 positions later
    # positions with a full context keep their key (an overlapping window sees the same vector)
    assert torch.equal(context_keys(shifted, 3)[:, 5 + 2:], keys[:, 2:])
    assert not torch.equal(context_keys(shifted, 3)[:, 5:7], keys[:, :2])


def test_cached_normals_are_exact_and_not_shared():
    """A repeated draw gives the same numbers as a fresh one, and editing it leaves the cache alone."""
    import torch

    from tangentlab.validate.planted.model import _hash_normals, hash_normals

    keys = torch.randint(0, 2**31 - 2, (3, 11), generator=torch.Generator().manual_seed(1))
    fresh = _hash_normals(keys, 6, 5)
    first = hash_normals(keys, 6, 5)
    first.add_(1.0)  # a caller that edits its copy
    assert torch.equal(hash_normals(keys, 6, 5), fresh)
    assert not torch.equal(hash_normals(keys, 6, 4), fresh)  # the salt is part of the key


def test_head_keeps_clean_activations_when_a_hook_edits_the_site_in_place():
    """The embed site hands out a copy of h₀: an in-place edit there moves the loss through φ."""
    import torch

    from tangentlab.validate.planted import PlantedConfig, PlantedForCausalLM

    cfg = PlantedConfig(vocab_size=300, hidden_size=16, planted_rank=2, context_size=3,
                        loss_scale=1.0)
    m = PlantedForCausalLM(cfg)
    ids = torch.randint(0, 300, (2, 20), generator=torch.Generator().manual_seed(0))
    clean = m(input_ids=ids, labels=ids).loss
    handle = m.planted.embed.register_forward_hook(lambda mod, inp, out: out.mul_(0.0))
    try:
        edited = m(input_ids=ids, labels=ids).loss
    finally:
        handle.remove()
    emb = m.planted.embed
    h0 = emb.activations(ids)
    q = ((h0 @ emb.frame) ** 2 * emb.cost).sum(-1)  # h = 0: q = |h0|²_K, linear φ
    F = -q
    nxt = torch.cat([ids[:, 1:], ids[:, :1]], dim=1)
    logits = torch.zeros(*ids.shape, cfg.vocab_size, dtype=h0.dtype)
    logits = logits.scatter(-1, nxt[..., None], F[..., None])
    want = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size).float(),
                                             ids[:, 1:].reshape(-1))
    assert not torch.isclose(edited, clean)
    assert torch.isclose(edited, want, rtol=1e-6)


def test_uniforms_stay_inside_the_unit_interval_at_the_top_of_the_hash_range():
    """_mix can return 2^31 − 1 (its xor-shift reaches the top bit pattern): u must stay < 1."""
    import torch

    from tangentlab.validate.planted.model import _M31, _uniform

    u = _uniform(torch.tensor([0, 1, _M31 - 1, _M31, 2**31 - 1], dtype=torch.int64))
    assert bool(((u > 0) & (u < 1)).all())
    assert torch.isfinite(torch.sqrt(-2.0 * torch.log(u))).all()


def test_hash_normals_are_the_plain_formula_bit_for_bit():
    """The in-place hash gives the bits of the plain expressions: a certificate's simulations
    replay only if every planted draw is the same number (a 1-ulp change moves statuses)."""
    import math

    import torch

    from tangentlab.validate.planted.model import _M31, _hash_normals, hash_normals

    def plain(keys, n, salt):
        x = (keys[..., None] * 2654435761 % _M31 + (salt * 97 + 1) * 40503
             + torch.arange(2 * n) * 69069) % _M31
        for _ in range(3):
            x = (x * 48271) % _M31
            x = x ^ (x >> 11)
        u = ((x % _M31).double() + 0.5) / _M31
        return torch.sqrt(-2.0 * torch.log(u[..., :n])) * torch.cos(2.0 * math.pi * u[..., n:])

    g = torch.Generator().manual_seed(3)
    for shape, n, salt in (((4, 16), 1, 0), ((2, 3, 5), 7, 12345), ((8,), 64, 9)):
        keys = torch.randint(0, _M31, shape, generator=g)
        got = _hash_normals(keys, n, salt)
        assert torch.equal(got, plain(keys, n, salt))
        assert got.is_contiguous() and got.untyped_storage().nbytes() == got.numel() * 8
        assert torch.equal(hash_normals(keys, n, salt), hash_normals(keys, n, salt))
    assert not torch.equal(_hash_normals(keys, n, salt), _hash_normals(keys, n, salt + 1))


def test_window_initial_positions_are_not_shared_across_windows():
    """Two windows that open with the same token must not give it one shared vector."""
    import torch

    from tangentlab.validate.planted import context_keys

    a = torch.tensor([[5, 1, 2, 3, 4, 6, 7, 8]])
    b = torch.tensor([[5, 9, 9, 9, 4, 6, 7, 8]])
    ka, kb = context_keys(a, 4), context_keys(b, 4)
    assert (ka[0, :3] != kb[0, :3]).all()  # positions before a full context differ
    assert len(set(ka[0, :3].tolist())) == 3
    assert ka[0, 7] == kb[0, 7]  # the same last 4 ids: the same key


def test_config_refuses_bad_values():
    from tangentlab.validate.planted import PlantedConfig
    from tangentlab.validate.planted_trajectories import PlantedSpec

    with pytest.raises(ValueError, match="cost_shape"):
        PlantedConfig(cost_shape="cubic")
    with pytest.raises(ConfigError, match="2m"):
        PlantedSpec(d=8, m=4).check()
    with pytest.raises(ConfigError, match="curve"):
        PlantedSpec(curve="zigzag").check()


def test_enrichment_curves_match_their_definition():
    from tangentlab.validate.planted_trajectories import PlantedSpec, enrichment_curve

    w = PlantedSpec(curve="weaken", k_peak=6, k_end=3, x_peak=0.3)
    assert enrichment_curve(w, 0.0) == 1.0
    assert enrichment_curve(w, 0.3) == pytest.approx(6.0)
    assert enrichment_curve(w, 1.0) == pytest.approx(3.0)
    assert enrichment_curve(PlantedSpec(curve="slow_rise", k_end=4), 0.5) == pytest.approx(2.5)
    assert enrichment_curve(PlantedSpec(curve="none"), 0.7) == 1.0


@pytest.mark.slow
def test_loads_through_trajectory_and_load_model_and_every_site_fires(trajectory):
    import json

    import torch

    from tangentlab.empirical.loading.capture import capture_batch
    from tangentlab.empirical.loading.models import load_like, load_model
    from tangentlab.empirical.loading.sites import available_sites
    from tangentlab.empirical.loading.trajectory import resolve_trajectory

    traj = resolve_trajectory(trajectory)
    assert [c.step for c in traj.checkpoints] == [0, 100]
    assert traj.eval_file is not None and traj.frequency_file is not None
    first = load_model(traj.checkpoints[0].path)
    assert (first.family, first.arch, first.head) == ("planted", "decoder", True)
    last = load_like(first, traj.checkpoints[1].path)
    cfg = json.loads((traj.checkpoints[1].path / "config.json").read_text())
    assert cfg["model_type"] == "planted"
    sites = available_sites(last.model)
    assert sites[0] == "embed" and sites[-1] == "ln_final" and "blocks.1.resid_mid" in sites
    ids = torch.randint(0, 500, (2, 32), generator=torch.Generator().manual_seed(1))
    cap = capture_batch(last, sites, ids, ids.clone())
    assert set(cap.grads) == set(sites)
    g = cap.grads["blocks.1.resid_post"][cap.rows]
    assert torch.isfinite(g).all() and float(g.abs().sum()) > 0
    # the planted subspace S holds k = 3 times the gradient energy per dimension
    frame = last.model.planted.embed.frame.detach()
    e = ((g @ frame) ** 2).mean(0)
    assert 2.0 < float(e[:4].mean() / e[4:].mean()) < 4.5


@pytest.mark.slow
def test_pipeline_recovers_the_planted_factor_and_the_null(trajectory, tmp_path):
    from tangentlab.empirical.measurement.protocol import measure_trajectory
    from tangentlab.report.tables import ResultTable
    from tangentlab.runs import RESULTS_NAME

    out = measure_trajectory(trajectory, tmp_path / "m", device="cpu", overrides={
        "sites": ("blocks.-1.resid_post",), "rank": 4, "n_batches": 32, "batch_size": 4,
        "n_boot": 400, "sample_rows": 1024, "causal": False, "threads": 1})
    t = ResultTable.read(out / RESULTS_NAME)
    site = "blocks.1.resid_post"
    last = t.get("enrichment", site=site, step=100.0)
    null = t.get("enrichment", site=site, step=0.0)
    assert last.ci_low < 3.0 < last.ci_high, last  # the planted factor, within its interval
    assert last.ci_low > 1.5
    assert null.ci_low < 1.0 < null.ci_high, null  # no effect at step 0: the CI covers 1


def test_a_planted_checkpoint_loads_without_importing_validate_first(trajectory, monkeypatch):
    """The family table knows where the planted classes live: with the family unregistered and
    ``tangentlab.validate.planted`` not imported (a fresh interpreter), load_model still loads a
    planted checkpoint (before: transformers did not recognise the model type ``planted``)."""
    import sys

    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    from tangentlab.empirical.loading.models import load_model
    from tangentlab.empirical.loading.site_table import FAMILIES
    from tangentlab.empirical.loading.trajectory import resolve_trajectory

    path = resolve_trajectory(trajectory).checkpoints[0].path
    assert FAMILIES["planted"].provider == "tangentlab.validate.planted"
    # undo what importing tangentlab.validate.planted did (monkeypatch restores it afterwards)
    monkeypatch.delitem(sys.modules, "tangentlab.validate.planted")
    monkeypatch.delitem(CONFIG_MAPPING._extra_content, "planted")
    models = AutoModelForCausalLM._model_mapping._extra_content
    for key in [k for k in models if getattr(k, "model_type", "") == "planted"]:
        monkeypatch.delitem(models, key)
    lm = load_model(path)
    assert (lm.family, type(lm.model).__name__) == ("planted", "PlantedForCausalLM")
    assert "tangentlab.validate.planted" in sys.modules  # imported on first use, by the loader


def test_a_rogue_offset_leaves_the_site_gradient_unchanged():
    """The ``rogue`` null: the offset moves activations, not the loss's gradient at the site.

    With the offset inside the logit (the old head), w·h swung by about ±2 at offset 20, p_y moved
    with it, and the gradient energy along the rogue axis fell to about 0.92 of the other axes',
    a planted depletion where the scenario's truth says there is none.
    """
    import torch

    from tangentlab.validate.planted import PlantedConfig, PlantedForCausalLM

    ids = torch.randint(0, 512, (16, 64), generator=torch.Generator().manual_seed(0))

    def site_gradient(rogue_scale):
        cfg = PlantedConfig(vocab_size=512, hidden_size=32, planted_rank=4, context_size=3,
                            rogue_dim=0, rogue_scale=rogue_scale, loss_scale=0.1, salt=5)
        h, _ = _embed_and_loss(PlantedForCausalLM(cfg), ids, ids)
        return h, h.grad.reshape(-1, cfg.hidden_size)

    h_rogue, g_rogue = site_gradient(20.0)
    h_plain, g_plain = site_gradient(0.0)
    assert float((h_rogue[..., 0] - h_plain[..., 0]).mean()) > 15.0  # the offset (20) is there
    # the same gradient, row by row: the old head failed here (p_y moved with the offset)
    torch.testing.assert_close(g_rogue, g_plain, rtol=1e-5, atol=1e-9)


def _embed_and_loss(model, ids, labels):
    """(the ``embed`` site's output, with its gradient of the loss, and the model's output)."""
    seen = []

    def keep(mod, inp, out):
        out.requires_grad_(True)
        seen.append(out)

    handle = model.planted.embed.register_forward_hook(keep)
    try:
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
    finally:
        handle.remove()
    return seen[0], out


def test_a_row_scale_makes_activations_and_gradients_heavy_tailed_with_unit_mean_square():
    """Issue 33's heavy-tailed nulls: a lognormal scale per position multiplies the activation
    and the planted gradient direction of that position, E[s^2] = 1; at 0 nothing changes."""
    import torch

    from tangentlab.validate.planted import PlantedConfig, PlantedForCausalLM, context_keys

    ids = torch.randint(0, 512, (32, 64), generator=torch.Generator().manual_seed(2))

    def model(sigma):
        return PlantedForCausalLM(PlantedConfig(vocab_size=512, hidden_size=32, planted_rank=4,
                                                context_size=3, salt=5, row_scale_sigma=sigma))

    plain, heavy = model(0.0), model(0.5)
    keys = context_keys(ids, 3)
    assert plain.planted.embed.row_scale(keys, torch.float32) is None
    s = heavy.planted.embed.row_scale(keys, torch.float32)
    assert abs(float((s * s).mean()) - 1.0) < 0.1 and float(s.max() / s.median()) > 3.0
    h0, h1 = plain.planted.embed.activations(ids), heavy.planted.embed.activations(ids)
    torch.testing.assert_close(h1, h0 * s[..., None])
    w0 = plain.planted.embed.gradient_directions(ids)
    w1 = heavy.planted.embed.gradient_directions(ids)
    torch.testing.assert_close(w1, w0 * s[..., None])
    norms = h1.norm(dim=-1).flatten()  # the row norms' tail: kurtosis well above Gaussian rows'
    z = (norms - norms.mean()) / norms.std()
    assert float((z ** 4).mean()) > 4.0


def test_a_static_null_draws_its_checkpoints_afresh(text, tmp_path):
    """Issue 33, item 7: in a static null every checkpoint was the same model on the same
    windows, so the last enrichment equalled step 0's and "supported" was unreachable. The
    context draws are fresh per checkpoint now: the same truth, other samples."""
    import torch

    from tangentlab.empirical.loading.models import load_model
    from tangentlab.empirical.loading.trajectory import resolve_trajectory
    from tangentlab.validate.planted_trajectories import PlantedSpec, write_trajectory

    run = write_trajectory(PlantedSpec(steps=(0, 50, 100), seed=4), tmp_path / "null", text)
    cks = resolve_trajectory(run).checkpoints
    ids = torch.randint(0, 512, (4, 32), generator=torch.Generator().manual_seed(0))
    acts = []
    for ck in cks:
        m = load_model(ck.path).model
        with torch.no_grad():
            acts.append(m.planted.embed.activations(ids))
    assert not torch.equal(acts[0], acts[-1]) and not torch.equal(acts[1], acts[-1])
    # the same truth: the frame, centres and gradient scales are those of the step
    a, b = (load_model(ck.path).model.planted.embed for ck in (cks[0], cks[-1]))
    assert torch.equal(a.frame, b.frame) and torch.equal(a.centres, b.centres)
    assert torch.equal(a.grad_scale, b.grad_scale)


def test_pinning_grows_from_none_at_step_0_to_alpha_at_the_last_step():
    """Issue 33: with pinning already full at step 0 and fresh draws per checkpoint, the
    frequency-distance row's "not above step 0" was a coin flip (power 0/4 at the standard
    setting). Pinning is now a product of training: none at step 0, α at the last step."""
    import numpy as np
    from scipy.stats import spearmanr

    from tangentlab.validate.planted_trajectories import PlantedSpec, planted_tensors

    counts = np.random.default_rng(0).zipf(1.5, 400).clip(max=10_000)
    spec = PlantedSpec(steps=(0, 50, 100), alpha=0.5)
    spreads = [planted_tensors(spec, counts, step)["spread"] for step in spec.steps]
    assert np.ptp(spreads[0]) == 0.0 and spreads[0][0] == spec.t_ref  # no pinning at step 0
    order = np.argsort(counts, kind="stable")
    for s in spreads[1:]:  # frequent tokens less spread once trained (never more)
        assert np.all(np.diff(s[order]) <= 1e-12) and spearmanr(counts, s)[0] < -0.4
    # the exponent at x = 1/2 is half the last step's (where neither is clipped)
    inside = (spreads[2] > spec.t_ref / 4) & (spreads[2] < 4 * spec.t_ref)
    assert inside.sum() > 10
    np.testing.assert_allclose(np.log(spreads[2][inside] / spec.t_ref),
                               2 * np.log(spreads[1][inside] / spec.t_ref), rtol=1e-9)


def _masked_batch(V=64, seed=0):
    """MLM-style inputs: 15% of positions replaced by the mask id 3, labels -100 elsewhere."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, V, (4, 20), generator=g)
    masked = torch.rand(4, 20, generator=g) < 0.15
    inp = ids.clone()
    inp[masked] = 3
    return inp, torch.where(masked, ids, torch.full_like(ids, -100)), masked


def test_the_masked_head_puts_every_position_s_gradient_on_its_own_planted_direction():
    """Issue 35's masked-LM twin: the loss lives at the masked positions and reaches every
    position (a uniform attention), and each row's gradient is a negative multiple of that
    position's planted direction w_c, so the planted enrichment holds at every row."""
    import math

    import torch

    from tangentlab.validate.planted import PlantedForMaskedLM, PlantedMaskedConfig

    cfg = PlantedMaskedConfig(vocab_size=64, hidden_size=16, planted_rank=3, context_size=3,
                              sink_id=3, loss_scale=0.1, salt=2)
    model = PlantedForMaskedLM(cfg)
    inp, labels, masked = _masked_batch()
    h, out = _embed_and_loss(model, inp, labels)
    g, w = h.grad, model.planted.embed.gradient_directions(inp)
    cos = (g * w).sum(-1) / (g.norm(dim=-1) * w.norm(dim=-1))
    assert float(cos.max()) < -0.9999  # every row, masked or not: along -w, one sign
    norms = g.norm(dim=-1)
    assert float(norms[masked].mean()) > 3 * float(norms[~masked].mean()) > 0
    # the head never reads the label: any label other than the sink gives the same loss
    other = torch.where(masked, (labels + 7) % 60 + 4, labels)
    assert float(model(input_ids=inp, labels=other).loss) == pytest.approx(float(out.loss))
    sink = out.logits[..., 3]
    assert float(out.logits.abs().sum() - sink.abs().sum()) == 0.0  # 0 on every other id
    assert float(out.loss) == pytest.approx(math.log(63) + math.log(2), abs=0.1)  # F near 0
    with pytest.raises(ValueError, match="sink_id"):
        PlantedMaskedConfig(vocab_size=64, sink_id=64)


def test_an_encoder_s_masked_rows_carry_the_planted_factor_under_a_frequency_gain():
    """A masked position is keyed by the mask token, which never occurs in the training text.
    With the gain of its zero count, the masked rows (most of an encoder's gradient energy) held
    S at gain² ≈ 0.1 of the mean, and the twin's ``effect`` units read 0.34 at k = 1: the mask
    token's gain is 1, so every masked row's S-share per dimension is k."""
    import numpy as np
    import torch

    from tangentlab.validate.planted_trajectories import PlantedSpec, planted_checkpoints

    V, m = 64, 3
    counts = np.random.default_rng(1).zipf(1.4, V).clip(max=5_000).astype(float)
    counts[3] = 0  # the mask token (the sink) never occurs in the training text
    spec = PlantedSpec(d=16, m=m, steps=(0, 100), curve="flat", k_end=3.0, gain_exponent=0.5,
                       seed=4, arch="encoder", seq_len=20)
    inp, labels, masked = _masked_batch(V=V, seed=1)
    inp, labels, masked = (torch.cat([x] * 64) for x in (inp, labels, masked))
    inp = torch.where(masked, inp, torch.randint(4, V, inp.shape, generator=torch.Generator()
                                                 .manual_seed(2)))
    ratios, gains = [], []
    for _, model in planted_checkpoints(spec, counts, V, sink_id=3):
        gains.append(float(model.planted.embed.token_gain[3]))
        h, _ = _embed_and_loss(model, inp, labels)
        frame = model.planted.embed.frame.detach()
        coords = (h.grad[masked] @ frame) ** 2  # masked rows, in the planted frame
        ratios.append(float(coords[:, :m].mean() / coords[:, m:].mean()))
    assert 0.8 < ratios[0] < 1.25 and 2.4 < ratios[1] < 3.75, ratios
    assert gains == [1.0, 1.0]


@pytest.mark.slow
def test_a_planted_encoder_is_measured_through_the_masked_lm_path(text, tmp_path):
    """The masked-LM twin loads as an encoder, and the protocol's encoder path (MLM-masked eval
    batches, the loss at the masked positions) recovers its planted factor and its null."""
    import json

    from tangentlab.empirical.loading.models import load_model
    from tangentlab.empirical.loading.trajectory import resolve_trajectory
    from tangentlab.empirical.measurement.protocol import measure_trajectory
    from tangentlab.report.tables import ResultTable
    from tangentlab.runs import RESULTS_NAME
    from tangentlab.validate.planted_trajectories import PlantedSpec, write_trajectory

    with pytest.raises(ConfigError, match="arch must be one of decoder, encoder"):
        PlantedSpec(arch="seq2seq").check()
    spec = PlantedSpec(steps=(0, 100), curve="flat", k_end=3.0, seed=3, arch="encoder")
    run = write_trajectory(spec, tmp_path / "run", text)
    lm = load_model(resolve_trajectory(run).checkpoints[0].path)
    assert (lm.family, lm.arch, type(lm.model).__name__) == ("planted_mlm", "encoder",
                                                             "PlantedForMaskedLM")
    assert lm.model.config.sink_id == text.tokenizer.mask_token_id
    out = measure_trajectory(run, tmp_path / "m", device="cpu", overrides={
        "sites": ("blocks.-1.resid_post",), "rank": 4, "n_batches": 32, "batch_size": 4,
        "n_boot": 400, "sample_rows": 1024, "causal": False, "threads": 1}, figures=False)
    assert json.loads((out / "manifest.json").read_text())["arch"] == "encoder"
    t = ResultTable.read(out / RESULTS_NAME)
    last = t.get("enrichment", site="blocks.1.resid_post", step=100.0)
    null = t.get("enrichment", site="blocks.1.resid_post", step=0.0)
    assert last.ci_low < 3.0 < last.ci_high and last.ci_low > 1.5, last
    assert null.ci_low < 1.0 < null.ci_high, null
