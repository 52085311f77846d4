"""hydra/launcher=batched against Hydra's own test suites for launcher plugins
(hydra.test_utils.launcher_common_tests), parametrised as Hydra's plugins parametrise them.
Their apps are Hydra's test apps, not rlcollect's: each job is a solo run there (no config of
theirs has a ``seed`` to batch over), so what they check is the job's set-up as Hydra's basic
launcher does it: its folder, ``.hydra/``, ``<task>.log``, working dir, name and return value."""
import subprocess
import sys

import pytest
from hydra.test_utils.launcher_common_tests import LauncherTestSuite
from hydra.version import VersionBase
from packaging.version import Version


@pytest.fixture(autouse=True)
def compatibility_version_base():
    """Each case as in a fresh process: the suite's apps set no version base, so they take
    Hydra's compatibility base, 1.1 (jobs run in their own working dir); a test of this
    session that composed with version_base="1.3" before them set the process's base to that."""
    base = VersionBase.instance()
    before = base.version_base
    base.setbase(Version("1.1"))
    yield
    base.version_base = before



@pytest.mark.parametrize("launcher_name, overrides", [("batched", [])])
class TestBatchedLauncher(LauncherTestSuite):
    pass


def test_importing_the_launchers_work_leaves_hydras_version_base():
    """The launcher imports rlcollect's train command in the app that launches it; had that
    import set Hydra's version base (``@hydra.main(version_base="1.3")`` on a module-level
    function does), the first sweep of an app without one would run its jobs in the app's
    working dir, not in their own (Hydra's test_sweep_1_job, when it ran first). A fresh
    process: in this one the module is imported already."""
    code = ("from hydra import version\n"
            "before = version.getbase()\n"
            "import rlcollect.commands.train, rlcollect.commands.batched_launch\n"
            "assert version.getbase() is before, version.getbase()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
