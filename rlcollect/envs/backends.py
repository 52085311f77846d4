"""How a GymEnv's sub-envs are stepped (docs/envs.md): a Python list, or a vector env.

Every backend writes into the same staging arrays (envs/staging.py), so what a collector
reads does not depend on the backend:

    backend   sub-envs                                   resets                       same batches as "list"
    list      P gymnasium envs stepped one after the      env.reset() of those envs    (itself)
              other in this process
    sync      gymnasium SyncVectorEnv, autoreset off     reset(reset_mask)            yes (env i seeded seed + i)
    async     gymnasium AsyncVectorEnv, one process per  reset(reset_mask)            yes (env i seeded seed + i)
              sub-env, autoreset off
    vector    the id's vector entry point (one numpy     reset(reset_mask)            CartPole-v1: yes (a
              env stepping all P at once)                                             generator per env); else
                                                                                      no: one RNG for all envs
    envpool   EnvPool (C++ envs, a thread pool;          reset(env_ids)               no: EnvPool's own envs
              the extra rlcollect[envpool])              (env i seeded seed + i)

Only finished sub-envs are reset, at once (the carrier gets the reset observation, the
step keeps the true final one): the vector envs run with gymnasium's autoreset disabled
(``AutoresetMode.DISABLED``) and partial resets. A vector env given as is may also reset in
the same step (``SAME_STEP``: the final observation comes from the step's info). One that
resets on the step after a done (``NEXT_STEP``, gymnasium's default) would make that step a
reset for the finished env and a real step for the others, which is no column of ``[P, T]``
transitions; so ``without_next_step_autoreset`` makes it reset at once instead, exactly:

    gymnasium SyncVectorEnv     a SyncVectorEnv of the same sub-env instances, autoreset off
    gymnasium AsyncVectorEnv    rebuilt from its env_fns with autoreset off (the given one closed)
    CartPoleVectorEnv           its partial-reset twin (``PartialResetCartPole``), same arguments
    anything else               a ConfigError (build it with autoreset DISABLED or SAME_STEP)

Info entries (``info_keys``, docs/envs.md): ``first_info_values`` probes the sub-envs for the
first value of each key (envs/staging.py's ``info_dtype`` turns it into the stored dtype).
"""
from __future__ import annotations

import multiprocessing
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv
from gymnasium.utils import seeding
from gymnasium.vector import AutoresetMode

from rlcollect.child_processes import sigint_blocked
from rlcollect.choices import ENV_BACKENDS as BACKENDS
from rlcollect.envs.spaces import is_nested, subspaces, tree_map, writer
from rlcollect.errors import ConfigError, MissingDependencyError
from rlcollect.seeding import env_seed


class ListBackend:
    """P gymnasium envs in a Python list, stepped one after the other."""

    name = "list"
    pauses = True  # step_rows leaves the other sub-envs unstepped (GymEnv.pause)

    def __init__(self, envs: Sequence[gym.Env]) -> None:
        self.envs = list(envs)
        self.num_envs = len(self.envs)
        self.observation_space = self.envs[0].observation_space
        self.action_space = self.envs[0].action_space
        self.spec = self.envs[0].spec
        self.label = self.spec.id if self.spec is not None else type(self.envs[0].unwrapped).__name__
        self._nested = is_nested(self.observation_space)
        self._write = writer(self.observation_space)  # one env's observation into row i

    def step(self, actions: np.ndarray, arrays: dict) -> bool:
        return self._step(enumerate(self.envs), actions, arrays)

    def _step(self, envs, actions: np.ndarray, arrays: dict) -> bool:
        """Step the ``(index, env)`` pairs of ``envs`` into their rows; whether one finished."""
        next_obs, reward = arrays["next_observation"], arrays["reward"]
        terminated, truncated, done = arrays["terminated"], arrays["truncated"], arrays["done"]
        info_arrays = arrays["info"] or None
        nested, write = self._nested, self._write
        any_done = False
        for i, env in envs:
            if nested:
                observation, reward[i], term, trunc, info = env.step(actions[i])
                write(next_obs, i, observation)
            else:
                next_obs[i], reward[i], term, trunc, info = env.step(actions[i])
            if info_arrays is not None:
                for key, values in info_arrays.items():
                    values[i] = info.get(key, 0)
            terminated[i], truncated[i] = term, trunc
            done[i] = finished = term or trunc
            if finished:
                any_done = True
        return any_done

    def step_rows(self, actions: np.ndarray, arrays: dict, rows: list[int]) -> bool:
        """``step`` for the sub-envs of ``rows`` only; the others are left as they are."""
        return self._step(((i, self.envs[i]) for i in rows), actions, arrays)

    def step_some(self, actions: np.ndarray, arrays: dict, waiting: np.ndarray) -> bool:
        """``step`` for the sub-envs not ``waiting``; a waiting one is not stepped: its
        reward is 0 and its other entries stay those of the step that finished it."""
        arrays["reward"][waiting] = 0
        self._step(((i, self.envs[i]) for i in np.flatnonzero(~waiting).tolist()), actions, arrays)
        return True  # the waiting envs are done

    def reset(self, mask: np.ndarray, seed: int | None, arrays: dict) -> None:
        """Reset the sub-envs where ``mask`` is True into ``arrays["observation"]`` (env i
        seeded ``seed + i``, or ``seed[i]`` for a list, when a seed is given)."""
        observation, write = arrays["observation"], self._write
        for i in np.flatnonzero(mask).tolist():
            if seed is not None:
                self.envs[i].action_space.seed(env_seed(seed, i))
            write(observation, i, self.envs[i].reset(seed=env_seed(seed, i))[0])

    def first_info_values(self, keys: Sequence[str], max_steps: int) -> dict[str, Any]:
        """The first value of each of ``keys`` that sub-env 0 reports: in its reset's info,
        then in those of random steps until every key was seen, its episode ends or
        ``max_steps`` were taken. The env is left mid-episode (the next reset resets it)."""
        env = self.envs[0]
        seen = _first_values({}, env.reset()[1], keys)
        for _ in range(max_steps):
            if len(seen) == len(keys):
                break
            _, _, terminated, truncated, info = env.step(env.action_space.sample())
            _first_values(seen, info, keys)
            if terminated or truncated:
                break
        return seen

    def random_steps(self, steps, arrays: dict) -> None:
        observation, write = arrays["observation"], self._write
        for i, (env, count) in enumerate(zip(self.envs, steps)):
            for _ in range(int(count)):
                sample, _, terminated, truncated, _ = env.step(env.action_space.sample())
                write(observation, i, sample)
                if terminated or truncated:
                    write(observation, i, env.reset()[0])

    def close(self) -> None:
        for env in self.envs:
            env.close()


class VectorBackend:
    """A gymnasium VectorEnv whose autoreset is disabled (or happens in the same step); a
    NEXT_STEP one is replaced first (``without_next_step_autoreset``)."""

    def __init__(self, vector_env: gym.vector.VectorEnv, name: str = "vector") -> None:
        vector_env = without_next_step_autoreset(vector_env)
        mode = autoreset_mode(vector_env)
        self.vector_env = vector_env
        self.name = name
        self.same_step = mode == AutoresetMode.SAME_STEP
        self.num_envs = vector_env.num_envs
        self.observation_space = vector_env.single_observation_space
        self.action_space = vector_env.single_action_space
        self.spec = vector_env.spec
        if self.spec is None and hasattr(vector_env, "get_attr"):  # Sync/AsyncVectorEnv: their sub-envs'
            self.spec = vector_env.get_attr("spec")[0]
        self.label = self.spec.id if self.spec is not None else type(vector_env).__name__
        self._nested = is_nested(self.observation_space)
        self._write = writer(self.observation_space)
        self._names = list(subspaces(self.observation_space)) if self._nested else None
        self._finished = np.zeros(self.num_envs, bool)  # done and not reset yet
        self._unreset = False  # _finished.any()
        self._reset_observation = None  # SAME_STEP: the reset observations of the last step
        self._reset_rows = getattr(vector_env, "reset_rows", None)  # PartialResetCartPole's fast partial reset
        # PartialResetCartPole's step straight into the staging arrays (autoreset disabled, flat observations)
        step_into = getattr(vector_env, "step_into", None)
        self._step_into = step_into if mode == AutoresetMode.DISABLED and not self._nested else None
        # PartialResetCartPole's generator per env and its step of some envs (GymEnv.pause)
        self._seed_each = getattr(vector_env, "seed_each", None)
        self._step_rows_into = getattr(vector_env, "step_rows_into", None) if self._step_into is not None else None
        self.pauses = self._step_rows_into is not None

    def _seed_list(self, seeds: Sequence[int]) -> list[int]:
        """One seed per env for the vector env's reset: gymnasium's Sync and Async vector
        envs take a list; a vector env that seeds all its envs from one seed cannot."""
        if not isinstance(self.vector_env, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv)):
            raise ValueError(f"backend={self.name!r} seeds its envs seed, seed + 1, ... from one seed: one seed per "
                             "env needs backend 'list', 'sync' or 'async' (or 'vector' for CartPole-v1)")
        return [int(seed) for seed in seeds]

    def _as_tree(self, batched):
        """A batched observation as staging arrays are nested (gymnasium batches a Tuple
        space as a tuple; staging names its entries "0", "1", ...)."""
        if not self._nested:
            return batched
        return _named_tree(batched, self.observation_space)

    def _check_reset(self) -> None:
        if self._unreset:
            raise RuntimeError(f"sub-env(s) {np.flatnonzero(self._finished).tolist()} finished and were not reset: "
                               f"backend {self.name!r} cannot step a finished env (reset_when_done=False needs "
                               "backend='list')")

    def step_rows(self, actions: np.ndarray, arrays: dict, rows: list[int]) -> bool:
        """``step`` for the sub-envs of ``rows`` only, the others left as they are
        (``pauses``: PartialResetCartPole, whose info is always empty)."""
        if self._step_rows_into is None:
            raise NotImplementedError(f"backend {self.name!r} steps all its envs at once: leaving some unstepped "
                                      "needs backend='list' (or 'vector' for CartPole-v1)")
        self._check_reset()
        self._step_rows_into(actions, arrays, np.asarray(rows, dtype=np.int64))
        return self._finish_step(arrays["done"])

    def _finish_step(self, done: np.ndarray) -> bool:
        """After a step without a same-step reset: whether some env finished (and which, till reset)."""
        if not done.any():
            return False
        np.copyto(self._finished, done)
        self._unreset = True
        return True

    def step(self, actions: np.ndarray, arrays: dict) -> bool:
        self._check_reset()
        done = arrays["done"]
        if self._step_into is not None and not arrays["info"]:
            self._step_into(actions, arrays)
        else:
            observation, reward, terminated, truncated, info = self.vector_env.step(actions)
            if self._nested:
                tree_map(np.copyto, arrays["next_observation"], self._as_tree(observation))
            else:
                np.copyto(arrays["next_observation"], observation)
            np.copyto(arrays["reward"], reward, casting="unsafe")
            np.copyto(arrays["terminated"], terminated)
            np.copyto(arrays["truncated"], truncated)
            np.logical_or(terminated, truncated, out=done)
            for key, values in arrays["info"].items():
                _copy_info(values, info, key)
        if not done.any():
            return False
        np.copyto(self._finished, done)
        self._unreset = True
        if self.same_step:  # the env reset them already: the step's observation is the reset one
            self._reset_observation = self._as_tree(observation)  # read by reset() within this stage_step
            for i in np.flatnonzero(done):
                self._write(arrays["next_observation"], i, info["final_obs"][i])
        return True

    def reset(self, mask: np.ndarray, seed: int | None, arrays: dict) -> None:
        """Reset the sub-envs where ``mask`` is True into ``arrays["observation"]``."""
        if self._unreset and mask is arrays["done"] and not self.same_step:
            self._unreset = False  # the envs the last step finished, every one of them (the common case)
        elif self._unreset:
            already = mask & self._finished if self.same_step else None
            np.logical_and(self._finished, ~mask, out=self._finished)
            self._unreset = bool(self._finished.any())
            if self.same_step:  # those the env reset in the last step: their observation is known
                _copy_rows(arrays["observation"], self._reset_observation, np.flatnonzero(already))
                mask = mask & ~already
        if seed is not None and self._seed_each is not None:  # env i's generator seeded as the list backend's env i
            rows = np.flatnonzero(mask)
            self._seed_each(rows, [env_seed(seed, i) for i in rows.tolist()])
            arrays["observation"][rows] = self._reset_rows(rows)
            return
        if seed is not None and mask.all():
            observation, _ = self.vector_env.reset(seed=seed if isinstance(seed, int) else self._seed_list(seed))
        elif self._reset_rows is not None:  # only the reset envs' observations come back
            rows = np.flatnonzero(mask)
            if rows.size:
                arrays["observation"][rows] = self._reset_rows(rows)
            return
        elif mask.any():
            observation, _ = self.vector_env.reset(options={"reset_mask": mask})
        else:
            return
        _copy_rows(arrays["observation"], self._as_tree(observation), np.flatnonzero(mask))

    def first_info_values(self, keys: Sequence[str], max_steps: int) -> dict[str, Any]:
        """The first value of each of ``keys`` that a sub-env reports (the first sub-env
        that reports it): in the reset's info, then in those of random steps until every
        key was seen, a sub-env finishes or ``max_steps`` were taken. The next reset resets
        every sub-env."""
        seen = _first_vector_values({}, self.vector_env.reset()[1], keys)
        for _ in range(max_steps):
            if len(seen) == len(keys):
                break
            _, _, terminated, truncated, info = self.vector_env.step(self.vector_env.action_space.sample())
            _first_vector_values(seen, info, keys)
            if np.any(terminated) or np.any(truncated):
                break
        return seen

    def random_steps(self, steps, arrays: dict) -> None:
        raise NotImplementedError(f"random steps per sub-env (max_decorrelation_steps) need backend='list', not "
                                  f"{self.name!r}: a vector env steps all its envs at once")

    def step_some(self, actions: np.ndarray, arrays: dict, waiting: np.ndarray) -> bool:
        raise NotImplementedError(f"reset_policy='wait' leaves finished sub-envs unstepped, which needs "
                                  f"backend='list', not {self.name!r}: a vector env steps all its envs at once")

    def close(self) -> None:
        self.vector_env.close()


class EnvPoolBackend:
    """EnvPool's envs of an EnvPool task id (its own ids: "CartPole-v1", "Pong-v5",
    "HalfCheetah-v4", ...), stepped together in its C++ thread pool (synchronous mode).

    EnvPool resets a finished env on its next step; rlcollect resets it at once instead,
    with ``reset(env_ids)`` (a partial reset), so every step is a transition. Env i is
    seeded ``seed + i``; a new seed rebuilds the pool (EnvPool seeds at construction).
    """

    name = "envpool"
    pauses = False  # steps every env at once (GymEnv.pause leaves none unstepped)

    def __init__(self, env_id: str, num_envs: int, max_episode_steps: int | None = None, **make_kwargs) -> None:
        try:
            import envpool
        except ImportError:
            raise MissingDependencyError("backend='envpool' needs EnvPool: pip install 'rlcollect[envpool]'") from None
        if env_id not in envpool.list_all_envs():
            raise ValueError(f"backend='envpool': EnvPool has no task {env_id!r} (envpool.list_all_envs() lists them)")
        if max_episode_steps is not None:
            make_kwargs["max_episode_steps"] = max_episode_steps
        self._make = lambda seed: envpool.make(env_id, env_type="gymnasium", num_envs=num_envs, seed=seed,
                                               **make_kwargs)
        self.pool = self._make(0)
        self.num_envs = num_envs
        self.observation_space = self.pool.observation_space
        self.action_space = self.pool.action_space
        if is_nested(self.observation_space):
            raise ValueError(f"backend='envpool' handles Box observations; {env_id!r} has {self.observation_space}")
        self.spec, self.label = None, env_id
        self._all = np.arange(num_envs, dtype=np.int32)

    def step(self, actions: np.ndarray, arrays: dict) -> bool:
        observation, reward, terminated, truncated, info = self.pool.step(actions, self._all)
        rows = info["env_id"]  # the order EnvPool answered in
        arrays["next_observation"][rows] = observation
        arrays["reward"][rows] = reward
        arrays["terminated"][rows] = terminated
        arrays["truncated"][rows] = truncated
        done = arrays["done"]
        np.logical_or(arrays["terminated"], arrays["truncated"], out=done)
        for key, values in arrays["info"].items():
            values[rows] = info[key] if key in info else 0
        return bool(done.any())

    def reset(self, mask: np.ndarray, seed: int | None, arrays: dict) -> None:
        if seed is not None and not isinstance(seed, int):
            raise ValueError("backend='envpool' seeds its envs seed, seed + 1, ...: one seed per env needs "
                             "backend 'list', 'sync' or 'async'")
        if seed is not None and mask.all():
            self.pool.close()
            self.pool = self._make(seed)
        observation, info = self.pool.reset(np.flatnonzero(mask).astype(np.int32))
        arrays["observation"][info["env_id"]] = observation

    def first_info_values(self, keys: Sequence[str], max_steps: int) -> dict[str, Any]:
        """The value of each of ``keys`` in the info of a reset of every env (EnvPool reports
        the same entries at every reset and step)."""
        info = self.pool.reset(self._all)[1]
        return {key: np.asarray(info[key])[0] for key in keys if key in info}

    def step_some(self, actions: np.ndarray, arrays: dict, waiting: np.ndarray) -> bool:
        raise NotImplementedError("reset_policy='wait' leaves finished sub-envs unstepped, which needs "
                                  "backend='list', not 'envpool'")

    def random_steps(self, steps, arrays: dict) -> None:
        raise NotImplementedError("random steps per sub-env (max_decorrelation_steps) need backend='list', not "
                                  "'envpool'")

    def close(self) -> None:
        self.pool.close()


def _named_tree(batched, space: gym.Space):
    if not is_nested(space):
        return batched
    children = subspaces(space)
    if isinstance(space, gym.spaces.Tuple):
        return {name: _named_tree(batched[int(name)], child) for name, child in children.items()}
    return {name: _named_tree(batched[name], child) for name, child in children.items()}


def _copy_rows(staged, fresh, rows: np.ndarray) -> None:
    """Rows ``rows`` of the (nested) batched observation ``fresh`` into ``staged``."""
    if isinstance(staged, dict):
        for name in staged:
            _copy_rows(staged[name], fresh[name], rows)
    else:
        staged[rows] = fresh[rows]


def _copy_info(values: np.ndarray, info: dict, key: str) -> None:
    """A vector env's info entry (with its ``_key`` presence mask) into ``values``; 0 where
    an env did not report it."""
    entry = info.get(key)
    if entry is None:
        values[:] = 0
        return
    present = info.get(f"_{key}")
    np.copyto(values, np.where(present, entry, 0) if present is not None else entry, casting="unsafe")


def _first_values(seen: dict, info: dict, keys: Sequence[str]) -> dict:
    """``seen`` with the entries of one env's ``info`` for the ``keys`` it lacks."""
    for key in keys:
        if key not in seen and key in info:
            seen[key] = info[key]
    return seen


def _first_vector_values(seen: dict, info: dict, keys: Sequence[str]) -> dict:
    """``_first_values`` for a vector env's info: the entry of the first sub-env that
    reported it (its ``_key`` mask)."""
    for key in keys:
        if key in seen or key not in info:
            continue
        present = info.get(f"_{key}")
        rows = np.flatnonzero(present) if present is not None else [0]
        if len(rows):
            seen[key] = info[key][rows[0]]
    return seen


def autoreset_mode(vector_env: gym.vector.VectorEnv) -> AutoresetMode:
    """The autoreset mode a vector env declares (``NEXT_STEP``, gymnasium's default, if none)."""
    mode = getattr(vector_env, "autoreset_mode", None) or vector_env.metadata.get("autoreset_mode")
    return AutoresetMode(mode) if mode is not None else AutoresetMode.NEXT_STEP


def without_next_step_autoreset(vector_env: gym.vector.VectorEnv) -> gym.vector.VectorEnv:
    """``vector_env`` itself unless it autoresets on the next step (``NEXT_STEP``); then the
    same envs with autoreset disabled (module docstring), or a ConfigError where rlcollect
    cannot build them."""
    if autoreset_mode(vector_env) != AutoresetMode.NEXT_STEP:
        return vector_env
    kind = type(vector_env)
    if kind is gym.vector.SyncVectorEnv:  # the same sub-env instances; the given vector env is left as it is
        rebuilt = gym.vector.SyncVectorEnv([lambda env=env: env for env in vector_env.envs], copy=vector_env.copy,
                                           observation_mode=vector_env.observation_mode,
                                           autoreset_mode=AutoresetMode.DISABLED)
    elif kind is gym.vector.AsyncVectorEnv and vector_env.worker is None:
        vector_env.close()
        with sigint_blocked(multiprocessing.get_context(vector_env.context)):
            rebuilt = gym.vector.AsyncVectorEnv(
                vector_env.env_fns, shared_memory=vector_env.shared_memory, copy=vector_env.copy,
                context=vector_env.context, daemon=vector_env.daemon, observation_mode=vector_env.observation_mode,
                autoreset_mode=AutoresetMode.DISABLED, max_concurrency=vector_env.max_concurrency)
    elif kind in PARTIAL_RESET_VECTOR_ENVS:
        rebuilt = PARTIAL_RESET_VECTOR_ENVS[kind].like(vector_env)
        vector_env.close()
    else:
        raise ConfigError(
            f"env: {kind.__name__} autoresets on the step after a done (NEXT_STEP: that step is no transition) "
            "and rlcollect cannot rebuild it to reset at once: build it with autoreset_mode=DISABLED or SAME_STEP, "
            "or give GymEnv its env id or env factories with backend='sync' or 'async'")
    rebuilt.spec = vector_env.spec
    return rebuilt


class PartialResetCartPole(CartPoleVectorEnv):
    """gymnasium's numpy-vectorised CartPole with autoreset disabled and partial resets
    (``reset(options={"reset_mask": mask})``): the same dynamics, step for step.

    Seeded through ``seed_each``, env i resets from a generator of its own, drawing what
    gymnasium's CartPoleEnv seeded alike draws: with the same (float64) arithmetic, the
    envs then move exactly as the list backend's CartPole-v1 envs (a batched sweep seeds
    every env on its own). ``step_rows_into`` steps some envs and leaves the others as
    they are (GymEnv.pause)."""

    metadata = {**CartPoleVectorEnv.metadata, "autoreset_mode": AutoresetMode.DISABLED}
    RESETS_AHEAD = 32  # reset states each env's generator draws at once (seed_each)
    _generators: list | None = None  # one numpy generator per env (seed_each), or None: np_random for all

    @classmethod
    def like(cls, vector_env: CartPoleVectorEnv) -> "PartialResetCartPole":
        """A PartialResetCartPole with ``vector_env``'s constructor arguments."""
        return cls(num_envs=vector_env.num_envs, max_episode_steps=vector_env.max_episode_steps,
                   render_mode=vector_env.render_mode, sutton_barto_reward=vector_env._sutton_barto_reward)

    def step(self, action):
        """The parent's step without its reset of the envs done at the last step (here
        they were reset at once, by ``reset_rows``): the same arithmetic, in the same
        order, so every env moves exactly as in gymnasium's CartPoleVectorEnv."""
        out = _step_arrays(self.num_envs)
        self.step_into(action, out)
        return out["next_observation"], out["reward"], out["terminated"], out["truncated"], {}

    def step_into(self, action, arrays: dict) -> None:
        """``step``, written into staging arrays (``next_observation``, ``reward``,
        ``terminated``, ``truncated``, ``done``) instead of new ones: VectorBackend's path
        for a vector env that has it."""
        assert self.action_space.contains(action), f"{action!r} ({type(action)}) invalid"
        assert self.state is not None, "Call reset before using step method."
        self.state = self._advance(self.state, action)
        self.steps += 1
        self._write_step(self.state, self.steps, arrays)

    def step_rows_into(self, action, arrays: dict, rows: np.ndarray) -> None:
        """``step_into`` for the envs ``rows`` alone: the others' state, step counts and
        rows of ``arrays`` are left as they are."""
        assert self.state is not None, "Call reset before using step method."
        state = self._advance(self.state[:, rows], np.asarray(action)[rows])
        self.state[:, rows] = state
        self.steps[rows] += 1
        out = _step_arrays(rows.size)
        self._write_step(state, self.steps[rows], out)
        for key, values in out.items():
            arrays[key][rows] = values

    def _write_step(self, state: np.ndarray, steps: np.ndarray, arrays: dict) -> None:
        """The step's entries of the envs now at ``state`` ``[4, n]`` after ``steps``
        steps, into ``arrays`` (step_into's arrays, n rows): the observation (float32, as
        the parent's astype), the episode ends and the reward."""
        x, theta = state[0], state[2]
        np.copyto(arrays["next_observation"], state.T, casting="same_kind")
        terminated, truncated, reward = arrays["terminated"], arrays["truncated"], arrays["reward"]
        np.less(x, -self.x_threshold, out=terminated)
        terminated |= x > self.x_threshold
        terminated |= theta < -self.theta_threshold_radians
        terminated |= theta > self.theta_threshold_radians
        np.greater_equal(steps, self.max_episode_steps, out=truncated)
        np.logical_or(terminated, truncated, out=arrays["done"])
        if self._sutton_barto_reward:  # -1 where terminated
            np.copyto(reward, terminated)
            np.negative(reward, out=reward)
        else:
            reward.fill(1.0)

    def _advance(self, state: np.ndarray, action: np.ndarray) -> np.ndarray:
        """The envs' next state ``[4, n]`` from ``state`` ``[4, n]`` and ``action`` ``[n]``:
        the parent's arithmetic, in the same order."""
        x, x_dot, theta, theta_dot = state
        force = np.sign(action - 0.5) * self.force_mag
        cos, sin = np.cos(theta), np.sin(theta)
        temp = (force + self.polemass_length * np.square(theta_dot) * sin) / self.total_mass
        theta_acc = (self.gravity * sin - cos * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * np.square(cos) / self.total_mass))
        x_acc = temp - self.polemass_length * theta_acc * cos / self.total_mass
        if self.kinematics_integrator == "euler":
            x, x_dot = x + self.tau * x_dot, x_dot + self.tau * x_acc
            theta, theta_dot = theta + self.tau * theta_dot, theta_dot + self.tau * theta_acc
        else:  # semi-implicit Euler: the velocities first
            x_dot = x_dot + self.tau * x_acc
            x = x + self.tau * x_dot
            theta_dot = theta_dot + self.tau * theta_acc
            theta = theta + self.tau * theta_dot
        return np.stack((x, x_dot, theta, theta_dot))

    def reset(self, *, seed=None, options=None):
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if seed is not None:
            self._generators = None  # one seed: gymnasium's one generator for all envs
        if mask is None or self.state is None:
            return super().reset(seed=seed, options=options)
        if seed is not None:
            super(CartPoleVectorEnv, self).reset(seed=seed)  # VectorEnv.reset: seeds np_random
        self.reset_rows(np.flatnonzero(mask))
        return self.state.T.astype(np.float32), {}

    def seed_each(self, rows: np.ndarray, seeds: Sequence[int]) -> None:
        """Seed the envs ``rows`` one by one, env ``rows[k]`` with ``seeds[k]``, as
        gymnasium seeds a CartPoleEnv (``reset(seed=...)``): from now on each env of the
        vector resets from its own generator (one not seeded here, from a generator seeded
        by np_random), at its next reset."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._generators is None:
            self._generators = [None] * self.num_envs
            self._ahead = np.empty((self.num_envs, self.RESETS_AHEAD, 4))  # each env's next reset states
            self._ahead_used = np.full(self.num_envs, self.RESETS_AHEAD)  # of which used (all: draw again)
        for row, seed in zip(rows.tolist(), seeds):
            self._generators[row] = seeding.np_random(int(seed))[0]
        self._ahead_used[rows] = self.RESETS_AHEAD  # states drawn before the seed are dropped
        for row, generator in enumerate(self._generators):
            if generator is None:
                self._generators[row] = seeding.np_random(int(self.np_random.integers(2 ** 32)))[0]

    def reset_rows(self, rows: np.ndarray) -> np.ndarray:
        """Reset the envs ``rows`` (indices, in order) and return their observations only,
        ``[len(rows), 4]`` float32: what ``reset(reset_mask)`` draws, without the others'
        (with ``seed_each``: each env's state from its own generator, as CartPoleEnv.reset
        draws it). Before any reset, every env is reset (the first reset of an unseeded GymEnv)."""
        if self.state is None:
            observation = super().reset()[0]
            if self._generators is None:
                return observation[rows]
        if self._generators is None:
            fresh = self.np_random.uniform(low=self.low, high=self.high, size=(4, rows.size))
        else:
            fresh = self._fresh_states(rows)
        self.state[:, rows] = fresh
        self.steps[rows] = 0
        return fresh.T.astype(np.float32)

    def _fresh_states(self, rows: np.ndarray) -> np.ndarray:
        """The next reset state of each env of ``rows``, ``[4, len(rows)]``, from its own
        generator: drawn RESETS_AHEAD at a time, the same numbers in the same order as one
        ``uniform(size=(4,))`` per reset (numpy fills an array from its generator in order)."""
        used = self._ahead_used
        for row in rows[used[rows] == self.RESETS_AHEAD].tolist():
            self._ahead[row] = self._generators[row].uniform(low=self.low, high=self.high,
                                                             size=(self.RESETS_AHEAD, 4))
            used[row] = 0
        fresh = self._ahead[rows, used[rows]].T
        used[rows] += 1
        return fresh


def _step_arrays(num_envs: int) -> dict:
    """New arrays for the entries ``step_into`` writes, of ``num_envs`` rows."""
    return {"next_observation": np.empty((num_envs, 4), np.float32), "reward": np.empty(num_envs, np.float32),
            "terminated": np.empty(num_envs, bool), "truncated": np.empty(num_envs, bool),
            "done": np.empty(num_envs, bool)}


# vector entry points that autoreset on the next step, and their partial-reset twins
PARTIAL_RESET_VECTOR_ENVS = {CartPoleVectorEnv: PartialResetCartPole}


def make_backend(env, backend: str, makers: Sequence[Callable[[], gym.Env]],
                 vector_kwargs: dict) -> ListBackend | VectorBackend:
    """The backend ``backend`` names over the sub-envs ``makers`` build (one zero-argument
    factory per sub-env, wrappers applied); with "vector" (``env``'s vector entry point)
    and "envpool" (EnvPool's task ``env``), as many envs built with ``vector_kwargs`` (the
    time limit and the make kwargs)."""
    if backend == "list":
        return ListBackend([make() for make in makers])
    if backend == "sync":
        return VectorBackend(gym.vector.SyncVectorEnv(list(makers), copy=False,
                                                      autoreset_mode=AutoresetMode.DISABLED), "sync")
    if backend == "async":  # its processes leave a Ctrl-C to this one, which stops after its batch
        with sigint_blocked(multiprocessing.get_context()):
            return VectorBackend(gym.vector.AsyncVectorEnv(list(makers), copy=False,
                                                           autoreset_mode=AutoresetMode.DISABLED), "async")
    if backend == "vector":
        return VectorBackend(_vector_entry_point(env, len(makers), vector_kwargs), "vector")
    if backend == "envpool":
        if not isinstance(env, str):
            raise ValueError("backend='envpool' needs an EnvPool task id, not a callable")
        return EnvPoolBackend(env, len(makers), **vector_kwargs)
    raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")


def vector_seeds_each_env(env_id) -> bool:
    """Whether backend "vector" seeds each env of ``env_id`` on its own, as backend "list"
    does (a generator per env: CartPole-v1's PartialResetCartPole)."""
    if not isinstance(env_id, str):
        return False
    try:
        twin = _partial_reset_twin(gym.spec(env_id))
    except (gym.error.Error, ImportError):  # no such id, or its vector env needs a package not installed
        return False
    return hasattr(twin, "seed_each")


def check_vector_entry_point(env_id: str):
    """The gymnasium spec of ``env_id``, which must have a vector entry point (backend "vector")."""
    spec = gym.spec(env_id)
    if spec.vector_entry_point is None:
        raise ConfigError(f"{env_id!r} has no vector entry point: use the sync or async backend")
    return spec


def _vector_entry_point(env_id, num_envs: int, vector_kwargs: dict) -> gym.vector.VectorEnv:
    if not isinstance(env_id, str):
        raise ValueError("backend='vector' needs a gymnasium id with a vector entry point, not a callable")
    spec = check_vector_entry_point(env_id)
    twin = _partial_reset_twin(spec)
    kwargs = {**spec.kwargs, **{key: value for key, value in vector_kwargs.items() if value is not None}}
    kwargs.setdefault("max_episode_steps", spec.max_episode_steps)
    if twin is None:
        return gym.make_vec(env_id, num_envs, vectorization_mode="vector_entry_point", vector_kwargs=kwargs)
    vector_env = twin(num_envs=num_envs, **kwargs)
    vector_env.spec = spec
    return vector_env


def _partial_reset_twin(spec):
    """rlcollect's partial-reset twin of ``spec``'s vector entry point (None: it has none)."""
    entry = spec.vector_entry_point
    cls = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    return PARTIAL_RESET_VECTOR_ENVS.get(cls)
