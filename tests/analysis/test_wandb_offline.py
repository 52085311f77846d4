"""Round-trip real W&B offline runs through rlcollect.logging.wandb_offline."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

wandb = pytest.importorskip("wandb")

from rlcollect.logging.wandb_offline import (  # noqa: E402
    OfflineRun,
    find_offline_runs,
    read_offline_run,
)

pytestmark = pytest.mark.timeout(120)

LOSSES = [0.9, 0.5, 0.25]


def finish_and_flush(run: Any, timeout_s: float = 30.0) -> Path:
    """Finish ``run`` and return its .wandb file once wandb-core wrote it all.

    ``run.finish()`` can return a few milliseconds before wandb-core flushes
    the transaction log; ``wandb.teardown()`` waits for that, and the poll
    below only guards against that ever changing.
    """
    run_file = Path(run.settings.sync_file)
    run.finish()
    wandb.teardown()
    deadline = time.monotonic() + timeout_s
    while not read_offline_run(run_file).finished:
        assert time.monotonic() < deadline, f"{run_file} never got its exit record"
        time.sleep(0.01)
    return run_file


@pytest.fixture(scope="module")
def wandb_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A scratch dir, with wandb set to stay offline, quiet and local."""
    root = tmp_path_factory.mktemp("wandb_offline")
    env = {
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "WANDB_DIR": str(root),
        "WANDB_CONFIG_DIR": str(root / "config"),
        "WANDB_CACHE_DIR": str(root / "cache"),
        "WANDB_DATA_DIR": str(root / "data"),
        "WANDB_DISABLE_GIT": "true",
        "WANDB_DISABLE_CODE": "true",
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_CONSOLE": "off",
        "WANDB_X_DISABLE_STATS": "true",
    }
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        yield root


@pytest.fixture(scope="module")
def basic_run(wandb_dir: Path) -> Path:
    """Log three steps to a real offline run; return its wandb dir."""
    root = wandb_dir / "basic"
    root.mkdir()
    run = wandb.init(
        mode="offline",
        dir=root,
        project="p",
        name="n",
        group="g",
        job_type="jt",
        config={"a": 1, "nested": {"b": 2.5}},
    )
    for i, loss in enumerate(LOSSES):
        run.log({"frames": i * 10, "loss": loss}, step=i)
    finish_and_flush(run)
    return root / "wandb"


def test_round_trip(basic_run: Path) -> None:
    (run_file,) = find_offline_runs(basic_run)
    run = read_offline_run(run_file.parent)

    assert isinstance(run, OfflineRun)
    assert run.finished
    assert run_file.name == f"run-{run.run_id}.wandb"
    assert (run.name, run.group, run.job_type) == ("n", "g", "jt")
    assert run.config == {"a": 1, "nested": {"b": 2.5}}
    assert run.history == [
        {"_step": i, "frames": i * 10, "loss": loss} for i, loss in enumerate(LOSSES)
    ]
    assert run.summary == {"_step": 2, "frames": 20, "loss": LOSSES[-1]}


def test_file_path_and_parent_dirs_give_same_run(basic_run: Path) -> None:
    (run_file,) = find_offline_runs(basic_run.parent)  # parent of the wandb dir

    assert find_offline_runs(run_file.parent) == [run_file]
    assert find_offline_runs(run_file) == [run_file]
    assert read_offline_run(run_file) == read_offline_run(run_file.parent)


def test_updates_merges_and_large_records(wandb_dir: Path) -> None:
    root = wandb_dir / "rich"
    root.mkdir()
    big = "x" * 70_000  # spans several 32 KiB blocks of the log
    run = wandb.init(mode="offline", dir=root, project="p", config={"v": {"value": 3}})
    run.config.update({"c": [1, 2]})
    run.log({"x": 1, "d": {"e": 2}}, step=0)
    run.log({"y": "s", "d": {"f": True}}, step=0)  # same step: one merged row
    run.log({"x": 3, "big": big}, step=4)
    run.log({"z": 1.5}, step=5)  # wandb writes step 4 once step 5 begins
    run.summary["x"] = -1  # explicit summary value outlives later steps ...
    run.summary["best"] = 42
    run.name = "renamed"
    run_file = finish_and_flush(run)  # ... not logging "x" (step 5 written here)

    assert find_offline_runs(root) == [run_file]
    result = read_offline_run(run_file)

    assert result.name == "renamed"
    assert (result.group, result.job_type) == (None, None)
    assert result.config == {"v": {"value": 3}, "c": [1, 2]}
    assert result.history == [
        {"_step": 0, "x": 1, "y": "s", "d": {"e": 2, "f": True}},
        {"_step": 4, "x": 3, "big": big},
        {"_step": 5, "z": 1.5},
    ]
    assert result.summary == {
        "_step": 5,
        "x": -1,
        "y": "s",
        "d": {"e": 2, "f": True},
        "big": big,
        "z": 1.5,
        "best": 42,
    }


def test_truncated_tail_is_ignored(basic_run: Path, tmp_path: Path) -> None:
    (run_file,) = find_offline_runs(basic_run)
    cut = tmp_path / run_file.name
    cut.write_bytes(run_file.read_bytes()[:-5])  # last (exit) record cut short

    full = read_offline_run(run_file)
    assert read_offline_run(cut) == dataclasses.replace(full, finished=False, exit_code=None)  # the exit record is cut


def test_missing_run_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        read_offline_run(tmp_path)
    with pytest.raises(FileNotFoundError, match="nowhere"):
        find_offline_runs(tmp_path / "nowhere")
    assert find_offline_runs(tmp_path) == []


def test_not_a_record_log(tmp_path: Path) -> None:
    bogus = tmp_path / "run-abc.wandb"
    bogus.write_text('{"not": "a wandb log"}')

    with pytest.raises(ValueError, match="not a wandb record log"):
        read_offline_run(tmp_path)


def test_corrupt_record(basic_run: Path, tmp_path: Path) -> None:
    (run_file,) = find_offline_runs(basic_run)
    data = bytearray(run_file.read_bytes())
    data[20] ^= 0xFF  # inside the first record's payload
    broken = tmp_path / run_file.name
    broken.write_bytes(bytes(data))

    with pytest.raises(ValueError, match="checksum"):
        read_offline_run(broken)
