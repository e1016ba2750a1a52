"""Request schema: the Jev wire format (DESIGN.md §4), validated into typed, frozen objects.

``parse_request(body)`` takes raw JSON (``str`` or ``bytes``) and ``validate_request(obj)`` an
already-decoded object; both return a :class:`Request` or raise :class:`RequestError`, whose
``errors`` list uses the FastAPI/pydantic shape that Jev returns with HTTP 422::

    {"loc": ["body", "questions", "team", "criteria"], "msg": "...", "type": "..."}

Every violation found is reported (not only the first), each naming the field path and the rule.

The wire schema is the pydantic models :class:`RequestBody`, :class:`NoulQuestion`, :class:`ChoiceQuestion`,
:class:`ScoreQuestion` (a union discriminated by ``type``; the limits are passed as validation context), and
``/openapi.json`` is generated from them (:func:`request_json_schema`). A structural pre-pass over the raw JSON
checks what pydantic cannot see: duplicate keys, nesting depth, lone surrogates, numbers out of range.

Decisions where the wire format is silent (also in docs/guide/requests.md):

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
from typing import Annotated, Any, Callable, Literal, Optional, Sequence, Union

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag,
                      ValidationError, ValidationInfo, WithJsonSchema, model_validator)
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from kevlike.config.limits import DEFAULT_LIMITS, Limits

Text = Union[str, dict, list]
"""User text: a string, or a JSON object/array rendered as canonical JSON (see :mod:`render`)."""

QUESTION_TYPES = ("noul", "choice", "score")


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
    x_abstain_above: float | None = None
    x_p_right_below: float | None = None


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


def prepare_each(prepare: Callable[[Any], Any], requests: Sequence[Any]) -> list:
    """``[prepare(r) for r in requests]``, where the first :class:`RequestError` of request ``i`` leaves with ``i``
    after ``body`` in each error location when more than one request is given (``["body", i, "questions", …]``).
    :meth:`kevlike.model.engine.Engine.decide_batch` and the ensemble's prepare a batch through it.

    Raises:
        RequestError: the first request ``prepare`` refuses."""
    out = []
    for i, r in enumerate(requests):
        try:
            out.append(prepare(r))
        except RequestError as e:
            if len(requests) > 1:
                for err in e.errors:
                    err["loc"] = [err["loc"][0], i, *err["loc"][1:]]
                raise RequestError(e.errors, e.status) from None
            raise
    return out


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


MAX_INT_DIGITS = 4300
"""Digits an integer in a request may have: CPython's default limit on int/str conversion
(``sys.get_int_max_str_digits()``, the guard against CVE-2020-10735), fixed here so the wire format does not change
with the interpreter's setting. JSON has no integer limit; a longer one is refused with its field path."""

_TOO_LONG = 10 ** MAX_INT_DIGITS


class _TooLongInt(str):
    """The literal of a JSON integer with more than :data:`MAX_INT_DIGITS` digits, reported by :func:`_walk` with
    its field path (Python cannot convert it to an int under its default limit)."""


def _parse_int(literal: str) -> int | _TooLongInt:
    digits = len(literal) - literal.startswith("-")
    return _TooLongInt(literal) if digits > MAX_INT_DIGITS else int(literal)


def plural(n: int, word: str) -> str:
    """``"1 option"``, ``"2 options"``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def parse_request(body: str | bytes, limits: Limits = DEFAULT_LIMITS) -> Request:
    """Decode a JSON body and validate it.

    Raises:
        RequestError: 413 if the body exceeds ``limits.max_body_bytes``; 422 for invalid JSON,
            invalid UTF-8, duplicate keys, nesting deeper than ``limits.max_depth`` or any schema rule.
    """
    return validate_request(_decode(body, limits), limits)


def parse_json(body: str | bytes, limits: Limits = DEFAULT_LIMITS) -> Any:
    """Decode a JSON body under the wire format's structural rules, for bodies other than a request
    (``/v1/feedback``): the size limit, UTF-8, no duplicate keys, nesting at most ``limits.max_depth``, no
    lone surrogates, numbers that fit a 64-bit float. Returns the decoded value (objects as dicts).

    Raises:
        RequestError: 413 over ``limits.max_body_bytes``; 422 naming the field of every other violation.
    """
    obj = _decode(body, limits)
    errors: list[dict[str, Any]] = []
    _walk(obj, [], 1, limits, errors)
    if errors:
        raise RequestError(errors)
    return obj


def _decode(body: str | bytes, limits: Limits) -> Any:
    """``json.loads`` of a body within the size limit, duplicate keys, constants and huge numbers kept for
    :func:`_walk` to report (RequestError 413 / 422 as :func:`parse_request` says)."""
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
        return json.loads(body, object_pairs_hook=_object_pairs, parse_constant=_reject_constant,
                          parse_float=_parse_float, parse_int=_parse_int)
    except RecursionError:
        raise RequestError([_err([], f"JSON nesting exceeds the limit of {limits.max_depth}", "json_too_deep")])
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        msg = str(e)
        raise RequestError([_err([], f"invalid JSON: {msg}", "json_invalid")]) from e   # the decoder's position


def _walk(value: Any, loc: list, depth: int, limits: Limits, errors: list) -> None:
    """Structural checks over the raw JSON: depth, duplicate keys, lone surrogates."""
    if depth > limits.max_depth:
        errors.append(_err(loc, f"JSON nesting exceeds the limit of {limits.max_depth}", "json_too_deep"))
        return
    if isinstance(value, _OutOfRange):
        shown = value if len(value) <= 40 else value[:37] + "..."
        errors.append(_err(loc, f"number {shown} is out of range (a JSON number must fit a 64-bit float, "
                                f"|x| < 1.8e308)", "number_out_of_range"))
    elif isinstance(value, _TooLongInt) or (isinstance(value, int) and not isinstance(value, bool)
                                            and abs(value) >= _TOO_LONG):
        n = len(value) - value.startswith("-") if isinstance(value, str) else f"more than {MAX_INT_DIGITS}"
        errors.append(_err(loc, f"integer has {n} digits; the limit is {MAX_INT_DIGITS}", "number_out_of_range"))
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


def _type_name(v: Any) -> str:
    return {type(None): "null", bool: "boolean", int: "number", float: "number", str: "string",
            list: "array"}.get(type(v), "object" if isinstance(v, dict) else type(v).__name__)


# --- the wire schema as pydantic models --------------------------------------------------------------
# Each field's rule raises a PydanticCustomError carrying the error type and message Jev clients see;
# limits come from the validation context ({"limits": Limits}); wire_errors() maps pydantic's error list
# onto the wire shape (the tag of the question union is dropped from the path).

def _fail(type_: str, msg: str):
    raise PydanticCustomError(type_, msg)   # no context: the message is taken literally, braces included


def _limits(info: ValidationInfo) -> Limits:
    return (info.context or {}).get("limits", DEFAULT_LIMITS)


def _text(what: str, nullable: bool = False):
    kinds = "a string, object, array or null" if nullable else "a string, object or array"

    def check(v: Any) -> Any:
        if isinstance(v, (str, dict, list)) or (nullable and v is None):
            return v
        _fail("text_type", f"{what} be {kinds}, got {_type_name(v)}")
    schema = {"type": ["string", "object", "array", *(["null"] if nullable else [])]}
    return Annotated[Any, BeforeValidator(check), WithJsonSchema(schema)]


Text_ = _text("must")
Description = _text("description must", nullable=True)
LevelText = _text("level description must")


def _nonempty(what: str):
    def check(v: str) -> str:
        if v == "":
            _fail("string_too_short", f"{what} must be a non-empty string")
        return v
    return Annotated[str, AfterValidator(check)]


OptionKey = _nonempty("option key")
QuestionId = _nonempty("question id")


def _noul_criteria(v: Any) -> Any:
    if v is not None and not isinstance(v, dict):
        _fail("dict_type", f"noul criteria must be an object with keys 'true'/'false' or null, got {_type_name(v)}")
    return v


def _count(v: Any, qtype: str, what: str, lo: int, hi: int, over_hint: str = "") -> Any:
    """``v`` if it holds ``lo`` to ``hi`` items; else a validation error, with ``over_hint`` after it when too many."""
    if not lo <= len(v) <= hi:
        _fail("too_short" if len(v) < lo else "too_long",
              f"{qtype} has {plural(len(v), what)}; it needs {lo} to {hi}{over_hint if len(v) > hi else ''}")
    return v


def _choice_criteria(v: Any, info: ValidationInfo) -> Any:
    if not isinstance(v, dict):
        _fail("dict_type", f"choice criteria must be an object mapping option keys to descriptions, got {_type_name(v)}")
    # the one limit a deployment may raise: the error says how
    return _count(v, "choice", "option", _limits(info).min_options, _limits(info).max_options,
                  " (`kevlike decide/serve --max-options N` raises the limit)")


def _score_criteria(v: Any, info: ValidationInfo) -> Any:
    lim = _limits(info)
    if isinstance(v, dict):
        _fail("score_legacy_form", 'the legacy map form of score criteria (e.g. {"0": "low", "1": "high"}) is not '
                                   "supported; send an array of level descriptions, lowest first")
    if not isinstance(v, list):
        _fail("list_type", f"score criteria must be an array of level descriptions, got {_type_name(v)}")
    return _count(v, "score", "level", lim.min_levels, lim.max_levels)


def _describes(criteria: Any) -> bool:
    """Whether noul ``criteria`` describe an answer (a non-blank description), so instructions may be omitted."""
    return isinstance(criteria, dict) and any(
        (isinstance(v, str) and v.strip()) or (isinstance(v, (dict, list)) and v) for v in criteria.values())


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NoulCriteria(_Strict):
    """Descriptions of the two answers of a yes/no question (either may be omitted or null)."""

    true: Description = None
    false: Description = None


def _optional_instructions(schema: dict) -> None:
    schema["required"].remove("instructions")


class NoulQuestion(_Strict):
    """A yes/no question; ``instructions`` may be omitted when ``criteria`` describe an answer."""

    model_config = ConfigDict(json_schema_extra=_optional_instructions)
    type: Literal["noul"]
    instructions: Text_
    criteria: Annotated[Optional[NoulCriteria], BeforeValidator(_noul_criteria)] = None

    @model_validator(mode="before")
    @classmethod
    def _instructions_from_criteria(cls, data: Any) -> Any:
        if isinstance(data, dict) and "instructions" not in data and _describes(data.get("criteria")):
            return {**data, "instructions": ""}
        return data


class ChoiceQuestion(_Strict):
    """A choice among 2–255 options (limits configurable): option key → description or null."""

    type: Literal["choice"]
    instructions: Text_
    criteria: Annotated[dict[OptionKey, Description], BeforeValidator(_choice_criteria)]


class ScoreQuestion(_Strict):
    """An ordered scale of 2–10 levels (limits configurable), level descriptions lowest first."""

    type: Literal["score"]
    instructions: Text_
    criteria: Annotated[list[LevelText], BeforeValidator(_score_criteria)]


def _question(v: Any) -> Any:
    if not isinstance(v, dict):
        _fail("dict_type", f"question must be an object, got {_type_name(v)}")
    return v


_NO_TYPE = object()


def _bad_tag(v: Any) -> Any:
    if v is _NO_TYPE:
        _fail("missing_tag", "field required (one of 'noul', 'choice', 'score')")
    _fail("union_tag_invalid", f"unknown question type {json.dumps(v)[:60]} (expected 'noul', 'choice' or 'score')")


class _Untyped(_Strict):
    """What a question without a known ``type`` is checked as: its unknown fields and its type are reported."""

    type: Annotated[Any, BeforeValidator(_bad_tag)]
    instructions: Any = None
    criteria: Any = None

    @model_validator(mode="before")
    @classmethod
    def _mark_missing(cls, data: Any) -> Any:
        return data if "type" in data else {**data, "type": _NO_TYPE}


def _tag(v: Any) -> str:
    t = v.get("type") if isinstance(v, dict) else None
    return t if isinstance(t, str) and t in QUESTION_TYPES else "untyped"


AnyQuestion = Annotated[Union[Annotated[NoulQuestion, Tag("noul")], Annotated[ChoiceQuestion, Tag("choice")],
                              Annotated[ScoreQuestion, Tag("score")], SkipJsonSchema[Annotated[_Untyped, Tag("untyped")]]],
                        Discriminator(_tag), BeforeValidator(_question)]


def _questions(v: Any, info: ValidationInfo) -> Any:
    lim = _limits(info)
    if not isinstance(v, dict):
        _fail("dict_type", f"must be an object mapping question ids to questions, got {_type_name(v)}")
    if not v:
        _fail("too_short", "must contain at least 1 question")
    if len(v) > lim.max_questions:
        _fail("too_long", f"has {plural(len(v), 'question')}; the limit is {lim.max_questions}")
    return v


def _model_name(v: Any) -> Any:
    if v is not None and not isinstance(v, str):
        _fail("string_type", f"must be a string, got {_type_name(v)}")
    return v


def _threshold(what: str):
    """A validator of a top-level probability threshold: None, or an int or float from 0 to 1 (not a bool);
    ``what`` says what the threshold does, in the error."""
    def check(v: Any) -> Any:
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1):
            _fail("value_error", f"must be a probability from 0 to 1 ({what}), got {json.dumps(v)[:60]}")
        return v
    return check


_abstain_above = _threshold("answers whose x_abstain is above it get \"x_abstained\": true")
_p_right_below = _threshold("answers whose P(right) = (1 - x_abstain) * top probability is below it get "
                          "\"x_abstained\": true")


class RequestBody(BaseModel):
    """The body of ``POST /v1/systemone``. Unknown top-level fields are ignored (Jev does too) and named in
    the ``x-kevlike-ignored-fields`` response header; unknown fields inside a question are errors."""

    model_config = ConfigDict(extra="allow", frozen=True)
    model: Annotated[Optional[str], BeforeValidator(_model_name)] = Field(
        None, description="served model name or alias (default: the server's default)")
    state: Text_ = Field(description="the text decided about: a string, or a JSON object or array")
    questions: Annotated[dict[QuestionId, AnyQuestion], BeforeValidator(_questions)] = Field(
        description="question id -> question")
    x_abstain_above: Annotated[Optional[float], BeforeValidator(_abstain_above)] = Field(
        None, description="kevlike extension: answers whose x_abstain is above this probability also carry "
                          "\"x_abstained\": true (models with the x_abstain capability; default: the server's "
                          "--abstain-above, else none)")
    x_p_right_below: Annotated[Optional[float], BeforeValidator(_p_right_below)] = Field(
        None, description="kevlike extension: answers whose P(right) = (1 - x_abstain) * the top option's "
                          "probability is below this probability also carry \"x_abstained\": true (models with the "
                          "x_abstain capability; default: the server's --p-right-below, else none)")


_MISSING = {
    ("noul", "instructions"): "field required (a noul question may omit it only when its criteria describe the answers)",
    ("choice", "criteria"): "field required: an object mapping option keys to descriptions (or null)",
    ("score", "criteria"): "field required: an array of level descriptions, lowest first",
}


def wire_errors(e: ValidationError) -> list[dict[str, Any]]:
    """pydantic's errors as the wire's ``{"loc": ["body", ...], "msg", "type"}``, each question's errors in
    the order id, unknown fields, type, instructions, criteria."""
    out: list[tuple[tuple, int, dict]] = []
    for d in e.errors(include_url=False, include_context=False, include_input=False):
        loc, tag = list(d["loc"]), None
        if len(loc) > 2 and loc[0] == "questions" and loc[2] in (*QUESTION_TYPES, "untyped"):
            tag = loc.pop(2)           # the union's tag
        if loc[-1] == "[key]":         # an invalid key is reported at the key
            loc.pop()
        type_, msg = d["type"], d["msg"]
        if type_ == "missing":
            msg = _MISSING.get((tag, loc[-1]), "field required")
        elif type_ == "missing_tag":
            type_ = "missing"
        elif type_ == "extra_forbidden":
            msg = ("unknown field (allowed: type, instructions, criteria)" if len(loc) == 3   # questions.ID.FIELD
                   else "noul criteria accept only the keys 'true' and 'false'")                # ….criteria.KEY
        rank = 0 if len(loc) <= 2 else 1 if type_ == "extra_forbidden" and len(loc) == 3 else 2
        out.append((tuple(loc[:2]), rank, {"loc": ["body", *loc], "msg": msg, "type": type_}))
    # errors arrive grouped by question; order inside each group by rank (stable)
    order = {}
    for group, _, _ in out:
        order.setdefault(group, len(order))
    return [err for _, _, err in sorted(out, key=lambda t: (order[t[0]], t[1]))]


def request_json_schema(limits: Limits = DEFAULT_LIMITS, ref_template: str = "#/$defs/{model}") -> dict:
    """JSON Schema of :class:`RequestBody` (generated by pydantic) with ``limits`` filled in."""
    schema = RequestBody.model_json_schema(ref_template=ref_template)
    schema["properties"]["questions"]["maxProperties"] = limits.max_questions
    schema["properties"]["questions"]["minProperties"] = 1
    choice = schema["$defs"]["ChoiceQuestion"]["properties"]["criteria"]
    choice["minProperties"], choice["maxProperties"] = limits.min_options, limits.max_options
    score = schema["$defs"]["ScoreQuestion"]["properties"]["criteria"]
    score["minItems"], score["maxItems"] = limits.min_levels, limits.max_levels
    # the union is discriminated by a function (to report unknown types in the wire's words); name its tag here
    union = schema["properties"]["questions"]["additionalProperties"]
    union["discriminator"] = {"propertyName": "type", "mapping": {
        schema["$defs"][ref["$ref"].rsplit("/", 1)[1]]["properties"]["type"]["const"]: ref["$ref"]
        for ref in union["oneOf"]}}
    return schema


def validate_request(obj: Any, limits: Limits = DEFAULT_LIMITS) -> Request:
    """Validate a decoded JSON object against :class:`RequestBody` (the rules: module docstring) after the
    structural pre-pass pydantic cannot do (nesting depth, duplicate keys, lone surrogates, numbers out of
    range).

    Raises:
        RequestError: 422 listing every violation with its field path.
    """
    if not isinstance(obj, dict):
        raise RequestError([_err([], f"request must be a JSON object, got {_type_name(obj)}", "model_type")])
    errors: list[dict[str, Any]] = []
    _walk(obj, [], 1, limits, errors)
    if errors:
        raise RequestError(errors)
    try:
        body = RequestBody.model_validate(obj, context={"limits": limits})
    except ValidationError as e:
        raise RequestError(wire_errors(e)) from None
    questions = []
    for qid, q in body.questions.items():
        if q.type == "noul":
            crit = q.criteria
            options = (Option("true", crit and crit.true), Option("false", crit and crit.false))
        elif q.type == "choice":
            options = tuple(Option(k, v) for k, v in q.criteria.items())
        else:
            options = tuple(Option(str(i), v) for i, v in enumerate(q.criteria))
        questions.append(Question(id=qid, type=q.type, instructions=q.instructions, options=options))
    ignored = tuple(k for k in obj if k not in RequestBody.model_fields)
    above = None if body.x_abstain_above is None else float(body.x_abstain_above)
    below = None if body.x_p_right_below is None else float(body.x_p_right_below)
    return Request(state=obj["state"], questions=tuple(questions), model=body.model, ignored_fields=ignored,
                   x_abstain_above=above, x_p_right_below=below)
