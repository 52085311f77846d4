"""S copies of one policy as one module: every parameter gets a leading member dim
(docs/sweeps.md, "How members are stacked").

``stack_modules([policy_0, ..., policy_S-1])`` (S modules of one architecture, each
initialised as its solo run initialises it) returns one module of that architecture that
reads inputs ``[S, N, ...]``, member ``m`` computing on row ``m`` with its own weights:

    nn.Linear         -> StackedLinear: weight [S, out, in], bias [S, out] (one batched
                         matmul; with S = 1 the very nn.Linear call, so bit-equal)
    RunningNorm       -> MemberRunningNorm: statistics [S, 1, *shape], each member folding in
                         its own rows
    nn.Conv2d         -> StackedConv2d: weight [S, out, in, k, k], bias [S, out] (each
                         member's images through the very nn.Conv2d call on its weight)
    nn.GRU / nn.LSTM  -> StackedRNN (stacked_rnn.py): a GRUModule's / LSTMModule's layers, the
                         gates' weights [S, G * H, in] and [S, G * H, H]
    nn.Tanh           -> StackedTanh, with S > 1 (numpy's vectorised tanh on a CPU: within
                         one ulp of torch's, several times faster)
    other parameters  -> [S, 1, *shape] (e.g. a Gaussian's log-std [A]: broadcast over N)
    and buffers

Other layers with weights (a layer norm, a transposed convolution, ...) are refused
(``unstackable_layer``): such members train in lockstep instead (lockstep.py).
``member_state_dict(stacked_state, solo_module, m)`` is member m's state in the solo
module's shapes (what its run folder's checkpoints hold), and ``load_member_state`` the
reverse. ``padded_rows`` stacks the members' rows of unequal lengths (a PPO minibatch, a
replay sample of their own batch sizes), padded by repetition, with the mask of the real ones.
"""
from __future__ import annotations

import copy
from typing import Sequence

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rlcollect.errors import ConfigError
from rlcollect.modules.encoders import RunningNorm
from rlcollect.modules.recurrent import GRUModule, LSTMModule
from rlcollect.sweeps.stacked_rnn import StackedRNN, stackable_rnn

# modules without weights of their own, which work on any leading dims as they are
SHAPE_AGNOSTIC = (nn.Sequential, nn.Tanh, nn.ReLU, nn.ELU, nn.Identity, nn.Flatten)


class StackedLinear(nn.Module):
    """S linear layers of one shape: ``x [S, ..., in] -> [S, ..., out]``, member m's rows
    through member m's weight ``[out, in]`` and bias ``[out]``."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)
        self.members = weight.shape[0]
        self.views: tuple | None = None  # acting's views of the parameters (``acting_views``)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        members = weight.shape[0]  # fewer than self.members when called with some members' weights
        learning = weight.requires_grad and torch.is_grad_enabled()
        if members == 1:  # the solo layer's own call: a run of one member is bit-equal to its solo run
            # learning, squeezed, not indexed: a view's backward passes the gradient on, an index's copies it
            weight, bias = (weight.squeeze(0), None if bias is None else bias.squeeze(0)) if learning else \
                self.acting_views(weight, bias)
            if x.shape[0] != 1:  # its rows flattened (a CNN encoder's [S * N, in]): as they are
                return F.linear(x, weight, bias)
            return F.linear(x.squeeze(0), weight, bias).unsqueeze(0)
        stacked = x.dim() == 3  # [S, N, in], the usual input: no reshape in or out (nor their autograd nodes)
        rows = x if stacked else x.reshape(members, -1, x.shape[-1])
        if learning:
            out = StackedLinearFunction.apply(rows, weight, bias)
        else:
            transposed, bias = self.acting_views(weight, bias)
            out = torch.bmm(rows, transposed) if bias is None else torch.baddbmm(bias, rows, transposed)
        return out if stacked else out.reshape(*x.shape[:-1], out.shape[-1])

    def __getstate__(self) -> dict:  # a copy or a pickle makes its own views
        return {**super().__getstate__(), "views": None}

    def acting_views(self, weight: torch.Tensor, bias: torch.Tensor | None) -> tuple:
        """The views a forward pass without gradients computes with: one member's weight
        ``[out, in]`` and bias ``[out]``, or S members' weights transposed ``[S, in, out]``
        and biases ``[S, 1, out]``, made once for the parameters they view (an acting step
        of a small model is mostly such per-call work). An optimizer's step, a loaded state
        and a member's copy write into the parameters, so the views see them; parameters
        replaced or moved (``.to``) are other tensors, and the views are made again."""
        views = self.views
        if views is None or views[0] is not weight or views[1] is not bias or views[2] != weight.data_ptr() \
                or (bias is not None and views[3] != bias.data_ptr()):
            if weight.shape[0] == 1:
                made = weight[0], None if bias is None else bias[0]
            else:
                made = weight.transpose(1, 2), None if bias is None else bias.unsqueeze(1)
            views = (weight, bias, weight.data_ptr(), None if bias is None else bias.data_ptr(), made)
            self.views = views
        return views[4]


class StackedLinearFunction(torch.autograd.Function):
    """``x [S, N, in] -> x W^T + b`` for weights ``[S, out, in]``, its backward pass taking
    each batched product in the orientation that runs fast on a CPU. MKL's batched product
    is slow when its output's last dim is short: autograd's own backward computes the
    weight's gradient as ``x^T g`` (``[S, in, out]``, then copied transposed into the
    weight's layout), 2-5x slower than ``g^T x`` for an output layer of 1 or 2 units, and
    for a layer of one unit the input's gradient as a product over one term. This one
    computes the weight's gradient in whichever orientation has the longer last dim (in
    the weight's own layout when that is ``in``), the input's as a broadcast product when
    ``out`` is 1. Each gradient element is the same sum, in the same order, as autograd's
    (bit-equal on the shapes measured, docs/sweeps.md "How members are stacked")."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return torch.bmm(x, weight.transpose(1, 2)) if bias is None else \
            torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        grad_x = None
        if ctx.needs_input_grad[0]:
            grad_x = grad * weight if weight.shape[1] == 1 else torch.bmm(grad, weight)
        grad_weight = None
        if ctx.needs_input_grad[1]:
            grad_weight = torch.bmm(grad.transpose(1, 2), x) if weight.shape[2] >= weight.shape[1] else \
                torch.bmm(x.transpose(1, 2), grad).transpose(1, 2)
        grad_bias = grad.sum(1) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_weight, grad_bias


class StackedSequential(nn.Sequential):
    """nn.Sequential of a stacked model: each layer's ``forward`` called directly, without
    nn.Module's call machinery (hooks, which a stacked model never has): an acting step of
    a small MLP is mostly such per-call work."""

    def forward(self, x):
        for layer in self:
            x = layer.forward(x)
        return x


class StackedTanh(nn.Module):
    """nn.Tanh for a model of several members. On a CPU it computes with numpy's vectorised
    tanh, which is within one float32 ulp of torch's (a quarter of the elements differ, by
    one ulp) and several times faster: torch's CPU tanh takes about 2.7 ns an element here,
    numpy's 0.4, and the 4 tanh layers of an 8-member PPO minibatch step were a fifth of
    its time (docs/sweeps.md, "How members are stacked"). Elsewhere (CUDA, half floats),
    torch's. A model of one member keeps nn.Tanh, so that it stays its solo run bit for bit."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64):
            return torch.tanh(x)
        if x.requires_grad and torch.is_grad_enabled():
            return NumpyTanh.apply(x)
        return numpy_tanh(x)


def numpy_tanh(x: torch.Tensor) -> torch.Tensor:
    """tanh of a CPU float tensor by numpy's vectorised kernel (no autograd)."""
    return torch.from_numpy(np.tanh(x.detach().numpy()))


class NumpyTanh(torch.autograd.Function):
    """``numpy_tanh`` with tanh's gradient (``aten.tanh_backward`` of its output)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        y = numpy_tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        y, = ctx.saved_tensors
        return torch.ops.aten.tanh_backward(grad, y)


class StackedConv2d(nn.Module):
    """S 2-d convolutions of one shape: images ``[S * n, C, H, W]`` (member-major) ->
    ``[S * n, out, H', W']``, member m's images through member m's weight ``[out, C, k, k]``
    and bias ``[out]``, each member's by the solo layer's own call (on a CPU S calls of
    a convolution's arithmetic are faster than one grouped convolution of S groups, and
    they round as the solo layer does)."""

    def __init__(self, conv: nn.Conv2d, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight)
        self.bias = None if bias is None else nn.Parameter(bias)
        self.options = dict(stride=conv.stride, padding=conv.padding, dilation=conv.dilation, groups=conv.groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # each member's weight and bias by one unbind (whose backward stacks their gradients once)
        weights = self.weight.unbind(0)
        biases = [None] * len(weights) if self.bias is None else self.bias.unbind(0)
        images = x.reshape(len(weights), -1, *x.shape[1:]).unbind(0)
        return torch.cat([F.conv2d(member_images, weight, bias, **self.options)
                          for member_images, weight, bias in zip(images, weights, biases)])


class MemberRunningNorm(RunningNorm):
    """RunningNorm with one set of statistics per member (``[S, 1, *shape]``): the forward
    pass broadcasts over each member's rows, ``update(x [S, ..., *shape])`` folds member
    m's rows into member m's statistics with RunningNorm's own arithmetic."""

    def __init__(self, norm: RunningNorm, members: Sequence[RunningNorm]) -> None:
        nn.Module.__init__(self)
        self.eps, self.clip = norm.eps, norm.clip
        for name in ("running_mean", "running_var", "count"):
            self.register_buffer(name, stack_values([getattr(member, name) for member in members]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        members, shape = self.running_mean.shape[0], self.running_mean.shape[2:]
        return super().forward(x.reshape(members, -1, *shape)).reshape(x.shape)

    @torch.no_grad()
    def update(self, x: torch.Tensor, sample_mask: torch.Tensor | None = None) -> None:
        """``sample_mask`` ``[S, B]`` (a stacked sample padded to one size, SAMPLE_MASK): each
        member folds in its real rows alone (they come first)."""
        shape, members = self.running_mean.shape[2:], self.running_mean.shape[0]
        x = x.reshape(members, -1, *shape)
        counts = None if sample_mask is None else sample_mask.sum(-1).tolist()
        for member in range(members):
            solo = RunningNorm.__new__(RunningNorm)  # a view of this member's statistics
            nn.Module.__init__(solo)
            solo.eps, solo.clip = self.eps, self.clip
            solo.running_mean, solo.running_var = self.running_mean[member, 0], self.running_var[member, 0]
            solo.count = self.count[member, 0]
            RunningNorm.update(solo, x[member] if counts is None else x[member, :counts[member]])


class SomeMembers:
    """A stacked model (``stack_modules``) computing with some members' rows of its
    parameters and buffers: ``some(members, "evaluate", minibatch)`` calls the model's
    ``evaluate`` with the rows ``members`` (an index tensor) of each, their gradients
    reaching the stacked parameters. It is a copy of the model's modules that holds no
    tensors of its own, given the members' rows at each call: what
    ``torch.func.functional_call`` does, without its walk over every module at each call
    (about 180 us of a PPO minibatch step of a small MLP)."""

    def __init__(self, stacked: nn.Module) -> None:
        tensors = [*stacked.named_parameters(remove_duplicate=False), *stacked.named_buffers(remove_duplicate=False)]
        shared = {id(value): value for _, value in tensors}  # the copy shares them, then lets them go
        generators = getattr(stacked, "generators", None)
        if generators is not None:
            shared[id(generators)] = generators
        self.model = copy.deepcopy(stacked, shared)
        self.slots = []  # (the copy's module's attributes, the stacked module, the tensor's name)
        for name, _ in tensors:
            owner, _, key = name.rpartition(".")
            module = self.model.get_submodule(owner)
            delattr(module, key)  # no longer a parameter or buffer of the copy: a plain attribute at each call
            self.slots.append((vars(module), stacked.get_submodule(owner), key))

    def __call__(self, members: torch.Tensor, method: str, *args):
        if members.numel() == 1:  # one member (the last one training): its rows as views, whose backward is a copy
            member = int(members)
            for attributes, source, key in self.slots:
                attributes[key] = getattr(source, key).narrow(0, member, 1)
        else:
            for attributes, source, key in self.slots:
                attributes[key] = getattr(source, key).index_select(0, members)
        return getattr(self.model, method)(*args)


def padded_rows(rows: torch.Tensor | Sequence) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each member's rows (tensors or tensordicts, one per member) stacked ``[S, W, ...]``,
    and the mask ``[S, W]`` of the real ones (None: all are): rows of unequal lengths padded
    to the longest by repeating each member's own from its first, so its real ones come
    first. Rows already stacked (a tensor ``[S, W]``) are returned as they are."""
    if torch.is_tensor(rows):
        return rows, None
    width = max(row.numel() for row in rows)
    if all(row.numel() == width for row in rows):
        return torch.stack(list(rows)), None
    columns = torch.arange(width, device=rows[0].device)
    counts = torch.tensor([row.numel() for row in rows], device=columns.device)
    return torch.stack([row[columns % row.numel()] for row in rows]), columns < counts.unsqueeze(1)


def stackable_conv(layer: nn.Module) -> bool:
    """Whether ``layer`` is a 2-d convolution that ``StackedConv2d`` stacks (zero padding)."""
    return type(layer) is nn.Conv2d and layer.padding_mode == "zeros"


def stacked_weights(layers: Sequence[nn.Module]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weights ``[S, *shape]`` and biases (None: the layers have none) of S layers of one shape."""
    bias = None if layers[0].bias is None else torch.stack([layer.bias.detach() for layer in layers]).clone()
    return torch.stack([layer.weight.detach() for layer in layers]).clone(), bias


def unstackable_layer(module: nn.Module) -> str | None:
    """The first layer of ``module`` with weights that ``stack_modules`` cannot stack (a
    layer norm, a transposed convolution: any torch.nn layer but Linear, Conv2d and a
    GRUModule's or LSTMModule's GRU / LSTM), named in words; None: every layer stacks."""
    for name, layer in module.named_modules():
        stackable = isinstance(layer, (nn.Linear, RunningNorm, *SHAPE_AGNOSTIC)) or stackable_conv(layer) or \
            stackable_rnn(layer)
        if stackable or not type(layer).__module__.startswith("torch.nn"):
            continue
        if any(True for _ in layer.parameters(recurse=False)) or any(True for _ in layer.buffers(recurse=False)):
            return f"the model's {name or 'module'!r} is a {type(layer).__name__}"
    return None


def stack_values(values: Sequence[torch.Tensor]) -> torch.Tensor:
    """S tensors of one shape ``[*shape]`` -> ``[S, 1, *shape]`` (broadcast over a member's rows)."""
    return torch.stack([value.detach() for value in values]).unsqueeze(1).clone()


def stack_modules(modules: Sequence[nn.Module]) -> nn.Module:
    """One module computing as ``modules`` (S copies of one architecture) side by side on
    inputs ``[S, N, ...]`` (module docstring)."""
    stacked = copy.deepcopy(modules[0])
    names = [name for name, _ in stacked.named_modules()]
    for name in names:
        module = stacked.get_submodule(name)
        members = [source.get_submodule(name) for source in modules]
        if isinstance(module, nn.Linear):
            replace(stacked, name, StackedLinear(*stacked_weights(members)))
        elif stackable_conv(module):
            replace(stacked, name, StackedConv2d(module, *stacked_weights(members)))
        elif isinstance(module, RunningNorm):
            replace(stacked, name, MemberRunningNorm(module, members))
        elif type(module) is nn.Tanh and len(modules) > 1:
            replace(stacked, name, StackedTanh())
        elif isinstance(module, (GRUModule, LSTMModule)):
            for index in range(len(module.layers)):
                module.layers[index] = StackedRNN([member.layers[index] for member in members], module.step_layer,
                                                  module.sequence_layer)
    for name, module in list(stacked.named_modules()):
        if type(module) is nn.Sequential and name:
            replace(stacked, name, StackedSequential(*module))
    refusal = unstackable_layer(modules[0])
    if refusal is not None:
        raise ConfigError(f"stack_modules stacks policies of Linear, Conv2d, GRU and LSTM layers; {refusal}")
    for name, module in stacked.named_modules():  # the policy's own parameters (e.g. log_std): [S, 1, *shape]
        if isinstance(module, (StackedLinear, StackedConv2d, MemberRunningNorm, StackedRNN)):
            continue
        for key, _ in list(module.named_parameters(recurse=False)):
            full = f"{name}.{key}" if name else key
            setattr(module, key, nn.Parameter(stack_values([source.get_parameter(full) for source in modules])))
        for key, _ in list(module.named_buffers(recurse=False)):
            full = f"{name}.{key}" if name else key
            module.register_buffer(key, stack_values([source.get_buffer(full) for source in modules]))
    return stacked


@torch.no_grad()
def zero_member(stacked: nn.Module, member: int) -> None:
    """Member ``member``'s rows of every parameter of ``stacked`` zeroed and its
    observation statistics reset (a failed member: every action it takes stays finite)."""
    for parameter in stacked.parameters():
        parameter[member].zero_()
    for module in stacked.modules():
        if isinstance(module, MemberRunningNorm):
            module.running_mean[member].zero_()
            module.running_var[member].fill_(1.0)


def replace(root: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, child, module)


def member_state_dict(stacked_state: dict, solo: nn.Module, member: int) -> dict:
    """Member ``member``'s entries of a stacked module's state dict, in the shapes of the
    solo module ``solo`` (the state dict its solo run saves)."""
    shapes = {key: value.shape for key, value in solo.state_dict().items()}
    return {key: value[member].reshape(shapes[key]).clone() for key, value in stacked_state.items()}


@torch.no_grad()
def load_member_state(stacked: nn.Module, solo_state: dict, member: int) -> None:
    """Write a solo module's state dict into member ``member`` of ``stacked``."""
    for key, value in stacked.state_dict(keep_vars=True).items():
        value[member].copy_(solo_state[key].reshape(value[member].shape))
