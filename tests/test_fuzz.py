"""``kevlike fuzz`` on 200 hostile requests against the tiny random model (the
full run is 10,000: see the module's docstring)."""

import json

from kevlike.cli import main
from kevlike.eval.fuzz import CATEGORIES, case_category, enc, make_case


def test_fuzz_200_requests_no_5xx_and_documented_error_shapes(tmp_path, capsys):
    a, b = make_case(3, 17), make_case(3, 17)  # request i of a seed is rebuilt alone, identically
    assert (a.category, a.body, a.headers) == (b.category, b.body, b.headers)
    assert {case_category(0, i) for i in range(2000)} == set(CATEGORIES)
    assert json.loads(enc({"a": [1, None, "é"]})) == {"a": [1, None, "é"]}

    run = tmp_path / "run"
    code = main(["fuzz", "--n", "200", "--seed", "0", "--workers", "4", "--in-process", "--no-progress", "--out", str(run)])
    s = json.loads((run / "summary.json").read_text())
    detail = json.dumps({k: s[k] for k in ("status_histogram", "examples_5xx", "examples_transport", "examples_shape")},
                        indent=1, ensure_ascii=False)
    assert s["n"] == 200 and sum(s["status_histogram"].values()) == 200
    assert s["count_5xx"] == 0, detail
    assert s["transport_errors"] == 0, detail  # a dropped connection is worse than a 5xx
    assert s["shape_violations"] == 0, detail
    assert s["health_failures"] == 0 and s["health"][-1] == {"after": 200, "status": 200}
    assert s["status_histogram"].get("200", 0) > 0 and s["status_histogram"].get("422", 0) > 0
    assert code == 0 and "PASSED" in capsys.readouterr().out
    assert len((run / "results.jsonl").read_text().splitlines()) == 200
