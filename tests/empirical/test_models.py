import pytest
import torch

from tangentlab.empirical.models import build_model, load_model
from tangentlab.errors import CheckpointError, UnknownNameError


@pytest.mark.parametrize("arch,tie", [("encoder", True), ("decoder", True), ("decoder", False)])
def test_build_save_load_roundtrip(tmp_path, arch, tie):
    m = build_model(arch, vocab_size=300, d_model=16, n_layers=1, n_heads=2, seq_len=8,
                    tie_embeddings=tie, seed=3)
    m.save_pretrained(tmp_path)
    lm = load_model(tmp_path)
    assert lm.arch == arch and lm.head and lm.tie_embeddings == tie
    ids = torch.randint(0, 300, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(m.eval()(input_ids=ids).logits, lm.model(input_ids=ids).logits)


def test_seed_determines_init():
    kw = dict(vocab_size=300, d_model=16, n_layers=1, n_heads=2, seq_len=8)
    a, b = build_model("decoder", seed=1, **kw), build_model("decoder", seed=1, **kw)
    c = build_model("decoder", seed=2, **kw)
    pa, pb, pc = (next(x.parameters()) for x in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_missing_and_corrupt_checkpoints(tmp_path):
    with pytest.raises(CheckpointError):
        load_model(tmp_path / "nope")
    with pytest.raises(CheckpointError):
        load_model(tmp_path)  # no config.json
    m = build_model("decoder", vocab_size=300, d_model=16, n_layers=1, n_heads=2, seq_len=8)
    m.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(CheckpointError):
        load_model(tmp_path)
    with pytest.raises(UnknownNameError):
        build_model("rnn", vocab_size=300, d_model=16, n_layers=1, n_heads=2, seq_len=8)
