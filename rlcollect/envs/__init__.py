"""Gymnasium envs as TensorDicts, torch envs (TorchCartPole, VMAS's scenarios), and the
partially observed tasks rlcollect registers."""
from rlcollect.envs.gym_env import GymEnv, make_gym_env
from rlcollect.envs.masked import MASKED_CARTPOLE_ID, MaskVelocityWrapper, register_masked_envs
from rlcollect.envs.random_start import RandomStart
from rlcollect.envs.torch_cartpole import TorchCartPole
from rlcollect.envs.torch_env import TorchEnv
from rlcollect.envs.vmas import VmasEnv

register_masked_envs()

__all__ = ["GymEnv", "MASKED_CARTPOLE_ID", "MaskVelocityWrapper", "RandomStart", "TorchCartPole", "TorchEnv",
           "VmasEnv", "make_gym_env"]
