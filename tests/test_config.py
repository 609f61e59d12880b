"""tangentlab.config: TOML + overrides into frozen dataclasses, with typed errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal

import pytest

from tangentlab.config import (
    config_from_mapping,
    config_hash,
    config_to_dict,
    load_config,
    parse_overrides,
)
from tangentlab.errors import ConfigError


@dataclass(frozen=True)
class Inner:
    lr: float = 1e-3
    name: Literal["adamw", "muon"] = "adamw"


@dataclass(frozen=True)
class Outer:
    rank: int = 8
    spreads: tuple[float, ...] = (0.1, 0.2)
    quick: bool = False
    label: str | None = None
    inner: Inner = field(default_factory=Inner)


def test_defaults_and_string_overrides_are_coerced():
    cfg = load_config(Outer, overrides=parse_overrides(
        ["rank=4", "spreads=0.05, 0.1,0.3", "quick=yes", "inner.lr=0.5", "inner.name=muon"]
    ))
    assert cfg == Outer(rank=4, spreads=(0.05, 0.1, 0.3), quick=True,
                        inner=Inner(lr=0.5, name="muon"))


def test_toml_then_overrides(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('rank = 3\nlabel = "x"\n[inner]\nlr = 0.25\n')
    cfg = load_config(Outer, path, {"rank": "5"})
    assert (cfg.rank, cfg.label, cfg.inner.lr, cfg.inner.name) == (5, "x", 0.25, "adamw")


def test_base_instance_is_the_starting_point():
    base = Outer(rank=2, quick=True)
    assert load_config(Outer, base=base, overrides={"label": "q"}) == Outer(rank=2, quick=True, label="q")


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"rank": "eight"}, "must be an integer"),
        ({"rank": "1.5"}, "must be an integer"),
        ({"inner.lr": "fast"}, "must be a number"),
        ({"quick": "perhaps"}, "true or false"),
        ({"inner.name": "sgd"}, "must be one of"),
        ({"nope": "1"}, "unknown config key"),
        ({"inner.nope": "1"}, "unknown inner key"),
    ],
)
def test_bad_values_raise_config_error_naming_the_key(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment):
        load_config(Outer, overrides=overrides)


def test_malformed_override_and_missing_or_bad_file(tmp_path):
    with pytest.raises(ConfigError, match="key=value"):
        parse_overrides(["rank"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(Outer, tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("rank = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(Outer, bad)


def test_roundtrip_and_hash_are_stable():
    cfg = Outer(rank=3, spreads=(0.5,))
    again = config_from_mapping(Outer, config_to_dict(cfg))
    assert again == cfg
    assert config_hash(cfg) == config_hash(again)
    assert config_hash(cfg) != config_hash(Outer(rank=4, spreads=(0.5,)))


# ---------------------------------------------------------------- declared constraints


def test_declared_bounds_are_checked_with_key_bound_and_value():
    import dataclasses

    from tangentlab.config import Config, option

    @dataclasses.dataclass(frozen=True)
    class Cfg(Config):
        rank: int = option(8, ge=1, integer=True)
        names: tuple[str, ...] = option(("a",), choices=("a", "b"), unique=True, min_len=1)
        lr: float = option(0.1, gt=0, lt=1)

        def relations(self):
            return [(self.rank <= 10 or self.lr < 0.5, "rank > 10 needs lr < 0.5")]

    assert Cfg().rank == 8
    cases = [
        ({"rank": 0}, "config key 'rank' must be a whole number >= 1; got 0"),
        ({"rank": 2.5}, "'rank' must be a whole number >= 1; got 2.5"),
        ({"names": ("a", "a")}, "'names' must not list an item twice"),
        ({"names": ("c",)}, "'names' has item 'c', which must be one of 'a', 'b'"),
        ({"names": ()}, "'names' needs at least 1 item"),
        ({"lr": 1.0}, "'lr' must be > 0 and < 1; got 1.0"),
        ({"rank": 11, "lr": 0.7}, "rank > 10 needs lr < 0.5"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ConfigError) as info:
            Cfg(**kwargs)
        assert message in str(info.value), (kwargs, str(info.value))
    # loading from strings goes through the same check
    with pytest.raises(ConfigError, match="'rank' must be a whole number >= 1; got -3"):
        load_config(Cfg, overrides={"rank": "-3"})


def test_every_config_class_declares_its_bounds():
    """The configs of reproduce, training, measurement and every synthetic experiment all use the
    one mechanism (Config + declared bounds), not ad-hoc checks."""
    import dataclasses

    from tangentlab.config import Config
    from tangentlab.pipeline.reproduce import ReproduceConfig
    from tangentlab.synthetic.experiments import get, names

    classes = [ReproduceConfig] + [get(n).config_cls for n in names()]
    for cls in classes:
        assert issubclass(cls, Config), cls
        assert any("bound" in f.metadata for f in dataclasses.fields(cls)), cls


def test_renamed_keys_still_work_with_a_deprecation_warning(tmp_path):
    """``renamed_keys``: an old key's value goes to the new key, with a DeprecatedKeyWarning."""
    import warnings
    from dataclasses import dataclass
    from types import MappingProxyType

    from tangentlab.config import Config, DeprecatedKeyWarning, load_config

    @dataclass(frozen=True)
    class C(Config):
        eval_text: str = ""
        renamed_keys: ClassVar[object] = MappingProxyType({"corpus": "eval_text"})

    with pytest.warns(DeprecatedKeyWarning, match="'corpus' is deprecated; use 'eval_text'"):
        assert load_config(C, overrides={"corpus": "bible"}).eval_text == "bible"
    toml = tmp_path / "c.toml"
    toml.write_text('corpus = "bible"\n')
    with pytest.warns(DeprecatedKeyWarning):
        assert load_config(C, toml).eval_text == "bible"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecatedKeyWarning)
        # an override beats a file's old key; both names in one layer is an error
        assert load_config(C, toml, {"eval_text": "wikipedia"}).eval_text == "wikipedia"
        with pytest.raises(ConfigError, match="give only 'eval_text'"):
            load_config(C, overrides={"corpus": "a", "eval_text": "b"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_config(C, overrides={"eval_text": "x"}).eval_text == "x"  # no warning
    assert "renamed_keys" not in {f.name for f in __import__("dataclasses").fields(C)}
