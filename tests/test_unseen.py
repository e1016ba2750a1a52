"""kevlike compare (kevlike/eval/unseen.py): the unseen-question aggregate of a generalization run and the paired difference of two
runs (hand-computed)."""

import math
import sys

import pytest

from kevlike.metrics import summary

from kevlike.cli import main  # noqa: E402
from kevlike.eval.unseen import paired_difference, unseen  # noqa: E402


def _r(split, question, probs, gold, half="test", source="s"):     # a record as `kevlike eval` writes it
    return {"split": split, "question": question, "probs": probs, "gold": gold, "source": source, "half": half,
            "target": [float(i == gold) for i in range(len(probs))], "type": "choice"}


def test_unseen_counts_each_contrast_question_once_and_skips_seen_splits():
    recs = [_r("seen_wording", "x", [0.1, 0.9], 0),            # skipped
            _r("documents", "x", [0.1, 0.9], 0),               # seen templates: skipped
            _r("absurd", "x", [0.1, 0.9], 0),                  # trained wordings: skipped
            _r("snli_test", "x", [0.1, 0.9], 0),               # a trained task: skipped
            _r("heldout_source", "x", [0.8, 0.2], 0),          # right, -log 0.8
            _r("bigbench", "x", [0.3, 0.3, 0.4], 1),           # wrong, -log 0.3
            _r("realistic", "x", [0.6, 0.4], 0, half="validation"),   # right, -log 0.6; validation half
            _r("contrast", "q0", [0.6, 0.4], 0),               # right, -log 0.6
            _r("contrast", "n0", [0.6, 0.4], 1),               # twin: skipped
            _r("contrast_apart", "c0", [0.5, 0.5], 0)]         # twin: skipped
    s = summary(unseen(recs))
    assert s["n"] == 4 and s["accuracy"] == pytest.approx(3 / 4)
    assert s["nll"] == pytest.approx(-(math.log(0.8) + math.log(0.3) + 2 * math.log(0.6)) / 4)
    t = summary(unseen(recs, "test"))
    assert t["n"] == 3 and t["accuracy"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="no unseen question"):
        unseen(recs[:1])
    old = [{k: v for k, v in r.items() if k != "half"} for r in recs]
    with pytest.raises(ValueError, match="carry no half"):
        unseen(old, "test")


def test_paired_difference_hand_computed_and_refuses_other_questions():
    a = [_r("realistic", f"q{i}", [0.9, 0.1], 0) for i in range(4)]                   # all right
    b = [_r("realistic", f"q{i}", [0.9, 0.1] if i < 2 else [0.1, 0.9], 0) for i in range(4)]   # 2 of 4
    d = paired_difference(a, b, resamples=500)
    assert d["n"] == 4 and d["difference"] == 0.5
    assert 0.0 <= d["low"] <= 0.5 <= d["high"] <= 1.0
    same = paired_difference(a, a, resamples=100)
    assert same == {"n": 4, "difference": 0.0, "low": 0.0, "high": 0.0, "se": 0.0}
    # differences (0, 0, 1, 1): mean 0.5, sample variance 1/3, SE sqrt(1/3 / 4)
    assert d["se"] == pytest.approx(math.sqrt(1 / 3 / 4))
    with pytest.raises(ValueError, match="same questions"):
        paired_difference(a, b[:3])


def test_main_prints_the_difference(tmp_path, capsys):
    import json
    run, base = tmp_path / "run", tmp_path / "base"
    for d, probs in ((run, [0.9, 0.1]), (base, [0.1, 0.9])):
        d.mkdir()
        (d / "records.jsonl").write_text("\n".join(json.dumps(_r("heldout_source", f"q{i}", probs, 0))
                                                   for i in range(3)) + "\n")
    assert main(["compare", str(run), "--baseline", str(base), "--half", "test"]) == 0
    out = capsys.readouterr().out
    assert "unseen questions 3 (test), accuracy 1.000" in out and "minus baseline +1.000" in out
    assert main(["compare", str(tmp_path / "missing")]) == 2
    assert main(["compare", str(run), "--by-split"]) == 2               # --by-split needs a baseline
    assert main(["compare", str(run), "--baseline", str(base), "--by-split"]) == 0
    assert "  heldout_source: 1.000, minus baseline +1.000 [+1.000, +1.000], paired SE 0.000, n 3" in \
        capsys.readouterr().out
    import gzip                                                           # a results folder's .jsonl.gz reads the same
    (tmp_path / "base.jsonl.gz").write_bytes(gzip.compress((base / "records.jsonl").read_bytes()))
    assert main(["compare", str(run), "--baseline", str(tmp_path / "base.jsonl.gz"), "--half", "test"]) == 0
    assert "minus baseline +1.000" in capsys.readouterr().out
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress(b'{"a": 1}\n')[:-6])   # a cut-off download
    assert main(["compare", str(run), "--baseline", str(tmp_path / "cut.jsonl.gz")]) == 2
    assert "cut.jsonl.gz: cannot read" in capsys.readouterr().err


def test_a_run_of_the_fresh_pages_alone_is_compared_split_by_split(tmp_path, capsys):
    """``realistic_fresh`` is outside the unseen figure, so `kevlike compare` of a `--splits realistic_fresh` run
    stopped at 'no unseen question'; with --by-split it now prints that split's paired difference (2 of 3 right
    against 1 of 3: +0.333), and without --by-split the error says to use it."""
    import json
    run, base = tmp_path / "run", tmp_path / "base"
    for d, right in ((run, (1, 1, 0)), (base, (1, 0, 0))):
        d.mkdir()
        (d / "records.jsonl").write_text("\n".join(
            json.dumps(_r("realistic_fresh", f"q{i}", [0.9, 0.1] if ok else [0.1, 0.9], 0, half="validation"))
            for i, ok in enumerate(right)) + "\n")
    assert main(["compare", str(run), "--baseline", str(base), "--half", "validation", "--by-split"]) == 0
    out = capsys.readouterr().out
    assert f"{run}: no unseen question (validation); by split:" in out
    assert "  realistic_fresh: 0.667, minus baseline +0.333" in out and "n 3" in out
    assert main(["compare", str(run), "--baseline", str(base), "--half", "validation"]) == 2
    assert "no unseen question in these records (compare them split by split" in capsys.readouterr().err


def test_a_run_that_cannot_be_paired_is_named_and_the_others_are_still_compared(tmp_path, capsys):
    """Break-test 2026-12-07: `kevlike compare A B --baseline C` stopped at the first run that shared no question
    with the baseline, naming neither run."""
    import json
    good, other, base = tmp_path / "good", tmp_path / "other", tmp_path / "base"
    for d, split, half in ((good, "heldout_source", "test"), (other, "realistic", "test"),
                           (base, "heldout_source", "test")):
        d.mkdir()
        (d / "records.jsonl").write_text("\n".join(json.dumps(_r(split, f"q{i}", [0.9, 0.1], 0, half=half))
                                                   for i in range(3)) + "\n")
    assert main(["compare", str(other), str(good), "--baseline", str(base)]) == 2
    captured = capsys.readouterr()
    assert f"{good}: unseen questions 3 (all), accuracy 1.000, NLL 0.105; minus baseline +0.000" in captured.out
    assert captured.err == f"kevlike: error: {other}: the run and the baseline share no question (other halves or " \
                           f"other splits: check --half and each run's splits)\n"
    # --by-split: a split both hold without a question in common is said so, and the other splits still compared
    with open(good / "records.jsonl", "a") as f:
        f.write(json.dumps(_r("realistic", "q7", [0.9, 0.1], 0)) + "\n")
    with open(base / "records.jsonl", "a") as f:
        f.write(json.dumps(_r("realistic", "q8", [0.9, 0.1], 0)) + "\n")
    assert main(["compare", str(good), "--baseline", str(base), "--by-split"]) == 0
    out = capsys.readouterr().out
    assert "  realistic: no question shared with the baseline" in out and "  heldout_source: 1.000" in out


def test_a_grown_suite_pairs_over_the_shared_questions(tmp_path, capsys):
    import json
    from kevlike.eval.unseen import shared_questions
    # the baseline was scored before item "new" joined the realistic split; "q" repeats within a source
    base = [_r("realistic", "q1", [0.1, 0.9], 0, source="realistic/a"),
            _r("heldout_source", "q", [0.1, 0.9], 0), _r("heldout_source", "q", [0.9, 0.1], 0)]
    run = [_r("realistic", "q1", [0.9, 0.1], 0, source="realistic/a"),
           _r("realistic", "q1", [0.1, 0.9], 0, source="realistic/new"),
           _r("realistic", "q2", [0.1, 0.9], 0, source="realistic/new"),
           _r("heldout_source", "q", [0.9, 0.1], 0), _r("heldout_source", "q", [0.9, 0.1], 0)]
    a, b, only_a, only_b = shared_questions(run, base)
    assert [(r["source"], r["question"]) for r in a] == [("realistic/a", "q1"), ("s", "q"), ("s", "q")]
    assert [r["probs"] for r in b] == [[0.1, 0.9], [0.1, 0.9], [0.9, 0.1]] and (only_a, only_b) == (2, 0)
    assert paired_difference(a, b, resamples=200)["difference"] == pytest.approx(2 / 3)
    for name, recs in (("run", run), ("base", base)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["compare", str(tmp_path / "run.jsonl"), "--baseline", str(tmp_path / "base.jsonl"),
                 "--half", "test", "--by-split"]) == 0
    out = capsys.readouterr().out
    assert "unseen questions 5 (test), accuracy 0.600" in out
    assert "minus baseline +0.667" in out and "n 3; left out: 2 only in the run, 0 only in the baseline" in out
    assert "  realistic: 1.000, minus baseline +1.000 [+1.000, +1.000], paired SE nan, n 1; left out: 2 only" in out
    assert "  heldout_source: 1.000, minus baseline +0.500 [" in out
    # every split's answerable questions together: 3 shared (2 more right in the run), 2 only in the run
    assert "  all answerable questions: 1.000, minus baseline +0.667 [" in out and \
        "n 3; left out: 2 only in the run, 0 only in the baseline\n" in out.split("all answerable questions")[1]
    changed = [dict(base[0], gold=1, probs=[0.1, 0.9])] + base[1:]
    with pytest.raises(ValueError, match="other data, not a grown suite"):
        shared_questions(run, changed)


def test_by_split_counts_each_contrast_question_once_and_names_what_only_the_run_holds(tmp_path, capsys):
    """Break-test 2026-12-07: `compare --by-split` counted a contrast question's negated (nN) and choice (cN) twins,
    so its contrast figures (and n) differed from the eval report's; a split only the run held got no line; an empty
    records file read as 'not in the run' and 'another suite?'."""
    import json
    run, base = tmp_path / "run", tmp_path / "base"
    rows = {run: [_r("contrast", "q1", [0.9, 0.1], 0, source="contrast/p/0"),      # right
                  _r("contrast", "n1", [0.9, 0.1], 1, source="contrast/p/0"),      # twin, wrong: not counted
                  _r("contrast", "c1", [0.9, 0.1], 1, source="contrast/p/0"),      # twin, wrong: not counted
                  _r("realistic_fresh", "q1", [0.9, 0.1], 0)],
            base: [_r("contrast", "q1", [0.1, 0.9], 0, source="contrast/p/0"),
                   _r("contrast", "n1", [0.9, 0.1], 1, source="contrast/p/0"),
                   _r("contrast", "c1", [0.9, 0.1], 1, source="contrast/p/0")]}
    for d, rs in rows.items():
        d.mkdir()
        (d / "records.jsonl").write_text("\n".join(json.dumps(r) for r in rs) + "\n")
    assert main(["compare", str(run), "--baseline", str(base), "--by-split"]) == 0
    out = capsys.readouterr().out
    assert "  contrast: 1.000, minus baseline +1.000 [+1.000, +1.000], paired SE nan, n 1\n" in out
    assert "  realistic_fresh: not in the baseline" in out
    (tmp_path / "empty.jsonl").write_text("\n\n")
    assert main(["compare", str(tmp_path / "empty.jsonl"), "--baseline", str(base), "--by-split"]) == 2
    assert f"{tmp_path / 'empty.jsonl'}: holds no records" in capsys.readouterr().err
