"""Calibration profiles that cannot hurt (issue 32): every temperature table is checked (finite, 0.01 to 100,
known types and buckets), a bad profile file is refused at load with one line naming the file and the field
(server start, decide), `decide` prints strict JSON only, and a profile fitted on a small file falls back to the
model's own temperatures, not to T = 1."""

import json
import math

import pytest

from kevlike.model.temperatures import ProfileError, TemperatureTable, read_temperatures

from tiny import REQUEST, make_engine

GOOD = {"source": "hand-made", "by_type": {"noul": 0.8}, "by_bucket": [{"type": "choice", "bucket": "3-5",
                                                                       "temperature": 1.5}]}


@pytest.mark.parametrize("by_type, by_bucket, match", [
    ({"noul": -1.0}, {}, r"by_type\.noul: temperature must be a finite number from 0\.01 to 100, got -1\.0"),
    ({"noul": 0}, {}, r"by_type\.noul: .* got 0$"),
    ({"noul": "1.0"}, {}, r"by_type\.noul: .* got '1\.0'"),
    ({"noul": True}, {}, r"by_type\.noul: .* got True"),
    ({"noul": math.nan}, {}, r"by_type\.noul: .* got nan"),
    ({"score": math.inf}, {}, r"by_type\.score: .* got inf"),
    ({"score": 1e-300}, {}, r"by_type\.score: .* got 1e-300"),        # z / T would overflow to inf, then NaN
    ({"yesno": 1.0}, {}, r"by_type\.yesno: unknown question type \(known: noul, choice, score, choice:set, abstain\)"),
    ({}, {("choice", "3-5"): -2.0}, r"by_bucket\[choice/3-5\]: temperature must be .* got -2\.0"),
    ({}, {("choice", "7"): 1.0}, r"by_bucket\[choice/7\]: unknown bucket \(known: 2, 3-5, 6-20, 21-255, 256\+\)"),
])
def test_a_table_refuses_what_cannot_be_served(by_type, by_bucket, match):
    with pytest.raises(ProfileError, match=match):
        TemperatureTable(by_bucket=by_bucket, by_type=by_type)


@pytest.mark.parametrize("text, match", [
    (json.dumps({**GOOD, "by_type": {"noul": -1}}), r"by_type\.noul: temperature must be a finite number from 0\.01 "
                                                    r"to 100, got -1$"),
    (json.dumps({**GOOD, "by_type": {"noul": 0}}), r"by_type\.noul: .* got 0$"),
    (json.dumps({**GOOD, "by_type": {"noul": "x"}}), r"by_type\.noul: .* got 'x'$"),
    ('{"source": "s", "by_type": {"noul": NaN}, "by_bucket": []}', r": by_type\.noul: temperature must be a finite number .* got nan$"),
    ('{"source": "s", "by_type": {"noul": Infinity}, "by_bucket": []}', r": by_type\.noul: .* got inf$"),
    (json.dumps({k: v for k, v in GOOD.items() if k != "by_bucket"}), r": by_bucket: required field missing$"),
    (json.dumps({**GOOD, "by_types": {}}), r": by_types: unknown field \(known: format, source, by_type, by_bucket, "
                                           r"abstain_bias, score_readout, fit\)$"),
    (json.dumps({**GOOD, "format": 2}), r": format: unsupported calibration-file format 2 \(this version reads 1\)$"),
    (json.dumps({**GOOD, "by_bucket": [{"type": "choice", "bucket": "3-5"}]}),
     r": by_bucket\[0\]: must be an object with exactly type, bucket and temperature$"),
    (json.dumps({**GOOD, "by_bucket": [{"type": "choice", "bucket": "3-5", "temperature": -3}]}),
     r": by_bucket\[choice/3-5\]: temperature must be .* got -3$"),
    ("{not json", r": not valid JSON: "),
    ("[1.0]", r": must be a JSON object with by_type and by_bucket, got list$"),
    ("[" * 100_000 + "]" * 100_000, r": not a calibration file: its JSON is nested too deeply$"),    # a RecursionError
    ('{"source": "s", "by_type": {"noul": ' + "9" * 5001 + '}, "by_bucket": []}',               # int digits limit
     r": by_type\.noul: temperature must be a finite number .* got inf$"),
])
def test_a_bad_profile_file_is_one_line_naming_the_file_and_the_field(tmp_path, text, match):
    path = tmp_path / "ops.json"
    path.write_text(text)
    with pytest.raises(ProfileError, match=match) as e:
        read_temperatures(path)
    assert str(e.value).startswith(f"{path}: ") and "\n" not in str(e.value)


def test_a_profile_written_before_the_format_field_still_loads(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"source": "old", "by_type": {"noul": 0.8}, "by_bucket": [], "fit": {"n": [1, 2]}}))
    table = read_temperatures(path)
    assert table.lookup("noul", 2) == 0.8 and table.source == "old"
    path.write_text(json.dumps({**GOOD, "format": 1}))
    assert read_temperatures(path).lookup("choice", 4) == 1.5
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({**GOOD, "format": 1}).encode())       # a BOM, as labelled files
    assert read_temperatures(path).lookup("choice", 4) == 1.5
    assert TemperatureTable.from_json(TemperatureTable(by_type={"score": 2.0}).to_json()).lookup("score", 3) == 2.0
    path.write_text(json.dumps({"by_type": {"noul": 0.8}, "by_bucket": []}))      # before: a KeyError at start-up
    with pytest.raises(ProfileError, match=rf"^{path}: source: required field missing$"):
        read_temperatures(path)


def _artifact(tmp_path, temperatures=None):
    from kevlike.model.modeldir import save_decision_model

    tiny = make_engine("qwen2")
    backbone = tmp_path / "backbone"
    tiny.model.save_pretrained(backbone)
    tiny.encoder.tokenizer.save_pretrained(backbone)
    return save_decision_model(tmp_path / "m", backbone=str(backbone), model=tiny.model,
                               tokenizer=tiny.encoder.tokenizer, head=tiny.head, temperatures=temperatures)


def _bad_profile(art, name="neg"):
    (art / "profiles").mkdir(exist_ok=True)
    path = art / "profiles" / f"{name}.json"
    path.write_text(json.dumps({**GOOD, "by_type": {"noul": -1.0}}))
    return path


def test_a_bad_profile_refuses_serve_and_decide_with_one_line(tmp_path, capsys):
    from kevlike import cli

    art = _artifact(tmp_path)
    path = _bad_profile(art)
    req = tmp_path / "r.json"
    req.write_text(json.dumps(REQUEST))
    capsys.readouterr()                                                  # the artifact's save progress
    # decide: refused before the model loads (before: served with T = -1, every yes/no flipped)
    assert cli.main(["decide", str(req), "--model", str(art), "--profile", "neg"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1
    assert err == (f"kevlike: error: calibration profile 'neg' refused: {path}: by_type.noul: temperature must be a "
                   f"finite number from 0.01 to 100, got -1.0\n")
    # serve: the start is refused (exit 2, one line), whichever profile is bad (a subprocess with a deadline:
    # before, it served)
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "kevlike", "serve", "--model", str(art), "--port", "0", "--log-level",
                        "error"], capture_output=True, text=True, timeout=300)
    lines = [x for x in r.stderr.splitlines() if x.startswith("kevlike: error:")]
    assert r.returncode == 2 and lines == [f"kevlike: error: calibration profile 'neg' of model {art} refused (fix or remove the file): "
                     f"{path}: by_type.noul: temperature must be a finite number from 0.01 to 100, got -1.0"]
    # the model itself, and its good profiles, are unaffected
    path.unlink()
    assert cli.main(["decide", str(req), "--model", str(art), "--compact"]) == 0
    assert json.loads(capsys.readouterr().out)["model"] == str(art)


def test_decide_prints_strict_json_only(tmp_path, capsys, monkeypatch):
    from kevlike import cli
    from kevlike.model.engine import Engine

    art = _artifact(tmp_path)
    req = tmp_path / "r.json"
    req.write_text(json.dumps(REQUEST))
    monkeypatch.setattr(Engine, "decide", lambda self, request, mode="packed": {"answers": {"q": {"noul": math.nan}}})
    capsys.readouterr()
    assert cli.main(["decide", str(req), "--model", str(art)]) == 1
    out, err = capsys.readouterr()
    assert out == ""                                                     # before: `NaN` printed, exit 0
    assert err.startswith("kevlike: error: the answer holds a number that is not finite") and err.count("\n") == 1


def test_small_file_profile_falls_back_to_the_models_own_temperatures(tmp_path):
    from kevlike import Engine
    from kevlike.eval.owndata import fit_profile

    own = TemperatureTable(by_type={"noul": 0.7, "score": 1.6, "choice": 1.3},
                           by_bucket={("score", "3-5"): 1.4, ("noul", "2"): 0.75}, source="model's own fit")
    art = _artifact(tmp_path, own)
    # 100 noul questions (enough: fitted, optimum T = 2 / ln 3); 10 score and 10 choice questions (under 50: fall back)
    recs = [{"type": "noul", "logits": [2.0, 0.0], "gold": 0 if i % 4 else 1} for i in range(100)]
    recs += [{"type": "score", "logits": [1.0, 0.0, -1.0], "gold": i % 3} for i in range(10)]
    recs += [{"type": "choice", "logits": [0.5, 0.0, 0.0, 0.0], "gold": i % 4} for i in range(10)]
    path, fit = fit_profile(str(art), "a small file", "small", min_count=50, records=recs, quiet=True)
    t = Engine.from_pretrained(art, profile="small").temperatures
    assert t.lookup("noul", 2) == pytest.approx(2 / math.log(3), rel=1e-4)   # fitted: the model's noul/2 bucket dropped
    assert t.lookup("score", 3) == 1.4 and t.lookup("score", 7) == 1.6      # before: 1.0 (T = 1) for both
    assert t.lookup("choice", 4) == 1.3 and t.lookup("choice", 30) == 1.3
    assert fit["types"]["score"]["fallback"] == "the model's own temperatures (too few questions or no errors)"
    assert fit["buckets"]["score/3-5"]["fallback"] == "the model's own temperature (T = 1.4)"
    assert "elsewhere the model's own temperatures" in t.source
    assert Engine.from_pretrained(art).temperatures.lookup("score", 3) == 1.4  # the model's own: untouched


def test_python_loads_check_the_file_too_and_files_are_written_as_strict_json(tmp_path):
    """``Engine.from_pretrained(profile=...)`` and a model's own ``calibration.json`` go through
    :func:`read_temperatures` (before: the table's error without the file's name, or a KeyError); profiles and
    calibration files are written with ``allow_nan=False`` (a NaN in the fit report is written as null)."""
    from kevlike import Engine
    from kevlike.model.modeldir import load_temperatures, save_calibration, save_profile

    art = _artifact(tmp_path)
    path = _bad_profile(art)
    with pytest.raises(ProfileError) as e:
        Engine.from_pretrained(art, profile="neg")
    assert str(e.value) == f"{path}: by_type.noul: temperature must be a finite number from 0.01 to 100, got -1.0"
    (art / "profiles" / "old.json").write_text(json.dumps({"by_type": {}, "by_bucket": []}))
    with pytest.raises(ProfileError, match=rf"^{art / 'profiles' / 'old.json'}: source: required field missing$"):
        load_temperatures(art / "profiles" / "old.json")                 # before: KeyError: 'source'
    table = TemperatureTable(by_type={"noul": 0.8}, by_bucket={("choice", "3-5"): 1.5}, source="fit")
    report = {"ece_before": math.nan, "n": 3, "types": {"noul": {"nll": [math.inf, 0.25]}}}
    written = save_profile(art, str(art), "ok", table, report)
    text = written.read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text)["fit"] == {"ece_before": None, "n": 3, "types": {"noul": {"nll": [None, 0.25]}}}
    back = Engine.from_pretrained(art, profile="ok").temperatures
    assert (back.lookup("noul", 2), back.lookup("choice", 4), back.source) == (0.8, 1.5, "fit")
    save_calibration(art, table, report)
    assert load_temperatures(art).by_bucket == {("choice", "3-5"): 1.5}
    (art / "calibration.json").write_text(json.dumps({**GOOD, "by_type": {"noul": math.nan}}))
    with pytest.raises(ProfileError, match=rf"^{art / 'calibration.json'}: by_type\.noul: .* got nan$"):
        Engine.from_pretrained(art)


def test_a_profile_of_one_type_leaves_the_others_at_the_models_own_never_at_t_1(tmp_path):
    """A hand-written profile naming only noul used to serve every other type at T = 1, x_abstain without its Platt
    bias and scores through softmax (break-test 2026-12-07: x_abstain 0.109 -> 0.012 on examples/review.json)."""
    from kevlike.model.modeldir import load_profile
    from kevlike.model.temperatures import TemperatureTable

    own = TemperatureTable(by_type={"noul": 1.3, "choice": 0.9, "choice:set": 0.8, "score": 1.1, "abstain": 2.0},
                           by_bucket={("noul", "2"): 1.4, ("choice", "3-5"): 0.7}, abstain_bias=-1.5,
                           score_readout="normal", source="own")
    path = tmp_path / "p.json"
    path.write_text(json.dumps({"source": "only noul", "by_type": {"noul": 1.087},
                                "by_bucket": [{"type": "noul", "bucket": "2", "temperature": 1.087}]}))
    got = load_profile(path, own)
    assert got.by_type == {"noul": 1.087, "choice": 0.9, "choice:set": 0.8, "score": 1.1, "abstain": 2.0}
    assert got.by_bucket == {("noul", "2"): 1.087, ("choice", "3-5"): 0.7}
    assert (got.abstain_bias, got.score_readout, got.source) == (-1.5, "normal", "only noul")
    # a type the profile names is its own, with its own bias and readout, and choice covers choice:set
    path.write_text(json.dumps({"source": "s", "by_type": {"choice": 0.5, "score": 1.0, "abstain": 1.0},
                                "by_bucket": []}))
    got = load_profile(path, own)
    assert got.by_type == {"noul": 1.3, "choice": 0.5, "score": 1.0, "abstain": 1.0}
    assert got.by_bucket == {("noul", "2"): 1.4}
    assert (got.abstain_bias, got.score_readout) == (0.0, "softmax")
    path.write_text(json.dumps({"source": "s", "by_type": {}, "by_bucket": [], "abstain_bias": 0.5,
                                "score_readout": "softmax"}))
    got = load_profile(path, own)
    assert got.by_type == own.by_type and (got.abstain_bias, got.score_readout) == (0.5, "softmax")
