"""A trained run's policy written as a standalone file (``rlcollect export``): the policy
rebuilt from the run's config and checkpoint (pipeline/saved.py), an example batch from
its env, then rlcollect.export."""
from __future__ import annotations

from pathlib import Path

import torch
from tensordict import TensorDictBase

from rlcollect.export import export_policy
from rlcollect.outputs import folder_made, output_path, written_whole
from rlcollect.pipeline.builders import make_env
from rlcollect.pipeline.saved import checkpoint_file, checkpoint_name, load_run_config, read_checkpoint, rebuild_policy

SUFFIXES = {"torchscript": ".pt", "onnx": ".onnx"}
EXAMPLE_ENVS = 2  # the example batch an export traces and checks with


def example_observation(cfg) -> torch.Tensor | dict[str, torch.Tensor]:
    """A batch of observations of the run's env, as its policy receives them (a dict of
    entries for a Dict / Tuple observation)."""
    env = make_env(cfg, num_envs=EXAMPLE_ENVS, seed=cfg.seed)
    try:
        observation = env.reset().get("observation")
    finally:
        env.close()
    if isinstance(observation, TensorDictBase):
        return {name: value for name, value in observation.items()}
    return observation


def export_run(run_dir: str | Path, format: str, *, out: str | Path | None = None, checkpoint: str = "last") -> Path:
    """Write the policy of ``checkpoint`` of the run in ``run_dir`` as ``format``
    ("torchscript" | "onnx") to ``out`` (default: ``<run>/policy.pt`` / ``<run>/policy.onnx``,
    ``<run>/policy_best.pt`` ... for another checkpoint, ``saved.checkpoint_name``;
    never one of a run's own records, ``outputs.output_path``; its folder is created if
    missing), atomically: a failed export leaves any earlier file as it was."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    source = checkpoint_file(run_dir, checkpoint)
    if out is None:  # the last checkpoint's is policy.<suffix>, another's policy_<its name>.<suffix>
        name = checkpoint_name(run_dir, checkpoint, source)
        out = run_dir / f"policy{'' if name == 'last' else '_' + name}{SUFFIXES.get(format, '')}"
    else:
        out = output_path("--out", out)
    policy = rebuild_policy(cfg, read_checkpoint(source), source=source)
    example = example_observation(cfg)
    with folder_made("--out", out), written_whole("--out", out) as partial:  # a refusal leaves no folder made
        partial.touch()  # a path the system will not write is an OSError here (torch's writer says it otherwise)
        export_policy(policy, partial, format, example)
    return out

