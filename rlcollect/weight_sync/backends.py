"""Weight-sync schemes by backend name, as TorchRL's ``backend=`` strings name them.

    scheme_from_backend("process", strategy="state_dict")   # a MultiProcessWeightSyncScheme

This table sits above the schemes (schemes.py is their base and knows none of them), so a
new scheme is its own module plus one entry here.
"""
from __future__ import annotations

from rlcollect.weight_sync.pipes import MultiProcessWeightSyncScheme
from rlcollect.weight_sync.schemes import NoWeightSyncScheme, WeightSyncScheme
from rlcollect.weight_sync.shared_mem import SharedMemWeightSyncScheme

__all__ = ["scheme_from_backend"]


def scheme_from_backend(backend: str, **kwargs) -> WeightSyncScheme:
    """The scheme of a backend by name: "shared" (SharedMemWeightSyncScheme), "process"
    (MultiProcessWeightSyncScheme, kwargs: strategy, ack_timeout), "ray"
    (RayWeightSyncScheme, kwargs: strategy), "none" (NoWeightSyncScheme).

    Raises:
        ValueError: for another name.
    """
    from rlcollect.weight_sync.ray import RayWeightSyncScheme  # loaded on first use, as the package loads it

    schemes = {"shared": SharedMemWeightSyncScheme, "process": MultiProcessWeightSyncScheme,
               "ray": RayWeightSyncScheme, "none": NoWeightSyncScheme}
    if backend not in schemes:
        raise ValueError(f"weight-sync backend must be one of {sorted(schemes)}, got {backend!r}")
    return schemes[backend](**kwargs)
