"""Adam for the stacked parameters of a batched sweep, each member with its own step
count and learning rate, and only the members asked for stepping (docs/sweeps.md).

torch.optim.Adam keeps one ``step`` per parameter tensor. A stacked parameter ``[S, ...]``
holds S members, so with torch's Adam they share it, and with it Adam's bias corrections:
a member that sat out some steps (it trains fewer epochs per batch than the others) would
be corrected with another member's step count. ``MemberAdam`` keeps:

    per element   the first and second moments (one flat ``[S, total]`` buffer each, the
                  parameters laid end to end per member)
    per member    the step count and the learning rate (Python numbers), so each
                  member's bias corrections are its own

``step(members)`` moves the members listed (it computes on their rows alone) and leaves
every other member's parameters, moments and step count as they are. Per element it does
what torch's single-tensor Adam (torch/optim/adam.py, ``_single_tensor_adam``, no weight
decay, no amsgrad) does to a solo run's parameter, op for op, with each member's
Python-float scalars (bias corrections, step size) as float32 tensors of the same values,
so a member that steps is its solo run's Adam to the bit on the CPU
(tests/test_sweeps.py). ``member_state_dict(m, ...)`` is member m's state as its solo
run's ``torch.optim.Adam.state_dict()`` holds it.
"""
from __future__ import annotations

import contextlib
from typing import Iterable, Sequence

import torch


class MemberAdam:
    """Adam over stacked parameters (every one ``[S, ...]``, member m's row m).

    Args:
        params: the stacked parameters.
        members: S.
        lr: one learning rate for every member, or one per member (``set_lrs`` changes them).
        betas, eps: Adam's, shared by the members.
    """

    def __init__(self, params: Iterable[torch.Tensor], members: int, lr: float | Sequence[float] = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:
        self.params = list(params)
        self.members = members
        if any(param.shape[0] != members for param in self.params):
            raise ValueError(f"MemberAdam: every parameter needs a leading member dim of {members}")
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.lrs: list[float] = []
        self.set_lrs(lr)
        self.steps = [0] * members
        self.sizes = [param[0].numel() for param in self.params]
        first = self.params[0]
        self.exp_avg = torch.zeros(members, sum(self.sizes), dtype=first.dtype, device=first.device)
        self.exp_avg_sq = torch.zeros_like(self.exp_avg)
        self._corrections: dict[int, tuple[float, float]] = {}  # step -> (1 - beta1**step, sqrt(1 - beta2**step))
        self._members_rows: dict[tuple[int, ...], torch.Tensor] = {}  # the members stepping, as an index tensor

    def set_lrs(self, lr: float | Sequence[float]) -> None:
        """Every member's learning rate (one for all, or one per member)."""
        lrs = [float(lr)] * self.members if isinstance(lr, (int, float)) else [float(value) for value in lr]
        if len(lrs) != self.members:
            raise ValueError(f"MemberAdam: one lr per member ({self.members}), got {len(lrs)}")
        self.lrs = lrs

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.params:
            if set_to_none:
                param.grad = None
            elif param.grad is not None:
                param.grad.zero_()

    def corrections(self, step: int) -> tuple[float, float]:
        """Adam's bias corrections at ``step`` as torch computes them (Python floats)."""
        found = self._corrections.get(step)
        if found is None:
            found = self._corrections[step] = (1 - self.beta1 ** step, (1 - self.beta2 ** step) ** 0.5)
        return found

    def member_views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """``flat`` ``[S, total]`` as one view per parameter, in its shape ``[S, ...]``."""
        return [part.view(param.shape) for part, param in zip(torch.split(flat, self.sizes, dim=1), self.params)]

    @torch.no_grad()
    def step(self, members: Sequence[int] | None = None) -> None:
        """One Adam step of the members ``members`` (None: all) from their gradients (a
        parameter without one: zeros); the other members' rows are not touched."""
        every = members is None or len(members) == self.members
        members = list(range(self.members)) if members is None else list(members)
        if not members:
            return
        grad = torch.cat([torch.zeros_like(param).reshape(self.members, -1) if param.grad is None
                          else param.grad.reshape(self.members, -1) for param in self.params], 1)
        bias_sqrt, step_size = [], []  # each stepping member's Python floats, as torch computes them for its step
        for member in members:
            self.steps[member] += 1
            correction1, correction2_sqrt = self.corrections(self.steps[member])
            bias_sqrt.append(correction2_sqrt)
            step_size.append(-(self.lrs[member] / correction1))
        options = dict(dtype=grad.dtype, device=grad.device)
        bias_sqrt_t = torch.tensor(bias_sqrt, **options).unsqueeze(1)
        step_size_t = torch.tensor(step_size, **options).unsqueeze(1)
        if every:
            exp_avg, exp_avg_sq = self.exp_avg.lerp_(grad, 1 - self.beta1), self.exp_avg_sq
            exp_avg_sq.mul_(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
        else:  # the stepping members' rows alone: their copies updated, then written back
            rows = self._rows(members)
            grad = grad.index_select(0, rows)
            exp_avg = self.exp_avg.index_select(0, rows).lerp_(grad, 1 - self.beta1)
            exp_avg_sq = self.exp_avg_sq.index_select(0, rows).mul_(self.beta2).addcmul_(grad, grad,
                                                                                        value=1 - self.beta2)
            self.exp_avg.index_copy_(0, rows, exp_avg)
            self.exp_avg_sq.index_copy_(0, rows, exp_avg_sq)
        denom = (exp_avg_sq.sqrt() / bias_sqrt_t).add_(self.eps)
        # torch's param.addcdiv_(exp_avg, denom, value=-step_size): param + (value * exp_avg) / denom on the CPU,
        # param + value * (exp_avg / denom) on CUDA (its kernel's order)
        if denom.device.type == "cuda":
            update = (exp_avg / denom).mul_(step_size_t)
        else:
            update = (step_size_t * exp_avg).div_(denom)
        for param, part in zip(self.params, torch.split(update, self.sizes, dim=1)):
            if every:
                param.add_(part.view(param.shape))
            else:
                param.index_add_(0, rows, part.view(len(members), *param.shape[1:]))

    def _rows(self, members: list[int]) -> torch.Tensor:
        key = tuple(members)
        rows = self._members_rows.get(key)
        if rows is None:
            rows = self._members_rows[key] = torch.tensor(members, dtype=torch.long, device=self.exp_avg.device)
        return rows

    def member_state_dict(self, member: int, solo_parameters: Sequence[torch.Tensor],
                          param_groups: list[dict]) -> dict:
        """Member ``member``'s state as its solo run's ``torch.optim.Adam`` over
        ``solo_parameters`` holds it (``state_dict()``): its step count and its moments in
        the solo shapes, ``param_groups`` (a solo Adam's) with this member's lr."""
        state = {}
        if self.steps[member]:  # torch's Adam has no state for a parameter before its first step
            step = torch.tensor(float(self.steps[member]), dtype=torch.float32)
            for index, (avg, avg_sq, solo) in enumerate(zip(self.member_views(self.exp_avg),
                                                           self.member_views(self.exp_avg_sq), solo_parameters)):
                state[index] = {"step": step.clone(), "exp_avg": avg[member].reshape(solo.shape).clone(),
                                "exp_avg_sq": avg_sq[member].reshape(solo.shape).clone()}
        return {"state": state, "param_groups": [{**group, "lr": self.lrs[member]} for group in param_groups]}

    @torch.no_grad()
    def copy_member(self, target: int, source: int) -> None:
        """Member ``target`` takes member ``source``'s moments and step count (its lr is
        set with the others', ``set_lrs``): population-based training's exploit."""
        for buffer in (self.exp_avg, self.exp_avg_sq):
            buffer[target].copy_(buffer[source])
        self.steps[target] = self.steps[source]

    def state_dict(self) -> dict:
        return {"steps": list(self.steps), "lrs": list(self.lrs), "exp_avg": self.exp_avg.clone(),
                "exp_avg_sq": self.exp_avg_sq.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self.lrs = list(state["steps"]), list(state["lrs"])
        self.exp_avg.copy_(state["exp_avg"])
        self.exp_avg_sq.copy_(state["exp_avg_sq"])


class FrozenRows:
    """The rows of stacked parameters ``[S, ...]`` of the members that learn no more, kept as
    they were when each froze: torch's Adam (one optimizer over every member) moves a row
    with no gradient through its momentum, so after each of its steps ``restore`` writes
    the kept rows back (two foreach calls, however many are frozen: each parameter times
    its learning rows' mask, plus its frozen rows' kept values and -0.0 on the learning
    rows, which leaves them bit for bit as they are). MemberAdam needs none of this: it
    steps only the members it is given."""

    def __init__(self, members: int) -> None:
        self.members = members
        self.frozen: list[int] = []
        self._kept: list[torch.Tensor] | None = None  # every row of each parameter as it was when last frozen
        self._learning: list[torch.Tensor] = []  # per parameter: 1 on the learning members' rows, 0 on the frozen
        self._frozen_values: list[torch.Tensor] = []  # per parameter: kept on frozen rows, -0.0 elsewhere

    @torch.no_grad()
    def freeze(self, parameters: Sequence[torch.Tensor] | None, member: int) -> None:
        """Keep member ``member``'s rows of ``parameters`` as they are now (None: only count
        it frozen, for an optimizer that leaves it alone)."""
        self.frozen.append(member)
        if parameters is None:
            return
        if self._kept is None:
            self._kept = [parameter.detach().clone() for parameter in parameters]
        else:
            for kept, parameter in zip(self._kept, parameters):
                kept[member].copy_(parameter[member])
        frozen = torch.zeros(self.members, dtype=torch.bool, device=self._kept[0].device)
        frozen[self.frozen] = True
        rows = [frozen.reshape(self.members, *([1] * (kept.dim() - 1))) for kept in self._kept]
        self._learning = [(~row).to(kept.dtype) for row, kept in zip(rows, self._kept)]
        # -0.0 on the learning rows, never kept * 0: x + -0.0 is x bit for bit (a zero's sign too), and a frozen
        # member's non-finite values (a diverged SAC member's critics) reach no other member's rows
        self._frozen_values = [torch.where(row, kept, -0.0) for row, kept in zip(rows, self._kept)]

    @torch.no_grad()
    def restore(self, parameters: Sequence[torch.Tensor]) -> None:
        """The frozen members' rows back to their kept values (the learning rows' values
        unchanged: times 1, plus -0.0)."""
        if self._kept is None:
            return
        parameters = list(parameters)
        torch._foreach_mul_(parameters, self._learning)
        torch._foreach_add_(parameters, self._frozen_values)


@torch.no_grad()
def copy_member_optimizer_state(optimizer, target: int, source: int, members: int) -> None:
    """Member ``target`` takes member ``source``'s optimizer state (population-based
    training's exploit): MemberAdam's moments and step count, or the rows of torch's Adam
    moments (its step count is one for every member, and stays)."""
    if isinstance(optimizer, MemberAdam):
        optimizer.copy_member(target, source)
        return
    for state in optimizer.state.values():
        for key, value in state.items():
            if key != "step" and torch.is_tensor(value) and value.dim() and value.shape[0] == members:
                value[target].copy_(value[source])



def member_optimizer_state(optimizer, member: int, solo_parameters: Sequence[torch.Tensor], param_groups: list[dict],
                           lr: float | None = None) -> dict:
    """Member ``member``'s state of ``optimizer`` (MemberAdam, or torch's Adam over stacked
    parameters) as its solo run's ``torch.optim.Adam`` over ``solo_parameters`` holds it:
    its moments in the solo shapes, its step count, ``param_groups`` (a solo Adam's) with
    its lr (``lr``: torch's Adam has one for every member; None: the groups' own)."""
    if isinstance(optimizer, MemberAdam):
        return optimizer.member_state_dict(member, solo_parameters, param_groups)
    state = {index: {key: value.detach().cpu().clone() if key == "step" else
                     value[member].reshape(solo_parameters[index].shape).clone() for key, value in entry.items()}
             for index, entry in optimizer.state_dict()["state"].items()}
    return {"state": state, "param_groups": param_groups if lr is None else
            [{**group, "lr": lr} for group in param_groups]}


@torch.no_grad()
def load_member_optimizer_state(optimizer, member: int, solo_state: dict) -> None:
    """The inverse of ``member_optimizer_state``: member ``member``'s rows of ``optimizer``
    (MemberAdam, or torch's Adam over stacked parameters) set from its solo run's
    ``torch.optim.Adam.state_dict()`` (``solo_state``; a resumed member's checkpoint). Its
    lr is not read: the learner sets each member's lr before every step. torch's Adam keeps
    one step count per parameter, so every member it holds must be at the same step (a
    ValueError otherwise)."""
    entries = solo_state["state"]
    if isinstance(optimizer, MemberAdam):
        optimizer.steps[member] = int(entries[0]["step"]) if entries else 0
        for name in ("exp_avg", "exp_avg_sq"):
            for index, view in enumerate(optimizer.member_views(getattr(optimizer, name))):
                if index in entries:
                    view[member].copy_(entries[index][name].reshape(view[member].shape))
                else:
                    view[member].zero_()
        return
    parameters = [parameter for group in optimizer.param_groups for parameter in group["params"]]
    for index, parameter in enumerate(parameters):
        entry = entries.get(index)
        if entry is None:  # the member has not stepped (nor, at the same step, has any other)
            continue
        state = optimizer.state[parameter]
        if not state:  # torch's Adam makes its state at its first step: made here, every row zero
            fused = optimizer.defaults.get("fused")  # its step count on the parameters' device, else on the CPU
            step_options = dict(dtype=torch.float32, device=parameter.device if fused else "cpu")
            state["step"] = torch.tensor(float(entry["step"]), **step_options)
            state["exp_avg"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
        elif float(state["step"]) != float(entry["step"]):
            raise ValueError(f"the members of one model are at other Adam steps ({float(state['step']):.0f} and "
                             f"{float(entry['step']):.0f}): they cannot share torch's Adam")
        for name in ("exp_avg", "exp_avg_sq"):
            state[name][member].copy_(entry[name].reshape(state[name][member].shape))


@contextlib.contextmanager
def denormals_flushed():
    """Inside, the CPU reads and writes denormal floats (below 1.2e-38) as zero
    (``torch.set_flush_denormal``), then not (nothing else in rlcollect sets it). Adam's
    moments of units with tiny or no gradients decay into the denormal range, where the CPU
    computes many times slower; flushed, they are zero, and the step they make is as
    negligible as before (docs/sweeps.md, "Each member's Adam")."""
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def step_members(optimizer, parameters: Sequence[torch.Tensor], frozen: FrozenRows,
                 stepping: Sequence[int] | None = None) -> None:
    """One step of ``optimizer`` (MemberAdam, or torch's Adam) over the stacked
    ``parameters`` for the members that learn: MemberAdam steps ``stepping`` (None: every
    member ``frozen`` does not hold) alone; torch's Adam steps every row, then the frozen
    members' rows are written back. A model of several members steps with denormals
    flushed (``denormals_flushed``); a model of one member is its solo run's step."""
    with denormals_flushed() if frozen.members > 1 else contextlib.nullcontext():
        if isinstance(optimizer, MemberAdam):
            optimizer.step([member for member in range(frozen.members) if member not in frozen.frozen]
                           if stepping is None else stepping)
        else:
            optimizer.step()
            frozen.restore(parameters)
