"""A few config keys given apart from a composed config (a resume's, eval's ``env.*``),
typed and checked as the schemas type and range them for a new run."""
from __future__ import annotations

from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from rlcollect.config.fields import check_ranges
from rlcollect.config.schemas import EnvConfig, TrainConfig
from rlcollect.errors import ConfigError


def typed_values(overrides: dict) -> dict:
    """``overrides`` (``{config key: value}``, keys of ``TrainConfig``'s schema: a resume's,
    eval's ``env.*``) as the schema types them, each in the range it declares: else a
    ConfigError naming the key (``total_frames=abc``, ``torch_threads=0``), as for a new
    run."""
    typed = OmegaConf.structured(TrainConfig)
    typed.env = OmegaConf.structured(EnvConfig)  # a config group's node, but env's options share one schema
    for key, value in overrides.items():
        try:
            OmegaConf.update(typed, key, value)
        except ValidationError as error:
            raise ConfigError(f"{key}={value}: {str(error).splitlines()[0]}") from None
    check_ranges(typed)
    return {key: OmegaConf.select(typed, key) for key in overrides}
