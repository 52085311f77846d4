"""Collectors on a torch env (TorchCartPole): the bookkeeping stays on the env's device."""
from functools import partial

import numpy as np
import pytest
import torch
from checks import check_keys_and_shapes, check_trajectories

from rlcollect import ActionServerCollector, Collector, MultiSyncCollector, TorchCartPole

TRAJ_IDS = ("collector", "traj_ids")
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class ArgmaxPolicy(torch.nn.Module):
    """A deterministic policy (a fixed linear layer, then argmax) that any device runs."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, td):
        td.set("action", self.linear(td.get("observation")).argmax(-1))
        return td


def test_the_collector_keeps_the_semantics_on_the_env_s_device():
    collector = Collector(TorchCartPole(4, seed=2), ArgmaxPolicy(), frames_per_batch=4 * 50)
    iterator = iter(collector)
    data = torch.cat([next(iterator).clone() for _ in range(3)], dim=-1)  # [4, 150]
    check_keys_and_shapes(data, (4, 150), observation_shape=(4,))
    check_trajectories(data)  # continuity across batches, is_init after done, ids never reused
    assert data["next", "done"].sum() > 4  # episodes ended
    final = data["next", "observation"][data["next", "terminated"]]
    assert ((final[:, 0].abs() > 2.4) | (final[:, 2].abs() > 12 * 2 * np.pi / 360)).all()  # true final obs
    assert (data["observation"][data["is_init"]].abs() <= 0.05).all()  # reset observations


def test_new_trajectory_ids_come_from_the_batch_s_block_of_slots():
    collector = Collector(TorchCartPole(3, seed=0), None, frames_per_batch=30, max_frames_per_traj=6)
    batch = next(iter(collector))
    # ids 0-2 at the start; the batch reserves 30 ids (3..32): env i cut after step 5 gets 3 + 5 * 3 + i
    assert batch[TRAJ_IDS].tolist() == [[0] * 6 + [18] * 4, [1] * 6 + [19] * 4, [2] * 6 + [20] * 4]
    assert batch["next", "truncated"][:, 5].all() and not batch["next", "truncated"][:, :5].any()
    assert batch["is_init"][:, 6].all()
    second = next(iter(collector))
    assert second[TRAJ_IDS][:, 0].tolist() == [18, 19, 20]  # the trajectories continue across batches


def test_set_truncated_and_same_seed_same_batches():
    def run(seed):
        collector = Collector(TorchCartPole(2), ArgmaxPolicy(), frames_per_batch=8, set_truncated=True)
        collector.set_seed(seed)
        iterator = iter(collector)
        return [next(iterator).clone() for _ in range(2)]

    first, second = run(5)
    assert first["next", "truncated"][:, -1].all() and second["is_init"][:, 0].all()
    assert torch.equal(first["next", "observation"][:, -1], second["observation"][:, 0])  # the env went on
    assert not set(first[TRAJ_IDS].flatten().tolist()) & set(second[TRAJ_IDS].flatten().tolist())
    again = run(5)
    assert all((a == b).all() for a, b in zip((first, second), again))
    assert not torch.equal(run(6)[0]["observation"], first["observation"])


def test_no_value_is_read_back_to_the_host_during_collection():
    """On the "meta" device tensors have shapes and no data: any .item(), bool(), .cpu() or
    .numpy() in the loop raises. A batch with time limits, set_truncated and trajectory ids
    collected there touched no value on the host."""
    policy = ArgmaxPolicy().to("meta")
    collector = Collector(TorchCartPole(8, device="meta"), policy, frames_per_batch=64, total_frames=256,
                          device="meta", max_frames_per_traj=5, set_truncated=True)
    batches = list(collector)
    assert len(batches) == 4 and batches[-1].device == torch.device("meta")
    assert batches[-1][TRAJ_IDS].shape == (8, 8)


@CUDA
def test_cuda_collection_never_synchronises_per_step():
    policy = ArgmaxPolicy().to("cuda")
    collector = Collector(TorchCartPole(4096, device="cuda", seed=0), policy, frames_per_batch=4096 * 16,
                          device="cuda", max_frames_per_traj=100, no_cuda_sync=True)
    collector.collect()  # warm-up
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            collector.collect()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    batch = collector.batch
    assert batch.device.type == "cuda" and batch.batch_size == (4096, 16)
    check_trajectories(batch.cpu())


def test_every_collector_takes_it():
    multi = MultiSyncCollector([partial(TorchCartPole, 2, seed=0), partial(TorchCartPole, 2, seed=1)], ArgmaxPolicy(),
                               frames_per_batch=16, total_frames=32, cat_results="stack")
    batches = list(multi)
    multi.shutdown()
    assert batches[0].batch_size == (2, 2, 4)
    ids = torch.cat([b[TRAJ_IDS].flatten() for b in batches])
    assert len(set(batches[0][TRAJ_IDS][:, :, 0].flatten().tolist())) == 4  # unique across workers
    assert (ids >= 0).all()
    server = ActionServerCollector(partial(TorchCartPole, 2), ArgmaxPolicy(), num_workers=2, seed=0,
                                   envs_per_worker=2, frames_per_batch=16, total_frames=32)
    batches = list(server)
    server.shutdown()
    assert batches[0].batch_size == (4, 4)
    check_trajectories(torch.cat(batches, dim=-1))
