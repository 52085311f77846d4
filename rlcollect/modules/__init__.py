"""Policy building blocks."""
from rlcollect.modules.actor_critic import ActorCritic, mlp
from rlcollect.modules.recurrent import (
    GRUModule,
    HiddenStatePrimer,
    LSTMModule,
    policy_primers,
    recurrent_mode,
    set_recurrent_mode,
)

__all__ = [
    "ActorCritic", "GRUModule", "HiddenStatePrimer", "LSTMModule", "mlp", "policy_primers", "recurrent_mode",
    "set_recurrent_mode",
]
