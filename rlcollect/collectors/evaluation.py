"""Evaluation: deterministic episodes on envs of their own, beside any training collector.

    EvalCollector(env, policy, eval_n_envs=10, eval_max_steps=20_000).evaluate()
      ──▶ a Collector (exploration_type="deterministic", actions_only=True: the policy's
          action alone) on a batched env of eval_n_envs, reset at each call (with
          EvalCollector's seed, if given: every call the same episode starts), run batch
          after batch until the trajectories asked for are complete or the step budget is
          spent ──▶ TrajectoryInfo of completed ones only

Running the same Collector loop means a recurrent policy gets its hidden state carried and
reset exactly as in training. A trajectory still running when the budget (eval_max_steps,
counted over all eval envs as in rlpyt) is spent is dropped, never counted as a shorter
one: counting cut episodes biases the mean return towards short episodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlcollect.collectors.single import Collector
from rlcollect.envs.gym_env import EnvSource, GymEnv
from rlcollect.envs.staging import StagedEnv
from rlcollect.keys import TRAJ_IDS
from rlcollect.trajectories import EpisodeTracker, TrajectoryInfo, end_rows

STEPS_PER_BATCH = 64  # per env: how often the stop conditions are checked


@dataclass(frozen=True)
class EvalResult:
    """The completed evaluation trajectories (``trajectories``), with their returns and
    lengths as lists, and ``envs`` the eval env (its row) each one ran in; ``cut`` counts
    those dropped because the step budget ran out."""

    returns: list[float]
    lengths: list[int]
    trajectories: list[TrajectoryInfo] = field(default_factory=list)
    cut: int = 0
    envs: list[int] = field(default_factory=list)

    @property
    def mean_return(self) -> float:
        return sum(self.returns) / len(self.returns)


class EvalCollector:
    """Evaluation episodes of ``policy`` on ``eval_n_envs`` envs of its own.

    Args:
        create_env_fn: a batched GymEnv or torch env, or what GymEnv builds one from (an id or a
            zero-argument callable returning a gymnasium env) with ``eval_n_envs`` copies.
        policy: the policy evaluated (used in place: evaluation sees the current weights).
        eval_n_envs: envs stepped together (ignored when create_env_fn is a GymEnv).
        eval_max_steps: step budget of one ``evaluate()``, over all envs (time x envs); None:
            no budget (then episodes must end by themselves).
        eval_max_trajectories: stop once this many trajectories completed, each env running
            episodes back to back; None: each env runs exactly one episode (the unbiased
            default: no env's second, typically short-lived, episode is counted).
        exploration_type: "deterministic" (the policy's mode) or "random".
        gamma: discount of the trajectories' discounted returns.
        seed: the eval envs' seed (env i: ``seed + i``, or ``seed[i]`` for a list): every
            ``evaluate()`` resets them with it, so each evaluation (at any frame, in any
            process) starts its episodes from the same states. None: the envs keep the
            seeding they were built with, their draws going on from one evaluation to the
            next.
    """

    def __init__(self, create_env_fn: GymEnv | EnvSource, policy, *, eval_n_envs: int = 10,
                 eval_max_steps: int | None = None, eval_max_trajectories: int | None = None,
                 exploration_type: str = "deterministic", gamma: float = 0.99, seed: int | None = None) -> None:
        built = isinstance(create_env_fn, StagedEnv)  # a GymEnv, a torch env
        env = create_env_fn if built else GymEnv(create_env_fn, eval_n_envs, seed=seed)
        self.num_envs = env.num_envs or 1
        if eval_max_steps is not None and eval_max_steps < self.num_envs:
            raise ValueError(f"eval_max_steps={eval_max_steps} is less than one step of each of the "
                             f"{self.num_envs} eval envs")
        if eval_max_trajectories is not None and eval_max_trajectories < 1:
            raise ValueError(f"eval_max_trajectories must be None or >= 1, got {eval_max_trajectories}")
        self.eval_max_steps, self.eval_max_trajectories, self.gamma = eval_max_steps, eval_max_trajectories, gamma
        steps = STEPS_PER_BATCH if eval_max_steps is None else min(STEPS_PER_BATCH, eval_max_steps // self.num_envs)
        self.collector = Collector(env, policy, frames_per_batch=self.num_envs * steps,
                                   exploration_type=exploration_type, actions_only=True)
        self.env, self.seed, self.policy = env, seed, policy

    def evaluate(self, rows=None) -> EvalResult:
        """Reset the eval envs and run them until done (see the class doc). ``rows``: with
        one episode per env, count only the episodes of these env rows (the others may be
        paused, ``GymEnv.pause``); None: every row."""
        if self.seed is not None:
            self.env.set_seed(self.seed)  # applied by the reset below: the same episode starts every time
        self.collector.reset()
        tracker = EpisodeTracker(self.gamma)
        counted: set[int] | None = None  # one episode per env: the trajectory ids each env starts with
        completed: list[TrajectoryInfo] = []
        env_of: dict[int, int] = {}  # trajectory id -> the env row it ran in
        steps, started = 0, set()
        paused: list[int] = []  # envs whose one episode is counted: left unstepped (list backend) till the end
        # a policy with rows_idle(rows) is told which rows no longer need actions (lockstep members skip theirs)
        idle = getattr(self.policy, "rows_idle", None)
        try:
            for batch in self.collector:
                ids = batch.get(TRAJ_IDS)
                if counted is None and self.eval_max_trajectories is None:
                    first = ids.reshape(self.num_envs, -1)[:, 0]
                    counted = set((first if rows is None else first[torch.as_tensor(rows, dtype=torch.long)]).tolist())
                started.update(ids.unique().tolist())
                ended = _by_end_time(batch, [info for info in tracker.infos(batch)
                                             if counted is None or info.traj_id in counted])
                if ended:
                    env_of.update(end_rows(batch))
                completed += ended
                steps += batch.numel()
                if counted is not None and len(completed) == len(counted):
                    break
                if self.eval_max_trajectories is not None and len(completed) >= self.eval_max_trajectories:
                    break
                if self.eval_max_steps is not None and steps + self.collector.frames_per_batch > self.eval_max_steps:
                    break
                if counted is not None and ended:
                    paused += self._pause([env_of[info.traj_id] for info in ended])
                    if callable(idle):
                        idle(paused)
        finally:
            if paused:
                self.env.unpause(paused)
            if callable(idle):
                idle(())
        cut = len(counted if counted is not None else started) - len(completed)
        if self.eval_max_trajectories is not None:
            completed = completed[:self.eval_max_trajectories]
        return EvalResult(returns=[info.episode_return for info in completed],
                          lengths=[info.length for info in completed], trajectories=completed, cut=max(cut, 0),
                          envs=[env_of.get(info.traj_id, -1) for info in completed])

    def _pause(self, rows: list[int]) -> list[int]:
        """Pause the eval envs of ``rows`` (their episode is counted) where the env can
        (``GymEnv.pause``): they step no further, so how often each env is reset depends
        on its own episodes alone, not on how long the others run. Returns the rows paused."""
        pause = getattr(self.env, "pause", None)
        return rows if callable(pause) and pause(rows) else []

    def shutdown(self) -> None:
        self.collector.shutdown()
        self.env.close()


def _by_end_time(batch, infos: list[TrajectoryInfo]) -> list[TrajectoryInfo]:
    """``infos`` in the order their trajectories ended (the tracker lists them env by env):
    a max_trajectories cut then keeps the first to finish, as a step-by-step loop would."""
    done = batch.get(("next", "done"))
    ids, time = batch.get(TRAJ_IDS)[done], done.nonzero()[:, -1]
    end = dict(zip(ids.tolist(), time.tolist()))
    return sorted(infos, key=lambda info: end[info.traj_id])


def evaluate_episodes(env: GymEnv, policy, *, max_steps: int | None = None,
                      exploration_type: str = "deterministic") -> EvalResult:
    """One episode in each sub-env of ``env``, under ``exploration_type``, at most
    ``max_steps`` steps of each env; episodes still running then are not counted."""
    budget = None if max_steps is None else max_steps * (env.num_envs or 1)
    return EvalCollector(env, policy, eval_max_steps=budget, exploration_type=exploration_type).evaluate()
