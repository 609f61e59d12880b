"""The site table, family by family: tiny random models of every family, saved as revisions of a
locally built Hub cache and loaded offline through huggingface_hub (no mock)."""

from __future__ import annotations

import pytest
import torch

from tangentlab.empirical.loading.capture import capture_batch
from tangentlab.empirical.loading.models import load_like, load_model, to_stat
from tangentlab.empirical.loading.sites import (
    FAMILIES,
    available_sites,
    family_table,
    normalize_site,
    site_info,
    site_module,
    site_semantics,
    supported_families,
)
from tangentlab.empirical.loading.trajectory import resolve_trajectory
from tangentlab.errors import UnknownNameError
from tests.empirical.families import (
    FAMILY_CONFIGS,
    VOCAB,
    save_bin,
    save_sharded,
    tiny_model,
    write_hub_revision,
)

#: every family in the table, plus GPT-NeoX with sequential blocks (which has a resid_mid)
CASES = sorted(FAMILY_CONFIGS) + ["gpt_neox_seq"]
REVISIONS = (("step0", None), ("step1", None), ("step2", torch.float16), ("step3", torch.bfloat16))
#: two more revisions in the other layouts real repositories have: Pythia-style ``.bin`` weights,
#: and sharded safetensors with an index
LAYOUTS = (("step4", save_bin), ("step5", save_sharded))


def _build(case: str, seed: int):
    if case == "gpt_neox_seq":
        return tiny_model("gpt_neox", seed=seed, use_parallel_residual=False)
    return tiny_model(case, seed=seed)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """HF_HOME with ``tiny/<case>`` repos (fp32 step0/step1, fp16 step2, bf16 step3, a ``.bin``
    step4, a sharded step5, each saved by ``save_pretrained`` with another seed) and a
    ``tiny/opt`` repo (a family without a site table); offline mode on."""
    root = tmp_path_factory.mktemp("hf_home")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HOME", str(root))
        mp.delenv("HF_HUB_CACHE", raising=False)
        mp.setenv("HF_HUB_OFFLINE", "1")
        cache = root / "hub"
        for case in CASES:
            for i, (rev, dt) in enumerate(REVISIONS):
                m = _build(case, i)
                if dt is not None:
                    m = m.to(dt)
                write_hub_revision(cache, f"tiny/{case}", rev, m.save_pretrained)
            for i, (rev, save) in enumerate(LAYOUTS, start=len(REVISIONS)):
                m = _build(case, i)
                write_hub_revision(cache, f"tiny/{case}", rev, lambda d, m=m, save=save: save(m, d))
        from transformers import OPTConfig, OPTForCausalLM

        opt = OPTForCausalLM(OPTConfig(hidden_size=32, num_hidden_layers=1, ffn_dim=64,
                                       num_attention_heads=2, vocab_size=VOCAB,
                                       max_position_embeddings=64, word_embed_proj_dim=32))
        write_hub_revision(cache, "tiny/opt", "main", opt.save_pretrained)
        yield cache


def _load(case: str, revision: str = "step1", **kw):
    traj = resolve_trajectory(f"tiny/{case}", revisions=revision)
    assert traj.source == "hub" and traj.checkpoints[0].revision == revision
    return load_model(traj.checkpoints[0].path, **kw)


def _batch(lm, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, VOCAB, (2, 10), generator=g)
    if lm.arch == "encoder":
        masked = torch.rand(ids.shape, generator=g) < 0.3
        masked[:, 0] = True
        labels = torch.where(masked, ids, torch.full_like(ids, -100))
        return torch.where(masked, torch.full_like(ids, 3), ids), labels
    return ids, ids


def test_table_lists_every_family_and_norm_types():
    want = {"gpt2", "gpt_neox", "llama", "olmo", "olmo2", "qwen2", "qwen3", "gemma", "gemma2",
            "mistral", "phi3", "bert", "roberta", "modernbert"}
    assert want <= set(supported_families())
    for mt, table in FAMILIES.items():
        assert mt in table.model_types
        assert table.norm in ("LayerNorm", "RMSNorm", "none")  # none: the planted family
        for kind, spec in table.sites.items():
            assert spec.hook in ("output", "input", "tap"), (mt, kind)
            assert spec.after_norm in (None, "LayerNorm", "RMSNorm")
            assert spec.before_norm in (None, "LayerNorm", "RMSNorm")
    assert FAMILIES["llama"].norm == "RMSNorm" and FAMILIES["gpt_neox"].norm == "LayerNorm"
    assert "resid_mid" in FAMILIES["gpt2"].sites and "ln_final" not in FAMILIES["bert"].sites


def _same_bytes(a: dict, b: dict) -> bool:
    """Whether two state dicts hold the same names, dtypes, shapes and bytes."""
    if list(a) != list(b):
        return False
    for k, x in a.items():
        y = b[k]
        if x.dtype != y.dtype or x.shape != y.shape:
            return False
        if not torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)):
            return False
    return True


@pytest.mark.parametrize("case", CASES)
def test_every_revision_loads_as_from_pretrained_does(hub, case):
    """The trajectory path of a measurement (a model id resolved offline, the first checkpoint
    by load_model, every later one by load_like) gives each checkpoint the state dict that
    transformers' from_pretrained gives, byte for byte, in every file layout (safetensors fp32,
    fp16, bf16, .bin, sharded); and the revisions differ."""
    import transformers

    traj = resolve_trajectory(f"tiny/{case}", revisions="all")
    want = [r for r, _ in REVISIONS] + [r for r, _ in LAYOUTS]
    assert [c.revision for c in traj.checkpoints] == want
    assert list(traj.checkpoints[4].path.glob("*.bin")) and not list(
        traj.checkpoints[4].path.glob("*.safetensors"))
    assert len(list(traj.checkpoints[5].path.glob("model-*.safetensors"))) > 1
    first = load_model(traj.checkpoints[0].path)
    auto = (transformers.AutoModelForMaskedLM if first.arch == "encoder"
            else transformers.AutoModelForCausalLM)
    seen = []
    for ck in traj.checkpoints:
        lm = first if ck is traj.checkpoints[0] else load_like(first, ck.path)
        got = lm.model.state_dict()
        ref = auto.from_pretrained(str(ck.path), dtype=torch.float32).state_dict()
        assert _same_bytes(got, ref), ck.revision
        assert not any(_same_bytes(got, s) for s in seen), ck.revision
        seen.append(got)


@pytest.mark.parametrize("case", CASES)
def test_every_site_fires_once_and_gradients_equal_autograd(hub, case):
    lm = _load(case)
    assert lm.family == ("gpt_neox" if case == "gpt_neox_seq" else case)
    sites = available_sites(lm.model)
    table = family_table(lm.model)
    per_block = 4 if case == "gpt_neox" else 5  # Pythia-style parallel blocks: no resid_mid
    assert len(sites) == 1 + 2 * per_block + ("ln_final" in table.sites)
    inp, labels = _batch(lm)
    cap = capture_batch(lm, sites, inp, labels)  # raises unless every hook fired exactly once
    assert set(cap.grads) == set(sites)
    assert all(g.dtype == torch.float32 for g in cap.grads.values())

    # Reference: the HF model's own mean loss x number of targets, parameters trainable,
    # activations kept with retain_grad.
    kept = {}

    def keep(site):
        def hook(_m, _i, out):
            t = out[0] if isinstance(out, tuple) else out
            t.retain_grad()
            kept[site] = t
        return hook

    hs = [site_module(lm.model, s).register_forward_hook(keep(s)) for s in sites]
    try:
        out = lm.model(input_ids=inp, labels=labels)
        (out.loss * cap.n_targets).backward()
    finally:
        for h in hs:
            h.remove()
    assert abs(out.loss.item() * cap.n_targets - cap.loss_sum) < 1e-5 * cap.loss_sum
    for s in sites:
        ref = kept[s].grad
        assert ref is not None, s
        scale = ref.abs().max().item()
        assert scale > 0, s
        assert torch.allclose(cap.grads[s], ref, atol=1e-5 * scale, rtol=1e-4), s
        assert torch.allclose(cap.acts[s], kept[s].detach()), s

    # Independently of the hook points: the stream tensors the model itself returns as
    # hidden_states[l] (the input of block l) carry the gradients captured at resid_pre.l.
    lm.model.zero_grad()
    out = lm.model(input_ids=inp, labels=labels, output_hidden_states=True)
    for h in out.hidden_states[:2]:
        h.retain_grad()
    (out.loss * cap.n_targets).backward()
    for i in range(2):
        ref = out.hidden_states[i].grad
        assert ref is not None
        scale = ref.abs().max().item()
        assert torch.allclose(cap.grads[f"blocks.{i}.resid_pre"], ref, atol=1e-5 * scale,
                              rtol=1e-4), i

    # A site captured alone (it then becomes the first, leaf-made site) keeps its full gradient,
    # including the skip path around a resid_mid tap.
    for s in [x for x in sites if x.endswith(("resid_mid", "resid_pre", "attn_out"))]:
        alone = capture_batch(lm, [s], inp, labels)
        assert torch.allclose(alone.grads[s], cap.grads[s], atol=1e-6, rtol=1e-5), s


@pytest.mark.parametrize("case", CASES)
def test_sites_sit_where_the_table_says(hub, case):
    lm = _load(case)
    m = lm.model
    inp, labels = _batch(lm)
    sites = available_sites(m)
    a = capture_batch(lm, sites, inp, grads=False).acts
    with torch.no_grad():
        out = m(input_ids=inp, output_hidden_states=True)
    hs = out.hidden_states
    n = 2
    close = dict(atol=1e-5, rtol=1e-4)
    assert torch.allclose(a["embed"], hs[0], **close)
    assert torch.equal(a["blocks.0.resid_pre"], a["embed"])
    assert torch.allclose(a["blocks.1.resid_pre"], a["blocks.0.resid_post"], **close)
    assert torch.allclose(a["blocks.1.resid_pre"], hs[1], **close)
    table = family_table(m)
    for i in range(n):
        pre, post = a[f"blocks.{i}.resid_pre"], a[f"blocks.{i}.resid_post"]
        att, mlp = a[f"blocks.{i}.attn_out"], a[f"blocks.{i}.mlp_out"]
        if table.layout == "post-LN":  # BERT / RoBERTa: LN(x + sublayer)
            blk = table.layers.replace("{l}", "")
            layer = m.base_model.get_submodule(f"{blk}.{i}" if blk else str(i))
            mid = a[f"blocks.{i}.resid_mid"]
            with torch.no_grad():
                assert torch.allclose(mid, layer.attention.output.LayerNorm(pre + att), **close)
                assert torch.allclose(post, layer.output.LayerNorm(mid + mlp), **close)
        elif case == "gpt_neox":  # parallel: both sub-layers read resid_pre
            assert torch.allclose(post, pre + att + mlp, **close)
        else:
            mid = a[f"blocks.{i}.resid_mid"]
            assert torch.allclose(mid, pre + att, **close)
            assert torch.allclose(post, mid + mlp, **close)
    if "ln_final" in table.sites:
        head = m.get_output_embeddings()
        with torch.no_grad():
            x = a["ln_final"]
            if case == "modernbert":
                x = m.head(x)
            logits = head(x)
            cap = getattr(m.config, "final_logit_softcapping", None)
            if cap:
                logits = torch.tanh(logits / cap) * cap
        assert torch.allclose(logits, out.logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("case", CASES)
def test_norm_only_sites_obey_the_norm_gradient_constraint(hub, case):
    lm = _load(case)
    sites = available_sites(lm.model)
    inp, labels = _batch(lm)
    cap = capture_batch(lm, sites, inp, labels)
    infos = [site_info(lm.model, s) for s in sites]
    only = [i for i in infos if i.norm_only]
    assert only, "every family has a site whose gradient passes through a norm only"
    table = family_table(lm.model)
    checked = 0
    for info in infos:
        g = cap.grads[info.site][cap.rows].double()
        gn = g.norm(dim=1).clamp_min(1e-30)
        row_sum = (g.sum(dim=1).abs() / (gn * g.shape[1] ** 0.5)).max().item()
        if info.norm_only and info.before_norm == "LayerNorm":
            assert row_sum < 1e-4, info.site  # LayerNorm's Jacobian removes the mean direction
            checked += 1
        elif info.norm_input and info.before_norm == "RMSNorm":  # RMSNorm of the site itself
            h = cap.acts[info.site][cap.rows].double()
            cos = ((g * h).sum(dim=1).abs() / (gn * h.norm(dim=1))).max().item()
            assert cos < 1e-4, info.site
            checked += 1
        elif table.norm == "LayerNorm" and not info.norm_only:
            assert row_sum > 1e-3, info.site  # the check above can fail: here it does
    assert checked >= 1


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("revision,stored", [("step2", "float16"), ("step3", "bfloat16")])
def test_half_precision_checkpoints_give_float32_statistics(hub, case, revision, stored):
    lm = _load(case, revision)
    assert lm.stored_dtype == stored and lm.dtype == "float32"
    assert next(lm.model.parameters()).dtype == torch.float32
    sites = ["blocks.0.resid_pre", "blocks.1.resid_post"]
    inp, labels = _batch(lm)
    cap = capture_batch(lm, sites, inp, labels)
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in cap.grads.values())
    # The same checkpoint run in bfloat16: its statistics are cast back to float32.
    low = _load(case, revision, dtype="bfloat16")
    assert low.dtype == "bfloat16" and next(low.model.parameters()).dtype == torch.bfloat16
    cap16 = capture_batch(low, sites, inp, labels)
    for s in sites:
        g = to_stat(cap16.grads[s])
        assert g.dtype == torch.float32
        ref = cap.grads[s]
        assert (g - ref).norm() < 0.1 * ref.norm(), s


def test_aliases_and_family_specific_sites(hub):
    gpt2 = _load("gpt2").model
    assert normalize_site(gpt2, "blocks.1.hook_resid_post") == "blocks.1.resid_post"
    assert normalize_site(gpt2, "blocks.-1.hook_resid_mid") == "blocks.1.resid_mid"
    assert normalize_site(gpt2, "ln_final.hook_normalized") == "ln_final"
    assert "pre-LN" in site_semantics(gpt2, "blocks.0.resid_post")
    assert site_info(gpt2, "ln_final").after_norm == "LayerNorm"
    assert site_info(gpt2, "blocks.1.resid_post").norm_input  # read by ln_f only
    assert not site_info(gpt2, "blocks.0.resid_post").norm_input
    assert site_info(gpt2, "blocks.0.resid_post").norm_only  # pre-LN: only norms read the stream
    pythia = _load("gpt_neox").model
    with pytest.raises(UnknownNameError, match="no resid_mid"):
        normalize_site(pythia, "blocks.0.resid_mid")
    assert site_info(pythia, "blocks.1.attn_out").before_norm == "LayerNorm"
    seq = _load("gpt_neox_seq").model
    assert normalize_site(seq, "blocks.0.resid_mid") == "blocks.0.resid_mid"
    bert = _load("bert").model
    with pytest.raises(UnknownNameError, match="ln_final"):
        normalize_site(bert, "ln_final")
    info = site_info(bert, "blocks.0.attn_out")
    assert info.before_norm == "LayerNorm" and info.norm_only and info.to_dict()["layout"] == "post-LN"
    assert not site_info(bert, "blocks.0.resid_pre").norm_only
    assert site_info(bert, "blocks.0.resid_pre").after_norm == "LayerNorm"
    mb = _load("modernbert").model
    assert site_info(mb, "blocks.0.resid_pre").before_norm is None  # block 0: Identity attn_norm
    assert site_info(mb, "blocks.1.resid_pre").before_norm == "LayerNorm"
    olmo2 = _load("olmo2").model
    assert site_info(olmo2, "blocks.0.resid_pre").before_norm is None
    assert site_info(_load("llama").model, "blocks.0.resid_mid").before_norm == "RMSNorm"
    assert site_info(_load("gemma2").model, "blocks.0.attn_out").after_norm == "RMSNorm"
    for bad in ["blocks.2.resid_post", "blocks.0.hook_nope", "hook_embed", "unembed"]:
        with pytest.raises(UnknownNameError):
            normalize_site(gpt2, bad)


@pytest.mark.parametrize("case", ["gpt2", "llama", "gemma2", "olmo2", "modernbert", "phi3"])
def test_resid_mid_edit_reaches_the_skip_path(hub, case):
    """An edit at resid_mid must act on both the MLP branch and the skip: the loss change for a
    small shift matches the captured gradient (first order, float64)."""
    lm = _load(case)
    lm.model.double()
    inp, labels = _batch(lm)
    site = "blocks.0.resid_mid"
    cap = capture_batch(lm, [site], inp, labels)
    v = torch.randn(cap.acts[site].shape[-1], generator=torch.Generator().manual_seed(3),
                    dtype=torch.float64)
    eps = 1e-3

    def loss(sign):
        c = capture_batch(lm, [site], inp, labels, grads=False,
                          edit={site: lambda h: h + sign * eps * v})
        return c.loss_sum

    fd = (loss(1) - loss(-1)) / (2 * eps)
    lin = float((cap.grads[site] * v).sum())
    assert abs(fd - lin) < 2e-3 * abs(lin) + 1e-7


def test_family_without_a_site_table_is_a_typed_error(hub):
    lm = _load("opt", "main")
    assert lm.family == "opt"
    with pytest.raises(UnknownNameError) as err:
        normalize_site(lm.model, "blocks.0.resid_post")
    msg = str(err.value)
    assert "'opt'" in msg and "gpt_neox" in msg and "modernbert" in msg and "\n" not in msg
    with pytest.raises(UnknownNameError):
        capture_batch(lm, ["embed"], *_batch(lm))
