"""RandomStart: seeded episodes start at a random phase drawn from the seed alone."""
import numpy as np
import pytest

from rlcollect import RandomStart
from rlcollect.testing import CountingEnv


def test_the_first_and_seeded_resets_start_after_seeded_random_steps():
    env = RandomStart(CountingEnv(1000), max_steps=50)
    observation, _ = env.reset(seed=7)
    steps = int(np.random.default_rng(7).integers(0, 51))
    assert steps > 0 and observation.tolist() == [float(steps)]  # CountingEnv counts its steps
    assert RandomStart(CountingEnv(1000), 50).reset(seed=7)[0].tolist() == [float(steps)]  # the seed decides
    env.step(0)
    assert env.reset()[0].tolist() == [0.0]  # a later unseeded reset is a plain one


def test_an_episode_that_ends_during_the_random_steps_restarts():
    env = RandomStart(CountingEnv(3), max_steps=50)
    observation, _ = env.reset(seed=7)
    assert observation.tolist() == [float(int(np.random.default_rng(7).integers(0, 51)) % 3)]


def test_max_steps_must_be_non_negative():
    with pytest.raises(ValueError, match="max_decorrelation_steps must be"):
        RandomStart(CountingEnv(3), max_steps=-1)
