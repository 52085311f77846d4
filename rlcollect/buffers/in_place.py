"""Saving a full storage without copying it: ``saved_in_place()``.

A storage's ``state_dict(include_data=True)`` copies what it holds, so that the state stays
as it was while writers go on (background collection, workers collecting ahead): a
checkpoint of a full buffer then needs the memory of two buffers (a 1M-step Atari replay
holds 7.6 GB). A caller that keeps every writer still until the state is saved (a training
loop whose collector writes only while it is iterated, in that loop's thread) saves it
inside ``saved_in_place()``: a full storage then hands out its tensors themselves. A
storage not yet full still copies the steps written (the copy is what keeps the
preallocated rest out of the file). docs/runs.md, "Every run keeps its policy".
"""
from __future__ import annotations

import contextlib
import contextvars

_IN_PLACE = contextvars.ContextVar("rlcollect_saved_in_place", default=False)


@contextlib.contextmanager
def saved_in_place():
    """Inside, ``state_dict(include_data=True)`` of a full storage holds its tensors, not a
    copy: for a caller that lets nothing write to any storage until the state is saved,
    which it saves before the block ends."""
    token = _IN_PLACE.set(True)
    try:
        yield
    finally:
        _IN_PLACE.reset(token)


def in_place() -> bool:
    """Whether this is inside ``saved_in_place()``."""
    return _IN_PLACE.get()
