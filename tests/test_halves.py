"""The generalization suite's two halves and issue 31's targets (kevlike/eval/generalization.py), hand-computed."""

import pytest

from kevlike.data.sources import Example
from kevlike.eval.generalization import (
    UNSEEN_FRESH_OF, check_splits, coherence_pairs, generalization_sets, generalization_summary, half_for, half_key,
    half_of, reading_targets, realistic_examples, realistic_pairs, realistic_tag_figures, realistic_tags,
    report_tables, unseen_fresh_examples, unseen_records, with_halves
)
from kevlike.eval.realistic import FRESH_FILES, PAIR_TAG


def test_half_is_a_fixed_hash_and_a_contrast_pair_stays_together():
    a = Example({"state": "s", "questions": {}}, {}, "contrast_apart/visa/0")
    b = Example({"state": "t", "questions": {}}, {}, "contrast_apart/visa/1")
    assert half_key("contrast_apart", a) == half_key("contrast_apart", b) == "contrast_apart/visa"
    assert half_of("contrast_apart/visa") in ("validation", "test")
    halves = [half_of(f"item {i}") for i in range(400)]
    assert 150 < halves.count("test") < 250                       # about half each
    assert halves == [half_of(f"item {i}") for i in range(400)]    # a pure function of the key
    s = Example({"state": {"b": 1, "a": 2}, "questions": {}}, {}, "x/typed")
    assert half_key("seen_wording", s) == '{"a": 2, "b": 1}'
    r = Example({"state": "long text", "questions": {}}, {}, "realistic/invoice")
    assert half_key("realistic", r) == "realistic/invoice"


@pytest.mark.parametrize("split,prefixes", [("realistic_fresh", ("fa_", "fb_", "fc_")),
                                             ("realistic_fresh2", ("ga_", "gb_", "gc_")),
                                             ("realistic_fresh3", ("ha_", "hb_", "hc_")),
                                             ("realistic_fresh4", ("ia_", "ib_", "ic_"))])
def test_the_fresh_pages_are_all_validation_and_outside_the_unseen_figure(split, prefixes):
    """``realistic_fresh`` (stage 45), ``realistic_fresh2`` (stage 47), ``realistic_fresh3`` (stage 48) and
    ``realistic_fresh4`` (stage 50), pages no choice had read when written, are all in the validation half, whatever
    their items' hashes say (about half of them would be test), and stay out of the unseen figure; ``realistic``
    keeps its hashed halves."""
    fresh = realistic_examples(FRESH_FILES[split], split)
    assert len(fresh) == 30 and all(e.source.startswith(tuple(f"{split}/{p}" for p in prefixes)) for e in fresh)
    assert {half_for(split, e) for e in fresh} == {"validation"}
    assert {half_of(half_key(split, e)) for e in fresh} == {"validation", "test"}   # the hash alone
    assert all(half_key(split, e) == e.source for e in fresh)
    old = realistic_examples()
    assert {half_for("realistic", e) for e in old} == {"validation", "test"}
    assert all(half_for("realistic", e) == half_of(e.source) for e in old)
    recs = with_halves(split, fresh[:1], [{"question": q, "split": split} for q in fresh[0].request["questions"]])
    assert {r["half"] for r in recs} == {"validation"}
    kept = unseen_records([*recs, {"split": "realistic", "question": "q1"}])
    assert kept == [{"split": "realistic", "question": "q1"}]
    answered = [{"split": split, "source": e.source, "question": q} for e in fresh for q in e.request["questions"]]
    tagged = {(e.source, t) for e in fresh for q in e.request["questions"]
              for t in realistic_tags(FRESH_FILES[split], split)[(e.source, q)] if PAIR_TAG.match(t)}
    pairs = realistic_pairs(answered, FRESH_FILES[split], split)
    assert len(pairs) == len(tagged) >= 12 and all(a["source"] == b["source"] for a, b in pairs)
    one_answer = [r for r in answered if r is not pairs[0][0]]                          # a pair needs both answers
    assert realistic_pairs(one_answer, FRESH_FILES[split], split) == pairs[1:]
    # hand-set P(yes): the first pair sums to 1.0 (coherent), the second to 1.3 (not within 0.1, both above 0.5),
    # every other pair question 0.5 (sums 1.0); every absurd question 0.1 but the first, 0.3
    for r in answered:
        r["probs"] = [0.5, 0.5]
    pairs[0][0]["probs"], pairs[0][1]["probs"] = [0.9, 0.1], [0.1, 0.9]
    pairs[1][0]["probs"], pairs[1][1]["probs"] = [0.6, 0.4], [0.7, 0.3]
    tags = realistic_tags(FRESH_FILES[split], split)
    absurd = [r for r in answered if "absurd" in tags[(r["source"], r["question"])]]
    for i, r in enumerate(absurd):
        r["probs"] = [0.3 if i == 0 else 0.1, 0.7 if i == 0 else 0.9]
    f = realistic_tag_figures(answered, FRESH_FILES[split], split)
    n = len(pairs)
    assert f == {"pairs": n, "sum_within_0.1": (n - 1) / n, "not_both_yes": (n - 1) / n, "absurd": len(absurd),
                 "absurd_p_yes_below_0.2": (len(absurd) - 1) / len(absurd)}


def test_unseen_fresh_asks_new_items_of_the_unseen_splits_all_in_validation():
    """``unseen_fresh`` (stage 48) draws the generated unseen splits again with another item seed: none of its states
    is one the suite's own splits ask about, its sources are theirs, every item is validation (the
    hash alone would put about half in test), and it stays out of the unseen figure and out of ``--half test``."""
    sets = generalization_sets(quick=True, splits=(*UNSEEN_FRESH_OF, "unseen_fresh"))
    fresh = sets.pop("unseen_fresh")
    asked = {half_key(s, e) for s, exs in sets.items() for e in exs}
    assert len(fresh) == 78 and not {half_key("unseen_fresh", e) for e in fresh} & asked
    assert {e.source.split("/")[0] for e in fresh} == {e.source.split("/")[0] for exs in sets.values() for e in exs}
    assert {half_for("unseen_fresh", e) for e in fresh} == {"validation"}
    assert {half_of(half_key("unseen_fresh", e)) for e in fresh} == {"validation", "test"}
    recs = [{"split": "unseen_fresh", "question": "q1"}, {"split": "heldout_source", "question": "q1"}]
    assert unseen_records(recs) == [{"split": "heldout_source", "question": "q1"}]
    with pytest.raises(ValueError, match="unseen_fresh is all in the validation half"):
        check_splits(("unseen_fresh",), "test")


def test_unseen_fresh2_asks_items_no_earlier_draw_asks_all_in_validation():
    """``unseen_fresh2`` (stage 50) draws the same splits with item seed 2 and leaves out every state the suite's own
    splits or ``unseen_fresh`` ask about; ``unseen_fresh`` is unchanged by its arrival (78 requests, quick sizes)."""
    sets = generalization_sets(quick=True, splits=(*UNSEEN_FRESH_OF, "unseen_fresh", "unseen_fresh2"))
    fresh2 = sets.pop("unseen_fresh2")
    assert len(sets["unseen_fresh"]) == 78 and len(fresh2) == 75
    asked = {half_key(s, e) for s, exs in sets.items() for e in exs}
    assert not {half_key("unseen_fresh2", e) for e in fresh2} & asked
    assert {half_for("unseen_fresh2", e) for e in fresh2} == {"validation"}
    assert unseen_records([{"split": "unseen_fresh2", "question": "q1"}]) == []
    with pytest.raises(ValueError, match="all in the validation half"):
        check_splits(("unseen_fresh", "unseen_fresh2"), "test")
    with pytest.raises(ValueError, match="not a fresh unseen draw"):
        unseen_fresh_examples({}, "unseen_fresh3")


def test_with_halves_lines_records_up_with_questions():
    exs = [Example({"state": f"state {i}", "questions": {"a": {}, "b": {}}}, {}, "src") for i in range(3)]
    recs = [{"question": q} for _ in exs for q in ("a", "b")]
    out = with_halves("seen_wording", exs, recs)
    assert [r["half"] for r in out] == [half_of(f'"state {i}"') for i in range(3) for _ in "ab"]
    with pytest.raises(ValueError, match="does not match"):
        with_halves("seen_wording", exs, recs[1:] + recs[:1])
    with pytest.raises(ValueError, match="more than questions"):
        with_halves("seen_wording", exs, recs + [{"question": "a"}])


def _noul(split, source, question, p_yes, truth, half="test"):
    return {"split": split, "source": source, "question": question, "type": "noul", "probs": [p_yes, 1 - p_yes],
            "gold": 0 if truth else 1, "target": [1.0, 0.0] if truth else [0.0, 1.0], "half": half}


def test_reading_targets_hand_computed():
    recs = [_noul("absurd", "absurd/typed", "q0", 0.1, False), _noul("absurd", "absurd/typed", "q1", 0.3, False),
            _noul("absurd", "absurd/typed", "q2", 0.9, True),          # a yes-question: not an absurd one
            _noul("contrast", "contrast/x/0", "q0", 0.8, True), _noul("contrast", "contrast/x/0", "n0", 0.15, False),
            _noul("contrast", "contrast/x/1", "q0", 0.6, False), _noul("contrast", "contrast/x/1", "n0", 0.7, True),
            _noul("heldout_source", "rotten/noul", "q", 0.7, True), _noul("heldout_source", "rotten/noul", "q", 0.7, False)]
    summ = {"contrast_apart": {"both_right": 0.5, "questions": 4}}
    t = reading_targets(recs, summ)
    assert t["absurd_p_yes_below_0.2"] == {"value": 0.5, "target": 0.95, "n": 2, "met": False}
    # pairs: (0.8, 0.15) sums to 0.95 (within 0.1), not both yes; (0.6, 0.7) sums to 1.3, both yes
    assert len(coherence_pairs(recs)) == 2
    assert t["negation_sum_within_0.1"]["value"] == 0.5 and t["opposites_not_both_yes"]["value"] == 0.5
    assert t["heldout_source_noul_accuracy"]["value"] == 0.5 and t["heldout_source_noul_accuracy"]["met"] is False
    assert t["contrast_apart_both_right"] == {"value": 0.5, "target": 0.75, "n": 4, "met": False}
    assert t["realistic_accuracy"]["value"] is None and t["realistic_accuracy"]["met"] is None
    # unseen: contrast q0 (2, one right) and the two held-out source questions (one right); absurd not counted
    assert t["unseen_accuracy"]["n"] == 4 and t["unseen_accuracy"]["value"] == 0.5


def test_realistic_pairs_and_absurd_tags_feed_the_targets():
    exs = realistic_examples()
    ex = next(e for e in exs if e.source == "realistic/incident_cert_expiry")
    # answer every question with its gold at 0.9: accuracy 1, every pair coherent, absurd P(yes) 0.1
    recs = []
    for qid, target in ex.targets.items():
        gi = target.index(1.0)
        probs = [0.9 if i == gi else 0.1 / (len(target) - 1) for i in range(len(target))]
        recs.append({"split": "realistic", "source": ex.source, "question": qid, "type": ex.request["questions"][qid]["type"],
                     "probs": probs, "gold": gi, "target": target, "half": "test"})
    t = reading_targets(recs, {})
    assert t["realistic_accuracy"]["value"] == 1.0 and t["realistic_accuracy"]["met"] is True
    pairs = coherence_pairs(recs)
    assert pairs and t["negation_sum_within_0.1"]["value"] == 1.0
    assert t["absurd_p_yes_below_0.2"]["value"] == 1.0


def test_summary_has_both_halves_and_the_report_shows_them():
    pairs = {"contrast": [{"id": "x", "states": ["a", "b"], "questions": [{"q": "Q", "neg": "N", "a": True}]}]}
    h = half_of("contrast/x")
    recs = [_noul("contrast", "contrast/x/0", "q0", 0.9, True, h), _noul("contrast", "contrast/x/0", "n0", 0.1, False, h),
            _noul("contrast", "contrast/x/1", "q0", 0.2, False, h), _noul("contrast", "contrast/x/1", "n0", 0.8, True, h),
            _noul("heldout_source", "rotten/noul", "q", 0.7, True, "validation"),
            _noul("heldout_source", "rotten/noul", "q", 0.7, True, "test")]
    summ = generalization_summary(recs, pairs)
    n = {k: sum(s["n"] for s in summ["halves"][k]["splits"].values()) for k in ("validation", "test")}
    assert n["validation"] + n["test"] == sum(s["n"] for s in summ["splits"].values()) == 4   # contrast q-forms + 2
    assert summ["halves"][h]["contrast"]["both_right"] == 1.0
    other = "test" if h == "validation" else "validation"
    assert "contrast" not in summ["halves"][other]
    md = report_tables(summ)
    assert "## Validation half" in md and "## Test half" in md and "## Both halves" in md
    # a `--half validation` run: no empty test-half table
    val_only = generalization_summary([r for r in recs if r["half"] == "validation"], pairs)
    assert list(val_only["halves"]) == ["validation"]          # no empty test half (and no empty targets) stored
    md = report_tables(val_only)
    assert "## Validation half" in md and "## Test half" not in md
