"""The public API: one name per thing, each importable from rlcollect with a docstring."""
import subprocess
import sys

import rlcollect
from rlcollect.compat import ALIASES

REQUIRED = ["Collector", "MultiSyncCollector", "MultiAsyncCollector", "ActionServerCollector", "AlternatingCollector",
            "RayCollector", "EvalCollector", "GymEnv", "RolloutBuffer", "ReplayBuffer", "LazyTensorStorage",
            "LazyMemmapStorage", "RandomSampler", "SliceSampler", "SliceSamplerWithoutReplacement",
            "PrioritizedSampler", "MultiStep", "SharedMemWeightSyncScheme",
            "MultiProcessWeightSyncScheme", "NoWeightSyncScheme", "RayWeightSyncScheme", "WorkerError",
            "split_trajectories", "StepOptions", "DeviceOptions", "DeliveryOptions", "WorkerOptions", "BatchSpec",
            "PoolCollector"]


def test_every_public_name_resolves_once_with_a_docstring():
    assert set(REQUIRED) <= set(rlcollect.__all__)
    assert len(rlcollect.__all__) == len(set(rlcollect.__all__))
    for name in rlcollect.__all__:
        value = getattr(rlcollect, name)
        assert value.__doc__ and value.__doc__.strip(), f"rlcollect.{name} has no docstring"
        if name in ALIASES:  # the documented migration aliases, and only those
            assert value is getattr(rlcollect, ALIASES[name])
        else:
            assert getattr(value, "__name__", name) == name, f"rlcollect.{name} is an alias of {value.__name__}"


def test_importing_rlcollect_imports_neither_torch_nor_ray():
    code = "import sys, rlcollect; assert 'torch' not in sys.modules and 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_each_collector_help_names_every_option_it_accepts():
    from dataclasses import fields

    groups = [rlcollect.StepOptions, rlcollect.DeviceOptions, rlcollect.DeliveryOptions]
    for cls in (rlcollect.Collector, rlcollect.MultiSyncCollector, rlcollect.MultiAsyncCollector,
                rlcollect.ActionServerCollector, rlcollect.AlternatingCollector, rlcollect.PoolCollector):
        for group in groups + ([] if cls is rlcollect.Collector else [rlcollect.WorkerOptions]):
            for field in fields(group):
                assert field.name in cls.__doc__, f"help({cls.__name__}) does not name {field.name}"


def test_a_positive_int_is_never_a_bool():
    import pytest

    for build in (lambda: rlcollect.StepOptions(max_frames_per_traj=True),
                  lambda: rlcollect.BatchSpec.round(True, 1),
                  lambda: rlcollect.GymEnv("CartPole-v1", num_envs=True),
                  lambda: rlcollect.LazyTensorStorage(True),
                  lambda: rlcollect.SliceSampler(slice_len=True)):
        with pytest.raises(ValueError, match="must be (None or )?a positive int, got True"):
            build()
