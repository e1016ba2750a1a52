"""Training and evaluation data for the abstention readout ``x_abstain`` (issue 33, docs/guide/abstention.md):
requests that mix questions the state answers with questions it does not, **on the same state**, so the model
learns to tell the two apart on one text rather than by topic.

A row is ``(request, gold, twins)`` like the other typed sources (:mod:`kevlike.data.reading`), except that the
gold of a question the state does not determine is :data:`CANNOT_TELL` (``None``): such a question trains
``x_abstain`` towards 1 and no option (its option cross-entropy is masked, :func:`kevlike.training.train.loss_terms`);
every other question trains ``x_abstain`` towards 0.

``abstain_docs`` (written by kevlike, seeds per split as :mod:`kevlike.data.reading`)
    A generated document (:func:`kevlike.data.reading.document`) with 2–4 of its own questions (answerable),
    plus one or two of

    * *another document's questions*: questions generated for a document of another kind (a rating asked of an
      incident report, a version asked of an order message) — facts this state does not contain;
    * *no option fits*: one of its own choice questions with the gold option removed (≥ 2 options left), so
      every listed answer is wrong;
    * *an unstated detail*: a question about a detail no generated document states (:data:`UNSTATED`), as a
      yes/no or a choice.

``abstain_snli`` (SNLI 1.0, :mod:`kevlike.data.snli`; ``kevlike fetch snli``)
    A premise and its hypotheses, each asked as a yes/no "is it true that …?": entailment → yes, contradiction →
    no, **neutral → cannot tell** (the text neither says nor contradicts it). The splits are those of
    :func:`kevlike.data.snli.rows` (train / validation by the premise hash, test = the official test file,
    evaluation only).

``abstain_ts`` (tasksource's ``record_eligibility`` generator, :mod:`kevlike.data.tasksource_gen`)
    The generator's records and numbered requirements come with its rule that *explicitly absent information and
    conflicting claims count as unknown*, and it asks, as choices, whether a requirement is "met, violated or
    unknown" and whether a record is "eligible, ineligible or undetermined". Each row keeps up to three of the
    generator's own questions (those choices included: "unknown" is an offered, answerable option there) and adds
    the same two decisions as plain yes/no questions (:data:`TS_REQUIREMENT`, :data:`TS_ELIGIBLE`): met / eligible
    → yes, violated / ineligible → no, **unknown / undetermined → cannot tell** — the text, by its own rules,
    does not determine them. About a quarter of those yes/no questions are "cannot tell" (validation: 9 of 40
    requirement questions, 10 of 40 eligibility questions). The splits are the generator's
    (:func:`kevlike.data.tasksource_gen.rows`: disjoint by state). The other generators have no such case:
    ``evidence_sufficiency``'s "is the claim sufficiently supported?" is decided by its stated rules (an
    answerable no), and ``partial_observation_calibration`` is not used at all (:data:`kevlike.data.tasksource_gen.SKIPPED`).

Shares: the sources are meant to be a small part of a training mixture (``configs/abstain.yaml``: about 10 % of
the draws), so that answerable accuracy does not fall.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache

from kevlike.data import reading, snli, tasksource_gen
from kevlike.data.sources import hash_split

CANNOT_TELL = None
"""The gold of a question the state does not determine (its ``x_abstain`` target is 1)."""

SPLIT_SIZES = {"train": 4000, "validation": 80, "test": 300}

# details no generated document (kevlike.data.reading) states: (question, options) — options None: a yes/no
UNSTATED = (
    ("Did the author pay by credit card?", None),
    ("Is the author older than forty?", None),
    ("Was it raining when this was written?", None),
    ("Does the author have a pet?", None),
    ("Was this written on a weekend?", None),
    ("Did the author's manager approve this message?", None),
    ("In which city does the author live?", ["London", "Madrid", "Toronto", "Sydney"]),
    ("What is the author's job title?", ["accountant", "nurse", "teacher", "engineer"]),
    ("How did the author first hear about the company?", ["a friend", "an advert", "a web search"]),
    ("What is the author's favourite colour?", ["red", "green", "blue"]),
    ("Which phone does the author use?", ["an iPhone", "an Android phone", "a landline"]),
    ("How many children does the author have?", ["none", "one", "two or more"]),
)


def _document(rng: random.Random) -> tuple[dict, dict, str]:
    form: list = []
    req, gold, _ = reading.document(rng, form)
    return req, gold, form[0]


def _take(rng: random.Random, questions: dict, gold: dict, n: int) -> list[tuple[dict, object]]:
    ids = list(questions)
    rng.shuffle(ids)
    return [(questions[q], gold[q]) for q in ids[:n]]


def docs_row(rng: random.Random) -> tuple[dict, dict, list]:
    """One ``abstain_docs`` row (module docstring): 2–4 answerable questions of a document and 1–2 it does not
    answer, shuffled, ids ``q0…``."""
    req, gold, form = _document(rng)
    asked = _take(rng, req["questions"], gold, rng.randint(2, 4))
    for _ in range(rng.randint(1, 2)):
        kind = rng.random()
        if kind < 0.45:                                   # another kind of document's question
            for _ in range(20):
                other, other_gold, other_form = _document(rng)
                if other_form != form:
                    break
            asked.extend((q, CANNOT_TELL) for q, _ in _take(rng, other["questions"], other_gold, 1))
        elif kind < 0.75:                                 # one of its own choice questions, the gold option removed
            choices = [(q, g) for q, g in zip(req["questions"].values(), (gold[k] for k in req["questions"]))
                       if q["type"] == "choice" and len(q["criteria"]) >= 3 and g in q["criteria"]]
            if not choices:
                continue
            q, g = rng.choice(choices)
            asked.append(({**q, "criteria": {k: v for k, v in q["criteria"].items() if k != g}}, CANNOT_TELL))
        else:                                             # a detail no document states
            text, options = rng.choice(UNSTATED)
            if options is None:
                asked.append(({"type": "noul", "instructions": text, "criteria": None}, CANNOT_TELL))
            else:
                opts = list(options)
                rng.shuffle(opts)
                asked.append(({"type": "choice", "instructions": text, "criteria": {o: None for o in opts}},
                              CANNOT_TELL))
    rng.shuffle(asked)
    questions, golds, seen = {}, {}, set()
    for q, g in asked:
        if q["instructions"] in seen:                      # the same question asked twice keeps its first form
            continue
        seen.add(q["instructions"])
        qid = f"q{len(questions)}"
        questions[qid], golds[qid] = q, g
    return {"state": req["state"], "questions": questions}, golds, []


def snli_row(premise: str, hyps, rng: random.Random) -> tuple[dict, dict, list]:
    """One ``abstain_snli`` row: the premise and up to 6 of its hypotheses as "is it true that …?" (neutral:
    :data:`CANNOT_TELL`)."""
    questions, golds = {}, {}
    for i, (h, label) in enumerate(hyps[:6]):
        clause = snli._clause(h)
        text = rng.choice(snli.TRUE_TEMPLATES).format(H=clause[0].upper() + clause[1:], h=clause)
        questions[f"h{i}"] = {"type": "noul", "instructions": text, "criteria": None}
        golds[f"h{i}"] = {"entailment": "true", "contradiction": "false"}.get(label, CANNOT_TELL)
    return {"state": premise, "questions": questions}, golds, []


TS_REQUIREMENT = (re.compile(r"For (\S+), is (\S+) met, violated or unknown\?"),
                  ("For {p}, is {c} met?", "Does {p} meet requirement {c}?", "Is requirement {c} satisfied by {p}?",
                   "Does {p} satisfy {c}?"),
                  {"met": "true", "violated": "false", "unknown": CANNOT_TELL})
"""``record_eligibility``'s requirement choice: its pattern (groups: record, requirement), the yes/no wordings asked
in its place, and the gold of each of its answers."""
TS_ELIGIBLE = (re.compile(r"What is the eligibility status of (\S+)\?"),
               ("Is {p} eligible?", "Does {p} qualify under the stated requirements?", "Is {p} an eligible record?",
                "Does {p} meet every requirement?"),
               {"eligible": "true", "ineligible": "false", "undetermined": CANNOT_TELL})
"""``record_eligibility``'s eligibility choice (group: record), as :data:`TS_REQUIREMENT`."""


def ts_row(req: dict, gold: dict, rng: random.Random) -> tuple[dict, dict, list]:
    """One ``abstain_ts`` row from a ``ts_record_eligibility`` row ``(req, gold)`` (module docstring): up to three
    of its questions, shuffled, then the yes/no form of its requirement and eligibility choices (ids ``met``,
    ``eligible``; gold ``"true"``, ``"false"`` or :data:`CANNOT_TELL`). A choice whose text or answer is not the
    generator's known form adds nothing."""
    ids = list(req["questions"])
    rng.shuffle(ids)
    questions = {q: req["questions"][q] for q in ids[:3]}
    golds = {q: gold[q] for q in questions}
    for qid, (pattern, wordings, answers) in (("met", TS_REQUIREMENT), ("eligible", TS_ELIGIBLE)):
        for q, spec in req["questions"].items():
            m = pattern.fullmatch(spec["instructions"])
            if spec["type"] == "choice" and m and gold[q] in answers:
                text = rng.choice(wordings).format(p=m.group(1), c=m.group(2) if m.re.groups > 1 else "")
                questions[qid] = {"type": "noul", "instructions": text, "criteria": None}
                golds[qid] = answers[gold[q]]
                break
    return {"state": req["state"], "questions": questions}, golds, []


@lru_cache(maxsize=None)
def rows(source: str, split: str) -> tuple:
    """Seeded rows of a split of ``abstain_docs``, ``abstain_snli`` or ``abstain_ts`` (module docstring).

    Raises:
        ValueError: unknown source or split.
        kevlike.data.sources.DataUnavailableError: ``abstain_snli`` before ``kevlike fetch snli``; ``abstain_ts``
            without the tasksource package.
    """
    if split not in reading.SPLIT_SEEDS:
        raise ValueError(f"split must be one of {tuple(reading.SPLIT_SEEDS)}, got {split!r}")
    if source == "abstain_docs":
        rng = random.Random(f"abstain_docs:{reading.SPLIT_SEEDS[split]}")
        return tuple(docs_row(rng) for _ in range(SPLIT_SIZES[split]))
    if source == "abstain_snli":
        if split == "test":
            prem = snli._premises("test")[:SPLIT_SIZES["test"]]
        else:
            prem = tuple(x for x in snli._premises("train")
                         if (hash_split(x[0]) == "test") == (split == "validation"))
            prem = prem[:SPLIT_SIZES["validation"]] if split == "validation" else prem
        return tuple(snli_row(p, hyps, random.Random(f"abstain_snli:{p}")) for p, hyps in prem)
    if source == "abstain_ts":
        return tuple(ts_row(req, gold, random.Random(f"abstain_ts:{split}:{i}"))
                     for i, (req, gold) in enumerate(tasksource_gen.rows("record_eligibility", split)))
    raise ValueError(f"unknown abstention source {source!r} (known: abstain_docs, abstain_snli, abstain_ts)")
