"""Every algorithm x every kind of space trains, or is refused up front in one line naming
why: the combinations nobody listed (issue: PPO on a Dict observation crashed).

Each case is a tiny run in this process (pipeline.build + pipeline.run, two batches) on
SpacesEnv (rlcollect/testing.py), whose observation and action spaces are those of real envs;
the torch env and the vector backend run on CartPole."""
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from hydra import compose, initialize_config_module

from rlcollect import pipeline
from rlcollect.config import register_configs
from rlcollect.errors import ConfigError
from rlcollect.testing import SPACES_ACTIONS, SPACES_OBSERVATIONS, CountingEnv

CONF = Path(__file__).parents[1] / "rlcollect" / "conf"


def conf_options(group: str) -> list[str]:
    """The YAML options of ``conf/<group>/``: what the matrices below run."""
    return sorted(path.stem for path in (CONF / group).glob("*.yaml"))


TINY = ["total_frames=32", "collector.frames_per_batch=16", "env.num_envs=2", "eval.every_frames=32",
        "eval.episodes=1", "eval.max_steps=8", "logger=none", "progress=false", "env.solved_return=null",
        "checkpoint_every_frames=null"]
# each learner's settings for a tiny run, by the options of conf/algo/ (every option must have an
# entry: a new algorithm's YAML fails test_every_algo_option_is_in_the_matrix until it is given one);
# recurrent PPO is PPO with model=recurrent_actor_critic
TINY_ALGOS = {
    "ppo": ["algo.epochs=1", "algo.minibatch_size=8", "model.hidden_sizes=[8]"],
    "dqn": ["algo=dqn", "algo.learning_starts=0", "algo.gradient_steps_per_batch=1", "algo.batch_size=8",
            "model.hidden_sizes=[8]", "buffer.storage.max_size=64"],
    "sac": ["algo=sac", "algo.learning_starts=0", "algo.gradient_steps_per_batch=1", "algo.batch_size=8",
            "model.hidden_sizes=[8]", "algo.critic_hidden_sizes=[8]", "buffer.storage.max_size=64"],
}
ALGOS = {**TINY_ALGOS,
         "recurrent_ppo": ["model=recurrent_actor_critic", "model.hidden_size=8", "model.hidden_sizes=[8]",
                           "algo.epochs=1", "algo.minibatch_size=8", "algo.sequence_length=4"]}
# the action spaces each algorithm trains on; every other one is refused up front
TRAINS_ON = {"ppo": {"discrete", "box"}, "recurrent_ppo": {"discrete", "box"}, "dqn": {"discrete"}, "sac": {"box"}}
REASONS = {"ppo": "PPO's ActorCritic needs a Discrete or flat Box action space",
           "recurrent_ppo": "PPO's ActorCritic needs a Discrete or flat Box action space",
           "dqn": "DQN needs a Discrete action space",
           "sac": "SAC needs continuous actions (a flat Box action space)"}


def test_every_algo_option_is_in_the_matrix():
    assert conf_options("algo") == sorted(TINY_ALGOS), "give a new conf/algo option its tiny settings in TINY_ALGOS"


def run(tmp_path, overrides) -> dict:
    register_configs()
    with initialize_config_module("rlcollect.conf", version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    return pipeline.run(pipeline.build(cfg, tmp_path))


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("action", SPACES_ACTIONS)
@pytest.mark.parametrize("observation", SPACES_OBSERVATIONS)
def test_every_algorithm_trains_on_every_space_or_says_why(tmp_path, algo, observation, action):
    overrides = [*ALGOS[algo], *TINY, "env.imports=[rlcollect.testing]",
                 f"env.id=rlcollect-test/Spaces-{observation}-{action}-v0"]
    if action in TRAINS_ON[algo]:
        summary = run(tmp_path, overrides)
        assert (summary["status"], summary["frames"]) == ("finished", 32)
        assert summary["final_eval_return"] is not None
        return
    with pytest.raises(ConfigError) as refused:
        run(tmp_path, overrides)
    assert str(refused.value).startswith(REASONS[algo]) and "\n" not in str(refused.value)
    assert not list(tmp_path.iterdir())  # refused before a file was written


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("env", [["env=cartpole_torch"], ["env.backend=vector"]], ids=["torch_env", "vector"])
def test_the_torch_env_and_the_vector_backend_train_every_algorithm_they_can(tmp_path, algo, env):
    overrides = [*ALGOS[algo], *TINY, *env]
    if algo == "sac":  # CartPole's actions are discrete
        with pytest.raises(ConfigError, match=r"^SAC needs continuous actions \(a flat Box action space\), got "
                                              r"Discrete\(2\)$"):
            run(tmp_path, overrides)
        return
    summary = run(tmp_path, overrides)
    assert (summary["status"], summary["frames"]) == ("finished", 32)


WORKERS = ["collector.start_method=fork", "collector.num_workers=2", "collector.envs_per_worker=1"]
# every option of conf/collector/ (a new collector's YAML joins the matrix as it is added), two
# worker processes where it has them; collector=ray runs the same matrix by hand (each case starts
# a Ray instance: minutes on 2 cores); tests/collectors/test_ray.py trains PPO from the CLI and DQN
# from its Ray-held buffer
BY_HAND = {"ray"}
COLLECTORS = {name: [f"collector={name}"] + (WORKERS if name != "sync" else [])
              for name in conf_options("collector") if name not in BY_HAND}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("collector", COLLECTORS)
def test_every_collector_trains_every_algorithm(tmp_path, collector, algo):
    """CartPole (Pendulum for SAC), two batches, two worker processes where the collector has them."""
    overrides = [*ALGOS[algo], *TINY, *COLLECTORS[collector], *(["env=pendulum"] if algo == "sac" else [])]
    summary = run(tmp_path, overrides)
    assert summary["status"] == "finished" and summary["final_eval_return"] is not None
    if collector == "multiasync" and algo in ("dqn", "sac"):  # its workers write into the buffer, ahead
        assert 32 <= summary["frames"] <= 64
    else:
        assert summary["frames"] == 32


@pytest.mark.timeout(120)
@pytest.mark.parametrize("observation", ["dict", "image_hwc"])
@pytest.mark.parametrize("collector", [name for name in COLLECTORS if name != "sync"])
def test_worker_collectors_carry_every_kind_of_observation(tmp_path, collector, observation):
    """The observation kinds that broke before (a Dict; an image in gymnasium's [H, W, C]) through
    the shared-memory step buffers, pipes and process groups of the worker collectors, with PPO
    (every other kind passes the same way: checked by hand, 77 cases)."""
    overrides = [*ALGOS["ppo"], *TINY, *COLLECTORS[collector], "env.imports=[rlcollect.testing]",
                 f"env.id=rlcollect-test/Spaces-{observation}-box-v0"]
    summary = run(tmp_path, overrides)
    assert (summary["status"], summary["frames"]) == ("finished", 32)


class TupleActions(CountingEnv):
    """Actions rlcollect does not handle: a Tuple of a discrete move and a continuous force."""

    def __init__(self):
        super().__init__(episode_length=4)
        self.action_space = gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.Box(-1.0, 1.0, (1,), np.float32)))


gym.register("rlcollect-test/TupleActions-v0", entry_point=TupleActions)


@pytest.mark.parametrize("algo", ALGOS)
def test_an_action_space_rlcollect_does_not_handle_is_refused_as_the_users_config(tmp_path, algo):
    """Whatever the algorithm, the env's spaces are probed before any part is built: a Tuple of
    actions is a ConfigError in one line (still a TypeError for code that catches one)."""
    with pytest.raises(ConfigError) as refused:
        run(tmp_path, [*ALGOS[algo], *TINY, "env.id=rlcollect-test/TupleActions-v0"])
    message = str(refused.value)
    assert message.startswith("action space Tuple(Discrete(2), Box(") and "is not supported" in message
    assert isinstance(refused.value, TypeError) and "\n" not in message
    assert not list(tmp_path.iterdir())
