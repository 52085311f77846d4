"""The `rlcollect` command: `train`, `compare`, `eval`, `export` (rlcollect/commands/)."""
from __future__ import annotations

import signal
import sys

USAGE = """usage: rlcollect <command> [args]

commands:
  train [overrides]   train with the Hydra config tree (conf/train.yaml); e.g.
                        rlcollect train collector.frames_per_batch=512 seed=1
                        rlcollect train --multirun seed=0,1,2
                        rlcollect train resume=outputs/<date>/<time>   (continue a run)
                      `rlcollect train --help` lists the config groups and options.
  compare PATH...     compare run folders, sweeps or folders of runs (seeds pooled); e.g.
                        rlcollect compare multirun/2026-01-01/12-00-00 --plot curves.png
  eval RUN...         evaluate a trained run's policy again; e.g.
                        rlcollect eval outputs/<date>/<time> --episodes 20 --video
  export RUN          the run's policy as a standalone TorchScript or ONNX file; e.g.
                        rlcollect export outputs/<date>/<time> --format onnx
`rlcollect <command> --help` tells more.
"""

COMMANDS = {
    "train": ("rlcollect.commands.train", "run_train"),
    "compare": ("rlcollect.commands.compare", "compare"),
    "eval": ("rlcollect.commands.evaluate", "evaluate"),
    "export": ("rlcollect.commands.export", "export"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"rlcollect: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        return run_command(command, rest)
    except KeyboardInterrupt:  # Ctrl-C while the command loads (its imports take seconds): one line, no traceback
        print(f"rlcollect {command}: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


def run_command(command: str, args: list[str]) -> int:
    """The command's function (imported only now: `rlcollect --help` loads nothing) on ``args``."""
    from importlib import import_module

    module, function = COMMANDS[command]
    return getattr(import_module(module), function)(args)


if __name__ == "__main__":
    sys.exit(main())
