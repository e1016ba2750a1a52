"""``decoys`` (kevlike/data/decoys.py): texts that name several candidates and settle on one; golds read back
from the text, opposite pairs tied as twins, the choice's options a mix of named and unnamed candidates."""

import random

from kevlike.data import decoys
from kevlike.data.families import SOURCES, SYNTHETIC_SOURCES, family_example, source_rows
from kevlike.eval.generalization import seen_sources
from tests.test_reading import _valid


def test_decoys_rows_are_seeded_valid_and_read_back_from_the_text():
    rows = decoys.rows("validation")
    assert len(rows) == 80 and rows[0] == decoys.decoy_row(random.Random("decoys:2"))
    named_wrong = 0
    for req, gold, twins in rows:
        _valid(req, gold, twins)
        state, qs = req["state"].lower(), req["questions"]
        assert 5 <= len(qs) <= 7 and len(twins) == 1
        main = qs["q0"]
        assert main["type"] == "choice" and 3 <= len(main["criteria"]) <= 5
        for opt in main["criteria"]:
            # the gold is named; an option the text never names is never the gold
            assert (opt.lower() in state) or opt != gold["q0"]
        assert gold["q0"].lower() in state
        named_wrong += sum(o.lower() in state for o in main["criteria"] if o != gold["q0"])
        answer = gold["q0"]
        for qid, q in qs.items():                  # every yes/no question agrees with the choice's gold
            if q["type"] != "noul":
                continue
            x = max((c for sc in decoys.SCENARIOS for c in sc.pool if c in q["instructions"]), key=len)
            assert gold[qid] == ("true" if (x == answer) != (" other than " in q["instructions"]) else "false")
    assert named_wrong >= len(rows)                 # on average at least one wrong option is named in the text


def test_decoys_hand_checked_row():
    sc = decoys.SCENARIOS[2]                        # the offsite venue
    assert sc.pool[0] == "the Riverside Hall"
    assert decoys._sentence(sc.aside[1], sc.pool[1]) == "The Old Mill was fully booked for our dates."
    assert decoys._sentence(sc.settle[0], sc.pool[0]) == "We have booked the Riverside Hall."
    assert sc.other[0].format(x="the Old Mill") == "Will the offsite be held somewhere other than the Old Mill?"


def test_decoys_is_a_trained_family_source_outside_the_seen_splits():
    assert SOURCES["decoys"].kind == "typed" and "decoys" in SYNTHETIC_SOURCES and "decoys" not in seen_sources()
    assert len(source_rows("decoys", "train")) == 6000
    row = decoys.rows("validation")[0]
    ex = family_example("decoys", row, random.Random(0))
    assert ex.twins == list(row[2])
    for qid, t in ex.targets.items():
        if row[0]["questions"][qid]["type"] == "noul":
            assert t == ([1.0, 0.0] if row[1][qid] == "true" else [0.0, 1.0])
