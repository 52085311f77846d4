"""Timing shared by the collector benchmarks (bench_collectors.py, bench_ray.py): one
measurement of a collector, built fresh for it. Importable from both venvs (time only)."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from typing import Callable, Iterable


@dataclass
class Measurement:
    frames_per_s: float | None = None  # throughput rows
    construct_ms: float | None = None  # collector rows: env + collector construction
    startup_ms: float | None = None  # collector rows: construction + first batch
    shutdown_ms: float | None = None  # start-up rows: shutdown() after the first batch


def wait_for_device() -> None:
    """Block until queued CUDA work is done, where torch has started CUDA: a batch on the GPU
    is yielded before its kernels have run."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def time_collector(make_collector: Callable[[int], Iterable], frames: int, frames_per_batch: int) -> Measurement:
    """Build a collector of ``frames_per_batch + frames`` total frames (``make_collector``
    gets that total), time construction to first batch, then the remaining ``frames``."""
    start = time.perf_counter()
    collector = make_collector(frames_per_batch + frames)
    try:
        constructed = time.perf_counter()
        batches = iter(collector)
        next(batches)
        wait_for_device()
        first_batch = time.perf_counter()
        collected = 0
        for batch in batches:
            collected += batch.numel()
        wait_for_device()
        end = time.perf_counter()
    finally:
        collector.shutdown()
    if collected != frames:
        raise RuntimeError(f"expected {frames} frames after the first batch, got {collected}")
    return Measurement(frames / (end - first_batch), 1e3 * (constructed - start), 1e3 * (first_batch - start))


def time_startup(make_collector: Callable[[int], Iterable], frames_per_batch: int) -> Measurement:
    """Build a collector of one batch, time construction, first batch and shutdown."""
    start = time.perf_counter()
    collector = make_collector(frames_per_batch)
    try:
        constructed = time.perf_counter()
        next(iter(collector))
        first_batch = time.perf_counter()
    finally:
        collector.shutdown()
    end = time.perf_counter()
    return Measurement(None, 1e3 * (constructed - start), 1e3 * (first_batch - start), 1e3 * (end - first_batch))
