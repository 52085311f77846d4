"""Gymnasium envs as TensorDicts, the torch CartPole, and the partially observed tasks rlcollect registers."""
from rlcollect.envs.gym_env import GymEnv, make_gym_env
from rlcollect.envs.masked import MASKED_CARTPOLE_ID, MaskVelocityWrapper, register_masked_envs
from rlcollect.envs.torch_cartpole import TorchCartPole

register_masked_envs()

__all__ = ["GymEnv", "MASKED_CARTPOLE_ID", "MaskVelocityWrapper", "TorchCartPole", "make_gym_env"]
