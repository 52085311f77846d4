"""Settings per thread, set for a block of code: the base of ``set_actions_only``
(rlcollect/acting.py) and ``set_recurrent_mode`` (modules/recurrent.py).

    class set_fast(ThreadSetting):
        default = False

    with set_fast(True):     # or @set_fast(True) on a function
        set_fast.current()   # True on this thread, inside; set_fast.default elsewhere

Each subclass keeps its own values; contexts nest, and each exit restores the value it
found. Being per thread, a setting made by a training thread does not change what a
collector or evaluation thread sees.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, ClassVar


class ThreadValues(threading.local):
    """The values a ThreadSetting subclass holds on each thread (an empty stack at first)."""

    def __init__(self) -> None:
        self.stack: list = []


class ThreadSetting(contextlib.ContextDecorator):
    """A context manager (or decorator) that sets ``value`` for its subclass on this thread."""

    default: ClassVar[Any] = None
    _values: ClassVar[ThreadValues]

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls._values = ThreadValues()

    def __init__(self, value: Any) -> None:
        self.value = value

    @classmethod
    def current(cls) -> Any:
        """The innermost value set on this thread, else ``default``."""
        stack = cls._values.stack
        return stack[-1] if stack else cls.default

    def __enter__(self) -> "ThreadSetting":
        self._values.stack.append(self.value)
        return self

    def __exit__(self, *exc_info) -> bool:
        self._values.stack.pop()
        return False
