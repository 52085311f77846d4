"""A finished (or stopped) run read back: its config, its checkpoints, its policy rebuilt.

    run folder ──config.yaml──▶ env spaces, model node ──▶ the policy module
               ──checkpoint.pt (last) | best.pt (best) | a file──▶ its weights

What ``rlcollect eval`` and ``rlcollect export`` start from, and ``rlcollect.load_policy``
in Python. Anything that stops a run from being rebuilt (no config, no checkpoint, a
checkpoint that does not fit the config, an env module that no longer imports) is a
ConfigError in one line.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import torch
import yaml
from omegaconf import DictConfig, OmegaConf

from rlcollect.acting import act_deterministically
from rlcollect.checkpoint import BEST_FILE, CHECKPOINT_FILE, CheckpointError, checkpoint_exists, load_checkpoint
from rlcollect.config import typed_values
from rlcollect.errors import ConfigError
from rlcollect.pipeline.builders import make_policy, probe_spaces
from rlcollect.run_files import CONFIG_FILE, REFUSED, read_summary

CHECKPOINTS = {"last": CHECKPOINT_FILE, "best": BEST_FILE}  # --checkpoint names -> files of a run folder


def load_run_config(run_dir: str | Path, env_overrides: dict | None = None) -> DictConfig:
    """The resolved config a run folder was trained with, ``env_overrides`` (``{"env.key":
    value}``) applied, each typed and in its range as for a new run (``config.typed_values``)."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise ConfigError(f"{run_dir}: no such folder")
    if not (run_dir / CONFIG_FILE).is_file():
        summary = read_summary(run_dir)
        if summary.get("status") == REFUSED:  # a sweep job whose config was refused: it never trained
            raise ConfigError(f"{run_dir}: the job was refused ({summary.get('error')}): it never trained")
        raise ConfigError(f"{run_dir}: not a run folder (no {CONFIG_FILE})")
    try:
        cfg = OmegaConf.load(run_dir / CONFIG_FILE)
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{run_dir}: cannot read its {CONFIG_FILE} ({' '.join(str(error).split())})") from None
    for key in env_overrides or {}:
        if not key.startswith("env.") or OmegaConf.select(cfg, key, default="<missing>") == "<missing>":
            raise ConfigError(f"{key}: not an env key of the run's config (env.* keys only: "
                              f"{', '.join(f'env.{name}' for name in cfg.env)})")
    for key, value in typed_values(env_overrides or {}).items():
        OmegaConf.update(cfg, key, value)
    return cfg


def checkpoint_file(run_dir: str | Path, checkpoint: str = "last") -> Path:
    """The file ``checkpoint`` names in ``run_dir``: "last" (checkpoint.pt, the final frame),
    "best" (best.pt, the best evaluation) or a path."""
    run_dir = Path(run_dir)
    path = run_dir / CHECKPOINTS[checkpoint] if checkpoint in CHECKPOINTS else Path(checkpoint)
    if checkpoint not in CHECKPOINTS and path.is_dir():
        raise ConfigError(f"--checkpoint {path}: is a folder; name a checkpoint file (or last, best)")
    if not (checkpoint_exists(path) if checkpoint == "last" else path.is_file()):
        why = {"last": "the run wrote no complete checkpoint", "best": "the run never evaluated"}
        raise ConfigError(f"{run_dir}: no {path.name if checkpoint in CHECKPOINTS else path} "
                          f"({why.get(checkpoint, 'no such file')})")
    return path


def checkpoint_name(run_dir: Path, checkpoint: str, source: Path) -> str:
    """What ``checkpoint`` (its file ``source``) of the run in ``run_dir`` is called (an
    evaluation's row and ``eval_<name>.json``, an export's ``policy_<name>``): "last" or
    "best" for the run's own files, however named; another file in the run folder by its
    name (``checkpoint.pt.prev``); any other file (in a folder below, or outside the run,
    or itself named ``last`` or ``best``) by its name and a digest of its path
    (``best.pt@1f2e3d4c``), so that no two files share a name, nor take the run's own."""
    own = {(run_dir / file).resolve(): name for name, file in CHECKPOINTS.items()}
    resolved = source.resolve()
    if resolved in own:
        return own[resolved]
    if resolved.parent == run_dir.resolve() and resolved.name not in CHECKPOINTS:
        return resolved.name
    return f"{source.name}@{hashlib.sha1(str(resolved).encode()).hexdigest()[:8]}"


def read_checkpoint(path: Path) -> dict:
    """A checkpoint's state (the policy's weights under "policy"), or a ConfigError."""
    if torchscript_file(path):
        raise ConfigError(f"{path}: a TorchScript file (what `rlcollect export` writes), not a checkpoint: name its "
                          "run's checkpoint (last, best, or a checkpoint.pt)")
    try:
        state = load_checkpoint(path)
    except (CheckpointError, FileNotFoundError) as error:
        raise ConfigError(str(error)) from None
    if "policy" not in state:
        raise ConfigError(f"{path}: not an rlcollect checkpoint (it holds no policy)")
    return state


def torchscript_file(path: Path) -> bool:
    """Whether ``path`` is a TorchScript archive (a zip holding the module's ``code/``)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as archive:
            return any("/code/" in name for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def rebuild_policy(cfg: DictConfig, state: dict, *, device: str | torch.device = "cpu",
                   source: Path | None = None) -> torch.nn.Module:
    """The policy ``cfg`` builds, on ``device``, with the checkpoint ``state``'s weights."""
    cfg = OmegaConf.merge(cfg, {"device": str(device)})
    observation_space, action_space = probe_spaces(cfg)
    policy = make_policy(cfg, observation_space, action_space)
    try:
        policy.load_state_dict(state["policy"])
    except RuntimeError as error:
        lines = [line.strip() for line in str(error).splitlines() if line.strip()]
        detail = next((line for line in lines if line.startswith(("size mismatch", "Missing key", "Unexpected key"))),
                      lines[0])
        raise ConfigError(f"{source or 'the checkpoint'} does not fit the policy its run's {CONFIG_FILE} builds "
                          f"({detail.rstrip('.')})") from None
    return policy


def load_policy(run_or_checkpoint: str | Path, checkpoint: str = "last", *,
                device: str | torch.device = "cpu", deterministic: bool = True) -> torch.nn.Module:
    """The trained policy of a run, as the TensorDict module it trained (``policy(td)``
    writes ``"action"``).

    Args:
        run_or_checkpoint: a run folder, or a checkpoint file in one (checkpoint.pt,
            best.pt, or a copy beside the run's config.yaml).
        checkpoint: for a run folder, "last" (the final frame) or "best" (best.pt, the
            best evaluation).
        device: where the policy's weights go.
        deterministic: True (the default): the policy writes its deterministic action
            (the mode, or the greedy action) in every call, whatever interaction type its
            caller set, as the run's evaluations and ``rlcollect export`` act
            (``rlcollect.acting.act_deterministically``). False: the module as it trained,
            sampling its actions (epsilon-greedy for DQN) unless its caller sets a
            deterministic ``tensordict.nn.set_interaction_type``.

    Raises:
        ConfigError: not a run folder, no such checkpoint, or one that does not fit the
            run's config (one line each).
    """
    path = Path(run_or_checkpoint)
    if path.is_file():
        run_dir, source = path.parent, path
    else:
        run_dir, source = path, checkpoint_file(path, checkpoint)
    cfg = load_run_config(run_dir)
    policy = rebuild_policy(cfg, read_checkpoint(source), device=device, source=source)
    return act_deterministically(policy) if deterministic else policy
