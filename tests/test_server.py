"""The HTTP server, as a real `kevlike serve` process on 127.0.0.1 driven by a real HTTP client
(http.client), serving a tiny random Llama directory."""

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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kevlike.eval.loadtest import free_port

from serving import wait_healthy
from tiny import REQUEST, save_tiny_model

NOUL = {"type": "noul", "instructions": "Is a fox mentioned?"}


class Server:
    def __init__(self, model_dir, *args, env=None):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kevlike", "serve", "--model", model_dir, "--port", str(self.port),
             "--log-level", "warning", *args],
            env={**os.environ, **(env or {})}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        wait_healthy([(self.proc, self.port)])

    def request(self, method, path, body=None, headers=None, timeout=120):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body, ensure_ascii=False).encode("utf-8")
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            return r.status, dict(r.getheaders()), r.read()
        finally:
            conn.close()

    def post(self, body, headers=None):
        status, hdrs, raw = self.request("POST", "/v1/systemone", body, headers)
        return status, hdrs, (json.loads(raw) if raw else None), raw

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")


@pytest.fixture(scope="module")
def server(model_dir):
    s = Server(model_dir)
    yield s
    s.stop()


def test_round_trip_each_type(server, model_dir):
    status, headers, out, _ = server.post({k: v for k, v in REQUEST.items() if k != "model"},
                                          {"x-request-id": "abc-123"})
    assert status == 200 and headers["x-request-id"] == "abc-123"
    assert out["model"] == model_dir and list(out["answers"]) == list(REQUEST["questions"])
    a = out["answers"]
    assert a["urgent"]["type"] == "noul" and 0 <= a["urgent"]["noul"] <= 1
    assert a["team"]["choice"] in ("billing", "sales", "tech") and list(a["team"]["probabilities"]) == ["billing", "sales", "tech"]
    assert abs(sum(a["anger"]["probabilities"].values()) - 1) < 1e-5 and a["anger"]["legend"]["2"] == "Very angry"
    assert out["usage"]["input_tokens"] > 0


def test_jev_aliases_models_health_docs(server, model_dir):
    for alias in ("jev-latest", "jev-preview"):
        status, _, out, _ = server.post({"model": alias, "state": "dog", "questions": {"q": NOUL}})
        assert status == 200 and out["model"] == model_dir
    status, _, raw = server.request("GET", "/v1/models")
    assert status == 200 and json.loads(raw)["models"][0]["aliases"] == ["jev-latest", "jev-preview"]
    status, _, raw = server.request("GET", "/openapi.json")
    assert status == 200
    doc = json.loads(raw)
    body = doc["paths"]["/v1/systemone"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    schemas = doc["components"]["schemas"]
    assert body == {"$ref": "#/components/schemas/RequestBody"}
    assert schemas["RequestBody"]["properties"]["questions"]["maxProperties"] == 5000   # the server's limits
    assert schemas["ChoiceQuestion"]["properties"]["criteria"]["maxProperties"] == 255

    def refs(node):
        if isinstance(node, dict):
            yield from ([node["$ref"]] if "$ref" in node else [])
            for v in node.values():
                yield from refs(v)
        elif isinstance(node, list):
            for v in node:
                yield from refs(v)
    for ref in refs(doc):   # every reference resolves inside the document
        assert ref.startswith("#/components/schemas/") and ref.rsplit("/", 1)[1] in schemas, ref
    assert server.request("GET", "/docs")[0] == 200


def test_unicode_ids_round_trip_byte_for_byte(server):
    ids = ["émoji 🚀", "日本語の質問", "tab\there", "quote\"back\\slash", "\u202e rtl", "a" * 300]
    body = {"state": "dog", "questions": {i: NOUL for i in ids}}
    status, _, out, raw = server.post(body)
    assert status == 200 and list(out["answers"]) == ids
    for i in ids[:2]:
        assert i.encode("utf-8") in raw  # sent as UTF-8, not \u-escaped


BAD = [
    (b"{not json", 422, ["body"]),
    (b'{"state": "s"}', 422, ["body", "questions"]),
    (b'{"state": 3, "questions": {"q": {"type": "noul", "instructions": "x"}}}', 422, ["body", "state"]),
    (b'{"state": "s", "questions": {"q": {"type": "maybe", "instructions": "x"}}}', 422, ["body", "questions", "q", "type"]),
    (b'{"state": "s", "questions": {"q": {"type": "choice", "instructions": "x", "criteria": {"a": null}}}}', 422,
     ["body", "questions", "q", "criteria"]),
    (b'{"state": "s", "questions": {"q": {"type": "score", "instructions": "x", "criteria": {"0": "lo", "1": "hi"}}}}', 422,
     ["body", "questions", "q", "criteria"]),
    (b'{"state": "s", "questions": {"q": {"type": "score", "instructions": "x", "criteria": ["a","b","c","d","e","f","g","h","i","j","k"]}}}',
     422, ["body", "questions", "q", "criteria"]),
    (b'{"state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}, "q": {"type": "noul", "instructions": "y"}}}',
     422, ["body", "questions", "q"]),
    (b'{"state": "s", "questions": {"": {"type": "noul", "instructions": "x"}}}', 422, ["body", "questions", ""]),
    (b'{"state": "\\ud800", "questions": {"q": {"type": "noul", "instructions": "x"}}}', 422, ["body", "state"]),
    (b'{"state": "\xff\xfe", "questions": {}}', 422, ["body"]),
    (b'{"state": ' + b"[" * 80 + b"]" * 80 + b', "questions": {"q": {"type": "noul", "instructions": "x"}}}', 422, None),
    (b'{"state": "s", "questions": {"q": {"type": "noul", "instructions": "x", "criteria": {"maybe": "y"}}}}', 422,
     ["body", "questions", "q", "criteria", "maybe"]),
    (b'{"state": {"amount": 1e400}, "questions": {"q": {"type": "noul", "instructions": "x"}}}', 422,
     ["body", "state", "amount"]),
    (b'{"state": "s", "questions": {"q": {"type": "noul", "instructions": "x", "critera": null}}}', 422,
     ["body", "questions", "q", "critera"]),
    (b'{"model": 7, "state": "s", "questions": {"q": {"type": "noul", "instructions": "x"}}}', 422, ["body", "model"]),
    (b'{"state": "s", "questions": {}}', 422, ["body", "questions"]),
    (b'{"state": "s", "questions": {"q": {"type": "noul"}}}', 422, ["body", "questions", "q", "instructions"]),
    (b'{"state": "s", "questions": {"q": {"type": "noul", "instructions": "x", "critera": null}}}', 422,
     ["body", "questions", "q", "critera"]),
    (b'{"state": NaN, "questions": {"q": {"type": "noul", "instructions": "x"}}}', 422, ["body"]),
    (json.dumps({"state": "s", "questions": {"q": {"type": "choice", "instructions": "x",
                                                   "criteria": {str(i): None for i in range(256)}}}}).encode(),
     422, ["body", "questions", "q", "criteria"]),
    (json.dumps({"state": "s", "questions": {str(i): {"type": "noul", "instructions": "x"} for i in range(5001)}}).encode(),
     422, ["body", "questions"]),
]


@pytest.mark.parametrize("body,status,loc", BAD)
def test_validation_rules_give_4xx_with_field_path(server, body, status, loc):
    got, _, out, _ = server.post(body)
    assert got == status, out
    assert isinstance(out["detail"], list) and out["detail"][0]["msg"]
    if loc is not None:
        assert out["detail"][0]["loc"] == loc


def test_unknown_model_404_and_budgets_413(server):
    status, _, out, _ = server.post({"model": "gpt-9", "state": "s", "questions": {"q": NOUL}})
    assert status == 404 and out["detail"]["error_type"] == "unknown" and "gpt-9" in out["detail"]["message"]
    status, _, out, _ = server.post(b"x" * (8 * 1024 * 1024 + 1))
    assert status == 413 and "limit" in out["detail"]["message"]
    status, _, out, _ = server.post({"state": "the lazy dog " * 3000, "questions": {"q": NOUL}})
    assert status == 413 and out["detail"]["error_type"] == "tokens_exceeded" and "is 4096 tokens" in out["detail"]["message"]


def test_jev_client_extras_are_accepted(server):
    """Unknown top-level fields are ignored (and named in a header); a noul question with criteria but no
    instructions is answered; extensions of the response carry an x_ prefix."""
    status, headers, out, _ = server.post({"state": "dog", "x_trace_id": "abc", "seed": 7, "questions": {
        "q": NOUL, "c": {"type": "noul", "criteria": {"true": "a dog is mentioned", "false": None}}}})
    assert status == 200 and headers["x-kevlike-ignored-fields"] == '"x_trace_id", "seed"'
    assert list(out["answers"]) == ["q", "c"] and 0 <= out["answers"]["c"]["noul"] <= 1
    assert {k for k in out if not k.startswith("x_")} == {"model", "answers", "usage"} and "x_input" in out
    status, headers, _, _ = server.post({"state": "dog", "questions": {"q": NOUL}})
    assert status == 200 and "x-kevlike-ignored-fields" not in headers


def test_head_on_read_only_endpoints(server):
    for path in ("/health", "/v1/models", "/openapi.json", "/docs"):
        status, _, raw = server.request("HEAD", path)
        assert status == 200 and raw == b"", path
    assert server.request("HEAD", "/v1/systemone")[0] == 405


def test_method_and_path_errors_are_4xx(server):
    """Unknown paths and wrong methods answer in the server's own error shape, not Starlette's."""
    status, headers, raw = server.request("GET", "/v1/systemone")
    assert status == 405 and json.loads(raw) == {"detail": {"error_type": "method_not_allowed",
                                                            "message": "Method Not Allowed: GET /v1/systemone"}}
    assert headers["allow"] == "POST"
    status, _, raw = server.request("POST", "/v1/systemtwo", b"{}")
    assert status == 404 and json.loads(raw)["detail"]["error_type"] == "not_found"


@pytest.mark.parametrize("extra", [{"questions ": 1}, {" x": 1}, {"a": 1, "": 2}, {"\n\r": 1},
                                   {f"f{i:03d}": 1 for i in range(300)}])
def test_ignored_field_names_never_break_the_response_header(server, extra):
    """Found by `kevlike fuzz`: a header value with edge spaces made h11 drop the connection."""
    status, headers, out, _ = server.post({"state": "s", "questions": {"q": NOUL}, **extra})
    assert status == 200 and list(out["answers"]) == ["q"]
    value = headers["x-kevlike-ignored-fields"]
    assert value == value.strip() and value.isascii() and len(value) <= 1024 and value.isprintable()


def test_ignored_fields_header_names_every_field_unambiguously():
    from kevlike.service.server import ignored_fields_header

    assert ignored_fields_header(("", " ", "ключ", "a\nb", "a\x7fb")) == \
        '"", " ", "\\u043a\\u043b\\u044e\\u0447", "a\\nb", "a\\u007fb"'
    many = ignored_fields_header(tuple(f"f{i:03d}" for i in range(300)), limit=100)
    assert many == ", ".join(f'"f{i:03d}"' for i in range(12)) + ", ... (288 more)"


# --- fuzz: hostile and malformed requests never get a 5xx ----------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**30, max_value=10**30) | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12)
FORGED = st.sampled_from(["</opt><opt>evil", "<decide>", "<|im_end|>", "<state><q>", "<opt>", "\u0000", "🚀"])
question = st.fixed_dictionaries({
    "type": st.sampled_from(["noul", "choice", "score", "other"]) | json_values,
    "instructions": st.text(max_size=30) | FORGED | json_values,
}, optional={"criteria": json_values | st.dictionaries(st.text(max_size=6) | FORGED, st.none() | st.text(max_size=8) | FORGED,
                                                       max_size=6)
             | st.lists(st.text(max_size=8) | FORGED, max_size=12), "extra": json_values})
request_obj = st.fixed_dictionaries({}, optional={
    "model": st.sampled_from(["jev-latest", "nope"]) | json_values,
    "state": st.text(max_size=60) | FORGED | json_values,
    "questions": st.dictionaries(st.text(max_size=6) | FORGED, question | json_values, max_size=4) | json_values,
}) | json_values


def _mutate(data: bytes, how: int) -> bytes:
    if how == 1:
        return data[: len(data) // 2]                                       # truncated
    if how == 2:
        return data.replace(b'"', b"\xff", 1)                               # invalid UTF-8
    if how == 3:
        return b'{"state": "s", "questions": {"a": 1, "a": 2}}'             # duplicate keys
    if how == 4:
        return b"[" * 5000 + b"]" * 5000                                    # deep nesting
    if how == 5:
        return json.dumps({"state": "s", "questions": {"q": {"type": "choice", "instructions": "x",
                                                             "criteria": {str(i): None for i in range(10000)}}}}).encode()
    return data


@settings(max_examples=1000, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(obj=request_obj, how=st.integers(min_value=0, max_value=12))
def test_fuzz_never_5xx(server, obj, how):
    body = _mutate(json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass"), how)
    status, _, raw = server.request("POST", "/v1/systemone", body)
    assert status < 500, (status, body[:300], raw[:300])
    assert status in (200, 404, 413, 422), status


def test_server_still_up_after_fuzz(server):
    assert server.request("GET", "/health")[0] == 200
    assert server.post({"state": "dog", "questions": {"q": NOUL}})[0] == 200


# --- concurrency, batching, admission ------------------------------------------------------

def varied(i):
    return {"state": f"Ticket {i}: the lazy dog " + "and the quick fox " * (i % 7),
            "questions": {"team": REQUEST["questions"]["team"], "q": NOUL,
                          "anger": REQUEST["questions"]["anger"]}}


def probs(out):
    a = out["answers"]
    return [a["q"]["noul"], *a["team"]["probabilities"].values(), *a["anger"]["probabilities"].values()]


def test_16_concurrent_clients_equal_serial(server):
    reqs = [varied(i) for i in range(48)]
    serial = [server.post(r) for r in reqs]
    assert all(s[0] == 200 for s in serial)
    with ThreadPoolExecutor(16) as pool:
        concurrent = list(pool.map(server.post, reqs))
    assert [c[0] for c in concurrent] == [200] * 48  # no 429 with the default queue
    for s, c in zip(serial, concurrent):
        assert max(abs(x - y) for x, y in zip(probs(s[2]), probs(c[2]))) <= 1e-5
    health = json.loads(server.request("GET", "/health")[2])
    m = next(iter(health["models"].values()))
    assert m["batches"] < m["answered"]  # concurrent requests were batched together


def test_429_when_queue_full_and_graceful_shutdown(model_dir):
    s = Server(model_dir, "--queue-size", "1", "--max-batch", "1")
    try:
        big = {"state": "the lazy dog and the quick fox " * 100, "questions": {"q": NOUL}}
        assert s.post(big)[0] == 200  # alone: never 429
        with ThreadPoolExecutor(24) as pool:
            results = list(pool.map(lambda _: s.post(big), range(24)))
        codes = [r[0] for r in results]
        assert set(codes) <= {200, 429} and 429 in codes and 200 in codes
        for status, headers, out, _ in results:
            if status == 429:
                assert headers["retry-after"] == "1" and out["detail"]["error_type"] == "unknown"
        # graceful shutdown: a request in flight when SIGTERM arrives still gets its answer
        # slow enough to be in flight 0.2 s later (the block-sparse kernel answers 60 questions in < 0.2 s)
        slow = dict(big, questions={f"q{i}": REQUEST["questions"]["team"] for i in range(400)})
        box = {}
        t = threading.Thread(target=lambda: box.setdefault("r", s.post(slow)))
        t.start()
        time.sleep(0.2)
        assert "r" not in box  # still in flight
        s.proc.send_signal(signal.SIGTERM)
        t.join(60)
        assert box["r"][0] == 200 and len(box["r"][2]["answers"]) == 400
        assert s.proc.wait(30) == 0  # a clean graceful shutdown exits 0 (uvicorn's re-raised signal is absorbed)
        assert "Traceback" not in s.proc.stdout.read().decode()
    finally:
        s.stop()


def test_auth_and_timeout(model_dir, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# comment\nsecret-2\n")
    s = Server(model_dir, "--timeout", "0.001", "--api-keys-file", str(keys), "--max-request-tokens", "500",
               env={"KEVLIKE_API_KEYS": "secret-1"})
    try:
        body = {"state": "the lazy dog " * 50, "questions": {"q": NOUL}}
        status, headers, out, _ = s.post(body)
        assert status == 401 and out["detail"]["error_type"] == "authentication_error" and "x-request-id" in headers
        assert s.post(body, {"Authorization": "Bearer wrong"})[0] == 401
        for key in ("secret-1", "secret-2"):
            status, headers, out, _ = s.post(body, {"Authorization": f"Bearer {key}"})
            assert status == 503 and out["detail"]["error_type"] == "timeout" and headers["retry-after"] == "5"
        status, _, out, _ = s.post({"state": "the lazy dog " * 400, "questions": {"q": NOUL}},
                                   {"Authorization": "Bearer secret-1"})
        assert status == 413 and "limit is 500" in out["detail"]["message"]  # --max-request-tokens
        assert s.request("GET", "/health")[0] == 200  # health needs no key
        assert s.request("GET", "/v1/models")[0] == 401
    finally:
        s.stop()


def test_remote_engine_reads_the_server(server, model_dir):
    """`kevlike eval --url`: the RemoteEngine's answers are exactly the served probabilities, and
    equal a local engine's on the same model directory."""
    import torch

    from kevlike import Engine
    from kevlike.eval.remote import RemoteEngine, RemoteError, wire_request
    from kevlike.request.schema import validate_request

    req = validate_request(REQUEST)
    assert validate_request(wire_request(req, req.model)) == req  # the wire form round-trips
    remote = RemoteEngine(f"http://127.0.0.1:{server.port}")
    (zs,) = remote.question_logits([remote.encode(req)])
    local = Engine.from_pretrained(model_dir).decide(REQUEST)
    for q, z in zip(req.questions, zs):
        p = torch.softmax(z, -1).tolist()
        a = local["answers"][q.id]
        want = [a["noul"], 1 - a["noul"]] if q.type == "noul" else [a["probabilities"][o.key] for o in q.options]
        assert max(abs(x - y) for x, y in zip(p, want)) <= 1e-5
    assert remote.name == local["model"]
    with pytest.raises(RemoteError, match="HTTP 404"):
        RemoteEngine(f"http://127.0.0.1:{server.port}", model="no-such-model").question_logits([req])
    with pytest.raises(RemoteError, match="cannot reach"):
        RemoteEngine(f"http://127.0.0.1:{free_port()}").question_logits([req])


def test_response_reports_the_state_script(server):
    status, _, out, _ = server.post({"state": "Клиенту дважды выставили счёт.", "questions": {"q": NOUL}})
    assert status == 200
    # a bare HF directory declares no training scripts: reported, not judged
    assert out["x_input"] == {"script": "Cyrillic", "script_share": 1.0, "script_trained": None}


def test_max_options_extension_over_http(model_dir):
    many = {"state": "The quick brown fox.", "questions": {
        "pick": {"type": "choice", "instructions": "Which one?", "criteria": {f"fox {i}": None for i in range(2000)}},
        "fox": NOUL}}
    s = Server(model_dir, "--max-options", "5000", "--max-request-tokens", "4000", "--option-mode", "set")
    try:
        status, _, out, _ = s.post(many)
        assert status == 200, out
        assert out["x_shortlist"] == {"pick": 64}             # 2,000 options do not fit 4,000 tokens: shortlisted
        assert len(out["answers"]["pick"]["probabilities"]) == 2000
        status, _, out, _ = s.post({**many, "questions": {"pick": {**many["questions"]["pick"], "criteria": {
            f"k{i}": None for i in range(5001)}}}})
        assert status == 422 and "it needs 2 to 5000" in json.dumps(out)
    finally:
        s.stop()


def test_feedback_loop_end_to_end_over_http(tmp_path, capsys):
    """Answered requests recorded in SQLite, outcomes posted (and hostile ones refused without a 5xx),
    the report, recalibrate, restart: the profile served as MODEL@NAME. The model serves score questions through
    the normal readout: each such answer is recorded with the softmax it was read out from (the model's own,
    recomputed here), so the profile refits it from the model's logits like any other answer."""
    import sqlite3

    import torch

    from kevlike import cli
    from kevlike.model.engine import Engine
    from kevlike.model.modeldir import load_temperatures, save_calibration, save_decision_model
    from kevlike.model.temperatures import TemperatureTable, fit_table, normal_readout
    from kevlike.request.schema import validate_request
    from kevlike.service.feedback import FeedbackStore

    from tiny import make_engine

    tiny = make_engine("qwen2")
    backbone = tmp_path / "backbone"
    tiny.model.save_pretrained(backbone)
    tiny.encoder.tokenizer.save_pretrained(backbone)
    art = str(save_decision_model(tmp_path / "m", backbone=str(backbone), model=tiny.model,
                                  tokenizer=tiny.encoder.tokenizer, head=tiny.head))
    save_calibration(art, TemperatureTable(by_type={"score": 0.9}, score_readout="normal"))
    db = tmp_path / "fb.db"
    url = f"sqlite:///{db}"
    body = {k: v for k, v in REQUEST.items() if k != "model"}
    s = Server(art, "--record", url, "--dtype", "float32", "--threads", "1")
    try:
        for i in range(8):
            status, headers, out, _ = s.post(body, {"x-request-id": f"r{i}"})
            assert status == 200 and headers["x-request-id"] == f"r{i}"
        local = Engine.from_pretrained(art, dtype="float32", threads=1)
        z = local.question_logits([local.encode(validate_request(body))])[0][2]          # "anger": 3 levels
        soft = torch.softmax(z.double() / 0.9, -1)
        served = list(out["answers"]["anger"]["probabilities"].values())                # levels in order
        assert torch.allclose(torch.tensor(served, dtype=torch.float64), normal_readout(soft), atol=1e-5)
        FeedbackStore(url).records()                      # the store is there once the recorder has written r7
        recorded = json.loads(sqlite3.connect(db).execute(
            "select probabilities from kevlike_answers where request_id = 'r7' and question_id = 'anger'").fetchone()[0])
        assert recorded["score_readout"] == "normal" and recorded["probabilities"] == pytest.approx(served, abs=1e-6)
        assert recorded["softmax"] == pytest.approx(soft.tolist(), abs=1e-5)

        def fb(obj):
            st, _, raw = s.request("POST", "/v1/feedback", obj)
            return st, json.loads(raw)

        anger = [1, 1, 0, 1, 2, 1, 0, 1]                     # observed levels: some answers wrong, so a fit
        for i in range(8):
            assert fb({"request_id": f"r{i}", "outcomes": {"urgent": i % 2 == 0, "team": "billing",
                                                           "anger": anger[i]}}) \
                == (200, {"request_id": f"r{i}", "stored": 3})
        assert fb({"request_id": "r0", "outcomes": {"urgent": True}})[0] == 200          # a repeat: idempotent
        st, out = fb({"request_id": "nope", "outcomes": {"urgent": True}})
        assert st == 404 and "no recorded request with id 'nope'" in out["detail"]["message"]
        st, out = fb({"request_id": "r0", "outcomes": {"ghost": True, "team": "legal", "anger": 7}})
        assert st == 422 and [e["loc"] for e in out["detail"]] == [
            ["body", "outcomes", "ghost"], ["body", "outcomes", "team"], ["body", "outcomes", "anger"]]
        assert [e["type"] for e in out["detail"]] == ["unknown_question", "invalid_answer", "invalid_answer"]
        st, out = fb({"request_id": "r0", "outcomes": {f"q{i}": True for i in range(10_000)}})
        assert st == 422 and "10000 outcomes; a request has at most 5000 questions" in out["detail"][0]["msg"]
        assert s.request("POST", "/v1/feedback", b"{not json")[0] == 422
        assert fb({"request_id": 7, "outcomes": []})[0] == 422
        with ThreadPoolExecutor(8) as pool:   # concurrent posts for one id: all answered, one row per question
            results = list(pool.map(lambda i: fb({"request_id": "r1", "outcomes": {"urgent": bool(i % 2)}}), range(24)))
        assert {st for st, _ in results} == {200}, results[:2]
        rows = sqlite3.connect(db).execute("select count(*), count(distinct question_id) from kevlike_outcomes "
                                           "where request_id = 'r1'").fetchone()
        assert rows == (3, 3)
        st, _, raw = s.request("GET", f"/v1/feedback/report?model={art}")
        rep = json.loads(raw)
        assert st == 200 and rep["overall"]["outcomes"] == 24
        assert {t: v["outcomes"] for t, v in rep["per_type"].items()} == {"noul": 8, "choice": 8, "score": 8}
        scores = [r for r in FeedbackStore(url).records(art) if r["type"] == "score"]
        assert len(scores) == 8 and not any("score_readout" in r for r in scores)    # none left out of the fit
        logits = torch.tensor(scores[0]["logits"], dtype=torch.float64)
        assert torch.allclose(logits - logits[0], 0.9 * (soft.log() - soft.log()[0]), atol=1e-4)   # z up to a constant
        stored = sqlite3.connect(db).execute("select state from kevlike_requests").fetchall()
        assert stored and all(x == (None,) for x in stored)                  # no state text without --record-state
    finally:
        s.stop()
    assert cli.main(["recalibrate", "--db", url, "--model", art, "--profile", "fb", "--min-count", "4", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "left out of the fit" not in err and "replaced the profile" not in err
    # the profile's score fit == the fit of the model's own logits (what calibrate --profile would compute)
    prof = load_temperatures(os.path.join(art, "profiles", "fb.json"))
    own, fit = fit_table([{"type": "score", "logits": z.tolist(), "gold": g} for g in anger], 4,
                         base=TemperatureTable(by_type={"score": 0.9}, score_readout="normal"))
    assert "temperature" in fit["types"]["score"] and prof.score_readout == own.score_readout
    assert prof.by_type["score"] == pytest.approx(own.by_type["score"], rel=1e-3) != 0.9
    s = Server(art, "--record", url)
    try:
        _, _, raw = s.request("GET", "/v1/models")
        assert [m["name"] for m in json.loads(raw)["models"]] == [art, f"{art}@fb"]
        status, _, out, _ = s.post({**body, "model": f"{art}@fb"})
        assert status == 200 and out["model"] == f"{art}@fb"
        # a Jev alias resolves before @PROFILE too; an unknown profile of an alias is a 404 naming what is served
        _, _, aliased, _ = s.post({**body, "model": "jev-latest@fb"})
        assert aliased["model"] == f"{art}@fb" and aliased["answers"] == out["answers"]
        status, _, out, _ = s.post({**body, "model": "jev-latest@nope"})
        assert status == 404 and f"{art}@fb" in out["detail"]["message"]
        st, _, raw = s.request("GET", "/v1/feedback/report?model=jev-latest@fb")
        assert st == 200 and json.loads(raw)["overall"]["outcomes"] == 0
    finally:
        s.stop()
    # a second recalibrate replaces the profile and says so (break-test 2026-12-07: it was overwritten silently)
    assert cli.main(["recalibrate", "--db", url, "--model", art, "--profile", "fb", "--min-count", "4", "--quiet"]) == 0
    assert f"(replaced the profile fitted before: profile 'fb': fitted on 24 outcomes in" in capsys.readouterr().err
