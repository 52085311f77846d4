"""Package attributes imported on first access (PEP 562), so light commands stay light."""
from __future__ import annotations

from importlib import import_module
from typing import Callable


def lazy_getattr(package: str, exports: dict[str, str], namespace: dict) -> Callable[[str], object]:
    """A module ``__getattr__`` that imports ``exports[name]`` (a module path) on first use
    and caches the attribute in ``namespace`` (the package's globals)."""

    def __getattr__(name: str):
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(exports[name]), name)
        namespace[name] = value
        return value

    return __getattr__
