"""Intra-op thread count chosen from the CPU time other processes are using (``threads="auto"``).

torch runs one OpenMP thread per core and, between parallel regions, lets them spin. When another
process keeps a core busy, every parallel region waits for the thread that shares its core with the
neighbour, so a forward pass slows down far more than the neighbour's share of the CPU. Measured on a
2-core AMD EPYC (AVX2), ``kevlike decide examples/review.json`` on the default model, median of 5:

    ================================  ======  ===============================
    setting                           idle    one CPU-bound process beside it
    ================================  ======  ===============================
    2 threads (torch's default)       1.04 s  3.77 s (3.6×)
    1 thread                          1.53 s  1.59 s
    2 threads, OMP_WAIT_POLICY=PASSIVE 1.76 s  1.78 s
    ================================  ======  ===============================

No fixed setting is good in both columns, so ``auto`` measures instead: the CPU time the *other*
processes used over a recent window (``/proc/stat``'s busy time of all CPUs minus this process's own,
``/proc/self/stat``) gives the busy cores ``b``, and the engine uses ``max(1, round(n − b))`` of its
``n`` usable cores (``os.sched_getaffinity``). The first window is the model load; later the engine
re-measures before a forward pass once :data:`RESAMPLE_S` has passed. Where ``/proc`` is missing (not
Linux) ``auto`` keeps torch's default. A fixed count (``threads=N``, ``--threads N``,
``KEVLIKE_THREADS=N``) disables it.
"""

from __future__ import annotations

import os
import time

from kevlike.config.engine import check_threads, threads_from_env

RESAMPLE_S = 1.0
"""Seconds after which ``auto`` measures the neighbours' CPU use again (before the next forward pass)."""


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where that is unavailable)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _ticks() -> tuple[int, int] | None:
    """``(busy ticks of all CPUs, ticks of this process)`` from /proc, or None where unreadable."""
    try:
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
        with open("/proc/self/stat") as f:
            own = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError, IndexError):
        return None
    idle = cpu[3] + (cpu[4] if len(cpu) > 4 else 0)           # idle + iowait
    busy = sum(cpu[:8]) - idle                                   # user..steal; guest is inside user
    return busy, int(own[11]) + int(own[12])                     # utime + stime of all threads


def threads_for(busy_others: float, cores: int) -> int:
    """Threads to use when other processes keep ``busy_others`` cores busy: ``max(1, round(cores −
    busy_others))``, at most ``cores``."""
    return max(1, min(cores, round(cores - busy_others)))


class ThreadPolicy:
    """Chooses torch's intra-op thread count.

    Args:
        threads: ``"auto"`` (measure, see the module docstring) or a fixed positive count.

    Raises:
        ValueError: anything else.
    """

    def __init__(self, threads: int | str = "auto"):
        if (requirement := check_threads(threads)) is not None:
            raise ValueError(f"threads {requirement}, got {threads!r}")
        self.threads = threads
        self.cores = usable_cores()
        self._mark = (_ticks(), time.monotonic())
        self.chosen: int | None = None if threads == "auto" else threads
        self.busy_others: float | None = None

    @classmethod
    def from_env(cls, threads: int | str | None) -> "ThreadPolicy":
        """``threads`` if given, else ``KEVLIKE_THREADS`` (``auto`` or N), else ``auto``.

        Raises:
            ValueError: an invalid value (the message names ``KEVLIKE_THREADS`` when it came from there).
        """
        return cls(threads_from_env() if threads is None else threads)

    def apply(self, force: bool = False) -> int:
        """Set ``torch.set_num_threads`` for the next forward pass and return the count. ``auto``
        re-measures only when :data:`RESAMPLE_S` has passed since the last measurement (or ``force``)."""
        import torch

        if self.threads != "auto":
            n = self.threads
        else:
            ticks, t = _ticks(), time.monotonic()
            (ticks0, t0) = self._mark
            if self.chosen is not None and not force and t - t0 < RESAMPLE_S:
                return self.chosen
            if ticks is None or ticks0 is None or t - t0 <= 0:
                n = self.chosen or torch.get_num_threads()
            else:
                hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
                others = ((ticks[0] - ticks0[0]) - (ticks[1] - ticks0[1])) / hz / (t - t0)
                self.busy_others = max(0.0, others)
                n = threads_for(self.busy_others, self.cores)
            self._mark = (ticks, t)
        if n != torch.get_num_threads():
            torch.set_num_threads(n)
        self.chosen = n
        return n

    def describe(self) -> str:
        """One line for logs and ``--timing``: the count and why."""
        count = f"{self.chosen} thread{'' if self.chosen == 1 else 's'}"
        if self.threads != "auto":
            return f"{count} (fixed)"
        if self.busy_others is None:
            return f"{count} (auto: CPU use of other processes unknown)"
        return f"{count} (auto: {self.cores} usable cores, other processes busy {self.busy_others:.1f} cores)"
