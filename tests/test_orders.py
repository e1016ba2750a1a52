"""Option orders (kevlike.request.encode.option_orders): a canonical order makes a choice answer independent of
the order the request lists the options in, and M pooled orders are a log-linear pool (issue 4)."""

import pytest
import torch

from kevlike.request.encode import option_orders
from kevlike.model.heads import pool_orders
from kevlike.request.schema import validate_request

from tiny import make_engine

KEYS = ["billing", "sales", "tech", "legal", "abuse"]


def request(keys, qtype="choice"):
    q = {"type": qtype, "instructions": "Which team should handle this?"}
    if qtype == "choice":
        q["criteria"] = {k: None for k in keys}
    elif qtype == "score":
        q["criteria"] = ["none", "low", "high", "extreme"]
    return {"state": "Customer: I was charged twice for my March invoice.", "questions": {"team": q}}


def question(keys, qtype="choice"):
    return validate_request(request(keys, qtype)).questions[0]


def test_canonical_order_sorts_by_rendered_text_and_ignores_the_listed_order():
    assert option_orders(question(KEYS), 1) == [(4, 0, 3, 1, 2)]  # abuse billing legal sales tech
    shuffled = ["tech", "abuse", "sales", "billing", "legal"]
    (order,) = option_orders(question(shuffled), 1)
    assert [shuffled[i] for i in order] == sorted(KEYS)


def test_orders_given_reverse_and_seeded_shuffles():
    q = question(KEYS)
    assert option_orders(q, 0) == [(0, 1, 2, 3, 4)]
    two = option_orders(q, 2)
    assert two[1] == two[0][::-1]
    four = option_orders(q, 4)
    assert four[:2] == two and len(set(four)) == 4 and all(sorted(o) == list(range(5)) for o in four)
    assert option_orders(q, 4) == four  # seeded: the same every call
    assert len(option_orders(question(["a", "b"]), 5)) == 2  # never more than K! distinct orders
    with pytest.raises(ValueError, match="option orders must be >= 0"):
        option_orders(q, -1)


def test_score_and_noul_keep_their_order():
    assert option_orders(question(None, "score"), 3) == [(0, 1, 2, 3)]


def test_pool_orders_maps_slots_back_and_averages_log_softmax():
    eng = make_engine(option_orders=2)
    enc = eng.encode(validate_request(request(["c", "a", "b"])))
    # canonical a b c = request indices (1, 2, 0); reverse (0, 2, 1)
    assert [b.order for b in enc.branches] == [(1, 2, 0), (0, 2, 1)]
    z = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.0, -1.0]])  # slot logits of the two branches
    z1 = torch.tensor([3.0, 1.0, 2.0])                      # request order c a b
    z2 = torch.tensor([0.5, -1.0, 0.0])
    expected = (torch.log_softmax(z1, 0) + torch.log_softmax(z2, 0)) / 2
    (got,) = pool_orders(enc, z)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("orders", [1, 3])
def test_answers_do_not_depend_on_the_listed_order(orders):
    eng = make_engine("qwen2", option_orders=orders)
    pa = eng.decide(request(KEYS))["answers"]["team"]["probabilities"]
    pb = eng.decide(request(KEYS[::-1]))["answers"]["team"]["probabilities"]
    assert list(pb) == KEYS[::-1]  # still reported in the request's own order
    assert pa == pb  # identical branch tokens and a softmax in canonical order: bit-equal on every CPU


def test_listed_order_without_canonical_order_changes_the_answer():
    """The control: reading the options as listed (0) the tiny random model is order-dependent."""
    eng = make_engine("qwen2", option_orders=0)
    pa = eng.decide(request(KEYS))["answers"]["team"]["probabilities"]
    pb = eng.decide(request(KEYS[::-1]))["answers"]["team"]["probabilities"]
    assert max(abs(pa[k] - pb[k]) for k in pa) > 1e-4


def test_pooled_orders_packed_equals_separate_and_counts_every_branch():
    eng = make_engine("llama", option_orders=3)
    req = request(KEYS)
    req["questions"]["urgent"] = {"type": "noul", "instructions": "Does this need a reply within the hour?"}
    packed, separate = eng.decide(req), eng.decide(req, mode="separate")
    pt, st = packed["answers"]["team"]["probabilities"], separate["answers"]["team"]["probabilities"]
    assert max(abs(pt[k] - st[k]) for k in KEYS) <= 1e-5
    assert abs(packed["answers"]["urgent"]["noul"] - separate["answers"]["urgent"]["noul"]) <= 1e-5
    single = make_engine("llama", option_orders=1).decide(req)
    enc = eng.encode(validate_request(req))
    assert len(enc.branches) == 4  # three orders of the choice question + the noul question
    assert packed["usage"]["input_tokens"] > single["usage"]["input_tokens"]


def test_negative_option_orders_is_refused():
    with pytest.raises(ValueError, match="option_orders must be >= 0"):
        make_engine(option_orders=-1)
