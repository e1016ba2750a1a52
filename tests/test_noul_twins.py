"""Negated twins of yes/no questions (kevlike.request.encode.noul_twin_frames, ``noul_twins``): each yes/no
question is also read as "Is the answer to "Q" no?" in the same pass, and the two are pooled with the twin's
answers swapped, so a bias towards "yes" that does not depend on the question cancels (issue 31: opposite
questions both got "yes"). The pooled answer equals the hand-pooled answers of the two questions asked
separately; packed == separate and the state cache still hold; other questions are untouched."""

import json

import pytest
import torch

from kevlike.config.engine import EngineOptions
from kevlike.model.heads import pool_orders
from kevlike.request.encode import NOUL_TWIN_FRAMES, noul_twin_frames
from kevlike.request.schema import validate_request

from tiny import make_engine, max_dp

STATE = "The deploy at 14:02 changed the load balancer config. The alert did not fire; a customer reported it."
Q = "Did the monitoring alert fire?"


def request(noul=Q, **extra):
    qs = {"fired": {"type": "noul", "instructions": noul},
          "cause": {"type": "choice", "instructions": "What caused it?",
                    "criteria": {"config": "a configuration change", "code": "a bug in application code"}},
          "severity": {"type": "score", "instructions": "How severe was it?", "criteria": ["low", "medium", "high"]}}
    qs.update(extra)
    return {"state": STATE, "questions": qs}


def test_the_twin_frames_are_training_frames_and_only_plain_yes_no_questions_get_them():
    from kevlike.data.families import NEGATION_FRAMES

    assert set(NOUL_TWIN_FRAMES) <= set(NEGATION_FRAMES)       # the models were trained on these (wrap_negation)
    req = validate_request(request(described={"type": "noul", "instructions": "Urgent?",
                                              "criteria": {"true": "a customer is blocked", "false": None}},
                                   blank={"type": "noul", "instructions": "",
                                          "criteria": {"true": "a customer is blocked", "false": None}}))
    frames = {q.id: noul_twin_frames(q, 2) for q in req.questions}
    assert frames == {"fired": NOUL_TWIN_FRAMES[:2], "cause": (), "severity": (), "described": (), "blank": ()}
    assert noul_twin_frames(req.questions[0], 0) == ()


def test_twin_branches_are_the_framed_question_with_its_answers_swapped():
    eng, plain = make_engine("qwen2", noul_twins=2), make_engine("qwen2")
    enc = eng.encode(validate_request(request()))
    ref = plain.encode(validate_request(request()))
    assert [(b.question, b.order) for b in enc.branches] == [(0, ()), (0, (1, 0)), (0, (1, 0)),
                                                             *[(b.question, b.order) for b in ref.branches[1:]]]
    assert [b.ids for b in enc.branches if b.question != 0 or not b.order] == [b.ids for b in ref.branches]
    for frame, twin in zip(NOUL_TWIN_FRAMES, enc.branches[1:3]):   # the framed question, asked as a question
        (alone,) = plain.encode(validate_request(request(noul=frame.format(q=Q)))).branches[:1]
        assert twin.ids == alone.ids and twin.options == alone.options and twin.decide == alone.decide
    # a constant bias towards "yes" (+b on the true logit) cancels; the question's own log-odds a stay
    a, b = 1.3, 2.0
    z = torch.zeros(len(enc.branches), 3)
    z[0, :2] = torch.tensor([a + b, 0.0])        # Q: log-odds a + b
    z[1, :2] = torch.tensor([-a + b, 0.0])       # not Q: log-odds -a + b
    z[2, :2] = torch.tensor([-a + b, 0.0])
    p = torch.softmax(pool_orders(enc, z)[0], 0)
    assert p[0].item() == pytest.approx(torch.sigmoid(torch.tensor(a)).item(), abs=1e-6)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_pooled_answer_equals_the_two_questions_asked_separately(arch):
    eng, plain = make_engine(arch, noul_twins=1), make_engine(arch)
    got = eng.decide(request())["answers"]
    z_q = plain.question_logits([plain.encode(validate_request(request()))])[0][0]
    z_n = plain.question_logits([plain.encode(validate_request(request(noul=NOUL_TWIN_FRAMES[0].format(q=Q))))])[0][0]
    pooled = (torch.log_softmax(z_q, 0) + torch.log_softmax(z_n.flip(0), 0)) / 2
    assert got["fired"]["noul"] == pytest.approx(torch.softmax(pooled, 0)[0].item(), abs=1e-5)
    other = plain.decide(request())["answers"]
    assert max_dp({"answers": {k: got[k] for k in ("cause", "severity")}},
                  {"answers": {k: other[k] for k in ("cause", "severity")}}) <= 1e-5   # the others: unchanged
    assert got["fired"]["noul"] != pytest.approx(other["fired"]["noul"], abs=1e-4)      # the twin moved it


def test_twins_keep_packed_equal_to_separate_and_the_state_cache_exact():
    eng = make_engine("llama", noul_twins=2, abstain=True)
    req = request(second={"type": "noul", "instructions": "Was a customer affected?"})
    packed, separate = eng.decide(req), eng.decide(req, mode="separate")
    assert max_dp(packed, separate) <= 1e-5
    for k in ("fired", "second"):
        assert abs(packed["answers"][k]["x_abstain"] - separate["answers"][k]["x_abstain"]) <= 1e-5
    cached = make_engine("llama", noul_twins=2, abstain=True, state_cache_mb=64)
    cached.decide(req)
    assert max_dp(cached.decide(req), packed) <= 1e-5
    assert packed["usage"]["input_tokens"] > make_engine("llama", abstain=True).decide(req)["usage"]["input_tokens"]


def test_the_setting_is_bounded_ignored_by_the_lm_readout_and_stored_by_calibrate(tmp_path):
    with pytest.raises(ValueError, match="noul_twins must be an integer from 0 to 4"):
        EngineOptions(noul_twins=5)
    assert make_engine("llama", readout="lm", noul_twins=2).noul_twins == 0     # its template has no frames
    eng = make_engine("llama", noul_twins=1)
    assert "1 negated twin per yes/no question" in eng.describe()
    from kevlike.eval.calibration import calibrate_artifact

    art = tmp_path / "artifact"
    art.mkdir()
    (art / "kevlike.json").write_text(json.dumps({"format": 1, "training": {"config": {"tasks": {"banking77": {}}}}}))
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"source": "spam", "type": "noul", "logits": [1.0, 0.0], "gold": 0}) + "\n")
    report = calibrate_artifact(art, records_path=records, quiet=True, options=EngineOptions(noul_twins=1))
    assert report["noul_twins"] == 1 and json.loads((art / "kevlike.json").read_text())["noul_twins"] == 1
    assert "option_orders" not in report


def test_twins_are_named_in_a_413_and_a_bad_manifest_value_is_one_line(tmp_path):
    from kevlike.request.schema import Limits, RequestError

    plain = make_engine("llama")
    n = plain.encode(validate_request(request())).n_tokens
    eng = make_engine("llama", noul_twins=2, limits=Limits(max_request_tokens=n))
    with pytest.raises(RequestError, match="with 2 negated twins of yes/no questions .*noul_twins = 2"):
        eng.decide(request())
    assert make_engine("llama", limits=Limits(max_request_tokens=n)).decide(request())["answers"]   # fits without
    from kevlike.model.engine import _manifest_count

    for bad in (None, "abc", 9, 1.7, True, -1):
        with pytest.raises(ValueError, match="kevlike.json field 'noul_twins' must be an integer from 0 to 4"):
            _manifest_count({"noul_twins": bad}, "noul_twins", 0, 4, "m")
    assert _manifest_count({}, "noul_twins", 0, 4, "m") == 0
    assert _manifest_count({"noul_twins": 3}, "noul_twins", 0, 4, "m") == 3


def test_calibrate_refuses_twins_it_did_not_fit_and_an_ensemble_refuses_them(tmp_path):
    from kevlike.eval.calibration import calibrate_artifact
    from kevlike.model.ensemble import EnsembleEngine, EnsembleError

    art = tmp_path / "artifact"
    art.mkdir()
    (art / "kevlike.json").write_text(json.dumps({"format": 1, "training": {"config": {"tasks": {"banking77": {}}}}}))
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"source": "banking77", "type": "choice", "logits": [1.0, 0.0], "gold": 0}) + "\n")
    with pytest.raises(ValueError, match="--noul-twins 1: no yes/no question was fitted in this call"):
        calibrate_artifact(art, records_path=records, quiet=True, options=EngineOptions(noul_twins=1))
    assert "noul_twins" not in json.loads((art / "kevlike.json").read_text())
    ens = tmp_path / "ens"
    ens.mkdir()
    (ens / "kevlike.json").write_text(json.dumps({"format": 1, "ensemble": {"members": [
        {"model": "a", "weight": 0.5}, {"model": "b", "weight": 0.5}]}}))
    with pytest.raises(ValueError, match="--noul-twins: .* is an ensemble; each member"):
        calibrate_artifact(ens, records_path=records, quiet=True, options=EngineOptions(noul_twins=1))
    with pytest.raises(EnsembleError, match="--noul-twins does not apply"):
        EnsembleEngine.from_dir(ens, EngineOptions(noul_twins=1), load=None)
