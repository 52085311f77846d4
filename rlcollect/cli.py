"""The `rlcollect` command: `rlcollect train [hydra overrides]`."""
from __future__ import annotations

import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from rlcollect.config import register_configs

USAGE = """usage: rlcollect <command> [args]

commands:
  train [overrides]   train with the Hydra config tree (conf/train.yaml); e.g.
                        rlcollect train collector.frames_per_batch=512 seed=1
                        rlcollect train --multirun seed=0,1,2
                      `rlcollect train --help` lists the config groups and options.
"""

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def train(cfg: DictConfig) -> float | None:
    """One training job: build the pipeline from ``cfg`` and run it in the Hydra run folder."""
    from rlcollect import pipeline

    hydra_cfg = HydraConfig.get()
    run_dir = hydra_cfg.runtime.output_dir
    multirun = hydra_cfg.mode.name == "MULTIRUN"
    name = hydra_cfg.job.override_dirname or None
    group = hydra_cfg.sweep.dir.rstrip("/").split("/")[-1] if multirun else None
    try:
        built = pipeline.build(cfg, run_dir, name=name, group=group, job_type=cfg.collector.type)
    except (ValueError, TypeError) as error:
        print(f"rlcollect train: invalid configuration: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    summary = pipeline.run(built)
    print(f"run folder: {run_dir}\n"
          f"frames: {summary['frames']}  seconds: {summary['seconds']:.1f}  "
          f"final eval return: {summary['final_eval_return']}  "
          f"frames to solve: {summary['frames_to_solve']}  seconds to solve: "
          f"{'-' if summary['seconds_to_solve'] is None else format(summary['seconds_to_solve'], '.1f')}")
    return summary["final_eval_return"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "train":
        sys.argv = ["rlcollect train", *rest]
        train()
        return 0
    print(f"rlcollect: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
