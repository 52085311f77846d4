"""What `rlcollect train` costs besides training: its fixed cost, next to `import torch`.

A run's fixed cost is the wall-clock of a default `rlcollect train` (PPO on CartPole, the
offline W&B logger) minus the ``seconds`` its summary.json reports (the training loop's own
clock): interpreter start, imports, Hydra's composition, building the envs, policy,
collector and learner, opening the W&B run, closing it and exiting. Beside it, in the same
loop, the wall-clock of ``python -c "import torch"`` (the floor any torch program pays) and
of a config error (``algo.lr=-1``: refused before torch loads, exit 2). The fixed cost's
ratio to ``import torch`` is taken round by round (a load that comes and goes weighs on both
alike), and the CPU rows (user + system time, children included: less sensitive to other
processes than wall-clock, blind to waits and to work done in parallel) back the
wall-clock figures up.

The commands run in turn, round after round (the machine may be shared: interleaving
spreads any load over all of them), in a scratch folder; the table gives each one's median
and range over the rounds. With two ``--pythonpath`` folders (e.g. a checkout before and
after a change) each round runs both, one after the other, and the table has a column for
each::

    python scripts/bench_startup.py [--rounds 7] [--pythonpath /work/main --pythonpath .]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG_ERROR = "algo.lr=-1"  # refused by the range check, before torch loads
ROWS = ("import torch", "fixed cost of a default run", "fixed cost / import torch (each round's)",
        f"config error ({CONFIG_ERROR})", "import torch, CPU", "default run, CPU (training included)")


def timed(command: list[str], env: dict, cwd: Path, expect: int) -> tuple[float, float]:
    """The wall-clock and the CPU time (user + system, its children included) of ``command``;
    it must exit with ``expect``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != expect:
        sys.exit(f"{' '.join(command)} exited {result.returncode}, not {expect}:\n{result.stderr[-2000:]}")
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def environment(pythonpath: str | None) -> dict:
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(Path(pythonpath).resolve())
    return env


def default_run(python: str, env: dict, cwd: Path, run: str) -> tuple[float, float]:
    """A default run's fixed cost (its wall-clock minus the seconds its summary reports) and
    its CPU time (the training's included)."""
    wall, cpu = timed([python, "-m", "rlcollect.cli", "train", f"hydra.run.dir=runs/{run}", "progress=false"],
                      env, cwd, 0)
    return wall - json.loads((cwd / "runs" / run / "summary.json").read_text())["seconds"], cpu


def spread(values: list[float], unit: str) -> str:
    return f"{statistics.median(values):5.2f}{unit} [{min(values):.2f}-{max(values):.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--pythonpath", action="append", default=None,
                        help="a checkout to import rlcollect from (PYTHONPATH); give it twice to compare two")
    parser.add_argument("--python", default=sys.executable, help="the interpreter (a venv with rlcollect's deps)")
    args = parser.parse_args()
    paths = args.pythonpath or [None]
    labels = [path or "installed" for path in paths]
    rows: dict[str, dict[str, list[float]]] = {name: {label: [] for label in labels} for name in ROWS}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as scratch:
        cwd = Path(scratch)
        envs = [environment(path) for path in paths]
        for number in range(args.rounds):
            torch_wall, cpu = timed([args.python, "-c", "import torch"], envs[0], cwd, 0)
            rows["import torch"][labels[0]].append(torch_wall)
            rows["import torch, CPU"][labels[0]].append(cpu)
            for index, (label, env) in enumerate(zip(labels, envs)):
                fixed, cpu = default_run(args.python, env, cwd, f"{number}-{index}")
                rows["fixed cost of a default run"][label].append(fixed)
                rows["fixed cost / import torch (each round's)"][label].append(fixed / torch_wall)
                rows["default run, CPU (training included)"][label].append(cpu)
                refused = [args.python, "-m", "rlcollect.cli", "train", "hydra.run.dir=runs/refused", CONFIG_ERROR]
                rows[f"config error ({CONFIG_ERROR})"][label].append(timed(refused, env, cwd, 2)[0])
            print(f"round {number + 1}/{args.rounds} done", file=sys.stderr)
    width = max(len(name) for name in rows)
    print(f"median [range] over {args.rounds} rounds, interleaved; wall-clock unless CPU (user + system)")
    print(f"{'':<{width}}  " + "  ".join(f"{label:<22}" for label in labels))
    for name, columns in rows.items():
        unit = "x" if "/" in name else " s"
        print(f"{name:<{width}}  " + "  ".join(f"{spread(columns[label], unit) if columns[label] else '':<22}"
                                             for label in labels))


if __name__ == "__main__":
    main()
