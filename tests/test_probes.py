"""Probes against engines whose behaviour is known exactly, and on a tiny real model."""

import random

import pytest
import torch

from kevlike.eval.probes import option_addition_probe, permutation_probe

from tiny import make_engine

KEYS = ["billing", "sales", "tech", "legal"]
VALUE = {"billing": 2.0, "sales": 0.5, "tech": -1.0, "legal": 0.1, "weather": -3.0}


class FakeEngine:
    """``question_logits`` from a rule: by option key (order-invariant) or by slot (first listed wins)."""

    def __init__(self, rule):
        self.rule = rule

    def encode(self, req):
        return req

    def question_logits(self, encoded):
        return [[torch.tensor([self.rule(k, i) for i, k in enumerate(o.key for o in q.options)])
                 for q in req.questions] for req in encoded]


QUESTIONS = [("Customer: charged twice.", "Which team?", KEYS, "billing")] * 10


def test_permutation_probe_is_zero_for_an_order_invariant_model():
    out = permutation_probe(FakeEngine(lambda k, i: VALUE[k]), QUESTIONS)
    assert out == {"n": 10, "orderings": 4, "flip_rate": 0.0, "spread_mean": 0.0, "spread_p90": 0.0}


def test_permutation_probe_counts_flips_of_a_slot_model_exactly():
    out = permutation_probe(FakeEngine(lambda k, i: -float(i)), QUESTIONS, seed=3)
    # the slot model answers whatever is listed first: recompute the same seeded orders
    rng, flips, spreads = random.Random(3), 0, []
    p_first = torch.softmax(-torch.arange(4.0), 0)
    for _ in QUESTIONS:
        orders = []
        for _ in range(4):
            o = KEYS[:]
            rng.shuffle(o)
            orders.append(o)
        flips += len({o[0] for o in orders}) > 1
        pg = [float(p_first[o.index("billing")]) for o in orders]
        spreads.append(max(pg) - min(pg))
    assert out["flip_rate"] == pytest.approx(flips / 10) and flips > 0
    assert out["spread_mean"] == pytest.approx(sum(spreads) / 10)


def test_option_addition_shift_is_zero_for_a_key_model_and_exact_for_a_slot_model():
    qs = [("s", "Which team?", KEYS, "weather")] * 5
    assert option_addition_probe(FakeEngine(lambda k, i: VALUE[k]), qs)["mean_abs_shift"] == 0.0
    # a model that adds 0.3 to the first option's logit only when 5 options are listed: top-two are
    # billing (2.0) and sales (0.5); billing is listed first, so log(p_a/p_b) moves by +0.3
    eng = FakeEngine(lambda k, i: VALUE[k])
    eng.question_logits = lambda enc: [[torch.tensor([VALUE[o.key] + (0.3 if len(q.options) == 5 and j == 0 else 0.0)
                                                      for j, o in enumerate(q.options)]) for q in r.questions] for r in enc]
    out = option_addition_probe(eng, qs)
    assert out["mean_shift"] == pytest.approx(0.3) and out["p90_abs_shift"] == pytest.approx(0.3)
    with pytest.raises(ValueError, match="already an option"):
        option_addition_probe(eng, [("s", "q", KEYS, "tech")])


def test_probes_run_on_a_tiny_model():
    eng = make_engine("llama")
    out = permutation_probe(eng, QUESTIONS[:3])
    assert 0.0 <= out["flip_rate"] <= 1.0 and out["n"] == 3
    out = option_addition_probe(eng, [("s", "Which team?", KEYS, "weather")])
    assert out["n"] == 1 and out["mean_abs_shift"] >= 0
