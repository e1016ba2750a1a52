"""Settings on the command line and in the environment: the options of a config's settings and back.

A setting is declared once (:func:`kevlike.config.rules.setting`) with its flag metadata::

    port: int = setting(8000, integer(0, 65535, says="from 0 to 65535"), "TCP port to listen on")

:func:`argument` makes its option (flag, help, choices, type), :func:`build` a config object from the parsed
values and :func:`from_env` its environment variables; :func:`leaves` lists the settings of nested config
objects. A refused value raises :class:`~kevlike.config.rules.SettingError` naming the field (the command line
renames it to its flag with :meth:`~kevlike.config.rules.SettingError.named`); a refused variable a
``ValueError`` naming the variable.
"""

from __future__ import annotations

import os
from dataclasses import Field, fields, is_dataclass, replace
from typing import Any, Callable, Mapping

from kevlike.config.rules import SettingError, help_text  # noqa: F401 (SettingError: re-exported)


def parse_text(f: Field, text: str, var: str | None = None) -> Any:
    """The value of setting ``f`` written as ``text``, a flag's value or (``var``) an environment variable's.

    Raises:
        SettingError: not a value of the setting's type or refused by its rule (shows ``text``).
        ValueError: the same for a variable, naming it.
    """
    try:
        value = f.metadata["parse"](text.strip())
    except ValueError:
        value = text                               # a rule refuses text where it wants a number
    if (rule := f.metadata.get("rule")) is not None and (req := rule.problem(value)) is not None:
        if var is not None:
            raise ValueError(f"{var} {req}, got {text!r}")
        raise SettingError(f.name, f"{req}, got {text!r}")
    return value


def flag(f: Field) -> str:
    """Setting ``f``'s command-line flag."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def leaves(obj: Any) -> dict[str, tuple[Field, Any]]:
    """Name -> (field, value) of every setting of config object ``obj`` and of the config objects nested in it."""
    out = {}
    for f in fields(obj):
        value = getattr(obj, f.name)
        if is_dataclass(value):
            out.update(leaves(value))
        elif f.metadata.get("help") is not None:
            out[f.name] = (f, value)
    return out


_TYPES = {"int": int, "float": float, "str": str}


def argument(f: Field, default: Any, **words: str) -> tuple[str, dict]:
    """``(flag, argparse keyword arguments)`` of setting ``f`` with ``default``: its help with its placeholders
    filled (:func:`~kevlike.config.rules.help_text`), choices, metavar and type. A bool is a ``store_true`` flag;
    a setting with ``env`` is taken as text (:func:`build` reads it)."""
    meta = f.metadata
    kw = {"dest": f.name, "default": default, "help": help_text(f, **words)}
    if f.type in ("bool", bool):
        return flag(f), {**kw, "action": "store_true"}
    if meta["metavar"]:
        kw["metavar"] = meta["metavar"]
    if meta["choices"]:
        kw["choices"] = list(meta["choices"])
    if meta["env"]:
        kw["default"] = None                     # the variable's, else the config's
    else:
        kw["type"] = argparse_type(f) if meta["parse"] else _TYPES.get(str(f.type).split("|")[0].strip(), str)
    return flag(f), kw


def argparse_type(f: Field) -> Callable[[str], Any]:
    """An argparse ``type`` reading setting ``f`` (its ``parse`` and rule; argparse shows the requirement)."""
    import argparse

    def parse(text: str):
        try:
            return parse_text(f, text)
        except SettingError as e:
            raise argparse.ArgumentTypeError(e.problem) from None
    parse.__name__ = f.name
    return parse


def build(base: Any, values: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Any:
    """Config object ``base`` with the settings given in ``values`` (name -> value, e.g. the parsed command line;
    other names are ignored), nested config objects filled from the same mapping. A setting with ``env`` is
    text (None: not given): the flag's, else its variable's (blank: unset), else ``base``'s value.

    Raises:
        SettingError: a refused value (names the field). ValueError: a refused variable (names it).
    """
    environ = os.environ if environ is None else environ
    changes = {}
    for f in fields(base):
        if is_dataclass(current := getattr(base, f.name)):
            changes[f.name] = build(current, values, environ)
        elif f.metadata.get("help") is not None and f.name in values:
            if not (var := f.metadata["env"]):
                changes[f.name] = values[f.name]
            elif values[f.name] is not None:
                changes[f.name] = parse_text(f, values[f.name])
            elif environ.get(var, "").strip():
                changes[f.name] = parse_text(f, environ[var], var)
    return replace(base, **changes)


def from_env(cls: type, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings of ``cls`` given by their environment variables (blank: left out), as name -> value.

    Raises:
        ValueError: a refused variable (one line naming it).
    """
    environ = os.environ if environ is None else environ
    return {f.name: parse_text(f, environ[var], var) for f in fields(cls)
            if (var := f.metadata.get("env")) and environ.get(var, "").strip()}
