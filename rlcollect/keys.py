"""The TensorDict keys every part of rlcollect agrees on (docs/data-layout.md).

A leaf module: it imports nothing, so envs, buffers, collectors and logging can all
share these names without depending on each other.
"""

# What one step of an env holds besides the policy's output (the carrier and the step's result).
OBSERVATION = "observation"
ACTION = "action"
IS_INIT = "is_init"
NEXT = "next"
CARRIER_KEYS = (OBSERVATION, IS_INIT)  # what persists from one step (and batch) to the next
NEXT_KEYS = (OBSERVATION, "reward", "terminated", "truncated", "done")  # under "next"
DONE = (NEXT, "done")
TERMINATED = (NEXT, "terminated")
TRUNCATED = (NEXT, "truncated")
REWARD = (NEXT, "reward")

# What the collectors add.
TRAJ_IDS = ("collector", "traj_ids")  # int64, unique per trajectory across every worker of a run
POLICY_VERSION = ("collector", "policy_version")  # int64, the weights version that produced the step
WORKER_ID = ("collector", "worker_id")  # int64, the worker (or Ray actor) that collected the step
ENV_ID = ("collector", "env_id")  # int64, the env (0..P-1 over all workers) that took the step (PoolCollector)
MASK = ("collector", "mask")  # bool, real steps of a padded layout
BUFFER_ID = ("collector", "buffer_id")  # int64, the member of a ReplayBufferEnsemble a sample came from

# Dim names: every collector batch names its last batch dim (time) "time", as TorchRL does.
TIME_DIM = "time"

# What replay adds to a sample or a transformed batch.
STEPS_TO_NEXT_OBS = (NEXT, "steps_to_next_obs")  # int64, steps an n-step transition spans (MultiStep)
INDEX = "index"  # int64, the storage positions a PrioritizedSampler sample was drawn from
WEIGHT = "_weight"  # float32, a PrioritizedSampler sample's importance weights
# bool [S, B], the real samples of a stacked sample whose members sample fewer than B (a batched sweep's
# members of other algo.batch_size, their samples padded to the largest): the losses' means count these alone
SAMPLE_MASK = "_sample_mask"
