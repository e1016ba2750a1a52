"""Negation twins (``negation_twins``, kevlike.request.render.negation_twin): a yes/no question read beside its own
negation in the same pass and pooled with yes and no swapped, so a yes-bias that does not depend on the question
cancels (issue 31: opposite questions both answered yes)."""

import json
import math

import pytest
import torch

from kevlike import Engine
from kevlike.config.engine import MAX_NEGATION_TWINS
from kevlike.data.families import NEGATION_FRAMES
from kevlike.model.heads import pool_orders
from kevlike.model.modeldir import save_decision_model
from kevlike.request.encode import EncodedBranch, EncodedRequest
from kevlike.request.render import NEGATION_TWIN_FRAMES, lm_prompt, negation_twin
from kevlike.request.schema import validate_request

from tiny import REQUEST, make_engine

STATE = "The nightly backup did not run on Tuesday because the disk was full; it ran again on Wednesday."
PLAIN = "Did the backup run on Tuesday?"


def plain_request(*instructions):
    return {"state": STATE, "questions": {f"q{i}": {"type": "noul", "instructions": t}
                                          for i, t in enumerate(instructions)}}


def test_twin_frames_are_trained_frames_and_only_plain_yes_no_questions_have_twins():
    assert len(NEGATION_TWIN_FRAMES) == MAX_NEGATION_TWINS == 4
    assert set(NEGATION_TWIN_FRAMES) <= set(NEGATION_FRAMES)       # read only in wordings the models trained on
    qs = validate_request(REQUEST).questions                        # urgent (a description), team, anger, lazy
    by_id = {q.id: q for q in qs}
    assert negation_twin(by_id["lazy"], 0).instructions == 'Is the answer to "Is a fox mentioned?" no?'
    assert negation_twin(by_id["lazy"], 3).instructions == 'Must "Is a fox mentioned?" be answered with no?'
    assert negation_twin(by_id["lazy"], 0).options == by_id["lazy"].options
    for qid in ("urgent", "team", "anger"):                         # "Answer yes if: …" would say the opposite
        assert negation_twin(by_id[qid], 0) is None
    with pytest.raises(IndexError):
        negation_twin(by_id["lazy"], MAX_NEGATION_TWINS)


@pytest.mark.parametrize("readout", ["pointer", "lm"])
def test_branches_of_each_question_and_the_twin_prompt(readout):
    eng = make_engine("qwen2", readout, negation_twins=2)
    req = validate_request(REQUEST)
    enc = eng.encode(req)
    # urgent 1, team 1 (pointer, list mode: 1 canonical order), anger 1, lazy 1 + 2 twins
    assert [(b.question, b.order) for b in enc.branches if b.question != 1] == [
        (0, ()), (2, ()), (3, ()), (3, (1, 0)), (3, (1, 0))]
    assert enc.n_questions == 4
    twin = enc.branches[-2]
    text = eng.encoder.tokenizer.decode(list(twin.ids))
    if readout == "lm":
        assert text == lm_prompt(negation_twin(req.questions[3], 0))
        assert text.startswith('Question: Is the answer to "Is a fox mentioned?" no?')
    else:
        assert 'Is the answer to "Is a fox mentioned?" no?' in text
    plain = make_engine("qwen2", readout).encode(req)
    assert enc.n_tokens == plain.n_tokens + sum(b.n_tokens for b in enc.branches[-2:])
    assert enc.state_ids == plain.state_ids


def test_pool_reads_the_twins_yes_as_the_questions_no_and_cancels_a_constant_bias():
    """Hand-computed: question logits [s + b, 0], twin logits [-s + b, 0] (the twin says the opposite, the same
    bias b towards yes): the pool is log_softmax([s, -s] / 2 …), free of b."""
    enc = EncodedRequest((1,), (EncodedBranch((2,), 0, (0, 1), question=0),
                                EncodedBranch((3,), 0, (0, 1), question=0, order=(1, 0))), 1)
    s = 0.8
    for b in (0.0, 1.5, -2.0):
        z = torch.tensor([[s + b, 0.0], [-s + b, 0.0]])
        (pooled,) = pool_orders(enc, z)
        expected = (torch.log_softmax(z[0], 0) + torch.log_softmax(z[1].flip(0), 0)) / 2
        torch.testing.assert_close(pooled, expected, rtol=0, atol=1e-6)
        p_yes = torch.softmax(pooled, 0)[0].item()
        assert math.isclose(p_yes, 1 / (1 + math.exp(-s)), rel_tol=0, abs_tol=1e-6)   # sigmoid(s): b is gone


@pytest.mark.parametrize("readout", ["pointer", "lm"])
def test_twin_answer_is_the_pool_of_the_question_and_its_twin_asked_alone(readout):
    """The pooled answer equals the one computed by hand from two twin-free passes: the question, and its twin
    asked as a question of its own (the same tokens, another request)."""
    eng = make_engine("llama", readout, abstain=True, negation_twins=1)
    base = make_engine("llama", readout, abstain=True)
    twin_text = NEGATION_TWIN_FRAMES[0].format(q=PLAIN)
    got = eng.decide(plain_request(PLAIN))["answers"]["q0"]
    logits, abstain = base.question_outputs([base.encode(validate_request(plain_request(PLAIN, twin_text)))])
    zq, zt = logits[0]
    pooled = (torch.log_softmax(zq, 0) + torch.log_softmax(zt.flip(0), 0)) / 2
    assert abs(got["noul"] - torch.softmax(pooled, 0)[0].item()) <= 1e-5
    a = (abstain[0][0] + abstain[0][1]) / 2
    assert abs(got["x_abstain"] - base.abstain_probability(a)) <= 1e-5
    assert abs(got["noul"] - base.decide(plain_request(PLAIN))["answers"]["q0"]["noul"]) > 1e-4  # it does move


@pytest.mark.parametrize("readout", ["pointer", "lm"])
def test_packed_equals_separate_with_twins_and_the_jev_fields_keep_their_shape(readout):
    eng = make_engine("qwen2", readout, abstain=True, negation_twins=3)
    req = {**REQUEST, "questions": {**REQUEST["questions"], "rain": {"type": "noul", "instructions": "Did it rain?"}}}
    packed, separate = eng.decide(req), eng.decide(req, mode="separate")
    for qid, a in packed["answers"].items():
        b = separate["answers"][qid]
        assert a.keys() == b.keys()
        pa, pb = a.get("probabilities") or {"noul": a["noul"]}, b.get("probabilities") or {"noul": b["noul"]}
        assert max(abs(pa[k] - pb[k]) for k in pa) <= 1e-5, qid
        assert abs(a["x_abstain"] - b["x_abstain"]) <= 1e-5, qid
    plain = make_engine("qwen2", readout, abstain=True).decide(req)
    assert {q: a.keys() for q, a in packed["answers"].items()} == {q: a.keys() for q, a in plain["answers"].items()}
    for qid in ("urgent", "team", "anger"):              # no twin: the same answer (another packing: to 1e-5)
        a, b = packed["answers"][qid], plain["answers"][qid]
        pa, pb = a.get("probabilities") or {"noul": a["noul"]}, b.get("probabilities") or {"noul": b["noul"]}
        assert max(abs(pa[k] - pb[k]) for k in pa) <= 1e-5, qid
    assert abs(packed["answers"]["rain"]["noul"] - plain["answers"]["rain"]["noul"]) > 1e-4
    assert packed["usage"]["input_tokens"] > plain["usage"]["input_tokens"]


def test_state_cache_with_twins_equals_the_packed_pass():
    cached = make_engine("llama", negation_twins=2, state_cache_mb=64)
    fresh = make_engine("llama", negation_twins=2)
    req = plain_request(PLAIN, "Was the disk full?")
    for _ in range(2):                                   # a miss, then a hit
        a, b = cached.decide(req)["answers"], fresh.decide(req)["answers"]
        assert all(abs(a[q]["noul"] - b[q]["noul"]) <= 1e-5 for q in a)


def test_the_manifest_sets_the_default_and_a_setting_overrides_it(tmp_path):
    tiny = make_engine("qwen2", "pointer")
    backbone = tmp_path / "backbone"
    tiny.model.save_pretrained(backbone)
    tiny.encoder.tokenizer.save_pretrained(backbone)
    art = save_decision_model(tmp_path / "model", backbone=str(backbone), model=tiny.model,
                              tokenizer=tiny.encoder.tokenizer, head=tiny.head, extra={"negation_twins": 2})
    assert Engine.from_pretrained(art, threads=1).negation_twins == 2
    assert "2 negation twins" in Engine.from_pretrained(art, threads=1).describe()
    assert Engine.from_pretrained(art, threads=1, negation_twins=0).negation_twins == 0
    manifest = json.loads((art / "kevlike.json").read_text())
    (art / "kevlike.json").write_text(json.dumps({**manifest, "negation_twins": 9}))
    with pytest.raises(ValueError, match=r"kevlike.json field 'negation_twins' must be an integer from 0 to 4, got 9 "
                                         r"\(fix the file, or override it with --negation-twins\)"):
        Engine.from_pretrained(art, threads=1)


def test_negation_twins_limit_in_cli_and_engine(tmp_path, capsys):
    from kevlike import cli

    req = tmp_path / "r.json"
    req.write_text(json.dumps(plain_request(PLAIN)))
    for argv in (["decide", str(req)], ["serve"], ["eval"], ["calibrate", str(tmp_path)], ["probes"]):
        assert cli.main([*argv, "--negation-twins", "5"]) == 2, argv
        assert capsys.readouterr().err == "kevlike: error: --negation-twins must be an integer from 0 to 4, got 5\n"
    assert cli.main(["eval", "--url", "http://127.0.0.1:9", "--negation-twins", "1"]) == 2
    assert "--negation-twins applies to local models only" in capsys.readouterr().err
    with pytest.raises(ValueError, match="negation_twins must be an integer from 0 to 4, got -1"):
        make_engine(negation_twins=-1)
    # a reading that would not be stored or used is refused (break-test 2026-12-07: accepted and ignored)
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}},
                                "gold": {"q": "true"}}) + "\n")
    assert cli.main(["calibrate", str(tmp_path), "--data", str(data), "--profile", "p", "--option-mode", "set",
                     "--negation-twins", "1"]) == 2
    assert capsys.readouterr().err == ("kevlike: error: --negation-twins: a profile is fitted and served with its "
                                       "model's own reading (its kevlike.json); calibrate without --profile stores a "
                                       "new reading with the temperatures\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "records.jsonl").write_text("")
    (run / "metrics.json").write_text("{}")
    assert cli.main(["eval", "--reuse", str(run), "--negation-twins", "1", "--option-orders", "2"]) == 2
    assert capsys.readouterr().err.startswith("kevlike: error: --option-orders and --negation-twins: --reuse "
                                              "re-scores the earlier run's logits, read as that run read them")


def test_a_twin_over_the_context_is_named_as_the_twin():
    """Break-test 2026-12-07: a question that fits alone but whose twin (a few tokens longer) does not was refused
    as "this question's branch (N tokens)", N the twin's: a user could not tell --negation-twins caused it."""
    from kevlike.request.schema import Limits, RequestError

    req = validate_request(plain_request(PLAIN))
    enc = make_engine("llama", "lm", negation_twins=0).encode(req)
    S, own = len(enc.state_ids), enc.branches[0].span
    limits = Limits(max_branch_context=S + own)              # the question alone fits exactly
    make_engine("llama", "lm", negation_twins=0, limits=limits).encode(req)
    with pytest.raises(RequestError) as e:
        make_engine("llama", "lm", negation_twins=2, limits=limits).encode(req)
    (err,) = e.value.errors
    assert e.value.status == 413 and err["loc"] == ["body", "questions", "q0"]
    longest = max(b.span for b in make_engine("llama", "lm", negation_twins=2).encode(req).branches)
    assert err["msg"] == (f"state ({S} tokens) + this question's negation twin (negation_twins 2; the question alone "
                          f"is {own} tokens) ({longest} tokens) = {S + longest} tokens; the limit is {S + own} (the "
                          f"backbone's context)")
