"""Replacing failed workers (``max_worker_restarts``): the budget and the record.

Every collector that runs workers (processes or Ray actors) keeps one ``Restarts``: it
decides whether a failure is recovered from, records each replacement as a
``WorkerRestart`` and hands the new ones to the training loop (``pop``), which logs them
as event rows. How a worker is replaced is the collector's business
(docs/collectors.md, "Worker restarts").
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

from rlcollect.validation import check_non_negative_int

log = logging.getLogger(__name__)
RECOVERABLE = ("died", "timeout")  # failure kinds always recovered from (within the budget); "raised" on request


@dataclass(frozen=True)
class WorkerRestart:
    """One replaced worker: which, why (one line) and the frames of the batch it was
    collecting, dropped with it (an upper bound: the steps it had taken are not reported)."""

    worker_id: int
    cause: str
    frames_lost: int

    def as_event(self) -> dict:
        return {"event": "worker_restart", "worker": self.worker_id, "cause": self.cause,
                "frames_lost": self.frames_lost}


class Restarts:
    """The restart budget of one collector and the restarts made so far.

    Args:
        max_restarts: workers that may be replaced over the collector's life (0: none).
        on_env_error: also replace a worker whose env or policy raised ("raised" failures).
    """

    def __init__(self, max_restarts: int = 0, on_env_error: bool = False) -> None:
        self.max_restarts = check_non_negative_int("max_worker_restarts", max_restarts)
        if not isinstance(on_env_error, bool):
            raise TypeError(f"restart_on_env_error must be a bool, got {on_env_error!r}")
        self.on_env_error = on_env_error
        self.made: list[WorkerRestart] = []
        self._unreported = 0

    def allows(self, kind: str) -> bool:
        """Whether a failure of ``kind`` ("died", "timeout", "raised", "protocol") is recovered from."""
        return len(self.made) < self.max_restarts and (
            kind in RECOVERABLE or (kind == "raised" and self.on_env_error))

    def record(self, worker_id: int, kind: str, message: str, frames_lost: int, dropped: str) -> WorkerRestart:
        """Record (and log) the replacement of ``worker_id``; ``dropped`` says what was lost."""
        cause = message.strip().splitlines()[-1] if kind == "raised" else message.strip()
        restart = WorkerRestart(worker_id, cause, frames_lost)
        self.made.append(restart)
        self._unreported += 1
        log.warning("collector worker %d %s; replaced it (restart %d of max_worker_restarts=%d), dropping %s",
                    worker_id, cause, len(self.made), self.max_restarts, dropped)
        return restart

    def of(self, worker_id: int) -> int:
        """How many times ``worker_id`` was replaced."""
        return sum(restart.worker_id == worker_id for restart in self.made)

    def pop(self) -> list[WorkerRestart]:
        """The restarts made since the last call."""
        new = self.made[len(self.made) - self._unreported:]
        self._unreported = 0
        return new

    def __len__(self) -> int:
        return len(self.made)
