"""GRU and LSTM policy blocks that split on ``is_init``, run in step or recurrent mode.

Step mode (the default, what a collector runs): every element of the input is one step of
one env, batch shape ``[*B]`` (``[]`` for a single env, ``[P]`` for a batched one):

    observation [*B, in], recurrent_state [*B, L, H] ──one step──▶ features [*B, H],
                                                                   ("next", recurrent_state) [*B, L, H]

Recurrent mode (``with set_recurrent_mode("recurrent")``, to train on stored data): the
input is the flat 1-D layout of docs/data-layout.md, trajectories or slices end to end
(``[N]``); a ``[*B, T]`` input is read as its rows end to end, each row starting a segment.

    is_init     T . . T . . . T .      a segment starts where is_init (and at position 0)
    segments   [0 1 2|3 4 5 6|7 8]     ──one gather──▶ [num_segments, max_len]
    one RNN call over all segments     ──one gather──▶ back to [N]

Each segment starts from the hidden state stored at its first step. The modules never zero
a state themselves, in either mode, so both modes compute the same function of the stored
data. The collector zeros the carrier's state where an env resets (``HiddenStatePrimer.zero_``),
so stored data holds zeros at env resets and the carried state everywhere else, including
at the slice starts a SliceSampler marks: a flat sample is processed as it was collected.

Hidden states are stored per step as ``[*B, num_layers, hidden_size]`` (the layer dim after
the batch dims, unlike torch.nn.GRU's ``h0``).
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from rlcollect.primers import HiddenStatePrimer
from rlcollect.thread_settings import ThreadSetting
from rlcollect.validation import check_positive_int

RECURRENT_MODES = ("step", "recurrent")


def recurrent_mode() -> str:
    """The mode recurrent modules run in on this thread: ``"step"`` unless inside
    ``set_recurrent_mode``."""
    return set_recurrent_mode.current()


class set_recurrent_mode(ThreadSetting):
    """Run the GRUModule / LSTMModule calls inside it in ``mode`` (``"step"`` or ``"recurrent"``).

    A context manager, or a function decorator. The mode is per thread, so a trainer thread
    in recurrent mode does not change how a collector thread steps its policy; contexts
    nest, and each exit restores the mode it found.
    """

    default = "step"

    def __init__(self, mode: str) -> None:
        if mode not in RECURRENT_MODES:
            raise ValueError(f"set_recurrent_mode: mode must be one of {RECURRENT_MODES}, got {mode!r}")
        super().__init__(mode)




def _next(key: NestedKey) -> tuple[str, ...]:
    return ("next", *key) if isinstance(key, tuple) else ("next", key)


class _RecurrentModule(TensorDictModuleBase):
    """What GRUModule and LSTMModule share: keys, validation, the two modes. Subclasses set
    ``rnn_class`` and ``num_states`` and run one layer (``step_layer``, ``sequence_layer``).

    A layer with ``run_step`` and ``run_sequence`` methods of its own (the stacked layer of
    a batched sweep, rlcollect.sweeps.stacked_rnn) runs itself; its ``members`` (the
    stacked models: inputs are member-major, ``[members * n, ...]``) each get their own
    segments in recurrent mode, padded to one count (``segment_layout``)."""

    rnn_class: type[nn.RNNBase]
    num_states: int  # hidden-state tensors per step: 1 (GRU: h), 2 (LSTM: h, c)

    def __init__(self, input_size: int, hidden_size: int, num_layers: int,
                 in_keys: Sequence[NestedKey], out_keys: Sequence[NestedKey]) -> None:
        super().__init__()
        name = type(self).__name__
        self.input_size = check_positive_int("input_size", input_size)
        self.hidden_size = check_positive_int("hidden_size", hidden_size)
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.in_keys, self.out_keys = list(in_keys), list(out_keys)
        if len(self.in_keys) != self.num_states + 2 or len(self.out_keys) != self.num_states + 1:
            raise ValueError(f"{name} needs in_keys [input, {self.num_states} hidden-state key(s), is_init] and "
                             f"out_keys [output, the same hidden-state keys under 'next'], got "
                             f"in_keys={self.in_keys}, out_keys={self.out_keys}")
        self.input_key, *self.hidden_keys, self.is_init_key = self.in_keys
        self.output_key = self.out_keys[0]
        expected = [_next(key) for key in self.hidden_keys]
        if self.out_keys[1:] != expected:
            # the collector carries ("next", key) over to key for the next step
            raise ValueError(f"{name}: the hidden-state out_keys must be the in_keys' under 'next', "
                             f"{expected}, got {self.out_keys[1:]}")
        # one single-layer RNN per layer: the per-step states of every layer are then each
        # layer's output sequence, which a multi-layer nn.GRU / nn.LSTM does not return
        self.layers = nn.ModuleList(
            self.rnn_class(input_size if layer == 0 else hidden_size, hidden_size, batch_first=True)
            for layer in range(num_layers))

    def make_tensordict_primer(self) -> HiddenStatePrimer:
        """The hidden-state entries (zeros at an env reset) the module's input must carry."""
        dtype = self.layers[0].weight_ih_l0.dtype
        return HiddenStatePrimer({key: (self.num_layers, self.hidden_size) for key in self.hidden_keys}, dtype)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        batch = tensordict.batch_size
        mode = recurrent_mode()
        if mode == "recurrent" and len(batch) == 0:
            raise ValueError(f"{type(self).__name__} in recurrent mode needs a batch dim (the flat [N] layout, "
                             "or [*B, T]); got a tensordict of batch_size []: use step mode for a single step")
        weight = self.layers[0].weight_ih_l0
        inputs = self._get(tensordict, self.input_key, (*batch, self.input_size))
        inputs = inputs.to(weight.dtype).reshape(-1, self.input_size)
        states = [self._get(tensordict, key, (*batch, self.num_layers, self.hidden_size))
                  .reshape(-1, self.num_layers, self.hidden_size) for key in self.hidden_keys]
        if mode == "recurrent":
            is_init = self._get(tensordict, self.is_init_key, tuple(batch))
            if is_init.dtype != torch.bool:
                raise ValueError(f"{type(self).__name__}: {self.is_init_key!r} must be bool, got {is_init.dtype}")
            members = getattr(self.layers[0], "members", 1)  # a stacked layer's (module docstring)
            outputs, next_states = self._recurrent(inputs, states, is_init.reshape(-1, batch[-1]), members)
        else:
            outputs, next_states = self._run(inputs.unsqueeze(1), states, sequence=False)
            outputs = outputs.squeeze(1)
        tensordict.set(self.output_key, outputs.reshape(*batch, self.hidden_size))
        for key, state in zip(self.out_keys_source[1:], next_states):
            tensordict.set(key, state.reshape(*batch, self.num_layers, self.hidden_size))
        return tensordict

    def _get(self, tensordict: TensorDictBase, key: NestedKey, shape: tuple[int, ...]) -> torch.Tensor:
        value = tensordict.get(key, None)
        name = type(self).__name__
        if value is None:
            hint = (" (add the zero initial states with module.make_tensordict_primer().apply(tensordict))"
                    if key in self.hidden_keys else "")
            mode = f" in {recurrent_mode()} mode" if key == self.is_init_key else ""
            raise KeyError(f"{name}{mode} reads {key!r}, which the input lacks{hint}; it holds "
                           f"{sorted(map(str, tensordict.keys(True, True)))}")
        if tuple(value.shape) != shape:
            raise ValueError(f"{name}: {key!r} has shape {tuple(value.shape)}, expected {shape} "
                             f"(batch_size {tuple(tensordict.batch_size)}, num_layers={self.num_layers}, "
                             f"hidden_size={self.hidden_size}, input_size={self.input_size})")
        return value

    def _recurrent(self, inputs: torch.Tensor, states: list[torch.Tensor], is_init: torch.Tensor, members: int = 1
                   ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """inputs [N, in], states [N, L, H], is_init [rows, T] -> outputs [N, H], next states
        [N, L, H]; ``members`` models side by side (a stacked layer's): each member's
        segments its own (``segment_layout``)."""
        first, segment, step, index = segment_layout(is_init, members)
        # [segments, max_len]; past a segment's end the index runs into the next segments (clamped
        # at the end): padding that the causal RNN never feeds back into the real steps
        outputs, next_states = self._run(inputs[index], [state[first] for state in states], sequence=True)
        return outputs[segment, step], [state[segment, step] for state in next_states]

    def _run(self, inputs: torch.Tensor, states: list[torch.Tensor], sequence: bool
             ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """inputs [S, T, in], states [S, L, H] -> outputs [S, T, H] and the states after every
        step [S, T, L, H] (``sequence``) or after the last one [S, L, H] (step mode, T = 1)."""
        per_layer = []
        for index, layer in enumerate(self.layers):
            layer_states = [state[:, index] for state in states]
            runs_itself = getattr(layer, "run_sequence" if sequence else "run_step", None)  # a stacked layer
            if runs_itself is not None:
                inputs, layer_states = runs_itself(inputs, layer_states)
            elif sequence:
                inputs, layer_states = self.sequence_layer(layer, inputs, layer_states)
            else:
                inputs, layer_states = self.step_layer(layer, inputs, layer_states)
            per_layer.append(layer_states)
        return inputs, [torch.stack(layer_states, -2) for layer_states in zip(*per_layer)]

    @staticmethod
    def step_layer(layer, inputs, states):
        """One step of one torch layer: [S, 1, in], [S, H] each -> [S, 1, H], the states
        after the step [S, H] each."""
        raise NotImplementedError

    @staticmethod
    def sequence_layer(layer, inputs, states):
        """Sequences through one torch layer: [S, T, in], [S, H] each -> [S, T, H], the
        states after every step [S, T, H] each."""
        raise NotImplementedError


def segment_layout(is_init: torch.Tensor, members: int
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Recurrent mode's segments for ``members`` models side by side: ``is_init [rows, T]``
    holds each member's rows in turn (member-major), and each member's steps are cut into
    its own segments as ``_recurrent`` cuts a model's, then padded to the count of the
    member with the most (a padding segment repeats the member's last step; no real step
    reads it). Returns the first step of each segment ``[members * K]``, each step's segment
    ``[N]`` and position in it ``[N]``, and the gather index ``[members * K, max_len]``:
    segments member-major, so a stacked layer's rows split evenly among its members."""
    device = is_init.device
    starts = is_init.clone()
    starts[:, 0] = True
    starts = starts.reshape(members, -1)  # [M, n]: each member's steps end to end
    steps = starts.shape[1]
    own_segment = starts.cumsum(1) - 1  # [M, n]: each step's segment among its member's
    count = int(own_segment[:, -1].max()) + 1  # K: the most segments of any member
    member, position = starts.nonzero(as_tuple=True)
    first = torch.full((members, count), steps - 1, dtype=torch.long, device=device)
    first[member, own_segment[member, position]] = position
    step = torch.arange(steps, device=device) - first.gather(1, own_segment)  # [M, n]
    max_len = int(step.max()) + 1
    offset = torch.arange(members, device=device).unsqueeze(1) * steps
    index = (first.unsqueeze(-1) + torch.arange(max_len, device=device)).clamp_(max=steps - 1) + offset.unsqueeze(-1)
    segment = own_segment + torch.arange(members, device=device).unsqueeze(1) * count
    return (first + offset).reshape(-1), segment.reshape(-1), step.reshape(-1), index.reshape(-1, max_len)


def _as_hx(state: torch.Tensor) -> torch.Tensor:
    """[S, H] -> nn.GRU / nn.LSTM's [1, S, H]."""
    return state.unsqueeze(0).contiguous()


class GRUModule(_RecurrentModule):
    """A GRU over ``in_keys[0]`` that writes its last layer's output to ``out_keys[0]`` and
    the state after the step to ``("next", "recurrent_state")``.

    Args:
        input_size: features of the input entry (its last dim).
        hidden_size: features of the output and of each layer's state.
        num_layers: stacked GRU layers; the state is stored as ``[*batch, num_layers, hidden_size]``.
        in_keys: ``[input, hidden state, is_init]``.
        out_keys: ``[output, ("next", hidden state)]``.

    Step mode by default; inside ``set_recurrent_mode("recurrent")`` it processes a flat
    batch of concatenated trajectories in one RNN call, restarting from the stored state at
    every ``is_init`` (see the module docstring).
    """

    rnn_class = nn.GRU
    num_states = 1

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, *,
                 in_keys: Sequence[NestedKey] = ("observation", "recurrent_state", "is_init"),
                 out_keys: Sequence[NestedKey] = ("features", ("next", "recurrent_state"))) -> None:
        super().__init__(input_size, hidden_size, num_layers, in_keys, out_keys)

    @staticmethod
    def step_layer(layer, inputs, states):
        outputs, hidden = layer(inputs, _as_hx(states[0]))
        return outputs, [hidden.squeeze(0)]

    @staticmethod
    def sequence_layer(layer, inputs, states):
        outputs, _ = layer(inputs, _as_hx(states[0]))
        return outputs, [outputs]  # a GRU's state after each step is its output


class LSTMModule(_RecurrentModule):
    """An LSTM over ``in_keys[0]`` that writes its last layer's output to ``out_keys[0]`` and
    the states after the step to ``("next", "recurrent_state_h")`` and ``("next", "recurrent_state_c")``.

    Args:
        input_size: features of the input entry (its last dim).
        hidden_size: features of the output and of each layer's states.
        num_layers: stacked LSTM layers; each state is stored as ``[*batch, num_layers, hidden_size]``.
        in_keys: ``[input, hidden state h, cell state c, is_init]``.
        out_keys: ``[output, ("next", h), ("next", c)]``.

    Step mode by default; inside ``set_recurrent_mode("recurrent")`` it processes a flat
    batch of concatenated trajectories in one RNN call per layer, restarting from the stored
    states at every ``is_init`` (see the module docstring).
    """

    rnn_class = nn.LSTM
    num_states = 2

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, *,
                 in_keys: Sequence[NestedKey] = ("observation", "recurrent_state_h", "recurrent_state_c", "is_init"),
                 out_keys: Sequence[NestedKey] = ("features", ("next", "recurrent_state_h"),
                                                  ("next", "recurrent_state_c"))) -> None:
        super().__init__(input_size, hidden_size, num_layers, in_keys, out_keys)

    @staticmethod
    def step_layer(layer, inputs, states):
        outputs, (hidden, cell) = layer(inputs, (_as_hx(states[0]), _as_hx(states[1])))
        return outputs, [hidden.squeeze(0), cell.squeeze(0)]

    @staticmethod
    def sequence_layer(layer, inputs, states):
        hidden0, cell0 = states
        outputs, _ = layer(inputs, (_as_hx(hidden0), _as_hx(cell0)))
        return outputs, [outputs, _cell_states(layer, inputs, outputs, hidden0, cell0)]


def _cell_states(layer: nn.LSTM, inputs: torch.Tensor, outputs: torch.Tensor, hidden0: torch.Tensor,
                 cell0: torch.Tensor) -> torch.Tensor:
    """The cell state after every step of a one-layer LSTM, which nn.LSTM does not return.

    With the inputs ``[S, T, in]``, the outputs ``[S, T, H]`` (the h after each step) and the
    initial ``(h, c)`` ``[S, H]``, the gates of every step are known, and
    ``c_t = f_t * c_{t-1} + i_t * g_t`` is a linear recurrence: a prefix scan solves it in
    log2(T) vectorised passes instead of a Python loop over T.
    """
    hidden_before = torch.cat([hidden0.unsqueeze(1), outputs[:, :-1]], 1)
    gates = (F.linear(inputs, layer.weight_ih_l0, layer.bias_ih_l0)
             + F.linear(hidden_before, layer.weight_hh_l0, layer.bias_hh_l0))
    input_gate, forget_gate, cell_gate, _ = gates.chunk(4, -1)  # torch's gate order: i, f, g, o
    decay, cell = forget_gate.sigmoid(), input_gate.sigmoid() * cell_gate.tanh()
    cell = torch.cat([cell[:, :1] + decay[:, :1] * cell0.unsqueeze(1), cell[:, 1:]], 1)
    shift = 1
    while shift < cell.shape[1]:
        # step t holds c_t as an affine function of c_{t - shift} (exact once t < shift);
        # compose it with step t - shift's to reach back 2 * shift
        cell = torch.cat([cell[:, :shift], cell[:, shift:] + decay[:, shift:] * cell[:, :-shift]], 1)
        decay = torch.cat([decay[:, :shift], decay[:, shift:] * decay[:, :-shift]], 1)
        shift *= 2
    return cell
