"""Training algorithms on collected data."""
from rlcollect.algos.gae import generalized_advantage_estimate
from rlcollect.algos.ppo import PPO

__all__ = ["PPO", "generalized_advantage_estimate"]
