"""Which runs are one setting: runs grouped by what they set, seeds pooled (:func:`group_runs`).

A group's label names only the settings that differ between the groups
(``collector=multisync, algo.lr=0.0003``); keys that change how a run is run or recorded,
never its result (:data:`NOT_RESULT_KEYS`), and the seed never separate two groups.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlcollect.logging.runs import CompareError, RunRecord

__all__ = ["DEFAULT_LABEL", "Group", "NOT_RESULT_KEYS", "SEED_KEY", "UNSET_VALUE", "changes_results", "group_runs"]

SEED_KEY = "seed"
# keys that change how a run is run or recorded, never its result: left out of group labels
# (unless --group-by names them); a key names itself and everything under it
NOT_RESULT_KEYS = ("progress", "logger", "checkpoint_every_frames", "checkpoint_every_seconds", "torch_threads",
                   "resume", "objective", "eval.video", "collector.batch_timeout", "collector.shutdown_timeout",
                   "collector.worker_cpu_affinity", "collector.worker_torch_threads", "collector.start_method")
DEFAULT_LABEL = "default"
UNSET_VALUE = "-"  # a key a run neither sets nor holds in its config


@dataclass
class Group:
    """Runs that differ only by seed (and, compared over several envs, by env).

    Attributes:
        label: the settings that differ across the compared runs, ``"k=v, k=v"``, or "default".
        settings: those settings as a mapping.
        runs: the group's runs, sorted by path.
    """

    label: str
    settings: dict[str, str]
    runs: list[RunRecord] = field(default_factory=list)


def changes_results(key: str) -> bool:
    """Whether the setting ``key`` can change a run's result (see NOT_RESULT_KEYS)."""
    return key != SEED_KEY and not any(key == other or key.startswith(other + ".") for other in NOT_RESULT_KEYS)


def group_runs(runs: Sequence[RunRecord], group_by: Sequence[str] | None = None) -> list[Group]:
    """Group ``runs`` by their settings with ``seed`` removed, in order of first appearance.

    The settings are the runs' overrides; a run without known overrides (no
    .hydra/overrides.yaml, no W&B run name) adds the config keys in which it differs from the
    others, a node whose ``_target_`` or ``name`` differs standing for its whole subtree
    (``collector=multisync``). A key one run sets and another does not takes, for the other,
    its config's value or, for a config group (``collector``), the group choice Hydra made
    (see :attr:`RunRecord.choices`). An overridden value is compared as the config holds it,
    so ``algo.lr=3e-4`` and ``algo.lr=0.0003`` are one setting. When the runs span several
    envs, the keys that only name the env (``env``, ``env.*``, ``eval.*`` that follow the
    env id) are left out: each group pools its runs over the envs (the tasks).

    The label holds only the keys whose value differs across groups, group choices first:
    ``collector=multisync, algo.lr=0.0003`` ("default" when none differs). ``group_by``
    names the keys to group by instead (all of them in the label); one that no run has is a
    CompareError.
    """
    if group_by:
        keys = list(dict.fromkeys(group_by))
        per_run = [{key: _run_value(run, key, _override_settings(run)) for key in keys} for run in runs]
        unknown = [key for key in keys if all(settings[key] == UNSET_VALUE for settings in per_run)]
        if runs and unknown:  # a misspelt key would pool every run in one group
            raise CompareError(f"--group-by {unknown[0]}: no run sets it, holds it in its config or chose it as a "
                               "config group")
        chosen_keys = keys
    else:
        per_run = _settings_of(runs)
        chosen_keys = [key for key in _label_order({key for settings in per_run for key in settings})
                       if len({settings.get(key) for settings in per_run}) > 1]
    groups: dict[tuple[str | None, ...], Group] = {}
    for run, settings in zip(runs, per_run):
        chosen = {key: settings.get(key, UNSET_VALUE) for key in chosen_keys}
        group_key = tuple(chosen.values())
        if group_key not in groups:
            label = ", ".join(f"{key}={value}" for key, value in chosen.items()) or DEFAULT_LABEL
            groups[group_key] = Group(label=label, settings=chosen)
        groups[group_key].runs.append(run)
    return list(groups.values())


def _settings_of(runs: Sequence[RunRecord]) -> list[dict[str, str]]:
    """Each run's settings (see :func:`group_runs`), without seed and, over several envs, the env keys."""
    overridden = [_override_settings(run) for run in runs]
    keys = {key for settings in overridden for key in settings}
    if any(run.overrides is None for run in runs):
        flat = [_flatten(run.config) for run in runs]
        keys |= {key for key in _collapse(flat, runs) if not any(_covers(known, key) for known in keys)}
    per_run = [{key: _run_value(run, key, settings) for key in keys} for run, settings in zip(runs, overridden)]
    tasks = [run.task for run in runs]
    if len(set(tasks)) > 1:
        for key in [key for key in keys if _names_the_task(key, per_run, tasks)]:
            for settings in per_run:
                del settings[key]
    return per_run


def _collapse(flat: list[dict[str, str]], runs: Sequence[RunRecord]) -> list[str]:
    """The flattened config keys that differ across runs, a top-level node whose
    ``_target_`` or ``name`` differs standing for all of its keys."""
    keys = sorted(key for key in {key for settings in flat for key in settings} if changes_results(key))
    differing = [key for key in keys if len({settings.get(key) for settings in flat}) > 1]
    nodes = {key.split(".", 1)[0] for key in differing if key.rsplit(".", 1)[-1] in ("_target_", "name")
             and key.count(".") == 1}
    return sorted(nodes | {key for key in differing if key.split(".", 1)[0] not in nodes})


def _covers(known: str, key: str) -> bool:
    """Whether override key ``known`` already holds config key ``key`` (the same key, or a node above or below)."""
    return key == known or key.startswith(known + ".") or known.startswith(key + ".")


def _names_the_task(key: str, per_run: list[dict[str, str]], tasks: list[str | None]) -> bool:
    """An env or eval key whose value follows the env id (one value per env id)."""
    if not (key == "env" or key.startswith(("env.", "eval."))):
        return False
    values: dict[str | None, set[str | None]] = {}
    for settings, task in zip(per_run, tasks):
        values.setdefault(task, set()).add(settings.get(key))
    return all(len(seen) == 1 for seen in values.values())


def _label_order(keys: set[str]) -> list[str]:
    """Config group choices (no dot) first, then dotted keys, each sorted."""
    return sorted(keys, key=lambda key: ("." in key, key))


def _run_value(run: RunRecord, key: str, overridden: dict[str, str]) -> str:
    """The run's value of ``key``: as overridden, else its config's value (a per-env mapping's
    entry for its env id), else its group choice (from Hydra, or the node's ``name`` /
    ``_target_`` class), else "-"."""
    if key in overridden:
        return overridden[key]
    value = _config_value(run.config, key)
    if value is not None:
        return value
    if key in run.choices:
        return run.choices[key]
    node = _config_node(run.config, key)
    if isinstance(node, dict) and run.task in node:  # a per-env setting of the presets: {env id: value}
        return _format_value(node[run.task])
    if isinstance(node, dict):
        if node.get("name") is not None:
            return _format_value(node["name"])
        if node.get("_target_"):
            return str(node["_target_"]).rsplit(".", 1)[-1]
    return UNSET_VALUE


def _override_settings(run: RunRecord) -> dict[str, str]:
    """A run's overrides as {key: value as its config holds it}, without seed; a group
    override (``collector=multisync``) keeps its value."""
    settings = {}
    for item in run.overrides or []:
        key, sep, value = item.partition("=")
        key = key.lstrip("+~")
        if changes_results(key):
            settings[key] = (_config_value(run.config, key) or value) if sep else "<deleted>"
    return settings


def _config_node(config: dict[str, Any], dotted_key: str) -> Any:
    """The config's node at ``a.b.c``, or None."""
    node: Any = config
    for part in dotted_key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _config_value(config: dict[str, Any], dotted_key: str) -> str | None:
    """The config's value at ``a.b.c``, formatted; None if absent or a mapping (a group)."""
    node = _config_node(config, dotted_key)
    return None if node is None and not _has_key(config, dotted_key) or isinstance(node, dict) else _format_value(node)


def _has_key(config: dict[str, Any], dotted_key: str) -> bool:
    """Whether ``a.b.c`` is in the config (its value may be null)."""
    parent, _, leaf = dotted_key.rpartition(".")
    node = _config_node(config, parent) if parent else config
    return isinstance(node, dict) and leaf in node


def _flatten(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """{"a": {"b": 1}} -> {"a.b": "1"} (values formatted)."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = _format_value(value)
    return flat


def _format_value(value: Any) -> str:
    """A config value as text that is the same from config.yaml and from W&B's config
    (which writes 475.0 as 475): integral floats lose their ``.0``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)
