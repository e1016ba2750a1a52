"""Resumable generalization runs (kevlike/eval/resume.py, ``kevlike eval --resume RUN``): a run stopped after its
first split finishes with the same records and metrics as an unstopped one, answering only the unfinished split;
a resume of another call, a finished run, a changed split or an unreadable split file is refused by name."""

import json

import pytest

from kevlike.cli import main
from kevlike.eval import heldout
from kevlike.eval.resume import ResumeError, items_digest, split_file, weights_digest

from test_baselines import _examples
from tiny import make_engine


SECOND = _examples()[2].request["state"]          # the second split's first state


@pytest.fixture
def two_splits(monkeypatch):
    sets = {"seen_wording": _examples()[:2], "target/spam_balanced": _examples()[2:]}
    monkeypatch.setattr(heldout, "generalization_sets", lambda quick, n, bigbench, splits=None: dict(sets))
    return sets


def _records(run):
    return [json.loads(x) for x in (run / "records.jsonl").read_text().splitlines()]


def test_a_stopped_run_finishes_with_the_unstopped_runs_results(tmp_path, two_splits, monkeypatch):
    model, lm = make_engine("llama", "pointer"), make_engine("llama", "lm")
    whole = heldout.run_suite(None, "generalization-quick", tmp_path / "whole", engine=model, lm_engine=lm, quiet=True)

    answered = []
    real = heldout.records_from_logits

    def stop_at_the_second_split(engine, examples, *a, **k):
        if engine is model and examples[0].request["state"] == SECOND:
            raise KeyboardInterrupt                     # the session ends during the second split
        return real(engine, examples, *a, **k)

    monkeypatch.setattr(heldout, "records_from_logits", stop_at_the_second_split)
    with pytest.raises(KeyboardInterrupt):
        heldout.run_suite(None, "generalization-quick", tmp_path / "stopped", engine=model, lm_engine=lm, quiet=True)
    (run,) = (tmp_path / "stopped").iterdir()
    assert not (run / "metrics.json").exists() and (run / "call.json").is_file()
    assert split_file(run, "seen_wording").is_file() and not split_file(run, "target/spam_balanced").exists()
    assert split_file(run, "target/spam_balanced").name == "target__spam_balanced.json"

    def count(engine, examples, *a, **k):
        answered.append((engine is model, [e.request["state"] for e in examples]))
        return real(engine, examples, *a, **k)

    monkeypatch.setattr(heldout, "records_from_logits", count)
    done = heldout.run_suite(None, "generalization-quick", tmp_path / "unused", engine=model, lm_engine=lm,
                             quiet=True, resume=run)
    assert done == run and not (tmp_path / "unused").exists()
    # only the unfinished split is answered, by the model and by the LM baseline
    second = [e.request["state"] for e in _examples()[2:]]
    assert answered == [(True, second), (False, second)]
    assert _records(run) == _records(whole)
    got, want = (json.loads((r / "metrics.json").read_text()) for r in (run, whole))
    assert got["generalization"] == want["generalization"] and got["baselines"] == want["baselines"]
    assert set(got["meta"]["seconds"]) == set(want["meta"]["seconds"]) == {
        "seen_wording", "lm_readout:seen_wording", "target/spam_balanced", "lm_readout:target/spam_balanced"}
    assert got["meta"]["lm_baseline"] == want["meta"]["lm_baseline"]
    with pytest.raises(ResumeError, match="the run is finished"):
        heldout.run_suite(None, "generalization-quick", tmp_path, engine=model, lm_engine=lm, quiet=True, resume=run)


def _stopped_run(tmp_path, model, monkeypatch):
    real = heldout.records_from_logits

    def stop(engine, examples, *a, **k):
        if examples[0].request["state"] == SECOND:
            raise KeyboardInterrupt
        return real(engine, examples, *a, **k)

    monkeypatch.setattr(heldout, "records_from_logits", stop)
    with pytest.raises(KeyboardInterrupt):
        heldout.run_suite(None, "generalization-quick", tmp_path / "out", engine=model, lm_baseline=False, quiet=True)
    monkeypatch.setattr(heldout, "records_from_logits", real)
    (run,) = (tmp_path / "out").iterdir()
    return run


def test_resume_refuses_another_call_and_names_what_differs(tmp_path, two_splits, monkeypatch):
    model = make_engine("llama", "pointer")
    run = _stopped_run(tmp_path, model, monkeypatch)
    with pytest.raises(ResumeError, match=r"not the same call.*batch: the run has 4, this call 2"):
        heldout.run_suite(None, "generalization-quick", tmp_path, engine=model, lm_baseline=False, quiet=True,
                          batch_size=2, resume=run)
    with pytest.raises(ResumeError, match=r"half: the run has None, this call 'validation'"):
        heldout.run_suite(None, "generalization-quick", tmp_path, engine=model, lm_baseline=False, quiet=True,
                          half="validation", resume=run)
    with pytest.raises(ResumeError, match=r"lm_baseline: the run has False, this call True"):
        heldout.run_suite(None, "generalization-quick", tmp_path, engine=model, lm_engine=make_engine("llama", "lm"),
                          quiet=True, resume=run)
    # the suite's items changed since: the finished split is not read as if they had not
    two_splits["seen_wording"] = _examples()[1:3]
    with pytest.raises(ResumeError, match="split seen_wording's items differ"):
        heldout.run_suite(None, "generalization-quick", tmp_path, engine=model, lm_baseline=False, quiet=True,
                          resume=run)
    two_splits["seen_wording"] = _examples()[:2]
    split_file(run, "seen_wording").write_text('{"split": "seen_wor')       # a truncated file
    with pytest.raises(ResumeError, match="seen_wording.json is unreadable"):
        heldout.run_suite(None, "generalization-quick", tmp_path, engine=model, lm_baseline=False, quiet=True,
                          resume=run)
    with pytest.raises(ResumeError, match="no call.json"):
        heldout.run_suite(None, "generalization-quick", tmp_path, engine=model, resume=tmp_path)
    with pytest.raises(ValueError, match="resume goes with a generalization suite"):
        heldout.run_suite(None, "heldout", tmp_path, engine=model, resume=run)


def test_splits_in_another_order_are_the_same_call(tmp_path):
    """--resume refused `--splits b,a` for a run started with `--splits a,b`: the same run."""
    import json

    from kevlike.eval.resume import check_same_call

    (tmp_path / "splits").mkdir()
    (tmp_path / "call.json").write_text(json.dumps({"splits": ["realistic", "absurd"], "batch": 4}))
    check_same_call(tmp_path, {"splits": ["absurd", "realistic"], "batch": 4})
    with pytest.raises(ResumeError, match=r"batch: the run has 4, this call 2"):
        check_same_call(tmp_path, {"splits": ["absurd", "realistic"], "batch": 2})
    with pytest.raises(ResumeError, match=r"splits: the run has \['realistic', 'absurd'\], this call \['absurd'\]"):
        check_same_call(tmp_path, {"splits": ["absurd"], "batch": 4})


def test_digests_change_with_a_byte_of_the_weights_or_an_item(tmp_path):
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "w.safetensors").write_bytes(b"\x00\x01")
    (tmp_path / "calibration.json").write_text("{}")
    before = weights_digest(tmp_path)
    assert before == weights_digest(tmp_path) and weights_digest(None) is None
    (tmp_path / "calibration.json").write_text('{"a": 1}')
    assert weights_digest(tmp_path) != before
    exs = _examples()
    assert items_digest(exs) == items_digest(_examples())
    exs[3].targets["a"] = [0.0, 1.0]
    assert items_digest(exs) != items_digest(_examples())


def test_the_command_line_refuses_a_resume_it_cannot_do(tmp_path, capsys):
    assert main(["eval", "--resume", str(tmp_path / "nope"), "--suite", "generalization"]) == 2
    assert "--resume " + str(tmp_path / "nope") + ": not a directory" in capsys.readouterr().err
    assert main(["eval", "--resume", str(tmp_path), "--suite", "heldout"]) == 2
    assert "--resume goes with --suite generalization" in capsys.readouterr().err
    assert main(["eval", "--resume", str(tmp_path), "--reuse", str(tmp_path), "--suite", "generalization"]) == 2
    assert "not both" in capsys.readouterr().err
    (tmp_path / "call.json").write_text("{}")
    (tmp_path / "metrics.json").write_text("{}")
    assert main(["eval", "--resume", str(tmp_path), "--suite", "generalization"]) == 2
    assert "the run is finished (it has metrics.json); --reuse" in capsys.readouterr().err


def test_an_out_folder_that_cannot_be_written_is_named_before_the_model_loads(tmp_path, capsys, monkeypatch):
    """`eval --data mine.jsonl --out /read-only/dir` failed only after the whole evaluation (break-test 2026-12-07).
    Root passes os.access's mode checks, so the read-only folder is simulated."""
    import os

    from kevlike import runs

    real = os.access
    monkeypatch.setattr(runs.os, "access", lambda p, mode: False if str(p) == str(tmp_path) else real(p, mode))
    assert main(["eval", "--suite", "generalization-quick", "--out", str(tmp_path / "new" / "runs")]) == 2
    err = capsys.readouterr().err
    assert f"--out {tmp_path / 'new' / 'runs'}: {tmp_path} cannot be written" in err
    assert not (tmp_path / "new").exists()


def test_a_resume_or_reuse_it_cannot_do_is_refused_before_any_split_is_answered(tmp_path, capsys, monkeypatch):
    """Break-test 2026-12-07: `--resume` into a read-only run folder answered the remaining splits and only then
    failed writing; `--reuse` of an `eval --data` run crashed with a KeyError traceback, of a run whose records.jsonl
    is empty wrote an empty 'rescored' run, and of a cut-off metrics.json named no file. Root passes os.access's mode
    checks, so the read-only folder is simulated."""
    import json
    import os

    from kevlike import runs

    run = tmp_path / "run"
    (run / "splits").mkdir(parents=True)
    (run / "call.json").write_text("{}")
    real = os.access
    monkeypatch.setattr(runs.os, "access", lambda p, mode: False if str(p) == str(run / "splits") else real(p, mode))
    assert main(["eval", "--resume", str(run), "--suite", "generalization"]) == 2
    assert f"{run / 'splits'} cannot be written (a read-only directory" in capsys.readouterr().err
    monkeypatch.setattr(runs.os, "access", real)

    data_run = tmp_path / "data_run"                          # what `eval --data` writes: no suite in its meta
    data_run.mkdir()
    (data_run / "metrics.json").write_text(json.dumps({"meta": {"data": "mine.jsonl"}}))
    (data_run / "records.jsonl").write_text('{"type": "noul", "logits": [0, 0], "gold": 0}\n')
    empty = tmp_path / "empty_run"
    empty.mkdir()
    (empty / "metrics.json").write_text(json.dumps({"meta": {"suite": "generalization-quick"}}))
    (empty / "records.jsonl").write_text("\n")
    cut = tmp_path / "cut_run"
    cut.mkdir()
    (cut / "metrics.json").write_text('{"meta": {"suite": "gen')
    (cut / "records.jsonl").write_text("")
    for reuse, said in ((data_run, "not a suite run (its metrics.json names no suite"),
                        (empty, "records.jsonl holds no records"), (cut, "metrics.json is not JSON")):
        assert main(["eval", "--reuse", str(reuse), "--out", str(tmp_path / "out"), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("kevlike: error: ") and said in err and err.count("\n") == 1, err
    # --suite, --n and --probes of another run were accepted and ignored (break-test 2026-12-07)
    for extra, said in ((["--suite", "heldout"], f"--suite heldout: {empty} is a run of suite 'generalization-quick', "
                                                 f"and --reuse re-scores it as that suite"),
                        (["--n", "5"], "--n and --probes go with a new run"),
                        (["--probes", "3"], "--n and --probes go with a new run")):
        assert main(["eval", "--reuse", str(empty), *extra, "--out", str(tmp_path / "out"), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("kevlike: error: ") and said in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
