"""Policy building blocks."""
from rlcollect.modules.actor_critic import ActorCritic, mlp

__all__ = ["ActorCritic", "mlp"]
