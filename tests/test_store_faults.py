"""The service surfaces under real faults (a new user's break-test, 2026-12-04): the outcome store's URL, its file
removed while the server runs, a malformed row, ``/v1/feedback`` bodies the request parser refuses (duplicate keys,
depth, lone surrogates, huge numbers), ``x-request-id`` never replaced silently, the report's model name, and
``kevlike recalibrate`` checking its inputs before it reads (or creates) a database."""

import json
import logging
import sqlite3

import pytest

from kevlike.service.feedback import FeedbackStore, StoreLost, check_store_url, report

from test_feedback import NOUL, call, running
from tiny import REQUEST


@pytest.mark.parametrize("url, message", [
    ("sqlite://", "is an in-memory SQLite database"),
    ("sqlite:///", "is an in-memory SQLite database"),
    ("sqlite:///:memory:", "is an in-memory SQLite database"),
    ("notaurl", "is not a database URL"),
    ("/tmp/plain.db", "is not a database URL"),
])
def test_a_store_url_that_cannot_keep_outcomes_is_refused(url, message):
    with pytest.raises(ValueError, match=message):
        check_store_url(url)
    with pytest.raises(ValueError, match=message):
        FeedbackStore(url)


def test_a_missing_directory_or_file_is_named_and_nothing_is_created(tmp_path):
    url = f"sqlite:///{tmp_path}/nodir/x/f.db"
    with pytest.raises(ValueError, match=f"the directory '{tmp_path}/nodir/x' does not exist"):
        FeedbackStore(url)
    with pytest.raises(ValueError, match="no database file"):
        check_store_url(f"sqlite:///{tmp_path}/absent.db", must_exist=True)
    check_store_url(f"sqlite:///{tmp_path}/absent.db")          # serve --record creates it
    assert not (tmp_path / "absent.db").exists()
    (tmp_path / "text.db").write_text("not a database\n" * 100)
    with pytest.raises(ValueError, match=r"text\.db: file is not a database"):
        FeedbackStore(f"sqlite:///{tmp_path}/text.db")


def test_a_removed_store_file_is_store_lost_not_silent(tmp_path):
    db = tmp_path / "fb.db"
    store = FeedbackStore(f"sqlite:///{db}")
    store.record("r0", "M", NOUL)
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"fb.db{suffix}").unlink(missing_ok=True)
    with pytest.raises(StoreLost, match="was removed or replaced while the server ran"):
        store.record("r1", "M", NOUL)
    with pytest.raises(StoreLost):
        store.add_outcomes("r0", {"q": [1.0, 0.0]})
    assert not db.exists()                                       # nothing written into an unlinked file


def test_a_malformed_row_is_left_out_with_a_warning_not_a_500(tmp_path, caplog):
    db = tmp_path / "fb.db"
    store = FeedbackStore(f"sqlite:///{db}")
    for rid in ("r0", "r1", "r2"):
        store.record(rid, "M", NOUL)
        store.add_outcomes(rid, {"q": [1.0, 0.0]})
    con = sqlite3.connect(db)
    con.execute("UPDATE kevlike_answers SET probabilities='not json' WHERE request_id='r1'")
    con.execute("UPDATE kevlike_answers SET probabilities='[0.5, 0.3, 0.2]' WHERE request_id='r2'")   # wrong length
    con.commit()
    con.close()
    with caplog.at_level(logging.WARNING, logger="kevlike.service.feedback"):
        rep = report(store, "M")
    assert rep["overall"]["outcomes"] == 1 and rep["overall"]["accuracy"] == 1.0
    assert "2 recorded answer(s) with an outcome could not be read" in caplog.text


def test_feedback_and_request_id_over_http(tmp_path):
    from kevlike.config.server import ServerConfig
    from kevlike.service.server import create_app

    from tiny import make_engine

    eng = make_engine("llama")
    store = FeedbackStore(f"sqlite:///{tmp_path / 'fb.db'}")
    app = create_app({eng.name: eng}, eng.name, ServerConfig(), store=store)
    body = {k: v for k, v in REQUEST.items() if k != "model"}

    def raw(path, text, headers=None):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", path, body=text.encode("utf-8", "surrogatepass"), headers=headers or {})
        r = conn.getresponse()
        out = r.status, dict(r.getheaders()), json.loads(r.read())
        conn.close()
        return out

    with running(app) as port:
        st, headers, _ = call(port, "POST", "/v1/systemone", body, {"x-request-id": "L" * 128})
        assert st == 200 and headers["x-request-id"] == "L" * 128
        st, headers, out = call(port, "POST", "/v1/systemone", body, {"x-request-id": "L" * 129})
        assert st == 400 and out["detail"]["error_type"] == "invalid_request_id"
        assert "1-128 printable ASCII characters, got 129 characters" in out["detail"]["message"]
        assert len(headers["x-request-id"]) == 32                               # a fresh one, not the client's
        st, _, out = raw("/v1/systemone", json.dumps(body), {"x-request-id": "café-1".encode().decode("latin-1")})
        assert st == 400 and out["detail"]["error_type"] == "invalid_request_id"
        assert call(port, "POST", "/v1/systemone", body, {"x-request-id": "ok-1"})[0] == 200
        assert app.state.recorder.wait(timeout=10)
        for text, loc, kind in (
                ('{"request_id": "ok-1", "outcomes": {"\\ud800": true}}', ["body", "outcomes"], "string_unicode"),
                ('{"request_id": "\\udfff", "outcomes": {"urgent": true}}', ["body", "request_id"], "string_unicode"),
                ('{"request_id": "ok-1", "outcomes": {"urgent": true, "urgent": false}}', ["body", "outcomes", "urgent"],
                 "duplicate_key"),
                ('{"request_id": "ok-1", "outcomes": {"urgent": 1e400}}', ["body", "outcomes", "urgent"],
                 "number_out_of_range"),
                ("[" * 100_000 + "]" * 100_000, ["body"], "json_too_deep"),
                ('{"request_id": "ok-1", "outcomes": ' + "[" * 70 + "]" * 70 + "}", ["body", "outcomes"] + [0] * 63,
                 "json_too_deep"),
                ('{"request_id": "ok-1", "outcomes": ' + "[" * 2000 + "]" * 2000 + "}", ["body"], "json_too_deep")):
            st, _, out = raw("/v1/feedback", text)
            assert st == 422 and (out["detail"][0]["loc"], out["detail"][0]["type"]) == (loc, kind), (text[:60], out)
        st, _, out = call(port, "POST", "/v1/feedback", {"request_id": "ok-1", "outcomes": {"urgent": True}})
        assert (st, out) == (200, {"request_id": "ok-1", "stored": 1})
        st, _, rep = call(port, "GET", "/v1/feedback/report?model=jev-latest")      # an alias: its model's report
        assert st == 200 and rep["model"] == eng.name and rep["overall"]["outcomes"] == 1
        st, _, out = call(port, "GET", "/v1/feedback/report?model=nope")
        assert st == 404 and out["detail"]["message"].startswith("model 'nope' is not served here")
        assert call(port, "GET", "/health")[2]["x_store"] == {"status": "ok", "waiting": 0, "written": 2, "lost": 0}
        for suffix in ("", "-wal", "-shm"):
            (tmp_path / f"fb.db{suffix}").unlink(missing_ok=True)
        assert call(port, "POST", "/v1/systemone", body, {"x-request-id": "ok-2"})[0] == 200   # answers still flow
        assert not app.state.recorder.wait(timeout=1)
        health = call(port, "GET", "/health")[2]
        assert health["status"] == "degraded" and health["x_store"]["status"] == "failing"
        assert "was removed or replaced while the server ran" in health["x_store"]["error"]
        st, _, out = call(port, "POST", "/v1/feedback", {"request_id": "ok-1", "outcomes": {"urgent": False}})
        assert st == 503 and "was removed or replaced" in out["detail"]["message"]


def test_serve_refuses_a_store_that_cannot_work_before_loading(tmp_path):
    from kevlike.config.server import ServerConfig
    from kevlike.service.server import serve

    with pytest.raises(ValueError, match="^--record: 'sqlite://' is an in-memory SQLite database"):
        serve(["no-such-model"], ServerConfig(record="sqlite://"))
    with pytest.raises(ValueError, match="^--record-state keeps the state texts in the outcome store"):
        serve(["no-such-model"], ServerConfig(record_state=True))


def test_recalibrate_checks_its_inputs_before_any_database(tmp_path, capsys):
    from kevlike import cli

    absent = tmp_path / "nonexist.db"
    for argv, message in (
            (["--db", f"sqlite:///{absent}", "--profile", "p", "--min-count", "0"],
             "--min-count must be an integer >= 1, got 0"),
            (["--db", f"sqlite:///{absent}", "--profile", "../evil"], "--profile: profile name must be 1-64"),
            (["--db", f"sqlite:///{absent}", "--profile", "p"], f"--db: 'sqlite:///{absent}': no database file"),
            (["--db", "notaurl", "--profile", "p"], "--db: 'notaurl' is not a database URL")):
        assert cli.main(["recalibrate", *argv, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"kevlike: error: {message}") and err.count("\n") == 1, err
    assert not absent.exists()


def test_a_profile_directory_is_not_listed_as_a_profile(tmp_path):
    from kevlike.model.modeldir import list_profiles

    d = tmp_path / "profiles"
    d.mkdir()
    (d / "good.json").write_text("{}")
    (d / "bad16.json").mkdir()
    assert list_profiles(tmp_path, "m") == ["good"]
