"""A setting is a dataclass field that knows its help text, choices, check and command-line flag.

    port: int = setting(8000, "TCP port to listen on", check=integer(0, 65535))

:func:`setting` stores them in the field's metadata; :func:`validate` (each config's ``__post_init__``) runs
them and raises :class:`SettingError` naming the field; the command line makes its options from the same
metadata (:func:`argument`) and its config objects from the parsed values (:func:`build`), so a setting's
default, choices, check and help are written once. A check returns what is wrong with a value as a requirement
(``"must be >= 1"``), or None when it is valid; the error appends ``, got VALUE``.
"""

from __future__ import annotations

import math
import os
from dataclasses import Field, field, fields, is_dataclass, replace
from typing import Any, Callable, Mapping

from kevlike.config.rules import ConfigError


class SettingError(ConfigError):
    """A refused setting (a :class:`~kevlike.config.rules.ConfigError`, so a ``ValueError``). ``str(e)`` names it
    by its field (``port must be from 0 to 65535, got 70000``), :meth:`named` by another name, e.g. its flag.
    ``problem``: the message without the name, in which ``{other}`` stands for each field of ``also`` it names."""

    def __init__(self, field: str, problem: str, also: tuple[str, ...] = ()):
        self.field, self.problem, self.also = field, problem, also
        super().__init__(self.named())

    def named(self, name: Callable[[str], str] = lambda f: f) -> str:
        """The message with every field it names called ``name(field)``."""
        text = f"{name(self.field)} {self.problem}"
        for other in self.also:
            text = text.replace("{" + other + "}", name(other))
        return text


def setting(default: Any, help: str, *, choices: tuple | None = None, check: Callable[[Any], str | None] | None = None,
            parse: Callable[[str], Any] | None = None, flag: str | None = None, metavar: str | None = None,
            env: str | None = None, words: Mapping[str, str] | None = None) -> Any:
    """A dataclass field holding a setting: its one ``default``; ``help``, its flag's help text, whose
    ``{word}`` placeholders ``words`` or the command fill; ``choices`` (None is allowed too when the default is
    None); its ``check``; ``parse``: text -> value, for a flag argparse checks while it parses (its usage error;
    without it the flag is checked after, in one line naming it) and for ``env``, an environment variable giving
    the value when the flag is not; ``flag`` (default ``--field-name``) and ``metavar``."""
    return field(default=default, metadata={"help": help, "choices": choices, "check": check, "parse": parse,
                                            "flag": flag, "metavar": metavar, "env": env, "words": dict(words or {})})


def show(value: Any) -> str:
    """A value as an error message shows it: a float as ``%g`` (``2``, ``nan``), anything else as its repr."""
    return f"{value:g}" if isinstance(value, float) else repr(value)


def problem(f: Field, value: Any) -> str | None:
    """What is wrong with ``value`` for setting ``f`` (a requirement), or None when it is valid."""
    if value is None and f.default is None:
        return None
    if (choices := f.metadata.get("choices")) is not None and value not in choices:
        return f"must be one of {', '.join(choices)}"
    return check(value) if (check := f.metadata.get("check")) is not None else None


def validate(obj: Any) -> None:
    """Check every setting of config object ``obj``.

    Raises:
        SettingError: the first refused field, e.g. ``option_orders must be >= 0, got -1``.
    """
    for f in fields(obj):
        if (req := problem(f, value := getattr(obj, f.name))) is not None:
            raise SettingError(f.name, f"{req}, got {show(value)}")


def parse_text(f: Field, text: str, var: str | None = None) -> Any:
    """The value of setting ``f`` written as ``text``, a flag's value or (``var``) an environment variable's.

    Raises:
        SettingError: not a value of the setting's type or refused by its check (shows ``text``).
        ValueError: the same for a variable, naming it.
    """
    try:
        value = f.metadata["parse"](text.strip())
    except ValueError:
        value = text                               # a check refuses text where it wants a number
    if (req := problem(f, value)) is not None:
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
        elif "help" in f.metadata:
            out[f.name] = (f, value)
    return out


_TYPES = {"int": int, "float": float, "str": str}


def argument(f: Field, default: Any, **words: str) -> tuple[str, dict]:
    """``(flag, argparse keyword arguments)`` of setting ``f`` with ``default``: its help with its placeholders
    filled (``words`` over the field's own; ``{default}`` is the field's default, ``{note}`` empty unless given,
    appended when the help has no place for it), choices, metavar and type. A bool is a ``store_true`` flag; a
    setting with ``env`` is taken as text (:func:`build` reads it)."""
    meta = f.metadata
    text = meta["help"] if "{note}" in meta["help"] else meta["help"] + "{note}"
    for k, v in {"note": "", "default": show(f.default), **meta["words"], **words}.items():
        text = text.replace("{" + k + "}", v)
    kw = {"dest": f.name, "default": default, "help": text}
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
    """An argparse ``type`` reading setting ``f`` (its ``parse`` and check; argparse shows the requirement)."""
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
        elif "help" in f.metadata and f.name in values:
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


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def integer(lo: int, hi: int | None = None, requirement: str | None = None) -> Callable[[Any], str | None]:
    """The check of an integer from ``lo`` (to ``hi``); ``requirement`` replaces the default wording."""
    req = requirement or (f"must be from {lo} to {hi}" if hi is not None else f"must be >= {lo}")
    return lambda v: None if is_int(v) and v >= lo and (hi is None or v <= hi) else req


def number(lo: float, hi: float = math.inf, *, above: bool = False, requirement: str) -> Callable[[Any], str | None]:
    """The check of a finite number >= ``lo`` (> ``lo`` with ``above``) and <= ``hi``."""
    return lambda v: None if is_number(v) and math.isfinite(v) and (v > lo if above else v >= lo) and v <= hi \
        else requirement
