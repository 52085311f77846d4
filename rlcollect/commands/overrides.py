"""The command line of ``rlcollect train``: a ``resume=<run>`` line made to run in that run's
folder, the overrides a resumed run takes, and one line for an override Hydra cannot apply
(the key, the options, the extra that installs a missing plugin, the keys it may have meant)."""
from __future__ import annotations

import difflib
from pathlib import Path

from hydra.errors import (
    MissingConfigException,
    OverrideParseException,
)
from omegaconf import DictConfig, OmegaConf

from rlcollect.config.values import check_resume_keys
from rlcollect.errors import ConfigError
from rlcollect.run_files import CONFIG_FILE


def resume_overrides(task_overrides, cfg: DictConfig) -> dict:
    """``{key: value}`` of the config keys given on a ``resume=`` command line (besides
    ``resume`` and Hydra's own), their values as composed."""
    keys = [override.split("=", 1)[0].lstrip("+~") for override in task_overrides]
    return {key: OmegaConf.select(cfg, key) for key in keys if key != "resume" and not key.startswith("hydra.")}


def quoted(value: str) -> str:
    """``value`` as a quoted Hydra override value (a path holding ``=`` or ``,``, as a
    sweep member's folder does, is then one string, not a sweep)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def unquoted(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
        return value[1:-1].replace("\\" + value[0], value[0]).replace("\\\\", "\\")
    return value


RESUME_FOLDER_KEYS = ("hydra.run.dir=", "hydra.output_subdir=", "hydra.job.chdir=")  # where a run's records go


def in_resumed_run_folder(args: list[str]) -> list[str]:
    """A ``resume=<run>`` command line runs in that run folder, not a new outputs/<date>/<time>/,
    leaving its .hydra/ as the first part wrote it and logging to its job log only once the
    resume is known to start (``keep_log_in``). The folder is passed quoted, so any folder
    name works (a sweep member's ``multirun/.../algo.lr=0.001,seed=1`` included). An
    override that would move where it writes (``RESUME_FOLDER_KEYS``), or of a key a resume
    cannot change (``check_resume_keys``), is a ConfigError."""
    resume = [index for index, arg in enumerate(args) if arg.startswith("resume=")]
    if not resume:
        return args
    folder = unquoted(args[resume[-1]].split("=", 1)[1])
    args = [*args[:resume[-1]], f"resume={quoted(folder)}", *args[resume[-1] + 1:]]
    moved = [arg for arg in args if arg.startswith(RESUME_FOLDER_KEYS)]
    if moved:  # Hydra would write its records (.hydra/, the job log) there: another run's folder, or a new one
        raise ConfigError(f"resume={folder}: {moved[0]}: a resumed run continues in its own folder; leave "
                          f"{moved[0].split('=', 1)[0]} out")
    if (Path(folder) / CONFIG_FILE).is_file():  # a run's (what else it is, is said later)
        # keys of the run's own config (collector.num_workers of a multisync run) before Hydra composes the default one
        check_resume_keys(folder, [arg.split("=", 1)[0].lstrip("+~") for arg in args if "=" in arg and not
                                   arg.startswith(("-", "resume=", "hydra.", "hydra/", "+hydra", "~hydra"))])
    return [*args, f"hydra.run.dir={quoted(folder)}", "hydra.output_subdir=null", "hydra/job_logging=stdout"]


# Hydra's flags that each make the command do one thing (run, sweep, print the config, ...): one at a time
MODE_FLAGS = {"--run": "--run", "-r": "--run", "--multirun": "--multirun", "-m": "--multirun", "--cfg": "--cfg",
              "-c": "--cfg", "--info": "--info", "-i": "--info", "--shell-completion": "--shell-completion",
              "-sc": "--shell-completion"}


def one_mode(args: list[str]) -> None:
    """A ConfigError naming two of Hydra's mode flags given together (``--multirun --cfg
    job``), which Hydra refuses with a traceback."""
    modes = list(dict.fromkeys(MODE_FLAGS[arg] for arg in args if arg in MODE_FLAGS))
    if len(modes) > 1:
        raise ConfigError(f"{modes[0]} and {modes[1]} do not go together: give one of them")


def one_value_each(args: list[str]) -> None:
    """A ConfigError naming the first of ``args`` (a resume's overrides) that sweeps over
    values (``total_frames=4096,8192``, ``choice(...)``): a resume continues a run, or a
    sweep, with one value per key."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    parser = OverridesParser.create()
    for arg in args:
        if arg.startswith("resume=") or arg.startswith("-"):
            continue
        try:
            sweeps = parser.parse_override(arg).is_sweep_override()
        except OverrideParseException:
            continue  # said by whatever reads it next, as for any command
        if sweeps:
            raise ConfigError(f"{arg}: a resume continues a run (or a sweep) with one value per key; to train "
                              "several values, sweep them into a new folder")


def override_error_line(error: Exception) -> str:
    """One line for an override Hydra could not apply, naming it, with the options or the
    closest keys where there are some."""
    if isinstance(error, MissingConfigException):
        first = str(error).splitlines()[0].split(": ", 1)[-1]  # "In 'train': Could not find 'collector/x'"
        options = f" (options: {', '.join(error.options)})" if error.options else ""
        extra = plugin_extra(error.missing_cfg_file)
        if extra is not None:  # a launcher or sweeper whose Hydra plugin is not installed
            group, _, option = error.missing_cfg_file.rpartition("/")
            return (f"missing dependency: {group}={option} is a Hydra plugin of the {extra} extra, not installed: "
                    f"pip install 'rlcollect[{extra}]'{options.replace('options', 'installed options', 1)}")
        group, _, option = (error.missing_cfg_file or "").rpartition("/")
        if group == "hydra/sweeper/sampler":  # the Optuna sweeper's (installed: plugin_extra said None)
            installed = ", ".join(error.options)
            return f"invalid override: {group}={option}: no such sampler (installed samplers: {installed})"
        return f"invalid override: {first}{options}"
    if isinstance(error, OverrideParseException):
        return f"invalid override {error.override!r}: {str(error).splitlines()[0]}"
    cause = error.__cause__
    full_key = getattr(cause, "full_key", None)
    if cause is None or full_key is None:
        return f"invalid override: {' '.join(str(error).split())}"
    line = f"invalid override {full_key}: {str(cause).splitlines()[0]}"
    if "not in" not in line:
        return line
    parent = getattr(cause, "parent_node", None)
    if isinstance(parent, DictConfig) and OmegaConf.get_type(parent) is dict and "." in full_key:
        # a key new to a mapping of the config's own (a preset's {env id: value}), not a schema's: added with a +
        mapping = full_key.rpartition(".")[0]
        return f"{line} ({mapping} is a mapping: a key new to it is added with a +, +{full_key}=...)"
    similar = similar_keys(parent, full_key)  # an unknown key: what it may have meant
    if "." in full_key:  # a top-level key of the unknown one's name: said as such, not as its own name again
        similar = [key if "." in key else f"{key} (a top-level key)" for key in similar]
    hint = f"did you mean {' or '.join(similar)}?" if similar else "`rlcollect train --cfg job` lists the keys"
    return f"{line} ({hint})"


# the Hydra plugins that extras of pyproject.toml install: the configs they bring (a path prefix) -> the extra
PLUGIN_EXTRAS = {"hydra/launcher/ray": "raylauncher", "hydra/launcher/joblib": "sweep",
                 "hydra/launcher/submitit_": "slurm", "hydra/sweeper/optuna": "tune", "hydra/sweeper/sampler/": "tune"}


def plugin_extra(missing: str | None) -> str | None:
    """The extra whose Hydra plugin brings the config ``missing`` (``hydra/launcher/ray``:
    raylauncher; hydra/sweeper=tune_ppo builds on the Optuna sweeper's), else None. A group
    of the plugin's whose every option it brings (``hydra/sweeper/sampler/``) names its extra
    only while the plugin is not installed: with it, ``hydra/sweeper/sampler=nosuch`` is an
    unknown sampler, said with the installed ones."""
    import importlib.util

    extra = next((extra for prefix, extra in PLUGIN_EXTRAS.items() if missing and missing.startswith(prefix)), None)
    if extra == "tune" and missing.startswith("hydra/sweeper/sampler/") and importlib.util.find_spec(
            "hydra_plugins.hydra_optuna_sweeper") is not None:
        return None
    return extra


def similar_keys(node, full_key: str) -> list[str]:
    """Keys of the config ``node`` belongs to that ``full_key`` may have meant: the same name
    elsewhere in the config, else close spellings beside it."""
    if not isinstance(node, DictConfig):
        return []
    root = node._get_root() if hasattr(node, "_get_root") else node  # omegaconf 2.3 gives no public accessor
    paths = []

    def walk(config: dict, prefix: str) -> None:
        for key, value in config.items():
            paths.append(f"{prefix}{key}")
            if isinstance(value, dict):
                walk(value, f"{prefix}{key}.")

    walk({key: value for key, value in OmegaConf.to_container(root, resolve=False).items() if key != "hydra"}, "")
    parent, _, name = full_key.rpartition(".")
    same_name = [path for path in paths if path.rpartition(".")[2] == name]
    siblings = {path.rpartition(".")[2]: path for path in paths if path.rpartition(".")[0] == parent}
    return same_name[:2] or [siblings[key] for key in difflib.get_close_matches(name, siblings, n=2, cutoff=0.6)]
