"""Sweep-resume drill: stop a batched sweep (Ctrl-C to its process group, or SIGKILL to the
launcher) once every member has a checkpoint, then `rlcollect train resume=<sweep folder>`,
and check that every member goes on from its checkpoint to the end (docs/sweeps.md,
"Resuming a sweep").

    .venv/bin/python scripts/sweep_resume_drill.py [--stop sigint sigkill] [--seeds 4] [--processes 2]
                                                   [--frames 40960] [-- extra train overrides]

W&B runs offline unless the overrides say `logger=none`. Reported per stop: the launcher's
exit, processes of the sweep left after it, each member's checkpoint frame at the stop, the
resume's exit and wall-clock and its log lines about the models, then per member its status
and frames at the end, whether its metric steps are each there once and in order (no row
twice, none missing), and how many parts its W&B run has and with how many run ids.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ENV = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
RLCOLLECT = [sys.executable, "-m", "rlcollect.cli"]


def checkpoint_frames(member: Path) -> int:
    import torch

    return int(torch.load(member / "checkpoint.pt", weights_only=True, mmap=True)["frames"])


def members_of(sweep: Path) -> list[Path]:
    from rlcollect.run_files import sweep_runs

    return sweep_runs(sweep)


def drill(stop: str, args, folder: Path) -> dict:
    sweep = folder / f"sweep_{stop}"
    command = [*RLCOLLECT, "train", "--multirun", f"seed={','.join(map(str, range(args.seeds)))}",
               "hydra/launcher=batched", f"hydra.launcher.processes={args.processes}", f"total_frames={args.frames}",
               "env.solved_return=null", "progress=false", "checkpoint_every_seconds=1", *args.overrides,
               f"hydra.sweep.dir={sweep}"]
    launcher = subprocess.Popen(command, env=ENV, cwd=folder, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + args.timeout
    while len(glob.glob(str(sweep / "**" / "checkpoint.pt.prev"), recursive=True)) < args.seeds:
        if launcher.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the sweep ended or stalled before every member checkpointed twice:\n"
                             f"{launcher.communicate()[1][-2000:]}")
        time.sleep(0.2)
    time.sleep(args.delay)
    if stop == "sigint":
        os.killpg(launcher.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
    else:
        os.kill(launcher.pid, signal.SIGKILL)
    launcher.communicate(timeout=args.timeout)
    time.sleep(1)
    left = subprocess.run(["pgrep", "-f", f"hydra.sweep.dir={sweep}"], capture_output=True, text=True).stdout.split()
    members = members_of(sweep)
    stopped_at = [checkpoint_frames(member) for member in members]
    start = time.monotonic()
    resumed = subprocess.run([*RLCOLLECT, "train", f"resume={sweep}"], env=ENV, cwd=folder, capture_output=True,
                             text=True, timeout=args.timeout)
    seconds = time.monotonic() - start
    lines = [line.split(" - ", 1)[-1] for line in resumed.stdout.splitlines() if "sweep_resume" in line]
    report = {"stop": stop, "launcher_exit": launcher.returncode, "processes_left": len(left),
              "stopped_at": stopped_at, "resume_exit": resumed.returncode, "resume_seconds": round(seconds, 1),
              "resume_lines": lines, "members": []}
    for member in members:
        summary = json.loads((member / "summary.json").read_text())
        steps = [json.loads(line)["step"] for line in (member / "metrics.jsonl").read_text().splitlines()
                 if "event" not in json.loads(line)]
        every = steps[1] - steps[0] if len(steps) > 1 else 0
        parts = sorted((member / "wandb").glob("offline-run-*")) if (member / "wandb").is_dir() else []
        report["members"].append({
            "status": summary["status"], "frames": summary["frames"],
            "steps_once_in_order": steps == list(range(steps[0], steps[-1] + 1, every or 1)),
            "wandb_parts": len(parts), "wandb_run_ids": len({part.name.rsplit("-", 1)[-1] for part in parts})})
    if resumed.returncode != 0:
        report["resume_stderr"] = resumed.stderr[-2000:]
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stop", nargs="+", choices=("sigint", "sigkill"), default=["sigint", "sigkill"])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--frames", type=int, default=40960)
    parser.add_argument("--delay", type=float, default=1.5, help="seconds between the second checkpoint and the stop")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("overrides", nargs="*", help="train overrides for the sweep (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for stop in args.stop:
            report = drill(stop, args, Path(folder))
            members = report.pop("members")
            print(json.dumps(report), flush=True)
            for number, member in enumerate(members):
                print(f"  member {number}: {json.dumps(member)}", flush=True)


if __name__ == "__main__":
    main()
