"""Request schema: the Jev wire format (DESIGN.md §4), validated into typed, frozen objects.

``parse_request(body)`` takes raw JSON (``str`` or ``bytes``) and ``validate_request(obj)`` an
already-decoded object; both return a :class:`Request` or raise :class:`RequestError`, whose
``errors`` list uses the FastAPI/pydantic shape that Jev returns with HTTP 422::

    {"loc": ["body", "questions", "team", "criteria"], "msg": "...", "type": "..."}

Every violation found is reported (not only the first), each naming the field path and the rule.

Decisions where the wire format is silent (also in the README):

* an empty ``state`` (``""``, ``{}``, ``[]``) is accepted: a question may carry its own context,
  and the branch still reads the ``<state>`` delimiter;
* an empty question id ``""`` is rejected (almost always a client bug, and ids are the only way
  to match answers to questions);
* ``instructions`` is required (it may be an empty string), except on a ``noul`` question whose
  ``criteria`` describe an answer (at least one non-blank description; Jev accepts that; the
  instructions are then empty);
* unknown fields *inside a question* are rejected rather than ignored, so a misspelt ``critera``
  is an error, not a silently unconstrained question; unknown *top-level* fields (a client's
  ``"x_trace_id"``, ``"seed"``) are ignored as Jev ignores them, and listed in
  :attr:`Request.ignored_fields` (the server names them in the ``x-kevlike-ignored-fields`` header);
* duplicate keys anywhere in the JSON are rejected (Python's json would keep the last one);
* numbers ``NaN``/``Infinity``, numbers with a fraction or exponent beyond the 64-bit float range
  (``1e400``, rejected with the literal the client sent; integers are exact in JSON and kept) and strings that cannot be encoded as UTF-8 (lone surrogates) are
  rejected.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Union

Text = Union[str, dict, list]
"""User text: a string, or a JSON object/array rendered as canonical JSON (see :mod:`render`)."""

QUESTION_TYPES = ("noul", "choice", "score")


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


@dataclass(frozen=True)
class Option:
    """One allowed answer: ``key`` is what the response reports (``"true"``/``"false"`` for noul,
    ``"0"``…``"n-1"`` for score levels, the request's own key for choice)."""

    key: str
    description: Text | None


@dataclass(frozen=True)
class Question:
    id: str
    type: str  # "noul" | "choice" | "score"
    instructions: Text
    options: tuple[Option, ...]


@dataclass(frozen=True)
class Request:
    """A validated request; ``ignored_fields``: unknown top-level fields that were ignored."""

    state: Text
    questions: tuple[Question, ...]
    model: str | None = None
    ignored_fields: tuple[str, ...] = ()


class RequestError(ValueError):
    """A request that violates the wire format. ``errors`` is a list of
    ``{"loc": [...], "msg": str, "type": str}``; ``status`` is the HTTP status it maps to
    (422 validation, 413 over a size/token budget)."""

    def __init__(self, errors: list[dict[str, Any]], status: int = 422):
        self.errors = errors
        self.status = status
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = []
        for e in self.errors[:5]:
            parts.append(f"{format_loc(e['loc'])}: {e['msg']}")
        more = f" (and {len(self.errors) - 5} more)" if len(self.errors) > 5 else ""
        return "; ".join(parts) + more


def format_loc(loc: list) -> str:
    """``["body", "questions", "a.b", 0]`` -> ``body.questions["a.b"][0]`` (keys that are empty or not
    plain words are quoted, so an empty key is visible). A path deeper than 10 shows its first 6 and
    last 2 parts around ``…(N levels)…``."""
    if len(loc) > 10:
        return f"{format_loc(loc[:6])}…({len(loc) - 8} levels)…{format_loc(['x', *loc[-2:]])[1:]}"
    out = ""
    for p in loc:
        if isinstance(p, int):
            out += f"[{p}]"
        elif p and all(c.isalnum() or c in "_-" for c in str(p)):
            out += f".{p}" if out else str(p)
        else:
            out += f"[{json.dumps(str(p), ensure_ascii=False)}]"
    return out


def _err(loc: list, msg: str, type_: str) -> dict[str, Any]:
    return {"loc": ["body", *loc], "msg": msg, "type": type_}


class _PairsDict(dict):
    """A dict that remembers keys that appeared more than once in the JSON text."""

    duplicates: tuple[str, ...] = ()


def _object_pairs(pairs: list[tuple[str, Any]]) -> _PairsDict:
    out = _PairsDict()
    dups = []
    for k, v in pairs:
        if k in out:
            dups.append(k)
        out[k] = v
    if dups:
        out.duplicates = tuple(dups)
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


class _OutOfRange(str):
    """The literal of a JSON number beyond the 64-bit float range (``1e400``), reported by :func:`_walk`
    with its field path instead of silently becoming ``inf``."""


def _parse_float(literal: str) -> float | _OutOfRange:
    value = float(literal)
    return value if math.isfinite(value) else _OutOfRange(literal)


def plural(n: int, word: str) -> str:
    """``"1 option"``, ``"2 options"``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def parse_request(body: str | bytes, limits: Limits = DEFAULT_LIMITS) -> Request:
    """Decode a JSON body and validate it.

    Raises:
        RequestError: 413 if the body exceeds ``limits.max_body_bytes``; 422 for invalid JSON,
            invalid UTF-8, duplicate keys, nesting deeper than ``limits.max_depth`` or any schema rule.
    """
    size = len(body.encode("utf-8", "surrogatepass") if isinstance(body, str) else body)
    if size > limits.max_body_bytes:
        raise RequestError(
            [_err([], f"body is {size} bytes; the limit is {limits.max_body_bytes}", "body_too_large")],
            status=413,
        )
    if isinstance(body, bytes):
        try:
            body = body.decode("utf-8-sig")  # a leading UTF-8 BOM (Windows editors) is not content
        except UnicodeDecodeError as e:
            raise RequestError([_err([], f"body is not valid UTF-8 ({e.reason} at byte {e.start})", "json_invalid")])
    try:
        obj = json.loads(body, object_pairs_hook=_object_pairs, parse_constant=_reject_constant,
                         parse_float=_parse_float)
    except RecursionError:
        raise RequestError([_err([], f"JSON nesting exceeds the limit of {limits.max_depth}", "json_too_deep")])
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        msg = str(e)
        if "Exceeds the limit" in msg and "digits" in msg:  # Python's int-size guard, not a JSON rule
            msg = "a number has more than 4300 digits"
        raise RequestError([_err([], f"invalid JSON: {msg}", "json_invalid")])
    return validate_request(obj, limits)


def _walk(value: Any, loc: list, depth: int, limits: Limits, errors: list) -> None:
    """Structural checks over the raw JSON: depth, duplicate keys, lone surrogates."""
    if depth > limits.max_depth:
        errors.append(_err(loc, f"JSON nesting exceeds the limit of {limits.max_depth}", "json_too_deep"))
        return
    if isinstance(value, _OutOfRange):
        shown = value if len(value) <= 40 else value[:37] + "..."
        errors.append(_err(loc, f"number {shown} is out of range (a JSON number must fit a 64-bit float, "
                                f"|x| < 1.8e308)", "number_out_of_range"))
    elif isinstance(value, str):
        _check_utf8(value, loc, errors, "string")
    elif isinstance(value, float) and not math.isfinite(value):
        errors.append(_err(loc, f"{value} is not a valid JSON number", "json_invalid"))
    elif isinstance(value, dict):
        for k in getattr(value, "duplicates", ()):
            errors.append(_err([*loc, k], f"duplicate key {k!r}", "duplicate_key"))
        for k, v in value.items():
            if not isinstance(k, str):
                errors.append(_err([*loc, str(k)], f"object keys must be strings, got {_type_name(k)}", "key_type"))
            elif _check_utf8(k, [*loc, k], errors, "key"):
                _walk(v, [*loc, k], depth + 1, limits, errors)
    elif isinstance(value, tuple):
        _walk(list(value), loc, depth, limits, errors)
    elif not (value is None or isinstance(value, (bool, int, float, list))):
        errors.append(_err(loc, f"{type(value).__name__} is not a JSON value", "json_invalid"))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _walk(v, [*loc, i], depth + 1, limits, errors)


def _check_utf8(s: str, loc: list, errors: list, what: str) -> bool:
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        errors.append(_err(loc[:-1] if what == "key" else loc,
                           f"{what} cannot be encoded as UTF-8 (lone surrogate)", "string_unicode"))
        return False


def _is_text(v: Any) -> bool:
    return isinstance(v, (str, dict, list))


def _type_name(v: Any) -> str:
    return {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string",
            list: "array"}.get(type(v), "object" if isinstance(v, dict) else type(v).__name__)


def validate_request(obj: Any, limits: Limits = DEFAULT_LIMITS) -> Request:
    """Validate a decoded JSON object (see module docstring for the rules).

    Raises:
        RequestError: 422 listing every violation with its field path.
    """
    errors: list[dict[str, Any]] = []
    if not isinstance(obj, dict):
        raise RequestError([_err([], f"request must be a JSON object, got {_type_name(obj)}", "model_type")])
    _walk(obj, [], 1, limits, errors)
    if errors:
        raise RequestError(errors)

    ignored = tuple(k for k in obj if k not in ("model", "state", "questions"))
    model = obj.get("model")
    if model is not None and not isinstance(model, str):
        errors.append(_err(["model"], f"must be a string, got {_type_name(model)}", "string_type"))
    if "state" not in obj:
        errors.append(_err(["state"], "field required", "missing"))
    elif not _is_text(obj["state"]):
        errors.append(_err(["state"], f"must be a string, object or array, got {_type_name(obj['state'])}", "text_type"))

    questions: list[Question] = []
    raw_q = obj.get("questions")
    if "questions" not in obj:
        errors.append(_err(["questions"], "field required", "missing"))
    elif not isinstance(raw_q, dict):
        errors.append(_err(["questions"], f"must be an object mapping question ids to questions, got {_type_name(raw_q)}", "dict_type"))
    elif len(raw_q) == 0:
        errors.append(_err(["questions"], "must contain at least 1 question", "too_short"))
    elif len(raw_q) > limits.max_questions:
        errors.append(_err(["questions"], f"has {plural(len(raw_q), 'question')}; the limit is {limits.max_questions}", "too_long"))
    else:
        for qid, q in raw_q.items():
            parsed = _validate_question(qid, q, ["questions", qid], limits, errors)
            if parsed is not None:
                questions.append(parsed)
    if errors:
        raise RequestError(errors)
    return Request(state=obj["state"], questions=tuple(questions), model=model, ignored_fields=ignored)


_QUESTION_FIELDS = {"type", "instructions", "criteria"}


def _validate_question(qid: str, q: Any, loc: list, limits: Limits, errors: list) -> Question | None:
    n0 = len(errors)
    if qid == "":
        errors.append(_err(loc, "question id must be a non-empty string", "string_too_short"))
    if not isinstance(q, dict):
        errors.append(_err(loc, f"question must be an object, got {_type_name(q)}", "dict_type"))
        return None
    for k in q:
        if k not in _QUESTION_FIELDS:
            errors.append(_err([*loc, k], "unknown field (allowed: type, instructions, criteria)", "extra_forbidden"))
    qtype = q.get("type")
    if "type" not in q:
        errors.append(_err([*loc, "type"], "field required (one of 'noul', 'choice', 'score')", "missing"))
        return None
    if qtype not in QUESTION_TYPES:
        errors.append(_err([*loc, "type"], f"unknown question type {json.dumps(qtype)[:60]} (expected 'noul', 'choice' "
                                           f"or 'score')",
                           "union_tag_invalid"))
        return None
    if "instructions" not in q:
        crit0 = q.get("criteria")
        described = qtype == "noul" and isinstance(crit0, dict) and any(
            (isinstance(v, str) and v.strip()) or (isinstance(v, (dict, list)) and v) for v in crit0.values())
        if not described:
            errors.append(_err([*loc, "instructions"], "field required" + (
                " (a noul question may omit it only when its criteria describe the answers)" if qtype == "noul" else ""),
                "missing"))
    elif not _is_text(q["instructions"]):
        errors.append(_err([*loc, "instructions"],
                           f"must be a string, object or array, got {_type_name(q['instructions'])}", "text_type"))
    crit = q.get("criteria")
    cloc = [*loc, "criteria"]
    options: tuple[Option, ...] = ()
    if qtype == "noul":
        if crit is None:
            options = (Option("true", None), Option("false", None))
        elif not isinstance(crit, dict):
            errors.append(_err(cloc, f"noul criteria must be an object with keys 'true'/'false' or null, got {_type_name(crit)}",
                               "dict_type"))
        else:
            for k, v in crit.items():
                if k not in ("true", "false"):
                    errors.append(_err([*cloc, k], "noul criteria accept only the keys 'true' and 'false'", "extra_forbidden"))
                elif v is not None and not _is_text(v):
                    errors.append(_err([*cloc, k], f"description must be a string, object, array or null, got {_type_name(v)}",
                                       "text_type"))
            options = (Option("true", crit.get("true")), Option("false", crit.get("false")))
    elif qtype == "choice":
        if "criteria" not in q:
            errors.append(_err(cloc, "field required: an object mapping option keys to descriptions (or null)", "missing"))
        elif not isinstance(crit, dict):
            errors.append(_err(cloc, f"choice criteria must be an object mapping option keys to descriptions, got {_type_name(crit)}",
                               "dict_type"))
        elif not (limits.min_options <= len(crit) <= limits.max_options):
            errors.append(_err(cloc, f"choice has {plural(len(crit), 'option')}; it needs {limits.min_options} to {limits.max_options}",
                               "too_short" if len(crit) < limits.min_options else "too_long"))
        else:
            for k, v in crit.items():
                if k == "":
                    errors.append(_err([*cloc, k], "option key must be a non-empty string", "string_too_short"))
                if v is not None and not _is_text(v):
                    errors.append(_err([*cloc, k], f"description must be a string, object, array or null, got {_type_name(v)}",
                                       "text_type"))
            options = tuple(Option(k, v) for k, v in crit.items())
    else:  # score
        if "criteria" not in q:
            errors.append(_err(cloc, "field required: an array of level descriptions, lowest first", "missing"))
        elif isinstance(crit, dict):
            errors.append(_err(cloc, "the legacy map form of score criteria (e.g. {\"0\": \"low\", \"1\": \"high\"}) is not "
                                     "supported; send an array of level descriptions, lowest first", "score_legacy_form"))
        elif not isinstance(crit, list):
            errors.append(_err(cloc, f"score criteria must be an array of level descriptions, got {_type_name(crit)}", "list_type"))
        elif not (limits.min_levels <= len(crit) <= limits.max_levels):
            errors.append(_err(cloc, f"score has {plural(len(crit), 'level')}; it needs {limits.min_levels} to {limits.max_levels}",
                               "too_short" if len(crit) < limits.min_levels else "too_long"))
        else:
            for i, v in enumerate(crit):
                if not _is_text(v):
                    errors.append(_err([*cloc, i], f"level description must be a string, object or array, got {_type_name(v)}",
                                       "text_type"))
            options = tuple(Option(str(i), v) for i, v in enumerate(crit))
    if len(errors) > n0:
        return None
    return Question(id=qid, type=qtype, instructions=q.get("instructions", ""), options=options)
