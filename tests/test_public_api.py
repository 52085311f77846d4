"""The public API: one name per thing, each importable from rlcollect with a docstring, declared once."""
import ast
import subprocess
import sys
from pathlib import Path

import rlcollect
import rlcollect.compat
import rlcollect.samplers
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


def type_checking_imports(module) -> dict[str, str]:
    """{name: module} of the ``from module import name`` lines of ``module``'s ``if TYPE_CHECKING:`` block."""
    tree = ast.parse(Path(module.__file__).read_text())
    [block] = [node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"]
    imported = {}
    for node in block.body:
        assert isinstance(node, ast.ImportFrom) and node.level == 0, f"not `from M import N`: {ast.unparse(node)}"
        for alias in node.names:
            assert alias.asname is None and alias.name not in imported, f"{alias.name} imported twice or renamed"
            imported[alias.name] = node.module
    return imported


def test_the_public_names_are_declared_once():
    """``_EXPORTS`` is the list: ``__all__`` is made from it, and the TYPE_CHECKING block imports
    exactly its names, each from the module ``_EXPORTS`` loads it from."""
    assert rlcollect.__all__ == sorted(rlcollect._EXPORTS)
    assert type_checking_imports(rlcollect) == rlcollect._EXPORTS


def test_rlpyt_and_migration_names_have_their_own_homes():
    """rlpyt's names are rlcollect.samplers', the migration aliases rlcollect.compat's; the top
    level re-exports them from there, as its docstring says."""
    for home in (rlcollect.samplers, rlcollect.compat):
        reexported = {name for name, module in rlcollect._EXPORTS.items() if module == home.__name__}
        assert reexported and reexported <= set(home.__all__), home.__name__
        assert all(name in rlcollect.__doc__ for name in reexported), home.__name__
        assert home.__name__ in rlcollect.__doc__
    assert set(ALIASES) <= set(rlcollect.compat.__all__)
    assert {"SerialSampler", "CpuSampler", "GpuSampler", "AlternatingSampler", "NoOverlapAlternatingSampler"} <= {
        name for name, module in rlcollect._EXPORTS.items() if module == "rlcollect.samplers"}


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
