"""The trajectory book's rules (collectors/trajectory_book.py), in both forms: on the host
(Collector with gymnasium envs, the pool) and on an env's device (a torch env)."""
import numpy as np
import torch

from rlcollect.collectors.trajectory_book import TrajectoryBook
from rlcollect.trajectories import TrajectoryPool


def test_a_host_book_cuts_at_the_limit_and_gives_fresh_ids_that_never_repeat():
    book = TrajectoryBook(3, TrajectoryPool(), max_frames_per_traj=2, track_ids=True)
    book.start_all()
    assert book.ids.tolist() == [0, 1, 2]
    assert book.count_step().tolist() == [False, False, False]
    done = np.array([False, True, False])
    cut = book.count_step(done=done)
    assert cut.tolist() == [True, False, True]  # env 1 finished on its own: not cut
    book.start(cut | done)
    assert book.ids.tolist() == [3, 4, 5] and book.steps.tolist() == [0, 0, 0]
    book.count_step(np.array([2]))  # the pool's form: env ids
    book.start(np.array([2]))
    assert book.ids.tolist() == [3, 4, 6] and book.steps.tolist() == [0, 0, 0]


def test_waiting_envs_are_never_cut_and_start_all_clears_them():
    waiting = np.array([True, False])
    book = TrajectoryBook(2, TrajectoryPool(), max_frames_per_traj=1, track_ids=False, waiting=waiting)
    assert book.ids is None
    assert book.count_step().tolist() == [False, True]
    book.start_all()
    assert waiting.tolist() == [False, False]


def test_hidden_states_are_zeroed_where_an_env_was_reset_only():
    book = TrajectoryBook(2, TrajectoryPool(), max_frames_per_traj=None, track_ids=True)
    state = torch.ones(2, 1, 3)
    book.hidden = {"h": state}
    book.start(np.array([True, False]), env_reset=False)  # a cut at a batch boundary: the env runs on
    assert state.sum().item() == 6.0
    book.start(np.array([False, True]))
    assert state[:, 0, 0].tolist() == [1.0, 0.0]
    assert book.ids.tolist() == [0, 1]  # ids 0 and 1 were the two starts (no start_all yet)


def test_the_device_form_follows_the_host_form():
    host = TrajectoryBook(2, TrajectoryPool(), max_frames_per_traj=3, track_ids=True)
    device = TrajectoryBook(2, TrajectoryPool(), max_frames_per_traj=3, track_ids=True, on_device=True)
    state = torch.ones(2, 1, 2)
    device.hidden = {"h": state}
    host.start_all()
    device.start_all()
    device.reserve_slots(4)  # ids 2..9: one per (step, env) slot of a 4-step batch
    dones = [[False, False], [True, False], [False, False], [False, False]]
    for t, done in enumerate(dones):
        host_cut = host.count_step(done=np.array(done))
        device_cut = device.count_step_on_device(torch.tensor(done))
        assert device_cut.tolist() == host_cut.tolist()
        restarted = torch.tensor(done) | device_cut
        device.start_on_device(restarted, t)
        assert device.steps.tolist() == [0 if r else s for r, s in zip(restarted.tolist(), host.steps.tolist())]
        host.start(np.array(done) | host_cut)
    # env 0 finished at step 1 (slot id 2 + 2 * 1 + 0 = 4); env 1 was cut at step 2 (slot 2 + 2 * 2 + 1 = 7)
    assert device.ids.tolist() == [4, 7]
    assert host.steps.tolist() == device.steps.tolist() == [2, 1]
    assert state[:, 0, 0].tolist() == [0.0, 0.0]
