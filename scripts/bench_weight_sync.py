"""Weight-update latency: ``MultiSyncCollector.update_policy_weights_()`` per weight-sync scheme.

    .venv/bin/python scripts/bench_weight_sync.py                # 50 updates per scheme
    .venv/bin/python scripts/bench_weight_sync.py --quick        # 10 updates
    .venv/bin/python scripts/bench_weight_sync.py --updates 200 --start-method spawn --json out.json

The policy is scripts/bench_policy.py's ProbedSamplingPolicy on an MLP 4 -> 1000 -> 1000
-> 2 (tanh; 1,008,002 parameters) plus one registered buffer, ``probe``. One
MultiSyncCollector (2 workers x GymEnv("CartPole-v1"), ``--frames-per-batch`` frames per
batch) per scheme, each with its own copy of the policy, all built before the first
measurement:

    shared memory      SharedMemWeightSyncScheme()
    pipe, state_dict   MultiProcessWeightSyncScheme(strategy="state_dict")
    pipe, tensordict   MultiProcessWeightSyncScheme(strategy="tensordict")
    none               NoWeightSyncScheme(): the floor (the call's own overhead)

and, for the collectors across machines (on this one, over loopback), a RayCollector
(2 actors, RayWeightSyncScheme: one ray.put per update, every actor pulls it) and a
DistributedCollector (2 worker processes in a gloo group: the packed weights sent to each).

One update step, for each scheme in turn: change every weight in place (``add_``, not
timed) and set the buffer to the update's number, time ``update_policy_weights_()``, then
collect one batch (timed on its own: "next batch ms", which includes the workers applying
the new weights, vs "none" that does not), so the workers are idle in their normal
between-batches state when the next update comes. The batch is checked: every step's
"weights_probe" (the buffer as the worker's copy held it) must be the update's number and
("collector", "policy_version") the collector's ``policy_version`` (none: both stay 0);
"batches ok" counts the batches that were, and a failure is described below the table
(exit status 1). After ``--warmup`` untimed steps, ``--updates`` timed ones, schemes
interleaved.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from bench_policy import ProbedSamplingPolicy, build_mlp, configure_torch

ENV_ID = "CartPole-v1"
NUM_WORKERS = 2
OBS_DIM, HIDDEN, NUM_ACTIONS = 4, 1000, 2
START_METHODS = ("fork", "spawn", "forkserver")
TARGET_SHARED_MEM_MS = 5.0
POLICY_VERSION = ("collector", "policy_version")


def make_schemes() -> dict:
    from rlcollect.weight_sync import MultiProcessWeightSyncScheme, NoWeightSyncScheme, SharedMemWeightSyncScheme

    return {
        "shared memory": SharedMemWeightSyncScheme(),
        "pipe, state_dict": MultiProcessWeightSyncScheme(strategy="state_dict"),
        "pipe, tensordict": MultiProcessWeightSyncScheme(strategy="tensordict"),
        "none": NoWeightSyncScheme(),
    }


TARGETS_MS = {"shared memory": TARGET_SHARED_MEM_MS}


def env_fns() -> list:
    from rlcollect.envs import GymEnv

    return [functools.partial(GymEnv, ENV_ID, seed=worker_id) for worker_id in range(NUM_WORKERS)]


def other_collectors() -> dict:
    """The weights of the collectors across machines, on this one: a RayCollector (2 actors,
    a local Ray on loopback, one ray.put per update) and a DistributedCollector (2 worker
    processes in a gloo group on loopback, one message per worker per update)."""
    def ray(policy, frames_per_batch, start_method):
        from rlcollect.collectors.ray import RayCollector

        return RayCollector(env_fns(), policy, num_workers=NUM_WORKERS, frames_per_batch=frames_per_batch)

    def distributed(policy, frames_per_batch, start_method):
        from rlcollect.collectors.distributed import DistributedCollector

        return DistributedCollector(env_fns(), policy, num_workers=NUM_WORKERS, frames_per_batch=frames_per_batch,
                                    start_method=start_method)

    return {"ray": ray, "torch.distributed": distributed}


@dataclass
class SchemeRun:
    """One scheme's collector, its policy, and its timings."""

    name: str
    collector: object
    policy: ProbedSamplingPolicy
    batches: object  # the collector's iterator
    synced: bool  # False for "none": the workers keep the initial weights
    update_ms: list[float] = field(default_factory=list)
    next_batch_ms: list[float] = field(default_factory=list)
    checked: int = 0
    failures: list[str] = field(default_factory=list)  # batches that did not hold the expected weights

    def step(self, update: int, record: bool) -> None:
        perturb(self.policy, update)
        start = time.perf_counter()
        self.collector.update_policy_weights_()
        updated = time.perf_counter()
        batch = next(self.batches)
        collected = time.perf_counter()
        self.check(batch, update)
        if record:
            self.update_ms.append(1e3 * (updated - start))
            self.next_batch_ms.append(1e3 * (collected - updated))

    def check(self, batch, update: int) -> None:
        """Record (not raise: the latencies are still worth printing) a batch whose
        weights_probe or policy_version is not what this update should have produced."""
        expected_probe = float(update) if self.synced else 0.0
        expected_version = self.collector.policy_version
        probes = batch.get("weights_probe").unique().tolist()
        versions = batch.get(POLICY_VERSION).unique().tolist()
        self.checked += 1
        if probes != [expected_probe] or versions != [expected_version]:
            self.failures.append(f"after update {update}: weights_probe {probes} (expected [{expected_probe}]), "
                                 f"policy_version {versions} (expected [{expected_version}])")


@torch.no_grad()
def perturb(policy: ProbedSamplingPolicy, update: int) -> None:
    """A new set of weights, in place: every parameter moves, the buffer counts updates."""
    for parameter in policy.parameters():
        parameter.add_(1e-4)
    policy.probe.fill_(update)


def build_runs(frames_per_batch: int, start_method: str) -> list[SchemeRun]:
    from rlcollect.collectors.multi import MultiSyncCollector
    from rlcollect.envs import GymEnv

    runs = []
    try:
        for name, scheme in make_schemes().items():
            policy = ProbedSamplingPolicy(build_mlp(OBS_DIM, HIDDEN, NUM_ACTIONS))
            collector = MultiSyncCollector([functools.partial(GymEnv, ENV_ID, seed=worker_id)
                                            for worker_id in range(NUM_WORKERS)],
                                           policy, frames_per_batch=frames_per_batch, start_method=start_method,
                                           weight_sync_schemes={"policy": scheme})
            runs.append(SchemeRun(name, collector, policy, iter(collector), synced=name != "none"))
            next(runs[-1].batches)
        for name, make in other_collectors().items():
            policy = ProbedSamplingPolicy(build_mlp(OBS_DIM, HIDDEN, NUM_ACTIONS))
            try:
                collector = make(policy, frames_per_batch, start_method)
            except ImportError as error:  # Ray not installed
                print(f"skipping {name}: {error}", file=sys.stderr)
                continue
            runs.append(SchemeRun(name, collector, policy, iter(collector), synced=True))
            next(runs[-1].batches)
    except BaseException:
        shutdown(runs)
        raise
    return runs


def shutdown(runs: list[SchemeRun]) -> None:
    for run in runs:
        run.collector.shutdown()


def run_updates(runs: list[SchemeRun], warmup: int, updates: int) -> None:
    for update in range(1, warmup + updates + 1):
        for run in runs:
            run.step(update, record=update > warmup)
        if update % 10 == 0 or update == warmup + updates:
            print(f"  update {update}/{warmup + updates}: " + "  ".join(
                f"{run.name} {run.update_ms[-1]:.2f} ms" for run in runs if run.update_ms), file=sys.stderr, flush=True)


def format_report(runs: list[SchemeRun], args: argparse.Namespace, num_parameters: int, machine: dict) -> str:
    lines = [
        f"update_policy_weights_() latency, MultiSyncCollector {NUM_WORKERS} workers x GymEnv({ENV_ID}), "
        f"start method {args.start_method}, frames_per_batch={args.frames_per_batch}",
        f"policy: MLP {OBS_DIM} -> {HIDDEN} -> {HIDDEN} -> {NUM_ACTIONS} ({num_parameters:,} parameters) + a buffer; "
        f"{args.updates} timed updates per scheme after {args.warmup} untimed, schemes interleaved, "
        "one batch collected after each update",
        "next batch ms: the batch collected after the update (workers apply the weights at its start)",
        f"{machine['cpus']} cpus, 1-min load average {machine['load_before']:.2f} before, "
        f"{machine['load_after']:.2f} after",
        "",
        f"{'scheme':<18}{'median ms':>10}{'min ms':>9}{'max ms':>9}{'next batch ms':>15}{'batches ok':>12}  target",
        "-" * 94,
    ]
    for run in runs:
        median = statistics.median(run.update_ms)
        target = TARGETS_MS.get(run.name)
        verdict = "" if target is None else f"< {target:.1f} ms: {'met' if median < target else 'NOT met'}"
        lines.append(f"{run.name:<18}{median:>10.3f}{min(run.update_ms):>9.3f}{max(run.update_ms):>9.3f}"
                     f"{statistics.median(run.next_batch_ms):>15.2f}"
                     f"{f'{run.checked - len(run.failures)}/{run.checked}':>12}  {verdict}".rstrip())
    for run in runs:
        if run.failures:
            lines += ["", f"{run.name}: {len(run.failures)} of {run.checked} batches did not hold the weights they "
                          f"should have, e.g. {run.failures[0]}"]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=50, help="timed updates per scheme (default 50)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed updates first (default 3)")
    parser.add_argument("--frames-per-batch", type=int, default=64,
                        help=f"frames of the batch collected after each update, split over {NUM_WORKERS} workers")
    parser.add_argument("--start-method", choices=START_METHODS, default="fork")
    parser.add_argument("--quick", action="store_true", help="smoke run: 10 updates, 1 warm-up")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args(argv)
    if args.quick:
        args.updates, args.warmup = 10, 1
    if args.updates < 1 or args.warmup < 0 or args.frames_per_batch < NUM_WORKERS:
        parser.error(f"--updates must be >= 1, --warmup >= 0, --frames-per-batch >= {NUM_WORKERS}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_torch()
    machine = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    print(f"starting {len(make_schemes())} collectors ({args.start_method}) ...", file=sys.stderr, flush=True)
    runs = build_runs(args.frames_per_batch, args.start_method)
    try:
        run_updates(runs, args.warmup, args.updates)
    finally:
        shutdown(runs)
    machine["load_after"] = os.getloadavg()[0]
    num_parameters = sum(p.numel() for p in runs[0].policy.parameters())
    print(format_report(runs, args, num_parameters, machine))
    if args.json:
        args.json.write_text(json.dumps({
            "settings": {**{k: v for k, v in vars(args).items() if k != "json"}, "num_parameters": num_parameters},
            "machine": machine,
            "schemes": {run.name: {"update_ms": run.update_ms, "next_batch_ms": run.next_batch_ms,
                                   "median_update_ms": statistics.median(run.update_ms),
                                   "batches_checked": run.checked, "check_failures": run.failures} for run in runs},
        }, indent=2))
        print(f"\nraw numbers written to {args.json}")
    if any(run.failures for run in runs):
        sys.exit(1)


if __name__ == "__main__":
    main()
