"""Fault drill: train with collectors whose workers are killed (SIGKILL) at random moments
and whose envs raise now and then, and check that the run heals and leaves nothing behind.

    .venv/bin/python scripts/fault_drill.py [--kills 5] [--frames 65536] [--error-rate 2e-5]
                                            [--collectors multisync multiasync action_server alternating ray]

For each collector, `rlcollect train` runs PPO (or `--algo dqn`: a replay buffer the workers
of multisync and multiasync write into, shared) on CartPole (logger=none, spawn workers) with
collector.max_worker_restarts = kills + 10 and collector.restart_on_env_error=true, its envs
wrapped in rlcollect.testing.FlakyWrapper(error_rate) in the workers (not in the trainer, whose
evaluation envs nothing replaces); once training has started, a killer
sends SIGKILL to a random worker process `--kills` times, `--interval` (0.5-2 s) apart (seeded). Reported
per collector: kills sent, restarts the run logged (worker_restart rows of metrics.jsonl),
batches completed, frames lost (the restarts' frames_lost), hangs (the run did not end
within --timeout), orphans (worker processes alive after the run), /dev/shm leftovers (new
entries) and the run's status (summary.json; "refused" when the config is refused).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# `rlcollect <args>` whose envs fail at the given rate in the workers, never in the trainer
# itself (its evaluation envs have nothing to replace them: the drill is about workers)
LAUNCH = """import os, runpy, sys
error_rate = sys.argv.pop(1)
wrapper = "{_target_: rlcollect.testing.FlakyWrapper, error_rate: %s, spare_pid: %d}" % (error_rate, os.getpid())
sys.argv = ["rlcollect", *sys.argv[1:], "env.wrappers=[" + wrapper + "]"]
runpy.run_module("rlcollect.cli", run_name="__main__")
"""
COLLECTORS = ("multisync", "multiasync", "action_server", "alternating", "ray")


def children(pid: int) -> set[int]:
    found = set()
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            found |= {int(child) for child in (task / "children").read_text().split()}
    except OSError:
        pass
    return found


def descendants(pid: int) -> set[int]:
    found, frontier = set(), [pid]
    while frontier:
        for child in children(frontier.pop()):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def workers_of(pid: int) -> list[int]:
    """The trainer's worker processes: spawned ones (their command line runs spawn_main)
    and Ray collector actors (titled ray::CollectorActor, under the Ray the run started)."""
    found = []
    for child in descendants(pid):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command or command.startswith(b"ray::CollectorActor"):
            found.append(child)
    return sorted(found)


def drill(collector: str, args, run_dir: Path, rng: random.Random) -> dict:
    command = [sys.executable, "-c", LAUNCH, str(args.error_rate), "train", f"algo={args.algo}",
               f"collector={collector}", "logger=none",
               "progress=false", f"total_frames={args.frames}", "env.solved_return=1000000000",
               "eval.every_frames=1000000000", "checkpoint_every_frames=1000000000",
               f"collector.max_worker_restarts={args.kills + 10}", "collector.restart_on_env_error=true",
               f"hydra.run.dir={run_dir}"]
    shm_before = set(os.listdir("/dev/shm"))
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen: set[int] = set()
    kills, hang = 0, False
    deadline = time.monotonic() + args.timeout
    metrics = run_dir / "metrics.jsonl"
    while process.poll() is None and not (metrics.exists() and metrics.stat().st_size):
        seen |= set(workers_of(process.pid))
        time.sleep(0.05)
    while process.poll() is None and kills < args.kills and time.monotonic() < deadline:
        time.sleep(rng.uniform(*args.interval))
        workers = workers_of(process.pid)
        seen |= set(workers)
        if workers and process.poll() is None:
            os.kill(rng.choice(workers), signal.SIGKILL)
            kills += 1
    while process.poll() is None:
        seen |= set(workers_of(process.pid))
        if time.monotonic() > deadline:
            hang = True
            for pid in descendants(process.pid) | {process.pid}:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            break
        time.sleep(0.1)
    _, stderr = process.communicate()
    time.sleep(1.0)  # let the kernel finish tearing down what the run stopped
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
    restarts = [row for row in rows if row.get("event") == "worker_restart"]
    summary_file = run_dir / "summary.json"
    if summary_file.exists():
        summary = json.loads(summary_file.read_text())
        status = summary["status"] + (f": {summary['error'][:90]}" if summary.get("error") else "")
    else:  # refused before the run started
        lines = [line.strip() for line in stderr.strip().splitlines() if line and "HYDRA_FULL_ERROR" not in line]
        reason = next((line for line in lines if "Key '" in line or "rlcollect train:" in line), (lines or ["?"])[-1])
        status = f"exit {process.returncode}: {reason[:100]}"
    return {
        "collector": collector, "kills": kills, "restarts": len(restarts),
        "env errors": sum("FlakyWrapper" in row["cause"] for row in restarts),
        "batches": sum("event" not in row for row in rows),
        "frames lost": sum(row["frames_lost"] for row in restarts),
        "hangs": int(hang), "orphans": sum(Path(f"/proc/{pid}").exists() for pid in seen),
        "shm leftovers": len(set(os.listdir("/dev/shm")) - shm_before), "status": status,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--collectors", nargs="+", default=list(COLLECTORS), choices=COLLECTORS)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--frames", type=int, default=65536)
    parser.add_argument("--error-rate", type=float, default=2e-5, help="probability that an env step raises")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds before a run counts as hung")
    parser.add_argument("--interval", type=float, nargs=2, default=(0.5, 2.0), metavar=("MIN", "MAX"),
                        help="seconds between kills, drawn uniformly (default 0.5 2.0)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--algo", choices=("ppo", "dqn"), default="ppo",
                        help="dqn: the workers of multisync/multiasync write into one shared replay buffer")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="fault-drill-") as root:
        for index, collector in enumerate(args.collectors):
            results.append(drill(collector, args, Path(root) / f"{index}-{collector}", rng))
            print(f"{collector}: done", file=sys.stderr, flush=True)
    columns = list(results[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in results:
        print("| " + " | ".join(str(row[column]) for column in columns) + " |")


if __name__ == "__main__":
    main()
