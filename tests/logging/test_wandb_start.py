"""W&B started ahead of torch for a run that logs to it (rlcollect.logging.wandb_start)."""
import os
import subprocess
import sys
import threading

import pytest
from omegaconf import OmegaConf

from rlcollect.config import RunLoggerConfig, WandbLoggerConfig, logs_to_wandb
from rlcollect.logging import wandb_start


@pytest.mark.parametrize("logger, expected", [
    (dict(), True),  # logger=wandb as the schema gives it (offline)
    (dict(mode="online"), True),
    (dict(mode="disabled"), False),
    (dict(_target_="my_loggers.MyWandbLogger"), False),  # a class of one's own: not read from the config
])
def test_logs_to_wandb_reads_the_logger_s_target_and_mode(logger, expected):
    cfg = OmegaConf.create({"logger": {**OmegaConf.to_container(OmegaConf.structured(WandbLoggerConfig)), **logger}})
    assert logs_to_wandb(cfg) is expected
    assert not logs_to_wandb(OmegaConf.create({"logger": OmegaConf.structured(RunLoggerConfig)}))


def run(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter, W&B offline, with a service of its own unless ``env`` names one."""
    environment = {key: value for key, value in os.environ.items() if key != "WANDB_SERVICE"}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                          env={**environment, "WANDB_MODE": "offline", "WANDB_SILENT": "true", **env})


def test_start_wandb_imports_what_a_run_imports_and_starts_the_service_the_run_then_uses(tmp_path):
    """Without torch: W&B's modules imported, its service started in one thread (once per
    process); the W&B run a WandbLogger opens then connects to that service."""
    code = ("import os, sys, threading\n"
            "from rlcollect.logging.wandb_start import INIT_IMPORTS, SETUP_THREAD, start_wandb, wait_for_wandb\n"
            "start_wandb()\n"
            "start_wandb()\n"
            "assert all(name in sys.modules for name in INIT_IMPORTS), INIT_IMPORTS\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n"
            "assert [t.name for t in threading.enumerate()].count(SETUP_THREAD) <= 1\n"
            "wait_for_wandb()\n"
            "service = os.environ['WANDB_SERVICE']\n"
            "from rlcollect.logging.run_logger import WandbLogger\n"
            f"logger = WandbLogger({str(tmp_path)!r}, project='p')\n"
            "logger.log({'x': 1.0}, step=1)\n"
            "logger.close()\n"
            "assert os.environ['WANDB_SERVICE'] == service, 'the run started a service of its own'\n")
    result = run(code)
    assert result.returncode == 0, result.stderr
    assert list((tmp_path / "wandb").glob("offline-run-*"))


def test_a_service_that_fails_to_start_early_fails_at_open_as_without_the_early_start():
    """The same error, raised by WandbLogger.open, whether start_wandb tried first or not."""
    code = ("import sys, tempfile\n"
            "from rlcollect.logging.wandb_start import start_wandb, wait_for_wandb\n"
            "if sys.argv[1] == 'early':\n"
            "    start_wandb()\n"
            "    wait_for_wandb()\n"
            "from rlcollect.logging.run_logger import WandbLogger\n"
            "logger = WandbLogger(tempfile.mkdtemp(), project='p')\n"
            "try:\n"
            "    logger.open()\n"
            "except Exception as error:\n"
            "    print(type(error).__name__, str(error).splitlines()[0])\n")
    bogus = "3-1-unix-/nonexistent/socket"  # a service address nothing listens on
    early, late = (run(code, when, WANDB_SERVICE=bogus) for when in ("early", "late"))
    assert early.returncode == late.returncode == 0, early.stderr + late.stderr
    assert early.stdout == late.stdout and "Failed to connect to service" in late.stdout


def test_an_import_that_fails_is_left_for_the_logger_to_fail_at_and_starts_no_service(monkeypatch):
    imported = []

    def failing(name):
        imported.append(name)
        raise ImportError(f"no {name} here")

    monkeypatch.setattr(wandb_start, "import_module", failing)
    wandb_start.start_wandb()  # says nothing, raises nothing
    assert imported == ["wandb"]
    assert wandb_start.SETUP_THREAD not in [thread.name for thread in threading.enumerate()]
    wandb_start.wait_for_wandb()  # nothing to wait for
