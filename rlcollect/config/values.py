"""A few config keys given apart from a composed config (a resume's, eval's ``env.*``),
typed and checked as the schemas type and range them for a new run."""
from __future__ import annotations

from omegaconf import OmegaConf
from omegaconf.errors import ValidationError

from rlcollect.config.fields import check_ranges
from rlcollect.config.schemas import EnvConfig, TrainConfig
from rlcollect.errors import ConfigError

# the keys a resumed run may change: the rest of its config is built into its checkpoint
RESUME_OVERRIDES = ("total_frames", "checkpoint_every_frames", "checkpoint_every_seconds", "progress", "torch_threads")


def check_resume_keys(run_dir, keys) -> None:
    """The ConfigError of a resume of the run in ``run_dir`` given config ``keys`` it cannot
    change (any but ``RESUME_OVERRIDES``): whatever the key, of the run's own config or
    not, a resumed run keeps the config it was built with. Reads nothing."""
    refused = [key for key in keys if key not in RESUME_OVERRIDES]
    if refused:
        raise ConfigError(f"resume={run_dir}: {', '.join(refused)} cannot change on resume (the run's config is "
                          f"built into its checkpoint); a resumed run takes only {', '.join(RESUME_OVERRIDES)}")


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
