"""Collection throughput with images: rlcollect's Collector on ALE Breakout-v5 with the
env=breakout preset's wrappers vs a hand-written gymnasium SyncVectorEnv loop with the same
wrappers and the same CNN policy.

    .venv/bin/python scripts/bench_atari.py [--envs 8] [--frames 4096] [--reps 5]

Both rows: 8 envs, AtariPreprocessing (no-op starts, frame skip 4, 84x84 grayscale),
FireReset, 4 stacked frames (uint8 [4, 84, 84]); the policy is the preset's ActorCritic
(NatureCNN encoder), one torch thread, sampling its action with torch.no_grad.
  hand   SyncVectorEnv; per step: observations -> TensorDict -> policy -> actions -> step
  rlcol  Collector(GymEnv(<preset env>, 8), policy, frames_per_batch=envs x 128)
Rows interleaved rep by rep; reported: median frames/s, and the bytes per frame of a
collector batch (observation and next observation stay uint8).
"""
from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import torch
from tensordict import TensorDict

from rlcollect import ActorCritic, Collector, GymEnv
from rlcollect.envs.atari import FireReset


def make_env() -> gym.Env:
    import ale_py

    gym.register_envs(ale_py)
    env = gym.make("ALE/Breakout-v5", frameskip=1)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(FireReset(env), stack_size=4)


def policy_for(env) -> ActorCritic:
    torch.manual_seed(0)
    return ActorCritic(env.single_observation_space if hasattr(env, "single_observation_space")
                       else env.observation_space, env.action_space if not hasattr(env, "single_action_space")
                       else env.single_action_space)


@torch.no_grad()
def hand(envs: int, frames: int) -> float:
    vec = gym.vector.SyncVectorEnv([make_env for _ in range(envs)],
                                   autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    policy = policy_for(vec)
    observation, _ = vec.reset(seed=0)
    start = time.perf_counter()
    for _ in range(frames // envs):
        td = TensorDict({"observation": torch.from_numpy(observation)}, [envs])
        action = policy(td).get("action").numpy()
        observation, *_ = vec.step(action)
    fps = frames // envs * envs / (time.perf_counter() - start)
    vec.close()
    return fps


@torch.no_grad()
def rlcollect(envs: int, frames: int) -> tuple[float, float]:
    env = GymEnv(make_env, envs, seed=0)
    policy = policy_for(env)
    collector = Collector(env, policy, frames_per_batch=envs * 128)
    batches = iter(collector)
    batch = next(batches)  # warm-up batch, not timed
    bytes_per_frame = batch.bytes() / batch.numel()
    start = time.perf_counter()
    collected = 0
    while collected < frames:
        collected += next(batches).numel()
    fps = collected / (time.perf_counter() - start)
    collector.shutdown()
    return fps, bytes_per_frame


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=8)
    parser.add_argument("--frames", type=int, default=4096)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows: dict[str, list[float]] = {"hand": [], "rlcollect": []}
    bytes_per_frame = 0.0
    for rep in range(args.reps):
        rows["hand"].append(hand(args.envs, args.frames))
        fps, bytes_per_frame = rlcollect(args.envs, args.frames)
        rows["rlcollect"].append(fps)
        print(f"rep {rep + 1}/{args.reps}: hand {rows['hand'][-1]:,.0f}  rlcollect {fps:,.0f} frames/s", flush=True)
    hand_fps, ours = statistics.median(rows["hand"]), statistics.median(rows["rlcollect"])
    print(f"\nBreakout-v5, {args.envs} envs, preset wrappers, NatureCNN policy, 1 torch thread")
    print(f"hand-written SyncVectorEnv loop  {hand_fps:10,.0f} frames/s (min {min(rows['hand']):,.0f}, "
          f"max {max(rows['hand']):,.0f})")
    print(f"rlcollect Collector              {ours:10,.0f} frames/s (min {min(rows['rlcollect']):,.0f}, "
          f"max {max(rows['rlcollect']):,.0f})")
    print(f"ratio {ours / hand_fps:.2f}x (target >= 0.9x); a batch costs {bytes_per_frame:,.0f} bytes per frame "
          f"(2 x 4 x 84 x 84 uint8 = {2 * 4 * 84 * 84:,} for the observations)")


if __name__ == "__main__":
    main()
