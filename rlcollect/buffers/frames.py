"""Observations stored once: what a storage built with ``dedup_observations=True`` keeps.

Each observation leaf (``"observation"`` and its nested entries) that has a
``("next", ...)`` twin of the same dtype and shape is kept as *frames* plus pointers, and
neither it nor its ``"next"`` twin is stored whole; a read rebuilds both, bit for bit what
was written (docs/data-layout.md, "Observations stored once"). With ``frame_stack=K`` an
observation whose first feature dim is K (gymnasium's FrameStackObservation) is cut into
its K frames; otherwise the observation is one frame (K = 1).

Per key i, beside the storage's other keys (``[*rows, capacity]`` like them, so they move
with their element on every write, repair, share and memmap)::

    ("_frames", i, "aligned")   [*rows, capacity, *frame]  frame 0 (the oldest) of the element's observation
    ("_frames", i, "obs_ptr")   [*rows, capacity, K]       where each frame of its observation is (K > 1 only)
    ("_frames", i, "next_ptr")  [*rows, capacity, K]       where each frame of its next observation is
    spares[i]                   [E]: frames, last_step     frames that are no element's frame 0

A pointer ``p < A`` (A = rows * capacity) names the aligned frame of storage slot p, a
pointer ``p >= A`` the spare ``p - A``.

Within a trajectory, element t's observation is frames f(t-K+1) .. f(t) (FrameStackObservation
pads an episode's first stacks with its reset frame) and its aligned frame is f(t-K+1): its
observation is the aligned frames of t .. t+K-1 and its next observation those of
t+m .. t+m+K-1 (m = 1, or MultiStep's steps_to_next_obs). Pointers only go FORWARD in time::

    time ->        t      t+1    t+2    t+3  |  end of the write's run (batch end, episode end)
    aligned        f0     f1     f2     f3   |  spares (the run's tail): f4  f5  f6  f7
    obs[t+2]                     [f2,   f3,  |                           f4, f5]
    next[t+3]                           [f4, f5, f6, f7]: the tail (at an episode end, its true final)

so a pointed-at frame is never older than the element pointing at it, and the ring (which
overwrites oldest first) can never overwrite a frame a stored element still needs: the
wrap-around boundary needs no special case. Only the K frames after a run's last element
need spares. Runs are cut where ``("collector", "traj_ids")`` changes (else at ``is_init``);
a run cut by the end of a write, not by ``done``, is *pending*: when a later write of the
same process continues its trajectory (same traj id, or for ndim > 1 the same row), the
pending elements are pointed at the new write's aligned frames (newer, so still forward)
and the tail spares are freed. Every pointer is checked against the written bytes before it
is stored; a frame that matches no candidate gets a spare of its own, so a read is exact
whatever the data. A spare is free once the newest element pointing at it is overwritten
(``last_step``, in per-row steps written); a storage shared with other processes cannot
grow its spares (the others hold the tensors), so running out raises there.
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Any, Callable

import torch
from tensordict import TensorDict, TensorDictBase

from rlcollect.keys import DONE, IS_INIT, NEXT, OBSERVATION, STEPS_TO_NEXT_OBS, TRAJ_IDS

log = logging.getLogger(__name__)

FRAMES = "_frames"  # the storage data's sub-TensorDict of frames and pointers
FREE = -1  # last_step of a spare no stored element points at
UNRESOLVED = -1  # a pointer not found yet, during an encode; <= -2 encodes spare request c as -(c + 2)
TRAJ_KEYS = (TRAJ_IDS, "episode")  # what cuts a write into trajectory runs, first found first
# floats are compared as the integers of their bits: NaN equals itself, -0.0 differs from 0.0
_BITS = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
         torch.float64: torch.int64, torch.complex64: torch.int64}


def as_path(key) -> tuple[str, ...]:
    return key if isinstance(key, tuple) else (key,)


def as_key(path: tuple[str, ...]):
    """The form TensorDict.items gives: a str for a top-level key, a tuple for a nested one."""
    return path[0] if len(path) == 1 else path


@dataclass(frozen=True)
class FrameKey:
    """One observation leaf kept as frames."""

    path: tuple[str, ...]  # ("observation",) or ("observation", "pixels") ...
    stack: int  # frames per observation (1: the observation is one frame)
    frame_shape: tuple[int, ...]
    dtype: torch.dtype
    index: int  # its place in the layout, and its internal name

    @property
    def key(self):
        return as_key(self.path)

    @property
    def next_key(self) -> tuple[str, ...]:
        return (NEXT, *self.path)

    @property
    def feature_shape(self) -> tuple[int, ...]:
        return (self.stack, *self.frame_shape) if self.stack > 1 else self.frame_shape

    def internal(self, name: str) -> tuple[str, str, str]:
        return (FRAMES, str(self.index), name)


@dataclass(frozen=True)
class FrameLayout:
    """Which leaves are frames, and every key a write holds (in its order)."""

    keys: tuple[FrameKey, ...]
    user_keys: tuple[tuple[str, ...], ...]

    @classmethod
    def from_template(cls, template: TensorDictBase, ndim: int, frame_stack: int) -> "FrameLayout":
        leaves = {as_path(key): value for key, value in template.items(include_nested=True, leaves_only=True)}
        if any(path[0] == FRAMES for path in leaves):
            raise ValueError(f"dedup_observations=True keeps its frames under the key {FRAMES!r}: the data "
                             "must not hold that key")
        keys: list[FrameKey] = []
        for path, value in leaves.items():
            twin = leaves.get((NEXT, *path))
            if path[0] != OBSERVATION or twin is None:
                continue
            feature = tuple(value.shape[ndim:])
            if twin.dtype != value.dtype or tuple(twin.shape[ndim:]) != feature or value.dtype == torch.complex128:
                continue
            stack = frame_stack if frame_stack > 1 and feature[:1] == (frame_stack,) else 1
            keys.append(FrameKey(path, stack, feature[1:] if stack > 1 else feature, value.dtype, len(keys)))
        if not keys:
            raise ValueError("dedup_observations=True stores 'observation' (and its nested entries) and their "
                             "('next', ...) twins once, but the data holds no such pair of equal dtype and shape: "
                             f"keys {sorted(map(str, leaves))}")
        if frame_stack > 1 and not any(key.stack > 1 for key in keys):
            shapes = {as_key(key.path): list(key.frame_shape) for key in keys}
            raise ValueError(f"frame_stack={frame_stack}: no observation has {frame_stack} frames along its first "
                             f"feature dim (feature shapes {shapes}); use the stack size of FrameStackObservation")
        return cls(tuple(keys), tuple(leaves))

    @property
    def paths(self) -> set[tuple[str, ...]]:
        """The user keys kept as frames: every observation leaf and its "next" twin."""
        return {key.path for key in self.keys} | {key.next_key for key in self.keys}

    def stored_template(self, template: TensorDictBase) -> TensorDict:
        """``template`` with its frame keys replaced by the internal ones (same batch dims)."""
        batch, device = template.batch_size, template.device
        stored = TensorDict({}, batch_size=batch, device=device)
        framed = self.paths
        for key, value in template.items(include_nested=True, leaves_only=True):
            if as_path(key) not in framed:
                stored.set(key, value)
        for key in self.keys:
            stored.set(key.internal("aligned"), _placeholder(batch, key.frame_shape, key.dtype, device))
            if key.stack > 1:
                stored.set(key.internal("obs_ptr"), _placeholder(batch, (key.stack,), torch.int64, device))
            stored.set(key.internal("next_ptr"), _placeholder(batch, (key.stack,), torch.int64, device))
        return stored

    def to_dict(self) -> dict:
        return {"keys": [{"path": list(key.path), "stack": key.stack, "frame_shape": list(key.frame_shape),
                          "dtype": str(key.dtype).removeprefix("torch.")} for key in self.keys],
                "user_keys": [list(path) for path in self.user_keys]}

    @classmethod
    def from_dict(cls, state: dict) -> "FrameLayout":
        keys = tuple(FrameKey(tuple(entry["path"]), int(entry["stack"]), tuple(entry["frame_shape"]),
                              getattr(torch, entry["dtype"]), index) for index, entry in enumerate(state["keys"]))
        return cls(keys, tuple(tuple(path) for path in state["user_keys"]))


def default_spare_frames(num_slots: int, stack: int) -> int:
    """Spares when ``spare_frames`` is None: one per 4 K slots (a trajectory end takes K, so
    trajectories of 4 K^2 steps on average fit), at least 16 K."""
    return max(math.ceil(num_slots / (4 * stack)), 16 * stack)


def new_spares(key: FrameKey, size: int, device) -> TensorDict:
    return TensorDict({"frames": torch.empty((size, *key.frame_shape), dtype=key.dtype, device=device),
                       "last_step": torch.full((size,), FREE, dtype=torch.int64, device=device)},
                      batch_size=[size], device=device)


@dataclass(frozen=True)
class WriteContext:
    """One write as the encoder sees it: R rows of N steps (after a ring-long write's skip)."""

    num_rows: int
    steps: int
    slot: torch.Tensor  # [R, N] the storage slot each element goes to
    sigma: torch.Tensor  # [N] each element's step number in its row (steps written to the row before it)
    oldest_after: int  # the oldest step number still stored once this write is done
    generation: int  # the write position's (a repair since a pending record was made voids it)
    steps_to_next: torch.Tensor  # [R, N] m: the next observation is that of step t + m (MultiStep), else 1
    run_end: torch.Tensor  # [R, N] time index of the last element of each element's run
    run_ends: list  # [(r, u, key)]: run ends a later write may continue (key: a traj id, or ("row", r))
    run_starts: list  # [(r, t0, key)]: run starts that may continue an earlier write's run


def write_context(values: dict, *, ndim: int, num_rows: int, steps: int, capacity: int, cursor: int, sigma0: int,
                  oldest_after: int, generation: int, device) -> WriteContext:
    """Cut the write's rows into trajectory runs: where the traj id changes (else after an
    ``is_init``); a run is continued by a later write unless it ends with ``done``."""
    time = torch.arange(steps, device=device)
    slot = torch.arange(num_rows, device=device)[:, None] * capacity + (cursor + time) % capacity

    def per_step(key):
        value = values.get(key)
        return None if value is None else value.reshape(num_rows, steps, -1).to(device)

    traj = next((per_step(key) for key in TRAJ_KEYS if key in values), None)
    traj = None if traj is None else traj[..., 0]
    is_init, done, jump = per_step(IS_INIT), per_step(DONE), per_step(STEPS_TO_NEXT_OBS)
    ends = torch.zeros(num_rows, steps, dtype=torch.bool, device=device)
    ends[:, -1] = True
    if traj is not None:
        ends[:, :-1] |= traj[:, 1:] != traj[:, :-1]
    elif is_init is not None:
        ends[:, :-1] |= is_init[:, 1:].any(-1)
    run_end = torch.where(ends, time, steps).flip(-1).cummin(-1).values.flip(-1)
    starts = torch.zeros_like(ends)
    starts[:, 0] = True
    starts[:, 1:] = ends[:, :-1]
    if done is not None:
        ends &= ~done.any(-1)  # a trajectory that ended is continued by no later write
    run_ends, run_starts = [], []
    for mask, found, first_or_last in ((ends, run_ends, steps - 1), (starts, run_starts, 0)):
        rows, times = mask.nonzero(as_tuple=True)
        if traj is not None:
            found.extend(zip(rows.tolist(), times.tolist(), traj[rows, times].tolist()))
        elif ndim > 1:  # one writer fills each row: its next write continues the row
            found.extend((r, t, ("row", r)) for r, t in zip(rows.tolist(), times.tolist()) if t == first_or_last)
    steps_to_next = torch.ones(num_rows, steps, dtype=torch.int64, device=device) if jump is None else jump[..., 0]
    return WriteContext(num_rows, steps, slot, sigma0 + time, oldest_after, generation, steps_to_next.long(),
                        run_end, run_ends, run_starts)


@dataclass
class Pending:
    """The tail of a run that a later write may continue: its spares and who points at them."""

    spares: torch.Tensor  # [K] the spare of tail frame i + 1 (-1: none)
    last_steps: torch.Tensor  # [K] their last_step when recorded (changed since: they were reused)
    slots: torch.Tensor  # [M] storage slots of the elements that may point at them
    sigmas: torch.Tensor  # [M] their step numbers
    generation: int


@dataclass
class _Plan:
    """One key's encode before any spare is allocated (running out then changes nothing)."""

    obs: torch.Tensor  # [R, N, K, *frame]
    next_obs: torch.Tensor
    obs_ptr: torch.Tensor  # [R, N, K]: storage slots, or -(request + 2)
    next_ptr: torch.Tensor
    requests: torch.Tensor  # sorted tail requests (r * N + u) * (K + 1) + i: tail frame i of run end u
    fallback: list  # the frames of requests limit, limit + 1, ... (limit = R * N * (K + 1))


class FrameStore:
    """The frames and spares of a storage's observation keys: encodes writes, rebuilds reads.

    Args:
        layout: the keys kept as frames.
        num_rows, capacity: the storage's rows and time steps per row.
        spares: one TensorDict ``[E]`` (frames, last_step) per key.
        grow_spares: ``(key, size, old) -> new spares`` holding ``old``'s entries; None when
            they cannot grow (tensors shared with other processes).
    """

    def __init__(self, layout: FrameLayout, num_rows: int, capacity: int, spares: list[TensorDict],
                 grow_spares: Callable[[FrameKey, int, TensorDict], TensorDict] | None = None) -> None:
        self.layout = layout
        self.num_rows, self.capacity = num_rows, capacity
        self.num_slots = num_rows * capacity
        self.spares = spares
        self.grow_spares = grow_spares
        self._pending: list[dict[Any, Pending]] = [{} for _ in layout.keys]  # this process's writes'
        self._pid = os.getpid()

    # ------------------------------------------------------------------ views
    def bind(self, data: TensorDictBase) -> None:
        """Flat ``[A, ...]`` views of the storage's frame tensors."""
        self._aligned, self._obs_ptr, self._next_ptr = [], [], []
        for key in self.layout.keys:
            self._aligned.append(_flat(data.get(key.internal("aligned")), self.num_slots, key.frame_shape))
            self._obs_ptr.append(_flat(data.get(key.internal("obs_ptr")), self.num_slots, (key.stack,))
                                 if key.stack > 1 else None)
            self._next_ptr.append(_flat(data.get(key.internal("next_ptr")), self.num_slots, (key.stack,)))

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for view in ("_aligned", "_obs_ptr", "_next_ptr"):  # rebound by the storage
            state.pop(view, None)
        state["_pending"] = [{} for _ in self.layout.keys]  # per process
        state["_pid"] = -1
        state["grow_spares"] = None  # set again by the storage
        return state

    def spares_in_use(self, oldest: int) -> list[int]:
        """Per key: the spares a stored element (step number >= ``oldest``) still points at."""
        return [int((spares.get("last_step") >= oldest).sum()) for spares in self.spares]

    # ------------------------------------------------------------------ reads
    def gather(self, slots: torch.Tensor) -> dict:
        """Each frame key's observation and next observation at storage ``slots``, by path."""
        out = {}
        for key in self.layout.keys:
            q = key.index
            next_ptr = self._next_ptr[q].index_select(0, slots)
            if key.stack == 1:
                out[key.path] = self._aligned[q].index_select(0, slots)
                out[key.next_key] = self._frames_at(q, next_ptr).squeeze(1)
                continue
            out[key.path] = self._frames_at(q, self._obs_ptr[q].index_select(0, slots))
            out[key.next_key] = self._frames_at(q, next_ptr)  # a gather costs what a copy of obs[:, 1:] would
        return out

    def _frames_at(self, q: int, pointers: torch.Tensor) -> torch.Tensor:
        """``[n, K]`` pointers -> ``[n, K, *frame]`` frames (one gather: its cost is the output's
        bytes, as a stored stack's gather is)."""
        flat, aligned = pointers.reshape(-1), self._aligned[q]
        spare = flat >= self.num_slots
        if not bool(spare.any()):
            frames = aligned.index_select(0, flat)
        else:
            frames = aligned.index_select(0, flat.clamp(max=self.num_slots - 1))
            where = spare.nonzero().squeeze(1)  # (index_put_: index_copy_ costs a pass over `frames` here)
            frames[where] = self.spares[q].get("frames").index_select(0, flat[where] - self.num_slots)
        return frames.view(*pointers.shape, *aligned.shape[1:])

    # ------------------------------------------------------------------ writes
    def prepare(self, values: dict, context: WriteContext) -> list:
        """Step 1 of a write: where each frame goes, and the spares it takes. Changes nothing
        (but, maybe, grows the spares), so that running out of them raises before the write."""
        self._prune(context)
        plans = [self._plan(key, values[key.key], values[key.next_key], context) for key in self.layout.keys]
        return [(plan, self._allocate(key, plan.requests.numel() + len(plan.fallback), context.oldest_after))
                for key, plan in zip(self.layout.keys, plans)]

    def commit(self, prepared: list, context: WriteContext) -> tuple[dict, Callable[[], None]]:
        """Step 2, inside the write: write the spares; returns the internal tensors of the write
        (``[R, N, ...]``, by internal key) and what to run once the write is accounted for
        (point the pending elements of earlier writes that this one continues at it)."""
        encoded, committed = {}, []
        for key, (plan, spare_ids) in zip(self.layout.keys, prepared):
            obs_ptr, next_ptr, pending = self._commit(key, plan, spare_ids, context)
            encoded[key.internal("aligned")] = plan.obs[:, :, 0]
            if key.stack > 1:
                encoded[key.internal("obs_ptr")] = obs_ptr
            encoded[key.internal("next_ptr")] = next_ptr
            committed.append((key, plan, obs_ptr, pending))

        def continue_pending() -> None:
            for key, plan, obs_ptr, pending in committed:
                self._continue(key, plan, obs_ptr, pending, context)
        return encoded, continue_pending

    def _plan(self, key: FrameKey, obs: torch.Tensor, next_obs: torch.Tensor, context: WriteContext) -> _Plan:
        rows, steps, stack = context.num_rows, context.steps, key.stack
        device = context.slot.device
        obs = obs.to(device, key.dtype).reshape(rows, steps, stack, *key.frame_shape).contiguous()
        next_obs = next_obs.to(device, key.dtype).reshape(rows, steps, stack, *key.frame_shape).contiguous()
        time = torch.arange(steps, device=device).expand(rows, steps)
        sources = (obs, next_obs, context)
        obs_ptr = torch.full((rows, steps, stack), UNRESOLVED, dtype=torch.int64, device=device)
        obs_ptr[..., 0] = context.slot  # frame 0 is the element's own aligned frame
        for j in range(1, stack):  # frame j: that of the element j steps on
            _point(obs[:, :, j], time + j, obs_ptr[..., j], *sources, shift=j)
        next_ptr = torch.full_like(obs_ptr, UNRESOLVED)
        jump = context.steps_to_next
        one_step = bool((jump == 1).all())
        for j in range(stack):  # frame j of the next observation: frame j of step t + m's observation
            target = time + 1 + j if one_step else torch.where(jump >= 1, time + jump + j, -1)
            _point(next_obs[:, :, j], target, next_ptr[..., j], *sources, shift=1 + j if one_step else None)
        limit = rows * steps * (stack + 1)
        fallback = _fall_back(obs, next_obs, obs_ptr, next_ptr, jump, limit)
        codes = torch.cat([obs_ptr.reshape(-1), next_ptr.reshape(-1)])
        codes = -codes[codes <= -2] - 2
        return _Plan(obs, next_obs, obs_ptr, next_ptr, codes[codes < limit].unique(), fallback)

    def _allocate(self, key: FrameKey, count: int, oldest_after: int) -> torch.Tensor:
        """``count`` free spares of ``key`` (grown when too few, where they can grow)."""
        spares = self.spares[key.index]
        free = (spares.get("last_step") < oldest_after).nonzero().squeeze(1)
        if free.numel() < count:
            size = spares.batch_size[0]
            if self.grow_spares is None:
                in_use = size - free.numel()
                raise RuntimeError(
                    f"replay storage (dedup_observations=True): {key.key!r} needs {count} more spare frames and "
                    f"{in_use} of its {size} are in use (the frames after each stored trajectory's end and each "
                    f"write's end); a storage shared with other processes cannot grow them: give spare_frames= "
                    f"(buffer.storage.spare_frames) at least {2 * size}")
            size = max(2 * size, size + count - free.numel())
            spares = self.spares[key.index] = self.grow_spares(key, size, spares)
            log.info("replay storage: %d spare frames for %r (it needed more)", size, key.key)
            free = (spares.get("last_step") < oldest_after).nonzero().squeeze(1)
        return free[:count]

    def _commit(self, key: FrameKey, plan: _Plan, spare_ids: torch.Tensor,
                context: WriteContext) -> tuple[torch.Tensor, torch.Tensor, dict]:
        """Write the plan's spares, resolve its pointers, and record the runs left pending."""
        q, stack, num_slots = key.index, key.stack, self.num_slots
        rows, steps = context.num_rows, context.steps
        spares = self.spares[q]
        frames, last_step = spares.get("frames"), spares.get("last_step")
        requests, num_requests = plan.requests, plan.requests.numel()
        if num_requests:
            tail, end = requests % (stack + 1), (requests // (stack + 1)) % steps
            row = requests // ((stack + 1) * steps)
            source = plan.obs[row, end, tail.clamp(max=stack - 1)]
            last = tail == stack
            if bool(last.any()):
                source[last] = plan.next_obs[row[last], end[last], stack - 1]
            frames.index_copy_(0, spare_ids[:num_requests], source)
        for offset, frame in enumerate(plan.fallback):
            frames[int(spare_ids[num_requests + offset])] = frame
        limit = rows * steps * (stack + 1)

        def resolve(pointers: torch.Tensor) -> torch.Tensor:
            requested = pointers <= -2
            if not bool(requested.any()):
                return pointers
            code = -pointers[requested] - 2
            position = torch.where(code < limit, torch.searchsorted(requests, code.clamp(max=limit - 1)),
                                   num_requests + code - limit)
            pointers = pointers.clone()
            pointers[requested] = num_slots + spare_ids[position]
            return pointers

        obs_ptr, next_ptr = resolve(plan.obs_ptr), resolve(plan.next_ptr)
        pointers = torch.cat([obs_ptr, next_ptr], dim=-1) if stack > 1 else next_ptr  # [R, N, *]
        sigma = context.sigma[None, :, None].expand_as(pointers)
        spare = pointers >= num_slots
        if bool(spare.any()):  # a spare lives as long as the newest element pointing at it
            last_step.scatter_reduce_(0, pointers[spare] - num_slots, sigma[spare], reduce="amax", include_self=False)
        pending = {}
        for r, u, traj in context.run_ends if num_requests else ():  # runs a later write may continue
            codes = (r * steps + u) * (stack + 1) + torch.arange(1, stack + 1, device=requests.device)
            position = torch.searchsorted(requests, codes).clamp(max=num_requests - 1)
            found = requests[position] == codes
            if not bool(found.any()):
                continue
            tail_spares = torch.where(found, spare_ids[position], -1)
            named = torch.isin(pointers[r, :u + 1], num_slots + tail_spares[found]).any(-1)
            times = named.nonzero().squeeze(1)
            pending[traj] = Pending(tail_spares, torch.where(found, last_step[tail_spares.clamp(min=0)], FREE),
                                    context.slot[r, times], context.sigma[times], context.generation)
        return obs_ptr, next_ptr, pending

    def _continue(self, key: FrameKey, plan: _Plan, obs_ptr: torch.Tensor, pending: dict,
                  context: WriteContext) -> None:
        """Point the pending elements of earlier writes whose trajectory this write continues
        at its frames (newer, so the pointers still go forward) and free their tail spares."""
        q, num_slots, records = key.index, self.num_slots, self._pending[key.index]
        spares = self.spares[q]
        frames, last_step = spares.get("frames"), spares.get("last_step")
        for r, t0, traj in context.run_starts:
            record = records.pop(traj, None)
            if record is None or record.generation != context.generation:
                continue
            live = record.sigmas >= context.oldest_after
            held = record.spares >= 0
            if not bool(live.any()) or not torch.equal(last_step[record.spares[held]], record.last_steps[held]):
                continue  # its elements were overwritten (and the spares, maybe, reused)
            old, new = [], []
            for i, spare in enumerate(record.spares.tolist()):  # tail frame i + 1 is frame i of the continuation
                if spare >= 0 and _equal(frames[spare], plan.obs[r, t0, i]):
                    old.append(num_slots + spare)
                    new.append(int(obs_ptr[r, t0, i]))
            if not old:
                continue
            slots, sigmas = record.slots[live], record.sigmas[live]
            rewritten = []
            for table in (self._obs_ptr[q], self._next_ptr[q]):
                if table is None:
                    continue
                pointers = table.index_select(0, slots)
                for before, after in zip(old, new):
                    pointers[pointers == before] = after
                table.index_copy_(0, slots, pointers)
                rewritten.append(pointers)
            last_step[torch.tensor(old, device=last_step.device) - num_slots] = FREE
            spare_targets = torch.tensor([n for n in new if n >= num_slots], dtype=torch.int64, device=slots.device)
            if spare_targets.numel():  # spares of this write, now also named by older elements (which die first)
                last_step[spare_targets - num_slots] = torch.clamp(last_step[spare_targets - num_slots],
                                                                   min=int(sigmas.max()))
                merged = pending.get(traj)
                if merged is not None:  # when that run is continued in turn, these follow
                    naming = torch.isin(torch.cat(rewritten, dim=-1), spare_targets).any(-1)
                    merged.slots = torch.cat([merged.slots, slots[naming]])
                    merged.sigmas = torch.cat([merged.sigmas, sigmas[naming]])
        records.update(pending)

    def _prune(self, context: WriteContext) -> None:
        if self._pid != os.getpid():  # a forked copy: the records are its parent's
            self._pending, self._pid = [{} for _ in self.layout.keys], os.getpid()
        for records in self._pending:
            for traj in [traj for traj, record in records.items()
                         if record.generation != context.generation or int(record.sigmas.max()) < context.oldest_after]:
                del records[traj]

    # ------------------------------------------------------------------ repair and state
    def copy_touched_frames(self, kept: torch.Tensor, touched: torch.Tensor) -> int:
        """Before the storage drops every time index but ``kept`` (its time indices kept):
        a kept element that names the aligned frame of a ``touched`` slot (bool ``[capacity]``)
        gets a spare copy of that frame and names it instead. That happens where the dropped
        steps were written after the kept ones, which a pending run had continued into (a
        memory-mapped storage whose files were written on after the checkpoint a resume
        loads); never in a repair, which drops the oldest. Returns how many frames were copied."""
        capacity, num_slots, copied = self.capacity, self.num_slots, 0
        for key in self.layout.keys:
            q = key.index
            tables = [table.view(self.num_rows, capacity, key.stack)
                      for table in (self._obs_ptr[q], self._next_ptr[q]) if table is not None]
            named = [table[:, kept] for table in tables]  # copies: written back below
            pointers = torch.cat([values.reshape(-1) for values in named])
            aligned = pointers < num_slots
            lost = pointers[aligned & touched[pointers % capacity]].unique()  # sorted
            if lost.numel() == 0:
                continue
            spares = self.spares[q]
            in_use = torch.zeros(spares.batch_size[0], dtype=torch.bool, device=pointers.device)
            in_use[pointers[~aligned] - num_slots] = True
            free = (~in_use).nonzero().squeeze(1)
            if free.numel() < lost.numel():
                size = spares.batch_size[0]
                if self.grow_spares is None:
                    raise RuntimeError(f"replay storage (dedup_observations=True): {key.key!r} needs "
                                       f"{lost.numel() - free.numel()} more spare frames, and a storage shared with "
                                       f"other processes cannot grow them: give spare_frames= at least {2 * size}")
                spares = self.spares[q] = self.grow_spares(key, max(2 * size, size + lost.numel() - free.numel()),
                                                           spares)
                free = torch.cat([free, torch.arange(size, spares.batch_size[0], device=free.device)])
            spare_ids = free[:lost.numel()]
            spares.get("frames").index_copy_(0, spare_ids, self._aligned[q].index_select(0, lost))
            for table, values in zip(tables, named):
                hit = (values < num_slots) & torch.isin(values, lost)
                values[hit] = num_slots + spare_ids[torch.searchsorted(lost, values[hit])]
                table[:, kept] = values
            copied += lost.numel()
        return copied

    def after_repair(self, remap: torch.Tensor, kept: int, steps_written: int) -> None:
        """The storage moved its kept elements to time indices ``[0, kept)`` (``remap``: old
        time index -> new, -1 dropped): move what the pointers name, recount the spares."""
        capacity, num_slots = self.capacity, self.num_slots
        sigma = steps_written - kept + torch.arange(kept, device=remap.device)
        for key in self.layout.keys:
            q = key.index
            last_step = self.spares[q].get("last_step")
            last_step.fill_(FREE)
            for table in (self._obs_ptr[q], self._next_ptr[q]):
                if table is None:
                    continue
                view = table.view(self.num_rows, capacity, key.stack)[:, :kept]
                aligned = view < num_slots
                moved_to = remap[view % capacity]
                if bool((aligned & (moved_to < 0)).any()):  # cannot be: pointers go forward, repairs drop the oldest
                    log.error("replay storage repair: a kept element of %r points at a dropped one", key.key)
                view.copy_(torch.where(aligned & (moved_to >= 0), view // capacity * capacity + moved_to, view))
                spare = view >= num_slots
                if bool(spare.any()):
                    steps = sigma[None, :, None].expand_as(view)
                    last_step.scatter_reduce_(0, view[spare] - num_slots, steps[spare], reduce="amax")
        self._pending = [{} for _ in self.layout.keys]

    def state_dict(self, *, in_place: bool = False) -> dict:
        """The layout and each key's spares up to the last one a stored element may name (the
        free ones after it are left out: loading frees every spare past those saved), copied,
        or with ``in_place`` (nothing writes until the state is saved) the spares themselves
        where every one of them is saved."""
        saved = []
        for spares in self.spares:
            taken = (spares.get("last_step") != FREE).nonzero()
            size = int(taken[-1]) + 1 if taken.numel() else 0
            saved.append((spares if in_place and size == spares.batch_size[0] else spares[:size].clone()).to_dict())
        return {"layout": self.layout.to_dict(), "spares": saved}

    def load_state_dict(self, state: dict) -> None:
        if state["layout"] != self.layout.to_dict():
            raise ValueError(f"the state's frame layout {state['layout']} differs from this storage's "
                             f"{self.layout.to_dict()}")
        for key, saved in zip(self.layout.keys, state["spares"]):
            frames, last_step = torch.as_tensor(saved["frames"]), torch.as_tensor(saved["last_step"])
            size = last_step.shape[0]
            spares = self.spares[key.index]
            if size > spares.batch_size[0]:
                if self.grow_spares is None:
                    raise RuntimeError(f"the state holds {size} spare frames of {key.key!r}, this shared storage "
                                       f"{spares.batch_size[0]}: give it spare_frames={size}")
                spares = self.spares[key.index] = self.grow_spares(key, size, spares)
            spares.get("frames")[:size].copy_(frames)
            spares.get("last_step")[:size].copy_(last_step)
            spares.get("last_step")[size:] = FREE
        self._pending = [{} for _ in self.layout.keys]


# ---------------------------------------------------------------------- helpers
def _point(values, target, pointers, obs, next_obs, context, *, shift: int | None) -> None:
    """Point each frame ``values[r, t]`` (``[R, N, *frame]``) at the frame expected at time
    ``target[r, t]`` (-1: none; ``t + shift`` everywhere when ``shift`` is given) of its
    trajectory run, where the bytes agree: the aligned frame of that element inside the run,
    else tail frame ``i = target - run_end`` (``i < K``: frame i of the run end's observation;
    ``i = K``: the last frame of its next observation)."""
    run_end, slot = context.run_end, context.slot
    rows, steps, stack = obs.shape[:3]
    valid = target >= 0
    inside = valid & (target <= run_end)
    if shift is not None:  # slices, no gather: the frame `shift` steps on
        same = torch.zeros(rows, steps, dtype=torch.bool, device=obs.device)
        if shift < steps:
            same[:, :steps - shift] = _same(values[:, :steps - shift], obs[:, shift:, 0], lead=2)
    else:
        at = (torch.arange(rows, device=obs.device)[:, None] * steps + target.clamp(0, steps - 1)) * stack
        expected = obs.view(rows * steps * stack, *obs.shape[3:]).index_select(0, at.reshape(-1))
        same = _same(values, expected.view(values.shape), lead=2)
    found = inside & same
    pointers[found] = slot.gather(1, target.clamp(0, steps - 1))[found]
    rows_, times = (valid & ~inside).nonzero(as_tuple=True)
    if not rows_.numel():
        return
    end = run_end[rows_, times]
    tail = target[rows_, times] - end  # >= 1
    keep = tail <= stack
    rows_, times, end, tail = rows_[keep], times[keep], end[keep], tail[keep]
    expected = obs[rows_, end, tail.clamp(max=stack - 1)]
    last = tail == stack
    if bool(last.any()):
        expected[last] = next_obs[rows_[last], end[last], stack - 1]
    same = _same(values[rows_, times], expected, lead=1)
    code = (rows_ * steps + end) * (stack + 1) + tail
    pointers[rows_[same], times[same]] = -(code[same] + 2)


def _fall_back(obs, next_obs, obs_ptr, next_ptr, jump, limit: int) -> list:
    """Resolve, one by one, the frames that are not where their run says (data of another
    shape than frame stacks of trajectories): a frame equal to one already pointed at (later
    in time, or earlier in the same stack) shares its pointer, any other gets a spare of its
    own (request ``limit + k`` for the k-th). Returns those frames."""
    fallback: list = []
    steps, stack = obs_ptr.shape[1], obs_ptr.shape[2]

    def own_spare(frame):
        fallback.append(frame)
        return -(limit + len(fallback) - 1 + 2)

    def unresolved(pointers):  # later steps first (their pointers are shared backwards), frames in order
        return sorted((pointers == UNRESOLVED).nonzero().tolist(), key=lambda rtj: (rtj[0], -rtj[1], rtj[2]))

    for r, t, j in unresolved(obs_ptr):
        frame = obs[r, t, j]
        if j >= 1 and t + 1 < steps and _equal(frame, obs[r, t + 1, j - 1]):
            obs_ptr[r, t, j] = obs_ptr[r, t + 1, j - 1]
        elif j >= 1 and _equal(frame, obs[r, t, j - 1]):
            obs_ptr[r, t, j] = obs_ptr[r, t, j - 1]
        else:
            obs_ptr[r, t, j] = own_spare(frame)
    for r, t, j in unresolved(next_ptr):
        frame, m = next_obs[r, t, j], int(jump[r, t])
        if 1 <= m and t + m < steps and _equal(frame, obs[r, t + m, j]):
            next_ptr[r, t, j] = obs_ptr[r, t + m, j]
        elif j + 1 < stack and _equal(frame, obs[r, t, j + 1]):
            next_ptr[r, t, j] = obs_ptr[r, t, j + 1]
        elif t + 1 < steps and _equal(frame, next_obs[r, t + 1, j]):
            next_ptr[r, t, j] = next_ptr[r, t + 1, j]
        elif j >= 1 and _equal(frame, next_obs[r, t, j - 1]):
            next_ptr[r, t, j] = next_ptr[r, t, j - 1]
        else:
            next_ptr[r, t, j] = own_spare(frame)
    return fallback


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    dtype = _BITS.get(tensor.dtype)
    return tensor if dtype is None else tensor.view(dtype)


def _same(a: torch.Tensor, b: torch.Tensor, *, lead: int) -> torch.Tensor:
    """``[*lead, *frame]`` x 2 -> ``[*lead]``: whether each pair of frames has the same bytes."""
    if a.shape[:lead].numel() == 0:
        return torch.zeros(a.shape[:lead], dtype=torch.bool, device=a.device)
    return (_words(a, lead) == _words(b, lead)).all(-1)


def _words(frames: torch.Tensor, lead: int) -> torch.Tensor:
    """``[*lead, *frame]`` -> ``[*lead, W]``: each frame's bytes as the widest integers that
    divide them (comparing 8 bytes at a time), or its bits as they are where no view fits."""
    flat = frames.flatten(lead) if frames.dim() > lead else frames.unsqueeze(-1)
    try:
        flat = flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)
        for dtype, size in ((torch.int64, 8), (torch.int32, 4), (torch.int16, 2)):
            if flat.shape[-1] % size == 0:
                return flat.view(dtype)
        return flat
    except RuntimeError:  # not contiguous in its last dim, or an offset the wider view does not allow
        return _bits(frames).reshape(*frames.shape[:lead], -1)


def _equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(_bits(a), _bits(b))


def _flat(tensor: torch.Tensor, num_slots: int, feature: tuple[int, ...]) -> torch.Tensor:
    """A storage tensor ``[*rows, capacity, *feature]`` viewed as ``[rows * capacity, *feature]``."""
    return tensor.as_subclass(torch.Tensor).view(num_slots, *feature)


def _placeholder(batch: torch.Size, feature: tuple[int, ...], dtype: torch.dtype, device) -> torch.Tensor:
    """A template entry of the right shape and dtype that allocates nothing."""
    return torch.empty((1,) * (len(batch) + len(feature)), dtype=dtype, device=device).expand(*batch, *feature)
