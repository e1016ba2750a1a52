"""Metrics and temperature fitting against hand-computed values."""

import json
import math

import pytest
import torch

from kevlike.model.temperatures import TemperatureTable, fit_table, fit_temperature, nll_at
from kevlike.metrics import coverage_at, ece, summarize, summary


def rec(probs, gold, qtype="choice", source="s"):
    target = [1.0 if i == gold else 0.0 for i in range(len(probs))]
    return {"probs": probs, "gold": gold, "target": target, "type": qtype, "source": source}


def test_summary_hand_computed():
    rs = [rec([0.7, 0.2, 0.1], 0), rec([0.6, 0.3, 0.1], 1), rec([0.95, 0.05], 1, "noul"), rec([0.1, 0.2, 0.7], 2, "score")]
    s = summary(rs)
    assert s["n"] == 4
    assert s["accuracy"] == pytest.approx(2 / 4)
    assert s["nll"] == pytest.approx(-(math.log(0.7) + math.log(0.3) + math.log(0.05) + math.log(0.7)) / 4)
    # Brier: multi-class sums; noul is binary (p_true − y_true)²
    briers = [0.3 ** 2 + 0.2 ** 2 + 0.1 ** 2, 0.6 ** 2 + 0.7 ** 2 + 0.1 ** 2, 0.95 ** 2, 0.1 ** 2 + 0.2 ** 2 + 0.3 ** 2]
    assert s["brier"] == pytest.approx(sum(briers) / 4)
    # confident error: the noul answer at 0.95 is wrong
    assert s["confident_error"] == pytest.approx(1 / 4)
    # ordinal MAE of the expected level: 0.2 + 1.4 = 1.6 vs gold 2
    assert s["mae"] == pytest.approx(0.4)
    # ECE bins: 0.7 (right), 0.6 (wrong), 0.95 (wrong), 0.7 (right)
    # bin [0.6, 0.7): 0.6 wrong -> |0 − 0.6|; bin [0.7, 0.8): two right at 0.7 -> |1 − 0.7|; bin [0.9, 1]: |0 − 0.95|
    assert s["ece"] == pytest.approx((0.6 + 2 * 0.3 + 0.95) / 4)
    assert s["ece_bins"] == [0, 0, 0, 0, 0, 0, 1, 2, 0, 1]


def test_ece_last_bin_is_closed_and_empty_set():
    e, bins = ece([rec([1.0, 0.0], 0)])
    assert e == pytest.approx(0.0) and bins[-1]["count"] == 1
    assert summary([]) == {"n": 0}


def test_coverage_at_error_budget():
    # by confidence: right, right, wrong, right … the prefix of 3 has error 1/3 > 5 %
    rs = [rec([0.99, 0.01], 0), rec([0.98, 0.02], 0), rec([0.97, 0.03], 1), rec([0.9, 0.1], 0)]
    assert coverage_at(rs) == pytest.approx(2 / 4)
    assert coverage_at([rec([0.9, 0.1], 1)]) == 0.0
    many = [rec([0.99, 0.01], 0)] * 19 + [rec([0.6, 0.4], 1)]
    assert coverage_at(many) == pytest.approx(1.0)   # 1 error in 20 = 5 % is within budget


def test_summarize_groups_by_source_and_type():
    s = summarize([rec([0.7, 0.3], 0, "noul", "a"), rec([0.2, 0.8], 0, "choice", "b")])
    assert set(s["per_source"]) == {"a", "b"} and set(s["per_type"]) == {"noul", "choice"}
    assert s["per_source"]["a"]["accuracy"] == 1.0 and s["per_source"]["b"]["accuracy"] == 0.0


def test_temperature_fit_recovers_a_known_temperature():
    torch.manual_seed(0)
    zs, gs = [], []
    for _ in range(2000):
        z = torch.randn(4) * 4
        gs.append(int(torch.multinomial(torch.softmax(z / 2.5, -1), 1)))   # calibrated at T = 2.5
        zs.append(z.tolist())
    t = fit_temperature(zs, gs)
    assert t == pytest.approx(2.5, rel=0.08)
    assert nll_at(zs, gs, t) < nll_at(zs, gs, 1.0)
    # all-correct logits: NLL keeps falling as T shrinks (to the float floor), never below the 0.05 bound
    t = fit_temperature([[10.0, 0.0]] * 50, [0] * 50)
    assert 0.05 <= t < 0.5 and nll_at([[10.0, 0.0]], [0], t) < 1e-12
    # all-wrong logits push T up, never above the 20 bound
    assert 10 < fit_temperature([[0.0, 10.0]] * 50, [0] * 50) <= 20


def test_fit_table_fallbacks():
    torch.manual_seed(1)
    recs = []
    for _ in range(300):                       # choice, K = 4: enough for its own bucket
        z = torch.randn(4) * 3
        recs.append({"type": "choice", "logits": z.tolist(), "gold": int(torch.multinomial(torch.softmax(z / 2, -1), 1))})
    for _ in range(50):                        # choice, K = 8: too few -> the type's temperature
        z = torch.randn(8) * 3
        recs.append({"type": "choice", "logits": z.tolist(), "gold": int(z.argmin())})
    recs += [{"type": "noul", "logits": [3.0, 0.0], "gold": 0}] * 300   # no errors -> T = 1
    table, report = fit_table(recs)
    assert ("choice", "3-5") in table.by_bucket and ("choice", "6-20") not in table.by_bucket
    assert "choice" in table.by_type and "noul" not in table.by_type
    assert report["buckets"]["choice/6-20"]["fallback"] == "type choice's temperature"
    assert report["buckets"]["noul/2"]["fallback"] == "T = 1"
    assert table.lookup("choice", 8) == table.by_type["choice"] and table.lookup("noul", 2) == 1.0
    assert isinstance(table, TemperatureTable)


def test_ece_bootstrap_interval():
    from kevlike.metrics import ece_interval, summary

    sure = [{"source": "s", "type": "choice", "probs": [1.0, 0.0], "gold": 0, "target": [1.0, 0.0]}] * 50
    assert ece_interval(sure) == [0.0, 0.0]
    # half right at confidence 0.75: ECE 0.25 on the full set; resamples straddle it
    mixed = [{"source": "s", "type": "choice", "probs": [0.75, 0.25], "gold": g, "target": [1.0 - g, float(g)]}
             for g in [0, 1] * 100]
    lo, hi = summary(mixed)["ece_ci95"]
    assert lo < 0.25 < hi and hi - lo < 0.2
    assert ece_interval(mixed) == ece_interval(mixed)  # seeded


def test_comparison_protocol_fits_on_even_and_reports_on_odd():
    import math

    from kevlike.eval.heldout import comparison_protocol

    a = math.log(0.95 / 0.05)  # softmax([a, 0]) = (0.95, 0.05): over-confident when 70 % are right
    recs = [{"source": "s", "type": "noul", "logits": [a, 0.0], "probs": [0.95, 0.05],
             "gold": 0 if i // 2 % 10 < 7 else 1, "target": [1.0, 0.0] if i // 2 % 10 < 7 else [0.0, 1.0]}
            for i in range(800)]  # 70 % right in both halves
    out = comparison_protocol(recs)
    assert out["noul"]["n"] == 400 and out["overall"]["n"] == 400
    assert out["noul"]["ece_t1"] == pytest.approx(0.25, abs=1e-6)
    assert out["noul"]["ece_fitted"] < 0.01 and out["noul"]["nll_fitted"] < out["noul"]["nll_t1"]


def test_calibrate_from_records_reports_accuracy_and_stores_option_orders(tmp_path):
    """``kevlike calibrate --records``: accuracy per type by hand; the option orders go to kevlike.json."""
    import json

    from kevlike.config.engine import EngineOptions
    from kevlike.eval.calibration import calibrate_artifact

    art = tmp_path / "artifact"
    art.mkdir()
    (art / "kevlike.json").write_text(json.dumps({"format": 1, "training": {"config": {"tasks": {"banking77": {}}}}}))
    rows = [("choice", [2.0, 0.0, 0.0], 0), ("choice", [0.0, 1.0, 0.0], 0), ("choice", [0.0, 0.0, 3.0], 2),
            ("noul", [1.0, 0.0], 0), ("noul", [0.0, 2.0], 0)]
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps({"source": "banking77", "type": t, "logits": z, "gold": g}) + "\n"
                               for t, z, g in rows))
    report = calibrate_artifact(art, records_path=records, quiet=True, options=EngineOptions(option_orders=2))
    assert report["types"]["choice"]["accuracy"] == pytest.approx(2 / 3)
    assert report["types"]["noul"]["accuracy"] == pytest.approx(1 / 2)
    assert report["option_orders"] == 2
    assert json.loads((art / "kevlike.json").read_text())["option_orders"] == 2
    with pytest.raises(ValueError, match="option_orders must be >= 0"):       # refused by the options themselves
        EngineOptions(option_orders=-1)
    # the results folders keep records gzip-compressed: read as they are (was "'utf-8' codec can't decode byte 0x8b")
    import gzip

    from kevlike.metrics import read_records
    gz = tmp_path / "records.jsonl.gz"
    gz.write_bytes(gzip.compress(records.read_bytes()))
    assert read_records(gz) == read_records(records) and len(read_records(gz)) == 5
    again = calibrate_artifact(art, records_path=gz, quiet=True, options=EngineOptions(option_orders=2))
    assert again["types"]["choice"]["accuracy"] == pytest.approx(2 / 3)
    (tmp_path / "bad.jsonl").write_text('{"type": "noul"}\n[1]\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: a record is a JSON object, got list$"):
        calibrate_artifact(art, records_path=tmp_path / "bad.jsonl", quiet=True)
    (tmp_path / "bad.jsonl.gz").write_bytes(b"not gzip")
    with pytest.raises(ValueError, match=r"bad\.jsonl\.gz: cannot read: Not a gzipped file"):
        read_records(tmp_path / "bad.jsonl.gz")


def test_calibrate_from_set_mode_records_fits_choice_set_alone(tmp_path):
    """``kevlike calibrate --records R --option-mode set``: R's choice records fit ``choice:set``; the file's
    ``choice`` (list mode), ``noul`` and x_abstain's scaling stay as they were."""
    import json

    from kevlike.eval.calibration import calibrate_artifact
    from kevlike.model.modeldir import load_temperatures

    art = tmp_path / "artifact"
    art.mkdir()
    (art / "kevlike.json").write_text(json.dumps({"format": 1, "option_modes": ["list", "set"],
                                                  "training": {"config": {"tasks": {"banking77": {}}}}}))
    torch.manual_seed(0)
    rows = []
    for _ in range(300):           # over-confident choice logits (calibrated at T = 2) and noul logits
        z = torch.randn(4) * 4
        rows.append({"source": "b/choice", "type": "choice", "logits": z.tolist(),
                     "gold": int(torch.multinomial(torch.softmax(z / 2.0, -1), 1))})
        y = torch.randn(2) * 3
        rows.append({"source": "b/noul", "type": "noul", "logits": y.tolist(),
                     "gold": int(torch.multinomial(torch.softmax(y / 0.5, -1), 1))})
    for i in range(200):           # x_abstain logits on answerable and "cannot tell" questions of both types
        rows.append({"source": "a", "type": ("choice", "noul")[i % 2], "logits": [0.0, 0.0], "gold": 0,
                     "abstain_logit": 2.0 if i % 4 < 2 else -2.0, **({"cannot_tell": True} if i % 4 < 2 else {})})
    records = tmp_path / "records.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    calibrate_artifact(art, records_path=records, quiet=True, fit_mode="list")
    before = load_temperatures(art)
    assert set(before.by_type) == {"choice", "noul", "abstain"}
    calibrate_artifact(art, records_path=records, quiet=True, fit_mode="set")
    after = load_temperatures(art)
    assert set(after.by_type) == {"choice", "noul", "abstain", "choice:set"}
    assert all(after.by_type[t] == before.by_type[t] for t in ("choice", "noul", "abstain"))
    assert after.abstain_bias == before.abstain_bias
    assert after.source == ("fitted on validation splits (a: 50 questions, b: 300 questions); abstain, choice, noul "
                            "kept from earlier fits (each type's records: the fit report's types.TYPE.source)")
    fit = json.loads((art / "calibration.json").read_text())["fit"]
    assert set(fit["types"]) == {"choice", "noul", "abstain", "choice:set"}
    assert {t: e["source"] for t, e in fit["types"].items()} == {
        "choice": "validation records (a: 50, b/choice: 300)", "noul": "validation records (a: 50, b/noul: 300)",
        "abstain": "validation records (a: 200)", "choice:set": "validation records (a: 50, b/choice: 300)"}
    calibrate_artifact(art, records_path=records, quiet=True, fit_mode="list")   # a third fit: no nesting
    third = load_temperatures(art)     # the file's source counts per dataset (b/choice and b/noul are b)
    assert third.source == ("fitted on validation splits (a: 200 questions, b: 600 questions); choice:set kept "
                            "from earlier fits (each type's records: the fit report's types.TYPE.source)")
    # a file written before types named their records: its source is kept once, and its entries point at it
    cal = json.loads((art / "calibration.json").read_text())
    cal["source"] = "an old fit"
    cal["fit"]["types"] = {t: {k: v for k, v in e.items() if k != "source"} for t, e in cal["fit"]["types"].items()}
    (art / "calibration.json").write_text(json.dumps(cal))
    for _ in range(2):
        calibrate_artifact(art, records_path=records, quiet=True, fit_mode="set")
        fit = json.loads((art / "calibration.json").read_text())["fit"]
        assert fit["earlier_sources"] == ["an old fit"]
        assert fit["types"]["noul"]["source"] == "earlier_sources[0]" and "n" in fit["types"]["noul"]
    # records with abstention logits but no "cannot tell" among them say nothing about abstention: the file's
    # x_abstain scaling and its report entry stay (the fallback to T = 1 once replaced them)
    kept = load_temperatures(art)
    answerable = tmp_path / "answerable.jsonl"
    answerable.write_text("".join(json.dumps({**r, "abstain_logit": -3.0}) + "\n" for r in rows
                                  if r["source"] == "b"))
    calibrate_artifact(art, records_path=answerable, quiet=True, fit_mode="list")
    again = load_temperatures(art)
    assert again.by_type["abstain"] == kept.by_type["abstain"] and again.abstain_bias == kept.abstain_bias
    fit = json.loads((art / "calibration.json").read_text())["fit"]
    assert fit["types"]["abstain"]["temperature"] == kept.by_type["abstain"]
    # a type asked only as "cannot tell" has no option temperature fitted: the file's stays (it was replaced by a
    # T = 1 fallback)
    unanswerable = tmp_path / "unanswerable.jsonl"
    unanswerable.write_text("".join(json.dumps({**r, "type": "score", "logits": [0.0, 0.0, 0.0]}
                                               if r.get("cannot_tell") else r) + "\n" for r in rows))
    cal = json.loads((art / "calibration.json").read_text())
    cal["by_type"]["score"] = 1.7
    (art / "calibration.json").write_text(json.dumps(cal))
    calibrate_artifact(art, records_path=unanswerable, quiet=True, fit_mode="list")
    assert load_temperatures(art).by_type["score"] == 1.7
    assert after.by_type["choice:set"] == pytest.approx(before.by_type["choice"], rel=1e-6)   # the same logits
    assert after.by_type["choice:set"] == pytest.approx(2.0, abs=0.4)


def _bound_records():
    """Three types built to end on a bound or not (hand-checkable NLL curves, DESIGN §9):

    * noul: 240 answers right by a margin of 1 and 10 wrong by 1e-9 — NLL(T) = (240 log(1 + e^{-1/T}) +
      10 log(1 + e^{1e-9/T})) / 250 keeps falling as T shrinks (slope of the right ones ~240 e^{-1/T}/T², of
      the errors ~5e-9/T²): the lower bound;
    * score: logits unrelated to the gold, ±2 with the gold on either side half the time — NLL(T) =
      (log(1 + e^{-2/T}) + log(1 + e^{2/T})) / 2 falls towards log 2 as T grows: the upper bound;
    * choice: calibrated at T = 2.5 by construction: an interior fit, kept."""
    recs = [{"type": "noul", "logits": [1.0, 0.0], "gold": 0}] * 240
    recs += [{"type": "noul", "logits": [1e-9, 0.0], "gold": 1}] * 10
    recs += [{"type": "score", "logits": [2.0, 0.0, -2.0], "gold": g} for g in (0, 2) * 150]
    torch.manual_seed(0)
    for _ in range(400):
        z = torch.randn(4) * 4
        recs.append({"type": "choice", "logits": z.tolist(), "gold": int(torch.multinomial(torch.softmax(z / 2.5, -1), 1))})
    return recs


def test_a_fit_on_the_search_bound_is_flagged_and_falls_back():
    from kevlike.model.temperatures import T_MAX, T_MIN, at_bound, bound_hits_text

    recs = _bound_records()
    noul = [r for r in recs if r["type"] == "noul"]
    assert fit_temperature([r["logits"] for r in noul], [r["gold"] for r in noul]) == pytest.approx(T_MIN, rel=1e-3)
    table, report = fit_table(recs)
    # both bound hits fall back as a too-small type does (T = 1 without a base); the interior fit is kept
    assert "noul" not in table.by_type and ("noul", "2") not in table.by_bucket
    assert "score" not in table.by_type and ("score", "3-5") not in table.by_bucket
    assert table.lookup("noul", 2) == 1.0 and table.lookup("score", 3) == 1.0
    assert table.by_type["choice"] == pytest.approx(2.5, rel=0.15)
    assert report["bounds"] == [T_MIN, T_MAX]
    assert sorted(report["bound_hits"]) == ["noul", "noul/2", "score", "score/3-5"]
    assert report["types"]["noul"]["bound"] == "lower" and report["types"]["score"]["bound"] == "upper"
    assert report["types"]["noul"]["fitted_at_bound"] == pytest.approx(0.05, rel=1e-3)
    assert report["types"]["score"]["fitted_at_bound"] == pytest.approx(20.0, rel=1e-3)
    assert report["types"]["noul"]["fallback"].startswith("T = 1 (fit hit the lower search bound (T = 0.05")
    assert "not enough information" in report["buckets"]["score/3-5"]["fallback"]
    assert "bound" not in report["types"]["choice"]
    assert bound_hits_text(report) == ("temperature at a search bound, fell back: noul (lower), score (upper), "
                                       "noul/2 (lower), score/3-5 (upper)")
    assert bound_hits_text({"bound_hits": [], "types": {}}) is None and bound_hits_text(None) is None
    assert at_bound(0.0502) is None and at_bound(19.9) is None and at_bound(1.0) is None
    assert at_bound(0.05) == "lower" and at_bound(19.99) == "upper"    # within 0.1 % of the bound
    # with a base (a calibration profile), a bound hit keeps the model's own temperature
    base = TemperatureTable(by_type={"noul": 0.8, "score": 1.3})
    table, report = fit_table(recs, base=base)
    assert table.lookup("noul", 2) == 0.8 and table.lookup("score", 3) == 1.3
    assert report["types"]["score"]["fallback"].startswith("the model's own temperatures (fit hit the upper")


def test_the_calibration_file_and_kevlike_models_carry_the_bound_flag(tmp_path, capsys, monkeypatch):
    import json

    from kevlike import cli
    from kevlike.model import backbones
    from kevlike.model.modeldir import ModelDir, calibration_fit, save_calibration

    table, report = fit_table(_bound_records())
    (tmp_path / ModelDir.MANIFEST).write_text("{}")
    save_calibration(tmp_path, table, report)
    stored = json.loads((tmp_path / "calibration.json").read_text())
    assert stored["fit"]["bound_hits"] == report["bound_hits"]
    assert stored["fit"]["types"]["score"]["bound"] == "upper"
    assert calibration_fit(tmp_path)["bound_hits"] == report["bound_hits"]
    entry = backbones.ModelEntry(name="bound-test", backbone="smollm2-135m-instruct", description="d",
                                 release_date="2026-01-01", artifact=str(tmp_path))
    monkeypatch.setattr(backbones, "MODELS", {"bound-test": entry})
    assert cli.main(["models"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("bound-test"))
    assert line.endswith("[temperature at a search bound, fell back: noul (lower), score (upper), noul/2 (lower), "
                         "score/3-5 (upper)]")


def test_normal_readout_hand_computed():
    """``q_k ∝ exp(−(k − μ)² / 2σ²)`` with the distribution's own mean and variance (levels 0 … K−1)."""
    from kevlike.model.temperatures import VAR_FLOOR, normal_readout

    q = normal_readout(torch.tensor([0.5, 0.0, 0.0, 0.5], dtype=torch.float64))   # μ = 1.5, σ² = 2.25
    e = [math.exp(-(k - 1.5) ** 2 / 4.5) for k in range(4)]
    assert q.tolist() == pytest.approx([x / sum(e) for x in e], abs=1e-12)        # 0.1953, 0.3047, 0.3047, 0.1953
    assert q[0] == pytest.approx(0.19534, abs=1e-5)
    q = normal_readout(torch.tensor([0.0, 1.0, 0.0]))                              # one-hot: σ² = VAR_FLOOR
    assert q.dtype == torch.float32
    assert float(q[0]) == pytest.approx(math.exp(-1 / (2 * VAR_FLOOR)) / (1 + 2 * math.exp(-1 / (2 * VAR_FLOOR))),
                                        rel=1e-4)
    assert int(normal_readout(torch.tensor([0.1, 0.2, 0.3, 0.4])).argmax()) == 2  # μ = 2.0: the mode (3) is not it
    two = torch.tensor([0.9, 0.1])                                                # two levels: unchanged
    assert torch.equal(normal_readout(two), two)


def test_score_readout_is_chosen_by_validation_nll_and_round_trips(tmp_path):
    """``fit_table`` serves score questions through the normal readout only where its NLL (at its own fitted T)
    is lower than softmax's: bimodal logits with middle golds → normal; the same logits with golds at the
    modes → softmax. The table writes and reads the field, and refuses an unknown readout."""
    from kevlike.model.temperatures import ProfileError, normal_readout

    import random

    rng = random.Random(0)

    def records(gold_at_mean: bool) -> list[dict]:
        """Bimodal (levels 0 and 3) logits whose mean lies near level 1 or 2: gold there, or at the larger mode
        (the other one every tenth question, so that softmax has errors to fit)."""
        out = []
        for i in range(300):
            g = 1 + i % 2
            w = 1 - min(max(g + rng.uniform(-0.4, 0.4), 0.1), 2.9) / 3
            z = [math.log(x) for x in (0.9 * w, 0.05, 0.05, 0.9 * (1 - w))]
            mode = 0 if w > 0.5 else 3
            out.append({"source": "s", "type": "score", "logits": z,
                        "gold": g if gold_at_mean else (3 - mode if i % 10 == 0 else mode)})
        return out

    table, report = fit_table(records(True), min_count=200)
    e = report["types"]["score"]
    assert table.score_readout == "normal" and e["readout"] == "normal"
    assert e["errors"] == 300 and e["accuracy_readout"] > 0.5      # the mode is always wrong, the mean mostly right
    assert e["nll_fitted"] < e["nll_t1"]                           # softmax's fit hit its bound: T = 1 is served
    assert "bound" in e["softmax"] and "score" not in report["bound_hits"]
    assert table.by_type["score"] == e["temperature"]
    z = torch.tensor(records(True)[0]["logits"])
    p = table.probabilities("score", z)
    assert p.tolist() == pytest.approx(normal_readout(torch.softmax(z / e["temperature"], -1)).tolist())
    assert table.probabilities("choice", z).tolist() == pytest.approx(torch.softmax(z, -1).tolist())
    table2, report2 = fit_table(records(False), min_count=200)
    e2 = report2["types"]["score"]
    assert table2.score_readout == "softmax" and e2["readout"] == "softmax"
    assert e2["normal"]["nll_fitted"] > e2["nll_fitted"]
    back = TemperatureTable.from_json(json.loads(json.dumps(table.to_json())))
    assert back == table
    assert "score_readout" not in table2.to_json()                                 # older readers see the same file
    with pytest.raises(ProfileError, match=r"score_readout: must be one of softmax, normal, got 'mode'"):
        TemperatureTable(score_readout="mode")
    # a profile fitted on a file without score questions keeps the model's readout
    noul = [{"source": "s", "type": "noul", "logits": [1.0, 0.0], "gold": i % 3 == 0} for i in range(250)]
    prof, _ = fit_table([{**r, "gold": int(r["gold"])} for r in noul], min_count=200, base=table)
    assert prof.score_readout == "normal" and prof.by_type["score"] == table.by_type["score"]


def test_the_engine_serves_score_questions_through_the_tables_readout():
    """An engine whose table says ``score_readout: normal`` answers score questions with the readout of its
    tempered softmax (and reports the expected level of that), and every other question as before."""
    from kevlike.model.temperatures import normal_readout
    from tiny import make_engine

    eng = make_engine()
    req = {"state": "The outage lasted 40 minutes and hit two regions.",
           "questions": {"sev": {"type": "score", "instructions": "How severe was it?",
                                 "criteria": ["minor", "moderate", "major", "critical"]},
                         "yes": {"type": "noul", "instructions": "Was it an outage?"}}}
    before = eng.decide(req)["answers"]
    old = eng.temperatures
    try:
        eng.temperatures = TemperatureTable(by_type={"score": 0.5}, score_readout="normal")
        after = eng.decide(req)["answers"]
        eng.temperatures = TemperatureTable(by_type={"score": 0.5})
        tempered = eng.decide(req)["answers"]
    finally:
        eng.temperatures = old
    p = torch.tensor(list(tempered["sev"]["probabilities"].values()), dtype=torch.float64)
    q = normal_readout(p).tolist()
    assert list(after["sev"]["probabilities"].values()) == pytest.approx(q, abs=1e-6)
    assert after["sev"]["score"] == pytest.approx(sum(i * x for i, x in enumerate(q)), abs=1e-6)
    assert after["yes"] == before["yes"]


def test_a_profile_without_a_usable_score_fit_keeps_the_models_readout_and_no_softmax_buckets():
    """A profile fitted over a model served with the normal readout, on score records that no temperature fits
    (logits unrelated to the gold: both fits run to the upper bound), keeps the model's score temperature and
    readout, and gets no per-bucket score temperature fitted under softmax (found in review: it once served a
    softmax-fitted bucket through the normal readout)."""
    import random

    from kevlike.model.temperatures import fit_line

    base = TemperatureTable(by_type={"score": 0.8}, score_readout="normal")
    rng = random.Random(0)
    recs = [{"source": "s", "type": "score", "logits": [rng.gauss(0, 3) for _ in range(5)], "gold": rng.choice([0, 4])}
            for _ in range(400)]
    for _ in range(60):
        g = rng.randrange(2)
        m = 6.0 if rng.random() < 0.8 else -6.0
        recs.append({"source": "s", "type": "score", "logits": [0.0, m] if g else [m, 0.0], "gold": g})
    prof, rep = fit_table(recs, min_count=50, base=base)
    assert prof.score_readout == "normal" and prof.by_type == {"score": 0.8} and prof.by_bucket == {}
    assert rep["buckets"]["score/2"]["fallback"] == "the model's own score temperature (two levels: read by softmax)"
    assert rep["buckets"]["score/3-5"]["fallback"] == "the model's own score temperature and normal readout"
    assert "normal readout kept" in fit_line("score", rep["types"]["score"])


def test_records_from_logits_batches_by_length_and_keeps_the_examples_order():
    """Batches are formed from requests of similar length (less padding); the records come back in the examples'
    order and equal one-request-per-pass records (a padded batch answers as its requests alone)."""
    from kevlike.data.sources import Example
    from kevlike.metrics import records_from_logits
    from tiny import make_engine

    engine = make_engine("qwen2", abstain=True)
    states = ["A long text. " * 40, "hi", "A medium text about an invoice. " * 8, "ok then", "Billing. " * 20]
    examples = []
    for i, state in enumerate(states):
        req = {"state": state, "questions": {
            f"q{i}": {"type": "noul", "instructions": "Is it about billing?"},
            f"c{i}": {"type": "choice", "instructions": "Which?", "criteria": {"a": None, "b": None, "c": None}}}}
        examples.append(Example(req, {f"q{i}": [1.0, 0.0], f"c{i}": [0.0, 1.0, 0.0]}, f"s{i}"))
    batched = records_from_logits(engine, examples, batch_size=2)
    single = records_from_logits(engine, examples, batch_size=1)
    assert [r["question"] for r in batched] == [q for i in range(5) for q in (f"q{i}", f"c{i}")]
    assert [r["source"] for r in batched] == [f"s{i}" for i in range(5) for _ in range(2)]
    for b, s in zip(batched, single):
        assert b["probs"] == pytest.approx(s["probs"], abs=1e-5)
        assert b["x_abstain"] == pytest.approx(s["x_abstain"], abs=1e-5)
