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
    MemberAdam, masked      the first half of the members step, the others sit out
"""
from __future__ import annotations

import argparse
import functools
import statistics
import time

import gymnasium as gym
import torch

from rlcollect.modules.actor_critic import ActorCritic
from rlcollect.sweeps.optim import MemberAdam
from rlcollect.sweeps.stacking import stack_modules


def stacked_parameters(members: int) -> list[torch.nn.Parameter]:
    solos = []
    for seed in range(members):
        torch.manual_seed(seed)
        solos.append(ActorCritic(gym.spaces.Box(-5, 5, (4,)), gym.spaces.Discrete(2)))
    parameters = list(stack_modules(solos).parameters())
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--members", default="2,8,32", type=lambda text: [int(value) for value in text.split(",")])
    parser.add_argument("--repeat", type=int, default=2000)
    options = parser.parse_args()
    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, 1 thread; microseconds per optimizer step (median of 7 rounds of "
          f"{options.repeat})")
    print("| S | fused | fused + lr per member | MemberAdam | MemberAdam, half the members masked |")
    print("|---|---|---|---|---|")
    for members in options.members:
        parameters = stacked_parameters(members)
        lrs = [1e-3 * (1 + member) for member in range(members)]
        fused = torch.optim.Adam(parameters, lr=1e-3, eps=1e-5, fused=True)
        times = [per_step(fused.step, options.repeat)]
        fused_one = torch.optim.Adam(parameters, lr=1.0, eps=1e-5, fused=True)
        times.append(per_step(scaled(fused_one, parameters, torch.tensor(lrs)), options.repeat))
        adam = MemberAdam(parameters, members, lr=lrs, eps=1e-5)
        times.append(per_step(adam.step, options.repeat))
        half = list(range(members // 2))
        times.append(per_step(functools.partial(adam.step, half), options.repeat))
        print(f"| {members} | " + " | ".join(f"{value:.0f}" for value in times) + " |", flush=True)


if __name__ == "__main__":
    main()
