"""The training loop (``run``): collect, learn, evaluate, checkpoint (its own state: progress.py)."""
from __future__ import annotations

import json
import logging
import math
import threading
import time
from typing import TYPE_CHECKING, Iterator

import torch
from tensordict import TensorDictBase
from tqdm import tqdm

from rlcollect.buffers.rollout import ROLLOUT_DIM, RolloutBuffer, transition_view
from rlcollect.checkpoint import CHECKPOINT_FILE, checkpoint_exists
from rlcollect.collectors.base import CollectorBase
from rlcollect.collectors.options import DeliveryOptions
from rlcollect.config import eval_every_frames
from rlcollect.errors import DiskFullError, one_line
from rlcollect.logging.runs import SUMMARY_FILE
from rlcollect.run_files import ENDED_STATUSES, FAILED, FINISHED, INTERRUPTED, SOLVED, write_record

if TYPE_CHECKING:
    from rlcollect.pipeline.lifecycle import Pipeline

log = logging.getLogger(__name__)


def collected(p: Pipeline) -> Iterator[tuple[TensorDictBase | None, int]]:
    """``(batch, frames)`` each time a batch's worth of new frames is there to learn from.
    In the foreground, the collector's iteration (batch is None when it wrote into the
    replay buffer itself); in the background, new frames in the replay buffer."""
    if not p.background:
        if in_place_rollouts(p):
            yield from rollouts(p)
            return
        writes_replay = p.collector.replay_buffer is not None
        frames = p.collector.frames
        if writes_replay:  # a resume whose checkpoint waited for batches in flight: the learner catches up on them
            yield from caught_up(learner_frames(p), frames, p.collector.frames_per_batch)
        for batch in p.collector:
            if writes_replay:
                yield from caught_up(frames, p.collector.frames - p.collector.frames_per_batch,
                                     p.collector.frames_per_batch)
            frames = p.collector.frames
            yield batch, frames
        if writes_replay:
            yield from caught_up(frames, p.collector.frames, p.collector.frames_per_batch)
        return
    replay_buffer = p.learner.replay_buffer
    start_frames = learner_frames(p)  # the frames past it, in the buffer, are learnt from first
    start_writes = replay_buffer.write_count - (p.collector.frames - start_frames)
    p.collector.start()
    next_frames = start_frames + p.collector.frames_per_batch
    while True:
        p.collector.check_background()
        # one learn() per batch's worth, even when behind
        if replay_buffer.write_count - start_writes >= next_frames - start_frames:
            yield None, next_frames
            next_frames += p.collector.frames_per_batch
        elif not p.collector.running:
            p.collector.check_background()
            return
        else:
            time.sleep(0.001)


def learner_frames(p: Pipeline) -> int:
    """Where the learner stands as a session starts: the collector's frames, or a resumed
    run's checkpoint frame where its collector stands past it (its checkpoint waited for
    batches in flight, or its collector ran ahead in the background: those frames are in
    the replay buffer, not learnt from)."""
    return p.collector.frames if p.checkpoint_frames is None else min(p.checkpoint_frames, p.collector.frames)


def caught_up(frames: int, collected: int, frames_per_batch: int) -> Iterator[tuple[None, int]]:
    """``(None, frames)`` for each batch's worth of frames from ``frames`` to ``collected`` that
    a collector writing into the replay buffer counted without yielding a batch for them: the
    batches in flight that a checkpoint waited for (MultiAsyncCollector.state_dict), which
    its workers wrote. One learn() per batch's worth, as in the background, so that no
    batch's update, nor the run's final evaluation, is skipped."""
    while frames < collected:
        frames = min(frames + frames_per_batch, collected)
        yield None, frames


def in_place_rollouts(p: Pipeline) -> bool:
    """An on-policy learner's rollout buffer is written straight by a collector that can
    (``CollectorBase.collects_in_place()``: rlcollect's in-process Collector, not a subclass
    that changes what iteration does; 1.03x the batch + copy path, scripts/bench_rollout.py)
    when it delivers to nothing but its post-collect hook."""
    collector = p.collector
    return not p.learner.replay and isinstance(getattr(p.learner, "buffer", None), RolloutBuffer) and \
        isinstance(collector, CollectorBase) and collector.collects_in_place() and \
        collector.delivery_options == DeliveryOptions(post_collect_hook=collector.post_collect_hook)


def rollouts(p: Pipeline) -> Iterator[tuple[TensorDictBase, int]]:
    """The Collector's batches written in place into PPO's rollout; the post-collect hook
    sees each rollout's transitions, as it would the batch."""
    collector, buffer = p.collector, p.learner.buffer
    while collector.frames < collector.total_frames:
        rollout = collector.collect(rollout=buffer.start_rollout())
        collector.deliver(transition_view(rollout))
        yield rollout, collector.frames


def run(pipeline: Pipeline, stop: threading.Event | None = None) -> dict:
    """Collect, update, evaluate every ``eval.every_frames``, checkpoint every
    ``checkpoint_every_frames`` and by time (``Session.checkpoint_due``); stop at
    ``env.solved_return`` (deterministic evaluation mean) or at ``total_frames``. Returns
    the run summary, also written to summary.json."""
    session = Session(pipeline, stop)
    try:
        session.open()
        for batch, frames in collected(pipeline):
            if session.after_batch(batch, frames):
                break
    except BaseException as failure:
        session.failed(failure)
        raise
    finally:
        session.close()
    if session.final_failure is not None:  # the run trained to its end, but its final checkpoint is not there
        raise session.final_failure
    return pipeline.progress.summary


class Session:
    """One run's part of the training loop, batch by batch: ``open`` (the run folder, the
    clock), ``after_batch`` for each collected batch (learn, log, evaluate, checkpoint;
    True when the run stops there: solved, or a stop was asked for), ``failed`` with what
    ended it early, and ``close`` (the final checkpoint, summary.json, the logger). ``run``
    drives one; a batched sweep drives one per member (rlcollect.sweeps)."""

    def __init__(self, pipeline: Pipeline, stop: threading.Event | None = None, *, bar: bool = True,
                 phases: Phases | None = None) -> None:
        """``phases``: where the run's wall-clock is charged (None: a Phases of its own,
        charged by ``after_batch``; a batched sweep's members share a DrivenPhases)."""
        self.p, self.stop = pipeline, stop
        self.status = FINISHED
        self.error: BaseException | None = None
        self.start = time.perf_counter()
        self.bar = tqdm(total=pipeline.cfg.total_frames, initial=pipeline.collector.frames, unit="frame",
                        disable=not (bar and pipeline.cfg.progress), dynamic_ncols=True)
        self.phases = phases or Phases(start_frames=pipeline.collector.frames, concurrent=pipeline.background)
        self.checkpointed_at = self.start  # when the last checkpoint was written (for a resumed run: its start)
        self.closed = False
        self.final_failure: DiskFullError | None = None  # a full disk refused the final checkpoint of a run that ended
        self.logged: float | None = None  # the time of the last batch row this session wrote
        self.completed = pipeline.collector.frames  # the frames of the last batch learnt from

    def seconds(self) -> float:
        return self.p.progress.seconds_before + time.perf_counter() - self.start

    def open(self) -> None:
        """The run folder's files and the W&B run: the clock starts after them."""
        p = self.p
        p.open()
        self.start = self.checkpointed_at = time.perf_counter()
        p.logger.start_clock(p.progress.seconds_before)  # metrics' "time" and the summary share one clock
        self.phases.restart(p.collector.frames, p.progress.phase_seconds)
        self.completed = p.collector.frames

    def after_batch(self, batch: TensorDictBase | None, frames: int) -> bool:
        """Learn from the batch that brought the run to ``frames``, log, evaluate and
        checkpoint when due; True when the run stops after it (``status`` says why)."""
        p, cfg, progress = self.p, self.p.cfg, self.p.progress
        summary, phases = progress.summary, self.phases
        phases.end("collect")
        if batch is not None:  # what the env returned, before anything learns from it or logs it
            check_env_values(batch if batch.names[-1] != ROLLOUT_DIM else transition_view(batch), frames)
        # the episodes the batch completed: what the post-collect hook returned, wherever it ran
        p.logger.log_collection(frames, [info for infos in p.collector.hook_results() for info in infos])
        for restart in p.collector.pop_worker_restarts():  # workers replaced during this batch
            p.logger.log_event(restart.as_event(), step=frames)
        metrics = p.learner.learn(batch, frames)
        p.logger.log({f"train/{k}": v for k, v in metrics.items()}, step=frames)
        check_finite(p, metrics, frames, batch)  # before any checkpoint of this batch: none is poisoned
        p.collector.update_policy_weights_()
        self.completed = p.learnt_frames = frames
        phases.end("train")
        self.bar.update(frames - self.bar.n)
        postfix = {"fps": f"{frames / self.seconds():.0f}"}
        if p.logger.recent_episode_return is not None:
            postfix["return"] = f"{p.logger.recent_episode_return:.1f}"
        solved = False
        last = frames >= cfg.total_frames
        if frames >= progress.next_eval or last:
            progress.next_eval += eval_every_frames(cfg)
            # skipping never hides the frame a run is solved at: only runs without a threshold skip
            if not last and summary["solved_return"] is None and phases.over_share("eval", cfg.eval.max_time_share):
                skip_evaluation(summary, phases, cfg.eval.max_time_share)
            else:
                best = summary["best_eval_return"]
                eval_return = evaluate(p, frames)
                if math.isfinite(eval_return) and (best is None or eval_return > best):
                    p.save_best(frames, eval_return)
                phases.end("eval")
                postfix["eval"] = f"{eval_return:.1f}"
                threshold = summary["solved_return"]  # the env id's own (logging.runs.solved_threshold)
                # the first time only: a solved run resumed with a larger total_frames trains on to it
                solved = threshold is not None and eval_return >= threshold and summary["frames_to_solve"] is None
        self.bar.set_postfix(postfix)
        # the row's "time": its batch's work done (collected, learnt from, evaluated), where its collection row said
        # when it was collected; summary.json's seconds to solve and seconds are such times too, so that compare
        # reads from the rows what the summary says
        now = self.seconds()
        if solved:
            summary["frames_to_solve"], summary["seconds_to_solve"] = frames, now
        p.logger.log({**phases.metrics(frames), "time": now}, step=frames)
        self.logged = now
        if self.checkpoint_due(frames):
            p.save_checkpoint(now, phases.totals())  # a resume's clock goes on from its last row's time
            self.checkpointed_at = time.perf_counter()
        if solved:
            self.status = SOLVED
            return True
        if self.stop is not None and self.stop.is_set() and not last:  # SIGINT / SIGTERM: this batch is the last
            self.status = INTERRUPTED  # (a stop that comes with the run's last batch leaves it finished)
            return True
        return False

    def checkpoint_due(self, frames: int) -> bool:
        """Whether the batch that brought the run to ``frames`` ends with a checkpoint: every
        ``checkpoint_every_frames`` frames, and, unless ``checkpoint_every_seconds`` is null,
        at the run's first batch (it has no checkpoint yet) and then once that many seconds
        passed since the last one, so that a run killed at any time loses at most that long."""
        p, progress = self.p, self.p.progress
        every_seconds = p.cfg.get("checkpoint_every_seconds")  # absent from runs written before it existed
        due = every_seconds is not None and (
            p.checkpoint_frames is None or time.perf_counter() - self.checkpointed_at >= every_seconds)
        if progress.next_checkpoint is not None and frames >= progress.next_checkpoint:
            progress.next_checkpoint = frames + p.cfg.checkpoint_every_frames
            due = True
        return due

    def failed(self, failure: BaseException) -> None:
        """What ended the run early: a second Ctrl-C (interrupted at once) or an error."""
        self.error = failure
        if isinstance(failure, KeyboardInterrupt):  # a second Ctrl-C: stop now, the last complete checkpoint stays
            self.status = INTERRUPTED
        else:
            self.status = FAILED
            self.p.progress.summary["error"] = one_line(failure)

    def close(self) -> None:
        """The final checkpoint (``keeps_final_checkpoint``), summary.json, and the parts shut down."""
        if self.closed:
            return
        self.closed = True
        p, summary = self.p, self.p.progress.summary
        self.bar.close()
        # training time: to the end of the last batch's work (its row's time), the final checkpoint not counted;
        # a session that trained no batch (a resume stopped at once) adds none
        seconds = p.progress.seconds_before if self.logged is None else self.logged
        if keeps_final_checkpoint(p, self.error, self.completed):
            full = save_final_checkpoint(p, seconds, self.phases.totals())
            if full is not None and self.error is None:  # the run's end is not saved: it failed, as mid-run
                self.failed(full)
                self.final_failure = full
        summary["status"] = self.status
        summary["frames"] = p.collector.frames
        summary["checkpoint_frames"] = p.checkpoint_frames
        summary["seconds"] = seconds
        summary["frames_per_second"] = summary["frames"] / seconds if seconds > 0 else None
        summary.update({f"seconds_{name}": value for name, value in self.phases.totals().items()})
        try:
            if p.opened or p.resumed_frames is None:  # a resume that could not open leaves its files as they were
                write_record(p.run_dir / SUMMARY_FILE, strict_json(summary))
        finally:
            p.close(exit_code=0 if self.status in ENDED_STATUSES else 1)


class Phases:
    """Where a run's wall-clock goes: collecting (waiting for the next batch), training (the
    update and the weight push) and evaluating. ``end(phase)`` charges the time since the
    last ``end`` to ``phase`` (``seconds``: this session's); ``totals`` adds what earlier
    sessions of a resumed run spent. ``metrics`` gives ``time/<phase>`` (the totals) and
    this session's ``collect/frames_per_second`` over its collecting time alone (with
    background collection, which overlaps training, over all its time instead)."""

    def __init__(self, start_frames: int, concurrent: bool = False) -> None:
        self.concurrent = concurrent
        self.restart(start_frames)

    def restart(self, start_frames: int, before: dict[str, float] | None = None) -> None:
        """Nothing charged yet this session; the clock runs from now, the frames from
        ``start_frames``; ``before``: each phase's seconds in earlier sessions."""
        self.start_frames = start_frames
        self.seconds = {"collect": 0.0, "train": 0.0, "eval": 0.0}
        self.before = dict(before or {})
        self._mark = time.perf_counter()

    def totals(self) -> dict[str, float]:
        """Each phase's seconds over the whole run, earlier sessions included."""
        return {phase: self.before.get(phase, 0.0) + seconds for phase, seconds in self.seconds.items()}

    def end(self, phase: str) -> None:
        now = time.perf_counter()
        self.seconds[phase] += now - self._mark
        self._mark = now

    def over_share(self, phase: str, share: float | None) -> bool:
        """Whether ``phase`` took more than ``share`` of this session's time (None: never)."""
        return share is not None and self.seconds[phase] > share * sum(self.seconds.values())

    def metrics(self, frames: int) -> dict[str, float]:
        collecting = sum(self.seconds.values()) if self.concurrent else self.seconds["collect"]
        return {"collect/frames_per_second": (frames - self.start_frames) / max(collecting, 1e-9),
                **{f"time/{phase}": seconds for phase, seconds in self.totals().items()}}


class DrivenPhases(Phases):
    """Phases charged by what drives several sessions at once (a batched sweep, whose
    members share one clock: one collection, one update, one evaluation for all), not by
    the sessions that read them: ``end`` does nothing, ``charge`` is Phases' ``end``."""

    def end(self, phase: str) -> None:
        pass

    def charge(self, phase: str) -> None:
        super().end(phase)


def skip_evaluation(summary: dict, phases: Phases, share: float) -> None:
    """An evaluation left out because evaluating already took more than ``share`` of the
    run's time (eval.max_time_share): counted in the summary, said once."""
    if not summary.get("evaluations_skipped"):
        log.warning("evaluation took %.0f%% of the run's time so far: evaluations are skipped while it is above "
                    "eval.max_time_share=%s (the final one always runs; eval.every_frames sets the cadence)",
                    100 * phases.seconds["eval"] / max(sum(phases.seconds.values()), 1e-9), share)
    summary["evaluations_skipped"] = summary.get("evaluations_skipped", 0) + 1


def keeps_final_checkpoint(p: Pipeline, error: BaseException | None, completed: int) -> bool:
    """Whether a run that ends with ``error`` (None: it finished, was solved or stopped on a
    signal) gets a checkpoint at its final frame: every run that collected frames past its
    last checkpoint, except one that diverged (its weights are not finite: the last
    checkpoint stays the last good one), was stopped at once by a second Ctrl-C, could not
    write its checkpoint to a full disk (the same write would fail again), or failed before
    it learnt from its last batch (``completed``, the frames of the last batch learnt from,
    short of the collector's): a resume from there would leave that batch out; it resumes
    from the last checkpoint and collects it again."""
    if isinstance(error, (DivergedError, KeyboardInterrupt, DiskFullError)) or not p.opened:
        return False
    if error is not None and p.collector.frames != completed:
        return False
    return p.collector.frames > 0 and p.checkpoint_frames != p.collector.frames


def save_final_checkpoint(p: Pipeline, seconds: float, phase_seconds: dict[str, float]) -> DiskFullError | None:
    """The checkpoint at the run's final frame; a failure to write it is logged, not raised
    (the run's own error, if any, is the one to report), and a full disk returned (a run
    that ended well then fails, as it would have at any other checkpoint)."""
    try:
        p.save_checkpoint(seconds, phase_seconds)
    except DiskFullError as full:
        return full
    except KeyboardInterrupt:
        log.warning("interrupted while writing the final checkpoint: %s", last_checkpoint(p))
    except Exception as failure:  # e.g. a collector whose workers died cannot report its state
        log.warning("could not write the final checkpoint (%s): %s", one_line(failure), last_checkpoint(p))
    return None


def last_checkpoint(p: Pipeline) -> str:
    """Where a run whose final checkpoint was not written stands: its last complete one, if
    its folder still holds it."""
    if p.checkpoint_frames is not None and checkpoint_exists(p.run_dir / CHECKPOINT_FILE):
        return f"the last complete one (frame {p.checkpoint_frames}) stays"
    return f"no checkpoint is left in {p.run_dir} to continue from"


class DivergedError(FloatingPointError):
    """Training produced a non-finite loss, gradient norm or parameter."""


class NonFiniteEnvError(FloatingPointError):
    """The env returned a non-finite observation or reward."""


# what an env writes into a batch that must be finite: the next observation (an episode's last one included,
# which no later step reads) and reward of each step, and the observation it steps from (a reset's)
ENV_VALUES = (("next", "observation"), ("next", "reward"), "observation")


def check_env_values(transitions: TensorDictBase, frames: int) -> None:
    """A NonFiniteEnvError naming the entry, the frame and the env index where the env
    returned a NaN or infinite observation or reward (floating entries; nested
    observations included): a batch ``[*envs, T]`` (or ``[T]``) that ends at ``frames``.
    Of several, the first the env returned: a step's next observation is named at that
    step's frame, not at the next step's, which reads it as its observation."""
    found = None  # (frame, message)
    for key in ENV_VALUES:
        value = transitions.get(key, None)
        entries = value.items(True, True) if isinstance(value, TensorDictBase) else [((), value)]
        for name, entry in entries:
            if not isinstance(entry, torch.Tensor) or not entry.is_floating_point():
                continue
            finite = torch.isfinite(entry.reshape(*transitions.batch_size, -1)).all(-1)
            if bool(finite.all()):
                continue
            # the first bad step in time order: (time, env) of a [*envs, T] batch, (time,) of a [T] one
            by_time = (~finite).reshape(-1, finite.shape[-1]).transpose(0, 1).nonzero()[0].tolist()
            time, env = by_time[0], by_time[1] if len(by_time) > 1 and finite.dim() > 1 else 0
            envs = transitions.batch_size[:-1].numel() if finite.dim() > 1 else 1
            frame = frames - transitions.numel() + time * envs + env + 1
            if found is not None and found[0] <= frame:
                continue
            where = (*torch.unravel_index(torch.tensor(env), finite.shape[:-1]), time) if finite.dim() > 1 else (time,)
            label = key if isinstance(key, str) else "/".join(key)
            label += "".join(f"/{part}" for part in (name if isinstance(name, tuple) else (name,)))
            shown = first_non_finite(entry[tuple(int(i) for i in where)], label)
            found = (frame, f"the env returned a non-finite {label} ({shown}) at frame {frame}, env index {env}: "
                            "check the env (a reward or observation wrapper can clip or replace such values)")
    if found is not None:
        raise NonFiniteEnvError(found[1])


def first_non_finite(step: torch.Tensor, label: str) -> str:
    """``label[i, j] = value`` of the first non-finite element of one step's entry (its
    index within the entry's own shape, left out for an entry of one element)."""
    index = (~torch.isfinite(step)).nonzero()[0].tolist()
    where = f"[{', '.join(str(i) for i in index)}]" if step.numel() > 1 else ""
    return f"{label}{where} = {step[tuple(index)].item()}"


def check_finite(p: Pipeline, metrics: dict, frames: int, batch: TensorDictBase | None) -> None:
    """Stop a diverged run at the batch where it diverged (the last checkpoint stays the
    last good one): a non-finite loss or parameter, or a policy whose updated weights give
    non-finite outputs on a few of the batch's steps (finite but exploded weights)."""
    bad = [f"train/{key}={value}" for key, value in metrics.items()
           if isinstance(value, float) and not math.isfinite(value)]
    if not bad and not parameters_finite(p.policy):
        bad = ["a policy parameter"]
    if not bad and batch is not None and not policy_outputs_finite(p.policy, batch):
        bad = ["the updated policy's output"]
    if bad:
        lr = p.cfg.algo.get("lr")
        raise DivergedError(f"training diverged at frame {frames}: {', '.join(bad)} is not finite; the last "
                            f"checkpoint (if any) is from before; train again with a smaller algo.lr"
                            + (f" than {lr} (e.g. algo.lr={lr / 2:g})" if lr else ""))


@torch.no_grad()
def parameters_finite(policy) -> bool:
    """Whether every parameter of the policy is finite, with one host synchronisation per
    device (a policy with a ``parameters_finite()`` method answers itself: a member of a
    batched sweep, whose sweep checks every member at once)."""
    probe = getattr(policy, "parameters_finite", None)
    if callable(probe):
        return probe()
    checks: dict[torch.device, list[torch.Tensor]] = {}
    for parameter in policy.parameters():
        checks.setdefault(parameter.device, []).append(torch.isfinite(parameter).all())
    return all(bool(torch.stack(values).all()) for values in checks.values())


@torch.no_grad()
def policy_outputs_finite(policy, batch: TensorDictBase, steps: int = 8) -> bool:
    """Whether the policy's floating outputs on a few of the batch's steps are finite (a
    policy with an ``outputs_finite(batch)`` method answers itself: a member of a batched
    sweep, whose sweep probes every member at once)."""
    probe = getattr(policy, "outputs_finite", None)
    if callable(probe):
        return probe(batch)
    inputs = batch.reshape(-1)[:steps].exclude("next").clone()
    for key in ("action", "action_log_prob", "state_value", "action_value"):
        inputs.pop(key, None)
    try:
        cuda = sorted({p.device.index or 0 for p in policy.parameters() if p.device.type == "cuda"}) \
            if isinstance(policy, torch.nn.Module) else []
        with torch.random.fork_rng(devices=cuda):  # a sampling policy must not move the run's RNG streams
            outputs = policy(inputs)
    except Exception:
        return True  # a policy that needs more than a step's entries: not probed
    return all(bool(torch.isfinite(value).all()) for value in outputs.values(True, True)
               if isinstance(value, torch.Tensor) and value.is_floating_point())


def strict_json(summary: dict) -> str:
    """JSON with null where a number is not finite (json's NaN and Infinity are not JSON)."""
    def plain(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return value
    return json.dumps({key: plain(value) for key, value in summary.items()}, indent=2, allow_nan=False)


def evaluate(p: Pipeline, frames: int) -> float:
    """Deterministic evaluation episodes; logs and records the mean return (completed
    episodes only: those cut by eval.max_steps are counted in eval/cut)."""
    result = p.evaluator.evaluate()
    eval_return = result.mean_return if result.returns else float("nan")
    p.logger.log({"eval/episode_return": eval_return, "eval/episodes": len(result.returns), "eval/cut": result.cut},
                 step=frames)
    if p.video is not None:  # eval.video: one more episode, rendered
        p.logger.log_video("eval/video", p.video.record(f"eval_{frames}"), step=frames)
    summary = p.progress.summary
    summary["final_eval_return"] = eval_return
    best = summary["best_eval_return"]
    summary["best_eval_return"] = eval_return if best is None else max(best, eval_return)
    return eval_return
