"""The checks a schema declares beside its fields: a numeric field's range (``ranged``) and a
field's choices (``chosen``), both checked by ``check_ranges`` before torch loads (a value
outside them is a ConfigError naming the key); and the keys kept for a release under their
old names (``renamed``), whose values ``rename_keys`` moves to the new keys."""
from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any, Collection, Iterator

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from rlcollect.config.registry import SCHEMAS
from rlcollect.errors import ConfigError
from rlcollect.validation import Choices, Range

RANGE = "range"  # a numeric field's metadata: the Range its value (each value, for a list) must be in
CHOICES = "choices"  # a field's metadata: the Choices its value must be one of
RENAMED = "renamed"  # a deprecated field's metadata: the key of the same node that replaced it


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


def renamed(new: str, spec: str | None = None, values: tuple | None = None) -> Any:
    """A key that was renamed ``new`` (a key of the same schema), declared for one more
    release so that a config naming it still composes: default None (not set); a value given
    is checked against the new key's range ``spec`` or choices ``values``, then moved to
    ``new`` by ``rename_keys`` (the pipeline does it, with a warning). The class the node
    builds takes the old name too, as a deprecated keyword (rlcollect.moved.RENAMED_ARGUMENTS)."""
    metadata: dict[str, Any] = {RENAMED: new}
    if spec is not None:
        metadata[RANGE] = Range.parse(spec)
    if values is not None:
        metadata[CHOICES] = Choices(tuple(values))
    return field(default=None, metadata=metadata)


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


def check_ranges(cfg: DictConfig, skip: Collection[str] = ()) -> None:
    """Every numeric option in the range its schema declares (``config.ranged``), each
    entry of a list of numbers too, and every option with choices one of them
    (``config.chosen``): a ConfigError naming the key and the range, or the choices and the
    closest of them. The keys ``skip`` names (``algo.lr``) are not checked."""
    for path, node in schema_nodes(cfg, ""):
        prefix = f"{path}." if path else ""
        for schema_field in dataclasses.fields(OmegaConf.get_type(node)):
            allowed = schema_field.metadata.get(RANGE, schema_field.metadata.get(CHOICES))
            if allowed is None or schema_field.name not in node or OmegaConf.is_missing(node, schema_field.name) \
                    or f"{prefix}{schema_field.name}" in skip:
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


def renamable_nodes(node: DictConfig, path: str) -> Iterator[tuple[str, DictConfig, type]]:
    """``(path, node, schema)`` for ``node`` and the nodes under it that have a schema: typed
    by it, or (a config read back from a run folder, untyped) naming its ``_target_``."""
    schema = OmegaConf.get_type(node)
    if not dataclasses.is_dataclass(schema):
        target = node.get("_target_") if "_target_" in node and not OmegaConf.is_missing(node, "_target_") else None
        schema = next((candidate for candidate in SCHEMAS.values()
                       if target is not None and getattr(candidate, "_target_", None) == target), None)
    if schema is not None:
        yield path, node, schema
    for key in node.keys():
        if key == "hydra" or OmegaConf.is_missing(node, key):
            continue
        try:
            child = node.get(key)
        except InterpolationResolutionError:
            continue
        if isinstance(child, DictConfig):
            yield from renamable_nodes(child, f"{path}.{key}" if path else str(key))


def rename_keys(cfg: DictConfig, given: Collection[str] = ()) -> list[str]:
    """Move the value of every renamed key that is set (``renamed``) to its new key, in
    ``cfg`` itself (the old key is left None); one message per key moved, for the caller to
    warn with. A ConfigError when the new key was set too, to another value than the old
    key's: set to another value than its default, or named in ``given`` (the keys the
    command line sets: one set to its default is told from one not set only there)."""
    messages = []
    for path, node, schema in renamable_nodes(cfg, ""):
        prefix = f"{path}." if path else ""
        fields = {schema_field.name: schema_field for schema_field in dataclasses.fields(schema)}
        for old, schema_field in fields.items():
            new = schema_field.metadata.get(RENAMED)
            if new is None or old not in node or OmegaConf.is_missing(node, old) or node[old] is None:
                continue
            value = node[old]
            default = fields[new].default
            current = node[new] if new in node else None
            if current is not None and current != value and (current != default or f"{prefix}{new}" in given):
                raise ConfigError(f"{prefix}{old}={value!r} and {prefix}{new}={current!r}: {old} is the old name of "
                                  f"{new}; set {prefix}{new} only")
            node[new] = value
            node[old] = None
            messages.append(f"{prefix}{old} is deprecated: it is {prefix}{new} now ({prefix}{new}={value!r} is "
                            "used); the old key will be removed in a future release")
    return messages
