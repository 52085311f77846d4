"""Population-based training in one batched model (``hydra.launcher.pbt.every_frames=N``,
docs/sweeps.md): Ray Tune's exploit and explore among the members of one process.

Every ``every_frames`` of a member's frames, the members still training are ranked on their
latest evaluation; each member of the bottom ``quantile`` takes the state of a member drawn
from the top ``quantile`` (its learner's ``copy_member``: parameters and the policy's
buffers, such as the observation normaliser, Adam moments and step count; PPO's reward
scaler's return statistics, DQN's target network) and that member's float settings, each
multiplied by a factor drawn from ``perturb`` and clamped into its schema's range
(``set_member_settings``). The settings explored are the float settings of the model's
kind (STACKED_OPTIONS) the members differ in at the start; an integer one (PPO's
``epochs``, DQN's ``target_update_period``) stays each member's own. The draws come from a
generator of PBT's own, seeded with the first member's seed, so a PBT sweep repeats.

Each event is a line of ``pbt.jsonl`` in the sweep folder; each member's metrics rows carry
its settings as ``pbt/algo.<key>`` and its summary.json its parents (``pbt_parents``) and
its last settings (``pbt_settings``).
"""
from __future__ import annotations

import dataclasses
import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, Sequence

from omegaconf import DictConfig, OmegaConf

from rlcollect.config.fields import RANGE
from rlcollect.errors import ConfigError
from rlcollect.logging.runs import PBT_PREFIX
from rlcollect.outputs import write_text_whole
from rlcollect.pipeline.lifecycle import Pipeline
from rlcollect.run_files import PBT_FILE
from rlcollect.sweeps.grouping import STACKED_OPTIONS, lockstep_reason, stacked_kind
from rlcollect.sweeps.pbt_options import PBTOptions
from rlcollect.validation import Range


def float_settings(cfg: DictConfig) -> list[str]:
    """The float settings the members of ``cfg``'s stacked model may differ in (its kind's
    STACKED_OPTIONS but the integer ones): what PBT may explore."""
    options, integers = STACKED_OPTIONS[stacked_kind(cfg)]
    return [key for key in options if key not in integers]


def explored_settings(cfgs: Sequence[DictConfig]) -> list[str]:
    """The float settings in which ``cfgs`` (the members of a stacked model) differ: what PBT
    explores (PPO's ``lr``, ``entropy_coef``, ...; DQN's ``lr``, ``gamma``, ``eps_end``, ...;
    never an integer setting such as ``epochs``)."""
    return [key for key in float_settings(cfgs[0]) if key in cfgs[0].algo
            and len({float(cfg.algo[key]) for cfg in cfgs}) > 1]


def lockstep_refusal(why: str) -> str:
    """PBT's refusal of members that train in lockstep because of ``why`` (``algo=...``)."""
    return ("population-based training exchanges the state of the members of one stacked model (PPO, DQN or SAC "
            f"with a shipped model), not {why} (its members train in lockstep)")


def pbt_refusal(cfgs: Sequence[DictConfig]) -> str | None:
    """Why ``cfgs`` (the members of one batched model) cannot train with PBT (None: they can)."""
    why = lockstep_reason(cfgs[0])
    if why is not None:
        return lockstep_refusal(why)
    if explored_settings(cfgs):
        return None
    floats = ", ".join(f"algo.{key}" for key in float_settings(cfgs[0]))
    return (f"the members differ in no float setting ({floats}), and population-based training explores those they "
            "differ in: sweep over one too (e.g. 'algo.lr=0.0003,0.001,0.003')")


def setting_ranges(cfg: DictConfig) -> dict[str, Range]:
    """Each setting of ``cfg.algo`` with the range its schema declares (``ranged``; a setting
    without one: any finite number)."""
    schema = OmegaConf.get_type(cfg.algo)
    declared = {field.name: field.metadata.get(RANGE) for field in dataclasses.fields(schema)} \
        if dataclasses.is_dataclass(schema) else {}
    return {key: declared.get(key) or Range() for key in cfg.algo}


def clamped(value: float, allowed: Range) -> float:
    """``value`` moved into ``allowed`` (to its nearest end; an open end: the nearest float inside)."""
    if allowed.low is not None and (value <= allowed.low if allowed.open_low else value < allowed.low):
        return math.nextafter(allowed.low, math.inf) if allowed.open_low else allowed.low
    if allowed.high is not None and (value >= allowed.high if allowed.open_high else value > allowed.high):
        return math.nextafter(allowed.high, -math.inf) if allowed.open_high else allowed.high
    return value


@dataclass
class Replacement:
    """One exploit/explore: ``member`` took ``parent``'s state and ``settings`` (keys of
    its learner's ``member_setting``); ``scores``: the two members' latest evaluations."""

    member: int
    parent: int
    settings: dict[str, float]
    member_score: float
    parent_score: float


class Members(Protocol):
    """What PBT reads and changes of a stacked model's members (MemberPPOLearner,
    MemberDQNLearner)."""

    def member_setting(self, member: int, key: str) -> float | int: ...

    def set_member_settings(self, member: int, settings: dict[str, float]) -> None: ...

    def copy_member(self, target: int, source: int) -> None: ...


def exploit_and_explore(members: Members, scores: dict[int, float], keys: Sequence[str], ranges: dict[str, Range],
                        options: PBTOptions, rng: random.Random) -> list[Replacement]:
    """One PBT step among the members ``scores`` ranks (member -> its latest evaluation; a
    non-finite one ranks last): each of the bottom ``ceil(quantile * n)`` (at most half of
    them) takes the state of a member drawn from as many at the top, and its settings
    ``keys``, each times a factor drawn from ``options.perturb``, clamped into ``ranges``.
    The members outside the bottom are not touched. Ties rank by member index."""
    def rank(member: int) -> tuple[float, int]:
        score = scores[member]
        return (score if math.isfinite(score) else -math.inf), member

    order = sorted(scores, key=rank)
    count = min(math.ceil(len(order) * options.quantile), len(order) // 2)
    if count == 0:
        return []
    bottom, top = order[:count], order[-count:]
    replacements = []
    for member in bottom:
        parent = rng.choice(top)
        settings = {key: clamped(float(members.member_setting(parent, key)) * rng.choice(options.perturb), ranges[key])
                    for key in keys}
        replacements.append(Replacement(member, parent, settings, scores[member], scores[parent]))
    for replacement in replacements:  # bottom and top do not meet: no member copied from is changed
        members.copy_member(replacement.member, replacement.parent)
        members.set_member_settings(replacement.member, replacement.settings)
    return replacements


class PopulationTraining:
    """PBT over the members of one batched sweep (``Sweep.pbt``), member m being the sweep
    job ``job_numbers[m]``; its events appended to ``sweep_dir/pbt.jsonl``."""

    def __init__(self, options: PBTOptions, cfgs: Sequence[DictConfig], job_numbers: Sequence[int],
                 sweep_dir: str | Path) -> None:
        refusal = pbt_refusal(cfgs)
        if refusal is not None:
            raise ConfigError(f"hydra.launcher.pbt: {refusal}")
        if len(job_numbers) != len(cfgs):
            raise ValueError(f"PopulationTraining: one job number per member ({len(cfgs)}), got {len(job_numbers)}")
        self.options, self.job_numbers = options, list(job_numbers)
        self.keys = explored_settings(cfgs)
        self.ranges = setting_ranges(cfgs[0])
        self.total_frames = cfgs[0].total_frames
        self.path = Path(sweep_dir) / PBT_FILE
        self.rng_seed = cfgs[0].seed
        self.rng = random.Random(cfgs[0].seed)  # PBT's own draws: which parent, which factor
        self.next_frames = options.every_frames
        self.resumed: tuple[int, list[dict[str, float]]] | None = None  # (frames, each member's settings then)

    def resume_at(self, frames: int, settings: Sequence[dict[str, float]]) -> None:
        """The population goes on from its members' checkpoints at ``frames``, member m with
        ``settings[m]`` (``algo.<key>``: what PBT had given it by then, its metrics rows'
        ``pbt/`` entries): ``start`` sets them, cuts pbt.jsonl back to its events before
        ``frames`` (a checkpoint at a step's frame holds the state before that step) and
        takes the step due at ``frames`` again. Its draws then come from a generator seeded
        with the first member's seed and ``frames``: another draw than the first part's."""
        self.resumed = (frames, [dict(member_settings) for member_settings in settings])
        self.rng = random.Random(f"{self.rng_seed}/{frames}")
        every = self.options.every_frames
        self.next_frames = -(-frames // every) * every  # the first step at or after the checkpoint

    def settings(self, members: Members, member: int) -> dict[str, float]:
        """Member ``member``'s explored settings now, as ``algo.<key>``."""
        return {f"algo.{key}": float(members.member_setting(member, key)) for key in self.keys}

    def start(self, members: Members, pipelines: Sequence[Pipeline]) -> None:
        """Every member's summary (``pipelines[m]``, member m's): no parents yet, its
        starting settings; a resumed population (``resume_at``): its parents so far, the
        settings it had at its checkpoint, and the step due there (pbt.jsonl cut back to
        its events before its checkpoint: another population of the sweep keeps all of its)."""
        if self.resumed is None:
            for member, pipeline in enumerate(pipelines):
                pipeline.progress.summary["pbt_parents"] = []
                pipeline.progress.summary["pbt_settings"] = self.settings(members, member)
            return
        frames, settings = self.resumed
        for member, (pipeline, member_settings) in enumerate(zip(pipelines, settings)):
            # what the checkpoint did not bring back (PPO's lr comes from the config; SAC's tuned alpha is loaded)
            changed = {key: value for key, value in ((key.removeprefix("algo."), value)
                                                     for key, value in member_settings.items())
                       if key in self.keys and float(members.member_setting(member, key)) != value}
            if changed:
                members.set_member_settings(member, changed)
            summary = pipeline.progress.summary  # its checkpoint's: the parents before its frame
            summary["pbt_settings"] = self.settings(members, member)
        if self.path.is_file():  # this population's events from its checkpoint on are taken again; others' stay
            ours = set(self.job_numbers)
            kept = [line for line in self.path.read_text().splitlines(keepends=True)
                    if line.strip() and (json.loads(line)["frames"] < frames or json.loads(line)["member"] not in ours)]
            write_text_whole("pbt", self.path, "".join(kept))
        if frames == self.next_frames:
            self.after_batch(members, pipelines, range(len(pipelines)), frames)

    def log_settings(self, members: Members, pipelines: Sequence[Pipeline], member: int, frames: int) -> None:
        """``pbt/algo.<key>`` in the member's metrics row at ``frames``: the settings of the
        update that brought it there."""
        settings = self.settings(members, member)
        pipelines[member].logger.log({f"{PBT_PREFIX}{key}": value for key, value in settings.items()}, step=frames)

    def after_batch(self, members: Members, pipelines: Sequence[Pipeline], active: Sequence[int],
                    frames: int) -> list[Replacement]:
        """The step due at ``frames`` (a member's frames; none at the run's last batch, after
        which nothing trains) among the members ``active`` (those still training), ranked on
        their latest evaluation (none until each of them has one)."""
        if self.next_frames is None or frames < self.next_frames or frames >= self.total_frames:
            return []
        while self.next_frames <= frames:
            self.next_frames += self.options.every_frames
        scores = {member: pipelines[member].progress.summary["final_eval_return"] for member in active}
        if any(score is None for score in scores.values()):
            return []
        replacements = exploit_and_explore(members, scores, self.keys, self.ranges, self.options, self.rng)
        with self.path.open("a") as events:
            for replacement in replacements:
                event = {"frames": frames, "member": self.job_numbers[replacement.member],
                         "parent": self.job_numbers[replacement.parent],
                         "settings": {f"algo.{key}": value for key, value in replacement.settings.items()},
                         "member_eval_return": finite_or_none(replacement.member_score),
                         "parent_eval_return": finite_or_none(replacement.parent_score)}
                events.write(json.dumps(event) + "\n")
                summary = pipelines[replacement.member].progress.summary
                summary["pbt_parents"].append({"frames": frames, "parent": self.job_numbers[replacement.parent]})
                summary["pbt_settings"] = self.settings(members, replacement.member)
        return replacements


def finite_or_none(value: float) -> float | None:
    return value if math.isfinite(value) else None
