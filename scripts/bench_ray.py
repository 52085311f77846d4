"""RayCollector beside MultiSyncCollector: throughput, and weight-update latency through Ray.

    .venv/bin/python scripts/bench_ray.py                   # 20,000 frames x 5 reps, 30 updates
    .venv/bin/python scripts/bench_ray.py --quick           # smoke run
    .venv/bin/python scripts/bench_ray.py --reps 9 --json out.json

Needs Ray (``pip install 'rlcollect[ray]'``). Ray is started once, on this machine and on
loopback only (rlcollect.collectors.ray.start_local_ray: 127.0.0.1, no dashboard, no usage
report), and stopped at the end; every collector joins it.

Throughput: frames per second on CartPole-v1 with scripts/bench_policy.py's policy (a 64x64
tanh MLP, obs -> 64 -> 64 -> 2 logits, + Gumbel-max categorical_sample; torch threads 1 in
every process):

    m   MultiSyncCollector, 2 workers x GymEnv("CartPole-v1", 4), start_method="fork"
    r   RayCollector(sync=True), 2 actors x Collector(GymEnv("CartPole-v1", 4))
    ra  RayCollector(sync=False), 2 actors x Collector(GymEnv("CartPole-v1", 4))

(scripts/bench_collectors.py imports ``throughput_rows`` for its rows r1 and r2.)

Each measurement builds a fresh collector with ``total_frames = frames_per_batch + frames``
and times the ``frames`` frames after the first batch (so worker and actor start-up is not
in frames/s; it is reported on its own, "build ms" and "1st batch ms"). Every row is warmed
up once, then the rows are measured in turn, ``--reps`` times (interleaved). A sync batch
of ``frames_per_batch`` frames is split over the 2 workers/actors; an async (ra) batch is
one actor's ``frames_per_batch`` frames. Ratios are of median frames/s, with the range of
the per-rep ratios.

Weight-update latency: scripts/bench_policy.py's ProbedSamplingPolicy on an MLP
4 -> 1000 -> 1000 -> 2 (1,008,002 parameters) plus one registered buffer, ``probe``; two
actors (or workers) x GymEnv("CartPole-v1"), ``--update-frames-per-batch`` frames a batch:

    ray            RayCollector, RayWeightSyncScheme(): one ray.put, every actor pulls it
    ray, none      RayCollector, NoWeightSyncScheme(): the floor of the Ray rows
    shared memory  MultiSyncCollector (fork), SharedMemWeightSyncScheme(): for reference

One step, rows interleaved: change every weight in place and set ``probe`` to the step's
number (not timed); time ``update_policy_weights_()`` ("update ms": extract, put, hand the
reference to the actors); then time the next batch ("next batch ms": for "ray" it includes
each actor pulling and applying the weights before collecting). The batch is checked:
"weights_probe" must be the step's number and ("collector", "policy_version") the
collector's policy_version (none: both stay 0); "ok" counts the batches that were.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from bench_policy import SEED, MLPSamplingPolicy, ProbedSamplingPolicy, build_mlp, configure_torch
from bench_timing import Measurement, time_collector

ENV_ID = "CartPole-v1"
NUM_WORKERS = 2  # workers (MultiSync) or actors (Ray)
ENVS_PER_WORKER = 4
UPDATE_HIDDEN = 1000
POLICY_VERSION = ("collector", "policy_version")


@dataclass
class UpdateStats:
    update_ms: list[float] = field(default_factory=list)
    next_batch_ms: list[float] = field(default_factory=list)
    ok: int = 0
    failures: list[str] = field(default_factory=list)


def env_fns(num_envs: int | None) -> list:
    from rlcollect.envs import GymEnv

    per_worker = num_envs or 1
    return [functools.partial(GymEnv, ENV_ID, num_envs, seed=SEED + per_worker * worker)
            for worker in range(NUM_WORKERS)]


def throughput_rows(frames_per_batch: int) -> dict:
    """key -> (label, total_frames -> collector)."""
    from rlcollect.collectors.multi import MultiSyncCollector
    from rlcollect.collectors.ray import RayCollector

    policy = MLPSamplingPolicy(build_mlp(4))
    envs = env_fns(ENVS_PER_WORKER)

    def multisync(total_frames):
        return MultiSyncCollector(envs, policy, frames_per_batch=frames_per_batch, total_frames=total_frames,
                                  start_method="fork")

    def ray_collector(sync, total_frames):
        return RayCollector(envs, policy, num_workers=NUM_WORKERS, frames_per_batch=frames_per_batch,
                            total_frames=total_frames, sync=sync)

    shape = f"{NUM_WORKERS} x GymEnv({ENVS_PER_WORKER})"
    return {
        "m": (f"MultiSyncCollector (fork), {shape}", multisync),
        "r": (f"RayCollector(sync=True), {shape}", functools.partial(ray_collector, True)),
        "ra": (f"RayCollector(sync=False), {shape}", functools.partial(ray_collector, False)),
    }


def run_throughput(args) -> dict[str, list[Measurement]]:
    rows = throughput_rows(args.frames_per_batch)
    warmup = args.frames_per_batch * max(2, args.frames // 4 // args.frames_per_batch)
    for _, make in rows.values():
        time_collector(make, warmup, args.frames_per_batch)
    results = {key: [] for key in rows}
    for rep in range(args.reps):
        for key, (_, make) in rows.items():
            results[key].append(time_collector(make, args.frames, args.frames_per_batch))
        print(f"  rep {rep + 1}/{args.reps} (load {os.getloadavg()[0]:.2f}): "
              + "  ".join(f"{key} {values[-1].frames_per_s:,.0f}" for key, values in results.items()),
              file=sys.stderr, flush=True)
    return {"labels": {key: label for key, (label, _) in rows.items()}, "results": results}


# ---------------------------------------------------------------------- weight updates
def update_collectors(frames_per_batch: int) -> dict:
    from rlcollect.collectors.multi import MultiSyncCollector
    from rlcollect.collectors.ray import RayCollector
    from rlcollect.weight_sync import NoWeightSyncScheme, RayWeightSyncScheme, SharedMemWeightSyncScheme

    envs = env_fns(None)
    made = {}
    for name, scheme in (("ray", RayWeightSyncScheme()), ("ray, none", NoWeightSyncScheme())):
        policy = ProbedSamplingPolicy(build_mlp(4, UPDATE_HIDDEN))
        made[name] = (policy, RayCollector(envs, policy, num_workers=NUM_WORKERS, frames_per_batch=frames_per_batch,
                                           weight_sync_schemes={"policy": scheme}))
    policy = ProbedSamplingPolicy(build_mlp(4, UPDATE_HIDDEN))
    made["shared memory"] = (policy, MultiSyncCollector(envs, policy, frames_per_batch=frames_per_batch,
                                                        start_method="fork",
                                                        weight_sync_schemes={"policy": SharedMemWeightSyncScheme()}))
    return made


def run_updates(args) -> dict[str, UpdateStats]:
    collectors = update_collectors(args.update_frames_per_batch)
    stats = {name: UpdateStats() for name in collectors}
    iterators = {name: iter(collector) for name, (_, collector) in collectors.items()}
    try:
        for step in range(1, args.warmup + args.updates + 1):
            for name, (policy, collector) in collectors.items():
                with torch.no_grad():
                    for parameter in policy.parameters():
                        parameter.add_(1e-3)
                    policy.probe.fill_(float(step))
                start = time.perf_counter()
                collector.update_policy_weights_()
                updated = time.perf_counter()
                batch = next(iterators[name])
                end = time.perf_counter()
                if step <= args.warmup:
                    continue
                record = stats[name]
                record.update_ms.append(1e3 * (updated - start))
                record.next_batch_ms.append(1e3 * (end - updated))
                expected_probe = 0.0 if name == "ray, none" else float(step)
                expected_version = collector.policy_version
                probes, versions = batch["weights_probe"].unique().tolist(), batch[POLICY_VERSION].unique().tolist()
                if probes == [expected_probe] and versions == [expected_version]:
                    record.ok += 1
                else:
                    record.failures.append(f"step {step}: probe {probes} (expected {expected_probe}), "
                                           f"version {versions} (expected {expected_version})")
    finally:
        for _, collector in collectors.values():
            collector.shutdown()
    return stats


# ---------------------------------------------------------------------- report
def format_report(throughput: dict, updates: dict[str, UpdateStats], args, machine: dict) -> str:
    parameters = sum(p.numel() for p in build_mlp(4, UPDATE_HIDDEN).parameters())
    versions = machine["versions"]
    lines = [
        f"{ENV_ID}, 64x64 tanh MLP + Gumbel-max, torch threads 1 in every process; {machine['cpus']} CPUs, "
        f"ray {versions['ray']}, torch {versions['torch']}, python {versions['python']}",
        f"{args.frames:,} frames per measurement, frames_per_batch={args.frames_per_batch}; {args.reps} interleaved "
        "reps after 1 warm-up; Ray started once on loopback (start_local_ray)",
        "",
        f"{'row':<4}{'what':<52}{'median f/s':>12}{'min f/s':>10}{'max f/s':>10}{'build ms':>10}{'1st batch ms':>14}",
        "-" * 112,
    ]
    results, labels = throughput["results"], throughput["labels"]
    for key, values in results.items():
        fps = [m.frames_per_s for m in values]
        lines.append(f"{key:<4}{labels[key]:<52}{statistics.median(fps):>12,.0f}{min(fps):>10,.0f}{max(fps):>10,.0f}"
                     f"{statistics.median(m.construct_ms for m in values):>10,.0f}"
                     f"{statistics.median(m.startup_ms for m in values):>14,.0f}")
    lines.append("")
    for numerator in ("r", "ra"):
        ratios = [n.frames_per_s / d.frames_per_s for n, d in zip(results[numerator], results["m"])]
        median = statistics.median(m.frames_per_s for m in results[numerator]) / \
            statistics.median(m.frames_per_s for m in results["m"])
        lines.append(f"({numerator})/(m) {labels[numerator].split(',')[0]} / MultiSyncCollector: {median:.2f}x "
                     f"(per-rep [{min(ratios):.2f}, {max(ratios):.2f}])")
    lines += [
        "",
        f"update_policy_weights_(): {parameters:,}-parameter MLP + 1 buffer, {NUM_WORKERS} actors/workers x "
        f"GymEnv({ENV_ID}), batches of {args.update_frames_per_batch}; {args.updates} updates after {args.warmup} "
        "warm-up, rows interleaved",
        f"{'scheme':<16}{'update ms (median)':>20}{'min':>8}{'max':>8}{'next batch ms (median)':>24}{'ok':>8}",
        "-" * 84,
    ]
    for name, record in updates.items():
        lines.append(f"{name:<16}{statistics.median(record.update_ms):>20.2f}{min(record.update_ms):>8.2f}"
                     f"{max(record.update_ms):>8.2f}{statistics.median(record.next_batch_ms):>24.2f}"
                     f"{f'{record.ok}/{len(record.update_ms)}':>8}")
    for name, record in updates.items():
        for failure in record.failures[:5]:
            lines.append(f"FAILED {name}: {failure}")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=20_000, help="frames per measurement (default 20000)")
    parser.add_argument("--frames-per-batch", type=int, default=1000, help="throughput rows (default 1000)")
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions (default 5)")
    parser.add_argument("--updates", type=int, default=30, help="timed weight updates per scheme (default 30)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed weight updates first (default 3)")
    parser.add_argument("--update-frames-per-batch", type=int, default=64, help="latency rows (default 64)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 4000 frames, batches of 200, 2 reps, 5 updates")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args(argv)
    if args.quick:
        args.frames, args.frames_per_batch, args.reps, args.updates, args.warmup = 4000, 200, 2, 5, 1
    step = NUM_WORKERS * ENVS_PER_WORKER
    if args.frames_per_batch % step or args.frames % args.frames_per_batch:
        parser.error(f"--frames must be a multiple of --frames-per-batch, itself a multiple of {step}")
    if args.update_frames_per_batch % NUM_WORKERS:
        parser.error(f"--update-frames-per-batch must be a multiple of {NUM_WORKERS}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    configure_torch()
    import ray

    from rlcollect.collectors.ray import start_local_ray

    start_local_ray(num_cpus=3 * NUM_WORKERS)  # the latency rows keep 2 x 2 actors alive together
    machine = {"cpus": os.cpu_count(), "versions": {"ray": ray.__version__, "torch": torch.__version__,
                                                    "python": platform.python_version()}}
    try:
        print("throughput ...", file=sys.stderr, flush=True)
        throughput = run_throughput(args)
        print("weight updates ...", file=sys.stderr, flush=True)
        updates = run_updates(args)
    finally:
        ray.shutdown()
    print(format_report(throughput, updates, args, machine))
    if args.json:
        args.json.write_text(json.dumps({
            "machine": machine, "args": {k: str(v) for k, v in vars(args).items()},
            "throughput": {key: [asdict(m) for m in values] for key, values in throughput["results"].items()},
            "updates": {name: asdict(record) for name, record in updates.items()},
        }, indent=2))
    return 0 if all(not record.failures for record in updates.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
