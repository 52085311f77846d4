"""Starting or joining Ray, on loopback unless told otherwise.

A Ray instance started here binds 127.0.0.1 only, sends no usage report and never probes a
cloud-metadata address (``loopback_ray_env``); joining a cluster by address is Ray's own
``ray.init``. Ray itself is imported only when one of these runs.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import os

INSTALL_HINT = "RayCollector needs Ray: pip install 'rlcollect[ray]' (or pip install ray)"


def loopback_ray_env() -> dict[str, str]:
    """Environment under which a Ray instance started on this machine binds and talks to
    loopback only: node IP 127.0.0.1, no usage report, and the cloud-metadata probe
    (169.254.169.254) and any other HTTP(S) request sent to a closed loopback port.
    Set it before Ray starts (``ray start`` or ``ray.init``); it also stops this node from
    joining a multi-node cluster, so use it for local instances only."""
    proxy, local = "http://127.0.0.1:9", "127.0.0.1,localhost,::1"
    return {
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # Ray then takes 127.0.0.1 as this node's IP
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_USAGE_STATS_REPORT_URL": f"{proxy}/",  # `ray start` reports "disabled" to usage-stats.ray.io otherwise
        "RAY_AUTH_MODE": "disabled",
        "http_proxy": proxy, "HTTP_PROXY": proxy, "https_proxy": proxy, "HTTPS_PROXY": proxy,
        "no_proxy": local, "NO_PROXY": local,
    }


@contextlib.contextmanager
def loopback_node_ip(ray):
    """Let Ray keep 127.0.0.1 as this node's IP while it starts or connects.

    Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER once, when it is imported; unless it was 0
    then, ``ray.init`` rewrites 127.0.0.1 (as ``_node_ip_address`` or in an address) into
    the machine's external IP, and a local instance binds every interface. When ray was
    imported without it, its constant is switched for the duration.
    """
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    saved = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if saved is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if saved is not None:
            constants.ENABLE_RAY_CLUSTER = saved


@contextlib.contextmanager
def loopback_environment(ray):
    """``loopback_ray_env()`` in os.environ while a local Ray starts (the processes it
    starts inherit it), then the caller's environment back, so the driver's own HTTP is
    left alone."""
    saved = {name: os.environ.get(name) for name in loopback_ray_env()}
    os.environ.update(loopback_ray_env())
    try:
        with loopback_node_ip(ray):
            yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def is_loopback_address(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]") if ":" in address else address
    return host in ("localhost", "127.0.0.1", "::1")


def import_ray():
    try:
        import ray
    except ImportError as error:
        raise ImportError(INSTALL_HINT) from error
    return ray


@functools.lru_cache(maxsize=None)
def remote_class(cls):
    return import_ray().remote(cls)


def start_local_ray(num_cpus: int | None = None) -> None:
    """Start a Ray instance on this machine, bound to loopback (``loopback_ray_env()``), no
    dashboard, and connect this process to it (``ray.shutdown()`` stops it). ``num_cpus``
    logical CPUs, at least os.cpu_count(). What RayCollector(ray_address=None) does."""
    ray = import_ray()
    with loopback_environment(ray):
        ray.init(address="local", num_cpus=max(os.cpu_count() or 1, num_cpus or 0), include_dashboard=False,
                 _node_ip_address="127.0.0.1", logging_level=logging.WARNING)
    node_ip = ray.util.get_node_ip_address()
    if node_ip != "127.0.0.1":  # a Ray version that ignores these settings: never run exposed
        ray.shutdown()
        raise RuntimeError(f"the local Ray instance came up on {node_ip}, not 127.0.0.1: export "
                           "rlcollect.collectors.ray.loopback_ray_env() before Python starts")
