"""``mentions``: questions about real texts whose answer is in the words of the text, not in its topic.

A model that answers the topic says "yes" to "Does the post mention X?" whenever X belongs to the post's
subject (issue 31: opposite questions both "yes", a one-word text "yes" to anything). Here every absent
phrase is drawn from *another text with the same label* (another post of the same newsgroup, another entry of
the same DBpedia class), so the topic cannot tell a present phrase from an absent one; only reading can.

States are the real page-like texts of three training sources (:data:`MENTION_SOURCES`, their own split: train
rows from train texts, validation from validation, test from test; none is a held-out source of the
generalization suite). Phrases (:func:`phrases`) are names (capitalised runs of one to three words that do not
open a sentence), numbers of two or more digits and long content words. A phrase is *present* when it occurs in
the text as whole words, case-insensitively (:func:`present`), and *absent* when the text holds no trace of it
(:func:`absent`: not even inside a word or as a word with the same stem). Per row, 3–6 of:

* yes/no "does the text mention X?" in several wordings, X present (yes) or absent (no), often as an opposite
  pair with "is X missing from the text?" tied as twins (``loss.perm``);
* a choice "which of these does the text mention?" (one present, two or three absent) and its reverse, "which
  of these does the text *not* mention?" (one absent, the others present);
* a score "how many of A, B and C does the text mention?" over none / one / two / all three.

Exact by construction: ``tests/test_mentions.py`` re-checks every gold against the text.
"""

from __future__ import annotations

import random
import re

from kevlike.data.reading import _Req      # the request builder the reading sources share

MENTION_SOURCES = ("20ng", "dbpedia", "yahoo")
SPLIT_SEEDS = {"train": 11, "validation": 12, "test": 13}
SPLIT_SIZES = {"train": 6000, "validation": 80, "test": 300}

MENTION_Q = ("Does the text mention {x}?", "Is {x} mentioned in the {n}?", "Does the {n} name {x}?",
             "Does {x} appear anywhere in the text?", "Is there any reference to {x} in the {n}?",
             "Does the {n} say anything about {x}?", "Can you find {x} in the text?")
WORD_Q = ('Does the text use the word "{x}"?', 'Does the word "{x}" occur in the {n}?',
          'Is the word "{x}" in the text?', 'Does "{x}" appear in the {n}?')
WORD_MISSING_Q = ('Is the word "{x}" missing from the text?', 'Does the {n} avoid the word "{x}"?',
                  'Is "{x}" absent from the {n}?')
MISSING_Q = ("Is {x} missing from the text?", "Does the {n} leave out {x}?", "Is {x} absent from the {n}?",
             "Does the text fail to mention {x}?", "Is there no mention of {x} in the {n}?")
WHICH_Q = ("Which of these does the text mention?", "Which one of these appears in the {n}?",
           "Which of the following is named in the {n}?", "Which of these can be found in the text?")
WHICH_NOT_Q = ("Which of these does the text not mention?", "Which one of these is missing from the {n}?",
               "Which of the following does the {n} leave out?", "Which of these cannot be found in the text?")
COUNT_Q = ("How many of these does the text mention: {a}, {b} and {c}?",
           "Of {a}, {b} and {c}, how many appear in the {n}?",
           "Count how many of {a}, {b} and {c} the {n} names.")
COUNT_LEVELS = (("none of them", "one of them", "two of them", "all three"),
                ("not one of them", "just one of them", "two of them", "all three of them"))

# words that open sentences or headers in capitals without being names
_NOT_NAMES = frozenset("the a an and or but if in on at to of for with by from as is are was were be this that these "
                       "those it its i i'm i've i'd my we our you your he she they his her their there here what "
                       "which who when where why how yes no not do does did have has had will would can could "
                       "should may might must also however so then thanks thank hi hello dear re subject from "
                       "organization lines summary keywords".split())
_STOP = frozenset("about above after again against because before being below between both during each further "
                  "having into itself more most other ought ourselves same should through under until very while "
                  "without would could something anything everything nothing someone anyone everyone people "
                  "really actually probably another because though although whether".split())
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|\d[\d,.]*\d")


def present(phrase: str, text: str) -> bool:
    """Whether ``phrase`` occurs in ``text`` as whole words, case-insensitively."""
    return re.search(rf"(?<![\w]){re.escape(phrase.lower())}(?![\w])", text.lower()) is not None


def absent(phrase: str, text: str) -> bool:
    """Whether ``text`` has no trace of ``phrase``: not even as part of a word, case-insensitively, and — for a
    word — no word sharing its first five letters or all but its last three ("Armenian" is not absent from
    "Armenians", nor "disbanded" from "disbanding"). Stricter than ``not present``: what is neither present
    nor absent is never asked."""
    low, p = text.lower(), phrase.lower()
    if p in low:
        return False
    return not (p.isalpha() and p[:max(5, len(p) - 3)] in low)


def kind(phrase: str) -> str:
    """``number``, ``name`` (capitalised) or ``word``."""
    return "number" if phrase[0].isdigit() else "name" if phrase[0].isupper() else "word"


def _glued(word: str) -> bool:
    """A lower-case letter followed by a capital, or an apostrophe: not one clean word."""
    return re.search(r"[a-z][A-Z]", word) is not None or "'" in word


def phrases(text: str) -> list[str]:
    """Candidate phrases of ``text``, de-duplicated in order: capitalised runs of 1–3 words that do not open a
    sentence (names), numbers of two or more digits, lower-case content words of eight letters or more."""
    out: list[str] = []
    tokens = [(m.group(), m.start()) for m in _WORD.finditer(text)]
    i = 0
    while i < len(tokens):
        word, start = tokens[i]
        before = text[:start].rstrip()
        opens = not before or before[-1] in ".!?:\n\"'(>" or before.endswith(("--", "-"))
        if _glued(word):              # "ClintonIn": two words run together where a line break was lost
            i += 1
            continue
        if word[0].isupper() and word.lower() not in _NOT_NAMES and not opens and not word.isupper():
            run = [word]
            while (len(run) < 3 and i + len(run) < len(tokens) and tokens[i + len(run)][0][0].isupper()
                   and tokens[i + len(run)][0].lower() not in _NOT_NAMES and not tokens[i + len(run)][0].isupper()
                   and not _glued(tokens[i + len(run)][0])
                   and text[tokens[i + len(run) - 1][1]:tokens[i + len(run)][1]].strip() == ""):
                run.append(tokens[i + len(run)][0])
            if len(" ".join(run)) >= 4:
                out.append(" ".join(run))
            i += len(run)
            continue
        if word[0].isdigit() and len(word.replace(",", "").replace(".", "")) >= 2 and not word.endswith((".", ",")):
            out.append(word)
        elif word.islower() and len(word) >= 8 and word.isalpha() and word not in _STOP:
            out.append(word)
        i += 1
    return list(dict.fromkeys(out))


def mention_row(rng: random.Random, text: str, noun: str, others: list[str]) -> tuple[dict, dict, list] | None:
    """One ``(request, gold, twins)`` row on ``text`` (a ``noun``: "newsgroup post"…), absent phrases drawn from
    ``others`` (texts with the same label; :func:`absent` from this one); None when the text has fewer than three
    phrases or the others give fewer than three absent ones."""
    mine = [p for p in phrases(text) if present(p, text)]      # "1990" of "1990s" is no whole word
    gone = list(dict.fromkeys(p for o in others for p in phrases(o) if absent(p, text)))
    if len(mine) < 3 or len(gone) < 3:
        return None

    def like(pool: list[str], model: str, k: int) -> list[str]:
        """``k`` of ``pool`` (fewer if it is short), those of ``model``'s kind first: a choice is not told by
        its options' kinds."""
        same = [p for p in pool if kind(p) == kind(model)]
        other = [p for p in pool if kind(p) != kind(model)]
        rng.shuffle(same)
        rng.shuffle(other)
        return (same + other)[:k]

    def yes_no(x: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return (WORD_Q, WORD_MISSING_Q) if kind(x) == "word" else (MENTION_Q, MISSING_Q)

    q, n = _Req(rng), noun
    for _ in range(rng.randint(3, 6)):
        draw = rng.random()
        if draw < 0.4:
            truth = rng.random() < 0.5
            x = rng.choice(mine if truth else gone)
            ask, missing = yes_no(x)
            if rng.random() < 0.5:
                q.pair(rng.choice(ask).format(x=x, n=n), rng.choice(missing).format(x=x, n=n), truth)
            else:
                q.noul(rng.choice(ask).format(x=x, n=n), truth)
        elif draw < 0.6:
            gold = rng.choice(mine)
            q.choice(rng.choice(WHICH_Q).format(n=n), [gold, *like(gone, gold, rng.randint(2, 3))], gold)
        elif draw < 0.8:
            gold = rng.choice(gone)
            q.choice(rng.choice(WHICH_NOT_Q).format(n=n), [gold, *like(mine, gold, rng.randint(2, 3))], gold)
        else:
            k = rng.randint(0, 3)
            picks = rng.sample(mine, k) + rng.sample(gone, 3 - k)
            rng.shuffle(picks)
            text_q = rng.choice(COUNT_Q).format(a=picks[0], b=picks[1], c=picks[2], n=n)
            q.score(text_q, list(rng.choice(COUNT_LEVELS)), k, reverse=False)
    seen, keep = set(), {}
    for qid, v in q.questions.items():          # a repeated question is asked once (a twin keeps its pair)
        if v["instructions"] not in seen:
            seen.add(v["instructions"])
            keep[qid] = v
    twins = [t for t in q.twins if t[0] in keep and t[1] in keep]
    return {"state": text, "questions": keep}, {k: q.gold[k] for k in keep}, twins


def rows(split: str, texts: dict[str, list[tuple[str, str]]], nouns: dict[str, str]) -> tuple:
    """Seeded rows of ``split`` (:data:`SPLIT_SIZES`) from ``texts`` (``{source: [(text, label), …]}``, that
    split's rows of each :data:`MENTION_SOURCES` source; ``nouns``: each source's noun). Sources are drawn in
    turn; a text whose row is None is skipped."""
    rng = random.Random(f"mentions:{SPLIT_SEEDS[split]}")
    by_label = {s: {} for s in texts}
    for s, items in texts.items():
        for t, label in items:
            by_label[s].setdefault(label, []).append(t)
    out, names = [], sorted(texts)
    while len(out) < SPLIT_SIZES[split]:
        s = names[len(out) % len(names)]
        text, label = rng.choice(texts[s])
        pool = [t for t in rng.sample(by_label[s][label], min(6, len(by_label[s][label]))) if t != text]
        row = mention_row(rng, text, nouns[s], pool)
        if row is not None:
            out.append(row)
    return tuple(out)
