"""YAML as kevlike's files use it (training configs and overrides, ``--costs`` files): PyYAML's safe loader, a
mapping that repeats a key refused (YAML 1.2 forbids it; PyYAML keeps the last), numbers like ``1e-4`` read as
floats (YAML 1.1 reads an exponent without a dot as a string), and errors as one line naming the place."""

from __future__ import annotations

import re

import yaml

from kevlike.config.rules import ConfigError

_FLOAT = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+$")


def numbers(value):
    """``value`` with every string like ``1e-4`` (an exponent, no dot: a string to YAML 1.1) as the float meant."""
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        return float(value)
    if isinstance(value, dict):
        return {k: numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [numbers(v) for v in value]
    return value


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that repeats a key."""


def _no_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise ConfigError(f"line {key_node.start_mark.line + 1}: the key {key!r} appears twice in one mapping")
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def read_yaml(text: str, where: str):
    """``text`` as YAML (module docstring); JSON is YAML, so a JSON file reads too.

    Raises:
        ConfigError: ``where: …`` naming the line and column of a syntax error, or the repeated key's line."""
    try:
        return numbers(yaml.load(text, Loader=_StrictLoader))
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"{where}: not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None
