"""Batched sweeps: the seeds of a sweep trained as one stacked model in one process, each
member still a normal run with its own folder (docs/sweeps.md)."""
