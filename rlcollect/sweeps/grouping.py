"""Which jobs of a sweep can train together, and as what (docs/sweeps.md): the refusals
(``batch_refusal``), stacked or lockstep (``lockstep_reason``), and the settings the members
of one batched sweep share (``shared_settings``) or may differ in (``member_options``)."""
from __future__ import annotations

import re

from omegaconf import DictConfig, OmegaConf

from rlcollect.algos.dqn import DQNLearner
from rlcollect.algos.ppo import PPOLearner
from rlcollect.algos.sac import SACLearner
from rlcollect.collectors.single import Collector
from rlcollect.envs.backends import vector_seeds_each_env
from rlcollect.errors import ConfigError
from rlcollect.modules.actor_critic import ActorCritic, RecurrentActorCritic
from rlcollect.modules.q_network import QValuePolicy
from rlcollect.modules.sac import SACActor
from rlcollect.pipeline.checks import collector_name
from rlcollect.pipeline.targets import target_class
from rlcollect.sweeps.member_dqn import INTEGER_DQN_OPTIONS, MEMBER_DQN_OPTIONS
from rlcollect.sweeps.member_sac import INTEGER_SAC_OPTIONS, MEMBER_SAC_OPTIONS
from rlcollect.sweeps.members import INTEGER_MEMBER_OPTIONS, MEMBER_OPTIONS

PER_ENV_SEED_BACKENDS = ("list", "sync", "async")  # backends that seed each env on its own (a list of seeds)
# the kinds of stacked model: (learner, policy classes) of the runs that stack, and the algo settings (all, integer)
# the members of one model may differ in
STACKED_CLASSES = {"ppo": (PPOLearner, (ActorCritic, RecurrentActorCritic)), "dqn": (DQNLearner, (QValuePolicy,)),
                   "sac": (SACLearner, (SACActor,))}
STACKED_OPTIONS = {"ppo": (MEMBER_OPTIONS, INTEGER_MEMBER_OPTIONS), "dqn": (MEMBER_DQN_OPTIONS, INTEGER_DQN_OPTIONS),
                   "sac": (MEMBER_SAC_OPTIONS, INTEGER_SAC_OPTIONS)}
# the algo settings the shared collector reads, which the members of a lockstep sweep share (they may differ in
# every other algo.* setting: each member's learner is built from its own config)
LOCKSTEP_SHARED_ALGO_KEYS = ("_target_", "name", "learning_starts", "n_step", "background")


# ---------------------------------------------------------------------------- what can batch
def batch_refusal(cfg: DictConfig) -> str | None:
    """Why runs of ``cfg`` cannot be members of a batched sweep (None: they can)."""
    if target_class(cfg.collector, "collector") is not Collector:
        return f"collector={collector_name(cfg)}: a batched sweep collects with collector=sync"
    if cfg.collector.get("reset_policy", "immediate") != "immediate":
        return "collector.reset_policy=wait: a batched sweep steps every env at every step (reset_policy=immediate)"
    if cfg.eval.get("max_trajectories") is not None:
        return "eval.max_trajectories: a batched sweep evaluates one episode per eval env (eval.max_trajectories=null)"
    if cfg.eval.get("video"):
        return "eval.video: a batched sweep records no evaluation video"
    if cfg.algo.get("background"):
        return "algo.background=true: a batched sweep collects between its members' updates (algo.background=false)"
    if cfg.env.backend != "torch" and not seeds_each_env(cfg):
        return (f"env.backend={cfg.env.backend}: a batched sweep seeds each env itself (env.backend=list, sync or "
                "async; vector for CartPole-v1)")
    return None


def stacks(cfg: DictConfig) -> bool:
    """Whether runs of ``cfg`` stack into one model, else train in lockstep (``lockstep_reason``)."""
    return stacked_kind(cfg) is not None


def stacked_kind(cfg: DictConfig) -> str | None:
    """The kind of stacked model runs of ``cfg`` make (a key of STACKED_OPTIONS: PPO with the
    ActorCritic or the RecurrentActorCritic, DQN with the QValuePolicy, SAC with the SACActor,
    with any shipped encoder; a layer that does not stack is found by ``build_sweep``,
    ``unstackable_layer``); None: they train in lockstep."""
    if cfg.get("algo") is None or cfg.get("model") is None:  # a Hydra app of another kind (the launcher serves any)
        return None
    algo, model = target_class(cfg.algo, "algo"), target_class(cfg.model, "model")
    return next((kind for kind, (learner, policies) in STACKED_CLASSES.items()
                 if algo is learner and model in policies), None)


def lockstep_reason(cfg: DictConfig) -> str | None:
    """Why the members of ``cfg`` train in lockstep rather than as one stacked model, in a few
    words (``algo=my_learner``); None: they stack (a layer that does not stack is found by
    ``build_sweep``)."""
    if stacked_kind(cfg) is not None:
        return None
    algo = target_class(cfg.algo, "algo")
    learners = dict(STACKED_CLASSES.values())
    if algo not in learners:
        return f"algo={cfg.algo.get('name', '?')}"
    # what is left: a model that the algorithm's stacked kind does not know (a user's own)
    words = r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])"  # where a class name's words meet
    name = re.sub(words, "_", target_class(cfg.model, "model").__name__).lower()
    return f"model={name}"  # MyActorCritic: my_actor_critic, as the option names it


def seeds_each_env(cfg: DictConfig) -> bool:
    """Whether ``cfg``'s gymnasium backend seeds each env on its own (member m's env i:
    seed_m + i), as a list of seeds."""
    return cfg.env.backend in PER_ENV_SEED_BACKENDS or (
        cfg.env.backend == "vector" and vector_seeds_each_env(cfg.env.id))


def shared_settings(cfg: DictConfig) -> dict:
    """``cfg`` as plain containers, without the keys the members of one batched model may
    differ in: ``seed``, and for a stacked model its kind's settings (STACKED_OPTIONS:
    ``algo.lr``, PPO's ``algo.epochs``, ...), for members in lockstep every algo setting
    but LOCKSTEP_SHARED_ALGO_KEYS; ``algo.gamma`` stays with n-step returns (the collector
    writes them): what every member of one model has in common."""
    plain = OmegaConf.to_container(cfg, resolve=True)
    plain.pop("seed", None)
    algo = plain.get("algo", {})
    kind = stacked_kind(cfg)
    kept = LOCKSTEP_SHARED_ALGO_KEYS if kind is None else [key for key in algo if key not in STACKED_OPTIONS[kind][0]]
    if (algo.get("n_step") or 1) > 1:
        kept = (*kept, "gamma")
    for key in [key for key in algo if key not in kept]:
        algo.pop(key)
    if kind == "dqn":  # the Q policy's first epsilon (algo.eps_start's): a buffer each member's row of holds
        plain.get("model", {}).pop("epsilon", None)
    return plain


def member_options(cfgs: list[DictConfig]) -> dict[str, list[float] | list[int]]:
    """The settings of a stacked model's kind (STACKED_OPTIONS) the members differ in, one
    value per member (an int for an integer setting, e.g. PPO's ``epochs``, a float for the
    others)."""
    options, integers = STACKED_OPTIONS[stacked_kind(cfgs[0])]
    values = {key: [(int if key in integers else float)(cfg.algo[key]) for cfg in cfgs]
              for key in options if key in cfgs[0].algo}
    return {key: member_values for key, member_values in values.items() if len(set(member_values)) > 1}


def check_sweep(cfgs: list[DictConfig]) -> None:
    """A ConfigError unless ``cfgs`` can train as the members of one batched sweep."""
    refusal = batch_refusal(cfgs[0])
    if refusal is not None:
        raise ConfigError(refusal)
    first = shared_settings(cfgs[0])
    for cfg in cfgs[1:]:
        if shared_settings(cfg) != first:
            if stacks(cfgs[0]):
                settings = ", ".join(f"algo.{key}" for key in STACKED_OPTIONS[stacked_kind(cfgs[0])][0])
            else:
                settings = "algo.* but " + ", ".join(f"algo.{key}" for key in LOCKSTEP_SHARED_ALGO_KEYS[2:])
            raise ConfigError(f"the members of a batched sweep differ only in seed and {settings} "
                              "(hydra/launcher=batched groups the jobs that do)")
