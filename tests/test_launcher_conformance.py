"""hydra/launcher=batched against Hydra's own test suites for launcher plugins."""
import subprocess
import sys


def test_importing_the_launchers_work_leaves_hydras_version_base():
    """The launcher imports rlcollect's train command in the app that launches it; had that
    import set Hydra's version base (``@hydra.main(version_base="1.3")`` on a module-level
    function does), the first sweep of an app without one would run its jobs in the app's
    working dir, not in their own (Hydra's test_sweep_1_job, when it ran first). A fresh
    process: in this one the module is imported already."""
    code = ("from hydra import version\n"
            "before = version.getbase()\n"
            "import rlcollect.commands.train, rlcollect.sweeps.launcher\n"
            "assert version.getbase() is before, version.getbase()\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
