"""A setting is a dataclass field that knows its help text, choices, check and command-line flag.

    port: int = setting(8000, "TCP port to listen on", check=integer(0, 65535))

:func:`setting` stores them in the field's metadata; :func:`validate` (called by each config's
``__post_init__``) runs them and raises :class:`SettingError` naming the field; the command line builds its
options from the same metadata (:func:`argument`) and its config objects back from the parsed values
(:func:`build`), so a setting's default, choices, check and help are written once.

A check takes a value and returns what is wrong with it as a requirement (``"must be >= 1"``), or None when
the value is valid; the error appends ``, got VALUE``.
"""

from __future__ import annotations

import math
import os
from dataclasses import MISSING, Field, field, fields, is_dataclass, replace
from typing import Any, Callable, Mapping

Check = Callable[[Any], "str | None"]


class SettingError(ValueError):
    """A setting's value is refused. ``str(e)`` names the setting by its field (``port must be from 0 to
    65535, got 70000``); :meth:`named` by another name, e.g. its command-line flag.

    Attributes:
        field: the refused field.
        problem: what is wrong, without the name; ``{other}`` stands for another field it names.
        also: the other fields ``problem`` names.
    """

    def __init__(self, field: str, problem: str, also: tuple[str, ...] = ()):
        self.field, self.problem, self.also = field, problem, also
        super().__init__(self.named())

    def named(self, name: Callable[[str], str] = lambda f: f) -> str:
        """The message with every field it names called ``name(field)``."""
        text = f"{name(self.field)} {self.problem}"
        for other in self.also:
            text = text.replace("{" + other + "}", name(other))
        return text


def setting(default: Any, help: str, *, choices: tuple | None = None, check: Check | None = None,
            parse: Callable[[str], Any] | None = None, flag: str | None = None, metavar: str | None = None,
            env: str | None = None, words: Mapping[str, str] | None = None) -> Any:
    """A dataclass field with its settings metadata.

    Args:
        default: the one default (a frozen value; a config object for a nested config).
        help: the help text of its flag; ``{word}`` placeholders are filled from ``words`` or the command.
        choices: the allowed values (None is allowed too when ``default`` is None).
        check: the value's check (see the module docstring).
        parse: text -> value for the command line and environment variables: the flag is checked while the
            command line is parsed (argparse's usage error); without it, after (one line naming the flag).
        flag: the command-line flag (default ``--field-name``).
        metavar: the flag's value name in ``--help``.
        env: an environment variable that gives the value when the flag is not given (then the default).
        words: default fillings of ``help``'s placeholders.
    """
    return field(default=default, metadata={"help": help, "choices": choices, "check": check, "parse": parse,
                                            "flag": flag, "metavar": metavar, "env": env, "words": dict(words or {})})


def show(value: Any) -> str:
    """A value as an error message shows it: a float as ``%g`` (``2``, ``nan``), anything else as its repr."""
    return f"{value:g}" if isinstance(value, float) else repr(value)


def problem(f: Field, value: Any) -> str | None:
    """What is wrong with ``value`` for setting ``f`` (a requirement), or None when it is valid."""
    if value is None and f.default is None:
        return None
    choices = f.metadata.get("choices")
    if choices is not None and value not in choices:
        return f"must be one of {', '.join(choices)}"
    check = f.metadata.get("check")
    return check(value) if check is not None else None


def validate(obj: Any) -> None:
    """Check every setting of config object ``obj`` (its ``__post_init__`` calls this).

    Raises:
        SettingError: the first refused field, e.g. ``option_orders must be >= 0, got -1``.
    """
    for f in fields(obj):
        value = getattr(obj, f.name)
        if (req := problem(f, value)) is not None:
            raise SettingError(f.name, f"{req}, got {show(value)}")


def parse_text(f: Field, text: str) -> Any:
    """The value of setting ``f`` written as ``text`` (a flag's or an environment variable's value).

    Raises:
        SettingError: not a value of the field's type, or refused by its check; the message shows ``text``.
    """
    try:
        value = f.metadata["parse"](text.strip())
    except ValueError:
        value = text                               # a check refuses text where it wants a number
    if (req := problem(f, value)) is not None:
        raise SettingError(f.name, f"{req}, got {text!r}")
    return value


def flag(f: Field) -> str:
    """Setting ``f``'s command-line flag."""
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def flags(*classes: type) -> dict[str, str]:
    """Field name -> flag of every setting of ``classes`` and of the config classes nested in them."""
    out = {}
    for cls in classes:
        for f in fields(cls):
            if is_dataclass(f.default):
                out.update(flags(type(f.default)))
            elif "help" in f.metadata:
                out[f.name] = flag(f)
    return out


def settings(cls: type) -> dict[str, Field]:
    """Field name -> field of every setting of config class ``cls`` and of the config classes nested in it."""
    out = {}
    for f in fields(cls):
        if is_dataclass(f.default):
            out.update(settings(type(f.default)))
        elif "help" in f.metadata:
            out[f.name] = f
    return out


def value_of(obj: Any, name: str) -> Any:
    """Setting ``name`` of config object ``obj`` or of a config object nested in it.

    Raises:
        KeyError: no such setting.
    """
    for f in fields(obj):
        value = getattr(obj, f.name)
        if f.name == name:
            return value
        if is_dataclass(value):
            try:
                return value_of(value, name)
            except KeyError:
                pass
    raise KeyError(name)


_TYPES = {"int": int, "float": float, "str": str}


def argument(f: Field, default: Any, **words: str) -> tuple[str, dict]:
    """``(flag, argparse keyword arguments)`` of setting ``f`` with ``default``: its help with its placeholders
    filled (``words`` over the field's own; ``{default}`` is the field's default, ``{note}`` defaults to empty
    and is appended when the help has no place for it), choices, metavar and type. A bool is a ``store_true`` flag; a setting with ``parse`` is
    checked by argparse; one with ``env`` is taken as text (read by :func:`build`)."""
    meta = f.metadata
    words = {"note": "", "default": show(f.default), **meta["words"], **words}
    text = meta["help"]
    if "{note}" not in text:
        text += "{note}"
    for k, v in words.items():
        text = text.replace("{" + k + "}", v)
    kw = {"dest": f.name, "default": default, "help": text}
    if f.type in ("bool", bool):
        return flag(f), {**kw, "action": "store_true"}
    if meta["metavar"]:
        kw["metavar"] = meta["metavar"]
    if meta["choices"]:
        kw["choices"] = list(meta["choices"])
    if meta["env"]:
        kw["default"] = None                     # the variable's, else the config's: build() reads them
    elif meta["parse"]:
        kw["type"] = argparse_type(f)
    else:
        kw["type"] = _TYPES.get(str(f.type).split("|")[0].strip(), str)
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
    """Config object ``base`` with the settings given in ``values`` (field name -> value; the parsed command
    line), nested config objects filled from the same mapping. A setting with ``env`` is text (None: not
    given): the flag's, else its environment variable's (a blank one is unset), else ``base``'s value.

    Raises:
        SettingError: a refused value (names the field; a flag's text is shown as given).
        ValueError: a refused environment variable (one line naming the variable).
    """
    environ = os.environ if environ is None else environ
    changes = {}
    for f in fields(base):
        current = getattr(base, f.name)
        if is_dataclass(current):
            changes[f.name] = build(current, values, environ)
        elif "help" not in f.metadata or f.name not in values:
            continue
        elif not f.metadata["env"]:
            changes[f.name] = values[f.name]
        elif values[f.name] is not None:
            changes[f.name] = parse_text(f, values[f.name])
        elif environ.get(var := f.metadata["env"], "").strip():
            try:
                changes[f.name] = parse_text(f, environ[var])
            except SettingError as e:
                raise ValueError(f"{var} {e.problem}") from None
    return replace(base, **changes)


def from_env(cls: type, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The settings of ``cls`` given by their environment variables (blank: left out), as field -> value.

    Raises:
        ValueError: a variable whose value is refused (one line naming it).
    """
    environ = os.environ if environ is None else environ
    out = {}
    for f in fields(cls):
        var = f.metadata.get("env")
        if var and environ.get(var, "").strip():
            try:
                out[f.name] = parse_text(f, environ[var])
            except SettingError as e:
                raise ValueError(f"{var} {e.problem}") from None
    return out


# -- checks -----------------------------------------------------------------------------------------------------

def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def integer(lo: int, hi: int | None = None, requirement: str | None = None) -> Check:
    """An integer from ``lo`` (to ``hi``); ``requirement`` replaces the default wording."""
    req = requirement or (f"must be from {lo} to {hi}" if hi is not None else f"must be >= {lo}")
    return lambda v: None if is_int(v) and v >= lo and (hi is None or v <= hi) else req


def number(lo: float, hi: float = math.inf, *, above: bool = False, requirement: str) -> Check:
    """A finite number >= ``lo`` (> ``lo`` with ``above``), <= ``hi``."""
    return lambda v: None if is_number(v) and (v > lo if above else v >= lo) and v <= hi and math.isfinite(v) \
        else requirement

