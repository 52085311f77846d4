import multiprocessing
import os

import pytest
import torch
from shm import leaked_since, shm_entries

# W&B never touches the network in tests.
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("WANDB_DISABLE_GIT", "true")
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def no_leftovers():
    """Register collectors with it (``no_leftovers(collector)``): after the test each is
    shut down, and then no worker of theirs, no other child process and no new /dev/shm
    entry may remain (tests/shm.py: none that this test's processes left)."""
    shm_before = shm_entries()
    children_before = set(multiprocessing.active_children())
    collectors = []
    yield collectors.append
    for collector in collectors:
        collector.shutdown()
        assert not any(p.is_alive() for p in collector._processes), "orphan worker"
    assert set(multiprocessing.active_children()) <= children_before, "orphan child process"
    assert not leaked_since(shm_before), "leaked shared memory"


@pytest.fixture
def storage_saves(monkeypatch) -> list[tuple[bool, bool]]:
    """Each ``LazyTensorStorage.state_dict(include_data=True)`` of the test, as ``(full, saved
    in place)``: whether the storage was full, and whether it was asked inside
    ``saved_in_place()`` (its tensors handed out, not copied)."""
    from rlcollect.buffers import LazyTensorStorage
    from rlcollect.buffers.in_place import in_place

    saves, state_dict = [], LazyTensorStorage.state_dict

    def recorded(self, *, include_data: bool = False) -> dict:
        if include_data:
            saves.append((len(self) == self.max_size, in_place()))
        return state_dict(self, include_data=include_data)

    monkeypatch.setattr(LazyTensorStorage, "state_dict", recorded)
    return saves
