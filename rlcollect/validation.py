"""Argument checks shared by every part of rlcollect (a leaf module: it imports only the
leaf rlcollect.errors).

A positive int is an int >= 1 and never a bool: ``True`` is rejected everywhere. A
:class:`Range` is the interval a number may take, :class:`Choices` the values an option
with a fixed set of them may take; each is declared once beside the option it bounds (the
config schemas, rlcollect/config/schemas.py) and checked before a run starts.
"""
from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from typing import Any

from rlcollect.errors import ConfigError


def check_positive_int(name: str, value: Any, *, optional: bool = False) -> int | None:
    """``value`` when it is an int >= 1 (never a bool), or None when ``optional``; else a
    ConfigError naming ``name``."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        allowed = "None or a positive int" if optional else "a positive int"
        raise ConfigError(f"{name} must be {allowed}, got {value!r}")
    return value


def check_non_negative_int(name: str, value: Any) -> int:
    """``value`` when it is an int >= 0 (never a bool); else a ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{name} must be a non-negative int, got {value!r}")
    return value


_BOUND = r"\s*(-?(?:inf|\d+(?:\.\d*)?(?:e-?\d+)?))\s*"
_INTERVAL = re.compile(rf"^([\[(]){_BOUND},{_BOUND}([\])])$")
_HALF_LINE = re.compile(rf"^(>=|>|<=|<){_BOUND}$")


@dataclass(frozen=True)
class Range:
    """The numbers an option may take: from ``low`` to ``high`` (None: unbounded), each end
    included unless ``open_low`` / ``open_high``. Written as a spec: ``">= 1"``, ``"> 0"``,
    ``"(0, 1]"``, ``"[0, 1]"``, or ``"any"`` (every finite number)."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False

    @classmethod
    def parse(cls, spec: str) -> "Range":
        spec = spec.strip()
        if spec == "any":
            return cls()
        interval = _INTERVAL.match(spec)
        if interval:
            left, low, high, right = interval.groups()
            return cls(float(low), float(high), left == "(", right == ")")
        half_line = _HALF_LINE.match(spec)
        if not half_line:
            raise ValueError(f"not a range spec: {spec!r} (e.g. '>= 1', '> 0', '(0, 1]', 'any')")
        operator, bound = half_line.groups()
        if operator.startswith(">"):
            return cls(low=float(bound), open_low=operator == ">")
        return cls(high=float(bound), open_high=operator == "<")

    def __contains__(self, value: Any) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return False
        return self.high is None or (value < self.high if self.open_high else value <= self.high)

    def __str__(self) -> str:
        def number(bound: float) -> str:
            return str(int(bound)) if bound.is_integer() else str(bound)

        if self.low is not None and self.high is not None:
            return (f"in {'(' if self.open_low else '['}{number(self.low)}, {number(self.high)}"
                    f"{')' if self.open_high else ']'}")
        if self.low is not None:
            return f"{'>' if self.open_low else '>='} {number(self.low)}"
        if self.high is not None:
            return f"{'<' if self.open_high else '<='} {number(self.high)}"
        return "a finite number"

    def check(self, name: str, value: Any) -> None:
        """A ConfigError naming ``name`` unless ``value`` is in the range (None passes: an
        option's "not set")."""
        if value is not None and value not in self:
            raise ConfigError(f"{name}={value!r}: must be {self}")


@dataclass(frozen=True)
class Choices:
    """The values an option may take: one of ``values`` (strings or numbers, compared with
    their type: ``0`` is not ``"0"``, nor ``False``)."""

    values: tuple

    def __contains__(self, value: Any) -> bool:
        return any(type(value) is type(choice) and value == choice for choice in self.values)

    def __str__(self) -> str:
        return ", ".join(str(choice) for choice in self.values)

    def check(self, name: str, value: Any) -> None:
        """A ConfigError naming ``name``, the values allowed and the closest of them,
        unless ``value`` is one of them (None passes: an option's "not set")."""
        if value is None or value in self:
            return
        close = difflib.get_close_matches(str(value), [str(choice) for choice in self.values], n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"{name}={value!r}: choose one of {self}{hint}")
