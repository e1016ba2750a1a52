"""Labelled requests: the one file format of a user's own data, shared by ``kevlike eval --data``,
``kevlike calibrate --data``, ``kevlike train`` (``data:`` in the config) and the outcome feedback of
``kevlike serve --record`` (the same answer values).

A labelled file is JSONL, one object per line (blank lines are skipped)::

    {"request": <Jev request>, "gold": {"<question id>": <answer>, ...}, "weight": 1.0}

An answer is, by question type,

* ``noul``: ``true`` or ``false`` (or ``"true"``/``"false"``);
* ``choice``: an option key;
* ``score``: a level index ``0 … n−1`` (an integer, or its string ``"2"``);
* any type: a probability distribution over the same answers, ``{"true": 0.8, "false": 0.2}``,
  ``{"billing": 0.7, "tech": 0.3}``, ``{"0": 0.1, "1": 0.9}`` (soft labels; unnamed answers get 0;
  the values must be ≥ 0 and sum to 1 within 1e-3, and are renormalised).

* any type: **"cannot tell"** — ``{"cannot_tell": true}`` — the state does not determine the answer (the
  gold of abstention, ``x_abstain``, docs/guide/abstention.md). It is the object with exactly the one key
  ``cannot_tell`` and the JSON value ``true`` (not ``1``, not ``"yes"``); a distribution never has a boolean
  value, so it cannot be mistaken for one even when an option is called ``cannot_tell``. Such a question
  counts in the abstention metrics (``kevlike eval --data``), trains ``x_abstain`` towards 1, and is left out
  of the answer metrics (accuracy, NLL, …) and of the option temperatures' fit.

Questions without gold are allowed (partial labels): they are answered but score nothing. A line
with no gold at all is kept (it counts as a request, not as a question). ``weight`` (default 1,
> 0) is the line's sampling weight when the file is training data; evaluation and calibration
count every labelled question once.

Nothing is dropped silently: a bad line raises :class:`LabelledDataError` naming the file, the line
number and the field.
"""

from __future__ import annotations

import difflib
import json
import math
from dataclasses import dataclass
from pathlib import Path

from kevlike.data.sources import Example
from kevlike.request.schema import DEFAULT_LIMITS, Limits, Question, Request, RequestError, parse_json, validate_request

CANNOT_TELL = "cannot_tell"
"""The key of the "cannot tell" gold, ``{"cannot_tell": true}`` (module docstring)."""

DISTRIBUTION_TOLERANCE = 1e-3
"""How far a soft label's probabilities may sum from 1 before the line is refused."""


def _json(value) -> str:
    """A value of the file as JSON writes it (``true``, ``"yes"``), for error messages; Python's repr otherwise."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return repr(value)


class LabelledDataError(ValueError):
    """A bad line of a labelled file: ``path``, 1-based ``line`` and the ``field`` path are in the message
    (``line`` None: the whole file, e.g. one with no labelled question)."""

    def __init__(self, path: str | Path, line: int | None, field: str, msg: str):
        self.path, self.line, self.field = str(path), line, field
        super().__init__(f"{path}:{line}: {field}: {msg}" if line is not None else f"{path}: {field}: {msg}")


@dataclass(frozen=True)
class Labelled:
    """One labelled request: ``request`` the Jev request as given (a dict), ``parsed`` it validated,
    ``gold`` ``{question id: [K] target probabilities in the question's option order}`` for the labelled
    questions, ``weight`` its sampling weight, ``line`` its 1-based line number."""

    request: dict
    parsed: Request
    gold: dict
    weight: float = 1.0
    line: int = 0
    cannot_tell: frozenset = frozenset()   # ids of the questions labelled {"cannot_tell": true} (in gold, uniform)


def answer_target(question: Question, answer) -> list[float]:
    """The target distribution ``[K]`` of one answer (see the module docstring) over ``question``'s
    options in request order.

    Raises:
        ValueError: an answer of the wrong type for the question, an unknown key or level, or a
            distribution with negative values or not summing to 1.
    """
    keys = [o.key for o in question.options]
    K = len(keys)
    if isinstance(answer, dict):
        if not answer:
            raise ValueError("an empty distribution")
        if "cannot_tell" in answer and "cannot_tell" not in keys:    # the outcome, written wrong: say what is wrong
            extra = [_json(k) for k in answer if k != "cannot_tell"]
            if extra:
                raise ValueError(f'{{"cannot_tell": true}} is an outcome on its own (the state did not determine the '
                                 f'answer), without other keys; got also {", ".join(extra[:5])}'
                                 f'{" …" if len(extra) > 5 else ""}')
            raise ValueError(f'"cannot_tell" takes true (the state did not determine the answer), got '
                             f'{_json(answer["cannot_tell"])}')
        out = [0.0] * K
        for k, v in answer.items():
            if k not in keys:
                hint = (' (did you mean {"cannot_tell": true}?)' if isinstance(k, str) and
                        difflib.SequenceMatcher(None, k.lower(), "cannot_tell").ratio() >= 0.7 else "")
                raise ValueError(f"{_json(k)} is not an answer of this {question.type} question (answers: "
                                 f"{', '.join(keys[:10])}{' …' if K > 10 else ''}){hint}")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"probability of {_json(k)} must be a number >= 0, got {_json(v)}")
            out[keys.index(k)] = float(v)
        total = sum(out)
        if abs(total - 1) > DISTRIBUTION_TOLERANCE:
            raise ValueError(f"probabilities sum to {total:.6g}, not 1")
        return [v / total for v in out]
    if question.type == "noul":
        if isinstance(answer, bool):
            answer = "true" if answer else "false"
        if answer not in ("true", "false"):
            raise ValueError(f"a noul answer is true or false, got {_json(answer)}")
    elif question.type == "score":
        if isinstance(answer, bool) or not isinstance(answer, (int, str)):
            raise ValueError(f"a score answer is a level index 0-{K - 1}, got {_json(answer)}")
        shown, answer = _json(answer), str(answer)
        if answer not in keys:
            digits = answer.lstrip("-")
            if not (digits.isascii() and digits.isdigit()):     # not int(): "²" and 5,000 digits raise inside it
                raise ValueError(f"a score answer is a level index 0-{K - 1} (an integer, or its digits as a "
                                 f"string), got {shown[:40]}{'…' if len(shown) > 40 else ''}")
            if len(digits) > 1 and digits[0] == "0":            # "03": a key is the index's own digits
                raise ValueError(f"a score answer is a level index 0-{K - 1} written without leading zeros, got "
                                 f"{shown[:40]}{'…' if len(shown) > 40 else ''}")
            raise ValueError(f"level {answer[:20]}{'…' if len(answer) > 20 else ''} is outside 0-{K - 1}")
    elif not isinstance(answer, str) or answer not in keys:
        raise ValueError(f"{_json(answer)} is not an option key of this choice question")
    return [1.0 if k == answer else 0.0 for k in keys]


def parse_line(obj, path: str | Path, line: int, limits: Limits = DEFAULT_LIMITS) -> Labelled:
    """One decoded line as :class:`Labelled`.

    Raises:
        LabelledDataError: any problem, with its field.
    """
    if not isinstance(obj, dict):
        raise LabelledDataError(path, line, "(line)", f"expected an object with request and gold, got {type(obj).__name__}")
    unknown = sorted(set(obj) - {"request", "gold", "weight"})
    if unknown:
        raise LabelledDataError(path, line, unknown[0], "unknown field (known: request, gold, weight)")
    if "request" not in obj:
        raise LabelledDataError(path, line, "request", "missing")
    try:
        parsed = validate_request(obj["request"], limits)
    except RequestError as e:
        err = e.errors[0]
        loc = ".".join(str(x) for x in err["loc"][1:]) or "body"
        raise LabelledDataError(path, line, f"request.{loc}" if loc != "body" else "request", err["msg"]) from None
    gold_in = obj.get("gold", {})
    if not isinstance(gold_in, dict):
        raise LabelledDataError(path, line, "gold", f"must be an object {{question id: answer}}, got {type(gold_in).__name__}")
    questions = {q.id: q for q in parsed.questions}
    gold, cannot_tell = {}, set()
    for qid, answer in gold_in.items():
        if qid not in questions:
            raise LabelledDataError(path, line, f"gold.{qid}", f"no question {qid!r} in the request")
        option_keys = {o.key for o in questions[qid].options}
        # {"cannot_tell": true}; but {"cannot_tell": 0.3, "other": 0.7} over an option of that name is a distribution
        if isinstance(answer, dict) and CANNOT_TELL in answer and not (
                CANNOT_TELL in option_keys and not isinstance(answer[CANNOT_TELL], bool)):
            if len(answer) != 1:
                raise LabelledDataError(path, line, f"gold.{qid}", f'a "cannot tell" gold is exactly '
                                        f'{{"cannot_tell": true}}, got the keys {", ".join(sorted(answer))}')
            if answer[CANNOT_TELL] is not True:
                raise LabelledDataError(path, line, f"gold.{qid}.cannot_tell",
                                        f"must be true (the JSON literal), got {json.dumps(answer[CANNOT_TELL])}")
            n = len(questions[qid].options)
            gold[qid] = [1.0 / n] * n
            cannot_tell.add(qid)
            continue
        try:
            gold[qid] = answer_target(questions[qid], answer)
        except ValueError as e:
            raise LabelledDataError(path, line, f"gold.{qid}", str(e)) from None
    weight = obj.get("weight", 1.0)
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise LabelledDataError(path, line, "weight", f"must be a number > 0, got {_json(weight)}")
    return Labelled(obj["request"], parsed, gold, float(weight), line, frozenset(cannot_tell))


def read_labelled(path: str | Path, limits: Limits = DEFAULT_LIMITS) -> list[Labelled]:
    """Every line of a labelled JSONL file (see the module docstring).

    Raises:
        FileNotFoundError: no such file.
        LabelledDataError: a line that is not UTF-8 or not JSON (a leading BOM is allowed), that breaks the
            request's structural rules anywhere (a repeated key, nesting, a lone surrogate, 1e400), or that is not a
            valid labelled request; a directory; a file with no labelled question at all.
    """
    path = Path(path)
    if path.is_dir():
        raise LabelledDataError(path, None, "(file)", "is a directory, not a labelled JSONL file")
    if not path.exists():
        raise FileNotFoundError(f"labelled data file {path} does not exist")
    if not path.is_file():      # /dev/null, a FIFO: read_bytes() would give nothing or block
        raise LabelledDataError(path, None, "(file)", "is not a regular file")
    out = []
    for i, raw in enumerate(path.read_bytes().splitlines(), 1):     # \n, \r\n and \r end a line
        try:
            text = raw.decode("utf-8-sig" if i == 1 else "utf-8")   # a leading BOM (Windows editors) is not content
        except UnicodeDecodeError as e:
            raise LabelledDataError(path, i, "(line)", f"not UTF-8 text (byte {e.start + 1} of the line); a labelled "
                                                       f"file is JSON lines in UTF-8") from None
        if not text.strip():
            continue
        try:   # the request's structural rules over the whole line: duplicate keys, depth, lone surrogates, 1e400
            obj = parse_json(text, limits)
        except RequestError as e:
            err = e.errors[0]
            loc = ".".join(str(x) for x in err["loc"][1:]) or "(line)"
            bad = e.__cause__            # JSON syntax: the decoder's own position, as the line shows it
            msg = f"not JSON: {bad.msg} at column {bad.colno}" if isinstance(bad, json.JSONDecodeError) else err["msg"]
            raise LabelledDataError(path, i, loc, msg) from None
        out.append(parse_line(obj, path, i, limits))
    if not any(x.gold for x in out):
        raise LabelledDataError(path, None, "gold", "the file has no labelled question" if out else
                                 "the file is empty (one JSON request per line)")
    return out


def to_examples(items: list[Labelled], source: str = "user"):
    """The labelled requests as training/evaluation :class:`kevlike.data.sources.Example` s: targets
    only for the labelled questions; the unlabelled questions are dropped from the request (they
    would add tokens and no loss)."""
    out = []
    for it in items:
        if not it.gold:
            continue
        request = dict(it.request)
        request["questions"] = {k: v for k, v in it.request["questions"].items() if k in it.gold}
        gold = {}
        for q in it.parsed.questions:
            if q.id in it.gold and q.id not in it.cannot_tell:
                t = it.gold[q.id]
                gold[q.id] = q.options[max(range(len(t)), key=t.__getitem__)].key
        out.append(Example(request, dict(it.gold), source, gold, cannot_tell=it.cannot_tell))
    return out
