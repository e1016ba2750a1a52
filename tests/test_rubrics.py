"""``rubrics`` (kevlike/data/rubrics.py): score questions with described levels; golds read back from the text."""

import random

from kevlike.data import rubrics
from kevlike.data.families import SOURCES, SYNTHETIC_SOURCES, source_rows
from tests.test_reading import _valid


def _said(scale, text):
    """``text`` as a row writes it, for each of ``scale``'s subjects."""
    return {text.format(t=t, T=t[:1].upper() + t[1:]) for t in scale.subjects}


def _level_in_text(scale, state):
    """The one level of ``scale`` whose fact sentence the text states (distractors are not facts)."""
    found = [i for i, lv in enumerate(scale.levels) if any(f in state for x in lv.facts for f in _said(scale, x))]
    assert len(found) <= 1, (scale.name, found, state)
    return found[0] if found else None


def test_rubrics_rows_are_seeded_valid_and_read_back_from_the_text():
    rows = rubrics.rows("validation")
    assert len(rows) == rubrics.SPLIT_SIZES["validation"] == 80
    assert rows[0] == rubrics.rubric(random.Random("rubrics:2"))          # a pure function of the split's seed
    assert source_rows("rubrics", "validation") == rows
    assert "rubrics" in SOURCES and "rubrics" in SYNTHETIC_SOURCES
    by_criterion = {lv.criterion: (s, i) for s in rubrics.SCALES for i, lv in enumerate(s.levels)}
    n_reversed = n_checked = 0
    golds_seen = set()
    for req, gold, twins in rows:
        _valid(req, gold, twins)
        qs, state = req["questions"], req["state"]
        assert 4 <= len(qs) <= 7 and twins
        scores = [k for k, q in qs.items() if q["type"] == "score"]
        assert scores                                               # trimming never drops a score question
        levels = {}
        for k in scores:
            crit = qs[k]["criteria"]
            # each level names its criterion: which scale, which level, in which direction
            hits = [next(by_criterion[c] for c in by_criterion if c.lower() in text.lower()) for text in crit]
            scale = hits[0][0]
            assert all(s is scale for s, _ in hits)
            order = [i for _, i in hits]
            assert order in (list(range(len(crit))), list(range(len(crit)))[::-1])
            n_reversed += order[0] != 0
            level = _level_in_text(scale, state)
            assert level is not None
            assert order[int(gold[k])] == level, (state, qs[k], gold[k])
            levels[scale.name] = (scale, level)
            golds_seen.add(level)
            n_checked += 1
        if len(levels) == 2:                                        # two scales in one text: a coherent one
            (a, (_, ga)), (b, (_, gb)) = levels.items()
            assert rubrics.compatible(a, ga, b, gb), state
        for k, q in qs.items():                                     # every yes/no and choice agrees with the level
            for scale, level in levels.values():
                cut = [c for c in scale.cuts if q["instructions"] in _said(scale, c[1]) | _said(scale, c[2])]
                if cut:
                    k0, at_least, below = cut[0]
                    truth = level >= k0 if q["instructions"] in _said(scale, at_least) else level < k0
                    assert gold[k] == ("true" if truth else "false"), (state, q)
                asks = [i for i, lv in enumerate(scale.levels) if q["instructions"] in _said(scale, lv.ask)]
                if asks:
                    assert gold[k] == ("true" if asks[0] == level else "false"), (state, q)
                if q["type"] == "choice" and scale.name in q["instructions"]:
                    assert gold[k].lower() == scale.levels[level].criterion.lower()
    assert n_checked >= 80 and 15 <= n_reversed <= 60 and golds_seen == {0, 1, 2, 3}


def test_rubric_levels_and_asks_hand_checked():
    damage = next(s for s in rubrics.SCALES if s.name == "damage")
    assert [rubrics._fmt(damage.levels[1], f) for f in rubrics.LEVEL_FORMATS] == [
        "Cosmetic: scratched or dented, works fine", "cosmetic (scratched or dented, works fine)",
        "Scratched or dented, works fine", "Cosmetic - scratched or dented, works fine"]
    assert not rubrics.compatible("recommendation", 3, "damage", 3) and rubrics.compatible("damage", 1,
                                                                                         "recommendation", 2)
    for s in rubrics.SCALES:                   # a distractor never repeats a fact of its own scale
        facts = {f for lv in s.levels for f in lv.facts}
        assert not facts & {o for lv in s.levels for o in lv.others}
        assert len({lv.name for lv in s.levels}) == len(s.levels) == 4
        assert all(0 < k < len(s.levels) for k, _, _ in s.cuts)


def test_rubrics_do_not_copy_the_held_out_phishing_rubric():
    """The held-out ``sys1_phishing_email`` source (never trained on) asks for an urgency on a described scale; no
    question or level of ``rubrics``' training rows is worded as its are."""
    held = [("Rate the time pressure the message applies, 0 (none) to 3 (within 24 hours or threats).",
             "No time pressure", "Mild: 'when you get a chance'", "Moderate: action requested within days",
             "High: within 24 hours or account consequences")]
    words = {w.lower() for h in held for w in h}
    for req, _, _ in rubrics.rows("train")[:2000]:
        for q in req["questions"].values():
            assert q["instructions"].lower() not in words
            assert not {c.lower() for c in (q["criteria"] or ())} & words
