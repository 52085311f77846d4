"""Starting or joining Ray, on loopback unless told otherwise.

A Ray instance started here binds 127.0.0.1 only, sends no usage report and never probes a
cloud-metadata address (``loopback_ray_env``); joining a cluster by address is Ray's own
``ray.init``. Ray itself is imported only when one of these runs. A local instance is
ended with its driver even when the driver is killed (``watchdog.py``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import functools
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid

from rlcollect.collectors.ray import watchdog
from rlcollect.errors import ConfigError, MissingDependencyError

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


def join_ray(ray, address: str, key: str = "collector.ray_address") -> None:
    """Connect this process to the running Ray at ``address`` (``"auto"``, ``host:port``,
    ``ray://...``), keeping 127.0.0.1 as this node's IP when the address is loopback. Where
    nothing answers, a one-line ConfigError naming ``key``: ``ray.init`` would wait on a
    ``host:port`` that nobody listens on for good, retrying, so such an address is first
    tried with a plain TCP connection (5 s)."""
    host, _, port = address.rpartition(":")
    if host and port.isdigit() and "://" not in address:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=5.0).close()
        except OSError as error:
            raise ConfigError(f"{key}={address}: nothing answers at that address ({error.strerror or error}); "
                              f"start a Ray head there (ray start --head --port={port}) or leave {key}=null for "
                              "a local one") from None
    with loopback_node_ip(ray) if is_loopback_address(address) else contextlib.nullcontext():
        try:
            ray.init(address=address, logging_level=logging.WARNING)
        except ConnectionError as error:  # no Ray there ("auto" with none running, a head not up)
            raise ConfigError(f"{key}={address}: no running Ray to join there ({str(error).splitlines()[0]}); "
                              f"start one (ray start --head) or leave {key}=null for a local one") from None


def import_ray():
    try:
        import ray
    except ImportError as error:
        raise MissingDependencyError(INSTALL_HINT) from error
    return ray


@functools.lru_cache(maxsize=None)
def remote_class(cls):
    return import_ray().remote(cls)


@dataclasses.dataclass
class Watchdog:
    """A running ``watchdog.py``: its pid, and the write end of its stdin (open while the instance
    should live). No Popen: one still running at exit would warn (ResourceWarning)."""

    pid: int
    fd: int
    owner: int  # the process that started it (its parent)


_watchdog: Watchdog | None = None  # of the local instance started last


def start_watchdog(token: str) -> Watchdog | None:
    """Start ``watchdog.py``: once this process is gone (or ``stop_watchdog``), it SIGKILLs the
    processes of the instance marked with ``token`` (``session_marker``). In a session of its own,
    so that a signal to this process's group (Ctrl-C) leaves it to do that. Linux only (/proc)."""
    if not sys.platform.startswith("linux"):
        return None
    read_end, write_end = os.pipe()  # neither inherited by the processes Ray starts
    if read_end < 3:  # this process has no stdin (or stdout): keep the DUP2 below a real dup
        read_end, low = fcntl.fcntl(read_end, fcntl.F_DUPFD_CLOEXEC, 3), read_end
        os.close(low)
    try:
        pid = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", watchdog.__file__, token, str(os.getpid())],
                             os.environ, file_actions=[(os.POSIX_SPAWN_DUP2, read_end, 0),
                                                       (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0)],
                             setsid=True)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return Watchdog(pid, write_end, os.getpid())


def tell_watchdog_session_dir(guard: Watchdog | None, ray) -> None:
    """Send the watchdog the session directory of the instance this process is connected to: it
    ends the processes of the instance titled ``ray::...`` that keep files open there."""
    if guard is None:
        return
    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    session_dir = node.get_session_dir_path() if node is not None else None
    if session_dir:
        try:
            os.write(guard.fd, os.fsencode(session_dir) + b"\n")
        except OSError:  # the watchdog is gone: nothing ends the instance with us, as before
            pass


def stop_watchdog(guard: Watchdog | None, timeout: float = 30.0) -> None:
    """Let the watchdog end what is left of its instance (nothing, after ``ray.shutdown()``), and reap it."""
    if guard is None:
        return
    os.close(guard.fd)
    if guard.owner != os.getpid():  # a copy inherited through fork: the watchdog is not our child
        return
    deadline = time.monotonic() + timeout
    try:
        while os.waitpid(guard.pid, os.WNOHANG) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(guard.pid, signal.SIGKILL)
                os.waitpid(guard.pid, 0)
                return
            time.sleep(0.05)
    except ChildProcessError:  # reaped already (SIGCHLD ignored here, or an os.wait() elsewhere)
        pass


@contextlib.contextmanager
def session_marker(token: str):
    """``RLCOLLECT_RAY_SESSION=token`` in os.environ while a local Ray starts: each of its processes
    inherits it, which is how the watchdog tells them from any other process."""
    saved = os.environ.get(watchdog.SESSION_VARIABLE)
    os.environ[watchdog.SESSION_VARIABLE] = token
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(watchdog.SESSION_VARIABLE, None)
        else:
            os.environ[watchdog.SESSION_VARIABLE] = saved


@contextlib.contextmanager
def own_stop_signals():
    """This process's SIGINT and SIGTERM handlers as they were before the block: ray.init
    puts its own on SIGTERM (``sys.exit``), where rlcollect's stop the run after its batch
    (rlcollect/commands/jobs.py), or, while a run starts, end it in one line."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in handlers.items():
            if handler is not None:  # None: set outside Python, left as it is
                signal.signal(number, handler)


def start_local_ray(num_cpus: int | None = None) -> None:
    """Start a Ray instance on this machine, bound to loopback (``loopback_ray_env()``), no
    dashboard, and connect this process to it (``ray.shutdown()`` stops it). ``num_cpus``
    logical CPUs, at least os.cpu_count(). What RayCollector(ray_address=None) does.

    Its processes end with this one, however it ends: a watchdog process (``watchdog.py``)
    ends them within a second or so of a SIGKILL of this process, where Ray's agents would
    otherwise outlive it by a minute."""
    global _watchdog
    ray = import_ray()
    if _watchdog is not None and not ray.is_initialized():  # the previous local instance was shut down
        stop_watchdog(_watchdog)
        _watchdog = None
    token = uuid.uuid4().hex
    guard = start_watchdog(token)  # before the token is in os.environ: the watchdog is no part of the session
    try:
        with loopback_environment(ray), session_marker(token), own_stop_signals():
            ray.init(address="local", num_cpus=max(os.cpu_count() or 1, num_cpus or 0), include_dashboard=False,
                     _node_ip_address="127.0.0.1", logging_level=logging.WARNING)
    except BaseException:
        stop_watchdog(guard)  # ends whatever the failed start left running
        raise
    tell_watchdog_session_dir(guard, ray)
    node_ip = ray.util.get_node_ip_address()
    if node_ip != "127.0.0.1":  # a Ray version that ignores these settings: never run exposed
        ray.shutdown()
        stop_watchdog(guard)
        raise RuntimeError(f"the local Ray instance came up on {node_ip}, not 127.0.0.1: export "
                           "rlcollect.collectors.ray.loopback_ray_env() before Python starts")
    _watchdog = guard
