"""scripts/ablations.py: each variant's overrides change one thing; the table reads issue 31's targets."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from ablations import COLUMNS, overrides, summarize, table  # noqa: E402


def test_variants_share_the_budget_and_differ_in_one_change(tmp_path):
    tasks = {"facts": {}, "sys1_log_triage": {}}
    full = overrides("full", 150, tmp_path, tasks, "kevlike/models/default", 1e-4)
    for v, change in (("no_perm", ["loss.perm=0"]), ("ce_only", ["loss.perm=0", "loss.ord=0"]),
                      ("no_negation", ["tasks.facts.negation=false"])):
        o = overrides(v, 150, tmp_path, tasks, "kevlike/models/default", 1e-4)
        assert [x for x in o if not x.startswith("name=")] == [x for x in full if not x.startswith("name=")] + change
    assert "max_steps=150" in full and "optim.head_lr=0.00025" in full and "init_from=kevlike/models/default" in full
    assert overrides("start", 150, tmp_path, tasks, "x") == []
    # the abstention arm adds the none key and its two sources at ~6 % of the reading mix; the config loads
    from kevlike.training.config import load_config
    reading = Path(__file__).resolve().parents[1] / "configs" / "reading.yaml"
    cfg = load_config(str(reading), overrides("abstain", 150, tmp_path, tasks, "kevlike/models/default", 1e-4))
    share = (cfg.tasks["abstain_docs"]["weight"] + cfg.tasks["abstain_snli"]["weight"]) / sum(
        t["weight"] for t in cfg.tasks.values())
    assert cfg.head.abstain and cfg.loss.abstain == 1.0 and 0.05 < share < 0.07
    with pytest.raises(ValueError, match="unknown variant"):
        overrides("no_such", 150, tmp_path, tasks)
    # a second seed changes the training seed and nothing else; the config's seed is kept without one
    seeded = overrides("ce_only", 150, tmp_path, tasks, "kevlike/models/default", 1e-4, seed=1)
    assert seeded == ["seed=1"] + overrides("ce_only", 150, tmp_path, tasks, "kevlike/models/default", 1e-4)
    assert load_config(str(reading), seeded).seed == 1 and load_config(str(reading), full).seed == 41


def test_summarize_reads_the_targets_and_the_table_prints_them():
    split = {"accuracy": 0.5, "nll": 0.7, "ece": 0.1}
    g = {"splits": {k: split for k in ("seen_wording", "heldout_wording", "heldout_source", "target/spam_balanced",
                                        "target/sentiment5")},
         "wording_gap": 0.0, "contrast": {"both_right": 0.4, "coherence": {"negation": 0.3}},
         "targets": {"realistic_accuracy": {"value": 0.61}, "unseen_accuracy": {"value": None}}}
    row = summarize("full", {"generalization_uncalibrated": g, "overall": {"n": 10}}, Path("a"))
    assert row["realistic"] == 0.61 and math.isnan(row["unseen"]) and math.isnan(row["bigbench"])
    md = table([row])
    assert md.splitlines()[0].count("|") == len(COLUMNS) + 2 and "| full | 0.500 |" in md and "0.610" in md
