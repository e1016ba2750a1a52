"""Request limits (DESIGN.md §4 defaults): one frozen dataclass, the validator's, the engine's and the server's."""

from __future__ import annotations

from kevlike.config.rules import Section, integer, setting, settings

MAX_REQUEST_TOKENS = 65536
"""The default token budget of one packed request (``Limits.max_request_tokens``)."""

MAX_OPTIONS_CAP = 100_000
"""The largest ``max_options`` accepted (an extension of Jev's 255; DESIGN §5 "Set mode")."""

_POSITIVE = integer(1, says="a positive integer")
_TWO = integer(2, says=">= 2")


def _limit(default: int, help: str = "", rule=_POSITIVE, **kw):
    return setting(default, rule, help, **kw)


@settings(terse=True)
class Limits(Section):
    """Request limits (DESIGN.md §4 defaults). Token limits are enforced after tokenization.

    Raises:
        kevlike.config.rules.SettingError: a limit that is not a positive integer, ``min_options`` or
            ``min_levels`` below 2, ``max_options`` outside 2 to :data:`MAX_OPTIONS_CAP` (names the field).
    """

    max_questions: int = _limit(5000)
    min_options: int = _limit(2, rule=_TWO)
    max_options: int = _limit(
        255, "allow choice questions with up to N options, beyond Jev's 255 (an extension): answered in one set-mode "
             "pass when they fit {budget}, else by shortlist-then-decide (the top 64 of a chunked set-mode pass decided "
             "again; the response's x_shortlist gives the size)", rule=integer(2, MAX_OPTIONS_CAP,
                                                                                 says=f"from 2 to {MAX_OPTIONS_CAP}"),
        metavar="N", words={"budget": f"the request token budget ({MAX_REQUEST_TOKENS:,} tokens)"})
    min_levels: int = _limit(2, rule=_TWO)
    max_levels: int = _limit(10)
    max_depth: int = _limit(64)
    max_body_bytes: int = _limit(8 * 1024 * 1024)
    max_request_tokens: int = _limit(      # the whole packed sequence
        MAX_REQUEST_TOKENS, "token budget of one packed request (413 above it); lower it to bound the cost of one request")
    max_branch_context: int = _limit(32768)  # state + longest branch (further capped by the backbone)


DEFAULT_LIMITS = Limits()
