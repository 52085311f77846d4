"""Argument checks shared by every part of rlcollect (a leaf module: imports nothing of it).

A positive int is an int >= 1 and never a bool: ``True`` is rejected everywhere.
"""
from __future__ import annotations

from typing import Any


def check_positive_int(name: str, value: Any, *, optional: bool = False) -> int | None:
    """``value`` when it is an int >= 1 (never a bool), or None when ``optional``; else a
    ValueError naming ``name``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        allowed = "None or a positive int" if optional else "a positive int"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return value


def check_non_negative_int(name: str, value: Any) -> int:
    """``value`` when it is an int >= 0 (never a bool); else a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative int, got {value!r}")
    return value
