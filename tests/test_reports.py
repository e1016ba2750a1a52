"""`GET /v1/feedback/report` (issue 32): its figures are those of kevlike.metrics, computed in one pass (a report
over 3,000 outcomes took 7 s, 9,000 took 17.6 s: a bootstrap the report never showed), and report polls run on
a thread of their own, so however long they take, decisions are still tokenized and answered."""

import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from kevlike.metrics import summary
from kevlike.service import feedback as fb
from kevlike.service.feedback import FeedbackStore, report

from stores import store_url  # noqa: F401  (the fixture: a SQLite file, then a PostgreSQL database)
from test_feedback import call, running
from tiny import REQUEST

TYPES = [("noul", 2), ("choice", 3), ("score", 5)]


def fill(store: FeedbackStore, n_requests: int, model: str = "m", seed: int = 0) -> None:
    """``n_requests`` recorded requests of ``model``, three questions each, every one with an outcome."""
    rng = random.Random(seed)
    rows, outs = [], []
    for i in range(n_requests):
        for q, (typ, k) in enumerate(TYPES):
            p = [rng.random() ** 3 for _ in range(k)]
            p = [x / sum(p) for x in p]
            if i % 50 == 0:
                p = [0.5, 0.5] + [0.0] * (k - 2)   # ties: the lowest index is the top label
            rows.append({"request_id": f"r{i}", "question_id": f"q{q}", "type": typ, "probabilities": json.dumps(p),
                         "temperature": 1.0, "option_keys": json.dumps([str(j) for j in range(k)])})
            t = [0.0] * k
            t[rng.randrange(k)] = 1.0
            outs.append({"request_id": f"r{i}", "question_id": f"q{q}", "target": json.dumps(t), "created_at": 0.0})
    with store.engine.begin() as conn:
        conn.execute(fb.requests_table.insert(), [{"request_id": f"r{i}", "model": model, "created_at": 0.0,
                                                   "state": None} for i in range(n_requests)])
        conn.execute(fb.answers_table.insert(), rows)
        conn.execute(fb.outcomes_table.insert(), outs)


def test_the_report_is_metrics_summary_in_one_pass(store_url):
    store = FeedbackStore(store_url)
    fill(store, 3000)
    t0 = time.perf_counter()
    rep = report(store, "m")
    took = time.perf_counter() - t0
    recs = store.records("m")

    def want(rs):
        s = summary(rs)
        return {"outcomes": s["n"], "accuracy": s["accuracy"], "ece": s["ece"], "ece_bins": s["ece_bins"],
                "confident_error": s["confident_error"]}
    assert rep["overall"] == want(recs) and rep["overall"]["outcomes"] == 9000
    assert rep["per_type"] == {t: want([r for r in recs if r["type"] == t]) for t, _ in TYPES}
    assert 0 < rep["overall"]["confident_error"] < rep["overall"]["accuracy"] < 1
    assert took < 3.0, took      # 9,000 outcomes: ~0.3 s (was 10-17 s)
    assert report(store, "other") == {"model": "other", "overall": {"outcomes": 0}, "per_type": {}}


def test_report_polls_never_hold_the_decisions_tokenization(tmp_path):
    """32 report polls whose query does not return (a locked or slow store) hold the report thread, never the
    executor that tokenizes decisions: a decision is answered meanwhile, and then every poll is."""
    from kevlike.config.server import ServerConfig
    from kevlike.service.server import create_app

    from tiny import make_engine

    eng = make_engine("llama")
    store = FeedbackStore(f"sqlite:///{tmp_path / 'fb.db'}")
    fill(store, 20, model=eng.name)
    release = threading.Event()
    records = store.counted_records

    def slow_records(model=None):
        release.wait(60)
        return records(model)
    store.counted_records = slow_records
    app = create_app({eng.name: eng}, eng.name, ServerConfig(), store=store)
    body = {k: v for k, v in REQUEST.items() if k != "model"}
    with running(app) as port, ThreadPoolExecutor(32) as pool:
        assert call(port, "POST", "/v1/systemone", body)[0] == 200
        polls = [pool.submit(call, port, "GET", f"/v1/feedback/report?model={eng.name}") for _ in range(32)]
        time.sleep(0.5)
        t0 = time.perf_counter()
        status, _, out = call(port, "POST", "/v1/systemone", body)    # before: waited for the reports (48 s)
        assert status == 200 and set(out["answers"]) == set(REQUEST["questions"])
        assert time.perf_counter() - t0 < 10
        assert not any(p.done() for p in polls)                        # the reports are still held
        release.set()
        for p in polls:
            st, _, rep = p.result(60)
            assert st == 200 and rep["overall"]["outcomes"] == 60
