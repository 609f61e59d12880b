import pytest
import torch

from tangentlab.empirical.loading.capture import capture_batch, site_hooks
from tangentlab.empirical.loading.models import LoadedModel, build_model, load_model
from tangentlab.empirical.loading.sites import available_sites, normalize_site, site_semantics
from tangentlab.errors import CaptureError, UnknownNameError


def _llama(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=300, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)
    LlamaForCausalLM(cfg).save_pretrained(tmp_path)
    return load_model(tmp_path)


def _model(tmp_path, family):
    if family == "llama":
        return _llama(tmp_path)
    arch = "encoder" if family == "bert" else "decoder"
    build_model(arch, vocab_size=300, d_model=16, n_layers=2, n_heads=2, seq_len=16,
                seed=0).save_pretrained(tmp_path)
    return load_model(tmp_path)


def _batch(lm):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(4, 300, (3, 12), generator=g)
    if lm.arch == "encoder":
        masked = torch.rand(ids.shape, generator=g) < 0.3
        labels = torch.where(masked, ids, torch.full_like(ids, -100))
        inp = torch.where(masked, torch.full_like(ids, 3), ids)
        return inp, labels, masked
    return ids, ids, None


@pytest.mark.parametrize("family", ["bert", "gpt2", "llama"])
def test_gradients_equal_autograd_of_the_same_loss(tmp_path, family):
    lm = _model(tmp_path, family)
    assert lm.family == family
    # float32 throughout: HF's own loss upcasts logits to float32, so float64 would not help.
    sites = available_sites(lm.model)
    inp, labels, masked = _batch(lm)
    cap = capture_batch(lm, sites, inp, labels, masked=masked)
    assert set(cap.acts) == set(cap.grads) == set(sites)

    # Reference: the HF model's own mean loss x number of targets, gradients via retain_grad.
    kept = {}
    def keep(site):
        def hook(_m, _i, out):
            t = out[0] if isinstance(out, tuple) else out
            t.retain_grad()
            kept[site] = t
        return hook
    from tangentlab.empirical.loading.sites import site_module
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
        if ref is None:  # embed leaf in some families: compare via the embedding weight grad path
            continue
        scale = ref.abs().max().item()
        assert scale > 0, s
        assert torch.allclose(cap.grads[s], ref, atol=1e-5 * scale, rtol=1e-4), s
        assert torch.allclose(cap.acts[s], kept[s].detach())
    assert all(p.requires_grad for p in lm.model.parameters())  # restored
    if lm.arch == "decoder":
        assert not cap.rows[:, -1].any() and cap.rows[:, :-1].all()
        last = cap.grads[f"blocks.{1}.resid_post"][:, -1]
        assert torch.count_nonzero(last) == 0  # last position: no target, no gradient
    else:
        assert torch.equal(cap.masked, masked) and cap.rows.all()


def test_site_names_and_errors(tmp_path):
    lm = _model(tmp_path, "gpt2")
    assert normalize_site(lm.model, "blocks.-1.resid_post") == "blocks.1.resid_post"
    assert "pre-LN" in site_semantics(lm.model, "blocks.0.resid_post")
    for bad in ["blocks.7.resid_post", "blocks.0.nope", "unembed"]:
        with pytest.raises(UnknownNameError):
            normalize_site(lm.model, bad)
    bert = _model(tmp_path / "b", "bert")
    with pytest.raises(UnknownNameError):
        normalize_site(bert.model, "ln_final")


def test_hook_that_fires_twice_or_loses_gradient_is_an_error(tmp_path):
    lm = _model(tmp_path, "gpt2")
    ids = torch.randint(0, 300, (2, 8))
    # Fire twice: block 1 calls block 0's module again.
    h0, h1 = lm.model.transformer.h[0], lm.model.transformer.h[1]
    h1.forward = lambda hidden_states, *a, **k: h0(hidden_states, *a, **k)
    with pytest.raises(CaptureError, match="fired 2 times"):
        capture_batch(lm, ["blocks.0.resid_post"], ids, ids)
    # Never fired: block 1 skips its MLP.
    h1.forward = lambda hidden_states, *a, **k: hidden_states
    with pytest.raises(CaptureError, match="fired 0 times"):
        capture_batch(lm, ["blocks.1.mlp_out"], ids, ids)
    del h1.forward
    capture_batch(lm, ["blocks.1.mlp_out"], ids, ids)  # restored: fires once
    # Lose the gradient: the LM head reads a detached stream.
    head = lm.model.lm_head
    horig = head.forward
    head.forward = lambda x: horig(x.detach())
    with pytest.raises(CaptureError, match="lost their gradient"):
        capture_batch(lm, ["blocks.1.resid_post"], ids, ids)
    head.forward = horig
    # One site disconnected, the other not: block 1 reads a detached input.
    orig1 = type(h1).forward.__get__(h1)
    h1.forward = lambda hidden_states, *a, **k: orig1(hidden_states.detach(), *a, **k)
    with pytest.raises(CaptureError, match="'blocks.0.resid_post' lost its gradient"):
        capture_batch(lm, ["blocks.0.resid_post", "blocks.1.resid_post"], ids, ids)


def test_wrong_shape_is_an_error(tmp_path):
    lm = _model(tmp_path, "gpt2")
    ids = torch.randint(0, 300, (2, 8))
    with pytest.raises(CaptureError, match="shape"):
        capture_batch(lm, ["embed"], ids, ids, edit={"embed": lambda h: h[:, :4]})


def test_activation_only_model_without_head(tmp_path):
    from transformers import BertConfig, BertModel

    BertModel(BertConfig(vocab_size=300, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=32)).save_pretrained(tmp_path)
    lm = load_model(tmp_path)
    assert isinstance(lm, LoadedModel) and lm.head is False and lm.arch == "encoder"
    ids = torch.randint(0, 300, (2, 8))
    cap = capture_batch(lm, ["blocks.0.resid_post"], ids, ids)
    assert cap.grads == {} and cap.acts["blocks.0.resid_post"].shape == (2, 8, 16)


def test_site_hooks_are_removed(tmp_path):
    lm = _model(tmp_path, "gpt2")
    with site_hooks(lm.model, ["embed"], make_leaf=False) as store:
        lm.model(input_ids=torch.randint(0, 300, (1, 4)))
    lm.model(input_ids=torch.randint(0, 300, (1, 4)))
    assert len(store["embed"]) == 1


def test_capture_returns_the_names_the_caller_asked_for(tmp_path):
    """An alias in, the same alias out; an edit may name its site by an alias; two names of
    one site are refused (issue 17, item 6: capture_batch renamed the keys)."""
    lm = _model(tmp_path, "gpt2")
    ids, labels, _ = _batch(lm)
    asked = ["blocks.-1.hook_resid_post", "blocks.0.resid_post", "embed"]
    cap = capture_batch(lm, asked, ids, labels)
    assert list(cap.acts) == asked and list(cap.grads) == asked
    ref = capture_batch(lm, ["blocks.1.resid_post"], ids, labels)
    assert torch.equal(cap.acts["blocks.-1.hook_resid_post"], ref.acts["blocks.1.resid_post"])
    assert torch.equal(cap.grads["blocks.-1.hook_resid_post"], ref.grads["blocks.1.resid_post"])
    # an edit keyed by an alias of the hooked site applies (before: silently ignored)
    zeroed = capture_batch(lm, ["blocks.1.resid_post"], ids, labels, grads=False,
                           edit={"blocks.-1.hook_resid_post": lambda h: torch.zeros_like(h)})
    assert torch.count_nonzero(zeroed.acts["blocks.1.resid_post"]) == 0
    with pytest.raises(CaptureError, match="not captured"):
        capture_batch(lm, ["embed"], ids, labels, edit={"blocks.0.resid_post": lambda h: h})
    with pytest.raises(CaptureError, match="requested twice.*'blocks.1.resid_post'"):
        capture_batch(lm, ["blocks.1.resid_post", "blocks.-1.resid_post"], ids, labels)
