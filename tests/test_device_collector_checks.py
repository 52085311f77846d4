"""Devices and collector values the config rules out, refused before anything starts (no run
folder, no W&B, no workers) in one line naming the key: every device key (the training
device, the collector's and its hosts' collector_kwargs', the rollout buffer's, the replay
storage's) checked against this machine and torch build, the meta device and an indexed CPU
refused; a hosted collector's collector_kwargs against its collector_class; a worker CPU
affinity against the workers and this process's CPUs."""
import os
from pathlib import Path

import pytest
import torch
from commands import rlcollect_all
from train_configs import composed, refusal

from rlcollect.collectors.base import CollectionPlan
from rlcollect.collectors.distributed.collector import DistributedCollector
from rlcollect.collectors.ray.collector import RayCollector
from rlcollect.config.values import RESUME_OVERRIDES, check_resume_keys
from rlcollect.errors import ConfigError
from rlcollect.pipeline.checks import check_config, check_device, device_keys

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
META = ("the meta device holds tensors without values, so nothing is computed there and a run cannot train on it; "
        "use {key}=cpu (or an accelerator's device)")


def device_refusal(key: str, device) -> str:
    with pytest.raises(ConfigError) as refused:
        check_device(key, device)
    return str(refused.value)


# ---------------------------------------------------------------------------- check_device
@pytest.mark.timeout(30)
def test_the_meta_device_and_an_indexed_cpu_are_refused_naming_the_key():
    assert device_refusal("device", "meta") == "device=meta: " + META.format(key="device")
    for device in ("cpu:0", "cpu:1"):
        assert device_refusal("buffer.device", device) == (
            f"buffer.device={device}: a CPU device has no index here (torch has one CPU device); use buffer.device=cpu")
    check_device("device", "cpu")
    check_device("device", torch.device("cpu"))
    assert device_refusal("device", "gpu").startswith("device=gpu: not a device (Expected one of cpu, cuda,")


@pytest.mark.timeout(30)
@NO_CUDA
def test_cuda_without_cuda_is_refused_as_before():
    for device in ("cuda", "cuda:0"):
        assert device_refusal("device", device) == (
            f"device={device}: this machine or this torch build has no CUDA (torch.cuda.is_available() is False); "
            "use device=cpu")


@pytest.mark.timeout(30)
def test_an_accelerator_is_checked_with_torch_s_own_availability_check():
    """mps: torch.backends.mps.is_available(); xpu (mtia, ...): torch.<type>.is_available()."""
    if not torch.backends.mps.is_available():
        assert device_refusal("device", "mps") == (
            "device=mps: this machine or this torch build has no mps device (torch.backends.mps.is_available() is "
            "False); use device=cpu")
    if hasattr(torch, "xpu") and not torch.xpu.is_available():
        assert device_refusal("collector.policy_device", "xpu:0") == (
            "collector.policy_device=xpu:0: this machine or this torch build has no xpu device "
            "(torch.xpu.is_available() is False); use collector.policy_device=cpu")


@pytest.mark.timeout(30)
def test_an_available_accelerator_is_taken_up_to_its_device_count(monkeypatch):
    if not hasattr(torch, "xpu"):
        pytest.skip("this torch has no torch.xpu")
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 1)
    check_device("device", "xpu")
    check_device("device", "xpu:0")
    assert device_refusal("device", "xpu:1") == "device=xpu:1: there are 1 xpu devices"
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    check_device("device", "mps")


@pytest.mark.timeout(30)
def test_a_device_type_without_an_availability_check_is_one_torch_cannot_make_tensors_on():
    if hasattr(getattr(torch, "vulkan", None), "is_available"):
        pytest.skip("this torch has torch.vulkan.is_available()")
    message = device_refusal("device", "vulkan")
    assert message.startswith("device=vulkan: this torch build cannot make tensors on the vulkan device (")
    assert message.endswith("); use device=cpu") and "\n" not in message


# ---------------------------------------------------------------------------- the device keys
@pytest.mark.timeout(120)
@pytest.mark.parametrize("overrides, key", [
    (["device=meta"], "device"),
    (["buffer.device=meta"], "buffer.device"),
    (["algo=dqn", "buffer.storage.device=meta"], "buffer.storage.device"),
    (["collector.policy_device=meta"], "collector.policy_device"),
    (["collector=multisync", "collector.storing_device=meta"], "collector.storing_device"),
    (["collector=ray", "collector.collector_kwargs.storing_device=meta"], "collector.collector_kwargs.storing_device"),
    (["collector=ray", "collector.collector_kwargs.env_device=meta"], "collector.collector_kwargs.env_device"),
    (["collector=distributed", "collector.collector_kwargs.policy_device=meta"],
     "collector.collector_kwargs.policy_device"),
    (["collector=distributed", "collector.start_workers_with=submitit", "collector.cluster=local",
      "collector.collector_kwargs.policy_device=meta"], "collector.collector_kwargs.policy_device"),
    (["collector=distributed", "collector.start_workers_with=ray", "collector.collector_kwargs.env_device=meta"],
     "collector.collector_kwargs.env_device"),
], ids=["device", "buffer", "storage", "collector", "multisync", "ray_storing", "ray_env", "distributed",
        "submitit_local", "distributed_local_ray"])
def test_every_device_key_is_checked_naming_its_full_key(overrides, key):
    assert refusal(*overrides) == f"{key}=meta: " + META.format(key=key)


@pytest.mark.timeout(60)
@NO_CUDA
def test_a_rollout_buffer_on_cuda_without_cuda_is_refused():
    assert refusal("buffer.device=cuda") == (
        "buffer.device=cuda: this machine or this torch build has no CUDA (torch.cuda.is_available() is False); use "
        "buffer.device=cpu")
    assert refusal("collector=distributed", "collector.collector_kwargs.policy_device=cuda") == (
        "collector.collector_kwargs.policy_device=cuda: this machine or this torch build has no CUDA "
        "(torch.cuda.is_available() is False); use collector.collector_kwargs.policy_device=cpu")


@pytest.mark.timeout(60)
def test_the_hosts_of_a_cluster_have_their_own_devices():
    """A Ray cluster's actors, SLURM jobs: their nodes' devices, not this machine's."""
    for overrides in (["collector=ray", "collector.ray_address=auto"],
                      ["collector=distributed", "collector.start_workers_with=submitit"],
                      ["collector=distributed", "collector.start_workers_with=ray", "collector.ray_address=auto"]):
        cfg = composed(*overrides, "collector.collector_kwargs.policy_device=meta")
        assert "collector.collector_kwargs.policy_device" not in device_keys(cfg)
        check_config(cfg)
    assert device_keys(composed("collector=ray", "collector.collector_kwargs.policy_device=cpu",
                                "buffer.device=cpu")) == {"device": "cpu", "buffer.device": "cpu",
                                                          "collector.collector_kwargs.policy_device": "cpu"}


# ---------------------------------------------------------------------------- hosted collectors
@pytest.mark.timeout(60)
@pytest.mark.parametrize("collector, host", [("ray", "actor"), ("distributed", "worker")])
def test_a_hosted_multi_collector_needs_its_worker_processes_count(collector, host):
    for collector_class in ("multisync", "multiasync"):
        assert refusal(f"collector={collector}", f"collector.collector_class={collector_class}") == (
            f"collector.collector_class={collector_class} runs worker processes in each {host}: set their number, "
            "collector.collector_kwargs.num_workers (null), e.g. collector.collector_kwargs.num_workers=2")
        check_config(composed(f"collector={collector}", f"collector.collector_class={collector_class}",
                              "collector.collector_kwargs.num_workers=2"))


@pytest.mark.timeout(60)
@pytest.mark.parametrize("collector, host", [("ray", "actor"), ("distributed", "worker")])
def test_a_collector_kwargs_key_the_collector_class_does_not_take_is_refused(collector, host):
    assert refusal(f"collector={collector}", "collector.collector_kwargs.num_workers=2") == (
        f"collector.collector_kwargs.num_workers=2: not an argument of collector.collector_class=sync (Collector), "
        f"the collector each {host} runs: set collector.collector_class=multisync or multiasync (worker processes in "
        f"each {host}), or leave it null")
    assert refusal(f"collector={collector}", "collector.collector_kwargs.start_method=fork",
                   "collector.collector_kwargs.batch_timeout=5") == (
        "collector.collector_kwargs.batch_timeout=5.0, collector.collector_kwargs.start_method=fork: not arguments of "
        f"collector.collector_class=sync (Collector), the collector each {host} runs: set "
        f"collector.collector_class=multisync or multiasync (worker processes in each {host}), or leave them null")


@pytest.mark.timeout(60)
def test_a_hosted_worker_cpu_affinity_gives_one_list_per_worker_process():
    hosts = ["collector=distributed", "collector.collector_class=multisync", "collector.collector_kwargs.num_workers=2"]
    assert refusal(*hosts, "collector.collector_kwargs.worker_cpu_affinity=[[0]]") == (
        "collector.collector_kwargs.worker_cpu_affinity=[[0]] (collector.collector_kwargs.num_workers=2): must hold "
        "one non-empty list of CPU ids per worker process of each worker")


@pytest.mark.timeout(30)
def test_the_hosted_collectors_check_their_plans_in_plain_values():
    """``check_plan`` given a CollectionPlan, as a collector of one's own config would."""
    RayCollector.check_plan(CollectionPlan("ray", {}))
    RayCollector.check_plan(CollectionPlan("ray", {"collector_class": "multisync",
                                                    "collector_kwargs": {"num_workers": 3, "start_method": None}}))
    DistributedCollector.check_plan(CollectionPlan("distributed", {"collector_kwargs": {"num_workers": None}}))
    with pytest.raises(ConfigError, match=r"^collector\.collector_class=multiasync runs worker processes in each "
                                          r"worker: set their number"):
        DistributedCollector.check_plan(CollectionPlan("distributed", {"collector_class": "multiasync"}))
    with pytest.raises(ConfigError, match=r"^collector\.collector_kwargs\.cat_results=0: not an argument of "
                                          r"collector\.collector_class=multiasync \(MultiAsyncCollector\), the "
                                          r"collector each actor runs: set collector\.collector_class=multisync"):
        RayCollector.check_plan(CollectionPlan("ray", {"collector_class": "multiasync",
                                                       "collector_kwargs": {"num_workers": 2, "cat_results": 0}}))


@pytest.mark.timeout(30)
def test_actors_asking_for_more_gpus_than_the_ray_this_run_starts_has_are_refused():
    """A Ray the run starts (ray_address null) has this machine's GPUs: an actor asking for
    more would wait for them forever (Ray's autoscaler says so every half minute)."""
    more = torch.cuda.device_count() + 1
    with pytest.raises(ConfigError, match=rf"^collector\.remote_config\.num_gpus={more}: the Ray this run starts "
                                          rf"\(collector\.ray_address=null\) has this machine's "
                                          rf"{torch.cuda.device_count()} GPUs"):
        RayCollector.check_plan(CollectionPlan("ray", {"remote_config": {"num_gpus": more}}))
    RayCollector.check_plan(CollectionPlan("ray", {"remote_config": {"num_gpus": more},
                                                   "ray_address": "ray://cluster:10001"}))  # a cluster's own GPUs
    RayCollector.check_plan(CollectionPlan("ray", {"remote_config": {"num_gpus": torch.cuda.device_count()}}))


# ---------------------------------------------------------------------------- worker CPU affinity
@pytest.mark.timeout(60)
@pytest.mark.parametrize("collector", ["multisync", "multiasync", "action_server", "pool"])
def test_a_worker_cpu_affinity_is_one_list_of_this_process_s_cpus_per_worker(collector):
    available = sorted(os.sched_getaffinity(0))
    outside = max(available) + 1
    collector = [f"collector={collector}", "algo.minibatch_size=64"]  # multiasync's batches: 128 frames
    assert refusal(*collector, f"collector.worker_cpu_affinity=[[{outside}],[{outside + 1}]]") == (
        f"collector.worker_cpu_affinity=[[{outside}], [{outside + 1}]] (collector.num_workers=2): names CPUs "
        f"[{outside}, {outside + 1}] this process cannot use (available: {available})")
    assert refusal(*collector, "collector.worker_cpu_affinity=[[0]]") == (
        "collector.worker_cpu_affinity=[[0]] (collector.num_workers=2): must hold one non-empty list of CPU ids per "
        "worker (2), got [[0]]")
    assert refusal(*collector, f"collector.worker_cpu_affinity=[[{available[0]}],[]]").startswith(
        f"collector.worker_cpu_affinity=[[{available[0]}], []] (collector.num_workers=2): must hold one non-empty")
    check_config(composed(*collector, f"collector.worker_cpu_affinity=[[{available[0]}],[{available[-1]}]]"))


# ---------------------------------------------------------------------------- resume keys
@pytest.mark.timeout(30)
def test_a_resume_refuses_every_key_but_those_it_may_change():
    check_resume_keys(Path("runs/a"), RESUME_OVERRIDES)
    with pytest.raises(ConfigError) as refused:
        check_resume_keys(Path("runs/a"), ["total_frames", "collector.num_workers", "device"])
    assert str(refused.value) == (
        "resume=runs/a: collector.num_workers, device cannot change on resume (the run's config is built into its "
        f"checkpoint); a resumed run takes only {', '.join(RESUME_OVERRIDES)}")


# ---------------------------------------------------------------------------- the command line
CLI_REFUSALS = [
    (["device=meta"], "device=meta: " + META.format(key="device")),
    (["device=cpu:1"], "device=cpu:1: a CPU device has no index here (torch has one CPU device); use device=cpu"),
    (["collector=distributed", "collector.collector_kwargs.num_workers=2"],
     "collector.collector_kwargs.num_workers=2: not an argument of collector.collector_class=sync (Collector), the "
     "collector each worker runs: set collector.collector_class=multisync or multiasync (worker processes in each "
     "worker), or leave it null"),
    (["collector=multisync", "collector.worker_cpu_affinity=[[0]]"],
     "collector.worker_cpu_affinity=[[0]] (collector.num_workers=2): must hold one non-empty list of CPU ids per "
     "worker (2), got [[0]]"),
    # Hydra's own ERROR lines about the failed import were printed before this one
    (["env.wrappers=[{_target_:nosuchpkg.Wrap}]"],
     "env.wrappers[0]._target_=nosuchpkg.Wrap: not an importable callable (No module named 'nosuchpkg')"),
    # failed in gym.make as a build error (exit 1, a traceback file, the folder left)
    (["+env.make_kwargs.nosuch=1"],
     "make kwarg nosuch=1: CartPole-v1 takes no such argument (CartPoleEnv.__init__() got an unexpected keyword "
     "argument 'nosuch' was raised from the environment creator for CartPole-v1 with kwargs ({'nosuch': 1}))"),
]


# ---------------------------------------------------------------------------- what only list-stepped envs do
@pytest.mark.timeout(60)
def test_what_only_list_stepped_envs_do_is_refused_on_the_other_backends():
    """docs/envs.md's limits, said before the run (they failed in its first batches, or in a
    worker as it started)."""
    assert refusal("env.backend=sync", "collector.reset_when_done=false") == (
        "collector.reset_when_done=false leaves finished envs unreset, which needs env.backend=list (got "
        "env.backend=sync: it cannot step a finished env)")
    assert refusal("env.backend=vector", "collector=action_server", "collector.max_decorrelation_steps=10") == (
        "collector.max_decorrelation_steps=10: random steps per env need env.backend=list (got env.backend=vector: "
        "it steps all its envs at once)")
    check_config(composed("collector.reset_when_done=false"))
    check_config(composed("collector=action_server", "collector.max_decorrelation_steps=10"))


@pytest.mark.timeout(60)
def test_a_solved_return_is_a_number_or_null():
    assert refusal("env.solved_return=abc") == "env.solved_return=abc: a return (a number), or null for no threshold"
    assert refusal("env.solved_return={CartPole-v1: abc}") == (
        "env.solved_return.CartPole-v1=abc: a return (a number), or null for no threshold")
    check_config(composed("env.solved_return=100"))
    check_config(composed("env.solved_return=null"))


@pytest.mark.timeout(300)
def test_the_command_line_refuses_them_in_one_line_exit_2_leaving_nothing(tmp_path):
    folders = [tmp_path / str(index) for index in range(len(CLI_REFUSALS))]
    for folder in folders:
        folder.mkdir()
    results = rlcollect_all(folders, [["train", "total_frames=2048", "logger=none", "progress=false", *overrides,
                                       "hydra.run.dir=run"] for overrides, _ in CLI_REFUSALS], at_once=2)
    for folder, (overrides, message), result in zip(folders, CLI_REFUSALS, results):
        assert result.returncode == 2, (overrides, result.stderr)
        assert result.stderr.splitlines() == [f"rlcollect train: invalid configuration: {message}"], overrides
        assert not (folder / "run").exists() and list(folder.iterdir()) == [], overrides


# ---------------------------------------------------------------------------- combinations that train, warned
@pytest.mark.timeout(60)
def test_workers_left_with_their_first_weights_are_warned_of(caplog):
    """weight_sync=none with a collector that sends its workers weights (multisync,
    multiasync, ray): every batch comes from the first weights; a collector whose policy
    runs in the training process, or that sends weights itself (distributed), is not."""
    import logging

    from rlcollect.pipeline.checks import warn_combination

    def warnings(*overrides):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="rlcollect.pipeline.checks"):
            warn_combination(composed(*overrides))
        return [record.getMessage() for record in caplog.records]

    assert warnings("collector=multisync", "weight_sync=none") == [
        "weight_sync=none: the workers of collector=multisync keep the policy's first weights, so every batch is "
        "collected with them whatever ppo learns; leave weight_sync at its default to send them the new weights"]
    assert warnings("collector=multisync", "weight_sync=none", "algo=dqn")[0].startswith(
        "weight_sync=none: the workers of collector=multisync keep the policy's first weights")
    assert warnings("collector=multisync") == []
    assert warnings("weight_sync=none") == []  # the sync collector's policy is the trainer's
    assert warnings("collector=distributed") == []  # weight_sync=none: it sends the weights itself
