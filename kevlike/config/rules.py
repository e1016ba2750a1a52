"""How a setting is declared and checked: one way for every config (training, engine, server, limits).

A setting is a field of a :func:`settings` class (a :class:`Section`) declared with :func:`setting`: its one
default, its :class:`Rule` (what it accepts) and its help text, plus, for one the command line takes, its flag
metadata (:mod:`kevlike.config.fields` builds the options from it)::

    @settings("optim")
    class OptimConfig(Section):
        lr: float = setting(3e-4, number(0), "peak learning rate")

Construction checks every field against its rule, and a section field also takes a mapping. A refused value
raises :class:`SettingError` (a :class:`ConfigError`, so a ``ValueError``): one line naming the field by its
dotted path, ``optim.lr must be a finite number ≥ 0, got nan``; an unknown key or a malformed config raises
:class:`ConfigError`. A setting that is a mapping is held as a read-only :class:`FrozenMap`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from typing import Any, Callable, ClassVar


class ConfigError(ValueError):
    """A config that names an unknown key or has a bad value; the message is one line naming the key."""


class SettingError(ConfigError):
    """A refused setting. ``str(e)`` names it by its field (``port must be from 0 to 65535, got 70000``),
    :meth:`named` by another name, e.g. its flag. ``problem``: the message without the name, in which ``{other}``
    stands for each field of ``also`` it names."""

    def __init__(self, field: str, problem: str, also: tuple[str, ...] = ()):
        self.field, self.problem, self.also = field, problem, also
        super().__init__(self.named())

    def named(self, name: Callable[[str], str] = lambda f: f) -> str:
        """The message with every field it names called ``name(field)``."""
        text = f"{name(self.field)} {self.problem}"
        for other in self.also:
            text = text.replace("{" + other + "}", name(other))
        return text


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def show(value: Any, terse: bool = False) -> str:
    """A value as an error message shows it: its repr, or (``terse``, as a flag writes it) a float as ``%g``."""
    return f"{value:g}" if terse and isinstance(value, float) else repr(value)


@dataclass(frozen=True)
class Rule:
    """What one setting accepts: ``kind`` ``int`` (an integer, never a bool), ``number`` (an int or a finite
    float), ``bool``, ``str`` (non-empty), ``names`` (a non-empty list of non-empty strings), ``choice`` (one of
    ``choices``) or ``custom`` (``test(value)``: True accepts, False refuses, words refuse saying what it must be);
    numbers within ``lo``..``hi`` (``lo_open``/``hi_open``: the bound itself excluded); ``null``: None is accepted
    too. :meth:`text` is the rule in words, as the error message states it: ``says`` where given, else derived."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    null: bool = False
    choices: tuple = ()
    says: str | None = None
    test: Callable[[Any], bool | str] | None = None

    def accepts(self, v) -> bool:
        if v is None:
            return self.null
        if self.kind == "bool":
            return isinstance(v, bool)
        if self.kind == "str":
            return isinstance(v, str) and bool(v.strip())
        if self.kind == "names":   # a tuple once stored in a frozen config
            return isinstance(v, (list, tuple)) and bool(v) and all(isinstance(x, str) and x.strip() for x in v)
        if self.kind == "choice":
            return v in self.choices
        if self.kind == "custom":
            return self.test(v) is True
        if not (is_int(v) if self.kind == "int" else isinstance(v, (int, float)) and not isinstance(v, bool)):
            return False
        if self.kind == "number" and not math.isfinite(v):
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return self.hi is None or (v < self.hi if self.hi_open else v <= self.hi)

    def text(self) -> str:
        if self.says is not None:
            return self.says
        if self.kind in ("bool", "str", "names", "choice"):
            words = {"bool": "true or false", "str": "a non-empty string", "names": "a non-empty list of names",
                     "choice": " or ".join(repr(c) for c in self.choices)}[self.kind]
        else:
            words = "an integer" if self.kind == "int" else "a finite number"
            if self.lo is not None and self.hi is not None:
                words += (f" from {_fmt(self.lo)} to {_fmt(self.hi)}" + (f" (below {_fmt(self.hi)})" if self.hi_open
                                                                          else "")
                          + (f" (above {_fmt(self.lo)})" if self.lo_open else ""))
            elif self.lo is not None:
                words += f" {'>' if self.lo_open else '≥'} {_fmt(self.lo)}"
        return words + (" or null" if self.null else "")

    def problem(self, v) -> str | None:
        """What ``v`` must be (``"must be ..."``) when the rule refuses it, else None."""
        if self.accepts(v):
            return None
        why = self.test(v) if self.kind == "custom" else None
        return f"must be {why if isinstance(why, str) else self.text()}"

    def check(self, key: str, value, terse: bool = False) -> None:
        """Raises:
            SettingError: ``value`` is refused: ``KEY must be RULE, got VALUE``."""
        if (req := self.problem(value)) is not None:
            raise SettingError(key, f"{req}, got {show(value, terse)}")


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def integer(lo=None, hi=None, null=False, says=None) -> Rule:
    return Rule("int", lo, hi, null=null, says=says)


def number(lo=None, hi=None, lo_open=False, hi_open=False, null=False, says=None) -> Rule:
    return Rule("number", lo, hi, lo_open, hi_open, null, says=says)


def one_of(choices: tuple) -> Rule:
    """A choice worded as a flag's: ``one of a, b``."""
    return Rule("choice", choices=tuple(choices), says=f"one of {', '.join(choices)}")


SHARE = number(0, 1)          # a probability or a share
SEED = integer(0, 2 ** 32 - 1)   # numpy's seed range (accelerate's set_seed seeds numpy too)


def setting(default, rule: Rule | None, help: str | None, *, parse: Callable[[str], Any] | None = None,
            flag: str | None = None, metavar: str | None = None, env: str | None = None,
            words: Mapping[str, str] | None = None):
    """A settings field: its one ``default`` (a mutable one, a dict or a list, is copied for each instance), its
    ``rule`` (checked on construction, None accepted where the default is None; None: the class checks the field
    itself) and its ``help`` (None: a setting no command line or docstring shows). For the command line
    (:mod:`kevlike.config.fields`): ``help``'s ``{word}`` placeholders, filled by ``words`` or the command;
    ``parse``: text -> value, for a flag argparse checks while it parses (without it the flag is checked after,
    in one line naming it) and for ``env``, an environment variable giving the value when the flag is not;
    ``flag`` (default ``--field-name``) and ``metavar``."""
    if rule is not None and default is None and not rule.null:
        rule = replace(rule, null=True)
    meta = {"help": help, "choices": rule.choices if rule and rule.kind == "choice" else None, "parse": parse,
            "flag": flag, "metavar": metavar, "env": env, "words": dict(words or {}), **({"rule": rule} if rule else {})}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, help: str):
    """A field that holds a section of settings (``cls``, a :func:`settings` class); its default is ``cls()``."""
    return field(default_factory=cls, metadata={"section": cls, "help": help})


def help_text(f: Field, **words: str) -> str:
    """Setting ``f``'s help with its placeholders filled (``words`` over the field's own; ``{default}`` is its
    default, ``{note}`` empty unless given, appended when the help has no place for it)."""
    text = f.metadata["help"] if "{note}" in f.metadata["help"] else f.metadata["help"] + "{note}"
    for k, v in {"note": "", "default": show(f.default, True), **f.metadata["words"], **words}.items():
        text = text.replace("{" + k + "}", v)
    return text


class Section:
    """Base of the :func:`settings` classes: construction checks every field against its rule (a section field
    also takes a mapping, read with the section's :meth:`from_dict`); :meth:`from_dict` and :meth:`to_dict` turn
    one into the plain dict of a YAML file and back.

    Raises (on construction):
        SettingError: a value its rule refuses, or a section that is not a mapping; the message names the field by
            its dotted path (``optim.lr``).
    """

    key: ClassVar[str] = ""   # where the section sits in the config, as error messages name it ("optim")
    terse: ClassVar[bool] = False   # a refused float shown as a flag writes it (%g), not as its repr

    @classmethod
    def path(cls, name: str) -> str:
        return f"{cls.key}.{name}" if cls.key else name

    def __post_init__(self) -> None:
        for f in fields(self):
            v, kind = getattr(self, f.name), f.metadata.get("section")
            if kind is not None and isinstance(v, Mapping):
                object.__setattr__(self, f.name, kind.from_dict(v))
            elif kind is not None and not isinstance(v, kind):
                raise SettingError(self.path(f.name), f"must be a mapping of "
                                   f"{', '.join(x.name for x in fields(kind))}, got {v!r}")
            elif "rule" in f.metadata:
                f.metadata["rule"].check(self.path(f.name), v, self.terse)
                if isinstance(v, list):   # stored as a tuple: the config is frozen
                    object.__setattr__(self, f.name, tuple(v))

    @classmethod
    def from_dict(cls, d: Mapping):
        """The settings of a plain mapping (a YAML file's, a saved ``config.yaml``'s); a missing key takes its
        default.

        Raises:
            ConfigError: not a mapping, a key that is not a field (``unknown config key 'optim.lrr' (known:
                ...)``), or a value its rule refuses (:class:`SettingError`).
        """
        if not isinstance(d, Mapping):
            raise ConfigError(f"{cls.key or 'a config'} must be a mapping, got {d!r}")
        known = [f.name for f in fields(cls)]
        for k in d:
            if k not in known:
                raise ConfigError(f"unknown config key {cls.path(k)!r} (known: {', '.join(sorted(known))})")
        return cls(**d)

    def to_dict(self) -> dict:
        """The plain dict (lists, dicts, scalars; fields in declaration order) that :meth:`from_dict` reads back."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


class FrozenMap(Mapping):
    """A read-only mapping over a copy of ``items`` (insertion order kept): what a frozen config holds where a
    setting is a mapping. Unlike ``types.MappingProxyType`` it pickles and copies, and it hashes when its values
    do. Assigning to a key raises ``TypeError``."""

    __slots__ = ("_items",)

    def __init__(self, items=()):
        self._items = dict(items)

    def __getitem__(self, key):
        return self._items[key]

    def __iter__(self):
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return repr(self._items)


def _plain(v: Any):
    if hasattr(v, "to_dict"):   # a section, a DataFile
        return v.to_dict()
    if isinstance(v, Mapping):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def settings(key: str = "", *, terse: bool = False):
    """Class decorator: a frozen dataclass of :func:`setting` and :func:`section` fields, a :class:`Section`
    at ``key`` (``terse``: see :attr:`Section.terse`); its docstring gains a line per field (name, rule, default,
    help)."""

    def wrap(cls):
        cls.key, cls.terse = key, terse
        cls = dataclass(frozen=True)(cls)
        lines = []
        for f in fields(cls):
            if "section" in f.metadata:
                lines.append(f"    {f.name} (:class:`{f.metadata['section'].__name__}`): {f.metadata['help']}")
            elif f.metadata.get("help") is not None:
                default = f.default if f.default is not MISSING else f.default_factory()
                rule = f"{f.metadata['rule'].text()}; " if "rule" in f.metadata else ""
                lines.append(f"    {f.name} ({rule}default {default!r}): {help_text(f)}")
        cls.__doc__ = (cls.__doc__ or "").rstrip() + "\n\nFields:\n" + "\n".join(lines) + "\n"
        return cls

    return wrap
