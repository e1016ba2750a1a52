"""Response assembly and confidence against hand-computed values (DESIGN §4 worked example)."""

import pytest

from kevlike.request.answers import answer, choice_confidence, score_confidence
from kevlike.request.schema import validate_request

from tiny import REQUEST

Q = {q.id: q for q in validate_request(REQUEST).questions}


def test_worked_example_choice():
    a = answer(Q["team"], [0.88, 0.05, 0.07])
    assert a["choice"] == "billing"
    assert a["probabilities"] == {"billing": 0.88, "sales": 0.05, "tech": 0.07}
    assert a["confidence"] == pytest.approx((0.88 - 1 / 3) / (2 / 3))
    assert round(a["confidence"], 2) == 0.82


def test_worked_example_score():
    a = answer(Q["anger"], [0.05, 0.59, 0.36])
    assert a["score"] == pytest.approx(0.59 + 2 * 0.36)  # 1.31
    assert a["legend"] == {"0": "Calm", "1": "Frustrated", "2": "Very angry"}
    assert a["probabilities"] == {"0": 0.05, "1": 0.59, "2": 0.36}
    # Σ p_i |i − 1| = 0.41, D = 2/3
    assert a["confidence"] == pytest.approx(1 - 0.41 / (2 / 3))
    assert round(a["confidence"], 3) == 0.385


def test_noul_is_p_true_without_confidence():
    assert answer(Q["urgent"], [0.91, 0.09]) == {"type": "noul", "noul": 0.91}


def test_confidence_extremes_and_ties():
    assert choice_confidence([1 / 3] * 3) == pytest.approx(0.0)
    assert choice_confidence([1.0, 0.0]) == pytest.approx(1.0)
    assert score_confidence([0.0, 1.0, 0.0]) == pytest.approx(1.0)
    assert score_confidence([0.5, 0.0, 0.5]) == 0.0  # clipped at 0: Σ p|i−0| = 1 > D
    # tie between levels 0 and 2: k = 0 (lowest index)
    assert score_confidence([0.4, 0.2, 0.4]) == pytest.approx(max(0.0, 1 - (0.2 + 0.8) / (2 / 3)))
    a = answer(Q["team"], [0.4, 0.4, 0.2])
    assert a["choice"] == "billing"  # ties: the first option


def test_score_confidence_even_levels():
    # n = 4: D = (1.5 + 0.5 + 0.5 + 1.5) / 4 = 1.0
    assert score_confidence([0.1, 0.7, 0.2, 0.0]) == pytest.approx(1 - (0.1 + 0.2) / 1.0)


def test_wrong_probability_count_raises():
    with pytest.raises(ValueError, match="3 options"):
        answer(Q["team"], [0.5, 0.5])
