"""The outcome store on both of its backends, SQLite and a real PostgreSQL server (issue 32 item 2): two
``kevlike serve`` processes recording into one store at once lose nothing and record nothing twice; two
connections writing the same key at once both land (the last wins); a missing driver or an unreachable server
is one line, not a traceback. ``store_url`` (tests/stores.py) gives each test an empty store of each backend."""

import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import func, select

from kevlike.eval.loadtest import free_port
from kevlike.service import feedback as fb
from kevlike.service.feedback import FeedbackStore, StoreBusy, UnknownRequest, report

from serving import wait_healthy
from stores import store_url  # noqa: F401  (the fixture)
from tiny import REQUEST, save_tiny_model

NOUL = [{"question_id": "q", "type": "noul", "probabilities": [0.7, 0.3], "temperature": 1.0,
         "option_keys": ["true", "false"]}]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny-store") / "llama")


def _call(port, method, path, body=None, headers=None, timeout=60):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers or {})
        r = conn.getresponse()
        raw = r.read()
        return r.status, json.loads(raw) if raw else None
    finally:
        conn.close()


def _start_servers(model_dir, url, n):
    """``n`` ``kevlike serve --record URL`` processes started at once (so they create the tables together)."""
    servers = []
    for _ in range(n):
        port = free_port()
        proc = subprocess.Popen([sys.executable, "-m", "kevlike", "serve", "--model", model_dir, "--port", str(port),
                                 "--threads", "1", "--log-level", "warning", "--record", url],
                                env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        servers.append((proc, port))
    wait_healthy(servers)
    return servers


def test_two_serve_processes_record_into_one_store_nothing_lost_nothing_twice(store_url, model_dir):
    servers = _start_servers(model_dir, store_url, 2)
    body = {k: v for k, v in REQUEST.items() if k != "model"}
    answered = {}                                      # request id -> (server index, response)
    lock = threading.Lock()

    def decide(job):
        s, i = job
        rid = f"s{s}-r{i}"
        status, out = _call(servers[s][1], "POST", "/v1/systemone", body, {"x-request-id": rid})
        assert status == 200, (status, out)
        with lock:
            answered[rid] = (s, out)

    try:
        with ThreadPoolExecutor(8) as pool:            # 4 clients per server, both servers at once
            list(pool.map(decide, [(s, i) for i in range(50) for s in (0, 1)]))
        assert len(answered) == 100
        with ThreadPoolExecutor(8) as pool:            # each outcome posted to the server that answered
            posted = list(pool.map(lambda rid: _call(servers[answered[rid][0]][1], "POST", "/v1/feedback",
                                                     {"request_id": rid, "outcomes": {"urgent": True}}), answered))
        assert {json.dumps(p, sort_keys=True) for p in posted} == {
            json.dumps([200, {"request_id": rid, "stored": 1}], sort_keys=True) for rid in answered}
        for _, port in servers:                        # each process reads the other's records
            status, rep = _call(port, "GET", "/v1/feedback/report")
            assert status == 200 and rep["overall"]["outcomes"] == 100 and rep["per_type"]["noul"]["outcomes"] == 100
    finally:
        for proc, _ in servers:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(60) for proc, _ in servers]
    assert codes == [0, 0], [proc.stdout.read().decode()[-2000:] for proc, _ in servers]

    store = FeedbackStore(store_url)
    with store.engine.connect() as conn:
        ids = sorted(r for (r,) in conn.execute(select(fb.requests_table.c.request_id)))
        per_request = dict(conn.execute(select(fb.answers_table.c.request_id, func.count())
                                        .group_by(fb.answers_table.c.request_id)).all())
        urgent = dict(conn.execute(select(fb.answers_table.c.request_id, fb.answers_table.c.probabilities)
                                   .where(fb.answers_table.c.question_id == "urgent")).all())
        n_outcomes = conn.execute(select(func.count()).select_from(fb.outcomes_table)).scalar()
    assert ids == sorted(answered)                     # every answered request once, nothing else
    assert per_request == {rid: len(REQUEST["questions"]) for rid in answered}
    for rid, (_, out) in answered.items():             # the record is the answer that was sent
        p = out["answers"]["urgent"]["noul"]
        assert json.loads(urgent[rid]) == [p, 1 - p]
    assert n_outcomes == 100
    assert report(store)["overall"]["outcomes"] == 100
    store.close()


def test_store_round_trip(store_url):
    store = FeedbackStore(store_url)
    long_id = "q" * 3000                                # no length cap on question ids (PostgreSQL enforces VARCHAR(n))
    answers = [*NOUL, dict(NOUL[0], question_id=long_id, type="choice", probabilities=[0.2, 0.5, 0.3],
                           option_keys=["a", "b", "c"], temperature=1.5)]
    store.record("r1", "M", answers)
    store.record("r2", "M@ops", NOUL)
    store.record("r3", "M_", NOUL)
    qs = store.questions("r1")
    assert sorted(qs) == sorted(["q", long_id]) and [o.key for o in qs[long_id].options] == ["a", "b", "c"]
    assert store.add_outcomes("r1", {"q": [1.0, 0.0], long_id: [0.0, 0.0, 1.0]}) == 2
    assert store.add_outcomes("r1", {"q": [0.0, 1.0]}) == 1            # replaced, not added
    assert store.add_outcomes("r2", {"q": [1.0, 0.0]}) == 1
    assert store.add_outcomes("r3", {"q": [1.0, 0.0]}) == 1
    with pytest.raises(UnknownRequest):
        store.add_outcomes("nope", {"q": [1.0, 0.0]})
    recs = sorted(store.records("M"), key=lambda r: (r["model"], r["type"]))
    assert [(r["model"], r["type"], r["gold"], r["probs"]) for r in recs] == [
        ("M", "choice", 2, [0.2, 0.5, 0.3]), ("M", "noul", 1, [0.7, 0.3]), ("M@ops", "noul", 0, [0.7, 0.3])]
    assert recs[0]["logits"] == pytest.approx([1.5 * __import__("math").log(x) for x in [0.2, 0.5, 0.3]])
    # an id recorded again once it has outcomes: the observed record stays, the new request is not stored
    assert store.record("r1", "M_", NOUL) is False
    assert sorted(store.questions("r1")) == sorted(["q", long_id])
    assert [(r["model"], r["gold"]) for r in sorted(store.records("M"), key=lambda r: (r["model"], r["type"]))] == [
        ("M", 2), ("M", 1), ("M@ops", 0)]
    # an id recorded again before any outcome (a client's retry): the latest answers replace the first
    assert store.record("r4", "M", answers) is True and store.record("r4", "M", NOUL) is True
    assert sorted(store.questions("r4")) == ["q"]
    assert report(store, "M_")["overall"] == {"outcomes": 1, "accuracy": 1.0, "ece": pytest.approx(0.3),
                                              "ece_bins": [0, 0, 0, 0, 0, 0, 0, 1, 0, 0], "confident_error": 0.0}
    store.close()


def test_two_connections_writing_one_key_at_once_both_land_last_wins(store_url):
    """Two stores (two engines: as two processes) record the same request id and post the same outcome at once;
    before, PostgreSQL failed one insert on the key (IntegrityError), a lost record or a 500."""
    stores = [FeedbackStore(store_url), FeedbackStore(store_url)]
    stores[0].record("r", "M", NOUL)
    errors = []

    def hammer(k):
        try:
            for i in range(15):
                stores[k].record("r", f"M{k}", NOUL)
                stores[k].add_outcomes("r", {"q": [float(k), 1.0 - k]})
        except Exception as e:   # noqa: BLE001 - the test reports any failure
            errors.append(e)

    threads = [threading.Thread(target=hammer, args=(k,)) for k in (0, 1) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    recs = stores[0].records()
    assert len(recs) == 1 and recs[0]["model"] in ("M0", "M1")
    with stores[0].engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(fb.requests_table)).scalar() == 1
        assert conn.execute(select(func.count()).select_from(fb.answers_table)).scalar() == 1
    for s in stores:
        s.close()


def test_a_missing_driver_or_an_unreachable_server_is_one_line():
    try:
        import MySQLdb  # noqa: F401
        pytest.skip("MySQLdb is installed here: mysql:// has its driver")
    except ImportError:
        pass
    with pytest.raises(ValueError) as e:               # before: a ModuleNotFoundError traceback
        FeedbackStore("mysql://u:p@127.0.0.1:1/db")
    assert str(e.value) == ("mysql://: its database driver 'MySQLdb' is not installed (PostgreSQL: pip install "
                            "\"psycopg[binary]\" and postgresql+psycopg://USER:PASSWORD@HOST/DB)")
    pytest.importorskip("psycopg")
    t0 = time.perf_counter()
    with pytest.raises(StoreBusy, match="the outcome store is busy or unreachable: connection failed: connection to "
                                        "server at \"127.0.0.1\", port 1 failed: Connection refused"):
        FeedbackStore("postgresql+psycopg://u:p@127.0.0.1:1/db?connect_timeout=5")
    assert time.perf_counter() - t0 < 10
