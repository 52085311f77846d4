"""Per-run metrics: metrics.jsonl in the run folder, and Weights & Biases when asked.

``log_collection(frames, infos)`` logs a batch's row: the frames, the throughput and the
trajectory info (return, length, discounted return) of the trajectories it completed, exact
means over those trajectories, not batch estimates; the infos come from an
``EpisodeStatsHook``, the collector's post-collect hook, through ``collector.hook_results()``
wherever the hook ran. A RunLogger is itself a post-collect hook of an in-process collector,
for library use. Metrics logged for the same step are merged into one row, written once to
every sink.
"""
from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Sequence

from tensordict import TensorDictBase

from rlcollect.choices import WANDB_MODES
from rlcollect.errors import disk_full
from rlcollect.logging.runs import json_lines
from rlcollect.logging.wandb_start import wait_for_wandb
from rlcollect.run_files import METRICS_FILE, WANDB_DIR
from rlcollect.trajectories import EpisodeTracker, TrajectoryInfo


def metrics_up_to(run_dir: str | Path, last_step: int) -> str | None:
    """metrics.jsonl's text without the rows past ``last_step`` (a run resumed from a
    checkpoint at that frame count writes them again) and without a last row cut short (a
    crash or a full disk while it was written); None without the file. A damaged row before
    the last is a DamagedRowError naming the file and the line."""
    path = Path(run_dir) / METRICS_FILE
    if not path.exists():
        return None
    return "".join(line + "\n" for line, row in json_lines(path) if row["step"] <= last_step)


class RunLogger:
    """Writes one JSON line per step to ``<run_dir>/metrics.jsonl``.

    Building a logger touches no file: ``open()`` (called by the training loop as the run
    starts, or by the first row written) creates the run folder's files, so a run refused
    while it is being built leaves none behind.

    Args:
        run_dir: the run folder (metrics.jsonl is appended to, so a resumed run continues it).
        start_frames: frames already counted before this logger (a resumed run).
        gamma: discount of the logged discounted returns.
    """

    def __init__(self, run_dir: str | Path, *, start_frames: int = 0, gamma: float = 0.99,
                 info_keys: Sequence[str] = ()) -> None:
        self.run_dir = Path(run_dir)
        self._file = None  # metrics.jsonl, from open() on
        self._closed = False
        self.gamma = gamma
        self.info_keys = tuple(info_keys)
        self._episodes = episode_tracker(gamma, self.info_keys)
        self._start_time = time.perf_counter()
        self._seconds_before = 0.0
        self._frames = start_frames
        self._start_frames = start_frames
        self._pending_step: int | None = None
        self._pending: dict[str, Any] = {}
        self.recent_episode_return: float | None = None
        self._events: dict[str, int] = {}  # how many events of each name were logged
        self.every_row: dict[str, Any] = {}  # in each collection row (a PBT member resumed alone: its settings)

    @property
    def frames(self) -> int:
        return self._frames

    def open(self) -> None:
        """Create the run folder's files (metrics.jsonl, appended to); idempotent."""
        if self._file is None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._file = open(self.run_dir / METRICS_FILE, "a", encoding="utf-8")

    @property
    def run_id(self) -> str | None:
        """The W&B run id (None without W&B)."""
        return None

    @property
    def elapsed(self) -> float:
        """Seconds of training so far (earlier sessions of a resumed run included)."""
        return self._seconds_before + time.perf_counter() - self._start_time

    def start_clock(self, seconds_before: float = 0.0) -> None:
        """Start timing now (the training loop starts), continuing from ``seconds_before``."""
        self._start_time = time.perf_counter()
        self._seconds_before = seconds_before

    def __call__(self, batch: TensorDictBase) -> None:
        """Post-collect hook (in-process collectors): log what this batch holds."""
        self.log_collection(self._frames + batch.numel(), self._episodes.infos(batch))

    def log_collection(self, frames: int, infos: list[TrajectoryInfo]) -> None:
        """Log the collection row of ``frames``: throughput and the completed trajectories."""
        self._frames = frames
        elapsed = self.elapsed
        metrics: dict[str, Any] = {
            "frames": frames,
            "time": elapsed,
            "collect/frames_per_second": (frames - self._start_frames) / max(elapsed - self._seconds_before, 1e-9),
            "collect/episodes": len(infos),
        }
        if infos:
            self.recent_episode_return = sum(info.episode_return for info in infos) / len(infos)
            metrics["collect/episode_return"] = self.recent_episode_return
            metrics["collect/episode_length"] = sum(info.length for info in infos) / len(infos)
            metrics["collect/episode_discounted_return"] = sum(info.discounted_return for info in infos) / len(infos)
            for key in self.info_keys:  # the env's info at each episode's end, e.g. is_success
                metrics[f"collect/{key}"] = sum(info.last[f"next/{key}"] for info in infos) / len(infos)
        self.log({**metrics, **self.every_row}, step=frames)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        """Add ``metrics`` to the row of ``step`` (a frame count; rows are written in
        increasing step order, each once)."""
        if self._pending_step is not None and step != self._pending_step:
            self.flush()
        self._pending_step = step
        self._pending.update({key: _plain(value) for key, value in metrics.items()})

    def log_event(self, event: dict[str, Any], step: int) -> None:
        """Write ``event`` (``{"event": name, ...}``) as its own metrics.jsonl row at ``step``
        (readers of the metrics keep event rows apart: ``logging.runs.split_events``); W&B
        gets ``event/<name>``, how many so far, at that step."""
        if self._pending_step is not None and self._pending_step < step:
            self.flush()  # rows stay in step order
        self._events[event["event"]] = self._events.get(event["event"], 0) + 1
        RunLogger._write(self, {"step": step, **{key: _plain(value) for key, value in event.items()}})
        self._log_event_count(event["event"], self._events[event["event"]], step)

    def _log_event_count(self, name: str, count: int, step: int) -> None:
        """Where else an event is counted (W&B); nowhere for a plain RunLogger."""

    def log_video(self, name: str, path: str | Path, step: int) -> None:
        """A video written at ``path`` (in the run folder): where else it goes (W&B); the
        file itself is the run folder's record."""

    def flush(self) -> None:
        if self._pending_step is None:
            return
        row = {"step": self._pending_step, **self._pending}
        self._write(row)
        self._pending_step, self._pending = None, {}

    def _write(self, row: dict[str, Any]) -> None:
        self.open()
        try:
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()
        except OSError as error:  # a full disk: said as such (DiskFullError), naming the file's folder
            full = disk_full(error, self.run_dir / METRICS_FILE)
            if full is None:
                raise
            raise full from error

    def close(self, exit_code: int = 0) -> None:
        """Flush and close; idempotent. ``exit_code``: how the run ended (0: finished;
        non-zero: failed or interrupted), recorded by the loggers that keep it (W&B). A
        logger never opened writes nothing."""
        if self._closed:
            return
        self.flush()  # a row still pending opens the files to be written
        if self._file is not None:
            self._file.close()
        self._closed = True


class WandbLogger(RunLogger):
    """A RunLogger that also logs every row to a W&B run (offline unless ``mode="online"``).

    Offline runs need no account and no network; read them back with
    ``rlcollect.logging.wandb_offline.read_offline_run``.
    """

    def __init__(self, run_dir: str | Path, *, project: str, name: str | None = None,
                 group: str | None = None, job_type: str | None = None, config: dict | None = None,
                 mode: str = "offline", entity: str | None = None, run_id: str | None = None,
                 start_frames: int = 0, gamma: float = 0.99, info_keys: Sequence[str] = ()) -> None:
        if mode not in WANDB_MODES:
            raise ValueError(f"wandb mode must be 'offline', 'online' or 'disabled', got {mode!r}")
        if mode == "online" and not (os.environ.get("WANDB_API_KEY") or _has_netrc_login()):
            raise ValueError("logger.mode=online needs a W&B login: run `wandb login` or set WANDB_API_KEY "
                               "(or keep the default logger.mode=offline and `wandb sync` later)")
        super().__init__(run_dir, start_frames=start_frames, gamma=gamma, info_keys=info_keys)
        # reinit="create_new": runs open side by side in one process (the members of a batched sweep)
        self._init = dict(project=project, entity=entity, name=name, group=group, job_type=job_type, config=config,
                          dir=str(self.run_dir), mode=mode, id=run_id, resume="allow" if run_id else None,
                          reinit="create_new")
        self._run = None  # from open() on

    def open(self) -> None:
        """metrics.jsonl and the W&B run (its files in ``<run_dir>/wandb``); idempotent."""
        import wandb

        super().open()
        if self._run is None:
            wait_for_wandb()  # the service `rlcollect train` may have started early (logging/wandb_start.py)
            self._run = wandb.init(**self._init, settings=wandb.Settings(
                console="off", save_code=False, disable_git=True, x_disable_stats=True, init_timeout=60, silent=True))
            if self._start_frames:  # a resumed run
                self._catch_up()

    def _catch_up(self) -> None:
        """A resumed run's W&B part, before its first row: metrics.jsonl (already cut back to
        the checkpoint) holds every row of the run so far; those from the first one the
        earlier parts do not hold as it is are logged again (never written: their writer was
        killed first; or rows of a part that a later resume replaced, which W&B still holds),
        an event row as its count (``event/<name>``), and the events count on from the file's."""
        rows = [row for _, row in json_lines(self.run_dir / METRICS_FILE)]
        start = self._first_unlogged_step(rows)
        for row in rows:
            if "event" in row:
                self._events[row["event"]] = self._events.get(row["event"], 0) + 1
            if start is None or row["step"] < start:
                continue
            if "event" in row:
                self._run.log({f"event/{row['event']}": self._events[row["event"]]}, step=row["step"])
            else:
                self._run.log({key: value for key, value in row.items() if key != "step"}, step=row["step"])

    def _first_unlogged_step(self, rows: list[dict[str, Any]]) -> int | None:
        """The step of the first metrics row (``rows``) the earlier parts of this W&B run do
        not hold with its values (None: they hold every one). Online, the step W&B resumes
        the run at (it takes no earlier one); offline, from their files, joined as
        ``resumed_history`` joins them."""
        if self._init["mode"] == "online":
            return self._run.starting_step
        from rlcollect.logging.wandb_offline import find_offline_runs, read_offline_run, resumed_history

        this_part = Path(self._run.settings.sync_file).resolve()
        parts = []
        for part in find_offline_runs(self.run_dir / WANDB_DIR):
            if part.name != f"run-{self._run.id}.wandb" or part.resolve() == this_part:
                continue
            try:
                parts.append(read_offline_run(part).history)
            except ValueError:  # a damaged part (compare --wandb names it): the rows of the others
                continue
        logged: dict[int, dict[str, Any]] = {}
        for row in resumed_history(parts):
            logged.setdefault(row.get("_step"), {}).update(row)
        for row in rows:
            if "event" in row:  # in W&B as a count at its step
                continue
            held = logged.get(row["step"])
            if held is None or any(held.get(key) != value for key, value in row.items() if key != "step"):
                return row["step"]
        return None

    @property
    def run_id(self) -> str | None:
        """The W&B run's id (None before the run is opened)."""
        return self._run.id if self._run is not None else self._init["id"]

    def _write(self, row: dict[str, Any]) -> None:
        super()._write(row)
        step = row["step"]
        self._run.log({key: value for key, value in row.items() if key != "step"}, step=step)

    def _log_event_count(self, name: str, count: int, step: int) -> None:
        self.open()
        self._run.log({f"event/{name}": count}, step=step)

    def log_video(self, name: str, path: str | Path, step: int) -> None:
        import wandb

        if self._pending_step is not None and self._pending_step < step:
            self.flush()  # W&B steps only go forward
        self.open()
        self._run.log({name: wandb.Video(str(path), format="mp4")}, step=step)

    def close(self, exit_code: int = 0) -> None:
        if self._closed:
            return
        super().close()
        if self._run is not None:
            self._run.finish(exit_code=exit_code)  # non-zero: the W&B run shows as failed


def episode_tracker(gamma: float, info_keys: Sequence[str]) -> EpisodeTracker:
    """The tracker of a logger or hook: returns, lengths, and the info keys at episode ends."""
    return EpisodeTracker(gamma, last_keys=[("next", key) for key in info_keys])


class EpisodeStatsHook:
    """A post-collect hook returning the TrajectoryInfo of each trajectory a batch
    completes; picklable, each copy keeps its own EpisodeTracker. RayCollector ships what
    its actors' copies return to the driver (``hook_results()``)."""

    def __init__(self, gamma: float = 0.99, info_keys: Sequence[str] = ()) -> None:
        self._episodes = episode_tracker(gamma, info_keys)

    def __call__(self, batch: TensorDictBase) -> list[TrajectoryInfo]:
        return self._episodes.infos(batch)


def _has_netrc_login() -> bool:
    import netrc

    try:
        return netrc.netrc().authenticators("api.wandb.ai") is not None
    except (FileNotFoundError, netrc.NetrcParseError):
        return False


def _plain(value: Any) -> Any:
    """JSON-friendly scalars (tensors and numpy scalars become Python numbers)."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
