"""Probes against engines whose behaviour is known exactly, and on a tiny real model."""

import random

import pytest
import torch

import math

from kevlike.eval.probes import (NONE_KEY, forgery_probe, isolation_probe, none_of_the_above_probe,
                                 option_addition_probe, permutation_probe, run_probes, threshold_economics)

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

    def probabilities(self, req, zs):
        return [torch.softmax(z, -1) for z in zs]


QUESTIONS = [("Customer: charged twice.", "Which team?", KEYS, "billing")] * 10


def test_permutation_probe_is_zero_for_an_order_invariant_model():
    out = permutation_probe(FakeEngine(lambda k, i: VALUE[k]), QUESTIONS)
    assert out == {"n": 10, "orderings": 4, "flip_rate": 0.0, "accuracy": 1.0, "spread_mean": 0.0, "spread_p90": 0.0}


def test_permutation_probe_counts_flips_of_a_slot_model_exactly():
    out = permutation_probe(FakeEngine(lambda k, i: -float(i)), QUESTIONS, seed=3)
    # the slot model answers whatever is listed first: recompute the same seeded orders
    rng, flips, spreads, hits = random.Random(3), 0, [], 0
    p_first = torch.softmax(-torch.arange(4.0), 0)
    for _ in QUESTIONS:
        orders = []
        for _ in range(4):
            o = KEYS[:]
            rng.shuffle(o)
            orders.append(o)
        flips += len({o[0] for o in orders}) > 1
        hits += sum(o[0] == "billing" for o in orders)
        pg = [float(p_first[o.index("billing")]) for o in orders]
        spreads.append(max(pg) - min(pg))
    assert out["flip_rate"] == pytest.approx(flips / 10) and flips > 0
    assert out["spread_mean"] == pytest.approx(sum(spreads) / 10)
    assert out["accuracy"] == pytest.approx(hits / 40) and 0 < hits < 40


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
    listed = make_engine("llama", option_orders=0)  # options read as listed: the random model is order-dependent
    out = permutation_probe(listed, QUESTIONS[:3])
    assert out["n"] == 3 and out["spread_mean"] > 1e-4
    canonical = make_engine("llama")  # the default: one canonical order, so reordering changes nothing
    out = permutation_probe(canonical, QUESTIONS[:3])
    # the orderings are branches at different positions of one packed pass: equal up to the rounding of
    # the CPU's matmul kernels (AVX-512/AMX tile edges round rows differently), stated as 1e-6
    assert out["flip_rate"] == 0.0 and out["spread_mean"] <= 1e-6
    out = option_addition_probe(canonical, [("s", "Which team?", KEYS, "weather")])
    assert out["n"] == 1 and out["mean_abs_shift"] > 0
    with pytest.raises(ValueError, match="unknown probe"):
        run_probes(canonical, 2, only=["permutations"])


def test_none_of_the_above_exact_on_a_key_model():
    value = {**VALUE, NONE_KEY: 1.0}
    out = none_of_the_above_probe(FakeEngine(lambda k, i: value[k]), QUESTIONS[:4])
    z = [2.0, 0.5, -1.0, 0.1, 1.0]  # billing, sales, tech, legal, none
    assert out["n"] == 4 and out["accuracy_with_none"] == 1.0
    assert out["p_none_with_true"] == pytest.approx(math.exp(1.0) / sum(math.exp(v) for v in z))
    assert out["none_rate_without_true"] == 1.0  # without billing, none (1.0) beats sales (0.5)
    with pytest.raises(ValueError, match="gold key"):
        none_of_the_above_probe(FakeEngine(lambda k, i: 0.0), [("s", "q", KEYS, "weather")])


def test_isolation_sibling_equals_absent_on_a_real_model():
    eng = make_engine("llama")
    out = isolation_probe(eng, trials=3)
    assert out["max_abs_sibling_minus_absent"] <= 1e-6          # the mask hides the sibling branch
    assert abs(out["state"] - out["absent"]) > 1e-4               # the state is read
    assert out["trials"] == 3 and 0 < out["absent"] < 1


def test_forgery_changes_no_option_count_on_a_real_model():
    eng = make_engine("qwen2")
    out = forgery_probe(eng)
    assert out["requests"] == 20
    assert out["option_count_ok"] == out["reserved_ids_structural"] == out["answer_keys_ok"] == 20


def test_threshold_economics_hand_computed():
    p = [0.9, 0.6, 0.3, 0.1]
    y = [True, False, True, False]
    out = threshold_economics(p, y, cost_fp=1.0, cost_fn=4.0)   # act iff p > 0.2
    assert out["threshold"] == pytest.approx(0.2)
    assert out["cost_at_threshold"] == pytest.approx((1.0 + 0) / 4)   # acts on 0.9 ✓, 0.6 ✗ (FP), 0.3 ✓
    assert out["cost_at_0.5"] == pytest.approx((1.0 + 4.0) / 4)       # FP on 0.6, FN on 0.3
    assert out["cost_always"] == pytest.approx(2.0 / 4) and out["cost_never"] == pytest.approx(8.0 / 4)
    assert out["cost_at_best"] <= out["cost_at_threshold"]
    with pytest.raises(ValueError, match="costs"):
        threshold_economics(p, y, 0.0, 1.0)
