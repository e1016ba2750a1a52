"""Set mode (the pointer readout with every choice option in its own sub-branch): exact encoding,
mask and positions; an option's logit does not depend on its siblings; packed == separate == cached;
the mode is validated and declared by the model directory."""

import json
import math

import pytest
import torch

from kevlike import Engine
from kevlike.model.modeldir import save_decision_model
from kevlike.model.temperatures import TemperatureTable
from kevlike.model.kernels.masks import dense_mask
from kevlike.request.pack import pack
from kevlike.request.schema import validate_request

from tiny import REQUEST, make_engine, max_dp


def _choice(options: dict, state: str = "Customer: I was charged twice for my March invoice.") -> dict:
    return {"state": state, "questions": {"team": {"type": "choice", "instructions": "Which team should handle this?",
                                                   "criteria": options}}}


def _logits(eng, request) -> torch.Tensor:
    return eng.question_logits([eng.encode(validate_request(request))])[0][0]


def test_set_encoding_positions_and_mask():
    eng = make_engine("llama", option_mode="set")
    e = eng.encoder
    req = validate_request(_choice({"billing": "invoices", "sales": None, "tech": None}))
    enc = eng.encode(req)
    (br,) = enc.branches
    assert br.ids[0] == e.q_id and br.ids[-1] == e.decide_id and br.decide == len(br.ids) - 1
    assert br.options == () and len(br.answers) == 3
    for a, text in zip(br.answers, ["billing: invoices", "sales", "tech"]):
        assert a[0] == e.opt_id and a[-1] == e.end_opt_id
        assert list(a[1:-1]) == e.tokenizer(" " + text, add_special_tokens=False)["input_ids"]
    batch = pack([enc], e.pad_id)
    S, n = len(enc.state_ids), len(br.ids)
    starts = batch.option_index[0, 0].tolist()
    for o, (s, a) in enumerate(zip(starts, br.answers)):
        assert batch.position_ids[0, s:s + len(a)].tolist() == list(range(S + n, S + n + len(a)))  # same start
        assert batch.option_ids[0, s:s + len(a)].tolist() == [o + 1] * len(a)
        assert batch.option_end[0, 0, o] - 1 == s + len(a) - 1                   # read at its </opt>
    m = dense_mask(batch.segment_ids, option_ids=batch.option_ids)[0, 0]
    s0, s1 = starts[0], starts[1]
    last1 = s1 + len(br.answers[1]) - 1
    assert m[last1, :S + n].all()                                   # state, question, <decide>
    assert not m[last1, s0:s0 + len(br.answers[0])].any()           # never a sibling option
    assert m[last1, s1:last1 + 1].all()                             # itself, causally


def test_list_mode_unchanged_and_noul_score_stay_lists():
    lst, st = make_engine("llama"), make_engine("llama", option_mode="set")
    req = validate_request(REQUEST)
    a, b = lst.encode(req), st.encode(req)
    for qa, qb, q in zip(a.branches, b.branches, req.questions):
        if q.type == "choice":
            assert qb.answers and not qa.answers
        else:
            assert qa == qb
    assert a == lst.encoder.encode(req, "list") and b == lst.encoder.encode(req, "set")


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_an_options_logit_ignores_its_siblings(arch):
    eng = make_engine(arch, option_mode="set")
    tok = eng.encoder.tokenizer
    base = {"billing": "invoices, charges", "sales": None, "tech": None}
    swapped = {"billing": "invoices, charges", "sales": None, "fox": None}    # a sibling of equal length
    assert len(tok(" tech")["input_ids"]) == len(tok(" fox")["input_ids"])
    za, zb = _logits(eng, _choice(base)), _logits(eng, _choice(swapped))
    assert torch.equal(za[:2], zb[:2])                              # bit-identical for equal shapes
    assert za[2] != zb[2]
    # adding an option: log-odds between two remaining options move by float rounding only
    zc = _logits(eng, _choice({**base, "legal": "contracts and the law"}))
    assert abs(float((zc[0] - zc[1]) - (za[0] - za[1]))) <= 1e-5
    # reordering: same logits per key, same probabilities
    zr = _logits(eng, _choice({"tech": None, "billing": "invoices, charges", "sales": None}))
    assert torch.allclose(zr[[1, 2, 0]], za, atol=1e-5)
    pa = eng.decide(_choice(base))["answers"]["team"]["probabilities"]
    pr = eng.decide(_choice({"tech": None, "billing": "invoices, charges", "sales": None}))["answers"]["team"]["probabilities"]
    assert max(abs(pa[k] - pr[k]) for k in pa) <= 1e-6


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_set_mode_packed_equals_separate_and_cached(arch):
    eng = make_engine(arch, option_mode="set")
    cached = make_engine(arch, option_mode="set", state_cache_mb=64)
    packed, separate = eng.decide(REQUEST), eng.decide(REQUEST, mode="separate")
    for resp in (separate, cached.decide(REQUEST), cached.decide(REQUEST)):
        assert max_dp(packed, resp) <= 1e-5
    # set mode reads the choice question differently from list mode (a different template)
    listed = make_engine(arch).decide(REQUEST)["answers"]["team"]["probabilities"]
    assert max(abs(listed[k] - packed["answers"]["team"]["probabilities"][k]) for k in listed) > 1e-4


def test_option_mode_is_validated_and_declared(tmp_path):
    with pytest.raises(ValueError, match="option_mode must be one of list, set"):
        make_engine("llama", option_mode="bag")
    tiny = make_engine("qwen2")
    backbone = tmp_path / "backbone"
    tiny.model.save_pretrained(backbone)
    tiny.encoder.tokenizer.save_pretrained(backbone)
    art = save_decision_model(tmp_path / "m", backbone=str(backbone), model=tiny.model,
                              tokenizer=tiny.encoder.tokenizer, head=tiny.head)
    assert Engine.from_pretrained(art).option_mode == "list"
    with pytest.raises(ValueError, match="trained for option mode\\(s\\) list, not 'set'"):
        Engine.from_pretrained(art, option_mode="set")
    manifest = json.loads((art / "kevlike.json").read_text())
    (art / "kevlike.json").write_text(json.dumps({**manifest, "option_modes": ["list", "set"], "option_mode": "set"}))
    assert Engine.from_pretrained(art).option_mode == "set"
    assert Engine.from_pretrained(art, option_mode="list").option_mode == "list"


def test_set_mode_temperatures_fall_back_to_choice():
    t = TemperatureTable(by_type={"choice": 2.0, "choice:set": 0.5, "noul": 3.0})
    assert t.lookup("choice", 3, "set") == 0.5 and t.lookup("choice", 3) == 2.0
    assert t.lookup("noul", 2, "set") == 3.0
    assert TemperatureTable(by_type={"choice": 2.0}).lookup("choice", 3, "set") == 2.0
    eng = make_engine("llama", option_mode="set", temperatures=t)
    req = validate_request(_choice({"a": None, "b": None}))
    z = torch.tensor([1.0, 0.0])
    p = eng.probabilities(req, [z])[0]
    assert math.isclose(float(p[0]), 1 / (1 + math.exp(-2.0)), rel_tol=1e-6)     # T = 0.5


def _many(n: int, state: str = "The quick brown fox jumps over the lazy dog. " * 8) -> dict:
    return {"state": state, "questions": {
        "pick": {"type": "choice", "instructions": "Which team should handle this?",
                 "criteria": {f"team {i}": None for i in range(n)}},
        "fox": {"type": "noul", "instructions": "Is a fox mentioned?"}}}


def test_more_than_255_options_needs_the_limit_raised():
    from kevlike.request.schema import RequestError

    eng = make_engine("llama", option_mode="set")
    with pytest.raises(RequestError, match="it needs 2 to 255"):
        eng.decide(_many(300))


def test_5000_options_one_set_pass_and_shortlist_then_decide():
    from kevlike.request.schema import Limits

    big = Limits(max_options=5000)
    one = make_engine("llama", option_mode="set", limits=big)
    r1 = one.decide(_many(5000))
    p1 = r1["answers"]["pick"]["probabilities"]
    assert len(p1) == 5000 and abs(sum(p1.values()) - 1) < 1e-4 and "x_shortlist" not in r1
    # the same request over a token budget it does not fit in one pass: shortlist-then-decide
    tokens = r1["usage"]["input_tokens"]
    small = make_engine("llama", option_mode="set", limits=Limits(max_options=5000, max_request_tokens=tokens // 3))
    r2 = small.decide(_many(5000))
    assert r2["x_shortlist"] == {"pick": 64}
    p2 = r2["answers"]["pick"]["probabilities"]
    assert list(p2) == list(p1) and abs(sum(p2.values()) - 1) < 1e-4
    # set mode, T = 1: p1(shortlist) · softmax over the shortlist = p1, option by option
    assert max(abs(p1[k] - p2[k]) for k in p1) <= 1e-5
    assert abs(r1["answers"]["fox"]["noul"] - r2["answers"]["fox"]["noul"]) <= 1e-5
    # list mode: > 255 options always go through the shortlist; the top 64 by stage 1 are decided as a list
    lst = make_engine("llama", option_mode="set", limits=big)
    lst.option_mode, lst.encoder.option_mode = "list", "list"
    r3 = lst.decide(_many(1000))
    assert r3["x_shortlist"] == {"pick": 64}
    p3 = r3["answers"]["pick"]["probabilities"]
    assert len(p3) == 1000 and abs(sum(p3.values()) - 1) < 1e-4
    # options outside the shortlist keep their stage-1 (set-mode) probabilities
    ref = make_engine("llama", option_mode="set", limits=big).decide(_many(1000))["answers"]["pick"]["probabilities"]
    outside = sorted(ref, key=ref.get)[:900]
    assert max(abs(ref[k] - p3[k]) for k in outside) <= 1e-6
