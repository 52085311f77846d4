"""The checks a schema declares beside its fields: a numeric field's range (``ranged``) and a
field's choices (``chosen``), both checked by ``check_ranges`` before torch loads (a value
outside them is a ConfigError naming the key)."""
from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Iterator

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from rlcollect.errors import ConfigError
from rlcollect.validation import Choices, Range

RANGE = "range"  # a numeric field's metadata: the Range its value (each value, for a list) must be in
CHOICES = "choices"  # a field's metadata: the Choices its value must be one of


def ranged(default: Any, spec: str) -> Any:
    """A numeric field (or a list of numbers) with ``default`` whose values must be in the
    range ``spec`` (validation.Range: ``">= 1"``, ``"(0, 1]"``, ``"any"``...); checked by
    before a run is built (``check_ranges``)."""
    metadata = {RANGE: Range.parse(spec)}
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def chosen(default: Any, values: tuple) -> Any:
    """A field with ``default`` whose value must be one of ``values`` (None, where the
    field allows it, is "not set"); checked with the ranges (``check_ranges``). ``values``
    is the tuple the class checks its argument against (rlcollect/choices.py), so the
    choices are declared once."""
    return field(default=default, metadata={CHOICES: Choices(tuple(values))})


def schema_nodes(node: DictConfig, path: str) -> Iterator[tuple[str, DictConfig]]:
    """``(path, node)`` for ``node`` and the nodes under it that are typed by a schema."""
    if dataclasses.is_dataclass(OmegaConf.get_type(node)):
        yield path, node
    for key in node.keys():
        if key == "hydra" or OmegaConf.is_missing(node, key):
            continue
        try:
            child = node.get(key)
        except InterpolationResolutionError:  # options that do not go together: the pipeline's checks say which
            continue
        if isinstance(child, DictConfig):
            yield from schema_nodes(child, f"{path}.{key}" if path else str(key))


def check_ranges(cfg: DictConfig) -> None:
    """Every numeric option in the range its schema declares (``config.ranged``), each
    entry of a list of numbers too, and every option with choices one of them
    (``config.chosen``): a ConfigError naming the key and the range, or the choices and the
    closest of them."""
    for path, node in schema_nodes(cfg, ""):
        prefix = f"{path}." if path else ""
        for schema_field in dataclasses.fields(OmegaConf.get_type(node)):
            allowed = schema_field.metadata.get(RANGE, schema_field.metadata.get(CHOICES))
            if allowed is None or schema_field.name not in node or OmegaConf.is_missing(node, schema_field.name):
                continue
            try:
                value = node[schema_field.name]
            except InterpolationResolutionError:  # options that do not go together: the pipeline's checks say which
                continue
            if isinstance(value, ListConfig):
                if any(entry not in allowed for entry in value):
                    raise ConfigError(f"{prefix}{schema_field.name}={list(value)}: every entry must be {allowed}")
            else:
                allowed.check(f"{prefix}{schema_field.name}", value)
