"""Checkpoints rotate, verify, and fail with a one-line message naming a corrupt file or a full disk."""
import errno
import logging
import os
import re
import shutil
import subprocess
import sys

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
