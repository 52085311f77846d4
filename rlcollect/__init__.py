"""rlcollect: reinforcement-learning data collection, and a Hydra-driven experiment runner.

The library is usable without the command line (docs/README.md is the map of the docs).
The command line is ``rlcollect train [overrides]`` (README.md).

Names load on first access, so ``rlcollect --help`` and config errors answer without
importing torch, and importing rlcollect never imports Ray. ``rlcollect/__init__.pyi``
declares every public name once, in its group: type checkers read it, and this package reads
it at import for ``__all__``, the module each name loads from, and the list below
(tests/test_public_api.py checks that each name resolves, with a docstring). rlpyt's names are
at home in ``rlcollect.rlpyt`` and the migration names in ``rlcollect.compat``; the top
level re-exports them.

The public names, by group:
"""
from rlcollect import compile_hints
from rlcollect.lazy_exports import lazy_getattr, rlcollect_stub

compile_hints.install()  # tensordict's compile hints wait for torch's compiler: 1.5 s off every start-up

__version__ = "0.1.0"

_STUB = rlcollect_stub()
_EXPORTS = _STUB.exports  # public name -> the module it loads from (where it is defined, or the package presenting it)
__all__ = sorted(_EXPORTS)
__doc__ += _STUB.listing()

__getattr__ = lazy_getattr("rlcollect", _EXPORTS, globals())


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
