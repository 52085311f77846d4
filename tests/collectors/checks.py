"""Checks every collector's batches must pass, shared by the collector tests (imported as
``checks``: pytest puts this folder on sys.path; tests/collectors/conftest.py has
pytest rewrite its asserts). docs/data-layout.md, and trajectory bookkeeping."""
import ipaddress
import os
import re
import shutil
import signal
import subprocess

import pytest
import torch

TRAJ_IDS = ("collector", "traj_ids")
STEP_KEYS = {"observation", "action", "is_init", ("next", "observation"), ("next", "reward"),
             ("next", "terminated"), ("next", "truncated"), ("next", "done"), TRAJ_IDS}
FLAGS = ("is_init", ("next", "terminated"), ("next", "truncated"), ("next", "done"))


def check_keys_and_shapes(batch, batch_size, observation_shape, action_shape=()):
    """Every key of a collector step, with docs/data-layout.md's shapes (scalars per step carry no
    trailing singleton dim) and dtypes."""
    batch_size = tuple(batch_size)
    assert tuple(batch.batch_size) == batch_size
    assert STEP_KEYS <= set(batch.keys(True, True)), f"missing {STEP_KEYS - set(batch.keys(True, True))}"
    for key in ("observation", ("next", "observation")):
        assert tuple(batch[key].shape) == (*batch_size, *observation_shape), key
    assert tuple(batch["action"].shape) == (*batch_size, *action_shape)
    for key in (("next", "reward"), *FLAGS, TRAJ_IDS):
        assert tuple(batch[key].shape) == batch_size, key
    assert batch["next", "reward"].dtype == torch.float32
    assert all(batch[key].dtype == torch.bool for key in FLAGS)
    assert batch[TRAJ_IDS].dtype == torch.int64


def check_trajectories(data):
    """Bookkeeping of steps collected in a row, time last (``[..., T]``; consecutive
    batches concatenated along time), with auto-reset and no reset_at_each_iter:
    done == terminated | truncated; within a trajectory the next step starts from the
    step's next observation; a step starts a trajectory (is_init) exactly after done, and
    exactly there the traj id changes; a traj id is never reused, by another env (row)
    or later."""
    done = data["next", "done"]
    assert torch.equal(done, data["next", "terminated"] | data["next", "truncated"])
    before, after = data[..., :-1], data[..., 1:]
    continuing = ~before["next", "done"]
    assert torch.equal(before["next", "observation"][continuing], after["observation"][continuing])
    assert torch.equal(after["is_init"], ~continuing)
    ids = data[TRAJ_IDS]
    assert torch.equal(ids[..., 1:] != ids[..., :-1], after["is_init"])
    per_row = [torch.unique_consecutive(row).tolist() for row in ids.reshape(-1, ids.shape[-1])]
    trajectories = [traj_id for row in per_row for traj_id in row]
    assert len(trajectories) == len(set(trajectories)), "a traj id was reused"


def check_weights_reach_every_worker(collector, policy):
    """With a ``rlcollect.testing.WeightProbe`` policy: the batch after each
    ``update_policy_weights_()`` shows the new parameter ("weight_seen") and buffer
    ("offset_seen") in every row, stamped with the new policy_version. Returns the batch
    iterator, to go on with."""
    version_key = ("collector", "policy_version")
    batches = iter(collector)
    first = next(batches)
    assert (first["weight_seen"] == 0).all() and (first[version_key] == 0).all()
    for version in (1, 2):
        with torch.no_grad():
            policy.weight.fill_(float(version))
            policy.offset.fill_(10.0 * version)
        collector.update_policy_weights_()
        batch = next(batches)  # the very next batch: no lag for a synchronous collector
        assert (batch["weight_seen"] == version).all() and (batch["offset_seen"] == 10.0 * version).all()
        assert (batch[version_key] == version).all() and collector.policy_version == version
    return batches


def collect_killing_a_worker(collector, worker_id, after):
    """Iterate ``collector`` to the end, SIGKILLing worker process ``worker_id`` after
    ``after`` batches (and waiting until it is dead, so that the next batch finds it dead).
    Returns (clones of the batches, the killed pid)."""
    batches, killed_pid = [], None
    for batch in collector:
        batches.append(batch.clone())
        if len(batches) == after:
            process = collector._processes[worker_id]
            killed_pid = process.pid
            os.kill(killed_pid, signal.SIGKILL)
            process.join(10)
    return batches, killed_pid


# ---------------------------------------------------------------------------- loopback only
def listeners() -> list[tuple[str, int, str]]:
    """(local address, pid, line) of every TCP/UDP listener ``ss`` shows with an owner."""
    output = subprocess.run(["ss", "-H", "-l", "-t", "-u", "-n", "-p"], capture_output=True, text=True,
                            check=True).stdout
    found = []
    for line in output.splitlines():
        fields = line.split()
        if len(fields) < 7:
            continue
        host = fields[4].rsplit(":", 1)[0].strip("[]").split("%")[0]
        for pid in re.findall(r"pid=(\d+)", line):
            found.append((host, int(pid), line))
    return found


def is_loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False  # "*", "0.0.0.0" spelled otherwise: every interface
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


needs_ss = pytest.mark.skipif(shutil.which("ss") is None,
                              reason="`ss` (iproute2) is not installed: apt-get install -y iproute2")
