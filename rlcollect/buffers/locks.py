"""A lock shared by processes that outlives a holder killed while holding it.

A replay buffer shared with worker processes is written under one lock. A worker killed
(SIGKILL, the OOM killer) in the middle of its write would leave a multiprocessing lock
taken forever, and every later write or sample would wait on it. ``SharedLock`` records
the holding process; a process that waits finds out, within ``POLL_SECONDS``, that the
holder is dead, takes the lock over and runs ``on_take_over(dead_pid)`` before going on,
so the data the holder left half-written can be dropped (docs/data-layout.md, "Shared
buffers").

One window is not covered: a process killed between taking the semaphore and recording
itself as holder (a few bytecodes) leaves a lock no one can attribute.
"""
from __future__ import annotations

import os
import threading
from typing import Callable

POLL_SECONDS = 0.2  # how often a waiting process checks that the holder is alive


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux: /proc; else a signal 0)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class SharedLock:
    """Re-entrant within a process (and exclusive between its threads), exclusive between
    processes; taken over from a holder that died. Used as a context manager.

    Like every multiprocessing lock it reaches another process only as an argument of its
    Process (inherited or pickled at spawn).

    Args:
        mp_context: the multiprocessing context the sharing processes start with.
        on_take_over: called with the dead holder's pid by the process that takes the lock
            over, holding it, before it goes on.
    """

    def __init__(self, mp_context, on_take_over: Callable[[int], None] | None = None) -> None:
        self._lock = mp_context.Lock()
        self._take_over_lock = mp_context.Lock()  # one process at a time decides on a take-over
        self._holder = mp_context.RawValue("q", 0)  # pid of the holding process; 0: free
        self.on_take_over = on_take_over
        self._local_state()

    def _local_state(self) -> None:
        self._local = threading.RLock()
        self._depth = 0

    def __enter__(self) -> "SharedLock":
        self._local.acquire()
        try:
            if self._depth == 0:
                self._acquire_shared()
        except BaseException:
            self._local.release()
            raise
        self._depth += 1
        return self

    def __exit__(self, *exc_info) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._holder.value = 0
            self._lock.release()
        self._local.release()

    def _acquire_shared(self) -> None:
        pid = os.getpid()
        while not self._lock.acquire(timeout=POLL_SECONDS):
            with self._take_over_lock:
                holder = self._holder.value
                if not holder or holder == pid or process_alive(holder):
                    continue
                self._holder.value = pid  # the semaphore stays taken: it is ours now
            if self.on_take_over is not None:
                self.on_take_over(holder)
            return
        self._holder.value = pid

    @property
    def holder(self) -> int:
        """The pid of the process holding the lock (0: free)."""
        return self._holder.value

    def __getstate__(self) -> dict:
        return {"lock": self._lock, "take_over_lock": self._take_over_lock, "holder": self._holder}

    def __setstate__(self, state: dict) -> None:
        self._lock, self._take_over_lock, self._holder = state["lock"], state["take_over_lock"], state["holder"]
        self.on_take_over = None  # set again by the owner in this process
        self._local_state()
