"""Checkpoints rotate, verify, and fail with a one-line message naming a corrupt file."""
import logging

import pytest
import torch

from rlcollect.checkpoint import CheckpointError, load_checkpoint, save_checkpoint


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
