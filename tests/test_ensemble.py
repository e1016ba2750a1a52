"""Ensembles (kevlike/model/ensemble.py): a linear pool of decision models with different backbones and tokenizers.

Tiny random Llama and Qwen2 engines (tests/tiny.py): the mixture is checked against hand-mixed member answers, the
evaluation's path against the serving path, a one-hot weighting against the member itself, and the manifest's
refusals; one subprocess server answers with an ensemble directory."""

import json
import math
import subprocess
import sys

import pytest
import torch

from kevlike.metrics import records_from_logits
from kevlike.model.engine import Engine
from kevlike.model.ensemble import (EnsembleEngine, EnsembleError, pool_records, read_members, type_weights,
                                    write_ensemble)
from kevlike.model.temperatures import TemperatureTable
from kevlike.request.schema import validate_request
from tiny import REQUEST, make_engine, max_dp, p_right_by_hand, save_tiny_model

from kevlike.data.sources import Example


def _probs(q: dict, ans: dict) -> list[float]:
    if ans["type"] == "noul":
        return [ans["noul"], 1 - ans["noul"]]
    return list(ans["probabilities"].values())


@pytest.fixture(scope="module")
def members():
    # sharp temperatures: the tiny random heads answer near uniform, and the members must disagree for the mixture
    # to be told apart from either of them
    sharp = TemperatureTable(by_type={"noul": 0.05, "choice": 0.05, "score": 0.05})
    return [make_engine("llama", abstain=True, temperatures=sharp), make_engine("qwen2", abstain=True,
                                                                                  temperatures=sharp)]


def test_the_answer_is_the_weighted_mean_of_the_members_answers(members):
    ens = EnsembleEngine(members, [0.7, 0.3], name="ens")
    a, b = (m.decide(REQUEST) for m in members)
    got = ens.decide(REQUEST)
    assert got["model"] == "ens"
    assert got["usage"]["input_tokens"] == a["usage"]["input_tokens"] + b["usage"]["input_tokens"]
    for qid, q in REQUEST["questions"].items():
        want = [0.7 * x + 0.3 * y for x, y in zip(_probs(q, a["answers"][qid]), _probs(q, b["answers"][qid]))]
        assert _probs(q, got["answers"][qid]) == pytest.approx(want, abs=1e-6)
        x = 0.7 * a["answers"][qid]["x_abstain"] + 0.3 * b["answers"][qid]["x_abstain"]
        assert got["answers"][qid]["x_abstain"] == pytest.approx(x, abs=1e-9)
    # the members disagree (else the test could not tell a mixture from either member)
    assert max_dp(a, b) > 0.01


def test_abstention_thresholds_flag_the_mixed_answer_request_first(members):
    """``abstain_above`` / ``p_right_below`` read the ensemble's mixed x_abstain and distribution; a request's own
    ``x_abstain_above`` / ``x_p_right_below`` wins over the ensemble's; no Jev field is removed."""
    plain = EnsembleEngine(members, [0.7, 0.3], name="ens").decide(REQUEST)
    xs = sorted(a["x_abstain"] for a in plain["answers"].values())
    mid = (xs[0] + xs[-1]) / 2
    assert xs[0] < mid < xs[-1]
    above = EnsembleEngine(members, [0.7, 0.3], name="ens", abstain_above=mid).decide(REQUEST)
    for qid, a in above["answers"].items():
        assert a.get("x_abstained", False) == (plain["answers"][qid]["x_abstain"] > mid)
        assert {k: v for k, v in a.items() if k != "x_abstained"} == plain["answers"][qid]
    # the request's threshold replaces the engine's: 1.0 flags nothing, whatever the engine says
    assert not any("x_abstained" in a for a in
                   EnsembleEngine(members, [0.7, 0.3], name="ens", abstain_above=0.0).decide(
                       {**REQUEST, "x_abstain_above": 1.0})["answers"].values())
    prs = sorted(p_right_by_hand(a) for a in plain["answers"].values())
    cut = (prs[0] + prs[-1]) / 2
    below = EnsembleEngine(members, [0.7, 0.3], name="ens").decide({**REQUEST, "x_p_right_below": cut})
    assert [qid for qid, a in below["answers"].items() if a.get("x_abstained")] == \
        [qid for qid, a in plain["answers"].items() if p_right_by_hand(a) < cut] != []


def test_a_one_hot_ensemble_answers_as_its_member(members):
    for w in ([1.0, 0.0], [0.0, 1.0]):
        ens = EnsembleEngine(members, w, name="ens")
        assert max_dp(ens.decide(REQUEST), members[w.index(1.0)].decide(REQUEST)) < 1e-6


def test_evaluation_records_equal_the_served_answers(members):
    """records_from_logits (encode, question_outputs, probabilities) and decide (prepare, run) are two paths."""
    ens = EnsembleEngine(members, [0.4, 0.6], name="ens",
                         temperatures=TemperatureTable(by_type={"noul": 2.0, "choice": 0.5}, abstain_bias=0.5))
    targets = {qid: [1.0] + [0.0] * (len(q.get("criteria") or [0, 0]) - 1) for qid, q in REQUEST["questions"].items()}
    recs = records_from_logits(ens, [Example(REQUEST, targets, "t")], batch_size=1)
    served = ens.decide(REQUEST)
    req = validate_request(REQUEST)
    for r, q in zip(recs, req.questions):
        assert r["probs"] == pytest.approx(_probs(None, served["answers"][q.id]), abs=1e-6)
        assert r["x_abstain"] == pytest.approx(served["answers"][q.id]["x_abstain"], abs=1e-9)
    # a temperature acts on the mixture: softmax(log p / T)
    plain = EnsembleEngine(members, [0.4, 0.6], name="ens").decide(REQUEST)
    p = plain["answers"]["urgent"]["noul"]
    want = math.sqrt(p) / (math.sqrt(p) + math.sqrt(1 - p))
    assert served["answers"]["urgent"]["noul"] == pytest.approx(want, abs=1e-6)
    x = plain["answers"]["urgent"]["x_abstain"]
    assert served["answers"]["urgent"]["x_abstain"] == pytest.approx(
        1 / (1 + math.exp(-(math.log(x / (1 - x)) + 0.5))), abs=1e-9)


def test_pooled_member_records_equal_the_ensembles_records(members):
    """Weights are chosen on pooled validation records: they must be what the ensemble itself would write."""
    targets = {qid: [1.0] + [0.0] * (len(q.get("criteria") or [0, 0]) - 1) for qid, q in REQUEST["questions"].items()}
    exs = [Example(REQUEST, targets, "t")]
    ens = EnsembleEngine(members, [0.35, 0.65], name="ens")
    pooled = pool_records([records_from_logits(m, exs, 1) for m in members], [0.35, 0.65])
    direct = records_from_logits(ens, exs, 1)
    for p, d in zip(pooled, direct, strict=True):
        assert p["probs"] == pytest.approx(d["probs"], abs=1e-6)
        assert p["logits"] == pytest.approx(d["logits"], abs=1e-4)
        assert p["abstain_logit"] == pytest.approx(d["abstain_logit"], abs=1e-6)
    with pytest.raises(ValueError, match="differ in length"):
        pool_records([direct, direct[:-1]], [0.5, 0.5])
    with pytest.raises(ValueError, match="record 0: the members answer different questions"):
        pool_records([direct, direct[1:] + direct[:1]], [0.5, 0.5])


PER_TYPE = [{"noul": 1.0, "choice": 0.0, "score": 0.25}, {"noul": 0.0, "choice": 1.0, "score": 0.75}]


def test_per_type_weights_mix_each_question_type_with_its_own(members):
    ens = EnsembleEngine(members, PER_TYPE, name="ens")
    a, b = (m.decide(REQUEST) for m in members)
    got = ens.decide(REQUEST)
    for qid, q in REQUEST["questions"].items():
        wa = PER_TYPE[0][q["type"]]
        want = [wa * x + (1 - wa) * y for x, y in zip(_probs(q, a["answers"][qid]), _probs(q, b["answers"][qid]))]
        assert _probs(q, got["answers"][qid]) == pytest.approx(want, abs=1e-6)
        x = wa * a["answers"][qid]["x_abstain"] + (1 - wa) * b["answers"][qid]["x_abstain"]
        assert got["answers"][qid]["x_abstain"] == pytest.approx(x, abs=1e-9)
    assert max_dp(a, b) > 0.01
    # the evaluation's records and the pool of the members' records agree with the served answers
    targets = {qid: [1.0] + [0.0] * (len(q.get("criteria") or [0, 0]) - 1) for qid, q in REQUEST["questions"].items()}
    exs = [Example(REQUEST, targets, "t")]
    direct = records_from_logits(ens, exs, 1)
    pooled = pool_records([records_from_logits(m, exs, 1) for m in members], PER_TYPE)
    for p, d, q in zip(pooled, direct, validate_request(REQUEST).questions, strict=True):
        assert p["probs"] == pytest.approx(d["probs"], abs=1e-6)
        assert p["abstain_logit"] == pytest.approx(d["abstain_logit"], abs=1e-6)
        assert d["probs"] == pytest.approx(_probs(None, got["answers"][q.id]), abs=1e-6)
    assert "noul 1 / choice 0 / score 0.25 × " in ens.describe()


def test_bad_weights_are_refused(members):
    with pytest.raises(ValueError, match="sum to 1"):
        EnsembleEngine(members, [0.5, 0.6], name="e")
    with pytest.raises(ValueError, match="one weight per member"):
        EnsembleEngine(members, [1.0], name="e")


def _manifest(path, members):
    path.mkdir(parents=True, exist_ok=True)
    (path / "kevlike.json").write_text(json.dumps({"format": 1, "ensemble": {"members": members}}))
    return path


def test_manifest_refusals_name_the_field(tmp_path):
    ok = {"model": "kevlike-default", "weight": 0.5}
    cases = [
        ([], "non-empty list"),
        ([{"model": "kevlike-default"}], r"members\[0\] must hold exactly 'model' and 'weight'"),
        ([ok, {"model": "kevlike-qwen", "weight": -0.5}], r"members\[1\]\.weight must be a finite number ≥ 0"),
        ([ok, {"model": "kevlike-qwen", "weight": 0.6}], "sum to 1.1, not 1"),
        ([ok, {"model": "nope", "weight": 0.5}], r"members\[1\]\.model 'nope' is not a registered model"),
        ([ok, {"model": "kevlike-ensemble", "weight": 0.5}], "is an ensemble; members must be single models"),
        ([ok, ok], "named twice"),
        ([ok, {"model": "kevlike-qwen", "weight": {"noul": 0.5, "choice": 0.5}}],
         r"members\[1\]\.weight per question type must name exactly noul, choice, score"),
        ([ok, {"model": "kevlike-qwen", "weight": {"noul": 0.5, "choice": "x", "score": 0.5}}],
         r"members\[1\]\.weight\.choice must be a finite number"),
        ([{"model": "kevlike-default", "weight": {"noul": 0.5, "choice": 0.3, "score": 0.5}},
          {"model": "kevlike-qwen", "weight": 0.5}], "sum to 0.8, not 1 for choice questions"),
    ]
    for i, (members, msg) in enumerate(cases):
        with pytest.raises(EnsembleError, match=msg):
            read_members(_manifest(tmp_path / str(i), members))


def test_x_abstain_mixes_only_the_members_that_have_it(members):
    """A third member without x_abstain (an LM readout, as a bare backbone serves) joins the distribution's mixture
    but not x_abstain's: that is the other members' mixture, their weights renormalised (0.5/0.8, 0.3/0.8)."""
    lm = make_engine("qwen2", readout="lm")
    ws = [0.5, 0.2, 0.3]
    ens = EnsembleEngine([members[0], lm, members[1]], ws, name="ens")
    a, c, b = (m.decide(REQUEST) for m in (members[0], lm, members[1]))
    got = ens.decide(REQUEST)
    assert ens.abstain and ens.abstainers == [0, 2]
    for qid, q in REQUEST["questions"].items():
        want = [0.5 * x + 0.2 * z + 0.3 * y for x, z, y in zip(_probs(q, a["answers"][qid]), _probs(q, c["answers"][qid]),
                                                               _probs(q, b["answers"][qid]))]
        assert _probs(q, got["answers"][qid]) == pytest.approx(want, abs=1e-6)
        assert "x_abstain" not in c["answers"][qid]
        x = 0.625 * a["answers"][qid]["x_abstain"] + 0.375 * b["answers"][qid]["x_abstain"]
        assert got["answers"][qid]["x_abstain"] == pytest.approx(x, abs=1e-9)
    # pooled records agree with the ensemble's own, x_abstain included
    targets = {qid: [1.0] + [0.0] * (len(q.get("criteria") or [0, 0]) - 1) for qid, q in REQUEST["questions"].items()}
    exs = [Example(REQUEST, targets, "t")]
    direct = records_from_logits(ens, exs, 1)
    pooled = pool_records([records_from_logits(m, exs, 1) for m in (members[0], lm, members[1])], ws)
    for p, d, q in zip(pooled, direct, validate_request(REQUEST).questions, strict=True):
        assert p["probs"] == pytest.approx(d["probs"], abs=1e-6)
        assert p["x_abstain"] == pytest.approx(got["answers"][q.id]["x_abstain"], abs=1e-9)
        assert p["abstain_logit"] == pytest.approx(d["abstain_logit"], abs=1e-6)
    # the members that have x_abstain weigh 0 for a type: their plain mean
    zero = [{"noul": 0.0, "choice": 0.5, "score": 0.5}, {"noul": 1.0, "choice": 0.2, "score": 0.2},
            {"noul": 0.0, "choice": 0.3, "score": 0.3}]
    got = EnsembleEngine([members[0], lm, members[1]], zero, name="ens").decide(REQUEST)
    x = 0.5 * a["answers"]["urgent"]["x_abstain"] + 0.5 * b["answers"]["urgent"]["x_abstain"]
    assert got["answers"]["urgent"]["x_abstain"] == pytest.approx(x, abs=1e-9)
    assert _probs(None, got["answers"]["urgent"]) == pytest.approx(_probs(None, c["answers"]["urgent"]), abs=1e-6)


def test_write_and_load_an_ensemble_of_model_directories(tmp_path, members):
    a = save_tiny_model(tmp_path / "a", "llama")
    b = save_tiny_model(tmp_path / "b", "qwen2")
    out = write_ensemble(tmp_path / "ens", [a, b], [0.25, 0.75], note="test")
    assert [(m.weight, m.resolved) for m in read_members(out)] == [(0.25, a), (0.75, b)]
    with pytest.raises(EnsembleError, match="already holds a model"):
        write_ensemble(out, [a, b], [0.5, 0.5])
    ens = Engine.from_pretrained(str(out), threads=1, dtype="float32")
    assert isinstance(ens, EnsembleEngine) and ens.name == str(out)
    singles = [Engine.from_pretrained(x, threads=1, dtype="float32") for x in (a, b)]
    got, pa, pb = ens.decide(REQUEST), *(s.decide(REQUEST) for s in singles)
    for qid, q in REQUEST["questions"].items():
        want = [0.25 * x + 0.75 * y for x, y in zip(_probs(q, pa["answers"][qid]), _probs(q, pb["answers"][qid]))]
        assert _probs(q, got["answers"][qid]) == pytest.approx(want, abs=1e-6)
        assert "x_abstain" not in got["answers"][qid]        # LM-readout members have none
    with pytest.raises(ValueError, match="has no calibration profile 'ops'"):
        Engine.from_pretrained(str(out), profile="ops")


def test_an_embedded_backbone_is_a_member_by_its_name(tmp_path):
    """A bare backbone (its LM readout) is named, not turned into a path under the working directory."""
    a = save_tiny_model(tmp_path / "a", "llama")
    out = write_ensemble(tmp_path / "ens", [a, "smollm2-135m-instruct"], [0.9, 0.1])
    spec = json.loads((out / "kevlike.json").read_text())["ensemble"]["members"]
    assert spec[1] == {"model": "smollm2-135m-instruct", "weight": 0.1}
    assert [m.resolved for m in read_members(out)] == [a, "smollm2-135m-instruct"]


def test_a_calibration_profile_calibrates_the_mixture(tmp_path, members):
    """``kevlike calibrate ENSEMBLE --data FILE --profile NAME`` fits the mixture's temperatures (the members keep
    their own) and ``ENSEMBLE@NAME`` serves them: softmax(log p / T)."""
    from kevlike.eval.owndata import fit_profile
    from tiny import CORPUS
    out = write_ensemble(tmp_path / "ens", ["kevlike-default", "kevlike-qwen"], [0.5, 0.5])
    ens = EnsembleEngine(members, [0.5, 0.5], name=str(out), artifact_dir=out)
    lines = []
    for i in range(40):      # gold: the mixture's own answer, one in four flipped (a finite temperature fits)
        req = {**REQUEST, "state": CORPUS[i % 5] * (1 + i % 4) + f" {i}",
               "questions": {"fox": {"type": "noul", "instructions": "Is a fox mentioned?"}}}
        yes = ens.decide(req)["answers"]["fox"]["noul"] > 0.5
        lines.append(json.dumps({"request": req, "gold": {"fox": yes if i % 4 else not yes}}) + "\n")
    (tmp_path / "mine.jsonl").write_text("".join(lines))
    fit_profile(str(out), tmp_path / "mine.jsonl", "ops", min_count=5, engine=ens, quiet=True)
    prof = ens.with_profile("ops")
    assert prof.name == f"{out}@ops" and prof.temperatures.source.startswith("profile 'ops'")
    t = prof.temperatures.lookup("noul", 2)
    assert t != 1.0
    p = ens.decide(REQUEST)["answers"]["urgent"]["noul"]
    want = p ** (1 / t) / (p ** (1 / t) + (1 - p) ** (1 / t))
    assert prof.decide(REQUEST)["answers"]["urgent"]["noul"] == pytest.approx(want, abs=1e-5)
    with pytest.raises(ValueError, match="has no calibration profile 'nope'"):
        ens.with_profile("nope")


def test_cli_ensemble_decide_and_serve(tmp_path):
    from test_server import Server

    a = save_tiny_model(tmp_path / "a", "llama")
    b = save_tiny_model(tmp_path / "b", "qwen2")
    out = tmp_path / "ens"
    p = subprocess.run([sys.executable, "-m", "kevlike", "ensemble", a, b, str(out), "--weights", "0.5", "0.6"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "sum to 1.1" in p.stderr and not (out / "kevlike.json").exists()
    (tmp_path / "a-file").write_text("")
    p = subprocess.run([sys.executable, "-m", "kevlike", "ensemble", a, b, str(tmp_path / "a-file")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "cannot write the ensemble to" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, "-m", "kevlike", "ensemble", a, "missing-model", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "unknown model 'missing-model'" in p.stderr
    p = subprocess.run([sys.executable, "-m", "kevlike", "ensemble", a, b, str(out), "--weights", "0.5", "noul=1"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "per question type must name exactly noul, choice, score" in p.stderr
    p = subprocess.run([sys.executable, "-m", "kevlike", "ensemble", a, b, str(out), "--weights", "0.5", "noul"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and "'noul' is not a number or noul=W,choice=W,score=W" in p.stderr
    p = subprocess.run([sys.executable, "-m", "kevlike", "ensemble", a, b, str(tmp_path / "per-type"), "--weights",
                        "noul=0.8,choice=0.6,score=0.7", "noul=0.2,choice=0.4,score=0.3"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert [m.weight for m in read_members(tmp_path / "per-type")] == [
        {"noul": 0.8, "choice": 0.6, "score": 0.7}, {"noul": 0.2, "choice": 0.4, "score": 0.3}]
    p = subprocess.run([sys.executable, "-m", "kevlike", "ensemble", a, b, str(out), "--weights", "0.5", "0.5"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    (tmp_path / "req.json").write_text(json.dumps(REQUEST))
    p = subprocess.run([sys.executable, "-m", "kevlike", "decide", str(tmp_path / "req.json"), "--model", str(out),
                        "--dtype", "float32"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    decided = json.loads(p.stdout)
    server = Server(str(out), "--dtype", "float32")
    try:
        status, _, body, _ = server.post({**REQUEST, "model": str(out)})
        assert status == 200 and body["model"] == str(out)
        assert max_dp(body, decided) < 1e-5
        status, _, body, _ = server.post({**REQUEST, "model": str(out), "questions": {"q": {"type": "noul"}}})
        assert status == 422
    finally:
        server.stop()


@pytest.mark.parametrize("command", [["bench", "--quick"], ["probes"], ["parity", "examples/review.json"],
                                     ["gpu-check"]])
def test_one_model_measurements_refuse_an_ensemble(command):
    p = subprocess.run([sys.executable, "-m", "kevlike", *command, "--model", "kevlike-ensemble"],
                       capture_output=True, text=True)
    assert p.returncode == 2 and ("is an ensemble of kevlike-default, kevlike-qwen, qwen2.5-coder-0.5b-instruct: run it "
                                  "on each member") in p.stderr
    assert "Traceback" not in p.stderr


def test_the_shipped_ensemble_manifest_matches_its_registry_entry():
    """kevlike-ensemble's members are named twice (the registry, for `kevlike fetch`; the manifest, for the load)."""
    from kevlike.model.registry import ENSEMBLE_ARTIFACT, ENSEMBLE_MODEL, MODELS
    members = read_members(ENSEMBLE_ARTIFACT)
    assert tuple(m.model for m in members) == MODELS[ENSEMBLE_MODEL].members
    assert all(sum(col) == pytest.approx(1.0) for col in type_weights([m.weight for m in members]).values())
    assert MODELS[ENSEMBLE_MODEL].backbones == ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct")


def test_a_batch_names_the_request_an_error_is_in(members):
    from kevlike.request.schema import RequestError
    ens = EnsembleEngine(members, [0.5, 0.5], name="ens")
    bad = {**REQUEST, "questions": {"q": {"type": "noul"}}}
    with pytest.raises(RequestError) as e:
        ens.decide_batch([REQUEST, bad])
    assert e.value.errors[0]["loc"][:2] == ["body", 1] and e.value.status == 422
    with pytest.raises(ValueError, match="mode must be one of"):
        ens.decide_batch([REQUEST], mode="fast")
    a, b = ens.decide_batch([REQUEST, REQUEST])
    assert max_dp(a, b) == 0.0 and max_dp(a, ens.decide(REQUEST)) < 1e-6
