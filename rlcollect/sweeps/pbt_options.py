"""The options of population-based training in a batched sweep (``hydra.launcher.pbt``,
docs/sweeps.md), checked where the launcher is built: a bad one is a ConfigError, which the
command says in one line (exit 2) before any job starts. No torch here: the check answers
before torch loads."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from rlcollect.errors import ConfigError
from rlcollect.validation import Range, check_positive_int

PREFIX = "hydra.launcher.pbt"
DEFAULTS = {"every_frames": None, "quantile": 0.25, "perturb": [0.8, 1.2]}  # the launcher's config node's
QUANTILE = Range.parse("(0, 0.5]")


@dataclass(frozen=True)
class PBTOptions:
    """``every_frames``: a member's frames between two exploit/explore steps (None: PBT
    off); ``quantile``: the share of the members replaced at each step (the bottom), and
    the share they are drawn from (the top); ``perturb``: the factors each copied setting is
    multiplied by, one drawn per setting."""

    every_frames: int | None = None
    quantile: float = 0.25
    perturb: tuple[float, ...] = (0.8, 1.2)

    @property
    def on(self) -> bool:
        return self.every_frames is not None


def pbt_options(node: Any) -> PBTOptions:
    """The launcher's ``pbt`` node (a dict or DictConfig; None: every option's default) as
    PBTOptions; a ConfigError naming the first bad option: ``every_frames`` neither null nor
    a positive int, ``quantile`` outside (0, 0.5], ``perturb`` not a non-empty list of
    positive numbers."""
    if node is None:
        node = {}
    if isinstance(node, (DictConfig, ListConfig)):
        node = OmegaConf.to_container(node, resolve=True)
    if not isinstance(node, dict):
        raise ConfigError(f"{PREFIX} must be a mapping of every_frames, quantile and perturb, got {node!r}")
    unknown = sorted(set(node) - set(DEFAULTS))
    if unknown:
        raise ConfigError(f"{PREFIX} has no option {unknown[0]!r} (its options: {', '.join(DEFAULTS)})")
    options = {**DEFAULTS, **node}
    every_frames = check_positive_int(f"{PREFIX}.every_frames", options["every_frames"], optional=True)
    quantile = options["quantile"]
    if isinstance(quantile, bool) or not isinstance(quantile, (int, float)) or quantile not in QUANTILE:
        raise ConfigError(f"{PREFIX}.quantile must be a number {QUANTILE}, got {quantile!r}")
    perturb = options["perturb"]
    factors = list(perturb) if isinstance(perturb, (list, tuple)) else None
    if not factors or not all(not isinstance(factor, bool) and isinstance(factor, (int, float))
                              and math.isfinite(factor) and factor > 0 for factor in factors):
        shown = factors if factors is not None else perturb
        raise ConfigError(f"{PREFIX}.perturb must be a list of positive numbers (the factors a copied setting is "
                          f"multiplied by), got {shown!r}")
    return PBTOptions(every_frames, float(quantile), tuple(float(factor) for factor in factors))


def check_processes(options: PBTOptions, processes: int) -> None:
    """A ConfigError where population-based training is on and the members would train in
    ``processes`` > 1 processes (members in other processes cannot exchange weights)."""
    if options.on and processes > 1:
        raise ConfigError(f"{PREFIX}.every_frames with hydra.launcher.processes={processes}: population-based "
                          "training copies weights between members, and members in other processes cannot exchange "
                          "them (use hydra.launcher.processes=1)")
