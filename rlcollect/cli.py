"""The `rlcollect` command: `train`, `compare`, `eval`, `export` (rlcollect/commands/)."""
from __future__ import annotations

import os
import select
import signal
import sys

USAGE = """usage: rlcollect <command> [args]

commands:
  train [overrides]   train with the Hydra config tree (conf/train.yaml); e.g.
                        rlcollect train collector.frames_per_batch=512 seed=1
                        rlcollect train --multirun seed=0,1,2
                        rlcollect train resume=outputs/<date>/<time>   (continue a run)
                        rlcollect train resume=multirun/<date>/<time>  (continue a sweep)
                      `rlcollect train --help` lists the config groups and options.
  compare PATH...     compare run folders, sweeps or folders of runs (seeds pooled); e.g.
                        rlcollect compare multirun/2026-01-01/12-00-00 --plot curves.png
  eval RUN...         evaluate a trained run's policy again; e.g.
                        rlcollect eval outputs/<date>/<time> --episodes 20 --video
  export RUN          the run's policy as a standalone TorchScript or ONNX file; e.g.
                        rlcollect export outputs/<date>/<time> --format onnx
`rlcollect <command> --help` tells more.
"""

COMMANDS = {
    "train": ("rlcollect.commands.train", "run_train"),
    "compare": ("rlcollect.commands.compare", "compare"),
    "eval": ("rlcollect.commands.evaluate", "evaluate"),
    "export": ("rlcollect.commands.export", "export"),
}


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` names (None: this process's command line, ``sys.argv``:
    the process ends once it returns, its objects left to the OS, see ``exit_soon``)."""
    if argv is not None:
        return dispatch(argv)
    try:
        return dispatch(sys.argv[1:])
    finally:
        exit_soon()


def dispatch(argv: list[str]) -> int:
    """The command ``argv`` names, run; the usage for none, or for -h / --help."""
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"rlcollect: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    from rlcollect.commands.terminated import interrupt_exit_code, take_sigterm_as_interrupt

    take_sigterm_as_interrupt()
    try:
        return run_command(command, rest)
    except KeyboardInterrupt as error:  # Ctrl-C (or SIGTERM) while the command loads: one line, no traceback
        print(f"rlcollect {command}: interrupted", file=sys.stderr)
        return interrupt_exit_code(error)


def run_command(command: str, args: list[str]) -> int:
    """The command's function (imported only now: `rlcollect --help` loads nothing) on ``args``."""
    from importlib import import_module

    module, function = COMMANDS[command]
    try:
        code = getattr(import_module(module), function)(args)
        sys.stdout.flush()  # what is still buffered meets a closed pipe here, not at exit
    except BrokenPipeError:
        if not stdout_reader_gone():  # another pipe (a worker's, a socket): not ours to quieten
            raise
        return quiet_closed_stdout()
    return code


def stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it (``rlcollect eval ... | head -c 10``
    after head exited): the pipe then polls as an error."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll here, or stdout is no file
        return False


def quiet_closed_stdout() -> int:
    """Stop writing to a stdout whose reader went away, without a traceback: stdout is
    pointed at os.devnull (so that the interpreter's last flush does not fail again) and the
    command exits 141 (128 + SIGPIPE), as a program killed by SIGPIPE does in a shell pipe
    (the Python docs' recipe, "Note on SIGPIPE")."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


def exit_soon() -> None:
    """The command is done and the process exits next: the garbage collector stops tracking
    every object there is (``gc.freeze``). As it exits, Python runs a full collection
    several times over everything still alive: after a default ``rlcollect train`` (torch,
    tensordict, W&B), 0.6-1.7 s here, against 0.2-0.3 s frozen, for memory the OS takes
    back anyway. Everything a command opens it closes before it returns (files, the W&B run,
    worker processes); atexit handlers, logging's flush included, still run, and objects
    freed by their reference counts still are. What a frozen object loses is a collection
    of the reference cycle it may be in, which Python does not promise at exit either."""
    import gc

    gc.freeze()


if __name__ == "__main__":
    sys.exit(main())
