"""Collector throughput: rlcollect vs hand-written gymnasium loops vs torchrl.

Run it with ``make bench`` (sets up .venv and .venv-bench first; pass flags with
``make bench ARGS="--quick"``), or directly:

    .venv/bin/python scripts/bench_collectors.py                 # 20,000 frames x 5 reps, ~5 min
    .venv/bin/python scripts/bench_collectors.py --quick         # smoke run, ~1 min
    .venv/bin/python scripts/bench_collectors.py --rows a,c --reps 9 --json out.json

What it measures: frames per second with the same policy everywhere, a 64x64 tanh MLP
(obs -> 64 -> 64 -> 2 logits, weights from one seed; scripts/bench_policy.py) followed
by rlcollect's Gumbel-max ``categorical_sample``, torch.set_num_threads(1) in every
process (workers included). Rows a-j and l run CartPole-v1 (obs 4); rows k run
rlcollect.testing.BusyEnv (obs 1), whose step burns 200 us of CPU: a costly simulator.
Rows m run a heavy policy, a 512x512 MLP (same sampler), on BusyEnv(50 us): a worker's
step of 4 envs (~200 us) then costs about what the policy's forward costs, where the
alternating collector should gain most (rlpyt: up to 2x in theory).

    a   hand-written loop, 1 gymnasium env: from_numpy, forward, sample, step, reset
    b   hand-written loop, SyncVectorEnv of 8 envs, one batched forward per step
    c   rlcollect Collector on GymEnv(CartPole-v1)
    d   rlcollect Collector on GymEnv(CartPole-v1, num_envs=8)
    n1  hand-written loop, SyncVectorEnv of 8 envs, GRU policy: carries h, zeroes it on done
    n2  rlcollect Collector on GymEnv(CartPole-v1, num_envs=8), the same GRU policy as a
        GRUModule (hidden state primed, stored, carried and reset by the collector)
    v1  hand-written loop, gym.make_vec(CartPole-v1, 1024) vector entry point (numpy)
    v2  rlcollect Collector on GymEnv(CartPole-v1, num_envs=1024, backend="vector")
    v3  rlcollect Collector on GymEnv(CartPole-v1, num_envs=1024, backend="envpool") (the envpool extra)
        (v rows: batches of 16 steps, 16 x --frames frames per measurement)
    t1  hand-written loop, rlcollect.envs.TorchCartPole(4096) on the CPU (its functional step)
    t2  rlcollect Collector on TorchCartPole(4096) (t rows: as the v rows)
    e1  torchrl Collector on GymEnv(CartPole-v1)              } in .venv-bench, through
    e2  torchrl Collector on SerialEnv(8, GymEnv(CartPole-v1)) } scripts/bench_torchrl_rows.py
    f   rlcollect MultiSyncCollector, 2 workers x GymEnv(num_envs=4)
    g   rlcollect MultiAsyncCollector, 2 workers x GymEnv(num_envs=4)
    h   hand-written loop, AsyncVectorEnv of 8 envs (8 env processes), as b
    i   torchrl MultiSyncCollector, 2 workers x SerialEnv(4)   } in .venv-bench
    j   torchrl MultiAsyncCollector, 2 workers x SerialEnv(4)  }
    k1  rlcollect Collector on GymEnv(BusyEnv(200 us), num_envs=8)
    k2  rlcollect MultiSyncCollector, 2 workers x GymEnv(BusyEnv(200 us), num_envs=4)
    k3  rlcollect ActionServerCollector, 2 workers x 4 BusyEnv(200 us)
    k4  rlcollect AlternatingCollector, 2 workers (2 groups of 1) x 4 BusyEnv(200 us)
    l1  rlcollect ActionServerCollector, 2 workers x 4 envs: policy in the main process
    l2  rlcollect AlternatingCollector, 2 workers (2 groups of 1) x 4 envs
    m1  rlcollect Collector, GymEnv(BusyEnv(50 us), num_envs=8), 512x512 MLP
    m2  rlcollect MultiSyncCollector, 2 workers x 4 BusyEnv(50 us), 512x512 MLP
    m3  rlcollect ActionServerCollector, as m2
    m4  rlcollect AlternatingCollector, as m2 (overlapping groups)
    m5  rlcollect AlternatingCollector, as m2, overlap=False
    p1  rlcollect PoolCollector, 2 workers x 4 LogNormalBusyEnv (median 100 us, sigma 1), policy in
        this process serving the first batch_size=4 envs ready (one worker), layout="flat"
    p2  rlcollect ActionServerCollector, the same workers and envs (every env each step)
    p3  hand-written loop, AsyncVectorEnv of the 8 LogNormalBusyEnvs (8 env processes), as h
    p4  rlcollect MultiSyncCollector, 2 workers x GymEnv(LogNormalBusyEnv, 4), policy copies in the workers
    p5  rlcollect PoolCollector as p1, layout="per_env" ([P, T] batches, whole at every batch end)
    x1  rlcollect DistributedCollector(sync=True), 2 worker processes x Collector(GymEnv(num_envs=4)),
        a gloo group on loopback (the f rows' envs and seeds)
    x2  rlcollect DistributedCollector(sync=False), as x1
    r1  rlcollect RayCollector(sync=True), 2 Ray actors x Collector(GymEnv(num_envs=4))   } scripts/bench_ray.py's
    r2  rlcollect RayCollector(sync=False), as r1                                        } rows r and ra
    s1  start-up: rlcollect MultiSyncCollector (as f), spawn
    s2  start-up: rlcollect MultiSyncCollector (as f), fork
    s3  start-up: torchrl MultiSyncCollector (as i), spawn
    s4  start-up: torchrl MultiSyncCollector (as i), fork

Every throughput row is warmed up once, then all rows are measured in turn, ``--reps``
times (rep 1: a, b, c, ...; rep 2: a, b, c, ...), so slow drifts of the machine hit every
row alike. One measurement collects ``--frames`` frames (env transitions, summed over the
envs of a batched row; a quarter of that, in whole batches, for the costly k and m rows);
time.perf_counter brackets that collection only. For the collector rows, a measurement
builds a fresh collector with ``total_frames = frames_per_batch + frames``; the
following ``frames`` frames, after the first batch, are the ones timed, so a
multi-process row's worker start-up is never in its frames/s. Reported on their own:
"build ms", env + collector construction (for the multi-process rows, that includes
starting the workers and waiting for them to be ready), and "1st batch ms", from the
start of construction to the first batch (so it includes collecting
``frames_per_batch`` frames).

The p rows run rlcollect.testing.LogNormalBusyEnv: a step burns a log-normal time (median
100 us, sigma 1: half the steps within 50-200 us, one in 20 above 500 us), from each env's
own seeded RNG, so that some env is always slow; measured on the k rows' frames.

Multi-process rows (f, g, i, j, k2-k4, l, m2-m5, p) start their workers with ``--start-method``
(default fork: a spawn start-up of ~3 s per measurement would dominate the run; the
steady-state frames/s does not depend on it). A MultiSync batch of ``frames_per_batch``
frames is split over the 2 workers; a MultiAsync batch is one worker's
``frames_per_batch`` frames (both libraries count alike). A MultiAsync row (g, j) may
read up to one batch in 20 high: the batch the other worker has in flight when the
timer starts is partly collected already. The action-server rows (k3, k4, l, m3-m5) run
the policy in the benchmark's own process, once per step for all 8 envs (the alternating
ones twice, for each group of 4), on ``--policy-device`` (default cpu). Alternating gains
only when the server has a core of its own while a group steps: on a 2-core machine any
other busy process takes it. The s rows time only the start-up, for spawn
and fork: construction, first batch (``frames_per_batch`` frames) and, on its own,
shutdown; they are not warmed up.

The Ray rows (r1, r2) are scripts/bench_ray.py's throughput rows r and ra, imported
from it: each actor runs a Collector on its own GymEnv(CartPole-v1, 4), with the seeds of
the f rows. A sync batch is split over the 2 actors, an async batch is one actor's (as
MultiSync and MultiAsync). Ray is started once, on this machine and on loopback only
(rlcollect.collectors.ray.start_local_ray), before the rows are built, and stopped at the
end; "build ms" includes creating the actors, not starting Ray. Without Ray installed
(``pip install 'rlcollect[ray]'``) those rows are skipped with a note.

The hand-written vector loops (b, h) use autoreset_mode=SAME_STEP: like the collectors,
a finished env is reset within the step that finished it, so every frame is a
transition. h builds its env processes once (fork), before the warm-up.

torchrl 0.14 needs tensordict<0.15, which rlcollect cannot share a venv with, so the
torchrl rows run in .venv-bench (``make bench-venv``); this script keeps one worker
process there (scripts/bench_torchrl_rows.py, JSON lines over stdin/stdout) and
interleaves its measurements with the in-process rows. Without .venv-bench those rows
are skipped. Ratios are of median frames/s; the bracket is the range of the per-rep
ratios of the two rows measured side by side; "of max" is the ratio of the two rows' best
reps, the figure least skewed by other processes on a shared machine (the multi-process
rows, which need every core, suffer most from them; each rep's progress line on stderr
shows the 1-min load average).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import gymnasium as gym
import numpy as np
import torch
from bench_policy import HIDDEN, REPO_ROOT, SEED, MLPSamplingPolicy, build_mlp, configure_torch, sample_action
from bench_ray import throughput_rows as ray_throughput_rows
from bench_timing import Measurement, time_collector, time_startup  # noqa: F401 (Measurement: bench_torchrl_rows)

BENCH_PYTHON = REPO_ROOT / ".venv-bench" / "bin" / "python"
TORCHRL_WORKER = Path(__file__).resolve().with_name("bench_torchrl_rows.py")
ENV_ID = "CartPole-v1"
NUM_ENVS = 8
NUM_WORKERS = 2  # multi-process rows: NUM_WORKERS workers x ENVS_PER_WORKER envs
ENVS_PER_WORKER = NUM_ENVS // NUM_WORKERS
BUSY_STEP_US = 200.0  # cost of one BusyEnv step, k rows
BUSY_OBS_DIM = 1
HEAVY_HIDDEN = 512  # m rows: the heavy policy's MLP width
HEAVY_STEP_US = 50.0  # m rows: BusyEnv step cost; x ENVS_PER_WORKER ~ the heavy forward on 8 observations
POOL_MEDIAN_US, POOL_SIGMA = 100.0, 1.0  # p rows: LogNormalBusyEnv step times
POOL_BATCH_SIZE = ENVS_PER_WORKER  # p rows: envs the pool serves per step (one worker's)
START_METHODS = ("fork", "spawn", "forkserver")
TARGET_RATIO = 0.8  # rlcollect / hand-written
TARGET_VECTOR_RATIO = 0.9  # rlcollect / hand-written, vector and torch envs
TARGET_DISTRIBUTED_RATIO = 0.8  # DistributedCollector / the multi-process collector on one machine
TARGET_MULTI_VS_TORCHRL = 3.0
TARGET_COSTLY_SPEEDUP = 1.5
TARGET_STARTUP_S = 3.0  # rlcollect MultiSync, construction to first batch
TARGET_POOL_VS_ACTION_SERVER = 1.5
TARGET_POOL_VS_ASYNC_VECTOR = 2.0


# ---------------------------------------------------------------------- row registry
@dataclass(frozen=True)
class Settings:
    frames: int  # per measurement
    frames_per_batch: int  # collector rows
    reps: int
    start_method: str  # multi-process throughput rows
    policy_device: str = "cpu"  # action-server rows (k3, k4, l, m3-m5)

    @property
    def costly_frames(self) -> int:
        """Frames of a BusyEnv (k) measurement: a quarter of ``frames``, in whole batches."""
        return self.frames_per_batch * max(1, self.frames // 4 // self.frames_per_batch)

    def frames_of(self, row: "Row") -> int:
        if row.batch_frames:  # rows of their own batch size: frames_scale x as many frames, whole batches
            return row.batch_frames * max(2, self.frames * row.frames_scale // row.batch_frames)
        return self.costly_frames if row.costly else self.frames

    def warmup_frames_of(self, row: "Row") -> int:
        """A quarter of a measurement (whole batches, at least two)."""
        batch = row.batch_frames or self.frames_per_batch
        return batch * max(2, self.frames_of(row) // 4 // batch)


Measure = Callable[[int], Measurement]  # frames -> Measurement


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    num_envs: int
    make: Callable[[Settings, "TorchrlWorker | None"], Measure]
    needs_torchrl: bool = False
    needs_ray: bool = False
    costly: bool = False  # measured on settings.costly_frames
    startup: bool = False  # a start-up row: measures construction to first batch, no frames/s
    batch_frames: int = 0  # rows with many envs: their own frames_per_batch (0: --frames-per-batch)
    frames_scale: int = 1  # ... and frames_scale x --frames frames per measurement
    needs_cuda: bool = False  # skipped, with a note, where torch sees no CUDA device


ROWS: dict[str, Row] = {}


def register(key: str, label: str, num_envs: int = 1, **flags):
    """Add a row: the decorated factory returns ``measure(frames) -> Measurement``; a
    ``measure`` with a ``close()`` method gets it called once every rep is done."""
    def decorate(make):
        ROWS[key] = Row(key, label, num_envs, make, **flags)
        return make
    return decorate


# ---------------------------------------------------------------------- a, b, h: by hand
class HandSingleLoop:
    """One gymnasium env, one forward per step; the episode carries over between calls."""

    def __init__(self) -> None:
        self.env = gym.make(ENV_ID)
        self.mlp = build_mlp()
        self.obs, _ = self.env.reset(seed=SEED)

    def __call__(self, frames: int) -> Measurement:
        env, mlp, obs = self.env, self.mlp, self.obs
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(frames):
                action = sample_action(mlp(torch.from_numpy(obs)))
                obs, reward, terminated, truncated, _ = env.step(int(action))
                if terminated or truncated:
                    obs, _ = env.reset()
            elapsed = time.perf_counter() - start
        self.obs = obs
        return Measurement(frames / elapsed)


class HandVectorLoop:
    """A gymnasium vector env of NUM_ENVS envs (same-step autoreset), one batched forward
    per step; ``vector_env_cls`` is SyncVectorEnv (b) or AsyncVectorEnv (h)."""

    num_envs = NUM_ENVS

    def __init__(self, vector_env_cls: type, env_fns=None, obs_dim: int = 4, **vector_kwargs) -> None:
        env_fns = [lambda: gym.make(ENV_ID) for _ in range(NUM_ENVS)] if env_fns is None else env_fns
        self.env = vector_env_cls(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, **vector_kwargs)
        self.mlp = build_mlp(obs_dim)
        self.obs, _ = self.env.reset(seed=SEED)

    def __call__(self, frames: int) -> Measurement:
        env, mlp, obs = self.env, self.mlp, self.obs
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(frames // self.num_envs):
                action = sample_action(mlp(torch.from_numpy(obs)))
                obs, reward, terminated, truncated, _ = env.step(action.numpy())
            elapsed = time.perf_counter() - start
        self.obs = obs
        return Measurement(frames / elapsed)

    def close(self) -> None:
        self.env.close()


@register("a", "hand-written loop, gymnasium env")
def hand_single(settings: Settings, worker) -> Measure:
    return HandSingleLoop()


@register("b", f"hand-written loop, SyncVectorEnv({NUM_ENVS})", num_envs=NUM_ENVS)
def hand_vector(settings: Settings, worker) -> Measure:
    return HandVectorLoop(gym.vector.SyncVectorEnv)


# ---------------------------------------------------------------------- c, d, k1: rlcollect
def busy_env_source(step_cost_us: float = BUSY_STEP_US) -> Callable[[], gym.Env]:
    """BusyEnv(step_cost_us) factory, picklable (for spawn workers)."""
    from rlcollect.testing import BusyEnv
    return functools.partial(BusyEnv, step_cost_us)


def rlcollect_measure(settings: Settings, env_source, num_envs: int | None, obs_dim: int = 4,
                      hidden: int = HIDDEN, policy=None, **env_kwargs) -> Measure:
    from rlcollect.collectors import Collector
    from rlcollect.envs import GymEnv

    policy = MLPSamplingPolicy(build_mlp(obs_dim, hidden)) if policy is None else policy

    def make_collector(total_frames: int):
        return Collector(lambda: GymEnv(env_source, num_envs=num_envs, seed=SEED, **env_kwargs), policy,
                         frames_per_batch=settings.frames_per_batch, total_frames=total_frames)

    return lambda frames: time_collector(make_collector, frames, settings.frames_per_batch)


@register("c", "rlcollect Collector, GymEnv")
def rlcollect_single(settings: Settings, worker) -> Measure:
    return rlcollect_measure(settings, ENV_ID, num_envs=None)


@register("d", f"rlcollect Collector, GymEnv(num_envs={NUM_ENVS})", num_envs=NUM_ENVS)
def rlcollect_batched(settings: Settings, worker) -> Measure:
    return rlcollect_measure(settings, ENV_ID, num_envs=NUM_ENVS)


# ---------------------------------------------------------------------- v: a numpy vector env
VECTOR_ENVS = 1024
VECTOR_BATCH = VECTOR_ENVS * 16  # v rows: frames per collector batch
VECTOR_SCALE = 16  # v rows: 16 x --frames frames per measurement (~0.3 s at 1M frames/s)


class HandMakeVecLoop(HandVectorLoop):
    """gym.make_vec's CartPole vector entry point (numpy, all envs stepped at once; it
    autoresets on the step after a done, gymnasium's default), one batched forward per step."""

    num_envs = VECTOR_ENVS

    def __init__(self) -> None:
        self.env = gym.make_vec(ENV_ID, VECTOR_ENVS, vectorization_mode="vector_entry_point")
        self.mlp = build_mlp()
        self.obs, _ = self.env.reset(seed=SEED)


@register("v1", f"hand-written loop, make_vec vector entry point({VECTOR_ENVS})", num_envs=VECTOR_ENVS,
          batch_frames=VECTOR_BATCH, frames_scale=VECTOR_SCALE)
def hand_make_vec(settings: Settings, worker) -> Measure:
    return HandMakeVecLoop()


@register("v2", f"rlcollect Collector, GymEnv(num_envs={VECTOR_ENVS}, backend='vector')", num_envs=VECTOR_ENVS,
          batch_frames=VECTOR_BATCH, frames_scale=VECTOR_SCALE)
def rlcollect_vector(settings: Settings, worker) -> Measure:
    return rlcollect_measure(dataclasses.replace(settings, frames_per_batch=VECTOR_BATCH), ENV_ID,
                             num_envs=VECTOR_ENVS, backend="vector")


@register("v3", f"rlcollect Collector, GymEnv(num_envs={VECTOR_ENVS}, backend='envpool')", num_envs=VECTOR_ENVS,
          batch_frames=VECTOR_BATCH, frames_scale=VECTOR_SCALE)
def rlcollect_envpool(settings: Settings, worker) -> Measure:
    return rlcollect_measure(dataclasses.replace(settings, frames_per_batch=VECTOR_BATCH), ENV_ID,
                             num_envs=VECTOR_ENVS, backend="envpool")


# ---------------------------------------------------------------------- t: a torch env
TORCH_ENVS = 4096
TORCH_BATCH = TORCH_ENVS * 16


class HandTorchLoop:
    """TorchCartPole(4096) stepped by hand with its functional ``step``: obs -> policy ->
    action -> step, all tensors on ``device`` (finished envs reset inside the step)."""

    def __init__(self, device: str = "cpu") -> None:
        from rlcollect.envs import TorchCartPole

        self.env = TorchCartPole(TORCH_ENVS, device=device, seed=SEED)
        self.mlp = build_mlp().to(device)
        self.obs = self.env.reset()["observation"]
        self.device = torch.device(device)

    def __call__(self, frames: int) -> Measurement:
        env, mlp, obs = self.env, self.mlp, self.obs
        synchronize = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        with torch.no_grad():
            synchronize()
            start = time.perf_counter()
            for _ in range(frames // TORCH_ENVS):
                obs = env.step(sample_action(mlp(obs)))[0]
            synchronize()
            elapsed = time.perf_counter() - start
        self.obs = obs
        return Measurement(frames / elapsed)


@register("t1", f"hand-written loop, TorchCartPole({TORCH_ENVS}), cpu", num_envs=TORCH_ENVS,
          batch_frames=TORCH_BATCH, frames_scale=VECTOR_SCALE)
def hand_torch(settings: Settings, worker) -> Measure:
    return HandTorchLoop()


def rlcollect_torch_measure(device: str, cudagraph_policy: bool = False) -> Measure:
    """Collector over TorchCartPole(TORCH_ENVS) with env, policy and storage on ``device``."""
    from rlcollect.collectors import Collector
    from rlcollect.envs import TorchCartPole

    policy = MLPSamplingPolicy(build_mlp()).to(device)

    def make_collector(total_frames: int):
        return Collector(TorchCartPole(TORCH_ENVS, device=device, seed=SEED), policy, frames_per_batch=TORCH_BATCH,
                         total_frames=total_frames, device=device, cudagraph_policy=cudagraph_policy)

    return lambda frames: time_collector(make_collector, frames, TORCH_BATCH)


@register("t2", f"rlcollect Collector, TorchCartPole({TORCH_ENVS}), cpu", num_envs=TORCH_ENVS,
          batch_frames=TORCH_BATCH, frames_scale=VECTOR_SCALE)
def rlcollect_torch(settings: Settings, worker) -> Measure:
    return rlcollect_torch_measure("cpu")


@register("t3", f"hand-written loop, TorchCartPole({TORCH_ENVS}), cuda", num_envs=TORCH_ENVS,
          batch_frames=TORCH_BATCH, frames_scale=VECTOR_SCALE, needs_cuda=True)
def hand_torch_cuda(settings: Settings, worker) -> Measure:
    return HandTorchLoop("cuda")


@register("t4", f"rlcollect Collector, TorchCartPole({TORCH_ENVS}), cuda", num_envs=TORCH_ENVS,
          batch_frames=TORCH_BATCH, frames_scale=VECTOR_SCALE, needs_cuda=True)
def rlcollect_torch_cuda(settings: Settings, worker) -> Measure:
    return rlcollect_torch_measure("cuda")


@register("t5", f"rlcollect Collector, TorchCartPole({TORCH_ENVS}), cuda, cudagraph_policy", num_envs=TORCH_ENVS,
          batch_frames=TORCH_BATCH, frames_scale=VECTOR_SCALE, needs_cuda=True)
def rlcollect_torch_cudagraph(settings: Settings, worker) -> Measure:
    return rlcollect_torch_measure("cuda", cudagraph_policy=True)


# ---------------------------------------------------------------------- n: a recurrent policy
class GRUSamplingPolicy(torch.nn.Module):
    """observation -> GRU (hidden 64) -> Linear -> sample_action: a GRUModule (step mode)
    that the collector feeds ("recurrent_state" primed, carried, reset), and the very same
    nn.GRU and head for the hand-written loop."""

    def __init__(self) -> None:
        from rlcollect.modules import GRUModule

        super().__init__()
        torch.manual_seed(SEED)
        self.rnn = GRUModule(4, HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, 2)

    def forward(self, tensordict):
        features = self.rnn(tensordict).get("features")
        tensordict.set("action", sample_action(self.head(features)))
        return tensordict


class HandGRULoop(HandVectorLoop):
    """As b, carrying the GRU's hidden state by hand: zeroed where an env finished."""

    def __init__(self) -> None:
        super().__init__(gym.vector.SyncVectorEnv)
        policy = GRUSamplingPolicy()
        self.gru, self.head = policy.rnn.layers[0], policy.head
        self.hidden = torch.zeros(1, NUM_ENVS, HIDDEN)

    def __call__(self, frames: int) -> Measurement:
        env, gru, head, obs, hidden = self.env, self.gru, self.head, self.obs, self.hidden
        with torch.no_grad():
            start = time.perf_counter()
            for _ in range(frames // NUM_ENVS):
                output, hidden = gru(torch.from_numpy(obs).unsqueeze(1), hidden)
                action = sample_action(head(output.squeeze(1)))
                obs, reward, terminated, truncated, _ = env.step(action.numpy())
                done = terminated | truncated
                if done.any():
                    hidden[:, torch.from_numpy(done)] = 0.0
            elapsed = time.perf_counter() - start
        self.obs, self.hidden = obs, hidden
        return Measurement(frames / elapsed)


@register("n1", f"hand-written loop, SyncVectorEnv({NUM_ENVS}), GRU policy", num_envs=NUM_ENVS)
def hand_gru(settings: Settings, worker) -> Measure:
    return HandGRULoop()


@register("n2", f"rlcollect Collector, GymEnv(num_envs={NUM_ENVS}), GRU policy", num_envs=NUM_ENVS)
def rlcollect_gru(settings: Settings, worker) -> Measure:
    return rlcollect_measure(settings, ENV_ID, num_envs=NUM_ENVS, policy=GRUSamplingPolicy())


# ---------------------------------------------------------------------- e: torchrl
class TorchrlWorker:
    """A bench_torchrl_rows.py process in .venv-bench, asked one measurement at a time."""

    def __init__(self, python: Path) -> None:
        self.process = subprocess.Popen(
            [str(python), str(TORCHRL_WORKER), "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT,
        )
        self.versions = self._read()["versions"]

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"torchrl worker exited (code {self.process.wait()}); see its stderr above")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(f"torchrl worker: {reply['error']}")
        return reply

    def measure(self, row: str, frames: int, frames_per_batch: int, start_method: str | None = None) -> Measurement:
        request = {"row": row, "frames": frames, "frames_per_batch": frames_per_batch, "start_method": start_method}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return Measurement(**self._read()["measurement"])

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def torchrl_measure(settings: Settings, worker: TorchrlWorker, row: str, start_method: str | None = None) -> Measure:
    return lambda frames: worker.measure(row, frames, settings.frames_per_batch, start_method)


@register("e1", "torchrl Collector, GymEnv", needs_torchrl=True)
def torchrl_single(settings: Settings, worker: TorchrlWorker) -> Measure:
    return torchrl_measure(settings, worker, "gym")


@register("e2", f"torchrl Collector, SerialEnv({NUM_ENVS})", num_envs=NUM_ENVS, needs_torchrl=True)
def torchrl_serial(settings: Settings, worker: TorchrlWorker) -> Measure:
    return torchrl_measure(settings, worker, "serial")


# ---------------------------------------------------------------------- f-k, s: multi-process rows, their baselines
def make_rlcollect_multi(collector_cls_name: str, env_source, obs_dim: int, frames_per_batch: int,
                         start_method: str, hidden: int = HIDDEN) -> Callable[[int], Iterable]:
    """``total_frames -> collector`` for NUM_WORKERS workers of GymEnv(env_source,
    ENVS_PER_WORKER); worker w's envs get seeds SEED + ENVS_PER_WORKER * w + i, the seeds
    of the single-process 8-env rows. The policy and the env factories are picklable
    (bench_policy.MLPSamplingPolicy, functools.partial of importable callables), as spawn
    needs."""
    from rlcollect.collectors import multi
    from rlcollect.envs import GymEnv

    collector_cls = getattr(multi, collector_cls_name)
    policy = MLPSamplingPolicy(build_mlp(obs_dim, hidden))
    env_fns = [functools.partial(GymEnv, env_source, ENVS_PER_WORKER, seed=SEED + ENVS_PER_WORKER * worker_id)
               for worker_id in range(NUM_WORKERS)]

    def make_collector(total_frames: int):
        return collector_cls(env_fns, policy, frames_per_batch=frames_per_batch, total_frames=total_frames,
                             start_method=start_method)

    return make_collector


def rlcollect_multi_measure(settings: Settings, collector_cls_name: str, env_source=ENV_ID,
                            obs_dim: int = 4, hidden: int = HIDDEN) -> Measure:
    make_collector = make_rlcollect_multi(collector_cls_name, env_source, obs_dim, settings.frames_per_batch,
                                          settings.start_method, hidden)
    return lambda frames: time_collector(make_collector, frames, settings.frames_per_batch)


def rlcollect_distributed_measure(settings: Settings, sync: bool) -> Measure:
    """DistributedCollector: NUM_WORKERS worker processes (--start-method) x GymEnv(ENVS_PER_WORKER)
    in a gloo group on loopback, the f/g rows' envs and seeds; sync batches split frames_per_batch
    across the workers, async batches are one worker's frames_per_batch (as MultiSync/MultiAsync)."""
    from rlcollect.collectors.distributed import DistributedCollector
    from rlcollect.envs import GymEnv

    policy = MLPSamplingPolicy(build_mlp())
    env_fns = [functools.partial(GymEnv, ENV_ID, ENVS_PER_WORKER, seed=SEED + ENVS_PER_WORKER * worker_id)
               for worker_id in range(NUM_WORKERS)]

    def make_collector(total_frames: int):
        return DistributedCollector(env_fns, policy, num_workers=NUM_WORKERS, sync=sync,
                                    frames_per_batch=settings.frames_per_batch, total_frames=total_frames,
                                    start_method=settings.start_method)

    return lambda frames: time_collector(make_collector, frames, settings.frames_per_batch)


@register("x1", f"rlcollect DistributedCollector(sync), {NUM_WORKERS} workers x GymEnv({ENVS_PER_WORKER}), gloo",
          num_envs=NUM_ENVS)
def rlcollect_distributed_sync(settings: Settings, worker) -> Measure:
    return rlcollect_distributed_measure(settings, sync=True)


@register("x2", f"rlcollect DistributedCollector(async), {NUM_WORKERS} workers x GymEnv({ENVS_PER_WORKER}), gloo",
          num_envs=NUM_ENVS)
def rlcollect_distributed_async(settings: Settings, worker) -> Measure:
    return rlcollect_distributed_measure(settings, sync=False)


def rlcollect_action_server_measure(settings: Settings, collector_cls_name: str, env_source=ENV_ID,
                                    obs_dim: int = 4, hidden: int = HIDDEN, **collector_kwargs) -> Measure:
    """NUM_WORKERS workers x ENVS_PER_WORKER envs (the seeds of the 8-env rows), the policy
    in this process; an AlternatingCollector splits the workers into two groups."""
    from rlcollect.collectors import action_server

    collector_cls = getattr(action_server, collector_cls_name)
    policy = MLPSamplingPolicy(build_mlp(obs_dim, hidden))

    def make_collector(total_frames: int):
        return collector_cls(env_source, policy, num_workers=NUM_WORKERS, envs_per_worker=ENVS_PER_WORKER,
                             frames_per_batch=settings.frames_per_batch, total_frames=total_frames, seed=SEED,
                             start_method=settings.start_method, policy_device=settings.policy_device,
                             **collector_kwargs)

    return lambda frames: time_collector(make_collector, frames, settings.frames_per_batch)


def rlcollect_startup_measure(settings: Settings, start_method: str) -> Measure:
    make_collector = make_rlcollect_multi("MultiSyncCollector", ENV_ID, 4, settings.frames_per_batch, start_method)
    return lambda frames: time_startup(make_collector, settings.frames_per_batch)


MULTI = f"{NUM_WORKERS} workers x GymEnv({ENVS_PER_WORKER})"
TORCHRL_MULTI = f"{NUM_WORKERS} workers x SerialEnv({ENVS_PER_WORKER})"


@register("f", f"rlcollect MultiSync, {MULTI}", num_envs=NUM_ENVS)
def rlcollect_multisync(settings: Settings, worker) -> Measure:
    return rlcollect_multi_measure(settings, "MultiSyncCollector")


@register("g", f"rlcollect MultiAsync, {MULTI}", num_envs=NUM_ENVS)
def rlcollect_multiasync(settings: Settings, worker) -> Measure:
    return rlcollect_multi_measure(settings, "MultiAsyncCollector")


@register("h", f"hand-written loop, AsyncVectorEnv({NUM_ENVS})", num_envs=NUM_ENVS)
def hand_async_vector(settings: Settings, worker) -> Measure:
    return HandVectorLoop(gym.vector.AsyncVectorEnv, context="fork")


@register("i", f"torchrl MultiSync, {TORCHRL_MULTI}", num_envs=NUM_ENVS, needs_torchrl=True)
def torchrl_multisync(settings: Settings, worker: TorchrlWorker) -> Measure:
    return torchrl_measure(settings, worker, "multisync", settings.start_method)


@register("j", f"torchrl MultiAsync, {TORCHRL_MULTI}", num_envs=NUM_ENVS, needs_torchrl=True)
def torchrl_multiasync(settings: Settings, worker: TorchrlWorker) -> Measure:
    return torchrl_measure(settings, worker, "multiasync", settings.start_method)


@register("k1", f"rlcollect Collector, BusyEnv x {NUM_ENVS}", num_envs=NUM_ENVS, costly=True)
def rlcollect_busy(settings: Settings, worker) -> Measure:
    return rlcollect_measure(settings, busy_env_source(), num_envs=NUM_ENVS, obs_dim=BUSY_OBS_DIM)


@register("k2", f"rlcollect MultiSync, {NUM_WORKERS} workers x BusyEnv x {ENVS_PER_WORKER}", num_envs=NUM_ENVS,
          costly=True)
def rlcollect_busy_multisync(settings: Settings, worker) -> Measure:
    return rlcollect_multi_measure(settings, "MultiSyncCollector", busy_env_source(), obs_dim=BUSY_OBS_DIM)


@register("k3", f"rlcollect ActionServer, {NUM_WORKERS} workers x BusyEnv x {ENVS_PER_WORKER}",
          num_envs=NUM_ENVS, costly=True)
def rlcollect_busy_action_server(settings: Settings, worker) -> Measure:
    return rlcollect_action_server_measure(settings, "ActionServerCollector", busy_env_source(), BUSY_OBS_DIM)


@register("k4", f"rlcollect Alternating, {NUM_WORKERS} workers x BusyEnv x {ENVS_PER_WORKER}",
          num_envs=NUM_ENVS, costly=True)
def rlcollect_busy_alternating(settings: Settings, worker) -> Measure:
    return rlcollect_action_server_measure(settings, "AlternatingCollector", busy_env_source(), BUSY_OBS_DIM)


@register("l1", f"rlcollect ActionServer, {MULTI}", num_envs=NUM_ENVS)
def rlcollect_action_server(settings: Settings, worker) -> Measure:
    return rlcollect_action_server_measure(settings, "ActionServerCollector")


@register("l2", f"rlcollect Alternating, {MULTI}", num_envs=NUM_ENVS)
def rlcollect_alternating(settings: Settings, worker) -> Measure:
    return rlcollect_action_server_measure(settings, "AlternatingCollector")


HEAVY = f"BusyEnv({HEAVY_STEP_US:.0f}us), MLP{HEAVY_HIDDEN}"


@register("m1", f"rlcollect Collector, {HEAVY} x {NUM_ENVS}", num_envs=NUM_ENVS, costly=True)
def rlcollect_heavy(settings: Settings, worker) -> Measure:
    return rlcollect_measure(settings, busy_env_source(HEAVY_STEP_US), num_envs=NUM_ENVS, obs_dim=BUSY_OBS_DIM,
                             hidden=HEAVY_HIDDEN)


@register("m2", f"rlcollect MultiSync, {NUM_WORKERS} x {ENVS_PER_WORKER} {HEAVY}", num_envs=NUM_ENVS, costly=True)
def rlcollect_heavy_multisync(settings: Settings, worker) -> Measure:
    return rlcollect_multi_measure(settings, "MultiSyncCollector", busy_env_source(HEAVY_STEP_US), BUSY_OBS_DIM,
                                   HEAVY_HIDDEN)


@register("m3", f"rlcollect ActionServer, {NUM_WORKERS} x {ENVS_PER_WORKER} {HEAVY}", num_envs=NUM_ENVS,
          costly=True)
def rlcollect_heavy_action_server(settings: Settings, worker) -> Measure:
    return rlcollect_action_server_measure(settings, "ActionServerCollector", busy_env_source(HEAVY_STEP_US),
                                           BUSY_OBS_DIM, HEAVY_HIDDEN)


@register("m4", f"rlcollect Alternating, {NUM_WORKERS} x {ENVS_PER_WORKER} {HEAVY}", num_envs=NUM_ENVS,
          costly=True)
def rlcollect_heavy_alternating(settings: Settings, worker) -> Measure:
    return rlcollect_action_server_measure(settings, "AlternatingCollector", busy_env_source(HEAVY_STEP_US),
                                           BUSY_OBS_DIM, HEAVY_HIDDEN)


@register("m5", f"rlcollect Alternating(overlap=False), {NUM_WORKERS}x{ENVS_PER_WORKER} {HEAVY}",
          num_envs=NUM_ENVS, costly=True)
def rlcollect_heavy_alternating_no_overlap(settings: Settings, worker) -> Measure:
    return rlcollect_action_server_measure(settings, "AlternatingCollector", busy_env_source(HEAVY_STEP_US),
                                           BUSY_OBS_DIM, HEAVY_HIDDEN, overlap=False)


# ---------------------------------------------------------------------- q: rlpyt's sampler front
class SamplerRun:
    """A sampler seen as a collector of ``total_frames`` frames (time_collector's protocol):
    each batch is one ``obtain_samples`` (time-major samples and trajectory infos)."""

    def __init__(self, sampler, agent, total_frames: int) -> None:
        sampler.initialize(agent, seed=SEED)
        self.sampler, self.batches = sampler, total_frames // (sampler.batch_B * sampler.batch_T)

    def __iter__(self):
        for itr in range(self.batches):
            yield self.sampler.obtain_samples(itr)[0]

    def shutdown(self) -> None:
        self.sampler.shutdown()


def rlcollect_sampler_measure(settings: Settings, sampler_name: str) -> Measure:
    """NUM_ENVS CartPole envs seeded SEED + i (the d, f, l rows' envs), no decorrelation
    steps; the parallel samplers get NUM_WORKERS workers (this machine's 2 CPUs)."""
    import rlcollect.rlpyt

    sampler_cls = getattr(rlcollect.rlpyt, sampler_name)
    policy = MLPSamplingPolicy(build_mlp())
    options = {} if sampler_name == "SerialSampler" else {"start_method": settings.start_method}

    def make_collector(total_frames: int):
        sampler = sampler_cls(gym.make, {"id": ENV_ID}, settings.frames_per_batch // NUM_ENVS, NUM_ENVS,
                              max_decorrelation_steps=0, collector_kwargs=options)
        return SamplerRun(sampler, policy, total_frames)

    return lambda frames: time_collector(make_collector, frames, settings.frames_per_batch)


@register("q1", f"rlcollect SerialSampler, batch_B={NUM_ENVS}", num_envs=NUM_ENVS)
def rlcollect_serial_sampler(settings: Settings, worker) -> Measure:
    return rlcollect_sampler_measure(settings, "SerialSampler")


@register("q2", f"rlcollect CpuSampler, {MULTI}", num_envs=NUM_ENVS)
def rlcollect_cpu_sampler(settings: Settings, worker) -> Measure:
    return rlcollect_sampler_measure(settings, "CpuSampler")


@register("q3", f"rlcollect GpuSampler, {MULTI}", num_envs=NUM_ENVS)
def rlcollect_gpu_sampler(settings: Settings, worker) -> Measure:
    return rlcollect_sampler_measure(settings, "GpuSampler")


@register("q4", f"rlcollect AlternatingSampler, {MULTI}", num_envs=NUM_ENVS)
def rlcollect_alternating_sampler(settings: Settings, worker) -> Measure:
    return rlcollect_sampler_measure(settings, "AlternatingSampler")


@register("s1", f"rlcollect MultiSync, {MULTI}, spawn", num_envs=NUM_ENVS, startup=True)
def rlcollect_startup_spawn(settings: Settings, worker) -> Measure:
    return rlcollect_startup_measure(settings, "spawn")


@register("s2", f"rlcollect MultiSync, {MULTI}, fork", num_envs=NUM_ENVS, startup=True)
def rlcollect_startup_fork(settings: Settings, worker) -> Measure:
    return rlcollect_startup_measure(settings, "fork")


@register("s3", f"torchrl MultiSync, {TORCHRL_MULTI}, spawn", num_envs=NUM_ENVS, needs_torchrl=True, startup=True)
def torchrl_startup_spawn(settings: Settings, worker: TorchrlWorker) -> Measure:
    return torchrl_measure(settings, worker, "multisync-startup", "spawn")


@register("s4", f"torchrl MultiSync, {TORCHRL_MULTI}, fork", num_envs=NUM_ENVS, needs_torchrl=True, startup=True)
def torchrl_startup_fork(settings: Settings, worker: TorchrlWorker) -> Measure:
    return torchrl_measure(settings, worker, "multisync-startup", "fork")


# ---------------------------------------------------------------------- p: an env pool, envs of uneven speed
POOL = f"{NUM_WORKERS} workers x {ENVS_PER_WORKER} LogNormalBusyEnv"


def lognormal_env_source() -> Callable[[], gym.Env]:
    """LogNormalBusyEnv(POOL_MEDIAN_US, POOL_SIGMA) factory, picklable."""
    from rlcollect.testing import LogNormalBusyEnv
    return functools.partial(LogNormalBusyEnv, POOL_MEDIAN_US, POOL_SIGMA)


def rlcollect_pool_measure(settings: Settings, layout: str) -> Measure:
    """NUM_WORKERS workers x ENVS_PER_WORKER envs (the seeds of the 8-env rows), the policy
    in this process serving POOL_BATCH_SIZE envs per step."""
    from rlcollect.collectors.pool import PoolCollector

    policy = MLPSamplingPolicy(build_mlp(BUSY_OBS_DIM))

    def make_collector(total_frames: int):
        return PoolCollector(lognormal_env_source(), policy, num_workers=NUM_WORKERS, envs_per_worker=ENVS_PER_WORKER,
                             batch_size=POOL_BATCH_SIZE, frames_per_batch=settings.frames_per_batch,
                             total_frames=total_frames, layout=layout, seed=SEED, start_method=settings.start_method,
                             policy_device=settings.policy_device)

    return lambda frames: time_collector(make_collector, frames, settings.frames_per_batch)


@register("p1", f"rlcollect Pool, {POOL}, batch {POOL_BATCH_SIZE}", num_envs=NUM_ENVS, costly=True)
def rlcollect_pool(settings: Settings, worker) -> Measure:
    return rlcollect_pool_measure(settings, "flat")


@register("p2", f"rlcollect ActionServer, {POOL}", num_envs=NUM_ENVS, costly=True)
def rlcollect_pool_action_server(settings: Settings, worker) -> Measure:
    return rlcollect_action_server_measure(settings, "ActionServerCollector", lognormal_env_source(), BUSY_OBS_DIM)


@register("p3", f"hand-written loop, AsyncVectorEnv({NUM_ENVS} LogNormalBusyEnv)", num_envs=NUM_ENVS, costly=True)
def hand_pool_async_vector(settings: Settings, worker) -> Measure:
    source = lognormal_env_source()
    return HandVectorLoop(gym.vector.AsyncVectorEnv, [source] * NUM_ENVS, BUSY_OBS_DIM, context="fork")


@register("p4", f"rlcollect MultiSync, {POOL}", num_envs=NUM_ENVS, costly=True)
def rlcollect_pool_multisync(settings: Settings, worker) -> Measure:
    return rlcollect_multi_measure(settings, "MultiSyncCollector", lognormal_env_source(), obs_dim=BUSY_OBS_DIM)


@register("p5", f"rlcollect Pool, {POOL}, batch {POOL_BATCH_SIZE}, per_env", num_envs=NUM_ENVS, costly=True)
def rlcollect_pool_per_env(settings: Settings, worker) -> Measure:
    return rlcollect_pool_measure(settings, "per_env")


# ---------------------------------------------------------------------- r: Ray (scripts/bench_ray.py's rows)
RAY = f"{NUM_WORKERS} actors x GymEnv({ENVS_PER_WORKER})"


def rlcollect_ray_measure(settings: Settings, bench_ray_row: str) -> Measure:
    _, make_collector = ray_throughput_rows(settings.frames_per_batch)[bench_ray_row]
    return lambda frames: time_collector(make_collector, frames, settings.frames_per_batch)


@register("r1", f"rlcollect RayCollector(sync=True), {RAY}", num_envs=NUM_ENVS, needs_ray=True)
def rlcollect_ray_sync(settings: Settings, worker) -> Measure:
    return rlcollect_ray_measure(settings, "r")


@register("r2", f"rlcollect RayCollector(sync=False), {RAY}", num_envs=NUM_ENVS, needs_ray=True)
def rlcollect_ray_async(settings: Settings, worker) -> Measure:
    return rlcollect_ray_measure(settings, "ra")


# (numerator, denominator, what, target)
COMPARISONS = (
    ("c", "a", "rlcollect / hand-written, 1 env", TARGET_RATIO),
    ("d", "b", f"rlcollect / hand-written, {NUM_ENVS} envs", TARGET_RATIO),
    ("n2", "n1", f"rlcollect / hand-written, GRU, {NUM_ENVS} envs", TARGET_RATIO),
    ("v2", "v1", f"rlcollect / make_vec loop, {VECTOR_ENVS} envs", TARGET_VECTOR_RATIO),
    ("t2", "t1", f"rlcollect / torch loop, {TORCH_ENVS} envs", TARGET_VECTOR_RATIO),
    ("t4", "t3", f"rlcollect / torch loop, {TORCH_ENVS} envs, cuda", TARGET_VECTOR_RATIO),
    ("t5", "t3", "the same, the policy replayed as a CUDA graph", None),
    ("t5", "t4", "cudagraph_policy / eager policy, cuda", None),
    ("v3", "v1", "rlcollect on EnvPool / make_vec loop", None),
    ("e1", "a", "torchrl / hand-written, 1 env", None),
    ("e2", "b", f"torchrl / hand-written, {NUM_ENVS} envs", None),
    ("c", "e1", "rlcollect / torchrl, 1 env", None),
    ("d", "e2", f"rlcollect / torchrl, {NUM_ENVS} envs", None),
    ("f", "i", "rlcollect / torchrl, MultiSync", TARGET_MULTI_VS_TORCHRL),
    ("g", "j", "rlcollect / torchrl, MultiAsync", None),
    ("f", "h", "MultiSync / AsyncVectorEnv", None),
    ("g", "h", "MultiAsync / AsyncVectorEnv", None),
    ("f", "d", "MultiSync / 1-process Collector", None),
    ("h", "b", "AsyncVectorEnv / SyncVectorEnv", None),
    ("k2", "k1", "MultiSync / 1-process, BusyEnv", TARGET_COSTLY_SPEEDUP),
    ("l1", "f", "ActionServer / MultiSync", None),
    ("q1", "d", "SerialSampler / its Collector", None),
    ("q2", "f", "CpuSampler / its MultiSync", None),
    ("q3", "l1", "GpuSampler / its ActionServer", None),
    ("q4", "l2", "AlternatingSampler / its Alternating", None),
    ("l2", "l1", "Alternating / ActionServer", None),
    ("k3", "k2", "ActionServer / MultiSync, BusyEnv", None),
    ("k4", "k3", "Alternating / ActionServer, BusyEnv", None),
    ("m2", "m1", "MultiSync / 1-process, heavy policy", None),
    ("m3", "m2", "ActionServer / MultiSync, heavy policy", None),
    ("m4", "m3", "Alternating / ActionServer, heavy", None),
    ("m5", "m3", "Alt. no-overlap / ActionServer, heavy", None),
    ("m4", "m1", "Alternating / 1-process, heavy policy", None),
    ("p1", "p2", "Pool / ActionServer, log-normal steps", TARGET_POOL_VS_ACTION_SERVER),
    ("p1", "p3", "Pool / AsyncVectorEnv, log-normal steps", TARGET_POOL_VS_ASYNC_VECTOR),
    ("p1", "p4", "Pool / MultiSync, log-normal steps", None),
    ("p5", "p2", "Pool per_env / ActionServer, log-normal", None),
    ("r1", "f", "RayCollector sync / MultiSync", None),
    ("r2", "g", "RayCollector async / MultiAsync", None),
    ("x1", "f", "Distributed sync / MultiSync", TARGET_DISTRIBUTED_RATIO),
    ("x2", "g", "Distributed async / MultiAsync", TARGET_DISTRIBUTED_RATIO),
    ("x1", "r1", "Distributed sync / Ray sync", None),
    ("x2", "r2", "Distributed async / Ray async", None),
)
STARTUP_TARGETS = {"s1": TARGET_STARTUP_S, "s2": TARGET_STARTUP_S}  # seconds, construction to first batch


# ---------------------------------------------------------------------- running
@dataclass
class RowResult:
    row: Row
    measurements: list[Measurement] = field(default_factory=list)

    def values(self, name: str) -> list[float]:
        return [getattr(m, name) for m in self.measurements if getattr(m, name) is not None]

    @property
    def fps(self) -> list[float]:
        return self.values("frames_per_s")

    def progress(self) -> str:
        last = self.measurements[-1]
        return f"{self.row.key} {last.startup_ms / 1e3:.2f}s" if self.row.startup else \
            f"{self.row.key} {last.frames_per_s:,.0f}"


def run_rows(rows: list[Row], settings: Settings, worker: TorchrlWorker | None) -> dict[str, RowResult]:
    """Warm every throughput row up once, then measure all rows in turn, ``settings.reps`` times."""
    measures = {}
    try:
        for row in rows:
            measures[row.key] = row.make(settings, worker)
        for row in rows:
            if not row.startup:  # a start-up is cold by definition; a warm-up would only cost time
                measures[row.key](settings.warmup_frames_of(row))
        results = {row.key: RowResult(row) for row in rows}
        for rep in range(settings.reps):
            for row in rows:
                results[row.key].measurements.append(measures[row.key](settings.frames_of(row)))
            print(f"  rep {rep + 1}/{settings.reps} (load {os.getloadavg()[0]:.2f}): "
                  + "  ".join(result.progress() for result in results.values()), file=sys.stderr, flush=True)
    finally:
        for measure in measures.values():
            if hasattr(measure, "close"):
                measure.close()
    return results


def paired_ratios(results: dict[str, RowResult], numerator: str, denominator: str) -> list[float]:
    return [n / d for n, d in zip(results[numerator].fps, results[denominator].fps)]


def _median(values: list[float], scale: float = 1.0, spec: str = ",.1f") -> str:
    return format(statistics.median(values) * scale, spec) if values else "-"


def format_throughput(results: dict[str, RowResult], settings: Settings) -> list[str]:
    lines = [f"{'row':<4}{'what':<64}{'envs':>5}{'frames':>8}{'median f/s':>12}{'min f/s':>10}{'max f/s':>10}"
             f"{'build ms':>10}{'1st batch ms':>14}", "-" * 137]
    for key, result in results.items():
        lines.append(f"{key:<4}{result.row.label:<64}{result.row.num_envs:>5}{settings.frames_of(result.row):>8,}"
                     f"{statistics.median(result.fps):>12,.0f}{min(result.fps):>10,.0f}{max(result.fps):>10,.0f}"
                     f"{_median(result.values('construct_ms')):>10}{_median(result.values('startup_ms')):>14}")
    return lines


def format_startup(results: dict[str, RowResult]) -> list[str]:
    lines = ["start-up of a multi-process collector: construction (workers started and ready) to first batch, seconds",
             f"{'row':<4}{'what':<52}{'median s':>9}{'min s':>7}{'max s':>7}{'build s':>9}{'shutdown s':>12}  target",
             "-" * 116]
    for key, result in results.items():
        startup_s = [ms / 1e3 for ms in result.values("startup_ms")]
        target = STARTUP_TARGETS.get(key)
        verdict = "" if target is None else \
            f"< {target:.1f} s: {'met' if statistics.median(startup_s) < target else 'NOT met'}"
        lines.append(f"{key:<4}{result.row.label:<52}{statistics.median(startup_s):>9.2f}{min(startup_s):>7.2f}"
                     f"{max(startup_s):>7.2f}{_median(result.values('construct_ms'), 1e-3, '.2f'):>9}"
                     f"{_median(result.values('shutdown_ms'), 1e-3, '.2f'):>12}  {verdict}".rstrip())
    return lines


def format_ratios(results: dict[str, RowResult]) -> list[str]:
    comparisons = [c for c in COMPARISONS if c[0] in results and c[1] in results]
    if not comparisons:
        return []
    lines = ["ratio: of the median frames/s (the target applies to it); per-rep range: of the ratios of each rep; "
             "of max: of the best rep of each row, the least disturbed by other processes",
             f"{'ratio':<10}{'what':<38}{'median':>8}  {'per-rep range':<15}{'of max':>7}  target", "-" * 93]
    for numerator, denominator, what, target in comparisons:
        ratio = statistics.median(results[numerator].fps) / statistics.median(results[denominator].fps)
        per_rep = paired_ratios(results, numerator, denominator)
        of_max = max(results[numerator].fps) / max(results[denominator].fps)
        verdict = "" if target is None else f">= {target:.2f}x: {'met' if ratio >= target else 'NOT met'}"
        lines.append(f"{f'({numerator})/({denominator})':<10}{what:<38}{ratio:>7.2f}x  "
                     f"{f'[{min(per_rep):.2f}, {max(per_rep):.2f}]':<15}{of_max:>6.2f}x  {verdict}".rstrip())
    return lines


def format_report(results: dict[str, RowResult], settings: Settings, header: list[str], skipped: list[str]) -> str:
    throughput = {key: result for key, result in results.items() if not result.row.startup}
    startup = {key: result for key, result in results.items() if result.row.startup}
    sections = (format_throughput(throughput, settings) if throughput else [],
                format_startup(startup) if startup else [],
                skipped,
                format_ratios(throughput))
    lines = [*header]
    for section in sections:
        if section:
            lines += ["", *section]
    return "\n".join(lines)


def report_header(settings: Settings, machine: dict) -> list[str]:
    return [
        f"{ENV_ID} (rows a-j, l, r) and BusyEnv({BUSY_STEP_US:.0f} us per step, rows k), {HIDDEN}x{HIDDEN} tanh MLP + "
        "Gumbel-max categorical_sample, torch threads 1 in every process",
        f"heavy policy rows m: BusyEnv({HEAVY_STEP_US:.0f} us), {HEAVY_HIDDEN}x{HEAVY_HIDDEN} tanh MLP",
        f"{settings.frames:,} frames per measurement ({settings.costly_frames:,} for the k and m rows); "
        f"{settings.reps} interleaved reps after 1 warm-up (none for start-up rows)",
        f"collectors: frames_per_batch={settings.frames_per_batch}; multi-process rows: {NUM_WORKERS} workers x "
        f"{ENVS_PER_WORKER} envs, start method {settings.start_method}; action-server rows: policy on "
        f"{settings.policy_device}; Ray rows: {NUM_WORKERS} actors x {ENVS_PER_WORKER} envs, Ray on loopback",
        "build ms: env + collector construction (workers included); 1st batch ms: from the start of construction to "
        "the first batch (medians)",
        f"{machine['cpus']} cpus, 1-min load average {machine['load_before']:.2f} before, "
        f"{machine['load_after']:.2f} after, {machine['wall_s']:.0f} s in all (other processes skew every row; "
        "the interleaving spreads that over all rows)",
        "versions: " + "; ".join(f"{where}: " + ", ".join(f"{k} {v}" for k, v in found.items())
                                 for where, found in machine["versions"].items()),
    ]


def to_json(results: dict[str, RowResult], settings: Settings, machine: dict) -> dict:
    return {
        "settings": {**asdict(settings), "costly_frames": settings.costly_frames, "env": ENV_ID,
                     "num_envs": NUM_ENVS, "num_workers": NUM_WORKERS, "hidden": HIDDEN,
                     "busy_step_us": BUSY_STEP_US, "heavy_hidden": HEAVY_HIDDEN, "heavy_step_us": HEAVY_STEP_US},
        "machine": machine,
        "rows": {
            key: {
                "label": result.row.label,
                "num_envs": result.row.num_envs,
                "frames": None if result.row.startup else settings.frames_of(result.row),
                "frames_per_s": result.fps,
                "construct_ms": result.values("construct_ms"),
                "startup_ms": result.values("startup_ms"),
                "shutdown_ms": result.values("shutdown_ms"),
                "median_frames_per_s": statistics.median(result.fps) if result.fps else None,
            }
            for key, result in results.items()
        },
        "ratios": {
            f"{n}/{d}": statistics.median(results[n].fps) / statistics.median(results[d].fps)
            for n, d, _, _ in COMPARISONS if n in results and d in results
        },
        "ratios_of_max": {
            f"{n}/{d}": max(results[n].fps) / max(results[d].fps)
            for n, d, _, _ in COMPARISONS if n in results and d in results
        },
    }


def local_versions() -> dict:
    import tensordict
    return {"python": platform.python_version(), "torch": torch.__version__, "tensordict": tensordict.__version__,
            "gymnasium": gym.__version__, "numpy": np.__version__}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=20_000,
                        help="frames per measurement (default 20000; a quarter, in whole batches, for the k and m "
                             "rows)")
    parser.add_argument("--frames-per-batch", type=int, default=1000,
                        help=f"collector batch size, a divisor of --frames and a multiple of {NUM_ENVS} (default 1000)")
    parser.add_argument("--reps", type=int, default=5, help="interleaved repetitions (default 5)")
    parser.add_argument("--start-method", choices=START_METHODS, default="fork",
                        help="workers of the multi-process throughput rows f, g, i, j, k2-k4, l, m2-m5 (default fork); "
                             "the s rows time spawn and fork start-up on their own")
    parser.add_argument("--policy-device", default="cpu",
                        help="where the action-server rows (k3, k4, l, m3-m5) run the policy, e.g. cuda (default cpu)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2000 frames, batches of 200, 2 reps")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of {','.join(ROWS)}")
    parser.add_argument("--json", type=Path, help="also write the raw numbers here")
    args = parser.parse_args(argv)
    if args.quick:
        args.frames, args.frames_per_batch, args.reps = 2000, 200, 2
    unknown = [key for key in args.rows.split(",") if key not in ROWS]
    if unknown:
        parser.error(f"--rows: unknown {unknown}; rows are {list(ROWS)}")
    if args.frames_per_batch % NUM_ENVS or args.frames % args.frames_per_batch or args.frames < 1:
        parser.error(f"--frames ({args.frames}) must be a positive multiple of --frames-per-batch "
                     f"({args.frames_per_batch}), itself a multiple of {NUM_ENVS}")
    if args.reps < 1:
        parser.error("--reps must be >= 1")
    return args


def start_torchrl_worker(rows: list[Row]) -> tuple[TorchrlWorker | None, str | None]:
    """The worker when a torchrl row is asked for and .venv-bench exists; else why not."""
    if not any(row.needs_torchrl for row in rows):
        return None, None
    if not BENCH_PYTHON.exists():
        return None, f"torchrl rows skipped: {BENCH_PYTHON} is missing; `make bench` (or `make bench-venv`) creates it"
    return TorchrlWorker(BENCH_PYTHON), None


def start_ray(rows: list[Row]) -> tuple[str | None, str | None]:
    """Start a local Ray on loopback when a Ray row is asked for and Ray is installed:
    ``(ray version, None)``; else ``(None, why not)``."""
    if not any(row.needs_ray for row in rows):
        return None, None
    try:
        import ray
    except ImportError:
        return None, "Ray rows skipped: ray is not installed; pip install -e '.[ray]' adds it"
    from rlcollect.collectors.ray import start_local_ray

    start_local_ray(num_cpus=NUM_WORKERS)  # one CPU per actor; a measurement's actors are gone before the next
    return ray.__version__, None


def stop_ray() -> None:
    import ray

    ray.shutdown()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    configure_torch()
    settings = Settings(args.frames, args.frames_per_batch, args.reps, args.start_method, args.policy_device)
    rows = [ROWS[key] for key in args.rows.split(",")]
    worker, torchrl_skipped = start_torchrl_worker(rows)
    if torchrl_skipped:
        rows = [row for row in rows if not row.needs_torchrl]
    if any(row.needs_cuda for row in rows) and not torch.cuda.is_available():
        print(f"rows {','.join(row.key for row in rows if row.needs_cuda)} skipped: torch sees no CUDA device",
              file=sys.stderr)
        rows = [row for row in rows if not row.needs_cuda]
    ray_version, ray_skipped = start_ray(rows)
    if ray_skipped:
        rows = [row for row in rows if not row.needs_ray]
    versions = {**local_versions(), **({"ray": ray_version} if ray_version else {})}
    machine = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0],
               "versions": {"main": versions, **({"torchrl_venv": worker.versions} if worker else {})}}
    started = time.perf_counter()
    try:
        print(f"benchmarking rows {','.join(row.key for row in rows)} ...", file=sys.stderr, flush=True)
        results = run_rows(rows, settings, worker)
    finally:
        if worker is not None:
            worker.close()
        if ray_version:
            stop_ray()
    machine["load_after"] = os.getloadavg()[0]
    machine["wall_s"] = time.perf_counter() - started
    skipped = [note for note in (torchrl_skipped, ray_skipped) if note]
    print(format_report(results, settings, report_header(settings, machine), skipped))
    if args.json:
        args.json.write_text(json.dumps(to_json(results, settings, machine), indent=2))
        print(f"\nraw numbers written to {args.json}")


if __name__ == "__main__":
    main()
