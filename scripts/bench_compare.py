"""How long `rlcollect compare` takes on a large comparison: 100 runs x 200 logged points.

Writes 100 run folders (4 settings x 25 seeds; config.yaml, .hydra/ with overrides and
hydra.yaml, summary.json, a metrics.jsonl of 200 rows with an evaluation on each) and,
beside each, the same rows as a W&B offline run (``wandb/offline-run-*/run-*.wandb``,
written record by record in wandb's own format with wandb's protobuf classes, as the
reader in rlcollect.logging.wandb_offline reads it). Then times ``compare_runs`` from the
run folders and from the W&B files: loading, grouping, the mean ± std table and the
interval estimates with 2,000 bootstrap resamples (no plot), and checks that both sources
give the same report.

    python scripts/bench_compare.py [--runs 100] [--points 200] [--repeats 3]
"""
from __future__ import annotations

import argparse
import json
import statistics
import struct
import tempfile
import time
import zlib
from pathlib import Path

import numpy as np
import yaml

from rlcollect.analysis.api import compare_runs

SETTINGS = ["algo.lr=0.001", "algo.lr=0.0003", "collector=multisync", "collector=multisync,algo.lr=0.001"]
BLOCK, HEADER = 32 * 1024, struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def config_of(overrides: list[str], seed: int) -> dict:
    """A run config shaped like rlcollect's (the keys `rlcollect train` writes)."""
    values = dict(item.split("=", 1) for item in overrides)
    collector = values.get("collector", "sync")
    return {
        "env": {"id": "CartPole-v1", "num_envs": 8, "max_episode_steps": None, "solved_return": {"CartPole-v1": 475.0},
                "reference_scores": {"CartPole-v1": {"random": 22, "max": 500}}, "make_kwargs": {}, "imports": [],
                "info_keys": [], "wrappers": []},
        "collector": {"_target_": f"rlcollect.{'MultiSync' if collector == 'multisync' else ''}Collector",
                      "_partial_": True, "frames_per_batch": 1024, "max_frames_per_traj": None,
                      "init_random_frames": 0, "reset_at_each_iter": False, "exploration_type": "random"},
        "algo": {"name": "ppo", "lr": float(values.get("algo.lr", "0.0003")), "gamma": 0.98, "gae_lambda": 0.8,
                 "clip_epsilon": 0.2, "epochs": 10, "minibatch_size": 256, "value_coef": 0.5, "entropy_coef": 0.0},
        "model": {"_target_": "rlcollect.ActorCritic", "_partial_": True, "hidden_sizes": [64, 64]},
        "logger": {"_target_": "rlcollect.WandbLogger", "_partial_": True, "project": "rlcollect", "mode": "offline"},
        "eval": {"every_frames": {"CartPole-v1": 1024}, "episodes": 10, "max_time_share": 0.25},
        "seed": seed, "total_frames": 204800, "device": "cpu", "checkpoint_every_frames": 20000, "resume": None,
    }


def history_of(rng: np.random.RandomState, points: int, skill: float) -> list[dict]:
    """``points`` metric rows, one per 1,024 frames, each with an evaluation and a few training metrics."""
    returns = np.clip(500 * (1 - np.exp(-skill * np.arange(1, points + 1) / points)) + rng.normal(0, 20, points),
                      8, 500)
    return [{"step": 1024 * i, "frames": 1024 * i, "time": 0.5 * i + rng.uniform(0, 0.1),
             "train/loss_value": float(rng.uniform(0, 1)), "train/entropy": float(rng.uniform(0, 0.7)),
             "train/episode_return": float(ret * 0.9), "collect/frames_per_second": float(rng.uniform(1e3, 3e3)),
             "eval/episode_return": float(round(ret, 1))} for i, ret in enumerate(returns, 1)]


def wandb_file(run_id: str, name: str, config: dict, history: list[dict]) -> bytes:
    """A W&B offline run log (LevelDB log framing of wandb_internal Record protobufs)."""
    from wandb.proto import wandb_internal_pb2 as pb

    records = [pb.Record(run=pb.RunRecord(run_id=run_id, display_name=name, job_type="sync",
                                          config=pb.ConfigRecord(update=[pb.ConfigItem(key=key, value_json=json.dumps(
                                              value)) for key, value in config.items()])))]
    for row in history:  # W&B steps are frames, as rlcollect logs them
        items = [pb.HistoryItem(key=key, value_json=json.dumps(value)) for key, value in row.items() if key != "step"]
        items += [pb.HistoryItem(key="_step", value_json=str(row["step"])),
                  pb.HistoryItem(key="_runtime", value_json=json.dumps(row["time"])),
                  pb.HistoryItem(key="_timestamp", value_json=json.dumps(1.7e9 + row["time"]))]
        records.append(pb.Record(history=pb.HistoryRecord(item=items, step=pb.HistoryStep(num=row["step"]))))
    records.append(pb.Record(exit=pb.RunExitRecord(exit_code=0)))
    out = bytearray(struct.pack("<4sHB", b":W&B", 0xBEE1, 0))
    for record in records:
        payload, start = record.SerializeToString(), 0
        while True:
            room = BLOCK - len(out) % BLOCK
            if room < HEADER.size:
                out += b"\0" * room
                continue
            chunk = payload[start:start + room - HEADER.size]
            kind = (FULL if start + len(chunk) >= len(payload) else FIRST) if start == 0 else \
                (LAST if start + len(chunk) >= len(payload) else MIDDLE)
            out += HEADER.pack(zlib.crc32(chunk, zlib.crc32(bytes([kind]))), len(chunk), kind) + chunk
            start += len(chunk)
            if start >= len(payload):
                break
    return bytes(out)


def write_runs(root: Path, runs: int, points: int) -> None:
    """``runs`` run folders under ``root``, each with its W&B offline run."""
    rng = np.random.RandomState(0)
    choices = {"experiment": None, "logger": "wandb", "algo": "ppo", "model": "actor_critic", "buffer": "rollout",
               "collector": "sync", "weight_sync": "shared_mem", "env": "cartpole", "hydra/launcher": "basic"}
    for index in range(runs):
        setting, seed = SETTINGS[index % len(SETTINGS)], index // len(SETTINGS)
        overrides = [*setting.split(","), f"seed={seed}"]
        config, history = config_of(overrides, seed), history_of(rng, points, 2 + index % len(SETTINGS))
        run_dir = root / f"{index}_{setting},seed={seed}"
        (run_dir / ".hydra").mkdir(parents=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        (run_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        hydra_choices = {**choices, **({"collector": "multisync"} if "collector=multisync" in setting else {})}
        (run_dir / ".hydra" / "hydra.yaml").write_text(yaml.safe_dump(
            {"hydra": {"run": {"dir": str(run_dir)}, "job": {"name": "cli", "override_dirname": ",".join(overrides)},
                       "runtime": {"version": "1.3.2", "cwd": str(root), "choices": hydra_choices},
                       "verbose": False}}))
        (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in history))
        (run_dir / "summary.json").write_text(json.dumps({"status": "finished", "frames": history[-1]["frames"]}))
        offline = run_dir / "wandb" / f"offline-run-20260101_000000-run{index:04d}"
        offline.mkdir(parents=True)
        (offline / f"run-run{index:04d}.wandb").write_bytes(
            wandb_file(f"run{index:04d}", ",".join(overrides), config, history))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--points", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "sweep"
        write_runs(root, args.runs, args.points)
        reports, rows = {}, []
        for source, kwargs in (("run folders", {"paths": [root]}), ("W&B offline files", {"wandb_dir": root})):
            seconds = []
            for _ in range(args.repeats):
                start = time.perf_counter()
                reports[source] = compare_runs(**kwargs, fmt="json", bootstrap=True)
                seconds.append(time.perf_counter() - start)
            rows.append((source, statistics.median(seconds), min(seconds)))
        groups = json.loads(reports["run folders"])["groups"]
        assert reports["run folders"] == reports["W&B offline files"], "the two sources disagree"
        assert sum(group["runs"] for group in groups) == args.runs
    print(f"rlcollect compare, {args.runs} runs x {args.points} logged points, {len(groups)} groups, "
          f"interval estimates with 2,000 resamples, no plot (median / best of {args.repeats}):")
    print("| source | seconds (median) | seconds (best) |\n|---|---:|---:|")
    for source, median, best in rows:
        print(f"| {source} | {median:.2f} | {best:.2f} |")


if __name__ == "__main__":
    main()
