"""Collector output -> a storage's write layout."""
from __future__ import annotations

from tensordict import TensorDictBase


def to_storage_layout(batch: TensorDictBase, ndim: int) -> TensorDictBase:
    """Keep the trailing ``ndim`` batch dims of a time-last collector batch: ndim 1 gives the
    flat concatenation of each env's steps, ndim 2 rows of env time series ``[N, T]``,
    ndim 3 ``[workers, envs, T]`` (the stacked MultiSync layout)."""
    if batch.batch_dims < ndim:
        raise ValueError(f"a storage with ndim={ndim} needs batches with at least {ndim} batch dims, "
                         f"got {list(batch.batch_size)}")
    if ndim == 1:
        return batch.reshape(-1)
    return batch.reshape(-1, *batch.batch_size[batch.batch_dims - ndim + 1:])
