"""The generalization suite's realistic split (kevlike/eval/data/realistic.json, issue 31 item 4): the
shipped file loads and validates, holds enough of each kind of question, and the validator rejects a
broken copy naming the item and question at fault. No model, no torch."""

import copy
import json
from collections import Counter

import pytest

from kevlike.eval.realistic import FRESH_FILES, PAIR_TAG, REALISTIC_FILE, realistic_items, validate

# per file: at least this many items, traps, pairs, number questions and absurd questions
MINIMA = {REALISTIC_FILE: (36, 15, 12, 20, 10), **{f: (30, 15, 12, 20, 10) for f in FRESH_FILES.values()}}


@pytest.fixture(scope="module", params=list(MINIMA), ids=lambda p: p.name)
def path(request):
    return request.param


@pytest.fixture(scope="module")
def items(path):
    return realistic_items(path)


def test_the_files_share_no_item_no_state_and_no_kind():
    files = [realistic_items(f) for f in (REALISTIC_FILE, *FRESH_FILES.values())]
    for i, a in enumerate(files):
        for b in files[i + 1:]:
            assert not {it["id"] for it in a} & {it["id"] for it in b}
            assert not {" ".join(it["state"].split()) for it in a} & {" ".join(it["state"].split()) for it in b}
            assert not {it["kind"].lower() for it in a} & {it["kind"].lower() for it in b}


def _questions(items):
    return [q for it in items for q in it["questions"].values()]


def test_counts_and_lengths(items, path):
    assert len(items) >= MINIMA[path][0]
    assert len({it["id"] for it in items}) == len(items)
    for it in items:
        assert 4 <= len(it["questions"]) <= 7, it["id"]
        assert 150 <= len(it["state"].split()) <= 600, it["id"]
    lengths = [len(it["state"].split()) for it in items]
    if path == REALISTIC_FILE:        # lengths vary across the range (the fresh pages run 260-392 words)
        assert min(lengths) < 200 and max(lengths) > 400


def test_type_mix_and_gold_balance(items):
    qs = _questions(items)
    types = Counter(q["type"] for q in qs)
    assert set(types) == {"noul", "choice", "score"}
    assert 0.35 <= types["noul"] / len(qs) <= 0.55
    assert types["choice"] / len(qs) >= 0.2 and types["score"] / len(qs) >= 0.2
    gold = Counter(q["gold"] for q in qs if q["type"] == "noul")
    assert 0.35 <= gold["true"] / (gold["true"] + gold["false"]) <= 0.65


def test_tag_kinds(items, path):
    qs = _questions(items)
    tags = Counter(t for q in qs for t in q["tags"])
    n_pairs = sum(len({t for q in it["questions"].values() for t in q["tags"] if PAIR_TAG.match(t)}) for it in items)
    _, traps, pairs, numbers, absurd = MINIMA[path]
    assert sum(1 for q in qs if "trap" in q["tags"]) >= traps
    assert n_pairs >= pairs
    assert sum(1 for q in qs if "number" in q["tags"]) >= numbers
    assert tags["absurd"] >= absurd
    assert any(t.startswith("negation_pair:") for t in tags) and any(t.startswith("opposite_pair:") for t in tags)


def test_every_pair_has_two_questions_with_opposite_gold(items):
    for it in items:
        pairs = {}
        for qid, q in it["questions"].items():
            for t in q["tags"]:
                if PAIR_TAG.match(t):
                    pairs.setdefault(t, []).append(q)
        for tag, members in pairs.items():
            assert len(members) == 2, (it["id"], tag)
            assert all(q["type"] == "noul" for q in members), (it["id"], tag)
            assert {q["gold"] for q in members} == {"true", "false"}, (it["id"], tag)


def test_absurd_questions_are_no_and_golds_are_valid(items):
    for it in items:
        assert set(it["evidence"]) == set(it["questions"]), it["id"]
        for qid, q in it["questions"].items():
            if "absurd" in q["tags"]:
                assert q["type"] == "noul" and q["gold"] == "false", (it["id"], qid)
            if q["type"] == "choice":
                assert 2 <= len(q["criteria"]) <= 8 and q["gold"] in q["criteria"], (it["id"], qid)
            if q["type"] == "score":
                assert 2 <= len(q["criteria"]) <= 10 and 0 <= q["gold"] < len(q["criteria"]), (it["id"], qid)


def _broken(data, how):
    bad = copy.deepcopy(data)
    it = bad["items"][0]
    qs = it["questions"]
    first = {t: next(k for k, q in qs.items() if q["type"] == t) for t in ("noul", "choice", "score")}
    if how == "choice_gold":
        qs[first["choice"]]["gold"] = "no such option"
        return bad, first["choice"]
    if how == "score_gold":
        qs[first["score"]]["gold"] = len(qs[first["score"]]["criteria"])
        return bad, first["score"]
    if how == "noul_gold":
        qs[first["noul"]]["gold"] = "yes"
        return bad, first["noul"]
    if how == "duplicate":
        a, b = list(qs)[:2]
        qs[b]["instructions"] = qs[a]["instructions"].upper()
        return bad, b
    if how == "pair_same_gold":
        pair = next(t for q in qs.values() for t in q["tags"] if PAIR_TAG.match(t))
        members = [k for k, q in qs.items() if pair in q["tags"]]
        qs[members[1]]["gold"] = qs[members[0]]["gold"]
        return bad, members[1]
    if how == "evidence":
        qid = first["choice"]
        it["evidence"][qid] = "a quote that the state does not contain"
        return bad, qid
    raise AssertionError(how)


@pytest.mark.parametrize("how", ["choice_gold", "score_gold", "noul_gold", "duplicate", "pair_same_gold", "evidence"])
def test_validator_rejects_a_broken_copy(how, tmp_path):
    data = json.loads(REALISTIC_FILE.read_text(encoding="utf-8"))
    bad, qid = _broken(data, how)
    path = tmp_path / "realistic.json"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(ValueError) as err:
        realistic_items(path)
    assert repr(bad["items"][0]["id"]) in str(err.value) and repr(qid) in str(err.value)


def test_validator_rejects_wrong_sizes():
    data = json.loads(REALISTIC_FILE.read_text(encoding="utf-8"))
    few = copy.deepcopy(data)
    it = few["items"][1]
    for qid in list(it["questions"])[3:]:
        del it["questions"][qid], it["evidence"][qid]
    with pytest.raises(ValueError, match=repr(it["id"])):
        validate(few)
    short = copy.deepcopy(data)
    short["items"][2]["state"] = "hi"
    with pytest.raises(ValueError, match="words"):
        validate(short)


def test_no_question_is_worded_as_a_reading_training_question(items):
    """The split measures reading of unseen texts: none of its questions (or option sets) is worded exactly as a
    question of the generated ``documents``/``quantities``/``numbers``/``absurd`` training sources (kevlike/data/reading.py, train split),
    of ``computed`` (kevlike/data/computed.py),
    of ``rubrics`` (kevlike/data/rubrics.py), nor of ``mentions`` (kevlike/data/mentions.py) when its data package is
    installed."""
    reading = pytest.importorskip("kevlike.data.reading")

    def norm(s):
        return " ".join(s.lower().split())

    seen_q, seen_opts = set(), set()
    from kevlike.data import computed
    for source in ("documents", "quantities", "numbers", "absurd", "computed"):
        for row in (computed.rows("train") if source == "computed" else reading.rows(source, "train")):
            for q in row[0]["questions"].values():
                seen_q.add(norm(q["instructions"]))
                if q.get("criteria"):
                    seen_opts.add(frozenset(norm(c) for c in q["criteria"]))
    from kevlike.data.families import source_rows
    from kevlike.data.sources import DataUnavailableError
    try:
        mention_rows = source_rows("mentions", "train")
    except DataUnavailableError:
        mention_rows = ()
    for row in (*mention_rows, *source_rows("rubrics", "train")):
        for q in row[0]["questions"].values():
            seen_q.add(norm(q["instructions"]))
            if q.get("criteria"):
                seen_opts.add(frozenset(norm(c) for c in q["criteria"]))
    for it in items:
        for qid, q in it["questions"].items():
            assert norm(q["instructions"]) not in seen_q, (it["id"], qid)
            if q["type"] != "noul":
                assert frozenset(norm(c) for c in q["criteria"]) not in seen_opts, (it["id"], qid)
