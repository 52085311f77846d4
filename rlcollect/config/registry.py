"""Where the schemas are registered: ``@schema(group, option)`` on a schema's dataclass puts
it in ``SCHEMAS`` (what the pipeline's checks read: each option's class, for its name in
messages) and, through ``register_configs``, in Hydra's ConfigStore.

Schemas are registered at the root of the ConfigStore as ``<group>_<option>_schema`` (not
in the groups), so ``--help`` and Hydra's "could not find" errors list only the YAML options.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from rlcollect.config.resolvers import job_dirname, objective_direction

HYDRA_VERSION_BASE = "1.3"  # the Hydra behaviour rlcollect composes its configs with (hydra.main's version_base)
# (group, option) -> schema; YAML options refer to them as /<group>_<option>_schema
SCHEMAS: dict[tuple[str, str], type] = {}
ROOT_SCHEMAS: dict[str, type] = {}  # the nodes of no group: train_schema (the root), env_schema


def schema(group: str, option: str | None = None) -> Callable[[type], type]:
    """Register the decorated schema as the node of ``group=option`` (without ``option``:
    the schema ``<group>_schema`` that conf/train.yaml or a group's YAML names itself)."""
    def register(cls: type) -> type:
        if option is None:
            ROOT_SCHEMAS[f"{group}_schema"] = cls
        else:
            SCHEMAS[(group, option)] = cls
        return cls
    return register


def schema_name(group: str, option: str) -> str:
    return f"{group}_{option}_schema"


def option_node(group: str, option: str) -> DictConfig:
    """The node ``group=option`` composes: its schema with the values its YAML option
    (conf/<group>/<option>.yaml) sets, for an option that sets only its own keys (no
    ``@package _global_``). What ``algo.prioritized=true`` builds: buffer/sampler=prioritized."""
    values = OmegaConf.load(Path(__file__).parents[1] / "conf" / group / f"{option}.yaml")
    values.pop("defaults", None)
    return OmegaConf.merge(OmegaConf.structured(SCHEMAS[(group.replace("/", "_"), option)]), values)


def register_configs() -> None:
    """Register every schema at the root of the ConfigStore (not in a group: ``--help``
    lists only the YAML options); YAML options refer to them as ``/<name>@_here_``."""
    for name, resolver in (("objective_direction", objective_direction), ("job_dirname", job_dirname)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, resolver)
    store = ConfigStore.instance()
    for name, node in ROOT_SCHEMAS.items():
        store.store(name=name, node=node)
    for (group, option), node in SCHEMAS.items():
        store.store(name=schema_name(group, option), node=node)
