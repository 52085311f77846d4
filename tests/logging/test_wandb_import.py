"""W&B imported ahead of torch for a run that logs to it (rlcollect.logging.wandb_import)."""
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from rlcollect.config import RunLoggerConfig, WandbLoggerConfig, logs_to_wandb
from rlcollect.logging import wandb_import


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


def test_import_wandb_imports_what_a_run_s_start_imports_and_not_torch():
    code = ("import sys\n"
            "from rlcollect.logging.wandb_import import INIT_IMPORTS, import_wandb\n"
            "import_wandb()\n"
            "assert all(name in sys.modules for name in INIT_IMPORTS), INIT_IMPORTS\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_an_import_that_fails_is_left_for_the_logger_to_fail_at(monkeypatch):
    imported = []

    def failing(name):
        imported.append(name)
        raise ImportError(f"no {name} here")

    monkeypatch.setattr(wandb_import, "import_module", failing)
    wandb_import.import_wandb()  # says nothing, raises nothing
    assert imported == ["wandb"]
