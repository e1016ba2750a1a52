"""Request limits (DESIGN.md §4 defaults): a plain dataclass with no dependency, so that the command line
can show and check them without importing the validator."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """Request limits (DESIGN.md §4 defaults). Token limits are enforced after tokenization."""

    max_questions: int = 5000
    min_options: int = 2
    max_options: int = 255
    min_levels: int = 2
    max_levels: int = 10
    max_depth: int = 64
    max_body_bytes: int = 8 * 1024 * 1024
    max_request_tokens: int = 65536  # the whole packed sequence
    max_branch_context: int = 32768  # state + longest branch (further capped by the backbone)

    def __post_init__(self) -> None:
        for name, value in self.__dict__.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"Limits.{name} must be a positive integer, got {value!r}")
        if self.min_options < 2 or self.min_levels < 2:
            raise ValueError("Limits.min_options and Limits.min_levels must be at least 2")


DEFAULT_LIMITS = Limits()
