"""GymEnv: one gymnasium env, or P of them stepped in lock-step, as TensorDicts.

Each step writes into staging arrays allocated once (envs/staging.py): numpy arrays that
gymnasium's outputs are assigned into and torch tensors that alias them (torch.from_numpy),
so a step allocates no tensor. ``step_and_maybe_reset`` returns fresh TensorDicts for
users; the Collector reads the staging tensors directly (``staged``) and copies them into
its preallocated batch.

    carrier ──action──▶ stage_step ──▶ staged["next", ...]     what the step produced
                                  staged["observation"]   what the next step consumes:
                                                          the reset observation where an
                                                          env finished, else next obs
"""
from __future__ import annotations

import difflib
import functools
import importlib
import re
from typing import Any, Callable, Mapping, Sequence, Union

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlcollect.envs.backends import BACKENDS, VectorBackend, make_backend
from rlcollect.envs.spaces import check_supported, is_nested, random_actions, sample_shape, tree_map
from rlcollect.envs.staging import INFO_DTYPES, Staging, allocate_arrays, info_dtype
from rlcollect.errors import ConfigError, MissingDependencyError
from rlcollect.seeding import Seeds, env_seed
from rlcollect.validation import check_positive_int

EnvSource = Union[str, Callable[[], gym.Env]]
INFO_PROBE_STEPS = 1000  # the most random steps GymEnv takes to see a first value of each info key


def import_plugins(modules: Sequence[str]) -> None:
    """Import modules that register envs with gymnasium (a user's package, ``ale_py``, ...)."""
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            raise MissingDependencyError(f"env imports: cannot import {name!r} ({error})") from error
        if name == "ale_py":  # gymnasium 1.x: ALE ids are registered on request
            gym.register_envs(module)


def resolve_env_id(env_id: str) -> str:
    """The registered id ``env_id`` names: gymnasium's ``module:EnvId`` imports the module
    first; an ``ALE/`` id imports ale_py (gymnasium 1.x registers ALE envs on request).
    An unknown id is a ConfigError naming it, with close matches."""
    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
        import_plugins([module])
    if env_id not in gym.registry and env_id.startswith("ALE/"):
        try:
            import_plugins(["ale_py"])
        except ImportError:
            raise MissingDependencyError(f"{env_id!r} is an Atari env: install ale-py (pip install "
                                         "'rlcollect[envs]')") from None
    if env_id not in gym.registry:
        close = difflib.get_close_matches(env_id, list(gym.registry), n=3, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise ConfigError(f"Unknown gymnasium env id {env_id!r}.{hint}")
    return env_id


def make_gym_env(env: EnvSource, max_episode_steps: int | None = None, *, wrappers: Sequence[Callable] = (),
                 **make_kwargs) -> gym.Env:
    """gym.make for a gymnasium id (``resolve_env_id``), or call a zero-argument factory;
    then apply ``wrappers`` in order (each a callable env -> env; the first wraps the raw env)."""
    if isinstance(env, str):
        env_id = resolve_env_id(env)
        try:
            instance = gym.make(env_id, max_episode_steps=max_episode_steps, **make_kwargs)
        except gym.error.DependencyNotInstalled as error:  # e.g. Box2D, mujoco: one line naming what to install
            raise MissingDependencyError(f"{env_id}: {' '.join(str(error).split())}") from None
        except TypeError as error:  # a make kwarg the env does not take: the caller's, said so
            unknown = re.search(r"unexpected keyword argument '(\w+)'", str(error))
            if unknown is None or unknown.group(1) not in make_kwargs:
                raise
            raise ConfigError(f"make kwarg {unknown.group(1)}={make_kwargs[unknown.group(1)]!r}: {env_id} takes no "
                              f"such argument ({' '.join(str(error).split())})") from None
    else:
        if not callable(env):
            raise TypeError(f"env must be a gymnasium id or a zero-argument callable, got {env!r}")
        if make_kwargs:
            raise TypeError(f"make kwargs {sorted(make_kwargs)} only apply to a gymnasium id, not a callable")
        instance = env()
        if not isinstance(instance, gym.Env):
            raise TypeError(f"env factory {env!r} returned {type(instance).__name__}, not a gymnasium.Env")
        if max_episode_steps is not None:
            instance = gym.wrappers.TimeLimit(instance, max_episode_steps=max_episode_steps)
    for wrapper in wrappers:
        try:
            instance = wrapper(instance)
        except gym.error.DependencyNotInstalled as error:  # e.g. AtariPreprocessing's opencv
            raise MissingDependencyError(f"{wrapper!r}: {' '.join(str(error).split())}") from None
        if not isinstance(instance, gym.Env):
            raise TypeError(f"env wrapper {wrapper!r} returned {type(instance).__name__}, not a gymnasium.Env")
    return instance


def _declared_info_dtype(key: str, dtype: Any) -> np.dtype:
    """A dtype given for an info key (a name, a numpy or torch dtype, bool / int / float),
    which must be one of INFO_DTYPES."""
    try:
        numpy_dtype = torch.empty((), dtype=dtype).numpy().dtype if isinstance(dtype, torch.dtype) else np.dtype(dtype)
    except TypeError:
        numpy_dtype = None
    if numpy_dtype not in INFO_DTYPES:
        allowed = ", ".join(str(allowed) for allowed in INFO_DTYPES)
        raise ConfigError(f"info_keys: the dtype of {key!r} must be one of {allowed}; got {dtype!r}")
    return numpy_dtype


def _the_env(env: gym.Env) -> gym.Env:
    """A factory returning ``env`` itself (GymEnv.as_batch)."""
    return env


class NonFiniteActionError(ValueError):
    """A policy wrote a NaN or infinite action (a diverged policy); the env never sees it."""


class GymEnv:
    """A gymnasium env (``num_envs=None``, batch_size ``[]``) or ``num_envs`` copies
    stepped together (batch_size ``[num_envs]``), speaking rlcollect's TensorDict keys.

    Args:
        env: a registered gymnasium id, a zero-argument callable returning a gymnasium.Env
            (called once per sub-env), a list of such callables (one per sub-env), or a
            gymnasium VectorEnv (used as it is: its autoreset must be DISABLED or
            SAME_STEP, envs/backends.py).
        num_envs: None for a single env, P for a batched env.
        seed: sub-env i is seeded with ``seed + i`` at its first reset, or with ``seed[i]``
            when ``seed`` lists one seed per sub-env (backends list, sync and async).
        device: where the returned tensors live.
        max_episode_steps: time limit (a gymnasium TimeLimit: its cut is ``truncated``).
        wrappers: callables env -> env applied to each sub-env in order (the first wraps the
            raw env), e.g. ``functools.partial(gymnasium.wrappers.AtariPreprocessing, frame_skip=1)``.
        imports: modules to import first (plugins that register env ids).
        info_keys: entries of the env's info dict stored with every step as ``("next", key)``
            (0 / False where an env did not report it): names, or a dict of names to dtypes
            (bool, int64, float32, float64). A name's dtype is fixed here, at construction,
            from its first value (``info_dtype``) in a probe: the reset of sub-env 0 (of a
            vector env: all), then random steps until every key was reported, the episode
            ends or INFO_PROBE_STEPS; float32 if never seen (docs/envs.md).
            ``self.info_keys`` maps each name to its dtype.
        backend: how the sub-envs are stepped (envs/backends.py): "list" (one after the
            other in this process), "sync" / "async" (gymnasium's Sync/AsyncVectorEnv: the
            same batches as "list" from the same seed), "vector" (the id's numpy vector
            env: fastest, one RNG for all sub-envs) or "envpool" (EnvPool's C++ envs of
            its task id ``env``; the envpool extra).
        **make_kwargs: passed to ``gym.make`` (with backend="vector": the vector env's
            constructor; with "envpool": ``envpool.make``).

    Box actions are clipped to the action space's bounds before they reach the env (the
    unclipped action is what the policy wrote and what is stored); a NaN or infinite Box
    action raises NonFiniteActionError instead. Only sub-envs that finish are reset:
    ``("next", "observation")`` keeps the true final observation, the carrier returned for
    the next step holds the reset one with ``is_init=True``. ``terminated`` and
    ``truncated`` stay distinct.
    """

    def __init__(
        self,
        env: EnvSource | gym.vector.VectorEnv,
        num_envs: int | None = None,
        *,
        seed: Seeds = None,
        device: str | torch.device = "cpu",
        max_episode_steps: int | None = None,
        wrappers: Sequence[Callable] = (),
        imports: Sequence[str] = (),
        info_keys: Sequence[str] | Mapping[str, Any] = (),
        backend: str = "list",
        **make_kwargs,
    ) -> None:
        import_plugins(imports)
        declared_info_dtypes = self._setup_info_keys(info_keys)
        self._backend = self._setup_backend(env, num_envs, backend, max_episode_steps, wrappers, make_kwargs)
        if isinstance(env, gym.vector.VectorEnv) and num_envs is None:
            num_envs = self._backend.num_envs
        self.num_envs = check_positive_int("num_envs", num_envs, optional=True)
        self.batch_size = torch.Size([] if num_envs is None else [num_envs])
        self.device = torch.device(device)
        self.backend = self._backend.name
        self.observation_space = self._backend.observation_space
        self.action_space = self._backend.action_space
        try:
            check_supported(self.observation_space, "observation")
            check_supported(self.action_space, "action")
        except TypeError:
            self._backend.close()  # the sub-envs made (an async backend's processes too)
            raise
        self._seed = seed
        self._closed = False
        self._paused: np.ndarray | None = None  # pause(): sub-envs never stepped again
        self._stepped_rows: list[int] | None = None
        box = isinstance(self.action_space, gym.spaces.Box)
        self._action_bounds = (self.action_space.low, self.action_space.high) if box else None
        self._actions_shape = (self._backend.num_envs, *sample_shape(self.action_space))
        self._nested = is_nested(self.observation_space)
        self.info_keys = self._setup_info_dtypes(declared_info_dtypes)
        self._staging = Staging(allocate_arrays(self.observation_space, self._backend.num_envs, self.info_keys),
                                batched=num_envs is not None, device=self.device)

    @staticmethod
    def _setup_backend(env, num_envs, backend, max_episode_steps, wrappers, make_kwargs):
        if isinstance(env, gym.vector.VectorEnv):
            if num_envs is not None and num_envs != env.num_envs:
                raise ValueError(f"num_envs={num_envs} but the vector env holds {env.num_envs} envs")
            if backend not in ("list", "vector") or max_episode_steps is not None or wrappers or make_kwargs:
                raise TypeError("a gymnasium VectorEnv is used as it is: backend, max_episode_steps, wrappers and "
                                "make kwargs apply to a gymnasium id or an env factory")
            return VectorBackend(env, "vector")
        check_positive_int("num_envs", num_envs, optional=True)
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}; got {backend!r}")
        if num_envs is None and backend != "list":
            raise ValueError(f"backend={backend!r} steps a batch of envs: give num_envs (a single env is "
                             "backend='list')")
        if backend in ("vector", "envpool") and wrappers:
            raise ValueError(f"backend={backend!r} steps one native vector env, which takes no per-env wrappers: "
                             "use backend='sync' or 'async' with wrappers")
        if backend == "envpool":  # EnvPool's own task ids, not gymnasium's registry
            return make_backend(env, backend, [None] * num_envs, dict(make_kwargs, max_episode_steps=max_episode_steps))
        if isinstance(env, (list, tuple)):  # one factory per sub-env
            if num_envs is None or len(env) != num_envs:
                raise ValueError(f"env lists {len(env)} env factories: give num_envs={len(env)} (one per sub-env)")
            makers = [functools.partial(make_gym_env, source, max_episode_steps, wrappers=tuple(wrappers),
                                        **make_kwargs) for source in env]
        else:
            makers = [functools.partial(make_gym_env, resolve_env_id(env) if isinstance(env, str) else env,
                                        max_episode_steps, wrappers=tuple(wrappers), **make_kwargs)] * (num_envs or 1)
        vector_kwargs = dict(make_kwargs, max_episode_steps=max_episode_steps)
        return make_backend(env, backend, makers, vector_kwargs)

    @staticmethod
    def _setup_info_keys(info_keys) -> dict[str, np.dtype | None]:
        """Each info key and its declared dtype (None: from the first value seen)."""
        declared = dict(info_keys) if isinstance(info_keys, Mapping) else dict.fromkeys(info_keys)
        reserved = sorted(set(declared) & {"observation", "reward", "terminated", "truncated", "done"})
        if reserved or not all(isinstance(key, str) and key for key in declared):
            raise ConfigError(f"info_keys must be names of info entries other than the step's own keys, got "
                              f"{list(declared)}")
        return {key: None if dtype is None else _declared_info_dtype(key, dtype) for key, dtype in declared.items()}

    def _setup_info_dtypes(self, declared: dict[str, np.dtype | None]) -> dict[str, np.dtype]:
        """Each info key's dtype: declared, else that of its first value in the backend's
        probe (``first_info_values``), else float32."""
        probed = [key for key, dtype in declared.items() if dtype is None]
        try:
            seen = self._backend.first_info_values(probed, INFO_PROBE_STEPS) if probed else {}
        except BaseException:
            self._backend.close()
            raise
        dtypes = {}
        for key, dtype in declared.items():
            if dtype is None:
                dtype = info_dtype(key, seen[key]) if key in seen else np.dtype(np.float32)
            dtypes[key] = dtype
        return dtypes

    @property
    def staged(self) -> TensorDict:
        """The staging tensors: ``observation``, ``is_init`` (the carrier slots) and
        ``("next", ...)`` of the last step; overwritten by the next step or reset."""
        return self._staging.staged

    # ------------------------------------------------------------------ public API
    def set_seed(self, seed: Seeds) -> Seeds:
        """Seed sub-env i with ``seed + i`` (or ``seed[i]``) at the next reset; returns the seed."""
        self._seed = seed
        return seed

    def reset(self) -> TensorDict:
        """Reset every sub-env; returns the carrier (``observation``, ``is_init``)."""
        self.reset_some(range(self._backend.num_envs))
        return self.staged.select("observation", "is_init").clone()

    def step_and_maybe_reset(self, tensordict: TensorDict) -> tuple[TensorDict, TensorDict]:
        """Step with ``tensordict["action"]``. Returns ``tensordict`` with its ``"next"``
        entry set, and the carrier for the next step (reset observation where done)."""
        self.stage_step(tensordict.get("action"))
        tensordict.set("next", self.staged.get("next").clone())
        return tensordict, self.staged.select("observation", "is_init").clone()

    def rand_action(self, tensordict: TensorDict | None = None) -> TensorDict:
        """Write a uniform random ``"action"`` into ``tensordict`` (a new one if None)."""
        if tensordict is None:
            tensordict = TensorDict({}, batch_size=self.batch_size, device=self.device)
        tensordict.set("action", self.random_action())
        return tensordict

    def random_action(self) -> torch.Tensor:
        return random_actions(self.action_space, tuple(self.batch_size), self.device)

    def to(self, device: str | torch.device) -> "GymEnv":
        """Return tensors on ``device`` from now on (in place; returns self)."""
        device = torch.device(device)
        if device != self.device:
            self.device = device
            self._staging.bind(device)
        return self

    def as_batch(self) -> "GymEnv":
        """This single env (``num_envs=None``, batch_size ``[]``) as a batch of one
        (``num_envs=1``): the same gymnasium env, info keys and device, for the collectors
        that step their envs in batches. An env already batched is returned as it is."""
        return self if self.num_envs is not None else GymEnv.from_envs([self])

    @staticmethod
    def from_envs(envs: Sequence["GymEnv"]) -> "GymEnv":
        """Single GymEnvs (``num_envs=None``) as one batch of ``len(envs)`` sub-envs, in
        order: their gymnasium envs, stepped by backend "list", with their device and info
        keys (which, and the spaces, must be the same for every env). Sub-env i keeps the
        seed env i had for its next reset (none: unseeded). The envs given are closed; their
        gymnasium envs live on in the batch. How an env source that builds one env per call
        (rlpyt's env factories) is batched: envs/sources.py ``make_env``."""
        envs = list(envs)
        if not envs:
            raise ValueError("GymEnv.from_envs needs at least one env")
        first = envs[0]
        for index, env in enumerate(envs):
            if not isinstance(env, GymEnv) or env.num_envs is not None or env._closed:
                what = env if isinstance(env, GymEnv) else type(env).__name__
                state = " (closed)" if isinstance(env, GymEnv) and env._closed else ""
                raise ConfigError(f"envs to batch must be single, open GymEnvs (num_envs=None); env {index} is "
                                  f"{what}{state}")
            if (env.observation_space, env.action_space) != (first.observation_space, first.action_space):
                raise ConfigError(f"envs to batch must have the same spaces: env {index} has observations "
                                  f"{env.observation_space} and actions {env.action_space}, env 0 "
                                  f"{first.observation_space} and {first.action_space}")
            if (env.info_keys, env.device) != (first.info_keys, first.device):
                raise ConfigError(f"envs to batch must have the same info keys and device: env {index} has "
                                  f"{env.info_keys} on {env.device}, env 0 {first.info_keys} on {first.device}")
        seeds = [env._seed for env in envs]
        if any(seed is None for seed in seeds) and any(seed is not None for seed in seeds):
            raise ConfigError(f"envs to batch must all be seeded or all unseeded; their seeds are {seeds}")
        batched = GymEnv([functools.partial(_the_env, env) for env in GymEnv._gym_envs(envs)], len(envs),
                         device=first.device, info_keys=first.info_keys)
        batched.set_seed(None if seeds[0] is None else [env_seed(seed, 0) for seed in seeds])
        for env in envs:
            env._closed = True  # its gymnasium env lives on in the batch
        return batched

    def wrapped(self, wrapper: Callable[[gym.Env], gym.Env]) -> "GymEnv":
        """This env with ``wrapper`` (gymnasium env -> gymnasium env) around each of its
        sub-envs: a GymEnv of the same size, device, info keys and seed (backend "list"
        only). This one is closed; its gymnasium envs live on, wrapped, in the new one."""
        wrapped_envs = [wrapper(env) for env in GymEnv._gym_envs([self])]
        for env in wrapped_envs:
            if not isinstance(env, gym.Env):
                raise TypeError(f"env wrapper {wrapper!r} returned {type(env).__name__}, not a gymnasium.Env")
        makers = [functools.partial(_the_env, env) for env in wrapped_envs]
        rebuilt = GymEnv(makers if self.num_envs is not None else makers[0], self.num_envs, device=self.device,
                         info_keys=self.info_keys)
        rebuilt.set_seed(self._seed)
        self._closed = True
        return rebuilt

    @staticmethod
    def _gym_envs(envs: Sequence["GymEnv"]) -> list[gym.Env]:
        """The gymnasium envs of ``envs``, in order (each of backend "list")."""
        found = []
        for env in envs:
            if env.backend != "list":
                raise ConfigError(f"{env!r} steps one vector env: its sub-envs cannot be taken apart (build it "
                                  "with backend='list')")
            found += env._backend.envs
        return found

    def close(self) -> None:
        """Close every sub-env; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._backend.close()

    # ------------------------------------------------------------------ the collector's protocol (envs/staging.py)
    def stage_step(self, actions, auto_reset: bool = True) -> np.ndarray | None:
        """Step every sub-env, writing results into ``staged``. This is the per-step hot
        path: it works on the numpy staging arrays directly.

        ``actions``: a numpy array or tensor holding one action per sub-env. With
        ``auto_reset``, finished sub-envs are reset (``is_init`` set); the others carry the
        next observation over. Without it, the sub-envs marked in ``waiting`` are not
        stepped (reward 0, the rest as they finished). Returns the done mask (a staging
        array, valid until the next step) when some sub-env finished, else None.
        """
        if isinstance(actions, torch.Tensor):
            actions = actions.detach().cpu().numpy()
        actions = actions.reshape(self._actions_shape)
        if self._action_bounds is not None:  # Gaussian policies sample past the bounds
            if not np.isfinite(actions).all():
                finite = np.isfinite(actions).reshape(self._backend.num_envs, -1).all(-1)
                bad = np.flatnonzero(~finite).tolist()
                raise NonFiniteActionError(f"the policy's action is not finite (nan or inf) for env(s) {bad}: "
                                           "the policy diverged; nothing was sent to the env")
            actions = np.clip(actions, *self._action_bounds)
        arrays = self._staging.arrays
        if not auto_reset and arrays["waiting"].any():  # reset_policy="wait": finished envs wait
            waiting = arrays["waiting"] if self._paused is None else arrays["waiting"] | self._paused
            any_done = self._backend.step_some(actions, arrays, waiting)
        elif self._paused is not None:
            any_done = self._backend.step_rows(actions, arrays, self._stepped_rows)
        else:
            any_done = self._backend.step(actions, arrays)
        done = arrays["done"]
        if self._nested:
            tree_map(np.copyto, arrays["observation"], arrays["next_observation"])
        else:
            arrays["observation"][:] = arrays["next_observation"]
        self._staging.begin_step()
        if any_done and auto_reset:
            self._reset_where(done)
        else:
            self._staging.refresh()
        return done if any_done else None

    def pause(self, indices) -> bool:
        """Stop stepping the given sub-envs (the envs of a batched sweep's member that
        stopped; an eval env whose episode is counted) until ``unpause``: their rows keep
        their last values with a reward of 0 and are never done, so they are never reset
        by a step. Backend "list" leaves an env unstepped, and "vector" for CartPole-v1
        (``pauses``): returns whether the envs are paused (False: they go on stepping)."""
        if not self._backend.pauses:
            return False
        paused = np.zeros(self._backend.num_envs, bool) if self._paused is None else self._paused
        paused[np.asarray(indices, dtype=np.int64)] = True
        self._paused, self._stepped_rows = paused, np.flatnonzero(~paused).tolist()
        arrays = self._staging.arrays
        for key in ("done", "terminated", "truncated", "reward"):
            arrays[key][paused] = 0
        self._staging.refresh()
        return True

    def unpause(self, indices) -> None:
        """Step the given paused sub-envs again, from the values they were paused with (an
        evaluation's envs: reset with the others at the next evaluation)."""
        if self._paused is None:
            return
        self._paused[np.asarray(indices, dtype=np.int64)] = False
        stepped = np.flatnonzero(~self._paused).tolist()
        self._paused, self._stepped_rows = (None, None) if len(stepped) == self._backend.num_envs else \
            (self._paused, stepped)

    @property
    def waiting(self) -> np.ndarray | None:
        """The sub-envs that finished and wait for a reset (set by a collector whose
        reset_policy is "wait"); None when the backend cannot leave one unstepped."""
        return self._staging.arrays["waiting"] if self._backend.name == "list" else None

    def reset_some(self, indices) -> None:
        """Reset the given sub-envs into the carrier slots (``observation``, ``is_init``).

        A pending seed (``set_seed``) is consumed by the next reset of every sub-env;
        later resets continue each env's own RNG.
        """
        mask = np.zeros(self._backend.num_envs, bool)
        mask[np.asarray(indices, dtype=np.int64)] = True
        self._reset_where(mask)

    def _reset_where(self, mask: np.ndarray) -> None:
        """``reset_some`` with a boolean mask over the sub-envs (the done mask of a step)."""
        seed = self._seed if self._seed is not None and mask.all() else None
        self._backend.reset(mask, seed, self._staging.arrays)
        if seed is not None:
            self._seed = None
        self._staging.mark_init(mask)

    def mark_init(self, indices) -> None:
        """Make the next step of these sub-envs a trajectory start (no reset)."""
        self._staging.mark_init(indices)

    def stage_into(self, arrays: dict) -> None:
        """Stage every step in ``arrays`` (same names, shapes and dtypes as the env's own
        staging arrays; e.g. this worker's rows of a shared-memory step buffer) instead of
        private arrays. Their current content is overwritten by the next reset or step."""
        self._staging.replace_arrays(arrays)

    def random_steps(self, steps) -> None:
        """Take ``steps[i]`` uniformly random actions (the action space's own sampler) in
        sub-env i, resetting it whenever it finishes: envs started together then sit at
        different phases of their episodes (rlpyt's decorrelation). The next step of every
        sub-env starts a trajectory (``is_init``)."""
        if len(steps) != self._backend.num_envs:
            raise ValueError(f"random_steps needs one step count per sub-env ({self._backend.num_envs}), got "
                             f"{len(steps)}")
        self._backend.random_steps(steps, self._staging.arrays)
        self.mark_init(range(self._backend.num_envs))

    def __repr__(self) -> str:
        name = self._backend.label
        backend = "" if self.backend == "list" else f", backend={self.backend!r}"
        return f"GymEnv({name!r}, num_envs={self.num_envs}{backend}, device={str(self.device)!r})"
