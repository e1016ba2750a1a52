"""What a setting accepts, and the error that says it was refused.

A :class:`Rule` is one setting's check: its kind (an integer, a finite number, a bool, a non-empty string, a list
of names, one of some choices), its range and whether null is accepted; :meth:`Rule.text` says it in words, as the
error message does. :func:`setting` declares a dataclass field with its one default, its rule and its help text;
:func:`settings` makes a class of such fields a frozen dataclass whose construction checks every field (the
:class:`Section` base) and whose docstring lists them; a setting that is a mapping is held as a read-only
:class:`FrozenMap`. A refused value raises :class:`ConfigError`, one line that names the field by its dotted path:
``optim.lr must be a finite number ≥ 0, got nan``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar


class ConfigError(ValueError):
    """A config that names an unknown key or has a bad value; the message is one line naming the key."""


@dataclass(frozen=True)
class Rule:
    """What one setting accepts: ``kind`` ``int`` (an integer, never a bool), ``number`` (an int or a finite
    float), ``bool``, ``str`` (non-empty), ``names`` (a non-empty list of non-empty strings) or ``choice`` (one of
    ``choices``); numbers within ``lo``..``hi`` (``lo_open``/``hi_open``: the bound itself excluded); ``null``:
    None is accepted too. :meth:`text` is the rule in words, as the error message states it."""

    kind: str
    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    hi_open: bool = False
    null: bool = False
    choices: tuple = ()

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
        if isinstance(v, bool) or not isinstance(v, int if self.kind == "int" else (int, float)):
            return False
        if not math.isfinite(v):
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return self.hi is None or (v < self.hi if self.hi_open else v <= self.hi)

    def text(self) -> str:
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

    def check(self, key: str, value) -> None:
        """Raises:
            ConfigError: ``value`` is refused: ``KEY must be RULE, got VALUE``."""
        if not self.accepts(value):
            raise ConfigError(f"{key} must be {self.text()}, got {value!r}")


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def integer(lo=None, hi=None, null=False) -> Rule:
    return Rule("int", lo, hi, null=null)


def number(lo=None, hi=None, lo_open=False, hi_open=False, null=False) -> Rule:
    return Rule("number", lo, hi, lo_open, hi_open, null)


SHARE = number(0, 1)          # a probability or a share
SEED = integer(0, 2 ** 32 - 1)   # numpy's seed range (accelerate's set_seed seeds numpy too)


def setting(default, rule: Rule | None, help: str):
    """A settings field: its one default, its rule (checked on construction; None: the class checks the field
    itself) and its help text. A mutable default (a dict, a list) is copied for each instance."""
    meta = {"help": help} if rule is None else {"rule": rule, "help": help}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, help: str):
    """A field that holds a section of settings (``cls``, a :func:`settings` class); its default is ``cls()``."""
    return field(default_factory=cls, metadata={"section": cls, "help": help})


class Section:
    """Base of the :func:`settings` classes: construction checks every field against its rule (a section field
    also takes a mapping, read with the section's :meth:`from_dict`); :meth:`from_dict` and :meth:`to_dict` turn
    one into the plain dict of a YAML file and back.

    Raises (on construction):
        ConfigError: a value its rule refuses, or a section that is not a mapping; the message names the field by
            its dotted path (``optim.lr``).
    """

    key: ClassVar[str] = ""   # where the section sits in the config, as error messages name it ("optim")

    @classmethod
    def path(cls, name: str) -> str:
        return f"{cls.key}.{name}" if cls.key else name

    def __post_init__(self) -> None:
        for f in fields(self):
            v, kind = getattr(self, f.name), f.metadata.get("section")
            if kind is not None and isinstance(v, Mapping):
                object.__setattr__(self, f.name, kind.from_dict(v))
            elif kind is not None and not isinstance(v, kind):
                raise ConfigError(f"{self.path(f.name)} must be a mapping of "
                                  f"{', '.join(x.name for x in fields(kind))}, got {v!r}")
            elif "rule" in f.metadata:
                f.metadata["rule"].check(self.path(f.name), v)
                if isinstance(v, list):   # stored as a tuple: the config is frozen
                    object.__setattr__(self, f.name, tuple(v))

    @classmethod
    def from_dict(cls, d: Mapping):
        """The settings of a plain mapping (a YAML file's, a saved ``config.yaml``'s); a missing key takes its
        default.

        Raises:
            ConfigError: not a mapping, a key that is not a field (``unknown config key 'optim.lrr' (known:
                ...)``), or a value its rule refuses.
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


def settings(key: str = ""):
    """Class decorator: a frozen dataclass of :func:`setting` and :func:`section` fields, a :class:`Section`
    at ``key``; its docstring gains a line per field (name, help, rule, default)."""

    def wrap(cls):
        cls.key = key
        cls = dataclass(frozen=True)(cls)
        lines = []
        for f in fields(cls):
            if "section" in f.metadata:
                lines.append(f"    {f.name} (:class:`{f.metadata['section'].__name__}`): {f.metadata['help']}")
            elif "help" in f.metadata:
                default = f.default if f.default is not MISSING else f.default_factory()
                rule = f"{f.metadata['rule'].text()}; " if "rule" in f.metadata else ""
                lines.append(f"    {f.name} ({rule}default {default!r}): {f.metadata['help']}")
        cls.__doc__ = (cls.__doc__ or "").rstrip() + "\n\nFields:\n" + "\n".join(lines) + "\n"
        return cls

    return wrap
