"""S one-layer GRUs or LSTMs of one shape as one layer (docs/sweeps.md, "How members are
stacked"): what ``stack_modules`` puts in place of a recurrent policy's ``nn.GRU`` /
``nn.LSTM`` layers.

The layer keeps torch's parameter names with a leading member dim (``weight_ih_l0``
``[S, G * H, in]``, ``bias_hh_l0`` ``[S, G * H]``, G gates: 3 for a GRU, 4 for an LSTM),
so a member's rows are its solo layer's state. Its rows are member-major: an input
``[S * n, T, in]`` is member m's ``n`` rows in turn. GRUModule / LSTMModule call its
``run_step`` and ``run_sequence`` instead of their torch layer's (modules/recurrent.py),
and give each member its own segments in recurrent mode (``members``).

One member runs its solo layer's own call on its row of the parameters (bit-equal);
several run torch's cell equations side by side, the input gates of every step in one
batched product and one batched product per step for the hidden gates.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

GATES = {nn.GRU: 3, nn.LSTM: 4}
NAMES = ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")


def stackable_rnn(layer: nn.Module) -> bool:
    """Whether ``layer`` is a torch GRU / LSTM that ``StackedRNN`` stacks: one layer,
    batch-first, one direction, with biases, no projection (what GRUModule and LSTMModule
    build)."""
    return (type(layer) in GATES and layer.num_layers == 1 and layer.batch_first and not layer.bidirectional
            and layer.bias and getattr(layer, "proj_size", 0) == 0)


class SoloLayer(nn.Module):
    """One member's layer as its solo module runs it: ``run(layer, inputs, states)`` (the
    recurrent module's ``step_layer`` or ``sequence_layer``) on the torch layer ``layer``
    (what ``torch.func.functional_call`` gives a member's parameters to)."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, run, inputs: torch.Tensor, states: list[torch.Tensor]):
        return run(self.layer, inputs, states)


class StackedRNN(nn.Module):
    """``layers`` (S torch GRUs or LSTMs of one shape, ``stackable_rnn``) as one layer of
    S members; ``step`` and ``sequence``: the recurrent module's ``step_layer`` and
    ``sequence_layer`` (how its solo layer runs)."""

    def __init__(self, layers: list[nn.Module], step, sequence) -> None:
        super().__init__()
        self.lstm = isinstance(layers[0], nn.LSTM)
        for name in NAMES:
            setattr(self, name, nn.Parameter(torch.stack([getattr(layer, name).detach() for layer in layers]).clone()))
        # not a submodule (a list): its own weights are never used, the members' rows run in it
        self.solo = [SoloLayer(copy.deepcopy(layers[0]))]
        self.step, self.sequence = step, sequence

    @property
    def members(self) -> int:
        """The members a call computes: all of them, or as many as the rows of the
        parameters it is called with (``torch.func.functional_call`` with some members')."""
        return self.weight_ih_l0.shape[0]

    def run_step(self, inputs: torch.Tensor, states: list[torch.Tensor]):
        """[S * n, 1, in], [S * n, H] each -> [S * n, 1, H], the states after the step."""
        if self.members == 1:
            return self.solo_call(self.step, inputs, states)
        outputs, states = self.cells(inputs, states)
        return outputs, [state[:, -1] for state in states]

    def run_sequence(self, inputs: torch.Tensor, states: list[torch.Tensor]):
        """[S * n, T, in], [S * n, H] each -> [S * n, T, H], the states after every step."""
        if self.members == 1:
            return self.solo_call(self.sequence, inputs, states)
        return self.cells(inputs, states)

    def solo_call(self, run, inputs: torch.Tensor, states: list[torch.Tensor]):
        rows = {f"layer.{name}": getattr(self, name)[0] for name in NAMES}
        return torch.func.functional_call(self.solo[0], rows, (run, inputs, states))

    def cells(self, inputs: torch.Tensor, states: list[torch.Tensor]):
        """Every member's cell over T steps: outputs [S * n, T, H] and the states after
        every step (h; an LSTM's c too) [S * n, T, H] each."""
        members = self.members
        rows, steps = inputs.shape[:2]
        per_member = rows // members
        hidden = states[0].reshape(members, per_member, -1)
        cell = states[1].reshape(members, per_member, -1) if self.lstm else None
        size = hidden.shape[-1]
        gates = 4 if self.lstm else 3
        x = inputs.reshape(members, per_member * steps, inputs.shape[-1])
        input_gates = torch.baddbmm(self.bias_ih_l0.unsqueeze(1), x, self.weight_ih_l0.transpose(1, 2))
        # each step's gates as tensors of their own (one unbind: its backward stacks their gradients once,
        # where slices would each fill a zero tensor of the whole)
        input_gates = input_gates.reshape(members, per_member, steps * gates, size).unbind(2)
        weight_hh, bias_hh = self.weight_hh_l0.transpose(1, 2), self.bias_hh_l0.unsqueeze(1)
        hiddens, cells = [], []
        for step in range(steps):
            own = input_gates[step * gates:(step + 1) * gates]
            recurrent = torch.baddbmm(bias_hh, hidden, weight_hh).reshape(members, per_member, gates, size).unbind(2)
            if self.lstm:  # torch's gate order: i, f, g, o
                i, f, g, o = (a + b for a, b in zip(own, recurrent))
                cell = f.sigmoid() * cell + i.sigmoid() * g.tanh()
                hidden = o.sigmoid() * cell.tanh()
                cells.append(cell)
            else:  # r, z, n
                reset, update = (own[0] + recurrent[0]).sigmoid(), (own[1] + recurrent[1]).sigmoid()
                new = (own[2] + reset * recurrent[2]).tanh()
                hidden = torch.lerp(new, hidden, update)  # new + update * (hidden - new)
            hiddens.append(hidden)
        outputs = torch.stack(hiddens, 2).reshape(rows, steps, -1)
        if self.lstm:
            return outputs, [outputs, torch.stack(cells, 2).reshape(rows, steps, -1)]
        return outputs, [outputs]
