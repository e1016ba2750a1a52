"""Probes against engines whose behaviour is known exactly, and on a tiny real model."""

import random

import pytest
import torch

import math

from kevlike.eval.probes import (NONE_KEY, PROBES, example_requests, forgery_probe, isolation_probe,
                                 none_of_the_above_probe, option_addition_probe, permutation_probe, run_probes,
                                 threshold_economics)
from kevlike.request.schema import validate_request

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


# --- leak, needle, the run directory (issue 34) ------------------------------------------------------------

from kevlike.eval.leak import leak_probe, request_probabilities                      # noqa: E402
from kevlike.eval.needle import DEPTHS, needle_lengths, needle_probe, needle_state   # noqa: E402
from tiny import REQUEST, make_tokenizer, save_tiny_model                              # noqa: E402


@pytest.mark.parametrize("arch,window", [("llama", None), ("qwen2", 16)])
def test_naive_packing_leaks_and_the_branch_mask_does_not(arch, window):
    """Editing question 1 or swapping two questions moves the others' answers under a plain causal mask with
    running positions (measured 7e-4 … 7e-3 here), and by float rounding only (≈ 1e-7) under the branch mask."""
    eng = make_engine(arch, sliding_window=window)
    out = leak_probe(eng, [REQUEST])
    assert out["n"] == 1 and out["tokens_mean"] > 100
    for measure, questions in (("contamination", 3), ("order", 4)):
        assert out["naive"][measure]["max_abs_dp"] > 1e-4, out["naive"]
        assert out["branch"][measure]["max_abs_dp"] <= 1e-5, out["branch"]
        assert out["naive"][measure]["questions"] == out["branch"][measure]["questions"] == questions
    # the branch run is the engine's own answer (its packed kernel vs dense sdpa: rounding only)
    probs = request_probabilities(eng, REQUEST, "branch")
    engine_probs = eng.probabilities(validate_request(REQUEST), eng.question_logits([eng.encode(validate_request(REQUEST))])[0])
    assert max(float((a - b).abs().max()) for a, b in zip(probs.values(), engine_probs)) <= 1e-5
    with pytest.raises(ValueError, match="mask must be one of"):
        request_probabilities(eng, REQUEST, "causal")
    with pytest.raises(ValueError, match=">= 2 questions"):
        leak_probe(eng, [{"state": "s", "questions": {"a": {"type": "noul", "instructions": "q?"}}}])


def test_needle_lengths_and_states():
    assert needle_lengths(256) == (256,)
    assert needle_lengths(1000) == (256, 512, 1000)
    assert needle_lengths(8128) == (256, 512, 1024, 2048, 4096, 8128)
    with pytest.raises(ValueError, match=">= 256"):
        needle_lengths(100)
    tok = make_tokenizer()
    for depth, where in ((0.0, 0), (1.0, -1)):
        paras = needle_state(tok, 400, depth, "FACT HERE.", random.Random(0)).split("\n\n")
        assert paras[where] == "FACT HERE." and len(paras) > 2
    with pytest.raises(ValueError, match="depth"):
        needle_state(tok, 400, 1.5, "x", random.Random(0))


def test_needle_grid_on_a_sliding_window_model():
    """Structure check on a Qwen2-style sliding-window configuration (window 16 ≪ the states)."""
    eng = make_engine("qwen2", sliding_window=16)
    assert eng.sliding_window
    out = needle_probe(eng, 512, n=12)
    assert out["lengths"] == [256, 512] and out["depths"] == list(DEPTHS)
    assert out["trials_per_cell"] == 2 and out["n"] == 20          # ceil(12 / 10) states per cell
    for key in ("noul_accuracy", "choice_accuracy"):
        assert len(out[key]) == 2 and all(len(row) == 5 for row in out[key])
        assert all(0.0 <= x <= 1.0 for row in out[key] for x in row)
    assert len(out["p_true_yes"]) == len(out["p_true_no"]) == 2 and all(0 < p < 1 for p in out["p_true_yes"])
    # a state is at most its length and within a few paragraphs' worth of it
    assert all(0.6 * length <= built <= length for length, built in zip(out["lengths"], out["tokens_mean"]))
    with pytest.raises(ValueError, match="branch limit is 4096"):
        needle_probe(eng, 4090, n=1)


def test_n_reaches_every_probe():
    eng = make_engine("llama")
    out = run_probes(eng, 3, needle_max_tokens=256)
    assert set(out) == {*PROBES, "seconds"} and set(out["seconds"]) == set(PROBES)
    assert out["permutation"]["n"] == out["option_addition"]["n"] == out["none_of_the_above"]["n"] == 3
    assert out["isolation"]["trials"] == 3 and out["forgery"]["requests"] == 3
    assert out["threshold_economics"]["n"] == 3 and out["leak"]["n"] == 3
    assert out["needle"]["n"] >= 3 and out["needle"]["lengths"] == [256]
    assert out["packed_vs_separate"]["requests"] == len(example_requests()) + 1     # examples + n // 4 (at least 1)
    with pytest.raises(ValueError, match="n must be"):
        run_probes(eng, 0)


def test_isolation_and_forgery_keep_their_figures_at_20():
    """``n`` reaches isolation and forgery; the first 20 trials / requests are those of the fixed 20 before."""
    eng = make_engine("qwen2")
    assert forgery_probe(eng, requests=25) == {"requests": 25, "option_count_ok": 25, "reserved_ids_structural": 25,
                                               "answer_keys_ok": 25}
    a, b = isolation_probe(eng, trials=5), isolation_probe(eng, trials=6)
    assert a["trials"] == 5 and b["trials"] == 6 and a["sibling"] != b["sibling"]


def test_probes_command_writes_a_run_directory(tmp_path, capsys):
    import json

    from kevlike.cli import main

    model = save_tiny_model(tmp_path / "tiny")
    run = tmp_path / "run"
    assert main(["probes", "--model", model, "--n", "2", "--needle-max-tokens", "256", "--out", str(run),
                 "--only", "isolation,leak,needle,permutation"]) == 0
    files = {p.name for p in run.iterdir()}
    assert {"probes.json", "report.md"} <= files
    data = json.loads((run / "probes.json").read_text())
    meta = data["meta"]
    assert meta["seed"] == 0 and meta["config"]["n"] == 2 and meta["config"]["needle_max_tokens"] == 256
    assert meta["git_commit"] and meta["machine"]["cpu"] and meta["dtype"] == "float32"
    assert meta["command"].startswith("kevlike probes --model ") and "--n 2" in meta["command"]
    assert set(data) == {"meta", "seconds", "isolation", "leak", "needle", "permutation"}
    assert data["isolation"]["trials"] == 2 and data["leak"]["n"] == 2
    report = (run / "report.md").read_text()
    rows = {line.split(" | ")[0][2:]: line.split(" | ") for line in report.splitlines() if line.startswith("| ")}
    assert rows["leak"][3] == "pass" and rows["leak"][4].startswith("2 requests")
    assert rows["isolation"][3] == "fail"          # a bare backbone's LM readout reads no code from the state
    assert rows["permutation"][4] == "2 questions × 4 orders"
    assert "## Leak: naive packing vs the branch mask" in report and "| 256 (" in report
    try:
        import matplotlib  # noqa: F401
        assert {"needle.png", "leak.png"} <= files
    except ImportError:
        assert "plots skipped: matplotlib is not installed" in report and not any(f.endswith(".png") for f in files)
    assert "run directory: " in capsys.readouterr().out
    # an existing, non-empty run directory is refused before any model loads
    assert main(["probes", "--model", model, "--n", "2", "--out", str(run)]) == 2
    assert "exists and is not empty" in capsys.readouterr().err


@pytest.mark.parametrize("argv,text", [(["--n", "0"], "--n must be >= 1"),
                                       (["--needle-max-tokens", "100"], "--needle-max-tokens: the needle's longest"),
                                       (["--only", "leak,nedle"], "--only: unknown probe(s) nedle")])
def test_probes_command_refuses_bad_flags_in_one_line(argv, text, capsys):
    from kevlike.cli import main

    assert main(["probes", "--model", "/nonexistent/model", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kevlike: error: ") and text in err and err.count("\n") == 1, err


def test_probes_command_refuses_a_needle_beyond_the_branch_limit(tmp_path, capsys):
    from kevlike.cli import main

    model = save_tiny_model(tmp_path / "tiny")
    assert main(["probes", "--model", model, "--needle-max-tokens", "5000", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "--needle-max-tokens" in err and "branch limit is 4096" in err, err


def test_report_verdicts_and_table_cells():
    from kevlike.eval.probe_report import TARGETS, tolerance, verdict, write_probe_run

    assert tolerance("float32") == 1e-5 and tolerance("bfloat16") == 2e-2
    leak = {"n": 1, "tokens_mean": 10.0,
            **{m: {k: {"max_abs_dp": v, "mean_abs_dp": v, "flip_rate": 0.0, "questions": 2}
                   for k in ("contamination", "order")} for m, v in (("naive", 0.05), ("branch", 3e-5))}}
    assert verdict("leak", leak, "float32") == "fail" and verdict("leak", leak, "bfloat16") == "pass"
    assert verdict("none_of_the_above", {"n": 1}, "float32") == "—"
    assert set(TARGETS) == set(PROBES)
