"""Every supported space through Collector and the worker collectors: exact keys, shapes,
dtypes and values (rlcollect.testing.SpacesEnv: every observation entry is the step count)."""
import functools

import pytest
import torch

from rlcollect import ActionServerCollector, Collector, GymEnv, MultiSyncCollector
from rlcollect.testing import SpacesEnv

# observation kind -> {leaf key under "observation": (dtype, feature shape)}
LEAVES = {
    "dict": {"position": (torch.float32, (2,)), "count": (torch.int64, ()), "image": (torch.uint8, (3, 4, 4)),
             ("nested", "flag"): (torch.int64, (3,))},
    "tuple": {"0": (torch.int64, ()), "1": (torch.float32, (2,))},
    "discrete": {(): (torch.int64, ())},
    "image": {(): (torch.uint8, (3, 8, 8))},
}
ACTIONS = {"discrete": (torch.int64, ()), "multidiscrete": (torch.int64, (2,)), "multibinary": (torch.int64, (3,)),
           "box": (torch.float32, (2,))}


def leaf(batch, prefix, key):
    key = key if isinstance(key, tuple) else (key,)
    return batch[(*prefix, *key)] if key else batch[prefix]


def check(batch, observation, action, batch_size):
    step_count = batch["observation", "position"][..., 0] if observation == "dict" else None
    for prefix in (("observation",), ("next", "observation")):
        for key, (dtype, feature) in LEAVES[observation].items():
            value = leaf(batch, prefix, key)
            assert value.dtype == dtype and tuple(value.shape) == (*batch_size, *feature), (prefix, key)
    dtype, feature = ACTIONS[action]
    assert batch["action"].dtype == dtype and tuple(batch["action"].shape) == (*batch_size, *feature)
    # exact values: the count in every entry; the next observation counts one further (episodes of 4 steps)
    count = {"dict": ("count",), "tuple": ("0",), "discrete": (), "image": ()}[observation]
    now, after = leaf(batch, ("observation",), count), leaf(batch, ("next", "observation"), count)
    if observation == "image":
        now, after = now[..., 0, 0, 0].long(), after[..., 0, 0, 0].long()
    assert torch.equal(after, now + 1)
    rows = now.reshape(-1, now.shape[-1])  # each env's first 4 steps: one whole episode
    assert rows.tolist() == [[0, 1, 2, 3]] * rows.shape[0]
    if observation == "dict":
        assert torch.equal(step_count, now.float())
        assert torch.equal(batch["observation", "image"][..., 0, 0, 0].long(), now)
        assert torch.equal(batch["observation", "nested", "flag"][..., 0], now % 2)
    if action == "multibinary":
        assert set(batch["action"].unique().tolist()) <= {0, 1}
    if action == "multidiscrete":
        assert (batch["action"][..., 0] < 3).all() and (batch["action"][..., 1] < 4).all()


@pytest.mark.parametrize("observation", list(LEAVES))
@pytest.mark.parametrize("action", list(ACTIONS))
def test_every_space_through_the_collector(observation, action):
    env = GymEnv(functools.partial(SpacesEnv, observation, action), 2)
    collector = Collector(env, frames_per_batch=8, total_frames=8)  # random actions: every action space sampled
    [batch] = list(collector)
    check(batch, observation, action, (2, 4))


@pytest.mark.parametrize("observation", ["dict", "tuple", "image"])
def test_nested_and_image_observations_through_worker_collectors(no_leftovers, observation):
    source = functools.partial(SpacesEnv, observation, "multidiscrete")
    multi = MultiSyncCollector(source, num_workers=2, envs_per_worker=2, frames_per_batch=16, start_method="fork")
    server = ActionServerCollector(source, num_workers=2, envs_per_worker=2, frames_per_batch=16, start_method="fork")
    for collector in (multi, server):
        no_leftovers(collector)
    check(next(iter(multi)), observation, "multidiscrete", (2, 2, 4))
    check(next(iter(server)), observation, "multidiscrete", (4, 4))


def test_image_batches_stay_uint8_no_float_copy():
    env = GymEnv(functools.partial(SpacesEnv, "image"), 2)
    batch = next(iter(Collector(env, frames_per_batch=8)))
    assert batch["observation"].dtype == torch.uint8 and batch["next", "observation"].dtype == torch.uint8
    image_bytes = 3 * 8 * 8
    assert batch["observation"].element_size() * batch["observation"][0, 0].numel() == image_bytes
