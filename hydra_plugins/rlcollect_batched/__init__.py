"""rlcollect's batched launcher, where Hydra looks for launchers (batched_launcher.py)."""
