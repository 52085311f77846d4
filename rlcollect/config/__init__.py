"""Structured-config schemas for `rlcollect train`, registered in Hydra's ConfigStore.

A schema declares its node's keys, their types, ranges and choices; its defaults are the
defaults of the class it builds (tests/test_config.py pins each to its constructor's), so
a library user and a CLI user start from the same algorithm. What the command line picks
otherwise, such as the CartPole-tuned settings of PPO and DQN or 4 envs per worker, is
set by the YAML options under conf/<group>/, which name their schema in their defaults
list and set only what differs from it (an experiment overlays a few values more). The
keys that are not constructor arguments are read by the pipeline itself
(rlcollect/pipeline/targets.py, ``PIPELINE_KEYS``). A misspelled key or a value of the
wrong type is rejected by Hydra before anything runs; a key added with ``+`` is rejected
by the pipeline (rlcollect/pipeline/checks.py) unless it is an argument of the node's
``_target_``.

Components are ``_target_`` nodes (docs/configuration.md, "Building components from
`_target_`"): their keys are the constructor's arguments, built with
``hydra.utils.instantiate``; ``_partial_: true`` marks the nodes the pipeline completes
with runtime arguments (env, policy, hooks, run folder, ...). Each names the module that
defines its class (not the ``rlcollect`` facade, so that building a part imports that part
alone). Point ``_target_`` at a class of your own to use it instead.

The package, one job per module: ``schemas`` (the dataclasses), ``fields`` (ranges and
choices, and the check of both; keys kept under their old names for a release, and the move
of their values to the new keys), ``registry`` (``@schema``, ``SCHEMAS``, the ConfigStore),
``resolvers`` (values derived from a config, the YAML options' resolvers) and ``values``
(keys given apart from a composed config, typed and checked). Importing it never imports
torch (a config error is told before torch loads).
"""

from rlcollect.config import schemas  # noqa: F401  (each schema registers itself as its module runs)
from rlcollect.config.fields import (
    CHOICES,
    RANGE,
    RENAMED,
    check_ranges,
    chosen,
    ranged,
    rename_keys,
    renamed,
    schema_nodes,
)
from rlcollect.config.registry import (
    HYDRA_VERSION_BASE,
    SCHEMAS,
    option_node,
    register_configs,
    schema,
    schema_name,
)
from rlcollect.config.resolvers import (
    EVALUATIONS_PER_RUN,
    OBJECTIVES,
    eval_every_frames,
    job_dirname,
    logs_to_wandb,
    objective_direction,
)
from rlcollect.config.schemas import *  # noqa: F403  (every schema)
from rlcollect.config.values import typed_values

__all__ = ["CHOICES", "EVALUATIONS_PER_RUN", "HYDRA_VERSION_BASE", "OBJECTIVES", "RANGE", "RENAMED", "SCHEMAS",
           "check_ranges", "chosen", "eval_every_frames", "job_dirname", "logs_to_wandb", "objective_direction",
           "option_node", "ranged", "register_configs", "rename_keys", "renamed", "schema", "schema_name",
           "schema_nodes", "typed_values", *schemas.__all__]
