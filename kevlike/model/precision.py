"""Weight-precision names and the ``KEVLIKE_DTYPE`` setting, without importing torch (the command line
checks the variable before any command loads a model; :func:`kevlike.model.backbones.resolve_dtype`
applies it)."""

from __future__ import annotations

import os

DTYPE_CHOICES = ("auto", "float32", "bfloat16")


def dtype_from_env() -> str | None:
    """``KEVLIKE_DTYPE`` when set to ``float32`` or ``bfloat16``; None when unset, empty or ``auto``.

    Raises:
        ValueError: any other value (the message names the variable).
    """
    env = os.environ.get("KEVLIKE_DTYPE", "").strip()
    if env and env not in DTYPE_CHOICES:
        raise ValueError(f"KEVLIKE_DTYPE must be one of {', '.join(DTYPE_CHOICES)}, got {env!r}")
    return env if env and env != "auto" else None
