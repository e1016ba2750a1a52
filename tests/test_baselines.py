"""Baselines beside every suite report (kevlike/eval/baselines.py): chance and majority against hand-computed
values, and ``run_suite`` on tiny models writing the model, LM-readout, majority and chance rows on the same items
(also for a bare backbone, which eval used to refuse)."""

import json
import math

import pytest

from kevlike.data.sources import Example
from kevlike.eval import heldout
from kevlike.eval.baselines import chance_summary, compare, majority_records
from kevlike.metrics import records_from_logits, summary

from tiny import make_engine


def _rec(qtype, K, gold, source="s", question="q"):
    target = [1.0 if k == gold else 0.0 for k in range(K)]
    return {"source": source, "type": qtype, "probs": [1 / K] * K, "gold": gold, "target": target, "question": question}


# choice K = 4, golds 0 0 0 1; noul golds true false false; score (3 levels) golds 2 2 0
RECORDS = ([_rec("choice", 4, g) for g in (0, 0, 0, 1)] + [_rec("noul", 2, g) for g in (0, 1, 1)]
           + [_rec("score", 3, g) for g in (2, 2, 0)])


def test_chance_is_the_expected_uniform_answer():
    s = chance_summary(RECORDS)
    assert s["n"] == 10
    assert s["accuracy"] == pytest.approx((4 / 4 + 3 / 2 + 3 / 3) / 10)          # mean 1/K = 0.35
    assert s["nll"] == pytest.approx((4 * math.log(4) + 3 * math.log(2) + 3 * math.log(3)) / 10)
    # Brier: choice 1 - 1/4, noul binary (0.5 - y)^2 = 0.25, score 1 - 1/3
    assert s["brier"] == pytest.approx((4 * 0.75 + 3 * 0.25 + 3 * (2 / 3)) / 10)
    assert s["mae"] == pytest.approx((1 + 1 + 1) / 3)                            # |1 - gold| for golds 2, 2, 0
    assert "ece" not in s and chance_summary([]) == {"n": 0}


def test_majority_is_the_gold_frequency_of_each_group():
    maj = majority_records(RECORDS)
    assert maj[0]["probs"] == [0.75, 0.25, 0.0, 0.0] and "logits" not in maj[0]
    assert maj[4]["probs"] == pytest.approx([1 / 3, 2 / 3])
    assert maj[7]["probs"] == pytest.approx([1 / 3, 0.0, 2 / 3])
    s = summary(maj)
    assert s["accuracy"] == pytest.approx((3 + 2 + 2) / 10)                     # the most frequent gold's share
    nll = (-(3 * math.log(0.75) + math.log(0.25)) - (math.log(1 / 3) + 2 * math.log(2 / 3))
           - (2 * math.log(2 / 3) + math.log(1 / 3)))
    assert s["nll"] == pytest.approx(nll / 10)                                  # the entropies of the frequencies
    # another source (or split) is its own group: its golds do not move this one's prior
    other = majority_records(RECORDS + [_rec("choice", 4, 3, source="t")] * 5)
    assert other[0]["probs"] == [0.75, 0.25, 0.0, 0.0] and other[-1]["probs"] == [0.0, 0.0, 0.0, 1.0]


def test_compare_puts_every_row_on_the_same_items():
    lm = [{**r, "probs": [1.0] + [0.0] * (len(r["target"]) - 1)} for r in RECORDS]  # always the first option
    rows = compare(RECORDS, lm, lambda r: [f"type: {r['type']}", "overall"])
    assert list(rows) == ["type: choice", "type: noul", "type: score", "overall"]
    assert rows["overall"]["lm_readout"]["accuracy"] == pytest.approx(5 / 10)
    assert rows["type: choice"]["majority"]["accuracy"] == 0.75
    assert rows["type: noul"]["chance"]["accuracy"] == 0.5
    assert all(row["model"]["n"] == row["majority"]["n"] == row["chance"]["n"] for row in rows.values())
    assert compare(RECORDS, None, lambda r: ["overall"])["overall"]["lm_readout"] is None
    with pytest.raises(ValueError, match="same order"):
        compare(RECORDS, lm[::-1], lambda r: ["overall"])


def _examples():
    out = []
    for i, state in enumerate(["The invoice was paid twice.", "A fox jumps over the lazy dog.",
                               "Customer: nobody answers the phone.", "Which team should handle this?"]):
        req = {"state": state, "questions": {
            "a": {"type": "noul", "instructions": "Is a customer angry?"},
            "b": {"type": "choice", "instructions": "Which team?",
                  "criteria": {"billing": None, "sales": None, "tech": None}}}}
        out.append(Example(req, {"a": [1.0, 0.0] if i % 2 else [0.0, 1.0], "b": [1.0, 0.0, 0.0]}, "toy"))
    return out


@pytest.fixture
def toy_suite(monkeypatch):
    monkeypatch.setitem(heldout.SUITES, "toy", {"toy": 4})
    monkeypatch.setattr(heldout, "eval_examples", lambda name, split, n, seed=0, noul_twins=0: _examples()[:n])


def test_run_suite_reports_the_baseline_rows(tmp_path, toy_suite):
    model, lm = make_engine("llama", "pointer"), make_engine("llama", "lm")
    run = heldout.run_suite(None, "toy", tmp_path, engine=model, lm_engine=lm, quiet=True)
    metrics = json.loads((run / "metrics.json").read_text())
    rows = metrics["baselines"]
    assert list(rows) == ["toy", "type: choice", "type: noul", "overall"]
    overall = rows["overall"]
    assert overall["model"]["accuracy"] == metrics["overall"]["accuracy"]
    assert overall["chance"]["accuracy"] == pytest.approx((4 / 3 + 4 / 2) / 8)
    assert overall["chance"]["nll"] == pytest.approx((4 * math.log(3) + 4 * math.log(2)) / 8)
    # choice golds are all "billing", noul golds alternate: majority 4/4 and 2/4 (ties: the lowest index)
    assert rows["type: choice"]["majority"]["accuracy"] == 1.0 and rows["type: noul"]["majority"]["accuracy"] == 0.5
    # the LM row is the bare readout's own records of the same requests
    expect = summary(records_from_logits(lm, _examples()))
    assert overall["lm_readout"]["accuracy"] == expect["accuracy"]
    assert overall["lm_readout"]["nll"] == pytest.approx(expect["nll"])
    assert metrics["meta"]["readout"] == "pointer head" and "tiny-llama" in metrics["meta"]["lm_baseline"]
    report = (run / "report.md").read_text()
    assert "| set | n | acc model | acc lm_readout | acc majority | acc chance |" in report
    assert "**majority**" in report and "oracle prior" in report
    # without the LM row: chance and majority stay, the LM cells are empty and the report says why
    run = heldout.run_suite(None, "toy", tmp_path / "no-lm", engine=model, lm_baseline=False, quiet=True)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["baselines"]["overall"]["lm_readout"] is None
    assert metrics["baselines"]["overall"]["majority"]["n"] == 8
    assert "not run (--no-lm-baseline)" in (run / "report.md").read_text()


def test_a_bare_backbone_is_evaluated_with_its_lm_readout(tmp_path, toy_suite):
    lm = make_engine("qwen2", "lm")
    run = heldout.run_suite(None, "toy", tmp_path, engine=lm, quiet=True)
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["meta"]["readout"] == "LM readout (training-free)"
    overall = metrics["baselines"]["overall"]
    assert overall["lm_readout"] == overall["model"]
    assert overall["model"]["accuracy"] == summary(records_from_logits(lm, _examples()))["accuracy"]


def test_generalization_reports_baselines_per_split(tmp_path, monkeypatch):
    monkeypatch.setattr(heldout, "generalization_sets", lambda quick, n, bigbench, splits=None: {
        "seen_wording": _examples()[:2], "heldout_source": _examples()[2:]})
    model, lm = make_engine("llama", "pointer"), make_engine("llama", "lm")
    run = heldout.run_suite(None, "generalization-quick", tmp_path, engine=model, lm_engine=lm, quiet=True)
    metrics = json.loads((run / "metrics.json").read_text())
    rows = metrics["baselines"]
    assert list(rows) == ["heldout_source", "seen_wording"]
    split = metrics["generalization"]["splits"]["seen_wording"]
    assert rows["seen_wording"]["model"]["n"] == split["n"] == 4
    assert rows["seen_wording"]["model"]["accuracy"] == split["accuracy"]
    assert rows["heldout_source"]["chance"]["accuracy"] == pytest.approx((2 / 3 + 2 / 2) / 4)
    assert rows["heldout_source"]["lm_readout"]["n"] == 4
    assert "## Baselines (both halves)" in (run / "report.md").read_text()


def test_generalization_splits_answer_only_the_named_splits(tmp_path):
    """``splits`` (``kevlike eval --splits``): only those splits' items are answered, in both rows, and the
    report's figures are of them alone; an unknown name or a non-generalization suite is refused before any pass."""
    from kevlike.eval.generalization import realistic_examples, half_key, half_of

    model = make_engine("llama", "pointer")
    run = heldout.run_suite(None, "generalization-quick", tmp_path, engine=model, lm_baseline=False, quiet=True,
                            half="validation", splits=["realistic"])
    metrics = json.loads((run / "metrics.json").read_text())
    recs = [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]
    want = [e for e in realistic_examples() if half_of(half_key("realistic", e)) == "validation"]
    assert metrics["meta"]["splits"] == ["realistic"] and metrics["meta"]["sizes"] == {"realistic": len(want)}
    assert {r["split"] for r in recs} == {"realistic"} and {r["half"] for r in recs} == {"validation"}
    assert len(recs) == sum(len(e.request["questions"]) for e in want)
    assert list(metrics["generalization"]["splits"]) == ["realistic"]
    assert list(metrics["baselines"]) == ["realistic"]
    with pytest.raises(ValueError, match="unknown 'realist'"):
        heldout.run_suite(None, "generalization-quick", tmp_path, engine=model, splits=["realist"])
    with pytest.raises(ValueError, match="splits go with a generalization suite"):
        heldout.run_suite(None, "heldout", tmp_path, engine=model, splits=["realistic"])


def test_a_split_whose_data_is_absent_is_named_not_dropped_silently(tmp_path, monkeypatch, capsys):
    """Without BIG-bench's archive the ``bigbench`` split cannot be built: the run says so on stderr (with --quiet
    too), in metrics.json's ``absent_splits`` and in report.md, and answers the splits it has."""
    monkeypatch.setenv("KEVLIKE_HOME", str(tmp_path / "home"))               # no bigbench-1.0.0.tar.gz there
    model = make_engine("llama", "pointer")
    run = heldout.run_suite(None, "generalization-quick", tmp_path / "out", engine=model, lm_baseline=False,
                            quiet=True, half="validation", splits=["bigbench", "realistic"])
    meta = json.loads((run / "metrics.json").read_text())["meta"]
    assert list(meta["absent_splits"]) == ["bigbench"] and list(meta["sizes"]) == ["realistic"]
    assert "bigbench-1.0.0.tar.gz" in meta["absent_splits"]["bigbench"]
    assert "kevlike eval: split bigbench left out: BIG-bench's source archive" in capsys.readouterr().err
    assert "split bigbench left out (" in (run / "report.md").read_text()
