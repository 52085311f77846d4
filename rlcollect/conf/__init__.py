"""Hydra config tree of `rlcollect train` (a package so a wheel install finds it)."""
