"""Values derived from a composed config, and the resolvers the YAML options call
(``${objective_direction:...}``, ``${job_dirname:...}``)."""
from __future__ import annotations

import hashlib

from rlcollect.logging.runs import for_env_id

EVALUATIONS_PER_RUN = 20  # eval.every_frames=null: the cadence that gives a run this many evaluations


def eval_every_frames(cfg) -> int:
    """``eval.every_frames`` for the run's env id (a number, or an {env id: frames} mapping
    as the presets give), else the cadence that gives the run EVALUATIONS_PER_RUN
    evaluations."""
    return for_env_id(cfg.env.id, cfg.eval.every_frames) or max(1, cfg.total_frames // EVALUATIONS_PER_RUN)


WANDB_LOGGER = "rlcollect.logging.run_logger.WandbLogger"  # logger=wandb's _target_ (schemas.WandbLoggerConfig)


def logs_to_wandb(cfg) -> bool:
    """Whether the run's logger is rlcollect's WandbLogger with W&B on (a logger class of
    your own deriving from it is not seen here: this reads the config alone, torch-free)."""
    return cfg.logger.get("_target_") == WANDB_LOGGER and cfg.logger.get("mode") != "disabled"


# objective -> the direction a tuning sweep optimises it in (conf/hydra/sweeper/*.yaml read it
# as ${objective_direction:${objective}})
OBJECTIVES = {"final_eval_return": "maximize", "best_eval_return": "maximize", "eval_auc": "maximize",
              "frames_to_solve": "minimize"}


def objective_direction(objective: str) -> str:
    """The direction a tuning sweep optimises ``objective`` in ("maximize" for unknown ones:
    the run refuses them itself, naming the choices)."""
    return OBJECTIVES.get(objective, "maximize")


JOB_DIRNAME_BYTES = 200  # a sweep job folder's name, within the file systems' 255 bytes


def job_dirname(override_dirname: str) -> str:
    """A sweep job's folder name from its overrides (``hydra.job.override_dirname``), cut to
    JOB_DIRNAME_BYTES with a digest of the whole appended where it is longer (a tuning
    trial's sampled values run past what a file system takes); .hydra/overrides.yaml keeps
    them all."""
    encoded = override_dirname.encode()
    if len(encoded) <= JOB_DIRNAME_BYTES:
        return override_dirname
    digest = hashlib.sha1(encoded).hexdigest()[:8]
    return encoded[:JOB_DIRNAME_BYTES - 9].decode(errors="ignore") + "-" + digest
