"""Deprecated: moved to rlcollect.rlpyt.sampler_collectors (docs/rlpyt.md); its names here warn and resolve there
(rlcollect/moved.py, MOVED_MODULES)."""
from rlcollect.moved import moved_getattr

__getattr__ = moved_getattr(__name__)
