"""Read back what a W&B offline run logged, without network or account.

In offline mode wandb (0.31) writes everything a run logs to a single
transaction log, ``<dir>/wandb/offline-run-<timestamp>-<id>/run-<id>.wandb``,
and no summary JSON.  wandb 0.31 ships no Python reader for that file (the
old ``wandb.sdk.internal.datastore`` is gone; only the Go ``wandb leet
inspect`` CLI reads it), so this module reads it directly:

* the framing is LevelDB's log format, with a 7-byte file header
  (``b":W&B"``, magic ``0xBEE1``, version ``0``), 32 KiB blocks and records
  that are split into FULL / FIRST / MIDDLE / LAST chunks, each checked by a
  zlib CRC-32 seeded with the chunk type;
* every reassembled payload is a ``wandb_internal.Record`` protobuf, parsed
  with wandb's own generated class (``wandb.proto.wandb_internal_pb2``).

wandb is imported lazily, on the first read, so importing this module is
cheap and does not require wandb.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wandb.proto import wandb_internal_pb2 as pb

__all__ = ["OfflineRun", "find_offline_runs", "read_offline_run", "resumed_history"]

_FILE_HEADER = struct.Struct("<4sHB")  # ident, magic, version
_FILE_IDENT = b":W&B"
_FILE_MAGIC = 0xBEE1
_FILE_VERSION = 0
_CHUNK_HEADER = struct.Struct("<IHB")  # crc32, payload length, chunk type
_BLOCK_SIZE = 32 * 1024
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4
_STEP_KEY = "_step"
_RUN_FILE_GLOB = "run-*.wandb"

KeyPath = tuple[str, ...]


@dataclass(frozen=True)
class OfflineRun:
    """What one W&B run logged, as read back from its ``.wandb`` file.

    Attributes:
        run_id: The run's id (the ``<id>`` in ``run-<id>.wandb``).
        name: Display name given to ``wandb.init(name=...)``, if any.
        group: Group given to ``wandb.init(group=...)``, if any.
        job_type: Job type given to ``wandb.init(job_type=...)``, if any.
        config: The run config as plain values (nested dicts preserved),
            without wandb's internal ``_wandb`` entry.
        history: One dict per logged step, in log order, with the keys as
            logged plus ``"_step"``; other ``_``-prefixed internal keys
            (``_runtime``, ``_timestamp``, ...) are dropped.
        summary: Final summary values (same key filtering as history).
        finished: Whether the log ends the run (holds its exit record).
            False for a run still being written, killed, or read too
            early: ``run.finish()`` may return a few milliseconds before
            wandb-core has flushed the file; ``wandb.teardown()`` waits.
        exit_code: The exit code the run ended with (0: finished; non-zero: failed or
            interrupted); None while it has no exit record.
    """

    run_id: str
    name: str | None
    group: str | None
    job_type: str | None
    config: dict[str, Any]
    history: list[dict[str, Any]]
    summary: dict[str, Any]
    finished: bool = False
    exit_code: int | None = None


def find_offline_runs(root: str | os.PathLike[str]) -> list[Path]:
    """Return every ``run-*.wandb`` file below ``root``, sorted by path.

    ``root`` may be a wandb directory, its parent, a single run folder or a
    ``.wandb`` file itself.  Symlinks to folders (such as wandb's
    ``latest-run``) are not followed, so no run is listed twice.  Run folders
    are named ``offline-run-<timestamp>-<id>``, so the order is chronological
    within one wandb directory.

    Raises:
        FileNotFoundError: If ``root`` does not exist.
    """
    root = Path(root)
    if root.is_file():
        return [root] if root.match(_RUN_FILE_GLOB) else []
    if not root.is_dir():
        raise FileNotFoundError(f"no such file or directory: {root}")
    found = [
        Path(folder) / name
        for folder, _, names in os.walk(root)
        for name in names
        if Path(name).match(_RUN_FILE_GLOB)
    ]
    return sorted(found)


def read_offline_run(path: str | os.PathLike[str]) -> OfflineRun:
    """Read the run stored in a run folder or in its ``run-<id>.wandb`` file.

    Config and summary are replayed in log order, so later updates win and
    removals are honoured.  History records that share a ``_step`` with the
    row before them are merged into that row.  If the log holds no summary
    records, the summary is the last logged value of each history key.  A
    truncated last record (a run killed mid-write) is ignored.

    Raises:
        FileNotFoundError: If ``path`` is neither a ``.wandb`` file nor a
            folder that directly contains exactly one.
        ValueError: If the file is not a wandb record log or is corrupt.
    """
    run_file = _resolve_run_file(Path(path))
    run_id = run_file.stem.removeprefix("run-")
    meta: dict[str, str] = {}
    config: dict[str, Any] = {}
    history: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    finished, exit_code = False, None
    for record in _read_records(run_file):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_id = record.run.run_id or run_id
            _update_run_meta(meta, record.run)
            _apply_updates(config, record.run.config)
            _apply_updates(summary, record.run.summary, drop_internal=True)
        elif kind == "config":
            _apply_updates(config, record.config)
        elif kind == "summary":
            _apply_updates(summary, record.summary, drop_internal=True)
        elif kind == "history":
            _add_history(history, record.history)
        elif kind == "exit":
            finished, exit_code = True, int(record.exit.exit_code)
    config.pop("_wandb", None)
    return OfflineRun(
        run_id=run_id,
        name=meta.get("display_name"),
        group=meta.get("run_group"),
        job_type=meta.get("job_type"),
        config=config,
        history=history,
        summary=summary or _last_values(history),
        finished=finished,
        exit_code=exit_code,
    )


def _resolve_run_file(path: Path) -> Path:
    """Return the ``.wandb`` file that ``path`` names or directly contains."""
    if path.is_file():
        return path
    candidates = sorted(path.glob(_RUN_FILE_GLOB)) if path.is_dir() else []
    if not candidates:
        raise FileNotFoundError(f"no wandb run file ({_RUN_FILE_GLOB}) at {path}")
    if len(candidates) > 1:
        names = ", ".join(c.name for c in candidates)
        raise FileNotFoundError(f"several wandb run files in {path}: {names}")
    return candidates[0]


def _read_records(run_file: Path) -> Iterator[pb.Record]:
    """Yield the protobuf records stored in a ``.wandb`` file, in order."""
    from google.protobuf.message import DecodeError
    from wandb.proto import wandb_internal_pb2

    for offset, payload in _read_payloads(run_file.read_bytes(), run_file):
        record = wandb_internal_pb2.Record()
        try:
            record.ParseFromString(payload)
        except DecodeError as exc:
            raise ValueError(f"{run_file}: bad record at byte {offset}: {exc}") from exc
        yield record


def _read_payloads(data: bytes, source: Path) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, payload)`` for each record of a LevelDB-style log.

    Chunks of a record split across blocks are reassembled.  Reading stops
    quietly at a truncated tail or at unwritten (zeroed) space.
    """
    _check_file_header(data, source)
    offset = _FILE_HEADER.size
    parts: list[bytes] = []
    start = offset
    while offset + _CHUNK_HEADER.size <= len(data):
        room = _BLOCK_SIZE - offset % _BLOCK_SIZE
        if room < _CHUNK_HEADER.size:  # block trailer: zero padding
            offset += room
            continue
        crc, length, kind = _CHUNK_HEADER.unpack_from(data, offset)
        body_start = offset + _CHUNK_HEADER.size
        chunk = data[body_start : body_start + length]
        if kind == 0 or len(chunk) < length:  # unwritten space / truncated
            return
        if crc != zlib.crc32(chunk, zlib.crc32(bytes([kind]))):
            raise ValueError(f"{source}: checksum mismatch at byte {offset}")
        if kind in (_FULL, _FIRST):
            parts, start = [], offset
        elif kind not in (_MIDDLE, _LAST) or not parts:
            raise ValueError(f"{source}: bad chunk type {kind} at byte {offset}")
        parts.append(chunk)
        if kind in (_FULL, _LAST):
            yield start, b"".join(parts)
            parts = []
        offset = body_start + length


def _check_file_header(data: bytes, source: Path) -> None:
    """Raise ValueError unless ``data`` starts with a wandb log header."""
    if len(data) >= _FILE_HEADER.size:
        ident, magic, version = _FILE_HEADER.unpack_from(data)
        if (ident, magic, version) == (_FILE_IDENT, _FILE_MAGIC, _FILE_VERSION):
            return
    raise ValueError(f"{source} is not a wandb record log (bad file header)")


def _update_run_meta(meta: dict[str, str], run: pb.RunRecord) -> None:
    """Keep the non-empty name, group and job type of a run record."""
    for field in ("display_name", "run_group", "job_type"):
        value = getattr(run, field)
        if value:
            meta[field] = value


def _apply_updates(
    target: dict[str, Any],
    record: pb.ConfigRecord | pb.SummaryRecord,
    *,
    drop_internal: bool = False,
) -> None:
    """Apply the updates then removals of a config or summary record."""
    for item in record.update:
        path = _key_path(item)
        if not (drop_internal and _is_internal(path)):
            _set_path(target, path, _decode(item))
    for item in record.remove:
        _remove_path(target, _key_path(item))


def _add_history(history: list[dict[str, Any]], record: pb.HistoryRecord) -> None:
    """Append a history record as a row, merging it into a same-step row."""
    row: dict[str, Any] = {}
    for item in record.item:
        path = _key_path(item)
        if not _is_internal(path):
            _set_path(row, path, _decode(item))
    row.setdefault(_STEP_KEY, record.step.num)
    if history and history[-1].get(_STEP_KEY) == row[_STEP_KEY]:
        _merge(history[-1], row)
    else:
        history.append(row)


def _last_values(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Return the last logged value of each top-level history key."""
    summary: dict[str, Any] = {}
    for row in history:
        summary.update(row)
    return summary


def _key_path(item: pb.HistoryItem | pb.SummaryItem | pb.ConfigItem) -> KeyPath:
    """Return an item's key as a path (``nested_key`` if set, else ``key``)."""
    return tuple(item.nested_key) or (item.key,)


def _is_internal(path: KeyPath) -> bool:
    """Tell whether a key is wandb-internal (``_``-prefixed, not ``_step``)."""
    return path[0].startswith("_") and path[0] != _STEP_KEY


def _decode(item: pb.HistoryItem | pb.SummaryItem | pb.ConfigItem) -> Any:
    """Return an item's value, preferring a typed history value to its JSON.

    Typed values (written with ``x_history_value_encoding="json,typed"``)
    keep e.g. ``1.0`` a float; the JSON text always present spells it ``1``.
    """
    has_typed_value = "value" in item.DESCRIPTOR.oneofs_by_name
    kind = item.WhichOneof("value") if has_typed_value else None
    if kind in ("boolean", "integer", "number", "text"):
        return getattr(item, kind)
    if kind == "none":
        return None
    if kind == "json":
        return json.loads(item.json)
    return json.loads(item.value_json) if item.value_json else None


def _set_path(target: dict[str, Any], path: KeyPath, value: Any) -> None:
    """Set ``target[path[0]][path[1]]...`` to ``value``, creating dicts."""
    *parents, leaf = path
    for key in parents:
        child = target.get(key)
        if not isinstance(child, dict):
            child = target[key] = {}
        target = child
    target[leaf] = value


def _remove_path(target: dict[str, Any], path: KeyPath) -> None:
    """Delete ``target[path[0]]...[path[-1]]`` if it exists."""
    *parents, leaf = path
    for key in parents:
        target = target.get(key)
        if not isinstance(target, dict):
            return
    target.pop(leaf, None)


def _merge(target: dict[str, Any], update: dict[str, Any]) -> None:
    """Recursively merge ``update`` into ``target`` (nested dicts combined)."""
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = value


def resumed_history(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One history from the parts of a resumed W&B run (in the order they ran): each part
    replaces the rows of the earlier ones from its first ``_step`` on, as the run folder's
    metrics.jsonl is cut back to the checkpoint on resume, so no step counts twice."""
    history: list[dict[str, Any]] = []
    for part in parts:
        if part:
            first = part[0].get("_step")
            history = [row for row in history if first is None or (row.get("_step") or 0) < first]
        history.extend(part)
    return history
