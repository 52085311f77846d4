"""What runs wrote, read back: two runs' metrics rows without the wall-clock entries, and
their checkpoints' states bit for bit (a replay buffer's rows as far as written); a sweep's
members against their solo runs; a PBT sweep's events, settings and parents; a sweep's job
folders; every file of a folder by its hash."""
import hashlib
import json
from pathlib import Path

import pytest
import torch

from rlcollect.checkpoint import load_checkpoint


def job_dirs(sweep_dir: Path) -> list[Path]:
    """A sweep's job folders, by job number."""
    folders = [path for path in sweep_dir.iterdir() if path.is_dir()]
    return sorted(folders, key=lambda path: int(path.name.split("_")[0]))


def hashes(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (W&B's included), by its path, with its content's hash."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file()}


def metric_rows(run_dir):
    """metrics.jsonl without the wall-clock entries."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{key: value for key, value in row.items() if not key.startswith(("time", "_timestamp", "_runtime"))
             and "per_second" not in key} for row in rows]


def assert_equal_states(left, right, path="state"):
    """Two nested checkpoint states equal, tensors bit for bit; of a replay buffer's storage
    the rows written, without the trajectory ids (the shared collector's numbering)."""
    if isinstance(right, dict) and "data" in right and "filled" in right:
        left, right = (dict(state, data=filled_rows(state["data"], state["filled"])) for state in (left, right))
    if torch.is_tensor(right):
        assert torch.equal(left, right), path
    elif isinstance(right, dict):
        assert set(left) == set(right), path
        for key in right:
            assert_equal_states(left[key], right[key], f"{path}.{key}")
    elif isinstance(right, (list, tuple)):
        assert len(left) == len(right), path
        for index, (a, b) in enumerate(zip(left, right)):
            assert_equal_states(a, b, f"{path}[{index}]")
    else:
        assert left == right, path


def assert_same_summary_and_checkpoint(member, solo) -> None:
    """Run folders ``member`` and ``solo`` end alike (status, frames, evaluations, checkpoint
    frames) and their last checkpoints hold the same policy, learner, RNG state and frames."""
    summaries = [json.loads((folder / "summary.json").read_text()) for folder in (member, solo)]
    for key in ("status", "frames", "final_eval_return", "best_eval_return", "checkpoint_frames"):
        assert summaries[0][key] == summaries[1][key], key
    checkpoints = [load_checkpoint(folder / "checkpoint.pt") for folder in (member, solo)]
    for key in ("policy", "learner", "rng", "frames"):
        assert_equal_states(checkpoints[0][key], checkpoints[1][key], key)


def assert_member_is_its_solo_run(cfg, member, solo, steps: list[int], loss_key: str) -> None:
    """Train ``cfg`` as a solo run in folder ``solo``: the member's folder ``member`` holds
    the same metrics rows (at ``steps``, the last one with a key starting ``loss_key``),
    summary and checkpoint, bit for bit."""
    from rlcollect.pipeline import build, run

    run(build(cfg, solo))
    rows = metric_rows(solo)
    assert metric_rows(member) == rows
    assert [row["step"] for row in rows] == steps
    assert any(key.startswith(loss_key) for key in rows[-1]), rows[-1]
    assert_same_summary_and_checkpoint(member, solo)


def assert_members_near_solo_runs(tmp_path, cfgs, seeds, steps: list[int], abs_tol: float = 1e-5) -> list[dict]:
    """Train each of ``cfgs`` as a solo run (folder ``solo<seed>``): member ``m<seed>``'s
    metrics rows are its rows at ``steps`` to float32 rounding of batched products (rel
    1e-4, ``abs_tol``). Returns the members' last rows, which all differ."""
    from rlcollect.pipeline import build, run

    finals = []
    for seed, cfg in zip(seeds, cfgs):
        run(build(cfg, tmp_path / f"solo{seed}"))
        member, solo = metric_rows(tmp_path / f"m{seed}"), metric_rows(tmp_path / f"solo{seed}")
        assert [row["step"] for row in member] == [row["step"] for row in solo] == steps
        for ours, theirs in zip(member, solo):
            assert ours == pytest.approx(theirs, rel=1e-4, abs=abs_tol)
        finals.append(member[-1])
    assert len({json.dumps(final) for final in finals}) == len(finals)
    return finals


def filled_rows(data, filled: int):
    """A storage's rows 0 ... filled - 1 of every entry but ("collector", "traj_ids")."""
    if isinstance(data, dict):
        return {key: filled_rows(value, filled) for key, value in data.items() if key != "traj_ids"}
    return data[:filled]


def assert_pbt_sweep(sweep_dir, key: str, values: list[float], frames: list[int]) -> list:
    """A PBT sweep in ``sweep_dir`` whose members started with ``values`` of setting ``key``
    (``algo.<name>``): events at ``frames``, each setting its member's ``key`` to its
    parent's value then times 0.8 or 1.2; every member finished, its summary listing its
    parents and last value, its rows carrying the value it trained with. Returns the
    member folders in job order."""
    events = [json.loads(line) for line in (sweep_dir / "pbt.jsonl").read_text().splitlines()]
    assert [event["frames"] for event in events] == frames
    value_of = dict(enumerate(values))
    for event in events:
        [(name, value)] = event["settings"].items()
        assert name == key and value in (pytest.approx(value_of[event["parent"]] * 0.8),
                                         pytest.approx(value_of[event["parent"]] * 1.2))
        value_of[event["member"]] = value
    members = sorted(sweep_dir.glob("*_*"), key=lambda path: int(path.name.split("_")[0]))
    for number, member in enumerate(members):
        summary = json.loads((member / "summary.json").read_text())
        assert summary["status"] == "finished" and summary["pbt_settings"] == {key: value_of[number]}
        assert [parent["frames"] for parent in summary["pbt_parents"]] == \
            [event["frames"] for event in events if event["member"] == number]
        rows = metric_rows(member)
        assert all(f"pbt/{key}" in row for row in rows) and rows[-1][f"pbt/{key}"] == value_of[number]
    return members
