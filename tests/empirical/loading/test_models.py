import pytest
import torch

from tangentlab.empirical.loading.models import build_model, load_model
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


def test_forward_dtype_control_and_records(tmp_path):
    from tangentlab.empirical.loading.models import load_like, resolve_dtype, stat_dtype, to_stat
    from tangentlab.errors import ConfigError

    m = build_model("decoder", vocab_size=300, d_model=16, n_layers=1, n_heads=2, seq_len=8, seed=1)
    m.half().save_pretrained(tmp_path / "a")  # a float16 checkpoint
    build_model("decoder", vocab_size=300, d_model=16, n_layers=1, n_heads=2, seq_len=8,
                seed=2).save_pretrained(tmp_path / "b")
    lm = load_model(tmp_path / "a")
    assert lm.dtype == "float32" and lm.stored_dtype == "float16"  # default: float32 forward
    assert all(p.dtype == torch.float32 for p in lm.model.parameters())
    low = load_model(tmp_path / "a", dtype="bf16")
    assert low.dtype == "bfloat16" and next(low.model.parameters()).dtype == torch.bfloat16
    again = load_like(low, tmp_path / "b")  # the trajectory keeps the forward dtype
    assert again.dtype == "bfloat16" and next(again.model.parameters()).dtype == torch.bfloat16
    assert again.stored_dtype == "float32"
    assert resolve_dtype(None) == torch.float32 and resolve_dtype("float16") == torch.float16
    assert stat_dtype(torch.bfloat16) == torch.float32 and stat_dtype(torch.float64) == torch.float64
    assert to_stat(torch.ones(2, dtype=torch.float16)).dtype == torch.float32
    for bad in ["float64", "int8", "fp8"]:
        with pytest.raises(ConfigError, match="float32, bfloat16, float16"):
            load_model(tmp_path / "a", dtype=bad)


def test_a_dtype_the_device_cannot_run_is_a_typed_error():
    from tangentlab.empirical.loading.models import check_dtype_runs
    from tangentlab.errors import DTypeError

    check_dtype_runs("cpu", torch.bfloat16)  # runs here
    with pytest.raises(DTypeError) as err:  # CPU kernels lack float8 LayerNorm: a real failure
        check_dtype_runs("cpu", torch.float8_e4m3fn)
    msg = str(err.value)
    assert "cannot run dtype float8_e4m3fn" in msg and "float32" in msg and "\n" not in msg


def test_load_like_refuses_another_model_and_a_checkpoint_missing_a_weight(tmp_path):
    from safetensors.torch import load_file, save_file

    from tangentlab.empirical.loading.models import load_like

    kw = dict(vocab_size=300, n_layers=1, n_heads=2, seq_len=8)
    build_model("decoder", d_model=16, seed=1, **kw).save_pretrained(tmp_path / "a")
    build_model("decoder", d_model=32, seed=2, **kw).save_pretrained(tmp_path / "wide")
    build_model("encoder", d_model=16, seed=3, **kw).save_pretrained(tmp_path / "enc")
    first = load_model(tmp_path / "a")
    with pytest.raises(CheckpointError, match="does not match the trajectory's model.*shape"):
        load_like(first, tmp_path / "wide")
    with pytest.raises(CheckpointError, match="cannot mix models"):
        load_like(first, tmp_path / "enc")
    # a weight missing from the file: transformers would initialise it at random; we refuse
    f = tmp_path / "a" / "model.safetensors"
    sd = load_file(str(f))
    del sd["transformer.ln_f.weight"]
    save_file(sd, str(f), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="lacks 1 weight.*transformer.ln_f.weight") as err:
        load_like(first, tmp_path / "a")
    assert "\n" not in str(err.value)


def test_the_loaded_model_carries_its_tokenizer(tmp_path):
    """Issue 32: `LoadedModel` had no tokenizer; it loads the one saved beside the weights."""
    from tangentlab.empirical.loading.tokenizer import train_tokenizer

    docs = ["the river runs to the sea and the valley holds the light"] * 20
    tok = train_tokenizer(docs, vocab_size=300)
    build_model("decoder", vocab_size=300, d_model=16, n_layers=1, n_heads=2, seq_len=8,
                seed=1).save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    lm = load_model(tmp_path / "m")
    assert lm.tokenizer("the river")["input_ids"] == tok("the river")["input_ids"]
    assert lm.tokenizer is lm.tokenizer  # loaded once
    build_model("decoder", vocab_size=300, d_model=16, n_layers=1, n_heads=2, seq_len=8,
                seed=1).save_pretrained(tmp_path / "bare")
    with pytest.raises(CheckpointError, match="tokenizer"):
        _ = load_model(tmp_path / "bare").tokenizer


def test_measure_trajectory_takes_dtype_like_load_model(tmp_path):
    """Issue 32: `measure_trajectory(dtype=)` raised TypeError; it is the config's dtype."""
    from tangentlab.empirical.measurement.protocol import measure_trajectory
    from tangentlab.errors import ConfigError

    build_model("decoder", vocab_size=300, d_model=16, n_layers=1, n_heads=2, seq_len=8,
                seed=1).save_pretrained(tmp_path / "m")
    with pytest.raises(ConfigError, match="disagree"):
        measure_trajectory(tmp_path / "m", tmp_path / "out", dtype="bfloat16",
                           overrides={"dtype": "float16"})
    with pytest.raises(ConfigError, match="dtype"):  # reaches the config's own check
        measure_trajectory(tmp_path / "m", tmp_path / "out", dtype=torch.float64)
    assert not (tmp_path / "out").exists()
