"""rlcollect's tuning sweeper, where Hydra looks for sweepers (tuning_sweeper.py)."""
