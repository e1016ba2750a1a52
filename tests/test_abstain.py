"""The abstention readout ``x_abstain`` (issue 33, docs/guide/abstention.md): one forward pass, packed ==
separate, set-mode option-addition invariance, Jev fields unchanged, save -> load, the loss term, a tiny training
run, the labelled "cannot tell" gold with hand-checked risk–coverage figures, and the threshold."""

import json
import math
import random

import pytest
import torch

from kevlike.config.train import TrainConfig
from kevlike.data import abstain as abstain_data
from kevlike.data.labelled import LabelledDataError, read_labelled, to_examples
from kevlike.data.sources import Example
from kevlike.metrics import abstention, auroc, risk_coverage, summary
from kevlike.model.heads import abstain_logit
from kevlike.request.encode import Encoder
from kevlike.request.schema import validate_request
from kevlike.training.config import ConfigError, load_config
from kevlike.training.train import build_model, loss_terms, make_batch, train

from tiny import REQUEST, fit, make_engine, make_tokenizer, max_dp, p_right_by_hand, save_tiny_model

INF = float("inf")


@pytest.fixture(scope="module", params=["pointer", "lm"])
def eng(request):
    """A tiny engine with x_abstain: its pointer head's none key, or its LM readout's none answer."""
    return make_engine(readout=request.param, abstain=True)


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")


def _x(resp):
    return {k: a["x_abstain"] for k, a in resp["answers"].items()}


# --- the readout ------------------------------------------------------------------------------------------

def test_x_abstain_is_read_in_the_packed_pass_and_equals_the_separate_runs(eng):
    packed = eng.decide(REQUEST)
    separate = eng.decide(REQUEST, mode="separate")
    assert max_dp(packed, separate) <= 1e-5
    xp, xs = _x(packed), _x(separate)
    assert set(xp) == set(REQUEST["questions"])
    assert all(0 < v < 1 for v in xp.values()) and len({round(v, 6) for v in xp.values()}) == len(xp)
    assert max(abs(xp[k] - xs[k]) for k in xp) <= 1e-5
    # batched with another request, padded: the same values
    other = {"state": "hi", "questions": {"q": {"type": "noul", "instructions": "Does the text mention a dog?"}}}
    both = eng.decide_batch([other, REQUEST])
    assert max(abs(_x(both[1])[k] - xp[k]) for k in xp) <= 1e-5


def test_x_abstain_is_p_none_of_a_softmax_over_the_options_and_the_none_key(eng):
    """x_abstain = sigmoid(z_none − logsumexp z) = P(none) among the K options and none, by hand."""
    enc = eng.encode(eng.prepare(REQUEST).request)
    logits, a = eng.question_outputs([enc])
    z, z_none_minus_lse = logits[0][1], float(a[0][1])          # the choice question "team"
    z_none = z_none_minus_lse + float(torch.logsumexp(z, 0))
    p = torch.softmax(torch.cat([z, torch.tensor([z_none])]), 0)
    assert _x(eng.decide(REQUEST))["team"] == pytest.approx(float(p[-1]), abs=1e-6)
    # the LSE runs over the option set in sorted order: symmetric, bit-identical for any order
    assert float(abstain_logit(z.flip(0), torch.tensor(z_none))) == float(abstain_logit(z, torch.tensor(z_none)))


def test_jev_fields_are_identical_to_a_model_without_the_capability(eng):
    plain = make_engine(readout=eng.readout.name)   # the same weights, without the none key / none answer
    a, b = eng.decide(REQUEST), plain.decide(REQUEST)
    assert "x_abstain" not in json.dumps(b) and not plain.abstain and eng.abstain
    for qid, ans in a["answers"].items():
        jev = {k: v for k, v in ans.items() if k not in ("x_abstain", "x_abstained")}
        assert json.dumps(jev) == json.dumps(b["answers"][qid])          # byte for byte
        assert list(ans)[:len(jev)] == list(b["answers"][qid])           # Jev fields first, in Jev's order


def _set_outputs(eng, criteria):
    req = {"state": "Customer: charged twice for March.",
           "questions": {"team": {"type": "choice", "instructions": "Which team?", "criteria": criteria}}}
    logits, abstain = eng.question_outputs([eng.encode(eng.prepare(req).request)])
    return logits[0][0], float(abstain[0][0]), req


def test_set_mode_option_addition_invariance_holds_with_the_readout():
    eng = make_engine(abstain=True, option_mode="set")
    base = {"billing": "invoices, charges", "sales": None, "tech": None}
    swapped = {"billing": "invoices, charges", "sales": None, "fox": None}    # a sibling of equal token length
    za, aa, _ = _set_outputs(eng, base)
    zb, ab, _ = _set_outputs(eng, swapped)
    assert torch.equal(za[:2], zb[:2])                 # bit-identical: each option is read in its own sub-branch
    # x_abstain sees the option set through logsumexp only: z_none is the same, so the change is exactly that term
    lse = lambda z: float(torch.logsumexp(torch.sort(z).values, 0))  # noqa: E731
    assert ab == pytest.approx(aa + lse(za) - lse(zb), abs=1e-6) and ab != aa
    # adding an option: the others' log-odds move by float rounding only
    zc, ac, _ = _set_outputs(eng, {**base, "legal": "contracts and the law"})
    assert abs(float((zc[0] - zc[1]) - (za[0] - za[1]))) <= 1e-5
    assert ac == pytest.approx(aa + lse(za) - lse(zc), abs=1e-5)
    # reordering the options: the sub-branches move in the packed row (option logits within rounding, as the
    # probabilities, tests/test_set_mode.py), and x_abstain with them
    _, _, req = _set_outputs(eng, base)
    rev = json.loads(json.dumps(req))
    rev["questions"]["team"]["criteria"] = dict(reversed(list(base.items())))
    assert abs(_x(eng.decide(rev))["team"] - _x(eng.decide(req))["team"]) <= 1e-6


def test_state_cache_answers_carry_the_same_x_abstain():
    cached = make_engine(abstain=True, state_cache_mb=16)
    plain = make_engine(abstain=True)
    first, second, ref = cached.decide(REQUEST), cached.decide(REQUEST), plain.decide(REQUEST)
    assert second["x_cached_tokens"] > 0
    for resp in (first, second):
        assert max(abs(_x(resp)[k] - _x(ref)[k]) for k in _x(ref)) <= 1e-5


def test_threshold_adds_x_abstained_and_never_removes_jev_fields(eng):
    x = _x(eng.decide(REQUEST))
    t = sorted(x.values())[1]                          # two answers at or below it, the rest above
    out = eng.decide({**REQUEST, "x_abstain_above": t})
    flagged = {k for k, a in out["answers"].items() if a.get("x_abstained")}
    assert flagged == {k for k, v in x.items() if v > t} and len(flagged) == len(x) - 2
    assert out["answers"]["team"]["probabilities"] and "choice" in out["answers"]["team"]
    for bad in (1.5, -0.1, True, "0.5"):
        with pytest.raises(Exception, match="x_abstain_above: must be a probability from 0 to 1"):
            eng.decide({**REQUEST, "x_abstain_above": bad})
    from kevlike.config.engine import EngineOptions
    with pytest.raises(ValueError, match="^abstain_above must be a probability from 0 to 1, got 2$"):
        EngineOptions(abstain_above=2)


def test_p_right_is_one_formula_for_answers_and_records():
    """The server's threshold and the metrics rank by the same P(right); ``correct`` counts an answered "cannot
    tell" question as wrong."""
    from kevlike.metrics import correct, p_right
    from kevlike.request.answers import p_right as answer_p_right
    assert answer_p_right(0.25, [0.2, 0.8]) == pytest.approx(0.6)
    assert p_right({"x_abstain": 0.25, "probs": [0.2, 0.8]}) == pytest.approx(0.6)
    assert correct({"probs": [0.2, 0.8], "gold": 1}) and not correct({"probs": [0.2, 0.8], "gold": 0})
    assert not correct({"probs": [0.2, 0.8], "gold": 1, "cannot_tell": True})


def test_p_right_below_abstains_where_p_right_is_low_and_never_removes_jev_fields(eng):
    base = eng.decide(REQUEST)
    pr = {k: p_right_by_hand(a) for k, a in base["answers"].items()}
    low = sorted(pr.values())
    t = (low[1] + low[2]) / 2                          # the two lowest P(right) are below it (midway: no float tie)
    out = eng.decide({**REQUEST, "x_p_right_below": t})
    flagged = {k for k, a in out["answers"].items() if a.get("x_abstained")}
    assert flagged == {k for k, v in pr.items() if v < t} and len(flagged) == 2
    for k, a in out["answers"].items():                # the same answers, the flag added and nothing else
        assert {f: v for f, v in a.items() if f != "x_abstained"} == base["answers"][k]
    # either threshold flags: x_abstain above 1 never, P(right) below 0 never, so each alone decides
    both = eng.decide({**REQUEST, "x_p_right_below": t, "x_abstain_above": 1.0})
    assert {k for k, a in both["answers"].items() if a.get("x_abstained")} == flagged
    x = _x(base)
    lowest = min(x.values())
    both = eng.decide({**REQUEST, "x_p_right_below": 0.0, "x_abstain_above": lowest})
    assert {k for k, a in both["answers"].items() if a.get("x_abstained")} == {k for k, v in x.items() if v > lowest}
    for bad in (1.5, -0.1, True, "0.5"):
        with pytest.raises(Exception, match="x_p_right_below: must be a probability from 0 to 1"):
            eng.decide({**REQUEST, "x_p_right_below": bad})
    from kevlike.config.engine import EngineOptions
    with pytest.raises(ValueError, match="^p_right_below must be a probability from 0 to 1, got 2$"):
        EngineOptions(p_right_below=2)


def test_p_right_below_by_hand():
    from kevlike.request.answers import answer
    from kevlike.request.schema import Option, Question
    noul = Question(id="q", type="noul", instructions="?", options=(Option("true", None), Option("false", None)))
    # P(right) = (1 − 0.2) · max(0.3, 0.7) = 0.56
    assert answer(noul, [0.3, 0.7], x_abstain=0.2, p_right_below=0.57)["x_abstained"] is True
    assert "x_abstained" not in answer(noul, [0.3, 0.7], x_abstain=0.2, p_right_below=0.55)
    assert "x_abstained" not in answer(noul, [0.3, 0.7], p_right_below=0.99)     # no x_abstain: no flag, no field
    pick = Question(id="c", type="choice", instructions="?", options=(Option("a", None), Option("b", None),
                                                                       Option("c", None)))
    # (1 − 0.5) · 0.6 = 0.30
    assert answer(pick, [0.6, 0.3, 0.1], x_abstain=0.5, p_right_below=0.31)["x_abstained"] is True
    assert "x_abstained" not in answer(pick, [0.6, 0.3, 0.1], x_abstain=0.5, p_right_below=0.29)


def test_the_abstention_temperature_scales_the_logit(eng):
    from kevlike.model.temperatures import TemperatureTable
    x1 = _x(eng.decide(REQUEST))["team"]
    old = eng.temperatures
    try:
        eng.temperatures = TemperatureTable(by_type={"abstain": 2.0})
        x2 = _x(eng.decide(REQUEST))["team"]
    finally:
        eng.temperatures = old
    logit = math.log(x1 / (1 - x1))
    assert x2 == pytest.approx(1 / (1 + math.exp(-logit / 2)), abs=1e-6)


# --- save -> load, training ---------------------------------------------------------------------------------

def test_abstain_loss_is_bce_on_all_questions_and_ce_on_the_answerable_ones():
    ex = Example({"state": "s", "questions": {
        "a": {"type": "noul", "instructions": "A?"},
        "b": {"type": "choice", "instructions": "B?", "criteria": {"x": None, "y": None, "z": None}}}},
        {"a": [1.0, 0.0], "b": [1 / 3, 1 / 3, 1 / 3]}, "test", cannot_tell=frozenset({"b"}))
    batch, aux = make_batch([ex], Encoder(make_tokenizer()), "cpu")
    assert aux["cannot_tell"].tolist() == [[0.0, 1.0]]
    z = torch.full(batch.option_mask.shape, -INF)
    z[0, 0, :2] = torch.tensor([1.0, 0.0])
    z[0, 1, :3] = torch.tensor([0.0, 0.0, 0.0])
    z_none = torch.tensor([[0.0, 2.0]])
    cfg = TrainConfig.from_dict({"head": {"abstain": True}, "loss": {"perm": 0.0, "ord": 0.0, "abstain": 0.5}})
    terms = loss_terms((z, z_none), batch, aux, cfg)
    ce = -math.log(math.e / (math.e + 1))                           # question a only
    a_a = 0.0 - math.log(math.e + 1)                                # z_none − LSE, answerable: target 0
    a_b = 2.0 - math.log(3)                                         # cannot tell: target 1
    bce = (-math.log(1 - 1 / (1 + math.exp(-a_a))) - math.log(1 / (1 + math.exp(-a_b)))) / 2
    assert terms["ce"].item() == pytest.approx(ce, abs=1e-6)
    assert terms["abstain"].item() == pytest.approx(bce, abs=1e-6)
    assert terms["loss"].item() == pytest.approx(ce + 0.5 * bce, abs=1e-6)


def test_config_switches_are_checked(tiny_dir):
    with pytest.raises(ConfigError, match="head.abstain is false"):
        load_config(None, [f"backbone={tiny_dir}", "loss.abstain=1"])
    with pytest.raises(ConfigError, match="phase is 'abstain'"):
        load_config(None, [f"backbone={tiny_dir}", "phase=abstain"])
    cfg = load_config("configs/abstain.yaml")
    assert cfg.init_from == "kevlike-default" and cfg.phase == "abstain" and cfg.head.abstain


def test_phase_abstain_trains_the_none_key_alone(tiny_dir):
    cfg = load_config(None, [f"backbone={tiny_dir}", "lora.r=4", "lora.alpha=8", "head.abstain=true",
                             "loss.abstain=1", "phase=abstain"])
    model, tok, _ = build_model(cfg)
    assert sorted(n for n, p in model.named_parameters() if p.requires_grad) == ["head.b_none", "head.w_none"]
    rng = random.Random(0)
    rows = [abstain_data.docs_row(rng) for _ in range(4)]
    from kevlike.data.families import family_example
    exs = [family_example("abstain_docs", r, rng) for r in rows]
    assert any(e.cannot_tell for e in exs)
    batch, aux = make_batch(exs, Encoder(tok), "cpu")
    model.train()
    first, terms = fit(model, batch, aux, cfg, steps=40, lr=5e-2, term="abstain")
    assert terms["abstain"].item() < first * 0.8, (first, terms)


def test_a_tiny_training_run_writes_a_model_that_answers_with_x_abstain(tiny_dir, tmp_path):
    from kevlike.model.engine import Engine
    from kevlike.model.modeldir import ModelDir
    run = train(None, [f"backbone={tiny_dir}", "lora.r=4", "lora.alpha=8", "head.abstain=true", "loss.abstain=1",
                       "phase=head", "tasks={abstain_docs: {weight: 1}, documents: {weight: 1}}", "batch_size=1",
                       "grad_accum=2", "max_steps=3", "eval_every=3", "validation.n=2", "checkpoint_every=0",
                       # fp32 like the other in-process runs: accelerate keeps one precision per process
                       "device=cpu", "mixed_precision=no", f"output_dir={tmp_path}"], quiet=True)
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert any("abstain" in r for r in rows if r["kind"] == "train")
    val = [r for r in rows if r["kind"] == "validation"][-1]
    assert val["abstention"]["n"] > val["abstention"]["n_cannot_tell"] > 0 and "curve" not in val["abstention"]
    art = run / "artifact"
    assert ModelDir(art).capabilities() == ["x_abstain"]
    w = ModelDir(art).head_weights()
    loaded = Engine.from_pretrained(art, threads=1)
    assert loaded.abstain and torch.equal(loaded.head.w_none.detach().cpu(), w["w_none"])
    assert torch.equal(loaded.head.b_none.detach().cpu(), w["b_none"])
    x = _x(loaded.decide(REQUEST))
    assert set(x) == set(REQUEST["questions"]) and all(0 <= v <= 1 for v in x.values())


def test_the_lm_readout_trains_its_none_answer_and_serves_what_it_trained(tiny_dir, tmp_path):
    """``readout: lm`` with ``head.abstain``: x_abstain is the none answer's score against the options' (the
    pointer formula); the options' scores are those of the same model without the none answer (their sub-branches
    do not see it); λ_abstain teaches it; the saved model declares the capability and the engine serves the
    training model's abstention logits."""
    from kevlike.model.engine import Engine
    from kevlike.model.heads import lm_none_scores
    from kevlike.model.modeldir import ModelDir
    from kevlike.training.train import write_artifact
    cfg = load_config(None, [f"backbone={tiny_dir}", "lora.r=4", "lora.alpha=8", "readout=lm", "head.abstain=true",
                             "loss.abstain=1"])
    model, tok, resolved = build_model(cfg)
    assert model.head is None and model.lm_abstain
    rng = random.Random(0)
    from kevlike.data.families import family_example
    exs = [family_example("abstain_docs", abstain_data.docs_row(rng), rng) for _ in range(4)]
    assert any(e.cannot_tell for e in exs)
    batch, aux = make_batch(exs, Encoder(tok), "cpu", readout="lm", abstain=True)
    plain_batch, _ = make_batch(exs, Encoder(tok), "cpu", readout="lm")
    assert plain_batch.none_mask is None and bool(batch.none_mask[batch.branch_mask].all())
    with pytest.raises(ValueError, match="no none answers"):
        lm_none_scores(torch.zeros(1, 1, 1), plain_batch, None)
    model.eval()
    with torch.no_grad():
        z, z_none = model(batch)
        model.lm_abstain = False
        z_plain = model(plain_batch)
        model.lm_abstain = True
    assert (z - z_plain).nan_to_num(posinf=0.0, neginf=0.0).abs().max().item() <= 1e-5
    model.train()
    first, terms = fit(model, batch, aux, cfg, steps=30, lr=5e-3, term="abstain")
    assert terms["abstain"].item() < 0.7 * first, (first, terms)
    model.eval()
    art = write_artifact(tmp_path / "lm_abstain", model, tok, cfg, resolved, {"nll": 1.0})
    assert ModelDir(art).capabilities() == ["x_abstain"] and ModelDir(art).readout() == "lm"
    loaded = Engine.from_pretrained(art, threads=1)
    assert loaded.abstain and loaded.readout.name == "lm"
    with torch.no_grad():
        z, z_none = model(batch)
    encoded = [loaded.encode(validate_request(e.request)) for e in exs]
    _, served = loaded.question_outputs(encoded)
    for b, per_q in enumerate(served):
        for j, a in enumerate(per_q):
            want = float(abstain_logit(z[b, j][batch.option_mask[b, j]], z_none[b, j]))
            assert float(a) == pytest.approx(want, abs=1e-5)
    x = _x(loaded.decide(REQUEST))
    assert set(x) == set(REQUEST["questions"]) and all(0 < v < 1 for v in x.values())


# --- labelled "cannot tell" golds and the risk–coverage figures ----------------------------------------------

def _line(gold, state="s"):
    return json.dumps({"request": {"state": state, "questions": {
        "q": {"type": "choice", "instructions": "Which?", "criteria": {"a": None, "b": None}}}}, "gold": {"q": gold}})


def test_labelled_cannot_tell_gold_and_bad_values(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text(_line("a") + "\n" + _line({"cannot_tell": True}) + "\n")
    items = read_labelled(good)
    assert items[1].cannot_tell == frozenset({"q"}) and items[0].cannot_tell == frozenset()
    exs = to_examples(items)
    assert exs[1].cannot_tell == {"q"} and exs[1].targets["q"] == [0.5, 0.5]
    for bad, msg in (({"cannot_tell": False}, "gold.q.cannot_tell: must be true"),
                     ({"cannot_tell": "yes"}, "gold.q.cannot_tell: must be true"),
                     ({"cannot_tell": True, "a": 1}, "gold.q: a \"cannot tell\" gold is exactly"),
                     ({"cancel_tell": True}, r"gold.q: \"cancel_tell\" is not an answer .*\(did you mean \{\"cannot_tell\": true\}\?\)"),
                     ({"Cannot_Tel": 1.0}, r'gold.q: "Cannot_Tel" .*did you mean'),
                     ({"zzz": 1.0}, r'gold.q: "zzz" is not an answer of this choice question \(answers: [^)]*\)$')):
        f = tmp_path / "bad.jsonl"
        f.write_text(_line("a") + "\n" + _line(bad) + "\n")
        with pytest.raises(LabelledDataError, match=f"bad.jsonl:2: {msg}"):
            read_labelled(f)


def test_risk_coverage_figures_by_hand():
    """Six questions (two "cannot tell"), answered by argmax; x_abstain ascending:
    0.1 right, 0.2 right, 0.3 wrong, 0.6 cannot-tell, 0.6 right, 0.9 cannot-tell."""
    def rec(x, ok, ct=False):
        return {"type": "noul", "probs": [0.8, 0.2], "target": [1.0, 0.0] if ok else [0.0, 1.0],
                "gold": 0 if ok else 1, "x_abstain": x, **({"cannot_tell": True} if ct else {})}
    rs = [rec(0.1, True), rec(0.2, True), rec(0.3, False), rec(0.6, True, ct=True), rec(0.6, True), rec(0.9, True, ct=True)]
    curve = risk_coverage(rs)
    assert [(p["threshold"], round(p["coverage"], 6), round(p["accuracy"], 6)) for p in curve] == [
        (0.1, round(1 / 6, 6), 1.0), (0.2, round(2 / 6, 6), 1.0), (0.3, 0.5, round(2 / 3, 6)),
        (0.6, round(5 / 6, 6), 0.6), (0.9, 1.0, 0.5)]
    a = abstention(rs)
    # AURC: 1/6·0 + 1/6·0 + 1/6·(1/3) + 2/6·0.4 + 1/6·0.5
    assert a["aurc"] == pytest.approx(1 / 18 + 0.8 / 6 + 0.5 / 6)
    assert a["coverage_at_5pct"] == pytest.approx(2 / 6)
    assert a["accuracy_all"] == 0.5 and a["n_cannot_tell"] == 2
    # AUROC: positives {0.6, 0.9} vs negatives {0.1, 0.2, 0.3, 0.6}: (4 + 3.5) / 8
    assert a["auroc"] == pytest.approx(7.5 / 8) and auroc([0.1, 0.9], [False, True]) == 1.0
    # ties at the ends and a NaN: mid-ranks (1.5, 1.5, 3.5, 3.5 → U = 7 − 3 = 4 of 4), and a clear error, not a hang
    assert auroc([0.2, 0.2, 0.7, 0.7], [False, False, True, True]) == 1.0
    assert auroc([0.5, 0.5], [False, True]) == 0.5
    with pytest.raises(ValueError, match="finite"):
        auroc([0.1, float("nan"), 0.3], [False, True, True])
    # ECE of x_abstain as a yes/no probability: bins by max(p, 1−p)
    assert a["ece"] is not None and sum(a["ece_bins"]) == 6
    s = summary(rs)                                     # answer metrics over the four answerable ones only
    assert s["n"] == 4 and s["accuracy"] == 0.75 and s["abstention"]["n"] == 6


def test_risk_coverage_by_p_right_by_hand():
    """P(right) = (1 − x_abstain) · max p ranks errors on answerable questions too. Five questions:
    a (x 0.1, top 0.6, right) 0.54; b (0.2, 0.99, right) 0.792; c (0.3, 0.55, wrong) 0.385; d (0.5, 0.9, "cannot
    tell") 0.45; e (0.4, 0.95, right) 0.57. By P(right): b e a d c, accuracy 1 1 1 3/4 3/5; by x_abstain: a b c e d,
    accuracy 1 1 2/3 3/4 3/5."""
    def rec(x, top, ok, ct=False):
        return {"type": "noul", "probs": [top, 1 - top], "gold": 0 if ok else 1, "x_abstain": x,
                **({"cannot_tell": True} if ct else {})}
    rs = [rec(0.1, 0.6, True), rec(0.2, 0.99, True), rec(0.3, 0.55, False), rec(0.5, 0.9, True, ct=True),
          rec(0.4, 0.95, True)]
    curve = risk_coverage(rs, by="p_right")
    assert [round(p["threshold"], 6) for p in curve] == [0.792, 0.57, 0.54, 0.45, 0.385]
    assert [p["accuracy"] for p in curve] == pytest.approx([1, 1, 1, 3 / 4, 3 / 5])
    a = abstention(rs)
    assert a["coverage_at_5pct_p_right"] == pytest.approx(3 / 5) and a["coverage_at_5pct"] == pytest.approx(2 / 5)
    assert a["aurc_p_right"] == pytest.approx((1 / 4 + 2 / 5) / 5)
    assert a["aurc"] == pytest.approx((1 / 3 + 1 / 4 + 2 / 5) / 5)
    with pytest.raises(ValueError, match="by must be"):
        risk_coverage(rs, by="confidence")


def test_eval_data_reports_abstention_on_a_labelled_file(eng, tmp_path):
    from kevlike.eval.owndata import evaluate_data
    f = tmp_path / "mine.jsonl"
    lines = [{"request": REQUEST, "gold": {"urgent": True, "team": "billing", "anger": {"cannot_tell": True},
                                           "lazy": {"cannot_tell": True}}}]
    f.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    run = evaluate_data(None, f, tmp_path / "out", engine=eng, quiet=True)
    m = json.loads((run / "metrics.json").read_text())
    ab = m["overall"]["abstention"]
    assert ab["n"] == 4 and ab["n_cannot_tell"] == 2 and m["overall"]["n"] == 2
    assert "Abstention" in (run / "report.md").read_text()
    x = _x(eng.decide(REQUEST))
    assert ab["auroc"] == auroc([x["urgent"], x["team"], x["anger"], x["lazy"]], [False, False, True, True])


def test_generalization_run_reports_abstention_and_draws_risk_coverage(eng, tmp_path, monkeypatch):
    """The generalization suite's run directory has the abstention table per split and ``risk_coverage.png``
    (issue 33: "for every suite"), for a model with the capability."""
    pytest.importorskip("matplotlib")
    from kevlike.eval import heldout
    ex = Example(REQUEST, {"urgent": [1.0, 0.0], "team": [1.0, 0.0, 0.0], "anger": [1 / 3] * 3, "lazy": [0.0, 1.0]},
                 "toy", cannot_tell={"anger"})
    monkeypatch.setattr(heldout, "generalization_sets", lambda quick, n, bigbench, splits=None: {"abstain": [ex]})
    run = heldout.run_suite(None, "generalization-quick", tmp_path, engine=eng, lm_baseline=False, quiet=True)
    files = {p.name for p in run.iterdir()}
    assert "risk_coverage.png" in files, files
    ab = json.loads((run / "metrics.json").read_text())["generalization"]["splits"]["abstain"]["abstention"]
    assert ab["n_cannot_tell"] == 1 and ab["n"] == 4
    md = (run / "report.md").read_text()
    assert "![risk_coverage.png](risk_coverage.png)" in md
    # the served (calibrated) abstention table comes first; the T = 1 one says it is not what the server returns
    from kevlike.eval.generalization import ABSTENTION_HEADING, UNCALIBRATED_ABSTENTION_HEADING
    assert md.count(ABSTENTION_HEADING) == 1 and md.count(UNCALIBRATED_ABSTENTION_HEADING) == 1
    assert md.index(ABSTENTION_HEADING) < md.index("The same logits at T = 1") < md.index(UNCALIBRATED_ABSTENTION_HEADING)


def test_rescoring_applies_the_abstention_temperature():
    """``eval --reuse`` and the report's uncalibrated view re-score x_abstain too: sigmoid(a / T_abstain)."""
    from kevlike.eval.heldout import rescore
    from kevlike.model.temperatures import TemperatureTable
    recs = [{"type": "noul", "logits": [1.0, 0.0], "gold": 0, "abstain_logit": 2.0, "x_abstain": 0.5},
            {"type": "noul", "logits": [1.0, 0.0], "gold": 0}]
    fitted = rescore(recs, TemperatureTable(by_type={"abstain": 2.0, "noul": 0.5}))
    assert fitted[0]["x_abstain"] == pytest.approx(1 / (1 + math.exp(-1.0)))
    assert fitted[0]["probs"][0] == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert "x_abstain" not in fitted[1]
    assert rescore(recs, TemperatureTable())[0]["x_abstain"] == pytest.approx(1 / (1 + math.exp(-2.0)))
    platt = rescore(recs, TemperatureTable(by_type={"abstain": 2.0}, abstain_bias=-0.5))
    assert platt[0]["x_abstain"] == pytest.approx(1 / (1 + math.exp(-0.5)))


def test_rescoring_a_set_mode_run_takes_the_set_mode_choice_temperatures():
    """A set-mode run's choice records are re-scored as the engine serves them (``choice:set`` first)."""
    from kevlike.eval.heldout import rescore
    from kevlike.model.temperatures import TemperatureTable
    recs = [{"type": "choice", "logits": [1.0, 0.0, 0.0], "gold": 0}]
    table = TemperatureTable(by_type={"choice": 1.0, "choice:set": 0.5})
    e, e2 = math.exp(1.0), math.exp(2.0)
    assert rescore(recs, table)[0]["probs"][0] == pytest.approx(e / (e + 2))
    assert rescore(recs, table, "set")[0]["probs"][0] == pytest.approx(e2 / (e2 + 2))


def test_the_abstention_scaling_is_fitted_where_cannot_tell_is_asked():
    """fit_table fits x_abstain's Platt scaling on the source families that hold "cannot tell" records;
    answerable-only families (whose base rate of "cannot tell" is 0) take no part."""
    from kevlike.model.temperatures import fit_abstain, fit_table
    rng = random.Random(0)
    asked = [{"source": f"abstain_docs/typed/{i}", "type": "noul", "logits": [0.0, 1.0], "gold": 1,
              "abstain_logit": rng.gauss(1.0 if i % 3 == 0 else -2.0, 1.5), **({"cannot_tell": True} if i % 3 == 0 else {})}
             for i in range(300)]
    other = [{"source": "banking77/choice", "type": "noul", "logits": [0.0, 1.0], "gold": 1,
              "abstain_logit": rng.gauss(-8.0, 1.0)} for _ in range(3000)]
    table, report = fit_table(asked + other, min_count=50)
    t, b = fit_abstain([r["abstain_logit"] for r in asked], [bool(r.get("cannot_tell")) for r in asked])
    assert table.by_type["abstain"] == pytest.approx(t) and table.abstain_bias == pytest.approx(b)
    assert report["types"]["abstain"]["n"] == 300 and report["types"]["abstain"]["cannot_tell"] == 100
    assert report["types"]["abstain"]["bias"] == pytest.approx(b)


def test_platt_scaling_recovers_a_known_logistic_model_and_beats_a_temperature_alone():
    """Labels drawn from P(cannot tell | a) = sigmoid(a / 2 + 1.5): the fit recovers T = 2 and bias 1.5 (within the
    sampling error of 20,000 draws); it is the maximum of the likelihood (any nudge of T or the bias costs); a
    temperature alone (bias 0) cannot reach its log loss."""
    from kevlike.model.temperatures import abstain_nll_at, fit_abstain
    rng = random.Random(1)
    a = [rng.uniform(-12.0, 8.0) for _ in range(20000)]
    y = [rng.random() < 1 / (1 + math.exp(-(x / 2 + 1.5))) for x in a]
    t, b = fit_abstain(a, y)
    assert t == pytest.approx(2.0, rel=0.05) and b == pytest.approx(1.5, abs=0.08)
    best = abstain_nll_at(a, y, t, b)
    for dt, db in ((1.01, 0.0), (0.99, 0.0), (1.0, 0.01), (1.0, -0.01)):
        assert abstain_nll_at(a, y, t * dt, b + db) > best
    assert min(abstain_nll_at(a, y, s, 0.0) for s in (0.5, 1.0, 2.0, 4.0, 8.0)) > best + 0.01
    with pytest.raises(ValueError, match="both"):
        fit_abstain(a, [False] * len(a))


def test_degenerate_abstention_fits_fall_back_instead_of_serving_a_step_or_a_random_slope():
    """Logits separated far from 0 drive the bias to its bound (a near step function): a bound hit, not a fit.
    Equal logits rank nothing: any T fits equally, so none is served. A NaN logit is named."""
    from kevlike.model.temperatures import fit_table
    def mk(a, ct=False):
        return {"source": "s", "type": "noul", "logits": [1.0, 0.0], "gold": 0, "abstain_logit": a,
                **({"cannot_tell": True} if ct else {})}
    separable = [mk(5 - 4 * i / 39) for i in range(40)] + [mk(7 + 4 * i / 9, True) for i in range(10)]
    for recs, why in ((separable, "bias bound"), ([mk(5.0, i % 3 == 0) for i in range(60)], "all abstention logits are equal"),
                      ([mk(float("nan"), True)] + [mk(i / 10, i % 2 == 0) for i in range(59)], "not a finite number")):
        table, report = fit_table(recs, min_count=50)
        assert "abstain" not in table.by_type and table.abstain_bias == 0.0
        assert why in report["types"]["abstain"]["fallback"]
    assert fit_table(separable, min_count=50)[1]["bound_hits"] == ["abstain"]


def test_an_abstention_fit_just_inside_the_bias_bound_is_a_bound_hit(monkeypatch):
    """A new user's recalibrate on outcomes that all fell on one question fitted T 0.067, bias +99.998 (every
    answer then abstained) and wrote it: within 1 % of the bound is on it."""
    from kevlike.model import temperatures
    recs = [{"source": "s", "type": "noul", "logits": [1.0, 0.0], "gold": 0, "abstain_logit": -9 + i / 20,
             **({"cannot_tell": True} if i % 5 == 0 else {})} for i in range(60)]
    for b, hit in ((99.998, True), (-99.2, True), (98.9, False)):
        monkeypatch.setattr(temperatures, "fit_abstain", lambda a, y, b=b: (0.067, b))
        table, report = temperatures.fit_table(recs, min_count=50)
        assert (report["bound_hits"] == ["abstain"]) == hit and (table.abstain_bias == (0.0 if hit else b))


def test_calibrate_serves_what_it_reports_when_the_abstention_fit_falls_back(tmp_path):
    """A refit whose abstention fit falls back replaces the file's old scaling (as any type fitted in the call
    does), so the report's "T = 1, bias 0" is what is served."""
    from kevlike.eval.calibration import calibrate_artifact
    from kevlike.model.modeldir import load_temperatures, save_calibration
    from kevlike.model.temperatures import TemperatureTable
    art = tmp_path / "a"
    art.mkdir()
    (art / "kevlike.json").write_text(json.dumps({"format": 1, "training": {"config": {"tasks": {"banking77": {}}}}}))
    save_calibration(art, TemperatureTable(by_type={"abstain": 0.5}, abstain_bias=4.0))
    rows = [{"source": "x/t", "type": "noul", "logits": [0.1 * i, 0.0], "gold": 0, "abstain_logit": 2.0,
             "cannot_tell": i % 2 == 0} for i in range(150)]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = calibrate_artifact(art, records_path=tmp_path / "r.jsonl", quiet=True, out=str(tmp_path))
    served = load_temperatures(art)
    assert "fallback" in report["types"]["abstain"] and "abstain" not in served.by_type
    assert served.abstain_bias == 0.0 and served.abstain_probability(2.0) == pytest.approx(1 / (1 + math.exp(-2.0)))


def test_abstain_bias_is_served_saved_checked_and_falls_back_with_its_temperature(tmp_path):
    """x_abstain = sigmoid(a / T + bias) at serve time; the bias survives a calibration file's round trip, is
    refused when not finite, and a profile without its own abstention fit keeps the model's bias with its T."""
    from kevlike.model.temperatures import ProfileError, TemperatureTable, read_temperatures, with_fallback
    table = TemperatureTable(by_type={"abstain": 2.0, "noul": 0.5}, abstain_bias=1.5)
    assert table.abstain_probability(3.0) == pytest.approx(1 / (1 + math.exp(-(1.5 + 1.5))), rel=1e-6)
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(table.to_json()))
    back = read_temperatures(path)
    assert back.abstain_bias == 1.5 and back.abstain_probability(3.0) == table.abstain_probability(3.0)
    assert "abstain_bias" not in TemperatureTable(by_type={"noul": 0.5}).to_json()   # files without it read as before
    for bad in (float("nan"), "1", True, 1e3):
        with pytest.raises(ProfileError, match="abstain_bias"):
            TemperatureTable(abstain_bias=bad)
    path.write_text(json.dumps({**table.to_json(), "abstain_bias": None}))
    with pytest.raises(ProfileError, match=f"{path.name}: abstain_bias: bias must be a finite number"):
        read_temperatures(path)
    profile = TemperatureTable(by_type={"noul": 0.8})
    assert with_fallback(profile, table).abstain_probability(3.0) == table.abstain_probability(3.0)
    own = TemperatureTable(by_type={"abstain": 0.5}, abstain_bias=-1.0)
    assert with_fallback(own, table).abstain_probability(3.0) == pytest.approx(1 / (1 + math.exp(-5.0)), rel=1e-6)


# --- serving: the threshold, /v1/models, the recorder and the feedback report ---------------------------------

def test_server_threshold_models_recorder_and_report(tmp_path):
    from kevlike.config.server import ServerConfig
    from kevlike.service.feedback import FeedbackStore
    from kevlike.service.server import create_app

    from test_feedback import call, running

    from kevlike.model.temperatures import TemperatureTable

    eng = make_engine(abstain=True, abstain_above=0.5)
    eng.temperatures = TemperatureTable(by_type={"abstain": 2.0}, abstain_bias=0.5)   # served Platt-scaled
    plain = make_engine()
    plain.name = "plain"
    store = FeedbackStore(f"sqlite:///{tmp_path / 'fb.db'}")
    app = create_app({eng.name: eng, "plain": plain}, eng.name, ServerConfig(), store=store)
    body = {k: v for k, v in REQUEST.items() if k != "model"}
    x = _x(eng.decide(body))
    with running(app) as port:
        st, _, models = call(port, "GET", "/v1/models")
        assert st == 200 and {m["name"]: m["x_capabilities"] for m in models["models"]} == {
            eng.name: ["x_abstain"], "plain": []}
        st, _, out = call(port, "POST", "/v1/systemone", body, {"x-request-id": "r1"})
        assert st == 200 and _x(out) == pytest.approx(x, abs=1e-6)
        assert {k for k, a in out["answers"].items() if a.get("x_abstained")} == {k for k, v in x.items() if v > 0.5}
        t = sorted(x.values())[0]                                   # the request's own threshold wins
        st, _, out = call(port, "POST", "/v1/systemone", {**body, "x_abstain_above": t}, {"x-request-id": "r2"})
        assert {k for k, a in out["answers"].items() if a.get("x_abstained")} == {k for k, v in x.items() if v > t}
        st, _, err = call(port, "POST", "/v1/systemone", {**body, "x_abstain_above": 2})
        assert st == 422 and err["detail"][0]["loc"] == ["body", "x_abstain_above"]
        st, _, out = call(port, "POST", "/v1/systemone", {**body, "model": "plain"})
        assert "x_abstain" not in json.dumps(out)
        app.state.recorder.wait(timeout=10)
        st, _, err = call(port, "POST", "/v1/feedback", {"request_id": "r1", "outcomes": {
            "anger": {"cannot_tell": True, "x": 1}, "lazy": {"cannot_tell": 1}}})   # the outcome written wrong
        assert st == 422 and [e["msg"] for e in err["detail"]] == [
            '{"cannot_tell": true} is an outcome on its own (the state did not determine the answer), without other '
            'keys; got also "x"', '"cannot_tell" takes true (the state did not determine the answer), got 1']
        st, _, out = call(port, "POST", "/v1/feedback", {"request_id": "r1", "outcomes": {
            "urgent": True, "team": "billing", "anger": {"cannot_tell": True}, "lazy": {"cannot_tell": True}}})
        assert (st, out["stored"]) == (200, 4)
        st, _, rep = call(port, "GET", "/v1/feedback/report")
    recs = {r["question"]: r for r in store.records()}
    assert recs["anger"]["cannot_tell"] and recs["team"]["x_abstain"] == pytest.approx(x["team"], abs=1e-6)
    # the recorded scaling gives back the raw logit the answer was served from (what `recalibrate` refits)
    prepared = eng.prepare(body).request
    _, raw = eng.question_outputs([eng.encode(prepared)])
    for q, a in zip(prepared.questions, raw[0]):
        assert recs[q.id]["abstain_logit"] == pytest.approx(float(a), abs=1e-4)
    # served in float64, x_abstain gives its logit back far into the tails (float32 rounded to 1 above +16.6)
    for a in (-600.0, -40.0, 13.0, 20.0, 30.0):
        xa = eng.temperatures.abstain_probability(a)
        assert 2.0 * (math.log(xa) - math.log1p(-xa) - 0.5) == pytest.approx(a, abs=1e-3)
    for bad in ([2.0], [0.0, 1.0], [1.0, float("nan")], "x"):
        with pytest.raises(ValueError, match="abstain_scaling"):
            store.record("r9", eng.name, [{"question_id": "q", "type": "noul", "probabilities": [0.5, 0.5],
                                           "temperature": 1.0, "option_keys": ["yes", "no"], "x_abstain": 0.3,
                                           "abstain_scaling": bad}])
    ab = rep["overall"]["abstention"]
    assert rep["overall"]["outcomes"] == 2 and ab["n"] == 4 and ab["n_cannot_tell"] == 2 and "curve" not in ab
    assert ab["auroc"] == auroc([x["urgent"], x["team"], x["anger"], x["lazy"]], [False, False, True, True])


def test_eval_url_reads_the_served_x_abstain_and_a_server_without_it_gives_none():
    """`kevlike eval --url`: RemoteEngine keeps the served x_abstain (as its logit) and records_from_logits
    gives it back to 1e-6; a model without the capability leaves the records without x_abstain."""
    from kevlike.config.server import ServerConfig
    from kevlike.eval.remote import RemoteEngine, RemoteError, answer_abstain_logits
    from kevlike.metrics import records_from_logits
    from kevlike.model.temperatures import TemperatureTable
    from kevlike.request.schema import validate_request
    from kevlike.service.server import create_app

    from test_feedback import running

    eng = make_engine(abstain=True)
    eng.temperatures = TemperatureTable(by_type={"abstain": 2.0}, abstain_bias=0.5)
    plain = make_engine()
    plain.name = "plain"
    body = {k: v for k, v in REQUEST.items() if k != "model"}
    x = _x(eng.decide(body))
    req = validate_request(body)
    targets = {q.id: [1.0] + [0.0] * (len(q.options) - 1) for q in req.questions}
    app = create_app({eng.name: eng, "plain": plain}, eng.name, ServerConfig())
    with running(app) as port:
        base = f"http://127.0.0.1:{port}"
        remote = RemoteEngine(base, model=eng.name)
        _, (logits,) = remote.question_outputs([remote.encode(req)])
        served = {q.id: remote.abstain_probability(a) for q, a in zip(req.questions, logits)}
        assert served == pytest.approx(x, abs=1e-6)
        recs = records_from_logits(remote, [Example(request=body, targets=targets, source="t")])
        assert {r["question"]: r["x_abstain"] for r in recs} == pytest.approx(x, abs=1e-6)
        bare = RemoteEngine(base, model="plain")
        assert bare.question_outputs([req])[1] == [None]
        assert all("x_abstain" not in r for r in records_from_logits(bare, [Example(body, targets, "t")]))
    q0 = req.questions[0].id
    assert answer_abstain_logits(req, {"answers": {q.id: {"x_abstain": 1.0} for q in req.questions}})[0] == \
        pytest.approx(math.log(1 - 1e-12) - math.log(1e-12))
    for bad in (1.5, -0.1, "x", None):
        with pytest.raises(RemoteError, match=f"{q0!r}: x_abstain"):
            answer_abstain_logits(req, {"answers": {q.id: {"x_abstain": bad} for q in req.questions}})


def test_the_stored_curve_is_thinned_but_the_figures_use_all_of_it():
    from kevlike.metrics import CURVE_POINTS, abstention, thin_curve
    curve = [{"threshold": i / 999, "coverage": (i + 1) / 1000} for i in range(1000)]
    thin = thin_curve(curve)
    assert len(thin) == CURVE_POINTS == 21 and thin[0] is curve[0] and thin[-1] is curve[-1]
    assert [p["coverage"] for p in thin[:3]] == [0.001, 0.051, 0.101]
    assert thin_curve(curve[:5]) == curve[:5]
    # 300 answerable questions, every 10th wrong, with distinct x_abstain; the figures match the unthinned curve
    recs = [{"probs": [0.9, 0.1], "gold": 0 if i % 10 else 1, "x_abstain": i / 1000} for i in range(300)]
    a = abstention(recs)
    assert len(a["curve"]) == 21 and a["curve"][-1]["coverage"] == 1.0
    assert abs(a["accuracy_all"] - 0.9) < 1e-12


def test_abstain_ts_turns_unknown_requirements_and_undetermined_records_into_cannot_tell():
    state = "records and requirements"   # ts_row reads only the questions and their golds
    req = {"state": state, "questions": {
        "requirement_status": {"type": "choice", "instructions": "For R2, is C3 met, violated or unknown?",
                               "criteria": {"met": None, "violated": None, "unknown": None}},
        "probe_eligibility": {"type": "choice", "instructions": "What is the eligibility status of R2?",
                              "criteria": {"eligible": None, "ineligible": None, "undetermined": None}}}}
    for status, elig, met_gold, elig_gold in (("met", "eligible", "true", "true"), ("violated", "ineligible", "false", "false"),
                                              ("unknown", "undetermined", None, None)):
        out, gold, twins = abstain_data.ts_row(req, {"requirement_status": status, "probe_eligibility": elig},
                                               random.Random(0))
        assert twins == [] and out["state"] == state
        assert gold == {"requirement_status": status, "probe_eligibility": elig, "met": met_gold, "eligible": elig_gold}
        met, eligible = out["questions"]["met"], out["questions"]["eligible"]
        assert met["type"] == eligible["type"] == "noul" and met["criteria"] is None
        assert "R2" in met["instructions"] and "C3" in met["instructions"] and "R2" in eligible["instructions"]
        assert met["instructions"] in [w.format(p="R2", c="C3") for w in abstain_data.TS_REQUIREMENT[1]]
    # a choice in another form adds nothing
    other = {"state": state, "questions": {"q": {"type": "choice", "instructions": "Which record is first?",
                                                 "criteria": {"R1": None, "R2": None}}}}
    assert abstain_data.ts_row(other, {"q": "R1"}, random.Random(0))[1] == {"q": "R1"}


def test_abstain_ts_rows_are_a_typed_source_with_a_quarter_cannot_tell():
    from kevlike.data import tasksource_gen
    from kevlike.data.families import SOURCES, SYNTHETIC_SOURCES, family_example, source_rows
    from kevlike.data.sources import DataUnavailableError
    try:
        base = tasksource_gen.rows("record_eligibility", "validation")
    except DataUnavailableError as e:
        pytest.skip(str(e))
    rows = source_rows("abstain_ts", "validation")
    assert SOURCES["abstain_ts"].kind == "typed" and "abstain_ts" in SYNTHETIC_SOURCES
    assert len(rows) == len(base) == 40 and [r[0]["state"] for r in rows] == [b[0]["state"] for b in base]
    golds = [g[q] for _, g, _ in rows for q in ("met", "eligible")]
    assert len(golds) == 80 and golds.count(None) == 19          # 9 unknown requirements, 10 undetermined records
    ex = family_example("abstain_ts", rows[0], random.Random(0))
    assert ex.cannot_tell == frozenset(q for q in ("met", "eligible") if rows[0][1][q] is None)
    for r in rows:
        validate_request(r[0])
