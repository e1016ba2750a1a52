"""Weight-precision names and the ``KEVLIKE_DTYPE`` setting, without importing torch (the command line
checks the variable before any command loads a model; :func:`kevlike.model.backbones.resolve_dtype`
applies it)."""

from __future__ import annotations

import os
from pathlib import Path

from kevlike.config.engine import DTYPE_CHOICES


def dtype_from_env() -> str | None:
    """``KEVLIKE_DTYPE`` when set to ``float32`` or ``bfloat16``; None when unset, empty or ``auto``.

    Raises:
        ValueError: any other value (the message names the variable).
    """
    env = os.environ.get("KEVLIKE_DTYPE", "").strip()
    if env and env not in DTYPE_CHOICES:
        raise ValueError(f"KEVLIKE_DTYPE must be one of {', '.join(DTYPE_CHOICES)}, got {env!r}")
    return env if env and env != "auto" else None


def cpu_bf16_units(cpuinfo: str | None = None) -> list[str]:
    """The bf16 matrix/vector units this CPU reports in ``/proc/cpuinfo`` flags (``amx_bf16``,
    ``avx512_bf16``); empty where it has none or the file is unreadable (non-Linux)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return []
    flags = set()
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            flags.update(line.split(":", 1)[1].split())
    return [f for f in ("amx_bf16", "avx512_bf16") if f in flags]
