"""Run records: metrics.jsonl, Weights & Biases, and reading offline W&B runs back."""
from rlcollect.logging.episodes import EpisodeTracker
from rlcollect.logging.run_logger import RunLogger, WandbLogger

__all__ = ["EpisodeTracker", "RunLogger", "WandbLogger"]
