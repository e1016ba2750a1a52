"""The service surfaces under real faults (a new user's break-test, 2026-12-04): the outcome store's URL, its file
removed while the server runs, a malformed row, ``/v1/feedback`` bodies the request parser refuses (duplicate keys,
depth, lone surrogates, huge numbers), ``x-request-id`` never replaced silently, the report's model name, and
``kevlike recalibrate`` checking its inputs before it reads (or creates) a database; and (break-tests of 2026-12-05)
a damaged or altered store, constraints and triggers it does not define, a read-only file system, a path ending in
'/', profile names, a full disk, and `serve` without --model."""

import json
import logging
import shutil
import sqlite3

import pytest

from kevlike.service.feedback import FeedbackStore, Recorder, StoreBroken, StoreLost, check_store_url, report

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


def test_a_removed_wal_or_shm_file_is_store_lost(tmp_path):
    """Deleting a live store's -wal and -shm took every record with it while /health said ok (break-test
    2026-12-05): a held connection keeps SQLite from removing them itself, so a change is someone else's."""
    for gone in ("-wal", "-shm"):
        db = tmp_path / f"fb{gone}.db"
        store = FeedbackStore(f"sqlite:///{db}")
        store.record("r0", "M", NOUL)
        store.record("r1", "M", NOUL)                # the files stay in place between writes
        (tmp_path / f"fb{gone}.db{gone}").unlink()
        with pytest.raises(StoreLost, match=f"{gone[1:]} file .* was removed or replaced while the server ran") as e:
            store.record("r2", "M", NOUL)
        assert not e.value.transient


def _corrupt(db, pages=range(1, 4)):
    """Overwrite pages of a checkpointed SQLite file with noise (page 0, the header, stays)."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.close()
    size = 4096
    with open(db, "r+b") as f:
        for p in pages:
            f.seek(p * size)
            f.write(bytes((i * 7 + p) % 251 for i in range(size)))


def test_a_damaged_store_is_refused_at_start_and_store_broken_while_open(tmp_path):
    db = tmp_path / "fb.db"
    store = FeedbackStore(f"sqlite:///{db}")
    for rid in ("r0", "r1", "r2"):
        store.record(rid, "M", NOUL)
    _corrupt(db)
    with pytest.raises(StoreBroken, match="the outcome store is damaged") as e:   # not a 500, not "busy"
        store.record("r3", "M", NOUL)
    assert not e.value.transient
    with pytest.raises(StoreBroken):
        report(store, "M")
    with pytest.raises(ValueError, match=r"fb\.db: (the file is damaged \(PRAGMA quick_check|database disk image is "
                                         r"malformed)"):
        FeedbackStore(f"sqlite:///{db}")
    with pytest.raises(ValueError, match="damaged|malformed"):
        FeedbackStore(f"sqlite:///{db}", create=False)


def test_tables_without_the_stores_columns_are_refused_and_store_broken_when_dropped(tmp_path):
    db = tmp_path / "fb.db"
    con = sqlite3.connect(db)
    con.execute("create table kevlike_requests (request_id varchar(128) primary key, model text not null, "
                "created_at float not null)")
    con.commit()
    con.close()
    with pytest.raises(ValueError, match="table kevlike_requests has no column state: not an outcome store of this "
                                         "version"):
        FeedbackStore(f"sqlite:///{db}")
    store = FeedbackStore(f"sqlite:///{tmp_path / 'ok.db'}")
    store.record("r0", "M", NOUL)
    con = sqlite3.connect(tmp_path / "ok.db")
    con.execute("drop table kevlike_outcomes")
    con.commit()
    con.close()
    with pytest.raises(StoreBroken, match="tables are not the store's .*no such table: kevlike_outcomes"):
        store.add_outcomes("r0", {"q": [1.0, 0.0]})
    # the recorder keeps what it cannot write, and says why (health: failing)
    rec = Recorder(store, capacity=4, retry_s=0.01)
    con = sqlite3.connect(tmp_path / "ok.db")
    con.execute("drop table kevlike_answers")
    con.commit()
    con.close()
    rec.reserve()
    rec.submit("r1", "M", NOUL)
    assert not rec.wait(timeout=0.5) and rec.pending() == 1 and rec.failed == 0
    assert "tables are not the store's" in rec.last_error
    assert rec.close(timeout=0.1) == 1


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
    assert rep["unreadable"] == 2                       # in the answer itself, not only in the server's log
    assert "2 recorded answer(s) with an outcome could not be read" in caplog.text
    assert "unreadable" not in report(store, "nobody")


def test_damaged_numbers_are_counted_unreadable_not_read_as_outcomes(tmp_path):
    """A row whose numbers were damaged after it was written (the store's own writes never make these): a NaN
    x_abstain used to hang the report in auroc's tie loop, 1e308 probabilities made ece raise (HTTP 500), and a
    target [NaN, 1] or [0, 9] was read as an outcome, flipping its gold. Each is left out and counted."""
    db = tmp_path / "fb.db"
    store = FeedbackStore(f"sqlite:///{db}")
    with_x = [dict(NOUL[0], x_abstain=0.2)]
    for i in range(7):
        store.record(f"r{i}", "M", with_x)
        store.add_outcomes(f"r{i}", {"q": [1.0, 0.0]})
    con = sqlite3.connect(db)
    damage = {"r1": ("probabilities", "replace(probabilities, '0.2', 'NaN')"),     # x_abstain NaN
              "r2": ("probabilities", "replace(probabilities, '0.2', '1e308')"),   # x_abstain out of [0, 1]
              "r3": ("probabilities", "replace(probabilities, '[0.7, 0.3]', '[1e308, 1e308]')"),
              "r4": ("target", "'[NaN, 1.0]'"), "r5": ("target", "'[0.0, 9.0]'")}
    for rid, (col, expr) in damage.items():
        table = "kevlike_answers" if col == "probabilities" else "kevlike_outcomes"
        assert con.execute(f"UPDATE {table} SET {col}={expr} WHERE request_id=?", (rid,)).rowcount == 1
    con.commit()
    con.close()
    records, unreadable = store.counted_records("M")
    assert unreadable == 5 and len(records) == 2
    assert [r["gold"] for r in records] == [0, 0] and [r["x_abstain"] for r in records] == [0.2, 0.2]
    rep = report(store, "M")                             # returns (it used to hang or raise)
    assert rep["unreadable"] == 5 and rep["overall"]["outcomes"] == 2


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

    def raw_headers(path, text, headers):
        import http.client
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.putrequest("POST", path)
        for k, v in [*headers, ("content-type", "application/json"), ("content-length", str(len(text)))]:
            conn.putheader(k, v)
        conn.endheaders(text.encode())
        r = conn.getresponse()
        out = r.status, json.loads(r.read())
        conn.close()
        return out

    with running(app) as port:
        st, headers, _ = call(port, "POST", "/v1/systemone", body, {"x-request-id": "L" * 128})
        assert st == 200 and headers["x-request-id"] == "L" * 128
        st, headers, out = call(port, "POST", "/v1/systemone", body, {"x-request-id": "L" * 129})
        assert st == 400 and out["detail"]["error_type"] == "invalid_request_id"
        assert "1-128 printable ASCII characters; it is 129 bytes" in out["detail"]["message"]
        assert len(headers["x-request-id"]) == 32                               # a fresh one, not the client's
        st, _, out = raw("/v1/systemone", json.dumps(body), {"x-request-id": "café-1".encode().decode("latin-1")})
        assert st == 400 and out["detail"]["error_type"] == "invalid_request_id"
        assert "'café-1'" in out["detail"]["message"]                          # as the client wrote it
        for sent in ([("x-request-id", "")], [("x-request-id", "a"), ("x-request-id", "b")]):
            st, out = raw_headers("/v1/systemone", json.dumps(body), sent)   # empty, or twice: never guessed
            assert st == 400 and out["detail"]["error_type"] == "invalid_request_id", out
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
        st, _, out = call(port, "GET", "/v1/feedback/report?model=" + "n" * 100_000)   # quoted, not echoed whole
        assert st == 404 and len(out["detail"]["message"]) <= 300
        st, _, out = call(port, "GET", f"/v1/feedback/report?model={eng.name}&model=nope")
        assert st == 422 and out["detail"][0]["loc"] == ["query", "model"] and "2 times" in out["detail"][0]["msg"]
        st, _, out = call(port, "POST", "/v1/feedback", {"request_id": "ok-1", "outcomes": {"q" * 100_000: True}})
        assert st == 422 and len(json.dumps(out)) < 1000                        # the key is clipped in loc and msg
        assert call(port, "GET", "/health")[2]["x_store"] == {"status": "ok", "waiting": 0, "written": 2, "lost": 0}
        for suffix in ("", "-wal", "-shm"):
            (tmp_path / f"fb.db{suffix}").unlink(missing_ok=True)
        assert call(port, "POST", "/v1/systemone", body, {"x-request-id": "ok-2"})[0] == 200   # answers still flow
        assert not app.state.recorder.wait(timeout=1)
        health = call(port, "GET", "/health")[2]
        assert health["status"] == "degraded" and health["x_store"]["status"] == "failing"
        assert "was removed or replaced while the server ran" in health["x_store"]["error"]
        st, headers, out = call(port, "POST", "/v1/feedback", {"request_id": "ok-1", "outcomes": {"urgent": False}})
        assert st == 503 and "was removed or replaced" in out["detail"]["message"]
        assert "Retry-After" not in headers and "retry later" not in out["detail"]["message"]   # a retry cannot help
        st, _, out = call(port, "POST", "/v1/feedback", {"request_id": "ok-2", "outcomes": {"urgent": False}})
        assert st == 503 and "was removed or replaced" in out["detail"]["message"]     # not "busy"
        st, _, out = call(port, "GET", "/v1/feedback/report")                 # no stale figures from the lost file
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


def test_a_profile_directory_is_not_listed_as_a_profile_but_a_dangling_link_is_refused(tmp_path):
    from kevlike.model.modeldir import list_profiles, load_temperatures
    from kevlike.model.temperatures import ProfileError

    d = tmp_path / "profiles"
    d.mkdir()
    (d / "good.json").write_text("{}")
    (d / "bad16.json").mkdir()
    assert list_profiles(tmp_path, "m") == ["good"]
    (d / "ops.json").symlink_to(tmp_path / "gone.json")
    assert list_profiles(tmp_path, "m") == ["good", "ops"]        # listed, so that reading it refuses it
    with pytest.raises(ProfileError, match="ops.json: cannot read"):
        load_temperatures(d / "ops.json")
    from kevlike.model.modeldir import existing_profile_path       # `decide --profile ops`: not "no such profile"
    with pytest.raises(ValueError, match="ops.json is a link to .*gone.json', which cannot be read"):
        existing_profile_path(tmp_path, "m", "ops")
    # files whose names are no profile name are not served: serve names them in a warning (they were skipped unsaid)
    from kevlike.model.modeldir import unnamed_profile_files
    for name in ("ops team.json", "-x.json", "é.json"):
        (d / name).write_text("{}")
    assert [p.name for p in unnamed_profile_files(tmp_path, "m")] == ["-x.json", "ops team.json", "é.json"]
    assert list_profiles(tmp_path, "m") == ["good", "ops"]


def test_a_profile_with_a_key_written_twice_is_refused(tmp_path):
    from kevlike.model.modeldir import load_temperatures
    from kevlike.model.temperatures import ProfileError

    p = tmp_path / "dup.json"
    p.write_text('{"format": 1, "temperatures": {"noul": 0.05, "noul": 5.7}}')
    with pytest.raises(ProfileError, match="dup.json: key 'noul' appears more than once"):
        load_temperatures(p)


def test_store_urls_never_show_a_password_and_odd_sqlite_urls_are_named(tmp_path):
    from kevlike.service.feedback import shown_url

    assert shown_url("postgresql+psycopg://bob:hunter2@127.0.0.1:1/x") == "postgresql+psycopg://bob:***@127.0.0.1:1/x"
    assert "hunter2" not in shown_url("postgresql://bob@127.0.0.1:1/x?sslmode=disable&password=hunter2")
    assert shown_url("bob:hunter2@host") == "bob:hunter2@host"                 # not a URL: nothing to mask
    assert "hunter2" not in shown_url("weird://bob:hunter2@h:notaport/x")
    with pytest.raises(ValueError, match="is not a database URL") as e:
        check_store_url("postgresql://bob:hunter2@h:notaport/x")
    assert "hunter2" not in str(e.value)
    (tmp_path / "adir.db").mkdir()
    with pytest.raises(ValueError, match="adir.db' is a directory, not a database file"):
        check_store_url(f"sqlite:///{tmp_path}/adir.db")
    with pytest.raises(ValueError, match=r"SQLite URL options \(mode\) are not used"):
        check_store_url(f"sqlite:///{tmp_path}/x.db?mode=ro")
    with pytest.raises(ValueError, match=r"SQLite URL options \(\?\) are not used"):      # was: a file named q
        check_store_url(f"sqlite:///{tmp_path}/q?.db")
    with pytest.raises(ValueError, match=r"URI file names \(file:…\) are not used .*: sqlite:///x2.db$"):
        check_store_url("sqlite:///file:x2.db")                   # was: a file named "file:x2.db" and an empty x2.db
    with pytest.raises(ValueError, match=f"give the path alone: sqlite:///{tmp_path}/x.db$"):
        check_store_url(f"sqlite:///file:{tmp_path}/x.db")


def test_recalibrate_never_prints_a_password_and_refuses_an_alias(tmp_path, capsys):
    from kevlike import cli

    assert cli.main(["recalibrate", "--db", "postgresql+psycopg://bob:hunter2@127.0.0.1:1/x", "--profile", "p",
                     "--quiet"]) != 0
    err = capsys.readouterr().err
    assert "hunter2" not in err and "bob:***@" in err, err
    db = tmp_path / "fb.db"
    FeedbackStore(f"sqlite:///{db}").record("r0", "M", NOUL)
    assert cli.main(["recalibrate", "--db", f"sqlite:///{db}", "--model", "jev-latest", "--profile", "p"]) == 2
    assert "an alias of a server's default model" in capsys.readouterr().err


def test_feedback_waits_for_another_replicas_record_and_never_reads_a_huge_chunked_body(tmp_path):
    """Replicas share a store: feedback that reaches this one for a request another one answered a moment ago
    waits for that record (2 of 16 such posts got a final 404 before); an unknown id still gets its 404, after the
    grace. A chunked body past the limit is a 413 as soon as the limit is passed (it was read whole: 1 GB took
    2.5 GB of memory)."""
    import http.client
    import threading
    import time

    from kevlike.config.server import ServerConfig
    from kevlike.service.server import REPLICA_GRACE_S, create_app

    from tiny import make_engine

    eng = make_engine("llama")
    url = f"sqlite:///{tmp_path / 'fb.db'}"
    app = create_app({eng.name: eng}, eng.name, ServerConfig(), store=FeedbackStore(url))
    other = FeedbackStore(url)                                  # another replica's connection to the same file
    with running(app) as port:
        late = threading.Timer(0.5, lambda: other.record("late-1", "M", NOUL))
        late.start()
        st, _, out = call(port, "POST", "/v1/feedback", {"request_id": "late-1", "outcomes": {"q": True}})
        late.join()
        assert (st, out) == (200, {"request_id": "late-1", "stored": 1})
        t0 = time.monotonic()
        st, _, out = call(port, "POST", "/v1/feedback", {"request_id": "never", "outcomes": {"q": True}})
        assert st == 404 and time.monotonic() - t0 >= REPLICA_GRACE_S
        sent = [0]

        def chunks():
            yield b'{"request_id": "late-1", "outcomes": {"q": "'
            for _ in range(64):                               # 64 MiB offered; the limit is 8 MiB
                sent[0] += 1
                yield b"a" * (1 << 20)
            yield b'"}}'
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            conn.request("POST", "/v1/feedback", body=chunks(), headers={"content-type": "application/json"},
                         encode_chunked=True)
            r = conn.getresponse()
            assert r.status == 413 and "exceeds the limit" in json.loads(r.read())["detail"]["message"]
        except (BrokenPipeError, ConnectionResetError):       # the server answered and closed mid-upload
            assert sent[0] < 64
        finally:
            conn.close()


def test_a_profile_that_cannot_be_written_is_named_before_the_fit_and_leaves_no_stray_file(tmp_path):
    from kevlike.model.modeldir import check_profile_target, save_profile
    from kevlike.model.temperatures import TemperatureTable

    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "dirp.json").mkdir()
    with pytest.raises(ValueError, match="cannot write profile 'dirp': .*dirp.json is a directory"):
        check_profile_target(tmp_path, "m", "dirp")
    with pytest.raises(OSError):
        save_profile(tmp_path, "m", "dirp", TemperatureTable(by_type={"noul": 1.0}))
    assert sorted(p.name for p in (tmp_path / "profiles").iterdir()) == ["dirp.json"]     # no dirp.json.tmp
    assert check_profile_target(tmp_path, "m", "ok") == tmp_path / "profiles" / "ok.json"
    other = tmp_path / "other"
    other.mkdir()
    (other / "profiles").write_text("a file")
    with pytest.raises(ValueError, match="profiles is not a directory"):
        check_profile_target(other, "m", "ok")


def test_a_profiles_folder_that_cannot_be_written_is_named_before_the_fit(tmp_path, monkeypatch):
    """Break-test 2026-12-07: recalibrate into a read-only profiles folder fitted first, then failed naming its
    temporary file. Root passes os.access's mode checks, so the read-only folder is simulated."""
    import os

    from kevlike import runs
    from kevlike.model.modeldir import check_profile_target, profile_source, save_profile
    from kevlike.model.temperatures import TemperatureTable

    real = os.access
    locked = {str(tmp_path / "profiles"), str(tmp_path / "new")}
    monkeypatch.setattr(runs.os, "access", lambda p, mode: False if str(p) in locked else real(p, mode))
    (tmp_path / "profiles").mkdir()
    with pytest.raises(ValueError, match=f"cannot write profile 'ok': {tmp_path / 'profiles'} cannot be written "
                                         f"\\(a read-only directory or file system\\)"):
        check_profile_target(tmp_path, "m", "ok")
    (tmp_path / "new").mkdir()                    # no profiles folder yet: the folder it would be made in
    with pytest.raises(ValueError, match=f"{tmp_path / 'new'} cannot be written"):
        check_profile_target(tmp_path / "new", "m", "ok")
    monkeypatch.setattr(runs.os, "access", real)
    assert profile_source(tmp_path, "m", "ok") is None
    save_profile(tmp_path, "m", "ok", TemperatureTable(by_type={"noul": 1.3}, source="500 outcomes in s.db"))
    assert profile_source(tmp_path, "m", "ok") == "fitted before: 500 outcomes in s.db"
    (tmp_path / "profiles" / "bad.json").write_text("{")
    assert profile_source(tmp_path, "m", "bad") == "that could not be read"


def test_a_model_directory_named_with_an_at_sign_is_refused_at_serve(tmp_path):
    """A directory m@v2 served beside m shadowed m's profile v2 and was counted in m's reports (break-test
    2026-12-05)."""
    import subprocess
    import sys

    from tiny import save_tiny_model
    m = save_tiny_model(tmp_path / "m@v2", "llama")
    p = subprocess.run([sys.executable, "-m", "kevlike", "serve", "--model", m, "--port", "0"], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert f"--model {m}: a served model's name cannot hold '@'" in p.stderr


def test_serve_without_a_model_loads_the_default(monkeypatch):
    """`kevlike serve` with no --model (the README's server line) passes None for the default model; the '@' check
    of the names tested `"@" in None`, a TypeError traceback (break-test 2026-12-05)."""
    import kevlike.service.server as server

    loaded = []

    class Loaded(Exception):
        pass

    def fake_load(name, options):
        loaded.append(name)
        raise Loaded

    monkeypatch.setattr(server.Engine, "from_pretrained", staticmethod(fake_load))
    with pytest.raises(Loaded):
        server.serve([None], server.ServerConfig(port=0))
    assert loaded == [None]


def test_a_store_path_ending_in_a_slash_is_refused(tmp_path):
    """sqlite:////x/ made SQLite create the file x while the removed-file check watched 'x/': acknowledged records
    vanished silently after `rm x` (break-test 2026-12-05)."""
    with pytest.raises(ValueError, match=f"ends with a '/': give a database file, e.g. sqlite:///{tmp_path}/fb/"
                                         f"feedback.db"):
        FeedbackStore(f"sqlite:///{tmp_path}/fb/")
    assert not (tmp_path / "fb").exists()
    with pytest.raises(ValueError, match=r"the URL's scheme is written in lower case \(sqlite://…\)"):
        check_store_url(f"SQLITE:///{tmp_path}/fb.db")
    (tmp_path / "link.db").symlink_to(tmp_path / "gone.db")
    with pytest.raises(ValueError, match=r"link\.db' is a link to .*gone\.db', which does not exist"):
        FeedbackStore(f"sqlite:///{tmp_path}/link.db")


def test_a_constraint_or_trigger_the_store_does_not_define_is_refused_or_store_broken(tmp_path):
    """An extra NOT NULL column is refused at start; a trigger that aborts inserts is StoreBroken (503, the record
    kept waiting), not an IntegrityError (a 500 on /v1/feedback and a record lost; break-test 2026-12-05)."""
    db = tmp_path / "fb.db"
    FeedbackStore(f"sqlite:///{db}").close()
    con = sqlite3.connect(db)
    con.execute("ALTER TABLE kevlike_requests ADD COLUMN tenant TEXT NOT NULL DEFAULT 'x'")   # has a default: fine
    con.execute("ALTER TABLE kevlike_outcomes ADD COLUMN reviewer TEXT")                        # nullable: fine
    con.commit()
    FeedbackStore(f"sqlite:///{db}").close()
    con.execute("CREATE TABLE t2 (request_id VARCHAR(128) PRIMARY KEY, model TEXT NOT NULL, created_at FLOAT NOT "
                "NULL, state TEXT, tenant TEXT NOT NULL)")
    con.execute("DROP TABLE kevlike_requests")
    con.execute("ALTER TABLE t2 RENAME TO kevlike_requests")
    con.commit()
    with pytest.raises(ValueError, match=r"table kevlike_requests has a column the store does not write and cannot "
                                         r"be left empty \(tenant: NOT NULL, no default\)"):
        FeedbackStore(f"sqlite:///{db}")
    db2 = tmp_path / "fb2.db"
    store = FeedbackStore(f"sqlite:///{db2}")
    store.record("r0", "M", NOUL)
    con = sqlite3.connect(db2)
    con.execute("CREATE TRIGGER no BEFORE INSERT ON kevlike_requests BEGIN SELECT RAISE(ABORT, 'no'); END")
    con.execute("CREATE TRIGGER no2 BEFORE INSERT ON kevlike_outcomes BEGIN SELECT RAISE(ABORT, 'no'); END")
    con.commit()
    with pytest.raises(StoreBroken, match=r"refused the write \(.*no\): its tables hold a constraint or trigger") as e:
        store.add_outcomes("r0", {"q": [1.0, 0.0]})
    assert not e.value.transient
    rec = Recorder(store, capacity=4, retry_s=0.01)
    rec.reserve()
    rec.submit("r1", "M", NOUL)
    assert not rec.wait(timeout=0.5) and rec.pending() == 1 and rec.failed == 0      # kept, not lost
    assert "refused the write" in rec.last_error
    con.execute("DROP TRIGGER no")
    con.commit()
    assert rec.wait(timeout=10) and rec.written == 1          # written once the operator removed it
    rec.close()
    store.close()


def test_a_damaged_option_keys_row_is_store_broken_naming_it(tmp_path):
    """One damaged row made POST /v1/feedback a 500 (JSONDecodeError; break-test 2026-12-05)."""
    db = tmp_path / "fb.db"
    store = FeedbackStore(f"sqlite:///{db}")
    store.record("b1", "M", NOUL)
    for bad in ("", "{\"a\": 1}", "[1, 2]"):
        con = sqlite3.connect(db)
        con.execute("UPDATE kevlike_answers SET option_keys=? WHERE request_id='b1'", (bad,))
        con.commit()
        con.close()
        with pytest.raises(StoreBroken, match="request 'b1', question 'q': its stored option keys are damaged"):
            store.questions("b1")
    store.close()


def test_a_read_only_store_is_refused_at_start_and_broken_not_busy(tmp_path, monkeypatch):
    """A store on a read-only file system opened and then answered 'busy, retry later' forever (break-test
    2026-12-05). Root passes os.access's mode checks, so the read-only file system is simulated."""
    import os

    import kevlike.service.feedback as feedback
    from sqlalchemy.exc import OperationalError

    db = tmp_path / "fb.db"
    FeedbackStore(f"sqlite:///{db}").close()
    real = os.access
    monkeypatch.setattr(feedback.os, "access", lambda p, mode: False if str(p) == str(tmp_path) else real(p, mode))
    with pytest.raises(ValueError, match=f"'{tmp_path}' cannot be written \\(a read-only file, directory or file "
                                         f"system\\)"):
        FeedbackStore(f"sqlite:///{db}")
    FeedbackStore(f"sqlite:///{db}", create=False).close()       # a reader (recalibrate) needs no write access
    err = feedback._store_error(OperationalError("INSERT", {}, sqlite3.OperationalError(
        "attempt to write a readonly database")))
    assert isinstance(err, StoreBroken) and not err.transient and "cannot be written" in str(err)


def test_a_full_disk_names_the_profile_it_could_not_write(tmp_path, monkeypatch):
    """ENOSPC comes without a file name: `kevlike recalibrate` printed '[Errno 28] No space left on device' alone
    (break-test 2026-12-05)."""
    import errno
    from pathlib import Path

    from kevlike.model.modeldir import save_profile
    from kevlike.model.temperatures import TemperatureTable

    def full(self, text, *a, **k):
        Path.touch(self)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError, match=r"cannot write profile 'ops' to .*profiles/ops\.json: No space left on device"):
        save_profile(tmp_path, "m", "ops", TemperatureTable(by_type={"noul": 1.0}))
    assert list((tmp_path / "profiles").iterdir()) == []                # no ops.json.tmp left


# --- break-tests of 2026-12-07: values PostgreSQL cannot hold, a store emptied in place, a clean stop's -wal,
# --- two writers of one profile, a damaged file's many-line check

from stores import store_url  # noqa: E402,F401  (the fixture: a SQLite file and a PostgreSQL database)


def test_a_value_the_store_cannot_hold_is_refused_before_and_never_blocks_the_queue(store_url):
    """PostgreSQL text holds no NUL and its answers' key no id over 2,704 bytes: one such record used to stay at the
    head of the writer's queue for ever (health "damaged", every later record waiting, all lost at stop). Now the
    server refuses such a request before computing it (FeedbackStore.refusal), and a record that fails anyway is
    dropped alone (counted lost) while the next ones land. SQLite holds them all."""
    from kevlike.service.feedback import PG_KEY_BYTES, Unstorable

    store = FeedbackStore(store_url)
    pg = store_url.startswith("postgresql")
    nul = dict(NOUL[0], question_id="a\x00b")
    refused = store.refusal(["ok", "a\x00b", "k" * (PG_KEY_BYTES + 1)], "a state with a \x00 in it")
    if pg:
        assert [e["loc"] for e in refused] == [["body", "state"], ["body", "questions", "a\x00b"],
                                               ["body", "questions", "k" * 80]]
        assert "NUL character" in refused[1]["msg"] and f"at most {PG_KEY_BYTES} bytes" in refused[2]["msg"]
        with pytest.raises(Unstorable, match="cannot hold this record"):
            store.record("bad", "M", [nul])
    else:
        assert refused == []
    recorder = Recorder(store, capacity=8, retry_s=0.01)
    for rid, answers in (("bad", [nul]), ("good", NOUL)):
        recorder.reserve()
        recorder.submit(rid, "M", answers)
    assert recorder.wait(timeout=20)                                 # neither waits for ever
    assert (recorder.written, recorder.failed) == ((1, 1) if pg else (2, 0))
    assert sorted(store.questions("good")) == ["q"]
    assert store.records("a\x00b") == []                             # a model name no store holds: no rows, no 503
    recorder.close()
    store.close()


def test_a_store_file_emptied_in_place_is_store_broken_not_silent(tmp_path):
    db = tmp_path / "fb.db"
    store = FeedbackStore(f"sqlite:///{db}")
    store.record("r0", "M", NOUL)
    with open(db, "r+b") as f:                    # `truncate -s 0 fb.db`: the same file, its contents gone
        f.truncate(0)
    with pytest.raises(StoreBroken, match="was emptied in place while the server ran \\(it is 0 bytes") as e:
        store.record("r1", "M", NOUL)
    assert not e.value.transient
    with pytest.raises(StoreBroken, match="emptied in place"):
        store.add_outcomes("r0", {"q": [1.0, 0.0]})


def test_a_closed_store_keeps_everything_in_its_file_alone(tmp_path):
    """A clean stop used to leave every record in fb.db-wal (the server never closed the store): a copy of fb.db
    alone was an empty database. close() is the last connection, so SQLite checkpoints the log into the file."""
    import shutil

    db = tmp_path / "fb.db"
    store = FeedbackStore(f"sqlite:///{db}")
    store.record("r0", "M", NOUL)
    assert store.add_outcomes("r0", {"q": [1.0, 0.0]}) == 1
    store.close()
    shutil.copy(db, tmp_path / "copy.db")                     # the file alone, as a careless backup takes it
    con = sqlite3.connect(tmp_path / "copy.db")
    assert con.execute("SELECT request_id FROM kevlike_requests").fetchall() == [("r0",)]
    assert con.execute("SELECT count(*) FROM kevlike_outcomes").fetchone() == (1,)
    con.close()


def test_two_writers_of_one_profile_never_collide(tmp_path):
    """Two `kevlike recalibrate --profile P` at once shared one temporary name: one failed with FileNotFoundError
    (break-test: 39 of 800 writes). Each writer now has its own temporary file."""
    from concurrent.futures import ThreadPoolExecutor

    from kevlike.model.modeldir import list_profiles, save_profile
    from kevlike.model.temperatures import TemperatureTable

    tables = [TemperatureTable(by_type={"noul": 1.0 + i / 10}, source=f"w{i}") for i in range(2)]

    def write(i):
        for _ in range(100):
            save_profile(tmp_path, "M", "race", tables[i])

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(write, range(2)))                       # raises the first writer's error, if any
    assert list_profiles(tmp_path, "M") == ["race"]
    assert sorted(p.name for p in (tmp_path / "profiles").iterdir()) == ["race.json"]   # no temporary file left


def test_a_damaged_files_check_is_one_line(tmp_path):
    db = tmp_path / "fb.db"
    store = FeedbackStore(f"sqlite:///{db}")
    for rid in ("r0", "r1", "r2"):
        store.record(rid, "M", NOUL)
    store.close()
    _corrupt(db)
    with pytest.raises(ValueError) as e:
        FeedbackStore(f"sqlite:///{db}", create=False)
    assert "\n" not in str(e.value)


def test_a_server_refuses_what_its_store_cannot_record_and_feedback_ids_are_printable_ascii(store_url):
    from kevlike.config.server import ServerConfig
    from kevlike.service.server import create_app

    from tiny import make_engine

    eng = make_engine("llama")
    store = FeedbackStore(store_url)
    app = create_app({eng.name: eng}, eng.name, ServerConfig(), store=store)
    body = {"state": "hi", "questions": {"a\x00b": {"type": "noul", "instructions": "Is it a poem?"}}}
    with running(app) as port:
        st, _, out = call(port, "POST", "/v1/systemone", body, {"x-request-id": "nul-1"})
        if store_url.startswith("postgresql"):      # refused before the forward pass, naming the field
            assert st == 422 and out["detail"][0]["loc"] == ["body", "questions", "a\x00b"]
            assert "NUL character" in out["detail"][0]["msg"]
        else:
            assert st == 200
        assert app.state.recorder.wait(timeout=10)
        for rid in ("pg\x00x", "tab\tid", "é"):            # no answered request has such an id: 422, never a 503
            st, _, out = call(port, "POST", "/v1/feedback", {"request_id": rid, "outcomes": {"a": True}})
            assert st == 422 and out["detail"][0]["loc"] == ["body", "request_id"], (rid, out)
        st, _, out = call(port, "GET", "/v1/feedback/report?model=a%00b")
        assert st == 404, out
        assert call(port, "GET", "/health")[2]["x_store"]["status"] == "ok"
    store.close()


def test_serve_names_a_read_only_store_before_loading_not_busy(tmp_path, monkeypatch):
    """`serve --record` on a read-only mount said "busy or unreachable: unable to open database file" after the
    model had loaded (break-test 2026-12-07); the check now runs with the URL's, before any model."""
    import os

    import kevlike.service.feedback as feedback

    real = os.access
    monkeypatch.setattr(feedback.os, "access", lambda p, mode: False if str(p) == str(tmp_path) else real(p, mode))
    with pytest.raises(ValueError, match="cannot be written \\(a read-only file, directory or file system\\)"):
        check_store_url(f"sqlite:///{tmp_path / 'new.db'}", must_write=True)
    check_store_url(f"sqlite:///{tmp_path / 'new.db'}")              # a reader's check asks no write access
    assert not (tmp_path / "new.db").exists()


def test_a_full_disk_says_so_and_stays_transient():
    import kevlike.service.feedback as feedback
    from sqlalchemy.exc import OperationalError

    err = feedback._store_error(OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full")))
    assert type(err) is feedback.StoreBusy and err.transient            # freeing space fixes it: records wait
    assert str(err).startswith("the outcome store's disk is full (database or disk is full): free space")


def test_a_store_in_a_directory_that_cannot_be_written_is_read_from_its_file_or_named(tmp_path, monkeypatch):
    """`kevlike recalibrate --db` on a read-only mount said "busy or unreachable; try again": a WAL reader needs the
    -shm file SQLite creates beside the database. A cleanly closed store is now read from its file alone
    (immutable: nothing is created); one whose -wal still holds outcomes is named, with the files to copy."""
    from kevlike.service import feedback

    db = tmp_path / "fb.db"
    writer = FeedbackStore(f"sqlite:///{db}")
    writer.record("r0", "M", NOUL)
    assert writer.add_outcomes("r0", {"q": [1.0, 0.0]}) == 1
    ro = tmp_path / "ro"
    ro.mkdir()
    monkeypatch.setattr(feedback, "_dir_writable", lambda path: path not in (str(tmp_path), str(ro)))
    assert (tmp_path / "fb.db-wal").stat().st_size > 0          # the writer is still open: outcomes in the log
    # a -shm beside the -wal (a killed server leaves both): SQLite reads them as they are (break-test 2026-12-07)
    with_shm = FeedbackStore(f"sqlite:///{db}", create=False)
    assert report(with_shm, "M")["overall"]["outcomes"] == 1
    with_shm.close()
    shutil.copy(db, ro / "fb.db")                               # the -wal without its -shm: named, with the files
    shutil.copy(tmp_path / "fb.db-wal", ro / "fb.db-wal")
    with pytest.raises(ValueError, match=r"cannot be written.*-wal file holds \d+ bytes.*-shm file that is missing "
                                         r"or unusable.*copy .*fb\.db.* and .*fb\.db-wal.* together to a writable"):
        FeedbackStore(f"sqlite:///{ro / 'fb.db'}", create=False)
    writer.close()                                              # checkpointed: the file alone is the store
    assert not (tmp_path / "fb.db-wal").exists() and not (tmp_path / "fb.db-shm").exists()
    reader = FeedbackStore(f"sqlite:///{db}", create=False)
    rep = report(reader, "M")
    assert rep["overall"]["outcomes"] == 1 and rep["overall"]["accuracy"] == 1.0
    reader.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fb.db", "ro"]    # immutable: no -wal, no -shm created
