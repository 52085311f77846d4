"""Collectors: iterate to get batches of env steps produced by a policy.

Every collector rlcollect exports (rlcollect/__init__.pyi) is importable from here too, loaded
on first use: collectors/ray/ imports Ray itself only when a RayCollector is built, and the
action-server collectors, the pool and the distributed ones load only when asked for.
"""
from rlcollect.lazy_exports import lazy_getattr, public_exports

_LAZY = {**public_exports("rlcollect.collectors."),
         **{name: "rlcollect.collectors.ray" for name in ("loopback_ray_env", "start_local_ray")}}
__all__ = sorted(_LAZY)
__getattr__ = lazy_getattr("rlcollect.collectors", _LAZY, globals())
