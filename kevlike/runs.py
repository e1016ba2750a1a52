"""What every run directory records, from one place: the git commit of the code, the machine, and
the seeds (training, evaluation, benchmarks and the fuzzer all use these)."""

from __future__ import annotations

import os
import platform
import random
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def kevlike_home() -> Path:
    """Where kevlike keeps its files (backbones, profiles of the shipped model, BIG-bench):
    ``$KEVLIKE_HOME``, else ``~/.cache/kevlike``."""
    return Path(os.environ.get("KEVLIKE_HOME") or Path.home() / ".cache" / "kevlike")


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` to write instead of it: ``.NAME.PID.THREAD.tmp`` in the same folder,
    renamed onto ``path`` (``os.replace``, atomic within one file system on POSIX) when the block ends without an
    error, and removed when it does not. So no reader ever sees half a file, and a full disk or an interrupt
    mid-write leaves neither a truncated ``path`` (an eval run's metrics.json read as broken JSON by ``kevlike
    compare``; an ``--out`` that refuses the retry) nor a temporary file; two writers each replace the file whole.

    Raises:
        OSError: whatever the write or the rename raised (the temporary file is removed first).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through :func:`atomic_path`."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def read_only_folder(path: str | os.PathLike) -> Path | None:
    """The folder that keeps ``path`` from being made or written: ``path``, or the nearest folder above it that
    exists, when that is a directory this process cannot write into (``access(2)`` with write and search: a
    read-only directory, or a read-only file system, for root too); None when it can, or when what exists there is
    not a directory (the caller's own message says so)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p if p.is_dir() and not os.access(p, os.W_OK | os.X_OK) else None


def git_commit() -> str | None:
    """``git rev-parse HEAD`` of the source tree this package runs from, with ``-dirty`` when it has
    uncommitted changes; None outside a git checkout (an installed wheel) or without git."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, cwd=here)
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, timeout=10,
                               cwd=here).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def machine() -> dict:
    """CPU model (``/proc/cpuinfo``'s model name), core count, platform, torch version and the GPU name if
    any (for the JSON record of a run)."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(), "torch": torch.__version__,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None}


def set_seed(seed: int) -> None:
    """Seed Python's ``random``, NumPy and torch (CPU and every GPU) with ``seed``."""
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
