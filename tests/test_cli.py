"""`kevlike` console script: bad input exits 2 with one line and no traceback; a real decide run."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def run(*args, stdin: bytes | None = None):
    return subprocess.run([sys.executable, "-m", "kevlike", *args], input=stdin, capture_output=True, timeout=600)


@pytest.mark.parametrize("body", [b"{not json", b'{"state": "s", "questions": {}}',
                                  b'{"state": "s", "questions": {"a": {"type": "score", "instructions": "x", "criteria": {"0": "lo", "1": "hi"}}}}'])
def test_bad_request_exits_2_with_one_line(body):
    p = run("decide", "-", stdin=body)
    assert p.returncode == 2
    err = p.stderr.decode().strip()
    assert err.startswith("kevlike: error: invalid request:") and "\n" not in err and "Traceback" not in err
    assert p.stdout == b""


def test_missing_file_and_unknown_model_exit_2(tmp_path):
    p = run("decide", str(tmp_path / "nope.json"))
    assert p.returncode == 2 and "cannot read" in p.stderr.decode()
    req = tmp_path / "r.json"
    req.write_text(json.dumps({"state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}}))
    p = run("decide", str(req), "--model", str(tmp_path / "no-such-model"))
    assert p.returncode == 2 and "unknown model" in p.stderr.decode() and "Traceback" not in p.stderr.decode()


@pytest.mark.backbone
def test_decide_example_end_to_end(backbone_engine):
    path = ROOT / "examples" / "review.json"
    p = run("decide", str(path), "--compact")
    assert p.returncode == 0, p.stderr.decode()
    out = json.loads(p.stdout)
    assert out["model"] == "kevlike-default" and set(out["answers"]) == set(json.loads(path.read_text())["questions"])
    # the same answers through stdin, and the separate reference mode agrees
    p2 = run("decide", "-", "--mode", "separate", "--compact", stdin=path.read_bytes())
    from test_parity import max_abs_diff

    assert max_abs_diff(out, json.loads(p2.stdout)) <= 1e-5


def test_hub_id_without_hub_is_a_clear_error(tmp_path, monkeypatch):
    req = tmp_path / "r.json"
    req.write_text(json.dumps({"state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}}))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    p = run("decide", str(req), "--model", "HuggingFaceTB/SmolLM2-135M-Instruct")
    err = p.stderr.decode()
    assert p.returncode == 2 and "cannot load model 'HuggingFaceTB/SmolLM2-135M-Instruct'" in err, err
    assert "Traceback" not in err
