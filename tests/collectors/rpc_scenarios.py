"""RPCCollector scenarios, each run in a fresh process by test_rpc.py (torch.distributed.rpc
starts once per process): ``python rpc_scenarios.py <name>`` prints one JSON line."""
import functools
import json
import os
import subprocess
import sys

import torch

from rlcollect import GymEnv, RPCCollector, WorkerError
from rlcollect.testing import CountingEnv, ErrorAfterEnv, WeightProbe


def counting(length):
    return functools.partial(GymEnv, functools.partial(CountingEnv, length), num_envs=1)


def listeners(pids):
    output = subprocess.run(["ss", "-H", "-l", "-t", "-n", "-p"], capture_output=True, text=True).stdout
    return [line.split()[3] for line in output.splitlines() if any(f"pid={pid}," in line for pid in pids)]


def sync():
    policy = WeightProbe()
    collector = RPCCollector(counting(3), policy, num_workers=2, frames_per_batch=8, total_frames=24)
    seen, shapes = [], []
    try:
        for batch in collector:
            shapes.append(list(batch.batch_size))
            seen.append([batch["weight_seen"].unique().tolist(), batch["collector", "policy_version"].unique().tolist(),
                         batch["collector", "worker_id"][:, 0, 0].tolist()])
            with torch.no_grad():
                policy.weight.add_(1.0)
            collector.update_policy_weights_()
        observations = batch["observation"][:, 0, :, 0].tolist()
        ids = batch["collector", "traj_ids"][:, 0, 0].tolist()
        addresses = listeners([os.getpid(), *collector.worker_pids])
        frames = collector.state_dict()["frames"]
    finally:
        collector.shutdown()
    return {"shapes": shapes, "seen": seen, "observations": observations, "ids": ids, "addresses": addresses,
            "frames": frames}


def asynchronous():
    collector = RPCCollector(counting(3), WeightProbe(), num_workers=2, frames_per_batch=4, total_frames=40, sync=False)
    try:
        workers = [int(batch["collector", "worker_id"][0, 0]) for batch in collector]
        frames = collector.frames
    finally:
        collector.shutdown()
    return {"workers": sorted(set(workers)), "batches": len(workers), "frames": frames}


def failure():
    failing = functools.partial(GymEnv, functools.partial(ErrorAfterEnv, 5), num_envs=1)
    collector = RPCCollector([counting(3), failing], None, num_workers=2, frames_per_batch=8)
    try:
        for _ in zip(range(5), collector):
            pass
        return {"error": None}
    except WorkerError as error:
        return {"error": str(error)}
    finally:
        collector.shutdown()


if __name__ == "__main__":
    print(json.dumps({"sync": sync, "async": asynchronous, "failure": failure}[sys.argv[1]]()))
