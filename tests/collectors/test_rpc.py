"""RPCCollector: workers driven over torch.distributed.rpc (TensorPipe on loopback). RPC
starts once per process, so each scenario runs in a fresh one (rpc_scenarios.py)."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rlcollect import RPCCollector

pytestmark = pytest.mark.timeout(180)
SCENARIOS = Path(__file__).with_name("rpc_scenarios.py")


def run(name: str) -> dict:
    result = subprocess.run([sys.executable, str(SCENARIOS), name], capture_output=True, text=True, timeout=150)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_sync_batches_weights_and_loopback_listeners():
    out = run("sync")
    assert out["shapes"] == [[2, 1, 4]] * 3 and out["frames"] == 24
    # the batch after each update holds the new weights, stamped with their version, from both workers
    assert out["seen"] == [[[0.0], [0], [0, 1]], [[1.0], [1], [0, 1]], [[2.0], [2], [0, 1]]]
    assert out["observations"] == [[2.0, 0.0, 1.0, 2.0]] * 2  # CountingEnv(3), steps 8..11: the carrier persists
    assert out["ids"] == [2, (1 << 40) + 2]  # worker 1's trajectory ids start at 1 << 40
    if shutil.which("ss"):
        assert out["addresses"] and all(address.startswith("127.0.0.1:") for address in out["addresses"])


def test_async_batches_come_from_both_workers():
    assert run("async") == {"workers": [0, 1], "batches": 10, "frames": 40}


def test_a_worker_s_env_error_is_named_with_its_cause():
    error = run("failure")["error"]
    assert error.startswith("collector worker 1: raised an exception:")
    assert "ErrorAfterEnv: step 6 fails by design" in error


def test_fork_is_refused_before_anything_starts():
    with pytest.raises(ValueError, match="start_method='fork' would copy this process's RPC state"):
        RPCCollector("CartPole-v1", num_workers=1, frames_per_batch=8, start_method="fork")
