"""Which simulations an end-to-end run runs: its job list, and the slice ``--shard K/N`` takes.

The jobs of an :class:`~tangentlab.validate.end_to_end_config.EndToEndConfig` are its
(scenario, simulation index) pairs, in the config's scenario order and then by index: the order
every summary file lists them in, whatever order they finished in. Shard K of N takes the jobs
whose position i in that list has ``i % N == K - 1``: the N shards are disjoint, cover every job,
and each mixes the scenarios (the slow ``rd-*`` ones are spread over all shards).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tangentlab.errors import ConfigError

__all__ = ["Shard", "jobs"]

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    """Shard ``k`` of ``n`` (1 <= k <= n), written ``"K/N"``."""

    k: int
    n: int

    def __post_init__(self) -> None:
        if not (isinstance(self.k, int) and isinstance(self.n, int) and 1 <= self.k <= self.n):
            raise ConfigError(f"--shard K/N needs whole numbers with 1 <= K <= N; got "
                              f"{self.k}/{self.n}")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"K/N"`` → Shard; ConfigError naming the text for anything else."""
        m = _SHARD.fullmatch(str(text))
        if m is None:
            raise ConfigError(f"--shard takes K/N (shard K of N, 1 <= K <= N, e.g. 2/8); got "
                              f"{text!r}")
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.k}/{self.n}"

    def take(self, items: list) -> list:
        """The items at positions i with ``i % n == k - 1``, in their order."""
        return [x for i, x in enumerate(items) if i % self.n == self.k - 1]


def jobs(cfg) -> list[tuple[str, int]]:
    """Every (scenario, simulation index) of ``cfg``, in scenario order, then by index."""
    return [(name, sim) for name in cfg.scenarios for sim in range(cfg.sims)]
