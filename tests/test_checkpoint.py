"""Checkpoints rotate, verify, and fail with a one-line message naming a corrupt file or a full disk."""
import errno
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlcollect.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from rlcollect.errors import DiskFullError


def corrupt(path, how):
    data = path.read_bytes()
    path.write_bytes({"truncated": data[:len(data) // 2], "garbage": b"not a checkpoint" * 10, "empty": b""}[how])


@pytest.mark.parametrize("how", ["truncated", "garbage", "empty"])
def test_a_corrupt_checkpoint_falls_back_to_the_previous_one_saying_so(tmp_path, how, caplog):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"frames": 1, "weights": torch.ones(3)})
    save_checkpoint(path, {"frames": 2, "weights": torch.ones(3)})
    assert load_checkpoint(path)["frames"] == 2 and (tmp_path / "checkpoint.pt.prev").is_file()
    corrupt(path, how)
    size = path.stat().st_size
    with caplog.at_level(logging.WARNING, logger="rlcollect.checkpoint"):
        assert load_checkpoint(path)["frames"] == 1
    assert f"({size} bytes) is corrupt or incomplete" in caplog.text and "falling back" in caplog.text
    corrupt(tmp_path / "checkpoint.pt.prev", how)
    with pytest.raises(CheckpointError) as error:
        load_checkpoint(path)
    message = str(error.value)
    assert str(path) in message and "corrupt or incomplete" in message and "\n" not in message
    assert "weights_only=False" not in message


def test_a_checkpoint_damaged_on_disk_is_named_and_the_previous_one_loads(tmp_path, caplog):
    """A byte changed inside a tensor's record: torch.load would read it as it is."""
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"frames": 1, "weights": torch.ones(1000)})
    save_checkpoint(path, {"frames": 2, "weights": torch.full((1000,), 2.0)})
    data = bytearray(path.read_bytes())
    data[data.index(torch.full((64,), 2.0).numpy().tobytes())] ^= 1
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="rlcollect.checkpoint"):
        assert load_checkpoint(path)["frames"] == 1
    assert re.search(rf"checkpoint\.pt \({len(data)} bytes\) is corrupt: its record \S+/data/0 does not match its "
                     r"checksum; falling back to the previous checkpoint", caplog.text), caplog.text


def test_a_checkpoint_holding_objects_is_refused_without_unsafe_advice(tmp_path):
    path = tmp_path / "checkpoint.pt"
    torch.save({"frames": 1, "thing": logging.getLogger("x")}, path)
    with pytest.raises(CheckpointError, match="refused: checkpoints load with weights_only=True") as error:
        load_checkpoint(path)
    assert "weights_only=False" not in str(error.value)


def test_saving_never_leaves_no_loadable_checkpoint(tmp_path):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"frames": 1})
    with pytest.raises(CheckpointError, match="refused: checkpoints load with weights_only=True"):
        save_checkpoint(path, {"frames": 2, "thing": object()})  # saved, but it does not read back as data
    assert load_checkpoint(path)["frames"] == 1  # the good one is still there
    assert not (tmp_path / "checkpoint.pt.partial").exists()


def test_a_checkpoint_whose_bytes_do_not_read_back_as_written_is_refused_and_the_last_one_stays(tmp_path,
                                                                                                 monkeypatch):
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"frames": 1, "weights": torch.ones(1000)})
    save = torch.save

    def save_then_damage_a_byte(state, file):  # as a disk that wrote one byte wrong
        save(state, file)
        file.flush()
        at = Path(file.name).read_bytes().index(torch.full((64,), 2.0).numpy().tobytes())  # inside the tensor
        file.seek(at)
        file.write(b"\x01")

    monkeypatch.setattr(torch, "save", save_then_damage_a_byte)
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt\.partial \(\d+ bytes\) is corrupt: its record "
                                              r"\S+ does not match its checksum"):
        save_checkpoint(path, {"frames": 2, "weights": torch.full((1000,), 2.0)})
    monkeypatch.undo()
    assert load_checkpoint(path)["frames"] == 1 and not (tmp_path / "checkpoint.pt.prev").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]


def test_a_checkpoint_is_verified_without_being_held_in_memory_a_second_time(tmp_path):
    """A 400 MiB state (a replay buffer's) saved and read back: the process's peak memory
    grows by what writing it takes, not by a second copy of the state."""
    script = ("import resource, sys, torch\n"
              "from rlcollect.checkpoint import load_checkpoint, save_checkpoint\n"
              "state = {'frames': 1, 'storage': torch.ones(100 * 2**20)}\n"
              "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
              "save_checkpoint(sys.argv[1], state)\n"
              "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n"
              "assert torch.equal(load_checkpoint(sys.argv[1])['storage'], state['storage'])\n")
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path / "checkpoint.pt")], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) < 100  # MiB; reading it back whole added 400


def test_a_full_replay_buffer_saved_in_place_is_not_copied_in_memory_first(tmp_path):
    """A full 200 MiB replay buffer checkpointed in a fresh interpreter: when its state is
    written, the memory resident has grown by a copy of the buffer (the default, for writers
    that go on), or, inside saved_in_place() (a training loop whose collector writes only
    while it is iterated), by nothing; both files load to the buffer's contents. (Resident
    memory at the write, not the peak: the peak also holds what filling the buffer took.)"""
    script = ("import contextlib, os, sys, torch\n"
              "from tensordict import TensorDict\n"
              "from rlcollect.buffers import LazyTensorStorage, ReplayBuffer, saved_in_place\n"
              "from rlcollect.checkpoint import load_checkpoint, save_checkpoint\n"
              "def resident():\n"
              "    return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') // 2**20\n"
              "rb = ReplayBuffer(LazyTensorStorage(50))\n"
              "for _ in range(5):  # full: 200 MiB\n"
              "    rb.extend(TensorDict({'observation': torch.ones(10, 2**20)}, [10]))\n"
              "at_write, save = [], torch.save\n"
              "torch.save = lambda state, file: (at_write.append(resident()), save(state, file))[1]\n"
              "before = resident()\n"
              "with saved_in_place() if sys.argv[2] == 'in_place' else contextlib.nullcontext():\n"
              "    save_checkpoint(sys.argv[1], {'frames': 50, 'replay': rb.state_dict(include_storage=True)})\n"
              "print(max(at_write) - before)\n"
              "saved = load_checkpoint(sys.argv[1])['replay']['storage']['data']['observation']\n"
              "assert torch.equal(saved, rb.storage.read()['observation'])\n")
    grown = {}
    for way in ("copied", "in_place"):
        result = subprocess.run([sys.executable, "-c", script, str(tmp_path / f"{way}.pt"), way], capture_output=True,
                                text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        grown[way] = int(result.stdout)
    assert grown["copied"] > 150 and grown["in_place"] < 10, grown  # MiB of 200 (201 and 0 here)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("background", [False, True], ids=["sync", "background"])
def test_a_run_saves_its_full_replay_buffer_in_place_only_where_nothing_writes_between_batches(tmp_path, storage_saves,
                                                                                                background):
    """A DQN run whose 256-step buffer is full at its checkpoints: with the collector
    iterated in the training loop's thread, the buffer's state is saved in place; with
    background collection (it writes at any time), copied."""
    from train_configs import train_configs

    from rlcollect.pipeline import build, run

    [cfg] = train_configs(["algo=dqn", "buffer.storage.max_size=256", "total_frames=768", "algo.learning_starts=256",
                           f"algo.background={background}", "checkpoint_every_frames=256", "eval.every_frames=100000",
                           "env.solved_return=null", "logger=none", "progress=false"])
    summary = run(build(cfg, tmp_path / "run"))
    assert (summary["status"], summary["checkpoint_frames"]) == ("finished", 768)
    assert storage_saves and storage_saves[-1] == (True, not background)  # the last checkpoint: the buffer full
    buffer = load_checkpoint(tmp_path / "run" / "checkpoint.pt")["learner"]["replay_buffer"]["storage"]
    assert (buffer["filled"], buffer["write_count"], buffer["data"]["observation"].shape) == (256, 768, (256, 4))


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB disk (a tmpfs mounted in ``tmp_path``); skipped where mounting one is not permitted."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], capture_output=True,
                             text=True) if os.geteuid() == 0 and shutil.which("mount") else None
    if mounted is None or mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip() if mounted else 'not root'})")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


def test_a_full_disk_is_said_with_its_folder_and_free_bytes_and_the_last_checkpoint_stays(small_disk):
    """Not torch's `[enforce fail at inline_container.cc:672] . unexpected pos`."""
    path = small_disk / "checkpoint.pt"
    save_checkpoint(path, {"frames": 1, "weights": torch.zeros(10_000)})
    with pytest.raises(DiskFullError) as full:
        save_checkpoint(path, {"frames": 2, "weights": torch.zeros(100_000)})  # 400 kB
    assert full.value.errno == errno.ENOSPC and isinstance(full.value, OSError)
    assert re.fullmatch(rf"No space left on device: checkpoint\.pt in {re.escape(str(small_disk))} could not be "
                        rf"written \(\d+ bytes free on the disk mounted at {re.escape(str(small_disk))}\)",
                        str(full.value))
    assert load_checkpoint(path)["frames"] == 1
    assert sorted(path.name for path in small_disk.iterdir()) == ["checkpoint.pt"]


FILE_SIZE_LIMITED = """
import resource, sys, torch
from rlcollect.checkpoint import load_checkpoint, save_checkpoint
from rlcollect.errors import DiskFullError

path = sys.argv[1]
save_checkpoint(path, {"frames": 1, "weights": torch.zeros(10_000)})
resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    save_checkpoint(path, {"frames": 2, "weights": torch.zeros(100_000)})
except DiskFullError as error:
    print(error.errno, error, load_checkpoint(path)["frames"], sep="\\n")
"""


def test_a_checkpoint_over_the_file_size_limit_is_said_as_such_and_the_last_checkpoint_stays(tmp_path):
    """RLIMIT_FSIZE (`ulimit -f`, no root needed) in a process of its own: EFBIG, said alike."""
    result = subprocess.run([sys.executable, "-c", FILE_SIZE_LIMITED, str(tmp_path / "checkpoint.pt")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        str(errno.EFBIG), f"File too large: checkpoint.pt in {tmp_path} could not be written (the file size limit, "
        "`ulimit -f`, is 200000 bytes)", "1"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint.pt"]


@pytest.mark.timeout(30)
def test_a_ctrl_c_while_torch_writes_a_checkpoint_is_a_keyboard_interrupt_and_the_last_one_stays(tmp_path,
                                                                                                  monkeypatch):
    """torch.save turns a Ctrl-C that reaches its writer into "[enforce fail ...] unexpected
    pos" (a RuntimeError): the save raises the KeyboardInterrupt it is, leaving the last
    checkpoint as it was and no partial file."""
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"frames": 1, "weights": torch.zeros(8)})
    before = path.read_bytes()
    writes = []
    real_open = open

    class InterruptedFile:
        def __init__(self, file):
            self.file = file

        def write(self, data):
            writes.append(len(data))
            if len(writes) == 2:
                raise KeyboardInterrupt
            return self.file.write(data)

        def __getattr__(self, name):
            return getattr(self.file, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self.file.__exit__(*exc)

    def interrupted_open(file, mode="r", *args, **kwargs):
        opened = real_open(file, mode, *args, **kwargs)
        return InterruptedFile(opened) if str(file).endswith(".partial") else opened

    import rlcollect.checkpoint as checkpoint_module
    monkeypatch.setattr(checkpoint_module, "open", interrupted_open, raising=False)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"frames": 2, "weights": torch.ones(100_000)})
    assert path.read_bytes() == before
    assert sorted(child.name for child in tmp_path.iterdir()) == ["checkpoint.pt"]
