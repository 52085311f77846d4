"""Policy building blocks."""
from rlcollect.modules.actor_critic import ActorCritic, mlp
from rlcollect.modules.recurrent import GRUModule, LSTMModule, recurrent_mode, set_recurrent_mode
from rlcollect.primers import HiddenStatePrimer, policy_primers

__all__ = [
    "ActorCritic", "GRUModule", "HiddenStatePrimer", "LSTMModule", "mlp", "policy_primers", "recurrent_mode",
    "set_recurrent_mode",
]
