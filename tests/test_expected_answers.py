"""scripts/expected_answers.py: the "expected answers matched" rule of docs/results/examples.md (no model)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from expected_answers import EXAMPLES, matches  # noqa: E402


def test_the_match_rule_of_each_type():
    assert matches({"type": "noul", "noul": 0.51}, True) == (True, "P(yes) 0.51")
    assert matches({"type": "noul", "noul": 0.5}, True)[0] is False          # 0.5 is not "yes"
    assert matches({"type": "noul", "noul": 0.2}, False)[0] is True
    choice = {"type": "choice", "choice": "b", "probabilities": {"a": 0.3, "b": 0.45, "c": 0.25}}
    assert matches(choice, "b") == (True, "b (0.45)") and matches(choice, "a")[0] is False
    # score: the most probable level, not the expected level Σ i·p_i (here 1.1, which would round to 1)
    score = {"type": "score", "score": 1.1, "probabilities": {"0": 0.45, "1": 0.0, "2": 0.55}}
    assert matches(score, 2) == (True, "level 2 (0.55)") and matches(score, 1)[0] is False


def test_every_expected_answer_names_a_question_of_its_example():
    meta = json.loads((EXAMPLES / "expected.meta.json").read_text())
    assert sum(len(e["_expected"]) for e in meta.values()) == 19
    for name, entry in meta.items():
        questions = json.loads((EXAMPLES / name).read_text())["questions"]
        for qid, expected in entry["_expected"].items():
            q = questions[qid]
            if q["type"] == "noul":
                assert isinstance(expected, bool)
            elif q["type"] == "choice":
                assert expected in q["criteria"]
            else:
                assert 0 <= expected < len(q["criteria"])
