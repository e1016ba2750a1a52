"""Temperatures per (question type, option-count bucket) (DESIGN.md §9), applied at serve time as
``z / T``. Fitting them on held-out logits is the calibration issue's work; until an artifact
carries fitted values every temperature is 1 (the table says so in ``source``)."""

from __future__ import annotations

from dataclasses import dataclass, field

BUCKETS = ((2, 2), (3, 5), (6, 20), (21, 255))


def bucket_of(k: int) -> str:
    """Bucket label for an option (or level) count, e.g. ``"3-5"``.

    Raises:
        ValueError: k outside 2–255.
    """
    for lo, hi in BUCKETS:
        if lo <= k <= hi:
            return f"{lo}" if lo == hi else f"{lo}-{hi}"
    raise ValueError(f"option count {k} is outside 2-255")


@dataclass(frozen=True)
class TemperatureTable:
    """``by_bucket[(type, bucket)]``, else ``by_type[type]``, else 1."""

    by_bucket: dict = field(default_factory=dict)
    by_type: dict = field(default_factory=dict)
    source: str = "default: T = 1 (not fitted)"

    def lookup(self, qtype: str, k: int) -> float:
        t = self.by_bucket.get((qtype, bucket_of(k)))
        if t is None:
            t = self.by_type.get(qtype, 1.0)
        return float(t)
