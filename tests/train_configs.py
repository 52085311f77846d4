"""The train configs of a sweep's members, composed as ``rlcollect train`` composes them."""
from hydra import compose, initialize_config_module

from rlcollect.config import register_configs


def train_configs(*overrides_per_member, base=()) -> list:
    """One composed train config per member: the overrides ``base``, then its own."""
    register_configs()
    with initialize_config_module("rlcollect.conf", version_base="1.3"):
        return [compose("train", overrides=[*base, *overrides]) for overrides in overrides_per_member]


def composed(*overrides):
    """One train config, composed with ``overrides``."""
    [cfg] = train_configs(list(overrides))
    return cfg


def refusal(*overrides) -> str:
    """The ConfigError's line the run's checks (``check_config``) refuse the config of ``overrides`` with."""
    import pytest

    from rlcollect.errors import ConfigError
    from rlcollect.pipeline.checks import check_config

    with pytest.raises(ConfigError) as refused:
        check_config(composed(*overrides))
    return str(refused.value)
