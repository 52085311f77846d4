"""The optimizer step of a batched sweep's update: torch's fused Adam against MemberAdam
(docs/sweeps.md, "Each member's Adam").

    python scripts/bench_member_adam.py --members 2,8,32 --repeat 2000

For the stacked parameters of S CartPole ActorCritics (64 x 64, the default model), the
time of one optimizer step (microseconds; the median of 7 rounds of --repeat steps),
gradients set once beforehand:

    fused                   torch.optim.Adam(fused=True): every member steps, one lr
    fused + lr per member   the same with lr 1, then each member's step scaled by its lr
                            (what MemberPPO did for members with lrs of their own)
    MemberAdam              every member steps, an lr each
    MemberAdam, half        the first half of the members step, the others sit out
    MemberAdam, one         one member steps (a model's last member still training)

    python scripts/bench_member_adam.py --update --members 8,32 --repeat 15

times a whole MemberPPO.update instead (milliseconds, the median of --repeat updates on one
CartPole rollout of 8 envs x 32 steps per member; PPO's default settings: 20 epochs of one
256-step minibatch) for S members that differ in lr; run it with PYTHONPATH set to an older
checkout to time that checkout's update.
"""
from __future__ import annotations

import argparse
import functools
import statistics
import time

import gymnasium as gym
import torch

from rlcollect.modules.actor_critic import ActorCritic
from rlcollect.sweeps.stacking import stack_modules


def stacked_policy(members: int) -> torch.nn.Module:
    solos = []
    for seed in range(members):
        torch.manual_seed(seed)
        solos.append(ActorCritic(gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2)))
    return stack_modules(solos)


def stacked_parameters(members: int) -> list[torch.nn.Parameter]:
    parameters = list(stacked_policy(members).parameters())
    for parameter in parameters:
        parameter.grad = torch.randn_like(parameter) * 1e-2
    return parameters


def per_step(step, repeat: int) -> float:
    """Median microseconds per call of ``step`` over 7 rounds of ``repeat`` calls."""
    for _ in range(min(repeat, 100)):
        step()
    rounds = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(repeat):
            step()
        rounds.append((time.perf_counter() - start) / repeat * 1e6)
    return statistics.median(rounds)


def scaled(optimizer, parameters, lrs: torch.Tensor):
    """The fused step with lr 1, then each member's step times its lr."""
    def step() -> None:
        with torch.no_grad():
            before = [parameter.detach().clone() for parameter in parameters]
            optimizer.step()
            for parameter, old in zip(parameters, before):
                parameter.sub_(old).mul_(lrs.reshape(-1, *([1] * (parameter.dim() - 1)))).add_(old)
    return step


def updates(members_list: list[int], repeat: int) -> None:
    """The median time of MemberPPO.update for S members with lrs of their own."""
    from rlcollect.buffers.rollout import RolloutBuffer
    from rlcollect.collectors.single import Collector
    from rlcollect.envs.gym_env import GymEnv
    from rlcollect.seeding import member_env_seeds
    from rlcollect.sweeps.members import MemberPolicy, MemberPPO

    print("| S | optimizer | update ms | per minibatch step ms |")
    print("|---|---|---|---|")
    for members in members_list:
        policy = MemberPolicy(stacked_policy(members), members,
                              [torch.Generator().manual_seed(member) for member in range(members)])
        env = GymEnv("CartPole-v1", 8 * members, seed=member_env_seeds(list(range(members)), 8))
        buffer = RolloutBuffer(8 * members, 32, (4,), (), observation_dtype=torch.float32, action_dtype=torch.int64)
        collector = Collector(env, policy, frames_per_batch=8 * members * 32, total_frames=8 * members * 32)
        buffer.add(next(iter(collector)))
        collector.shutdown()
        rows = buffer.rollout.clone()
        ppo = MemberPPO(policy, member_options={"lr": [1e-3 * (1 + member / members) for member in range(members)]},
                        lr=1e-3, gamma=0.98, gae_lambda=0.8, epochs=20, minibatch_size=256, total_frames=10**6,
                        anneal_clip=True)
        times = []
        for _ in range(repeat):
            buffer.rollout.update(rows)
            buffer.add(buffer.rollout)
            start = time.perf_counter()
            ppo.update(buffer, 1000)
            times.append(time.perf_counter() - start)
        median = statistics.median(times) * 1e3
        print(f"| {members} | {type(ppo.optimizer).__name__} | {median:.1f} | {median / 20:.2f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", default="2,8,32", type=lambda text: [int(value) for value in text.split(",")])
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--update", action="store_true", help="time MemberPPO.update, not the optimizer step")
    options = parser.parse_args()
    torch.set_num_threads(1)
    if options.update:
        updates(options.members, options.repeat)
        return
    from rlcollect.sweeps.optim import MemberAdam
    print(f"torch {torch.__version__}, 1 thread; microseconds per optimizer step (median of 7 rounds of "
          f"{options.repeat})")
    print("| S | fused | fused + lr per member | MemberAdam | MemberAdam, half stepping | MemberAdam, one stepping |")
    print("|---|---|---|---|---|---|")
    for members in options.members:
        parameters = stacked_parameters(members)
        lrs = [1e-3 * (1 + member) for member in range(members)]
        fused = torch.optim.Adam(parameters, lr=1e-3, eps=1e-5, fused=True)
        times = [per_step(fused.step, options.repeat)]
        fused_one = torch.optim.Adam(parameters, lr=1.0, eps=1e-5, fused=True)
        times.append(per_step(scaled(fused_one, parameters, torch.tensor(lrs)), options.repeat))
        adam = MemberAdam(parameters, members, lr=lrs, eps=1e-5)
        times.append(per_step(adam.step, options.repeat))
        times.append(per_step(functools.partial(adam.step, list(range(members // 2))), options.repeat))
        times.append(per_step(functools.partial(adam.step, [0]), options.repeat))
        print(f"| {members} | " + " | ".join(f"{value:.0f}" for value in times) + " |", flush=True)


if __name__ == "__main__":
    main()
