"""rlcollect.compile_hints: tensordict imported without torch's compiler, its compile hints
given, unchanged, once the compiler is imported."""
import json
import os
import subprocess
import sys

import pytest

# the compile hints tensordict gives at import, as (hint, function name), read in a fresh interpreter
HINTS = """
import json, sys
{setup}
import torch
from torch._dynamo import trace_rules
import tensordict.base, tensordict.utils, tensordict._td, tensordict._lazy
functions = {{name: getattr(module, name) for module in (tensordict.base, tensordict.utils, tensordict._td,
             tensordict._lazy) for name in ("_add_batch_dim", "_remove_batch_dim", "_add_batch_dim_c",
             "_foreach_copy_compiled", "_lock_warn") if hasattr(module, name)}}
print(json.dumps({{"dynamo_before": {dynamo_before}, "recorded": {recorded},
                  "allowed": sorted(k for k, f in functions.items() if id(f) in trace_rules._allowed_callable_ids),
                  "constant": sorted(k for k, f in functions.items()
                                     if getattr(f, "_dynamo_marked_constant", False))}}))
"""


def run(setup: str, dynamo_before: str, recorded: str) -> dict:
    code = HINTS.format(setup=setup, dynamo_before=dynamo_before, recorded=recorded)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.timeout(240)
def test_tensordict_loads_without_the_compiler_and_its_hints_are_given_when_the_compiler_loads():
    """Importing rlcollect's envs and collectors imports tensordict but not torch._dynamo;
    the hints tensordict asked for are recorded, then given when torch._dynamo is imported:
    the same functions are allowed in graphs and marked constant as when tensordict is
    imported on its own."""
    deferred = run("import rlcollect.envs.gym_env, rlcollect.collectors.single\n"
                   "from rlcollect import compile_hints\n"
                   "dynamo_before = 'torch._dynamo' in sys.modules\n"
                   "recorded = sorted({name for _, f in compile_hints.deferred() for name in [f.__name__]})\n"
                   "import torch._dynamo\n"
                   "assert compile_hints.deferred() == []",
                   "dynamo_before", "recorded")
    plain = run("import tensordict", "True", "[]")
    assert deferred["dynamo_before"] is False
    assert deferred["recorded"] == ["_add_batch_dim", "_foreach_copy_", "_lock_warn", "_remove_batch_dim"]
    assert deferred["allowed"] == plain["allowed"] and deferred["constant"] == plain["constant"]
    assert deferred["allowed"] == ["_add_batch_dim", "_add_batch_dim_c", "_foreach_copy_compiled", "_remove_batch_dim"]
    assert deferred["constant"] == ["_lock_warn"]


@pytest.mark.timeout(240)
def test_a_default_training_run_and_its_resume_never_import_the_compiler(tmp_path):
    """`rlcollect train` with the default config (PPO, the offline W&B logger), then resumed,
    in one fresh process: the optimizer built, stepped, checkpointed and loaded again, the
    policy evaluated, and torch._dynamo never imported (rlcollect.algos.optim.Adam)."""
    code = ("import sys\n"
            "from rlcollect.cli import main\n"
            "assert main(['train', 'hydra.run.dir=run', 'progress=false', 'total_frames=1024']) == 0\n"
            "assert main(['train', 'resume=run', 'progress=false', 'total_frames=1536']) == 0\n"
            "assert 'torch._dynamo' not in sys.modules, 'torch._dynamo was imported'\n")
    env = {key: value for key, value in os.environ.items() if key != "WANDB_SERVICE"}  # a service of its own
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={**env, "WANDB_MODE": "offline"},
                            capture_output=True, text=True, timeout=200)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["frames"] == 1536
