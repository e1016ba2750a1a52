"""A user's own labelled data (kevlike/data/labelled.py, kevlike/eval/owndata.py): the file format and its errors,
the threshold table by hand, a temperature profile whose optimum is known, and the profile served
by name (Engine, decide, server)."""

import json
import math

import pytest

from kevlike import Engine
from kevlike.model.modeldir import list_profiles, profile_path, save_decision_model
from kevlike.request.schema import validate_request
from kevlike.data.labelled import LabelledDataError, answer_target, read_labelled

from tiny import REQUEST, make_engine

REQ = {"state": "Customer: I was charged twice.", "questions": {
    "urgent": {"type": "noul", "instructions": "Is it urgent?"},
    "team": {"type": "choice", "instructions": "Which team?", "criteria": {"billing": None, "tech": None, "sales": None}},
    "anger": {"type": "score", "instructions": "How angry?", "criteria": ["calm", "upset", "furious"]}}}


def _write(path, lines):
    path.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines) + "\n")
    return path


def test_answers_of_every_type_and_soft_labels():
    q = {x.id: x for x in validate_request(REQ).questions}
    assert answer_target(q["urgent"], True) == [1.0, 0.0] and answer_target(q["urgent"], "false") == [0.0, 1.0]
    assert answer_target(q["team"], "tech") == [0.0, 1.0, 0.0]
    assert answer_target(q["anger"], 2) == [0.0, 0.0, 1.0] and answer_target(q["anger"], "0") == [1.0, 0.0, 0.0]
    assert answer_target(q["team"], {"billing": 0.7, "sales": 0.3}) == pytest.approx([0.7, 0.0, 0.3])
    for qid, bad, msg in [("urgent", 1, "true or false"), ("team", "legal", "not an option key"),
                          ("anger", 3, "outside 0-2"), ("anger", True, "level index"),
                          ("anger", "01", "written without leading zeros, got \"01\""),
                          ("anger", "9" * 5000, "level 99999999999999999999… is outside 0-2"),   # not int()'s limit
                          ("anger", "²", "level index 0-2 \\(an integer"), ("anger", "-3", "level -3 is outside"),
                          ("team", {"billing": 0.5}, "sum to 0.5"), ("team", {"billing": -0.1, "tech": 1.1}, ">= 0"),
                          ("urgent", {"yes": 1.0}, "not an answer")]:
        with pytest.raises(ValueError, match=msg):
            answer_target(q[qid], bad)


def test_bad_lines_name_file_line_and_field(tmp_path):
    good = {"request": REQ, "gold": {"urgent": True}}
    cases = [
        ("{not json", "(line): not JSON"),
        ({"gold": {}}, "request: missing"),
        ({"request": REQ, "gold": {"nope": True}}, "gold.nope: no question 'nope'"),
        ({"request": REQ, "gold": {"team": "legal"}}, 'gold.team: "legal" is not an option key'),
        ({"request": REQ, "gold": {"urgent": True}, "weight": 0}, "weight: must be a number > 0"),
        ({"request": REQ, "gold": {"urgent": True}, "labels": 1}, "labels: unknown field"),
        ({"request": {**REQ, "questions": {}}, "gold": {}}, "request.questions:"),
    ]
    for bad, msg in cases:
        p = _write(tmp_path / "d.jsonl", [good, "", bad])
        with pytest.raises(LabelledDataError) as e:
            read_labelled(p)
        assert str(e.value).startswith(f"{p}:3: ") and msg in str(e.value), str(e.value)
    items = read_labelled(_write(tmp_path / "ok.jsonl", [good, {"request": REQ, "gold": {}}]))
    assert [it.line for it in items] == [1, 2] and items[1].gold == {}       # partial labels: kept, score nothing
    none = _write(tmp_path / "none.jsonl", [{"request": REQ}])
    with pytest.raises(LabelledDataError) as e:
        read_labelled(none)
    assert str(e.value) == f"{none}: gold: the file has no labelled question"     # the whole file: no line number
    (tmp_path / "empty.jsonl").write_text("\n  \n")
    with pytest.raises(LabelledDataError) as e:
        read_labelled(tmp_path / "empty.jsonl")
    assert str(e.value) == f"{tmp_path / 'empty.jsonl'}: gold: the file is empty (one JSON request per line)"
    with pytest.raises(LabelledDataError, match=r"^/dev/null: \(file\): is not a regular file$"):   # not "does not exist"
        read_labelled("/dev/null")


def test_threshold_table_by_hand():
    from kevlike.eval.owndata import read_costs, threshold_table

    # P(true) and truth for 4 decisions; κ_FP = 1, κ_FN = 3: act iff p > 1/4
    recs = [{"type": "noul", "question": "q", "probs": [p, 1 - p], "target": [float(y), 1.0 - y]}
            for p, y in [(0.9, 1), (0.3, 0), (0.2, 1), (0.6, 0)]]
    t = threshold_table(recs, {"default": {"false_positive": 1.0, "false_negative": 3.0}, "questions": {}})["q"]
    assert t["threshold"] == 0.25
    assert t["cost_at_threshold"] == pytest.approx((1 + 3 + 1) / 4)       # acts on 0.9, 0.3 (FP), 0.6 (FP); misses 0.2 (FN)
    assert t["cost_always"] == pytest.approx(2 / 4) and t["cost_never"] == pytest.approx(6 / 4)
    assert t["saving_vs_best_trivial"] == pytest.approx(0.5 - 1.25)
    assert read_costs(None)["default"] == {"false_positive": 1.0, "false_negative": 1.0}


def _artifact(tmp_path):
    tiny = make_engine("qwen2")
    backbone = tmp_path / "backbone"
    tiny.model.save_pretrained(backbone)
    tiny.encoder.tokenizer.save_pretrained(backbone)
    return save_decision_model(tmp_path / "m", backbone=str(backbone), model=tiny.model,
                               tokenizer=tiny.encoder.tokenizer, head=tiny.head)


def test_profile_fit_with_a_known_optimum_is_served_by_name(tmp_path, capsys):
    from kevlike import cli
    from kevlike.eval.owndata import fit_profile

    art = _artifact(tmp_path)
    # 100 noul questions with logits (2, 0), right 3 times in 4: the NLL optimum is sigmoid(2 / T) = 3/4,
    # T = 2 / ln 3
    recs = [{"type": "noul", "logits": [2.0, 0.0], "gold": 0 if i % 4 else 1} for i in range(100)]
    path, fit = fit_profile(str(art), "hand-made records", "ops", min_count=50, records=recs, quiet=True)
    assert path == art / "profiles" / "ops.json" and list_profiles(art, str(art)) == ["ops"]
    assert fit["types"]["noul"]["temperature"] == pytest.approx(2 / math.log(3), rel=1e-4)
    eng = Engine.from_pretrained(art, profile="ops")
    assert eng.name == f"{art}@ops" and eng.temperatures.lookup("noul", 2) == pytest.approx(2 / math.log(3), rel=1e-4)
    assert Engine.from_pretrained(art).temperatures.lookup("noul", 2) == 1.0          # the model's own: untouched
    with pytest.raises(ValueError, match="no calibration profile 'nope'.*profiles: ops"):
        Engine.from_pretrained(art, profile="nope")
    with pytest.raises(ValueError, match="profile name must be"):
        Engine.from_pretrained(art, profile="../x")
    req = tmp_path / "r.json"
    req.write_text(json.dumps(REQUEST))
    assert cli.main(["decide", str(req), "--model", str(art), "--profile", "ops", "--compact"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == f"{art}@ops"


def test_profile_fits_x_abstain_platt_scaling_with_a_known_optimum(tmp_path, capsys):
    """Labelled "cannot tell" golds fit x_abstain's temperature and bias in a profile: abstention logit +2 is
    "cannot tell" 9 times in 10 and -2 half the time, so the optimum solves sigmoid(2/T + b) = 0.9 and
    sigmoid(-2/T + b) = 0.5: b = ln 3, T = 2 / ln 3. The fit is printed on one line (it crashed with a KeyError)."""
    from kevlike.eval.owndata import fit_profile

    art = _artifact(tmp_path)
    recs = [{"type": "noul", "logits": [2.0, 0.0], "gold": 0, "abstain_logit": a,
             **({"cannot_tell": True} if (i % 10 < 9 if a > 0 else i % 2) else {})}
            for a in (2.0, -2.0) for i in range(100)]
    path, fit = fit_profile(str(art), "hand-made records", "ops", min_count=50, records=recs, quiet=True)
    assert fit["types"]["abstain"]["temperature"] == pytest.approx(2 / math.log(3), rel=1e-4)
    assert fit["types"]["abstain"]["bias"] == pytest.approx(math.log(3), abs=1e-4)
    assert "abstain: n=200 cannot tell=140, NLL at T=1" in capsys.readouterr().err
    eng = Engine.from_pretrained(art, profile="ops")
    assert eng.abstain_probability(2.0) == pytest.approx(0.9, rel=1e-5)
    assert eng.abstain_probability(-2.0) == pytest.approx(0.5, rel=1e-5)
    # a profile fits on all of the user's questions, also those never "cannot tell" (their share is the user's)
    never = [{"source": "team", "type": "noul", "logits": [2.0, 0.0], "gold": 0, "abstain_logit": -6.0}] * 100
    _, fit = fit_profile(str(art), "hand-made records", "ops2", min_count=50, quiet=True,
                         records=[{**r, "source": "warranty"} for r in recs] + never)
    assert fit["types"]["abstain"]["n"] == 300 and fit["types"]["abstain"]["cannot_tell"] == 140


def test_shipped_model_profiles_live_under_kevlike_home(tmp_path, monkeypatch):
    import kevlike
    from pathlib import Path

    monkeypatch.setenv("KEVLIKE_HOME", str(tmp_path / "home"))
    shipped = Path(kevlike.__file__).parent / "models" / "default"
    assert profile_path(shipped, "kevlike-default", "ops") == tmp_path / "home" / "profiles" / "kevlike-default" / "ops.json"


def test_eval_and_calibrate_on_a_labelled_file(tmp_path, capsys):
    from kevlike import cli

    art = _artifact(tmp_path)
    lines = [{"request": REQ, "gold": {"urgent": i % 2 == 0, "team": ["billing", "tech", "sales"][i % 3], "anger": i % 3}}
             for i in range(6)] + [{"request": REQ, "gold": {"team": {"billing": 0.5, "tech": 0.5}}}]
    data = _write(tmp_path / "mine.jsonl", lines)
    costs = tmp_path / "costs.yaml"
    costs.write_text("questions:\n  urgent: {false_positive: 1, false_negative: 9}\n")
    assert cli.main(["eval", "--model", str(art), "--data", str(data), "--costs", str(costs), "--out", str(tmp_path),
                     "--quiet", "--dtype", "float32"]) == 0
    run = next(tmp_path.glob("eval-data-*"))
    # --quiet hides progress, never results: the tables and the run directory are printed
    out = capsys.readouterr()
    assert "| type | n | accuracy | NLL |" in out.out and "| noul | 6 |" in out.out and "| urgent | 6 |" in out.out
    assert f"run directory: {run}" in out.err
    m = json.loads((run / "metrics.json").read_text())
    assert m["per_type"]["noul"]["n"] == 6 and m["per_type"]["choice"]["n"] == 7 and m["per_type"]["score"]["n"] == 6
    assert set(m["per_question"]) == {"urgent", "team", "anger"}
    t = json.loads((run / "thresholds.json").read_text())["urgent"]
    assert t["threshold"] == pytest.approx(0.1) and t["n"] == 6
    assert len([json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]) == 19
    assert cli.main(["calibrate", str(art), "--data", str(data), "--profile", "mine", "--min-count", "2", "--quiet",
                     "--dtype", "bfloat16"]) == 0
    err = capsys.readouterr().err                            # the fit, printed with --quiet too
    assert "noul: n=6 errors=" in err and f"profile 'mine': {art / 'profiles' / 'mine.json'}" in err
    assert list_profiles(art, str(art)) == ["mine"]
    assert json.loads((art / "profiles" / "mine.json").read_text())["fit"]["dtype"] == "bfloat16 (requested)"
    assert cli.main(["calibrate", str(art), "--profile", "x"]) == 2
    assert "give both --data FILE.jsonl and --profile NAME" in capsys.readouterr().err
    bad = _write(tmp_path / "bad.jsonl", [lines[0], {"request": REQ, "gold": {"urgent": "maybe"}}])
    assert cli.main(["eval", "--model", str(art), "--data", str(bad)]) == 2
    assert f"{bad}:2: gold.urgent: a noul answer is true or false" in capsys.readouterr().err
    assert cli.main(["eval", "--model", str(art), "--data", str(data), "--quantize", "int8"]) == 2
    assert "--quantize applies when eval runs a local model on a suite" in capsys.readouterr().err
    # --dtype: the precision is chosen, recorded, and answers stay close to float32's
    assert cli.main(["eval", "--model", str(art), "--data", str(data), "--dtype", "bfloat16", "--out",
                     str(tmp_path / "bf16"), "--quiet"]) == 0
    bf = next((tmp_path / "bf16").glob("eval-data-*"))
    assert json.loads((bf / "metrics.json").read_text())["meta"]["dtype"] == "bfloat16"
    assert json.loads((run / "metrics.json").read_text())["meta"]["dtype"] == "float32"
    p32 = [json.loads(x)["probs"] for x in (run / "records.jsonl").read_text().splitlines()]
    p16 = [json.loads(x)["probs"] for x in (bf / "records.jsonl").read_text().splitlines()]
    assert len(p16) == len(p32) == 19
    assert max(abs(a - b) for x, y in zip(p32, p16) for a, b in zip(x, y)) < 0.05
    assert cli.main(["eval", "--model", str(art), "--reuse", str(run), "--dtype", "float32"]) == 2
    assert "--dtype applies when eval runs a local model (not with --url or --reuse)" in capsys.readouterr().err
    assert cli.main(["calibrate", str(art), "--records", str(run / "records.jsonl"), "--dtype", "float32"]) == 2
    assert "--dtype applies when calibrate computes the logits" in capsys.readouterr().err


def test_export_writes_a_labelled_file_that_reads_back(tmp_path, capsys):
    """`kevlike export`: a built-in split as labelled lines (the answers as a user writes them), read back by
    the own-data reader; an existing --out and an unknown task are refused with exit 2."""
    from kevlike.cli import main
    from kevlike.data.labelled import read_labelled
    from kevlike.data.tasks import eval_examples

    out = tmp_path / "phishing.jsonl"
    assert main(["export", "sys1_phishing_email", "--split", "test", "--n", "3", "--seed", "1", "--out", str(out)]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    examples = eval_examples("sys1_phishing_email", "test", 3, seed=1)
    assert [x["request"]["state"] for x in lines] == [e.request["state"] for e in examples]
    for line, ex in zip(lines, examples):
        for qid, q in ex.request["questions"].items():
            want = {"noul": lambda k: k == "true", "score": int}.get(q["type"], lambda k: k)(ex.gold[qid])
            assert line["gold"][qid] == want
    assert len(read_labelled(out)) == 3
    assert main(["export", "sys1_phishing_email", "--out", str(out)]) == 2
    assert main(["export", "no_such_task", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "exists; choose a new file" in capsys.readouterr().err


def test_a_profile_fit_on_recorded_logits_loads_no_weights(tmp_path, monkeypatch):
    """``kevlike recalibrate`` fits on the logits a server recorded: only the model's directory is read, so a model
    whose backbone is gone (or, for a registered name, not fetched) is refitted without loading or downloading one
    (it loaded the whole engine: a 1.1 GB download for kevlike-reader on a machine that only holds the store)."""
    import shutil

    from kevlike.eval.owndata import fit_profile
    from kevlike.model import backbones, engine

    art = _artifact(tmp_path)
    shutil.rmtree(tmp_path / "backbone")                     # the backbone the manifest names is not there

    def no_load(*a, **k):
        raise AssertionError("fit on recorded logits loaded a model")

    monkeypatch.setattr(engine.Engine, "from_pretrained", no_load)
    monkeypatch.setattr(backbones, "fetch_backbone", no_load)
    recs = [{"type": "noul", "logits": [2.0, 0.0], "gold": 0 if i % 4 else 1} for i in range(100)]
    path, fit = fit_profile(str(art), "hand-made records", "ops", min_count=50, records=recs, quiet=True)
    assert path == art / "profiles" / "ops.json" and "dtype" not in fit
    assert fit["types"]["noul"]["temperature"] == pytest.approx(2 / math.log(3), rel=1e-4)
    # a registered name whose backbone is not fetched resolves to its directory without fetching it
    monkeypatch.setattr(backbones, "is_fetched", lambda name: False)
    resolved = backbones.resolve_model("kevlike-reader", backbone=False)
    assert resolved.artifact_dir is not None and resolved.backbone_dir is None
    with pytest.raises(AssertionError, match="loaded a model"):
        backbones.resolve_model("kevlike-reader")
