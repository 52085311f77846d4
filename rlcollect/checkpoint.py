"""Checkpoints: written atomically, read back with ``torch.load(weights_only=True)``.

Everything saved is tensors, numbers, strings and containers of them (no pickled
objects), so loading a checkpoint cannot run arbitrary code.
"""
from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import torch

CHECKPOINT_FILE = "checkpoint.pt"


def save_checkpoint(path: str | Path, state: dict) -> None:
    """Write ``state`` to ``path`` atomically: a crash leaves the previous checkpoint intact."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "wb") as file:
        torch.save(state, file)
        file.flush()
        os.fsync(file.fileno())
    os.replace(partial, path)


def load_checkpoint(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return torch.load(path, map_location="cpu", weights_only=True)


def rng_state() -> dict:
    """torch, numpy and python RNG states as plain tensors and lists."""
    kind, keys, position, has_gauss, cached_gauss = np.random.get_state()
    version, python_state, gauss = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "position": int(position),
                  "has_gauss": int(has_gauss), "cached_gauss": float(cached_gauss)},
        "python": {"version": version, "state": list(python_state), "gauss": gauss},
    }


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["position"], n["has_gauss"],
                         n["cached_gauss"]))
    p = state["python"]
    random.setstate((p["version"], tuple(p["state"]), p["gauss"]))
