"""A process that has imported what every ``rlcollect`` command imports (torch, tensordict,
Hydra, gymnasium, W&B, the pipeline) and forks a child of its own for each command it is sent:
each child is ``python -m rlcollect.cli <args>`` as a shell starts it (its folder first on
sys.path, its environment, its stdin /dev/null, stdout and stderr to files, the interpreter's
own exit: atexit handlers, exit code, a traceback and 1 for an uncaught error), less the
seconds of imports (tests/commands.py).

Protocol, one JSON object a line: a request on stdin ``{"id", "args", "cwd", "env", "out",
"err"}``; on stdout ``{"id", "pid"}`` once its child is forked and ``{"id", "status"}``
(``os.waitpid``'s status) once the child has ended. EOF on stdin ends the server."""
import json
import os
import runpy
import select
import sys

# set by a module's import (gymnasium's: pygame then prints no banner on stdout); a command that imports it sets it too
SET_BY_PRELOADS = ("PYGAME_HIDE_SUPPORT_PROMPT",)
SERVER_PYTHONPATH = os.environ.get("PYTHONPATH", "").split(os.pathsep)  # on sys.path already


def preload() -> None:
    """Import what the commands import, in the order `rlcollect train` does (W&B's modules
    before torch: rlcollect/logging/wandb_start.py), without running anything (no RNG drawn,
    no Python thread started; torch's import starts a native one, which a fork leaves behind)."""
    from importlib import import_module

    from rlcollect.logging.wandb_start import INIT_IMPORTS

    for name in INIT_IMPORTS:
        import_module(name)
    import gymnasium  # noqa: F401
    import hydra  # noqa: F401
    import omegaconf  # noqa: F401
    import tensordict  # noqa: F401
    import torch  # noqa: F401

    import rlcollect.cli  # noqa: F401
    import rlcollect.commands.train  # noqa: F401
    import rlcollect.pipeline  # noqa: F401


def reply(message: dict) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())  # unbuffered: a child forked later inherits no pending bytes


def serve() -> dict | None:
    """Fork a child for each request and report its pid and its end; returns, in a child,
    the request it runs (None in the server at EOF)."""
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (request id, pid)
    pending = b""
    while True:
        readable, _, _ = select.select([0, *children], [], [])
        for fd in readable:
            if fd != 0:  # a child ended
                request_id, pid = children.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                reply({"id": request_id, "status": status})
                continue
            chunk = os.read(0, 1 << 16)
            if not chunk:
                return None
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                pid = os.fork()
                if pid == 0:
                    for pidfd in children:
                        os.close(pidfd)
                    return request
                children[os.pidfd_open(pid)] = (request["id"], pid)
                reply({"id": request["id"], "pid": pid})


def become(request: dict) -> None:
    """This child as the process ``python -m rlcollect.cli <args>`` started in the request's
    folder with its environment."""
    os.chdir(request["cwd"])
    preloaded = {key: os.environ[key] for key in SET_BY_PRELOADS if key in os.environ}
    os.environ.clear()
    os.environ.update(request["env"])
    os.environ.update(preloaded)  # what the modules this server imported set, as they would in the command
    # sys.path as `python -m` makes it: the folder first, then PYTHONPATH, then the interpreter's own
    extra = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if entry and entry not in SERVER_PYTHONPATH]
    sys.path[:1] = [os.getcwd(), *extra]
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                            (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        opened = os.open(path, flags, 0o644)
        os.dup2(opened, fd)
        os.close(opened)
    sys.argv = ["rlcollect", *request["args"]]
    # numpy's global generator, seeded from the OS as a new interpreter's is (a fork copies the server's; Python's
    # random module reseeds itself in a child, numpy's does not)
    sys.modules["numpy"].random.seed()


if __name__ == "__main__":
    preload()
    request = serve()
    if request is not None:  # a child: run the command as the process's main module, and exit as it exits
        become(request)
        del sys.modules["rlcollect.cli"]  # imported here only to load what it loads: `-m` runs it as __main__ alone
        runpy.run_module("rlcollect.cli", run_name="__main__", alter_sys=True)
