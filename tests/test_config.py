"""tangentlab.config: TOML + overrides into frozen dataclasses, with typed errors."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

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
