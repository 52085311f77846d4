"""Models of a user's own (subclasses of the shipped ones), whose members train in lockstep:
a batched sweep stacks only the classes it knows (tests/test_lockstep.py)."""
from rlcollect.modules.actor_critic import RecurrentActorCritic
from rlcollect.modules.q_network import QValuePolicy
from rlcollect.modules.sac import SACActor


class OwnQValuePolicy(QValuePolicy):
    """A Q policy of a user's own, as the shipped one computes."""


class OwnSACActor(SACActor):
    """A SAC actor of a user's own, as the shipped one computes."""


class OwnRecurrentActorCritic(RecurrentActorCritic):
    """A recurrent actor-critic of a user's own, as the shipped one computes."""
