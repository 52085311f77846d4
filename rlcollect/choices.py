"""The values each option with a fixed set of choices may take, declared once (a leaf
module: it imports nothing).

The classes check their own arguments against these tuples (a library user gets the
class's error); the config schemas (rlcollect/config/schemas.py) declare them as the options'
choices (``config.chosen``), so that ``rlcollect train`` refuses a value outside them in
one line, before torch loads.
"""
from __future__ import annotations

# collectors/options.py: StepOptions, WorkerOptions
EXPLORATION_TYPES = ("random", "deterministic")
RESET_POLICIES = ("immediate", "wait")
START_METHODS = ("spawn", "forkserver", "fork")
# collectors/multi.py: how MultiSyncCollector joins its workers' batches
CAT_RESULTS = ("stack", 0, -1)
# collectors/pool.py: the batches of PoolCollector
POOL_LAYOUTS = ("flat", "per_env")
# collectors/host_plan.py: what each actor of RayCollector / worker of DistributedCollector runs
HOSTED_COLLECTOR_CLASSES = ("sync", "multisync", "multiasync")
# collectors/distributed: how DistributedCollector starts its workers (start_workers_with), and its
# process group's backend
DISTRIBUTED_WORKER_STARTERS = ("mp", "submitit", "ray")
DISTRIBUTED_BACKENDS = ("gloo",)
# weight_sync/strategies.py: how weights are packed for MultiProcess / Ray weight sync
WEIGHT_SYNC_STRATEGIES = ("state_dict", "tensordict")
# algos/dqn.py
DQN_TARGET_UPDATES = ("periodic", "polyak")
DQN_LOSSES = ("huber", "mse")
# modules: the policies' layers (modules/actor_critic.py maps each activation to its torch class)
ACTIVATIONS = ("tanh", "relu", "elu")
ENCODERS = ("auto", "mlp", "cnn", "multi_input")
RNN_TYPES = ("gru", "lstm")
# envs/backends.py: how a GymEnv steps its envs
ENV_BACKENDS = ("list", "sync", "async", "vector", "envpool")
# env.backend of the config: also "torch", the task's torch env (envs/sources.py)
ENV_SOURCE_BACKENDS = (*ENV_BACKENDS, "torch")
# logging/run_logger.py: WandbLogger's W&B mode
WANDB_MODES = ("offline", "online", "disabled")
