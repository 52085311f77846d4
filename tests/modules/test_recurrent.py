import threading

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

import rlcollect
from rlcollect.buffers import LazyTensorStorage, ReplayBuffer, SliceSampler
from rlcollect.modules import (
    GRUModule,
    HiddenStatePrimer,
    LSTMModule,
    policy_primers,
    recurrent_mode,
    set_recurrent_mode,
)

INPUT_SIZE, HIDDEN_SIZE = 3, 5
TRAJ_IDS = ("collector", "traj_ids")
# position 0 is not marked (it starts a segment anyway); a 1-step segment at 3
IS_INIT = [False, False, False, True, True, False, False, False, True, False, False]
KINDS = [(GRUModule, 1), (GRUModule, 2), (LSTMModule, 1), (LSTMModule, 2)]


def make(module_class, num_layers):
    return module_class(INPUT_SIZE, HIDDEN_SIZE, num_layers)


def random_steps(module, batch_size, is_init):
    """Random observations and stored hidden states, with the given is_init."""
    td = TensorDict({"observation": torch.randn(*batch_size, INPUT_SIZE),
                     "is_init": torch.tensor(is_init, dtype=torch.bool).reshape(batch_size)}, batch_size)
    for key in module.hidden_keys:
        td.set(key, torch.randn(*batch_size, module.num_layers, HIDDEN_SIZE))
    return td


def step_by_step(module, steps):
    """Step mode over the last dim of ``steps``, one step at a time: each step is fed the
    state the previous one wrote, except at is_init (and the first step), where it uses the
    stored state."""
    outputs = []
    for t in range(steps.shape[-1]):
        step = steps[..., t].clone()
        if t > 0:
            carried = ~step["is_init"]
            for key in module.hidden_keys:
                step.set(key, torch.where(carried[..., None, None], outputs[-1]["next", key], step[key]))
        outputs.append(module(step))
    return torch.stack(outputs, -1)


def assert_same_outputs(module, actual, expected):
    torch.testing.assert_close(actual["features"], expected["features"])
    for key in module.hidden_keys:
        torch.testing.assert_close(actual["next", key], expected["next", key])


# ---------------------------------------------------------------------- modes
def test_recurrent_mode_is_step_by_default_nests_and_is_per_thread():
    assert recurrent_mode() == "step"
    seen_by_other_thread = []
    with set_recurrent_mode("recurrent"):
        assert recurrent_mode() == "recurrent"
        with set_recurrent_mode("step"):
            assert recurrent_mode() == "step"
        assert recurrent_mode() == "recurrent"
        thread = threading.Thread(target=lambda: seen_by_other_thread.append(recurrent_mode()))
        thread.start()
        thread.join()
    assert recurrent_mode() == "step" and seen_by_other_thread == ["step"]

    @set_recurrent_mode("recurrent")
    def decorated():
        return recurrent_mode()

    assert decorated() == "recurrent" and recurrent_mode() == "step"
    with pytest.raises(ValueError, match="mode must be one of"):
        set_recurrent_mode("train")


def test_public_exports():
    assert rlcollect.GRUModule is GRUModule and rlcollect.LSTMModule is LSTMModule
    assert rlcollect.set_recurrent_mode is set_recurrent_mode and rlcollect.recurrent_mode is recurrent_mode


# ---------------------------------------------------------------------- recurrent == step by step
@pytest.mark.parametrize("module_class, num_layers", KINDS)
def test_flat_batch_in_recurrent_mode_equals_step_mode_step_by_step(module_class, num_layers):
    module = make(module_class, num_layers)
    steps = random_steps(module, [len(IS_INIT)], IS_INIT)
    expected = step_by_step(module, steps.clone())
    with set_recurrent_mode("recurrent"):
        actual = module(steps.clone())
    assert_same_outputs(module, actual, expected)
    assert actual["features"].shape == (len(IS_INIT), HIDDEN_SIZE)
    for key in module.hidden_keys:
        assert actual["next", key].shape == (len(IS_INIT), num_layers, HIDDEN_SIZE)
    # the stored state matters only where a segment starts
    changed = steps.clone()
    for key in module.hidden_keys:
        changed[key][[1, 2, 5]] = 100.0
    with set_recurrent_mode("recurrent"):
        assert_same_outputs(module, module(changed), actual)


@pytest.mark.parametrize("module_class, num_layers", KINDS)
def test_rows_of_a_batch_time_input_are_separate_segments(module_class, num_layers):
    """[B, T]: each row starts a segment, and resets inside a row split it further."""
    module = make(module_class, num_layers)
    is_init = [[False, False, True, False, False],
               [False, True, True, False, False],
               [False, False, False, False, True]]
    steps = random_steps(module, [3, 5], is_init)
    expected = step_by_step(module, steps.clone())  # step mode on batch [3], a batched env
    with set_recurrent_mode("recurrent"):
        actual = module(steps.clone())
    assert actual.batch_size == (3, 5) and actual["features"].shape == (3, 5, HIDDEN_SIZE)
    assert_same_outputs(module, actual, expected)


def test_step_mode_single_env_and_batched_env_agree():
    module = make(LSTMModule, 2)
    steps = random_steps(module, [4], [False] * 4)
    batched = module(steps.clone())
    for index in range(4):
        single = module(steps[index].clone())
        assert single["features"].shape == (HIDDEN_SIZE,)
        assert single["next", "recurrent_state_c"].shape == (2, HIDDEN_SIZE)
        assert_same_outputs(module, single, batched[index])


def test_step_mode_uses_the_given_state_also_at_is_init():
    module = make(GRUModule, 1)
    steps = random_steps(module, [2], [True, True])
    zeroed = steps.clone()
    zeroed["recurrent_state"].zero_()
    assert not torch.allclose(module(steps.clone())["features"], module(zeroed)["features"])


# ---------------------------------------------------------------------- SliceSampler samples
def collected_trajectories(module, lengths=(9, 12, 3, 10)):
    """Trajectories end to end as a collector stores them: the state each step was fed
    (zeros at a reset, then the one the previous step wrote) and the features it produced."""
    total = sum(lengths)
    traj_ids = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    is_init = torch.cat([torch.arange(length) == 0 for length in lengths])
    done = torch.cat([torch.arange(length) == length - 1 for length in lengths])
    data = TensorDict({"observation": torch.randn(total, INPUT_SIZE), "is_init": is_init, "step": torch.arange(total),
                       "next": {"done": done, "truncated": torch.zeros(total, dtype=torch.bool)},
                       "collector": {"traj_ids": traj_ids}}, [total])
    primer = module.make_tensordict_primer()
    carrier = primer.apply(TensorDict({}, []))
    features, states = [], {key: [] for key in module.hidden_keys}
    with torch.no_grad():
        for t in range(total):
            primer.zero_(carrier, is_init[t])
            step = data[t].clone().update(carrier.clone())
            for key in module.hidden_keys:
                states[key].append(step[key])
            output = module(step)
            features.append(output["features"])
            carrier = TensorDict({key: output["next", key] for key in module.hidden_keys}, [])
    for key, values in states.items():
        data.set(key, torch.stack(values))
    data.set("collected_features", torch.stack(features))
    return data


@pytest.mark.parametrize("module_class, num_layers", KINDS)
def test_slice_sampler_sample_in_recurrent_mode_equals_each_slice_alone(module_class, num_layers):
    module = make(module_class, num_layers)
    buffer = ReplayBuffer(LazyTensorStorage(100), SliceSampler(slice_len=4), batch_size=48)
    buffer.extend(collected_trajectories(module))
    sample = buffer.sample()
    starts = sample["is_init"].nonzero().squeeze(1).tolist()
    assert len(starts) == 12  # the slices, and no reset inside one
    assert set(sample["step"][starts].tolist()) - {0, 9, 21, 24}  # a slice starts mid-trajectory
    with torch.no_grad(), set_recurrent_mode("recurrent"):
        together = module(sample.clone())
        alone = torch.cat([module(sample[start:end].clone())
                           for start, end in zip(starts, [*starts[1:], sample.shape[0]])])
    assert_same_outputs(module, together, alone)
    # slices that start mid-trajectory continue from the carried state, as collected
    torch.testing.assert_close(together["features"], sample["collected_features"])


# ---------------------------------------------------------------------- primers
@pytest.mark.parametrize("batch_size", [[], [3]])
@pytest.mark.parametrize("module_class", [GRUModule, LSTMModule])
def test_primer_adds_zero_states_once_and_never_overwrites(module_class, batch_size):
    module = module_class(INPUT_SIZE, HIDDEN_SIZE, 2)
    primer = module.make_tensordict_primer()
    assert isinstance(primer, HiddenStatePrimer) and primer.keys == module.hidden_keys
    td = TensorDict({"observation": torch.randn(*batch_size, INPUT_SIZE)}, batch_size)
    primer.apply(td)
    for key in module.hidden_keys:
        assert td[key].shape == (*batch_size, 2, HIDDEN_SIZE) and td[key].dtype == torch.float32
        assert not td[key].any()
    first = td[module.hidden_keys[0]]
    first.fill_(1.0)
    primer.apply(td)
    assert td[module.hidden_keys[0]] is first and bool((first == 1.0).all())
    assert set(td.keys()) == {"observation", *module.hidden_keys}
    assert module(td)["features"].shape == (*batch_size, HIDDEN_SIZE)


def test_primer_zero_resets_only_the_given_envs():
    module = make(LSTMModule, 2)
    primer = module.make_tensordict_primer()
    td = primer.apply(TensorDict({}, [3]))
    for key in primer.keys:
        td[key].fill_(1.0)
    primer.zero_(td, torch.tensor([False, True, False]))
    for key in primer.keys:
        assert td[key].sum(dim=(-2, -1)).tolist() == [10.0, 0.0, 10.0]


def test_policy_primers_finds_every_recurrent_submodule():
    gru = GRUModule(INPUT_SIZE, HIDDEN_SIZE)
    lstm = LSTMModule(HIDDEN_SIZE, 4, in_keys=["features", "h", "c", "is_init"],
                      out_keys=["lstm_features", ("next", "h"), ("next", "c")])
    head = TensorDictModule(nn.Linear(4, 2), in_keys=["lstm_features"], out_keys=["logits"])
    policy = TensorDictSequential(gru, lstm, head)
    primers = policy_primers(policy)
    assert [primer.shapes for primer in primers] == [{"recurrent_state": (1, HIDDEN_SIZE)}, {"h": (1, 4), "c": (1, 4)}]
    td = TensorDict({"observation": torch.randn(3, INPUT_SIZE), "is_init": torch.ones(3, dtype=torch.bool)}, [3])
    for primer in primers:
        primer.apply(td)
    out = policy(td)
    assert out["logits"].shape == (3, 2) and out["next", "c"].shape == (3, 1, 4)
    with set_recurrent_mode("recurrent"):
        assert policy(out.exclude("next"))["logits"].shape == (3, 2)
    assert policy_primers(head) == [] and policy_primers(lambda td: td) == []
    with pytest.raises(ValueError, match="both read the hidden state 'recurrent_state'"):
        policy_primers(nn.ModuleList([GRUModule(2, 2), GRUModule(2, 2)]))


# ---------------------------------------------------------------------- training
@pytest.mark.parametrize("module_class", [GRUModule, LSTMModule])
def test_gradients_flow_in_recurrent_mode(module_class):
    module = make(module_class, 2)
    steps = random_steps(module, [len(IS_INIT)], IS_INIT)
    with set_recurrent_mode("recurrent"):
        module(steps)["features"].pow(2).sum().backward()
    for name, parameter in module.named_parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0, name


# ---------------------------------------------------------------------- errors
def test_bad_inputs_raise_clear_errors():
    module = make(GRUModule, 2)
    steps = random_steps(module, [4], [True, False, False, False])
    with set_recurrent_mode("recurrent"):
        with pytest.raises(KeyError, match="in recurrent mode reads 'is_init'"):
            module(steps.exclude("is_init"))
        with pytest.raises(ValueError, match="'is_init' must be bool"):
            module(steps.clone().set("is_init", steps["is_init"].long()))
        with pytest.raises(ValueError, match="recurrent mode needs a batch dim"):
            module(steps[0].clone())
    module(steps.exclude("is_init"))  # step mode does not read is_init
    with pytest.raises(KeyError, match="make_tensordict_primer"):
        module(steps.exclude("recurrent_state"))
    with pytest.raises(ValueError, match=r"'recurrent_state' has shape \(4, 5\), expected \(4, 2, 5\)"):
        module(steps.clone().set("recurrent_state", torch.zeros(4, HIDDEN_SIZE)))
    with pytest.raises(ValueError, match=r"'observation' has shape \(4, 7\), expected \(4, 3\)"):
        module(steps.clone().set("observation", torch.zeros(4, 7)))


def test_bad_constructor_arguments_raise():
    with pytest.raises(ValueError, match="hidden_size must be a positive int"):
        GRUModule(3, 0)
    with pytest.raises(ValueError, match="needs in_keys"):
        LSTMModule(3, 4, in_keys=["observation", "recurrent_state", "is_init"])
    with pytest.raises(ValueError, match="out_keys must be the in_keys' under 'next'"):
        GRUModule(3, 4, out_keys=["features", "recurrent_state"])
