"""scripts/unseen.py: the unseen-question aggregate of a generalization run (hand-computed)."""

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from unseen import unseen  # noqa: E402


def _r(split, question, probs, gold):     # a record as `kevlike eval` writes it (one-hot target)
    return {"split": split, "question": question, "probs": probs, "gold": gold,
            "target": [float(i == gold) for i in range(len(probs))], "type": "choice"}


def test_unseen_counts_each_contrast_question_once_and_skips_seen_wordings():
    recs = [_r("seen_wording", "x", [0.1, 0.9], 0),            # skipped
            _r("heldout_source", "x", [0.8, 0.2], 0),          # right, -log 0.8
            _r("bigbench", "x", [0.3, 0.3, 0.4], 1),           # wrong, -log 0.3
            _r("contrast", "q0", [0.6, 0.4], 0),               # right, -log 0.6
            _r("contrast", "n0", [0.6, 0.4], 1),               # twin: skipped
            _r("contrast_apart", "c0", [0.5, 0.5], 0)]         # twin: skipped
    n, acc, nll = unseen(recs)
    assert n == 3 and acc == pytest.approx(2 / 3)
    assert nll == pytest.approx(-(math.log(0.8) + math.log(0.3) + math.log(0.6)) / 3)
    with pytest.raises(ValueError, match="no unseen question"):
        unseen(recs[:1])
