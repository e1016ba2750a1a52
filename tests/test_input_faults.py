"""Inputs a user gets wrong, each one clear line (a new user's break-test of the own-data path and the CLI,
2026-12-04): labelled lines under the request's structural rules (repeated keys, a BOM, a non-UTF-8 line
named by its line), a ``cannot_tell`` option's distribution, costs files (1e3, a non-mapping entry, an id
that is no yes/no question), YAML configs and overrides that do not parse or repeat a key, a run whose
checkpoint cannot be read, flags checked before any model loads, NaN soup weights, records files that are
not a suite run, and a labelled line over the token budget named by its line."""

import io
import json
import sys

import pytest

from kevlike import cli
from kevlike.data.labelled import LabelledDataError, read_labelled
from kevlike.eval.owndata import answer_records, check_cost_questions, read_costs
from kevlike.training.config import ConfigError, load_config, load_run_config

from test_owndata import REQ, _write
from tiny import make_engine


def test_labelled_lines_follow_the_request_rules(tmp_path):
    good = json.dumps({"request": REQ, "gold": {"urgent": True}})
    p = tmp_path / "bom.jsonl"
    p.write_bytes(b"\xef\xbb\xbf" + good.encode() + b"\r\n" + good.encode() + b"\r\n")
    assert [it.line for it in read_labelled(p)] == [1, 2]                      # a BOM, CRLF: read
    for text, msg in (
            ('{"request": %s, "gold": {"urgent": true, "urgent": false}}' % json.dumps(REQ),
             ":1: gold.urgent: duplicate key 'urgent'"),
            ('{"request": %s, "gold": {"urgent": true}, "gold": {}}' % json.dumps(REQ), ":1: gold: duplicate key 'gold'"),
            ('{"request": %s, "gold": {"urgent": 1e400}}' % json.dumps(REQ), ":1: gold.urgent: number 1e400 is out of range")):
        p = tmp_path / "dup.jsonl"
        p.write_text(text + "\n")
        with pytest.raises(LabelledDataError) as e:
            read_labelled(p)
        assert str(e.value) == f"{p}{msg}" or str(e.value).startswith(f"{p}{msg}"), str(e.value)
    p = tmp_path / "latin.jsonl"
    p.write_bytes(((good + "\n") * 29).encode() + '{"request": {"state": "caf\xe9"}}\n'.encode("latin-1"))
    with pytest.raises(LabelledDataError, match=r"latin\.jsonl:30: \(line\): not UTF-8 text \(byte 27 of the line\)"):
        read_labelled(p)
    with pytest.raises(LabelledDataError, match="is a directory"):
        read_labelled(tmp_path)


def test_a_distribution_over_an_option_called_cannot_tell_is_a_distribution(tmp_path):
    req = {"state": "x", "questions": {"c": {"type": "choice", "instructions": "?",
                                            "criteria": {"cannot_tell": None, "other": None}}}}
    p = _write(tmp_path / "ct.jsonl", [{"request": req, "gold": {"c": {"cannot_tell": 0.3, "other": 0.7}}},
                                       {"request": req, "gold": {"c": {"cannot_tell": 1.0}}},
                                       {"request": req, "gold": {"c": {"cannot_tell": True}}}])
    items = read_labelled(p)
    assert items[0].gold["c"] == pytest.approx([0.3, 0.7]) and items[1].gold["c"] == [1.0, 0.0]
    assert items[2].cannot_tell == {"c"}                                       # the literal true: cannot tell


def test_costs_files(tmp_path):
    c = tmp_path / "c.json"
    c.write_text('{"default": {"false_positive": 1, "false_negative": 1e3}}')
    assert read_costs(c)["default"] == {"false_positive": 1.0, "false_negative": 1000.0}
    c.write_text("questions: {arrived: 5}\n")
    with pytest.raises(ValueError, match=r"questions\.arrived must be \{false_positive: X, false_negative: Y\}"):
        read_costs(c)
    c.write_text("default: {false_negative: 3}\nquestions: {arived: {false_negative: 20}, team: {}}\n")
    costs = read_costs(c)
    assert costs["questions"]["arived"] == {"false_positive": 1.0, "false_negative": 20.0}
    assert costs["questions"]["team"] == {"false_positive": 1.0, "false_negative": 3.0}   # the default's
    items = read_labelled(_write(tmp_path / "d.jsonl", [{"request": REQ, "gold": {"urgent": True}}]))
    with pytest.raises(ValueError, match="questions.arived: no yes/no question 'arived' in the labelled file "
                                         r"\(its yes/no questions: urgent\)"):
        check_cost_questions(costs, items, c)
    c.write_text("default: [1,\n")
    with pytest.raises(ValueError, match=r"^--costs .*c\.json: not valid YAML at line 2, column 1"):
        read_costs(c)


def test_yaml_configs_and_overrides_that_do_not_parse_or_repeat_a_key(tmp_path):
    with pytest.raises(ConfigError, match=r"^override 'optim=\{lr: 1e-4': not valid YAML at line 1"):
        load_config(None, ["optim={lr: 1e-4"])
    cfg = tmp_path / "c.yaml"
    cfg.write_text("seed: 0\nseed: 1\n")
    with pytest.raises(ConfigError, match=rf"^{cfg}: line 2: the key 'seed' appears twice in one mapping$"):
        load_config(cfg)
    cfg.write_text("optim: {lr: [1\n")
    with pytest.raises(ConfigError, match=rf"^{cfg}: not valid YAML at line 2"):
        load_config(cfg)
    assert load_config(None, ["optim.lr=1e-4"]).optim.lr == 1e-4
    with pytest.raises(ConfigError, match="not a run directory"):
        load_run_config(tmp_path)


def test_a_checkpoint_that_cannot_be_read_is_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    (run / "config.yaml").write_text("name: r\nmax_steps: 5\n")
    (run / "checkpoint" / "state.pt").write_bytes(b"")
    assert cli.main(["train", "--resume", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kevlike: error: --resume {run}: the checkpoint {run}/checkpoint/state.pt cannot be read "
                          f"(EOFError") and err.count("\n") == 1, err


@pytest.mark.parametrize("argv, message", [
    (["eval", "--data", "d.jsonl", "--batch", "0"], "--batch must be an integer >= 1, got 0"),
    (["calibrate", "m", "--batch", "-1"], "--batch must be an integer >= 1, got -1"),
    (["eval", "--data", "d.jsonl", "--n", "5"], "--n, --suite, --half and --splits go with a suite"),
    (["eval", "--data", "d.jsonl", "--half", "test"], "--n, --suite, --half and --splits go with a suite"),
    (["soup", "a", "b", "out", "--weights", "nan", "nan"], "finite, non-negative and sum to 1"),
])
def test_flags_refused_in_one_line_before_anything_loads(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "d.jsonl", [{"request": REQ, "gold": {"urgent": True}}])
    for m in ("a", "b"):
        (tmp_path / m).mkdir()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_decide_on_a_closed_stdin_and_compare_on_foreign_records(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", None)
    assert cli.main(["decide", "-"]) == 2
    assert "standard input is closed" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "records.jsonl").write_text("[1]\n")
    assert cli.main(["compare", str(tmp_path / "r1")]) == 2
    assert f"{tmp_path}/r1/records.jsonl:1: a record is a JSON object, got list" in capsys.readouterr().err
    (tmp_path / "r1" / "records.jsonl").write_text('{"split": "realistic", "type": "noul", "probs": [0.5, 0.5], "go')
    assert cli.main(["compare", str(tmp_path / "r1")]) == 2
    assert "records.jsonl:1: not JSON (Unterminated string" in capsys.readouterr().err


def test_a_labelled_line_over_the_token_budget_is_named_by_its_line(tmp_path):
    eng = make_engine("llama")
    long_req = {**REQ, "state": "lorem ipsum dolor sit amet " * 5000}
    p = _write(tmp_path / "long.jsonl", [{"request": REQ, "gold": {"urgent": True}},
                                          {"request": long_req, "gold": {"urgent": True}}])
    with pytest.raises(LabelledDataError, match=rf"^{p}:2: request\.state: state is at least \d+ tokens"):
        answer_records(eng, read_labelled(p), data_path=p)


def test_an_unknown_backbone_leaves_no_run_directory(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"name: orphan\nbackbone: {tmp_path}/nosuch\noutput_dir: {tmp_path}/runs\nmax_steps: 1\n")
    assert cli.main(["train", str(cfg), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kevlike: error: backbone: ") and "nosuch" in err, err
    assert not (tmp_path / "runs").exists()             # found before the accelerator or any run directory
