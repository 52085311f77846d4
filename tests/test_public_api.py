"""The public API: one name per thing, each importable from rlcollect with a docstring, declared once."""
import ast
import subprocess
import sys
from pathlib import Path

import rlcollect
import rlcollect.compat
import rlcollect.rlpyt
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


def test_the_public_names_are_declared_once():
    """rlcollect/__init__.pyi is the one list: ``__all__``, the lazy attributes, the help text
    and rlcollect.collectors' re-exports are all read from it; __init__.py lists no name."""
    from rlcollect.lazy_exports import read_stub

    stub_file = Path(rlcollect.__file__).with_suffix(".pyi")
    stub = read_stub(str(stub_file))
    assert rlcollect.__all__ == sorted(stub.exports) and rlcollect._EXPORTS == stub.exports
    tree = ast.parse(Path(rlcollect.__file__).read_text())
    assert not [node for node in ast.walk(tree) if isinstance(node, (ast.ImportFrom, ast.Dict))
                and any(name in ast.unparse(node) for name in ("GymEnv", "Collector"))]
    assert all(f"``{name}``" in rlcollect.__doc__ for name in stub.exports)
    from rlcollect import collectors

    assert {name for name, module in stub.exports.items() if module.startswith("rlcollect.collectors.")} <= set(
        collectors.__all__)


def test_a_stub_import_outside_any_group_or_renamed_is_refused(tmp_path):
    import pytest

    from rlcollect.lazy_exports import read_stub

    for text in ("from a import B as B\n", "# group\nfrom a import B as C\n",
                 "# group\nfrom a import B as B\nfrom c import B as B\n"):
        (tmp_path / "s.pyi").write_text(text)
        with pytest.raises(ValueError, match="s.pyi:"):
            read_stub(str(tmp_path / "s.pyi"))


def test_rlpyt_and_migration_names_have_their_own_homes():
    """rlpyt's names are rlcollect.rlpyt's, the migration aliases rlcollect.compat's; the top
    level re-exports them from there, as its docstring says."""
    for home in (rlcollect.rlpyt, rlcollect.compat):
        reexported = {name for name, module in rlcollect._EXPORTS.items() if module == home.__name__}
        assert reexported and reexported <= set(home.__all__), home.__name__
        assert all(name in rlcollect.__doc__ for name in reexported), home.__name__
        assert home.__name__ in rlcollect.__doc__
    assert set(ALIASES) <= set(rlcollect.compat.__all__)
    assert {"SerialSampler", "CpuSampler", "GpuSampler", "AlternatingSampler", "NoOverlapAlternatingSampler"} <= {
        name for name, module in rlcollect._EXPORTS.items() if module == "rlcollect.rlpyt"}


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
