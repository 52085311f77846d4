"""A batched sweep: S members built as one policy, one collector, one learner and one
evaluator (``build_sweep``), trained together, each member a normal run in its own folder
(``Sweep.run``; docs/sweeps.md). PPO (feed-forward or recurrent), DQN and SAC, with any
shipped encoder, stack their members into one model (members.py, member_dqn.py, member_sac.py,
stacking.py); every other algorithm and model trains its members' solo policies and
learners in lockstep (lockstep.py), on one collector.

Every member gets a Pipeline of its own, whose collector, learner, evaluator and policy
are views of its share of the shared parts, and is driven by the training loop's own
``Session``: its metrics, evaluations, best.pt, checkpoints (in its solo run's shapes, so
``rlcollect eval``, ``export`` and ``resume=`` read them as a solo run's), summary.json and
W&B run are those of a solo run. A member that is solved, diverges or finds a non-finite
env value stops there (its parameters frozen from then on) while the others go on.
"""
from __future__ import annotations

import copy
import logging
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import torch
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from tensordict import TensorDict, TensorDictBase
from torch import nn
from tqdm import tqdm

from rlcollect.algos.learners import Learner
from rlcollect.collectors.evaluation import EvalCollector, EvalResult
from rlcollect.collectors.single import Collector
from rlcollect.config import eval_every_frames
from rlcollect.errors import ConfigError
from rlcollect.logging.run_logger import episode_tracker
from rlcollect.logging.runs import solved_threshold
from rlcollect.pipeline.builders import (
    algo_collection,
    discount,
    learner_class,
    make_collector,
    make_env,
    make_learner,
    make_logger,
    make_policy,
    make_replay_buffer,
    probe_spaces,
)
from rlcollect.pipeline.checks import check_config, warn_combination
from rlcollect.pipeline.lifecycle import Pipeline, load_resumed_state
from rlcollect.pipeline.loop import DrivenPhases, Session, collected
from rlcollect.pipeline.progress import Progress
from rlcollect.seeding import eval_seed, member_env_seeds
from rlcollect.sweeps.grouping import check_sweep, lockstep_reason, member_options, seeds_each_env, stacked_kind
from rlcollect.sweeps.lockstep import LockstepLearner, LockstepPolicy, MemberStreams
from rlcollect.sweeps.member_dqn import MemberDQNLearner, MemberQPolicy, MemberReplay
from rlcollect.sweeps.member_sac import MemberSACActor, MemberSACLearner
from rlcollect.sweeps.members import MemberPolicy, MemberPPOLearner
from rlcollect.sweeps.pbt import PopulationTraining, lockstep_refusal
from rlcollect.sweeps.stacking import load_member_state, member_state_dict, stack_modules, unstackable_layer
from rlcollect.trajectories import end_rows

log = logging.getLogger(__name__)

MEMBER_LEARNERS = {kind: f"{learner.__module__}.{learner.__name__}"  # a stacked model's learner, by kind
                   for kind, learner in (("ppo", MemberPPOLearner), ("dqn", MemberDQNLearner))}
PROBE_STEPS = 8  # the steps of each member's batch its policy's outputs are checked on (as a solo run's)
# ---------------------------------------------------------------------------- the members' views
class MemberModule(nn.Module):
    """Member ``member`` of the stacked policy, as the training loop sees a run's policy: its
    parameters (views of its rows), its state dict in the solo shapes, and whether its
    outputs are finite (the sweep computes its actions, with every member's)."""

    def __init__(self, sweep: "Sweep", solo: nn.Module, member: int) -> None:
        super().__init__()
        self._sweep, self._member = sweep, member  # the sweep is no Module: nothing is registered
        self._solo = [solo]  # not a submodule: its own weights are never used

    def parameters(self, recurse: bool = True):
        return (parameter[self._member] for parameter in self._sweep.policy.stacked.parameters())

    def state_dict(self, *args, **kwargs) -> dict:
        return member_state_dict(self._sweep.policy.stacked.state_dict(), self._solo[0], self._member)

    def load_state_dict(self, state_dict: dict, strict: bool = True, assign: bool = False):
        """Its rows of the stacked policy from a solo policy's state dict (a resumed member's)."""
        load_member_state(self._sweep.policy.stacked, state_dict, self._member)

    def outputs_finite(self, batch: TensorDictBase) -> bool:
        """Whether this member's outputs on a few of its batch's steps are finite (the
        sweep's one probe of every member, ``Sweep.outputs_finite``)."""
        return self._sweep.outputs_finite()[self._member]

    def parameters_finite(self) -> bool:
        """Whether this member's parameters are finite (``Sweep.parameters_finite``)."""
        return self._sweep.parameters_finite()[self._member]


class MemberCollector:
    """Member ``member``'s share of the shared collector: its frames, its episodes."""

    background = False

    def __init__(self, sweep: "Sweep", member: int) -> None:
        self.sweep, self.member = sweep, member
        self.total_frames = sweep.cfgs[member].total_frames
        self.frames_per_batch = sweep.collector.frames_per_batch // sweep.members

    @property
    def frames(self) -> int:
        return self.sweep.collector.frames // self.sweep.members

    def hook_results(self) -> list:
        return [episodes[self.member] for episodes in self.sweep.hook_results]

    def pop_worker_restarts(self) -> list:
        return []

    @property
    def writes_between_batches(self) -> bool:
        """The shared collector's: the members' buffers are written in this thread as it is
        iterated (their checkpoints then save a full buffer in place, not copied)."""
        return self.sweep.collector.writes_between_batches

    def update_policy_weights_(self) -> None:
        pass  # the sweep's collector gets the weights once per batch, for every member

    def state_dict(self) -> dict:
        return {**self.sweep.collector.state_dict(), "frames": self.frames}

    def load_state_dict(self, state: dict) -> None:
        """The shared collector's state from a resumed member's checkpoint (every member of
        one model is at the same frame: ``build_sweep`` checks)."""
        self.sweep.collector.load_state_dict({**state, "frames": int(state["frames"]) * self.sweep.members})

    def shutdown(self) -> None:
        pass


class MemberLearner(Learner):
    """Member ``member``'s share of the sweep's learner: its metrics of the batch's update,
    its state as its solo run's PPOLearner saves it."""

    def __init__(self, sweep: "Sweep", member: int) -> None:
        self.sweep, self.member = sweep, member

    def learn(self, batch, frames: int) -> dict[str, float]:
        return self.sweep.metrics[self.member]

    def state_dict(self) -> dict:
        return self.sweep.learner.member_state_dict(self.member, self.sweep.solo)

    def load_state_dict(self, state: dict) -> None:
        self.sweep.learner.load_member_state_dict(self.member, state)


class MemberEvaluator:
    """Member ``member``'s episodes of the sweep's evaluation at the current frame."""

    def __init__(self, sweep: "Sweep", member: int) -> None:
        self.sweep, self.member = sweep, member

    def evaluate(self) -> EvalResult:
        return self.sweep.evaluation()[self.member]

    def shutdown(self) -> None:
        pass


class MemberEpisodeHook:
    """The sweep collector's post-collect hook: the episodes a batch completed, as a list of
    S lists of TrajectoryInfo (member m's from its rows), from one tracker of every row, or
    one per member where their discounts differ (``gamma``: one per member)."""

    def __init__(self, members: int, gamma: float | list[float], info_keys) -> None:
        gammas = gamma if isinstance(gamma, list) else [gamma] * members
        self.members = members
        self.tracker = episode_tracker(gammas[0], info_keys) if len(set(gammas)) == 1 else None
        self.trackers = [episode_tracker(value, info_keys) for value in gammas] if self.tracker is None else []

    def __call__(self, batch: TensorDictBase) -> list[list]:
        rows_per_member = batch.shape[0] // self.members
        if self.tracker is None:
            return [tracker.infos(batch[member * rows_per_member:(member + 1) * rows_per_member])
                    for member, tracker in enumerate(self.trackers)]
        infos = self.tracker.infos(batch)
        if self.members == 1:
            return [infos]
        row_of = end_rows(batch)
        episodes: list[list] = [[] for _ in range(self.members)]
        for info in infos:
            episodes[row_of[info.traj_id] // rows_per_member].append(info)
        return episodes


def split_evaluation(result: EvalResult, members: int, envs_per_member: int) -> list[EvalResult]:
    """Each member's part of an evaluation of all members' eval envs (one episode per env)."""
    parts = []
    for member in range(members):
        mine = [index for index, env in enumerate(result.envs) if env // envs_per_member == member]
        parts.append(EvalResult(returns=[result.returns[i] for i in mine], lengths=[result.lengths[i] for i in mine],
                                trajectories=[result.trajectories[i] for i in mine], cut=envs_per_member - len(mine),
                                envs=[result.envs[i] - member * envs_per_member for i in mine]))
    return parts


# ---------------------------------------------------------------------------- the sweep
@dataclass
class Sweep:
    """The shared parts of a batched sweep and its members' pipelines (``build_sweep``)."""

    cfgs: list[DictConfig]
    policy: MemberPolicy | LockstepPolicy
    solo: nn.Module  # member 0's solo policy: the shapes a member's state is saved in
    collector: Collector
    learner: MemberPPOLearner | LockstepLearner
    evaluator: EvalCollector
    envs_per_member: int
    pipelines: list[Pipeline] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)  # the last update's, member by member
    hook_results: list = field(default_factory=list)  # the last batch's episodes, [batch][member]
    errors: dict[int, tuple[BaseException, str]] = field(default_factory=dict)  # a failed member's error, traceback
    batch: TensorDictBase | None = None  # the batch being learnt from
    active: list[int] = field(default_factory=list)  # the members still training
    pbt: PopulationTraining | None = None  # population-based training among the members (None: off)
    _evaluated: tuple[int, list[EvalResult]] | None = None
    _probed: tuple[int, list[bool]] | None = None
    _checked: tuple[int, list[bool]] | None = None  # (frames, each member's parameters finite)

    @property
    def members(self) -> int:
        return len(self.cfgs)

    def evaluation(self) -> list[EvalResult]:
        """Every member's evaluation at the current frame: one evaluation of all members'
        eval envs, run for the first member that asks."""
        frames = self.collector.frames
        if self._evaluated is None or self._evaluated[0] != frames:
            episodes = self.evaluator.num_envs // self.members
            rows = [member * episodes + env for member in self.active for env in range(episodes)]
            self._evaluated = (frames, split_evaluation(self.evaluator.evaluate(rows=rows), self.members, episodes))
        return self._evaluated[1]

    @torch.no_grad()
    def outputs_finite(self) -> list[bool]:
        """Whether each member's policy outputs on the first few steps of its rows of the
        current batch are finite (as ``policy_outputs_finite`` probes a solo run's policy):
        one forward pass of the stacked policy, without moving the RNG streams."""
        frames = self.collector.frames
        if self._probed is None or self._probed[0] != frames:
            # each member's first steps of what the policy reads (a recurrent one: its stored hidden states too)
            inputs = {key: value.unflatten(0, (self.members, -1)).flatten(1, 2)[:, :PROBE_STEPS].flatten(0, 1)
                      for key in self.policy.in_keys if (value := self.batch.get(key, None)) is not None}
            first = next(iter(inputs.values()))
            probe = TensorDict(inputs, batch_size=[first.shape[0]], device=first.device)
            with self.policy.rng_kept():
                outputs = self.policy(probe)
            finite = torch.ones(self.members, dtype=torch.bool, device=first.device)
            for key in self.policy.out_keys:
                value = outputs.get(key)
                if value.is_floating_point():
                    finite &= torch.isfinite(value.reshape(self.members, -1)).all(1)
            self._probed = (frames, finite.tolist())
        return self._probed[1]

    @torch.no_grad()
    def parameters_finite(self) -> list[bool]:
        """Whether each member's parameters are finite after this batch's update: one
        check of the stacked parameters, one host synchronisation, for every member."""
        frames = self.collector.frames
        if self._checked is None or self._checked[0] != frames:
            finite = torch.stack([torch.isfinite(parameter.reshape(self.members, -1)).all(1)
                                  for parameter in self.policy.stacked.parameters()]).all(0)
            self._checked = (frames, finite.tolist())
        return self._checked[1]

    def member_batch(self, batch: TensorDictBase, member: int) -> TensorDictBase:
        rows = self.envs_per_member
        return batch if self.members == 1 else batch[member * rows:(member + 1) * rows]

    @torch.no_grad()
    def stop_member(self, member: int, failed: bool) -> None:
        """Member ``member`` learns no more and its envs stop stepping (``GymEnv.pause``:
        backend list, CartPole's vector; on others they step on, unread); a failed one's parameters
        are zeroed first (so that every action stays finite)."""
        self.active.remove(member)
        for env, rows_per_member in ((self.collector.env, self.envs_per_member),
                                     (self.evaluator.env, self.evaluator.num_envs // self.members)):
            pause = getattr(env, "pause", None)
            if callable(pause):
                pause(range(member * rows_per_member, (member + 1) * rows_per_member))
        if failed:
            self.policy.zero_member(member)
        stop = getattr(self.policy, "stop_member", None)  # members in lockstep: its policy calls end too
        if callable(stop):
            stop(member)
        self.learner.freeze(member)

    def run(self, stop: threading.Event | None = None, bar_position: int = 0) -> list[dict]:
        """Train every member until each is solved, finished, failed or stopped; returns
        their summaries (each also in its folder's summary.json). ``bar_position``: the
        terminal line of the progress bar (one per process of a sweep in several)."""
        # the members' wall-clock is the sweep's: one collection, update and evaluation for all of them
        phases = DrivenPhases(start_frames=self.pipelines[0].resumed_frames or 0)
        # the stop asked for (SIGINT / SIGTERM) as it stood when the batch came in, the same for every member: a signal
        # that lands while the members finish their batch one after the other stops them all after the next one, where
        # reading it member by member would stop some a batch before the others of one model
        batch_stop = None if stop is None else threading.Event()
        sessions = [Session(pipeline, batch_stop, bar=False, phases=phases) for pipeline in self.pipelines]
        self.active = list(range(self.members))
        cfg = self.cfgs[0]
        bar = tqdm(total=cfg.total_frames, unit="frame", desc=f"{self.members} members",
                   disable=not cfg.progress, dynamic_ncols=True, position=bar_position)
        shared = SimpleNamespace(collector=self.collector, learner=self.learner, background=False)
        try:
            for member in list(self.active):
                self._step(sessions, member, sessions[member].open)
            if self.pbt is not None:
                self.pbt.start(self.learner, self.pipelines)
            for batch, frames in collected(shared):
                if stop is not None and stop.is_set():
                    batch_stop.set()
                phases.charge("collect")
                member_frames = frames // self.members
                self.hook_results = self.collector.hook_results()
                self.metrics = self.learner.learn(batch, member_frames)
                self.batch = batch
                phases.charge("train")
                for member in list(self.active):
                    if self.pbt is not None:
                        self.pbt.log_settings(self.learner, self.pipelines, member, member_frames)
                    self._step(sessions, member, sessions[member].after_batch,
                               self.member_batch(batch, member), member_frames)
                if self.pbt is not None and self.active:  # after the members' evaluations of this batch
                    self.pbt.after_batch(self.learner, self.pipelines, self.active, member_frames)
                # the members' records, checks and checkpoints: with the evaluation when there was one
                evaluated = self._evaluated is not None and self._evaluated[0] == self.collector.frames
                phases.charge("eval" if evaluated else "train")
                self.collector.update_policy_weights_()
                bar.update(member_frames - bar.n)
                bar.set_postfix(active=len(self.active))
                if not self.active:
                    break
        except BaseException as failure:  # the shared parts failed (an env, the collector): every member did
            for member in self.active:
                sessions[member].failed(failure)
                self.errors[member] = (failure, traceback.format_exc())
            raise
        finally:
            bar.close()
            for member in range(self.members):
                self._close(sessions, member)
            self.shutdown()
        return [pipeline.progress.summary for pipeline in self.pipelines]

    def _step(self, sessions: list[Session], member: int, step, *args) -> None:
        """Run one member's ``step``; a member that ends there (True) or fails stops alone."""
        try:
            ended = step(*args)
        except Exception as error:
            sessions[member].failed(error)
            self.errors[member] = (error, traceback.format_exc())
            ended = True
        if ended:
            self.stop_member(member, failed=member in self.errors)
            self._close(sessions, member)

    def _close(self, sessions: list[Session], member: int) -> None:
        """Close member ``member``'s session (again: a no-op); a final checkpoint the disk
        refused is its failure, as a full disk at any other checkpoint is."""
        sessions[member].close()
        if sessions[member].final_failure is not None:
            self.errors[member] = (sessions[member].final_failure, "")

    def shutdown(self) -> None:
        self.collector.shutdown()
        self.evaluator.shutdown()


def shared_config(cfg: DictConfig, members: int, kind: str | None = "ppo") -> DictConfig:
    """The config the shared parts are built from: ``members`` times the frames per batch
    (and random frames at the start), the member learner of a stacked model of ``kind``
    (None: members in lockstep, each its own learner)."""
    shared = copy.deepcopy(cfg)
    OmegaConf.set_struct(shared, False)
    shared.collector.frames_per_batch = cfg.collector.frames_per_batch * members
    shared.collector.init_random_frames = algo_collection(cfg).init_random_frames * members
    if kind in MEMBER_LEARNERS:  # a stacked SAC is made from its members' solo learners, not from the config
        shared.algo._target_ = MEMBER_LEARNERS[kind]
    return shared


def member_generator(cfg: DictConfig) -> torch.Generator:
    """A member's own RNG stream, where its solo run's torch draws stand once its policy is
    initialised: on the CPU torch's global generator as it is now (right after the member's
    policy was built from ``torch.manual_seed(seed)``); on CUDA the device's generator,
    seeded with the member's seed as ``torch.manual_seed`` seeds it."""
    device = torch.device(cfg.device)
    generator = torch.Generator(device=device)
    if device.type == "cpu":
        generator.set_state(torch.get_rng_state())
    else:
        generator.manual_seed(cfg.seed)
    return generator


def build_sweep(cfgs: list[DictConfig], run_dirs: list[Path], names: list[dict],
                pbt: PopulationTraining | None = None, checkpoints: list[dict] | None = None) -> Sweep:
    """Check, seed and build a batched sweep of ``cfgs`` (one config per member, differing
    in seed and what ``shared_settings`` leaves out), member m in ``run_dirs[m]`` with W&B
    names ``names[m]`` (name, group, job_type). Member m's policy is initialised as its
    solo run's (torch seeded with its seed), and its envs are seeded as its solo run's.
    PPO, DQN and SAC with their shipped models stack into one model; anything else trains in lockstep
    (lockstep.py). ``pbt``: population-based training among the members of a stacked
    model (rlcollect.sweeps.pbt; None: off). No file is written before ``Sweep.run``
    opens the members' folders. ``checkpoints``: the members resume, member m from
    ``checkpoints[m]`` (its run folder's checkpoint.pt, loaded; every member at the same
    frame), each continuing as its solo run's resume would (``lifecycle.resume``)."""
    check_sweep(cfgs)
    if checkpoints is not None and len({int(checkpoint["frames"]) for checkpoint in checkpoints}) > 1:
        raise ConfigError("the members of one batched model resume from checkpoints at one frame; these are at "
                          + ", ".join(str(int(checkpoint["frames"])) for checkpoint in checkpoints))
    for cfg in cfgs:
        check_config(cfg)
    if pbt is not None:
        keep_every_evaluation(cfgs)
    cfg, members = cfgs[0], len(cfgs)
    torch.set_num_threads(cfg.torch_threads)
    solos, generators = [], []
    streams = MemberStreams(cfg.device)
    for index, member_cfg in enumerate(cfgs):
        torch.manual_seed(member_cfg.seed)
        if index == 0:
            observation_space, action_space = probe_spaces(cfg)
        solos.append(make_policy(member_cfg, observation_space, action_space))
        generators.append(member_generator(member_cfg))
        streams.capture()
    warn_combination(cfg)
    kind = stacked_kind(cfg)
    unstackable = None if kind is None else unstackable_layer(solos[0])
    if unstackable is not None:
        log.info("the members train in lockstep: %s", unstackable)
        kind = None
    if pbt is not None and kind is None:
        raise ConfigError(f"hydra.launcher.pbt: {lockstep_refusal(unstackable or lockstep_reason(cfg))}")
    if kind == "ppo":
        policy = MemberPolicy(stack_modules(solos), members, generators)
    elif kind == "dqn":
        policy, generators = MemberQPolicy(stack_modules(solos), streams), streams.generators
    elif kind == "sac":
        policy, generators = MemberSACActor(stack_modules(solos), streams), streams.generators
    else:
        policy, generators = LockstepPolicy(solos, streams), streams.generators
    envs_per_member = cfg.env.num_envs or 1
    seeds = [member_cfg.seed for member_cfg in cfgs]
    # gymnasium backends seed each env (member m's env i: seed_m + i); a torch env seeds each member's group of envs
    per_env = seeds_each_env(cfg)
    shared = shared_config(cfg, members, kind)
    built: list = []
    loggers = []
    try:
        collector = make_collector(
            shared, policy, run_dirs[0], total_frames=cfg.total_frames * members, num_envs=members * envs_per_member,
            seed=member_env_seeds(seeds, envs_per_member) if per_env else seeds,
            post_collect_hook=MemberEpisodeHook(members, [discount(member_cfg) for member_cfg in cfgs],
                                                list(cfg.env.info_keys)))
        built.append(collector)
        if kind in (None, "sac"):  # the members' solo learners: in lockstep, or stacked (SAC)
            learners, buffers = member_learners(cfgs, run_dirs, solos, streams, collector, observation_space,
                                                action_space, reopen=checkpoints is not None)
            learner = LockstepLearner(learners, streams, buffers) if kind is None else \
                MemberSACLearner(learners, policy, MemberReplay(buffers, streams))
        else:  # a replay learner samples each member's own buffer (made as in lockstep)
            replay = None if kind == "ppo" else MemberReplay(
                member_replay_buffers(cfgs, run_dirs, streams, reopen=checkpoints is not None), streams)
            learner = make_learner(shared, policy, collector, observation_space, action_space, replay,
                                   member_options=member_options(cfgs))
        eval_seeds = [eval_seed(seed) for seed in seeds]
        eval_env_seeds = member_env_seeds(eval_seeds, cfg.eval.episodes) if per_env else eval_seeds
        evaluator = EvalCollector(
            make_env(cfg, num_envs=members * cfg.eval.episodes, seed=eval_env_seeds),
            policy, eval_max_steps=None if cfg.eval.max_steps is None else members * cfg.eval.max_steps,
            gamma=discount(cfg), seed=eval_env_seeds)  # every evaluation from each member's solo run's seeds
        built.append(evaluator)
        sweep = Sweep(list(cfgs), policy, solos[0], collector, learner, evaluator, envs_per_member, pbt=pbt)
        for member, (member_cfg, run_dir, member_names) in enumerate(zip(cfgs, run_dirs, names)):
            checkpoint = None if checkpoints is None else checkpoints[member]
            logger = make_logger(member_cfg, Path(run_dir), **member_names,
                                 run_id=checkpoint["wandb_run_id"] or None if checkpoint else None,
                                 start_frames=int(checkpoint["frames"]) if checkpoint else 0)
            loggers.append(logger)
            progress = Progress.start(env_id=cfg.env.id, solved_return=solved_threshold(cfg.env.id,
                                                                                        cfg.env.solved_return),
                                      eval_every_frames=eval_every_frames(cfg),
                                      checkpoint_every_frames=cfg.checkpoint_every_frames)
            # a stacked model's member is a view of its rows; a member in lockstep is its solo policy
            member_policy = solos[member] if kind is None else MemberModule(sweep, solos[0], member)
            sweep.pipelines.append(Pipeline(
                member_cfg, Path(run_dir), member_policy, MemberCollector(sweep, member),
                MemberLearner(sweep, member), MemberEvaluator(sweep, member), logger, progress, names=member_names,
                generator=generators[member] if generators[member].device.type == "cpu" else None))
        for pipeline, checkpoint in zip(sweep.pipelines, checkpoints or []):
            load_resumed_state(pipeline, checkpoint)
    except BaseException:
        for part in reversed(built):
            part.shutdown()
        for logger in loggers:
            logger.close(exit_code=1)
        raise
    return sweep


def keep_every_evaluation(cfgs: list[DictConfig]) -> None:
    """Population-based training ranks its members on their evaluations: none is skipped for
    the time evaluating takes (``eval.max_time_share`` off in each member's config, its
    config.yaml included), so that a step never ranks a member on an older evaluation and
    the same sweep makes the same steps however busy the machine."""
    shares = {cfg.eval.max_time_share for cfg in cfgs} - {None}
    if shares:
        log.info("population-based training ranks the members on every evaluation: eval.max_time_share=%s is off",
                 ",".join(map(str, sorted(shares))))
    for cfg in cfgs:
        with read_write(cfg), open_dict(cfg):
            cfg.eval.max_time_share = None


def member_learners(cfgs: list[DictConfig], run_dirs: list[Path], policies: list[nn.Module], streams: MemberStreams,
                    collector: Collector, observation_space, action_space,
                    reopen: bool = False) -> tuple[list[Learner], list]:
    """Every member's solo learner (from its own config, on its own buffer: a replay buffer
    in its run folder's place, or a rollout buffer of its rows), each built under its RNG
    streams, as its solo run builds it after its collector; and the replay buffers (None
    each for an on-policy learner; ``reopen``: a resumed member's memory-mapped storage
    opened again)."""
    rows = collector.batch_size[0] // len(cfgs)
    member_shape = SimpleNamespace(batch_size=torch.Size([rows, *collector.batch_size[1:]]))  # its rows' batches
    buffers = member_replay_buffers(cfgs, run_dirs, streams, reopen) if learner_class(cfgs[0]).replay else \
        [None] * len(cfgs)
    learners = []
    for member, (member_cfg, policy, buffer) in enumerate(zip(cfgs, policies, buffers)):
        with streams.member(member):
            learners.append(make_learner(member_cfg, policy, member_shape, observation_space, action_space, buffer))
    return learners, buffers


def member_replay_buffers(cfgs: list[DictConfig], run_dirs: list[Path], streams: MemberStreams,
                          reopen: bool = False) -> list:
    """Each member's replay buffer, as its solo run makes it (its config, its run folder's
    place for memory-mapped storage, opened again for a resumed member: ``reopen``), under
    its RNG streams."""
    buffers = []
    for member, (member_cfg, run_dir) in enumerate(zip(cfgs, run_dirs)):
        with streams.member(member):
            buffers.append(make_replay_buffer(member_cfg, Path(run_dir), reopen=reopen))
    return buffers
