"""The generalization suite's ``realistic`` split (issue 31, item 4): hand-written texts of the kinds users
send (support emails, reviews, incident reports, issue reports, job posts, release notes, letters, forum
posts, meeting notes, invoices, itineraries), 150–600 words each, with 4–7 typed questions whose answers
are plain in the text: traps (the topical answer is wrong), negated and opposite question pairs, numbers
read from the text, and absurd questions whose answer is no.

The file is :file:`kevlike/eval/data/realistic.json`; :func:`realistic_items` loads and validates it.
:file:`kevlike/eval/data/realistic_fresh.json` holds more pages in the same format, written after the models
of stages 1–44 were chosen (the ``realistic_fresh`` split), :file:`kevlike/eval/data/realistic_fresh2.json` a
second such batch, written in stage 47 after four decisions had read the first (``realistic_fresh2``),
:file:`kevlike/eval/data/realistic_fresh3.json` a third, written in stage 48 before the candidate it judges was
scored (``realistic_fresh3``), and :file:`kevlike/eval/data/realistic_fresh4.json` a fourth, written in stage 50 after
stage 49's choice read the first three (``realistic_fresh4``).

Each item is ``{"id", "kind", "state", "questions", "evidence"}``; ``questions`` maps a question id to a
Jev question (``noul``: gold ``"true"``/``"false"``; ``choice``: 2–8 option keys, gold one key; ``score``:
2–10 ordered levels, gold a level index) plus its ``gold`` and ``tags``; ``evidence`` maps every question id
to a quote from the state that decides it (pieces joined by `` ... ``; ``"not in text"`` for absurd ones).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

REALISTIC_FILE = Path(__file__).resolve().parent / "data" / "realistic.json"
# {split: file} of the batches of pages of the same kinds written after models were chosen (stage 45's
# ``realistic_fresh``, stage 47's ``realistic_fresh2``, stage 48's ``realistic_fresh3``, stage 50's
# ``realistic_fresh4``), each all in the validation half (kevlike/eval/generalization.py says why): a batch is
# "fresh" until decisions have read it (stage 45's was read by four, so stage 47 wrote a second; stage 48's candidate
# was designed from R6's errors on the second, so a third; stage 49 chose on all three, so a fourth)
FRESH_FILES = {split: REALISTIC_FILE.with_name(f"{split}.json")
               for split in ("realistic_fresh", "realistic_fresh2", "realistic_fresh3", "realistic_fresh4")}
MIN_WORDS, MAX_WORDS = 150, 600
MIN_QUESTIONS, MAX_QUESTIONS = 4, 7
PLAIN_TAGS = {"trap", "number", "absurd"}
PAIR_TAG = re.compile(r"^(negation_pair|opposite_pair):([a-z])$")
NOT_IN_TEXT = "not in text"


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _check_question(iid: str, qid: str, q: dict) -> None:
    where = f"realistic item {iid!r}, question {qid!r}"
    if not isinstance(q, dict):
        raise ValueError(f"{where}: not an object")
    if not isinstance(q.get("instructions"), str) or not q["instructions"].strip():
        raise ValueError(f"{where}: empty or missing instructions")
    kind, gold = q.get("type"), q.get("gold")
    if kind == "noul":
        if "criteria" in q:
            raise ValueError(f"{where}: a noul question takes no criteria")
        if gold not in ("true", "false"):
            raise ValueError(f"{where}: noul gold must be 'true' or 'false', not {gold!r}")
    elif kind == "choice":
        crit = q.get("criteria")
        if not isinstance(crit, dict) or not 2 <= len(crit) <= 8:
            raise ValueError(f"{where}: choice criteria must be an object of 2-8 options")
        if any(not isinstance(k, str) or not k.strip() for k in crit):
            raise ValueError(f"{where}: empty choice option")
        if any(v is not None and not isinstance(v, str) for v in crit.values()):
            raise ValueError(f"{where}: choice option descriptions must be null or text")
        if len({_norm(k) for k in crit}) != len(crit):
            raise ValueError(f"{where}: duplicate choice options")
        if not isinstance(gold, str) or gold not in crit:
            raise ValueError(f"{where}: choice gold {gold!r} is not one of its options")
    elif kind == "score":
        crit = q.get("criteria")
        if not isinstance(crit, list) or not 2 <= len(crit) <= 10:
            raise ValueError(f"{where}: score criteria must be a list of 2-10 levels")
        if any(not isinstance(c, str) or not c.strip() for c in crit):
            raise ValueError(f"{where}: empty score level")
        if len({_norm(c) for c in crit}) != len(crit):
            raise ValueError(f"{where}: duplicate score levels")
        if not isinstance(gold, int) or isinstance(gold, bool) or not 0 <= gold < len(crit):
            raise ValueError(f"{where}: score gold {gold!r} is not a level index 0..{len(crit) - 1}")
    else:
        raise ValueError(f"{where}: unknown type {kind!r}")
    tags = q.get("tags", [])
    if not isinstance(tags, list) or any(not isinstance(t, str) for t in tags):
        raise ValueError(f"{where}: tags must be a list of strings")
    for t in tags:
        if t not in PLAIN_TAGS and not PAIR_TAG.match(t):
            raise ValueError(f"{where}: unknown tag {t!r}")
    if "absurd" in tags and (kind != "noul" or gold != "false"):
        raise ValueError(f"{where}: an absurd question must be a noul with gold 'false'")


def _check_item(item: dict) -> None:
    iid = item.get("id") if isinstance(item, dict) else None
    if not isinstance(iid, str) or not iid:
        raise ValueError(f"realistic item {iid!r}: missing id")
    for field in ("kind", "state"):
        if not isinstance(item.get(field), str) or not item[field].strip():
            raise ValueError(f"realistic item {iid!r}: missing {field}")
    n_words = len(item["state"].split())
    if not MIN_WORDS <= n_words <= MAX_WORDS:
        raise ValueError(f"realistic item {iid!r}: state has {n_words} words, not {MIN_WORDS}-{MAX_WORDS}")
    qs = item.get("questions")
    if not isinstance(qs, dict) or not MIN_QUESTIONS <= len(qs) <= MAX_QUESTIONS:
        raise ValueError(f"realistic item {iid!r}: needs {MIN_QUESTIONS}-{MAX_QUESTIONS} questions")
    seen: dict[str, str] = {}
    pairs: dict[str, list[str]] = {}
    for qid, q in qs.items():
        _check_question(iid, qid, q)
        key = _norm(q["instructions"])
        if key in seen:
            raise ValueError(f"realistic item {iid!r}, question {qid!r}: same instructions as {seen[key]!r}")
        seen[key] = qid
        for t in q.get("tags", []):
            if PAIR_TAG.match(t):
                pairs.setdefault(t, []).append(qid)
    for tag, members in pairs.items():
        if len(members) != 2:
            raise ValueError(f"realistic item {iid!r}, question {members[0]!r}: pair tag {tag!r} on "
                             f"{len(members)} questions, not 2")
        a, b = (qs[m] for m in members)
        if a["type"] != "noul" or b["type"] != "noul" or a["gold"] == b["gold"]:
            raise ValueError(f"realistic item {iid!r}, question {members[1]!r}: pair {tag!r} needs two noul "
                             f"questions with opposite gold")
    ev = item.get("evidence")
    if not isinstance(ev, dict) or set(ev) != set(qs):
        raise ValueError(f"realistic item {iid!r}, question "
                         f"{sorted(set(qs) ^ set(ev or {}))[:1]!r}: evidence must cover exactly its questions")
    state = _norm(item["state"])
    for qid, quote in ev.items():
        if not isinstance(quote, str) or not quote.strip():
            raise ValueError(f"realistic item {iid!r}, question {qid!r}: empty evidence")
        if quote == NOT_IN_TEXT:
            if "absurd" not in qs[qid].get("tags", []):
                raise ValueError(f"realistic item {iid!r}, question {qid!r}: only absurd questions may have "
                                 f"evidence {NOT_IN_TEXT!r}")
            continue
        for piece in quote.split(" ... "):
            if _norm(piece) not in state:
                raise ValueError(f"realistic item {iid!r}, question {qid!r}: evidence {piece!r} is not in the state")


def validate(data: dict) -> list[dict]:
    """Check the structure of a loaded realistic file and return its items.

    Raises:
        ValueError: naming the item id (and question id where one is at fault) — a missing field, a state
            outside 150–600 words, fewer than 4 or more than 7 questions, an unknown type or tag, a noul gold
            other than ``"true"``/``"false"``, a choice gold that is not one of its 2–8 options, a score gold
            that is not an index of its 2–10 levels, two questions with the same instructions, a pair tag not
            on exactly two noul questions with opposite gold, an absurd question whose gold is not ``"false"``,
            evidence missing or not quoted from the state, or a duplicate item id.
    """
    if not isinstance(data, dict) or not isinstance(data.get("items"), list) or not data["items"]:
        raise ValueError("realistic file: needs a non-empty 'items' list")
    if not isinstance(data.get("about"), str) or not data["about"].strip():
        raise ValueError("realistic file: needs an 'about' text")
    ids: set[str] = set()
    for item in data["items"]:
        _check_item(item)
        if item["id"] in ids:
            raise ValueError(f"realistic item {item['id']!r}: duplicate id")
        ids.add(item["id"])
    return data["items"]


def realistic_items(path: str | Path = REALISTIC_FILE) -> list[dict]:
    """The realistic split's items from ``path`` (default: the shipped file), validated (:func:`validate`)."""
    return validate(json.loads(Path(path).read_text(encoding="utf-8")))
