"""kevlike's own ``facts`` source (kevlike/data/facts.py): golds follow the stated side, the data are
seeded, and the domains stay apart from the generalization suite's contrast pairs."""

import json
import random
import re

from kevlike.data import facts
from kevlike.data.families import SOURCES, SYNTHETIC_SOURCES, source_rows
from kevlike.eval.generalization import CONTRAST_FILE, seen_sources

WORD = re.compile(r"[a-z]+")
STOP = {"the", "a", "an", "my", "our", "in", "on", "of", "from", "to", "at", "this", "next", "door", "new",
        "s", "and", "with"}


def _side(fact: facts.Fact, state: str, subject: str) -> bool:
    """Which side of ``fact`` the state tells about ``subject`` (A: True), read back from its sentences."""
    told = {True: [t.format(s=subject).lower() for t in fact.a_text],
            False: [t.format(s=subject).lower() for t in fact.b_text]}
    hits = {side: any(t in state.lower() for t in ts) for side, ts in told.items()}
    assert hits[True] != hits[False], (state, subject)
    return hits[True]


def test_every_gold_is_the_side_the_state_tells():
    n_checked = 0
    for req, gold in facts.rows("validation") + facts.rows("test")[:100]:
        for qid, q in req["questions"].items():
            for f in facts.FACTS:
                for s in f.subjects:
                    if q["type"] == "noul":
                        asks = {True: [t.format(s=s) for t in f.a_q], False: [t.format(s=s) for t in f.b_q]}
                        side_q = next((k for k, v in asks.items() if q["instructions"] in
                                       [x[0].upper() + x[1:] for x in v]), None)
                        if side_q is None:
                            continue
                        assert gold[qid] == ("true" if side_q == _side(f, req["state"], s) else "false")
                        n_checked += 1
                    elif set(q["criteria"]) == set(f.labels) and s in q["instructions"]:
                        side = _side(f, req["state"], s)
                        assert gold[qid] == f.labels[0 if side else 1]
                        n_checked += 1
    assert n_checked > 500


def test_rows_are_seeded_balanced_and_sized():
    assert facts.rows("train") is facts.rows("train")
    rng_a, rng_b = random.Random("facts:1"), random.Random("facts:1")
    assert facts.request(rng_a) == facts.request(rng_b) == facts.rows("train")[0]
    assert [len(facts.rows(s)) for s in ("train", "validation", "test")] == [4000, 60, 200]
    assert facts.rows("train")[:50] != facts.rows("test")[:50]
    nouls = [g for _, gold in facts.rows("train") for g in gold.values() if g in ("true", "false")]
    assert 0.45 < nouls.count("true") / len(nouls) < 0.55
    for req, gold in facts.rows("train")[:500]:
        assert 1 <= len(req["questions"]) <= 6 and set(gold) == set(req["questions"])
        asked = [q["instructions"] for q in req["questions"].values() if q["type"] == "noul"]
        assert len(asked) == len(set(asked))


def test_a_registered_typed_source_kept_out_of_the_seen_splits():
    assert SOURCES["facts"].kind == "typed" and "facts" in SYNTHETIC_SOURCES
    assert source_rows("facts", "test") == facts.rows("test")
    assert "facts" not in seen_sources()


def test_domains_and_wordings_stay_apart_from_the_contrast_pairs():
    pairs = json.loads(CONTRAST_FILE.read_text())["pairs"]
    contrast_qs = {x.lower() for p in pairs for q in p["questions"] for x in (q["q"], q["neg"])}
    contrast_states = [s.lower() for p in pairs for s in p["states"]]
    topics = {w for p in pairs for w in p["id"].split("_")}
    for f in facts.FACTS:
        assert f.topic not in topics
        for s in f.subjects:
            nouns = set(WORD.findall(s.lower())) - STOP
            assert not nouns & topics, (f.topic, s)
            for t in f.a_q + f.b_q:
                assert t.format(s=s).lower() not in contrast_qs
            for t in f.a_text + f.b_text:
                assert all(t.format(s=s).lower().rstrip(".") not in st for st in contrast_states)


def test_coherence_twins_carry_the_gold_and_the_other_side():
    """A twin's key map takes one question's gold to the other's; an other-side twin asks the same fact
    from the other side (answer swapped); a choice twin has the same words and yes/no keys; without
    ``coherence`` a facts example is the row as generated."""
    from kevlike.data.families import family_example
    from kevlike.request.schema import validate_request

    kinds = set()
    for i, row in enumerate(facts.rows("validation")):
        ex = family_example("facts", row, random.Random(i), coherence=0.8)
        validate_request(ex.request)
        assert len(ex.request["questions"]) <= 8
        for qa, qb, m in ex.twins:
            qs = ex.request["questions"]
            assert m[ex.gold[qa]] == ex.gold[qb] and qs[qa]["type"] == "noul"
            kinds.add(qs[qb]["type"])
            if qs[qb]["type"] == "choice":
                assert qs[qb]["instructions"] == qs[qa]["instructions"] and set(qs[qb]["criteria"]) == set(m.values())
            else:
                fa, sa, side_a = facts._asked()[qs[qa]["instructions"]]
                fb, sb, side_b = facts._asked()[qs[qb]["instructions"]]
                assert (fa, sa) == (fb, sb) and side_a != side_b and ex.gold[qa] != ex.gold[qb]
            assert ex.targets[qb][list(qs[qb]["criteria"] or ["true", "false"]).index(ex.gold[qb])] == 1.0
    assert kinds == {"noul", "choice"}
    plain = family_example("facts", facts.rows("validation")[0], random.Random(0))
    assert plain.request == facts.rows("validation")[0][0] and plain.twins == []


def test_facts_twins_pack_into_the_twin_term():
    """Through ``make_batch``: each twin pair's permutation sends question a's gold option to b's."""
    from tiny import make_tokenizer

    from kevlike.data.families import family_example
    from kevlike.request.encode import Encoder
    from kevlike.training.train import make_batch

    exs = [family_example("facts", row, random.Random(i), coherence=1.0) for i, row in enumerate(facts.rows("test")[:6])]
    batch, aux = make_batch(exs, Encoder(make_tokenizer()), "cpu", modes=["list", "set"] * 3)
    assert len(aux["a"]) == sum(len(e.twins) for e in exs) > 0
    for (b, ja), (_, jb), perm in zip(aux["a"], aux["b"], aux["perm"].tolist()):
        ta, tb = aux["targets"][b, ja].tolist(), aux["targets"][b, jb].tolist()
        assert tb[perm[ta.index(1.0)]] == 1.0
