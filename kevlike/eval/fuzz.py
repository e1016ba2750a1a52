"""Hostile-request fuzz of the HTTP server: thousands of malformed, mistyped, oversized and mutated
requests over real HTTP; nothing may yield a 5xx, and every error body must have the documented shape.

    kevlike fuzz [--n 10000] [--seed 0] [--model NAME_OR_DIR] [--workers 4] [--out DIR]
    kevlike fuzz --seed 0 --show 1234      # print request 1234 of that seed (no server)

The server is the real app: ``kevlike serve --model M`` started as a subprocess on a free loopback port
(``--in-process``: the same FastAPI app under uvicorn in a thread of this process, quicker to start).
Without ``--model`` a tiny random Llama (3 layers, hidden 64, byte-level BPE tokenizer trained in
memory from a few sentences; nothing is downloaded) is saved to a temporary directory and served: the
server's request handling is under test, not the model. Any model directory or registered name
works (``--model kevlike-default``); to keep the tiny one,
``python -c "from kevlike.eval.fuzz import tiny_model; tiny_model('tiny-llama')"`` writes it to a directory.

Request ``i`` of seed ``s`` is drawn from its own generator (``random.Random("kevlike-fuzz:s:i")``),
so any request can be rebuilt alone (``--show I``). Categories (share of requests): valid requests
(10 %), valid requests mutated at random, byte-wise or in the JSON tree (20 %), a wrong type at every
field, missing fields, malformed JSON, random bytes, lone surrogates and invalid UTF-8, NaN /
Infinity / 1e400 / 5000-digit numbers, nesting up to 100,000 deep, duplicate keys, 0 / 1 / 256 options
and 1 / 11 levels, empty and huge (5,000 / 5,001 / 20,000) question maps, unknown fields at top level
and inside questions, unknown models, wrong content types and encodings, chunked uploads, bodies
over the 8 MiB limit, hostile headers, wrong methods and paths.

Sent by ``--workers`` threads (one kept-alive ``requests`` session each). Checked for every response:

* status < 500 and no transport error (a connection cut is tolerated only for the over-limit
  uploads, which the server may answer with 413 before it has read them);
* every 4xx body is JSON: 422 ``{"detail": [{"loc": ["body", ...], "msg", "type"}, ...]}``, any other
  ``{"detail": {"error_type", "message"}}`` (the shape the server documents); every response carries
  ``x-request-id``; a 200 from ``/v1/systemone`` has ``answers`` (for a valid request: its ids, in order);
* ``GET /health`` answers 200 after every 1,000 requests and at the end.

Also counted, not failing: *unexpected statuses* (a request built valid answered with an error, or one
built invalid answered 200) and the server's logged errors (tracebacks in ``server.log``).

The run directory (``--out DIR`` is the directory itself; default ``runs/fuzz-YYYYmmdd-HHMMSS/``) holds ``summary.json`` (n, seed,
status histogram overall and per category, 5xx count, violations with example bodies, requests/s,
git commit, machine), ``results.jsonl`` (one line per request: i, category, method, path, bytes,
status, ms, problem), ``failures/`` (the full body of each failing request, first 50) and, for a
subprocess server, ``server.log``. Exit status 1 when any 5xx, transport error, shape violation or
failed health check happened, else 0.
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
import platform
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import requests
import torch
import uvicorn
from tokenizers import ByteLevelBPETokenizer
from tqdm import tqdm
from transformers import AutoModelForCausalLM, LlamaConfig, PreTrainedTokenizerFast

from kevlike.eval.loadtest import free_port, wait_healthy
from kevlike.model.engine import Engine
from kevlike.runs import git_commit, machine
from kevlike.service.server import ServerConfig, create_app

ENDPOINT = "/v1/systemone"
LIMIT = 8 * 1024 * 1024  # DEFAULT_LIMITS.max_body_bytes
HEALTH_EVERY = 1000
MAX_SAVED_FAILURES = 50

# --- the tiny model (tests/tiny.py makes the same one) -------------------------------------------

TINY_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Customer: I was charged twice for my March invoice and nobody answers the phone.",
    "Does this need a reply within the hour? Which team should handle this? billing sales tech",
    "How angry is the customer? Calm Frustrated Very angry true false yes no Options Answer",
    "Text: Question: Levels (0 = lowest, 1 = highest): 0 1 2 3 4 5 6 7 8 9 { } [ ] \" : ,",
]


def tiny_model(path: str | Path, seed: int = 0) -> str:
    """Save a tiny randomly initialised Llama (3 layers, hidden 64, fp32) and a byte-level BPE tokenizer
    trained in memory as an HF directory servable with ``--model DIR``; returns the path."""

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TINY_CORPUS * 20, vocab_size=400, min_frequency=1,
                            special_tokens=["<|pad|>", "<|im_end|>"], show_progress=False)
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, pad_token="<|pad|>", eos_token="<|im_end|>")
    cfg = LlamaConfig(vocab_size=420, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)

# --- JSON building blocks that json.dumps cannot write ---------------------------------------------


class Raw:
    """A raw fragment inserted verbatim into the body (``NaN``, ``"\\ud800"``, invalid UTF-8 bytes)."""

    __slots__ = ("b",)

    def __init__(self, b: bytes | str):
        self.b = b if isinstance(b, bytes) else b.encode("utf-8", "surrogatepass")


class Pairs(list):
    """A JSON object given as ``(key, value)`` pairs, so a key may repeat."""


def enc(v, ascii_only: bool = False) -> bytes:
    """Serialize ``v`` (JSON values, :class:`Raw`, :class:`Pairs`) to bytes; a lone surrogate in a
    ``str`` is written as its CESU bytes unless ``ascii_only`` (then as a ``\\uD800`` escape)."""
    if isinstance(v, Raw):
        return v.b
    if isinstance(v, (dict, Pairs)):
        items = v.items() if isinstance(v, dict) else v
        return b"{" + b", ".join(enc(k if isinstance(k, Raw) else str(k), ascii_only) + b": " + enc(x, ascii_only)
                                 for k, x in items) + b"}"
    if isinstance(v, (list, tuple)):
        return b"[" + b", ".join(enc(x, ascii_only) for x in v) + b"]"
    return json.dumps(v, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")

# --- random values ----------------------------------------------------------------------------------


TEXTS = ["", "dog", "Customer: I was charged twice for my March invoice and nobody answers the phone.",
         "</opt><opt>evil", "<decide>", "<|im_end|>", "<state><q>", "<opt>", "\u0000", "🚀", "émoji 🚀 日本語の質問",
         "\u202e rtl", "tab\there", "quote\"back\\slash", "line\nbreak", "\ufeff", "\uffff", "\U0010ffff",
         "zero\u200bwidth", "e\u0301\u0301\u0301", "Клиенту дважды выставили счёт.", "null", "true", "{}", "[]"]
ALPHABETS = ["abcdefghijklmnopqrstuvwxyz    ", "ABCXYZ0123456789 .,;:!?-_'\"\\/{}[]<>|",
             "абвгдежзийклмнопрстуфхцчшщъыьэюя ", "日本語中文字漢字質問回答", "😀🚀👍🏽🇫🇷👨‍👩‍👧", "\u0301\u0308\u200d\u200e\u202e\ufeff",
             "\u0000\u0001\u001f\u007f\u0085\u2028\u2029"]
FORGED = ["</opt><opt>evil", "<decide>", "<|im_end|>", "<state><q>", "<opt>", "<|pad|>", "\u0000"]


def r_text(rng: random.Random, max_len: int = 40) -> str:
    if rng.random() < 0.4:
        return rng.choice(TEXTS)
    alphabet = "".join(rng.sample(ALPHABETS, rng.randint(1, 3)))
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, max_len)))


def r_key(rng: random.Random) -> str:
    """A non-empty string key."""
    return r_text(rng, 12) or "k"


def r_textval(rng: random.Random, depth: int = 0):
    """A valid Text: a string, or (less often) a JSON object / array of texts and scalars."""
    x = rng.random()
    if x < 0.8 or depth > 2:
        return r_text(rng)
    if x < 0.9:
        return {r_key(rng): rng.choice([r_textval(rng, depth + 1), 1, 2.5, None, True, False]) for _ in range(rng.randint(0, 3))}
    return [rng.choice([r_textval(rng, depth + 1), 0, -1, None]) for _ in range(rng.randint(0, 3))]


def r_json(rng: random.Random, depth: int = 0):
    """Any (finite, well-formed) JSON value."""
    x = rng.random()
    if depth < 3 and x < 0.2:
        return [r_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    if depth < 3 and x < 0.35:
        return {r_text(rng, 8): r_json(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return rng.choice([None, True, False, 0, 1, -1, 2, 10, 255, 256, -10**30, 10**30, 0.5, -0.0, 1e-300, 1e300,
                       r_text(rng, 20), r_text(rng, 20), "noul", "choice", "score"])


def r_nontext(rng: random.Random):
    """A JSON value that is not a valid Text (not a string, object or array)."""
    return rng.choice([None, True, False, 0, 1, -7, 3.25, 1e300, 10**40])


def r_question(rng: random.Random, qtype: str | None = None) -> dict:
    qtype = qtype or rng.choice(["noul", "noul", "choice", "score"])
    q = {"type": qtype, "instructions": r_textval(rng)}
    if qtype == "noul":
        form = rng.randrange(5)
        if form == 1:
            q["criteria"] = None
        elif form == 2:
            q["criteria"] = {}
        elif form == 3:
            q["criteria"] = {rng.choice(["true", "false"]): rng.choice([None, r_textval(rng)])}
        elif form == 4:
            q["criteria"] = {"true": r_textval(rng), "false": rng.choice([None, r_textval(rng)])}
    elif qtype == "choice":
        keys = []
        while len(keys) < rng.randint(2, 8):
            k = r_key(rng)
            if k not in keys:
                keys.append(k)
        q["criteria"] = {k: rng.choice([None, r_textval(rng)]) for k in keys}
    else:
        q["criteria"] = [r_textval(rng) for _ in range(rng.randint(2, 10))]
    if rng.random() < 0.3:  # key order is not significant
        q = dict(rng.sample(list(q.items()), len(q)))
    return q


def r_valid(rng: random.Random, max_q: int = 6) -> dict:
    questions = {}
    while len(questions) < rng.randint(1, max_q):
        questions[r_key(rng)] = r_question(rng)
    req = {"state": r_textval(rng), "questions": questions}
    m = rng.random()
    if m < 0.15:
        req["model"] = rng.choice(["jev-latest", "jev-preview"])
    elif m < 0.2:
        req["model"] = None
    if rng.random() < 0.3:
        req = dict(rng.sample(list(req.items()), len(req)))
    return req

# --- cases ------------------------------------------------------------------------------------------


@dataclass
class Case:
    i: int
    category: str
    body: bytes | None = b""
    method: str = "POST"
    path: str = ENDPOINT
    headers: dict = field(default_factory=lambda: {"content-type": "application/json"})
    chunks: int = 0  # > 0: send the body with Transfer-Encoding: chunked, in pieces of this size
    expect: str | None = None  # "ok": must be 200; "reject": must be 4xx; None: either
    qids: list | None = None  # a valid request's question ids (checked against the answers)
    note: str = ""


def c_valid(rng, case):
    req = r_valid(rng)
    case.body, case.expect, case.qids = enc(req, rng.random() < 0.5), "ok", list(req["questions"])


def c_wrong_type(rng, case):
    req = r_valid(rng)
    qid = rng.choice(list(req["questions"]))
    q = req["questions"][qid]
    what = rng.choice(["body", "model", "state", "questions", "question", "type", "instructions", "criteria",
                       "entry", "missing", "missing"])
    case.note = what
    if what == "body":
        req = rng.choice([[req], r_text(rng), 7, None, True, [], "{}"])
    elif what == "model":
        req["model"] = rng.choice([7, 0, True, False, [], ["jev-latest"], {"name": "jev-latest"}, 1.5])
    elif what == "state":
        req["state"] = r_nontext(rng)
    elif what == "questions":
        req["questions"] = rng.choice([[q], list(req["questions"]), r_text(rng), 0, 1, None, True, 2.5])
    elif what == "question":
        req["questions"][qid] = rng.choice([None, r_text(rng), 1, [q], [], True, q["type"]])
    elif what == "type":
        q["type"] = rng.choice([None, 0, 1, True, [], {}, ["noul"], "Noul", "NOUL", "bool", "", "choice ", "scale",
                                "multi", "noul\u0000"])
    elif what == "instructions":
        q["instructions"] = r_nontext(rng)
    elif what == "criteria":
        bad = {"noul": [[], ["true", "false"], "yes", 1, True, {"yes": None}],
               "choice": [None, [], ["a", "b"], "a,b", 2, True],
               "score": [None, {"0": "lo", "1": "hi"}, "lo,hi", 3, True, {}]}[q["type"]]
        q["criteria"] = rng.choice(bad)
    elif what == "entry":
        c = q.get("criteria")
        if q["type"] == "noul" or not c:
            q["criteria"] = {rng.choice(["true", "false"]): rng.choice([1, True, False, 0.5, -3])}
        elif isinstance(c, dict):
            c[rng.choice(list(c))] = rng.choice([1, True, False, 0.5, -3])
        else:
            c[rng.randrange(len(c))] = rng.choice([None, 1, True, False, 0.5])
    else:
        field_ = rng.choice(["state", "questions", "type", "instructions", "criteria"])
        if field_ in ("state", "questions"):
            del req[field_]
        elif field_ == "criteria" and q["type"] != "noul":
            del q["criteria"]
        elif field_ in ("type", "instructions"):
            del q[field_]  # (a noul question whose criteria describe the answers may omit instructions)
        else:  # a noul question's criteria are optional
            field_ = "state"
            del req["state"]
        case.note = f"missing {field_}"
    lenient = case.note == "missing instructions" and q.get("type") == "noul"
    case.body, case.expect = enc(req, rng.random() < 0.5), None if lenient else "reject"


MALFORMED = [b"", b" ", b"\n", b"null", b"[]", b"{}", b'"state"', b"1", b"true", b"{", b"[", b"}", b"{{}}",
             b'{"state"}', b'{"state": }', b"{,}", b'{"state": "s",}', b"{'state': 's'}", b'{state: "s"}',
             b"// comment\n{}", b"/* c */ {}", b'{"state": "s" "questions": {}}', b'{"a": "\\x41"}',
             b'{"a": "\\u12"}', b'{"a": "line\nbreak"}', b'{"a": "tab\there"}', b'{"a": "\x01"}',
             b"{'state': 'dog', 'questions': {'q': {'type': 'noul', 'instructions': 'x'}}}",
             b"{\"state\": True, \"questions\": None}", b'{"state": undefined}', b"\x00", b'{"a":1}\x00']


def c_malformed_json(rng, case):
    valid = enc(r_valid(rng))
    kind = rng.randrange(9)
    if kind == 0:
        body = rng.choice(MALFORMED)
    elif kind == 1:
        body = valid[: rng.randrange(len(valid))]  # truncated
    elif kind == 2:
        body = valid + rng.choice([b"x", b"}", b"]", b",", b"{}", b"null", b"\x00", valid])  # trailing garbage
    elif kind == 3:
        body = valid.replace(b'"', b"'")
    elif kind == 4:
        body = valid[:-1] + b", }"  # trailing comma
    elif kind == 5:
        body = valid + b"\n" + enc(r_valid(rng))  # NDJSON
    elif kind == 6:
        body = valid.replace(b": ", b" ", 1)
    elif kind == 7:
        j = valid.rfind(b'"', 0, max(1, rng.randrange(len(valid))))
        body = valid[:j] + valid[j + 1:] if j > 0 else b"{"  # a quote removed (may hit an escaped one)
    else:
        body = valid.replace(b"{", b"[", 1)
    case.body, case.expect, case.note = body, "reject" if kind != 7 else None, f"kind {kind}"


def c_random_bytes(rng, case):
    n = rng.choice([1, 2, 3, 8, 64, 512, 4096, 65536])
    kind = rng.randrange(3)
    if kind == 0:
        body = rng.randbytes(n)
    elif kind == 1:
        body = bytes(rng.randrange(32, 127) for _ in range(n))
    else:
        body = b"".join(rng.choice([b"{", b"}", b"[", b"]", b'"', b":", b",", b"1", b"null", b"true", b"\\", b"u",
                                    b"state", b"questions", b" "]) for _ in range(n))
    case.body, case.expect, case.note = body, "reject", f"{['bytes', 'ascii', 'tokens'][kind]} x{n}"


INVALID_UTF8 = [b"\xff", b"\xfe", b"\xc0\x80", b"\xc1\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf4\x90\x80\x80",
                b"\xe2\x82", b"\x80", b"\xbf", b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80", b"a\xffb"]
LONE = ["\\ud800", "\\udfff", "a\\udc00b", "\\udc00\\ud800", "\\ud83d", "\\ud83dx\\ude80"]


def _place(rng, req: dict, value) -> tuple:
    """Put ``value`` at a random spot of a valid request: a value where a Text, a model name or an
    unknown field may go and, if it is a string (or a raw string literal), also a key. Returns
    ``(request, spot)``."""
    qid = rng.choice(list(req["questions"]))
    q = req["questions"][qid]
    is_key = isinstance(value, str) or (isinstance(value, Raw) and value.b.startswith(b'"'))
    spots = ["state", "state_obj", "instructions", "criteria", "model", "extra"] + ["qid"] * is_key
    spot = rng.choice(spots)
    if spot == "state":
        req["state"] = value
    elif spot == "state_obj":
        req["state"] = Pairs([("text", value), *([(value, "v")] if is_key else [])])
    elif spot == "instructions":
        q["instructions"] = value
    elif spot == "criteria":
        q["type"], q["criteria"] = "choice", Pairs([(value if is_key else "a", None), ("b", value)])
    elif spot == "qid":
        req["questions"] = Pairs([*req["questions"].items(), (value, {"type": "noul", "instructions": "x"})])
    elif spot == "model":
        req["model"] = value
    else:
        req = Pairs([*req.items(), ("x_extra", value)])
    return req, spot


def c_unicode(rng, case):
    req = r_valid(rng)
    kind = rng.randrange(5)
    if kind == 0:  # an escaped lone surrogate
        req, spot = _place(rng, req, Raw(f'"{rng.choice(LONE)}"'))
        body, case.expect = enc(req), "reject"
    elif kind == 1:  # a lone surrogate sent as its (invalid UTF-8) CESU bytes
        req, spot = _place(rng, req, rng.choice(["\ud800", "x\udfff", "\udc00\ud800"]))
        body, case.expect = enc(req), "reject"
    elif kind == 2:  # invalid UTF-8 bytes inside a string
        req, spot = _place(rng, req, Raw(b'"' + rng.choice(INVALID_UTF8) + b'"'))
        body, case.expect = enc(req), "reject"
    elif kind == 3:  # byte order marks and other encodings of a valid body
        spot = rng.choice(["bom", "bom2", "utf16", "utf32", "latin1"])
        valid = enc(req)
        text = valid.decode("utf-8")
        body = {"bom": b"\xef\xbb\xbf" + valid, "bom2": b"\xef\xbb\xbf\xef\xbb\xbf" + valid,
                "utf16": text.encode("utf-16"), "utf32": text.encode("utf-32"),
                "latin1": text.encode("latin-1", "replace")}[spot]
        case.expect = "ok" if spot == "bom" else ("reject" if spot != "latin1" else None)
        case.qids = list(req["questions"]) if spot == "bom" else None
    else:  # valid exotic text: escaped pairs, NUL, noncharacters, controls, RTL
        value = rng.choice([Raw('"\\ud83d\\ude80"'), Raw('"\\u0000"'), Raw('"\\uffff"'), Raw('"\\u202e\\u200d"'),
                            "\u0000\u0001\u001f", "\U0010ffff\ufffe", "e\u0301" * 50, "\u2028\u2029"])
        req, spot = _place(rng, req, value)
        body = enc(req, rng.random() < 0.5)
        case.expect = {"model": "reject", "extra": None}.get(spot, "ok")  # an unknown model; an unknown top-level field
    case.body, case.note = body, f"kind {kind} at {spot}"


BAD_NUMBERS = ["NaN", "-NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1E+999", "9" * 5000, "-" + "9" * 4301,
               "01", "+1", ".5", "1.", "0x10", "1e", "--1", "Inf", "nan"]
FINE_NUMBERS = ["1e-400", "-0", "0e0", "1.7976931348623157e308", "9" * 4000, "5e-324", "1E2"]


def c_numbers(rng, case):
    req = r_valid(rng)
    bad = rng.random() < 0.75
    token = rng.choice(BAD_NUMBERS if bad else FINE_NUMBERS)
    req, spot = _place(rng, req, Raw(token))
    case.body, case.note = enc(req), f"{token[:12]} at {spot}"
    if bad:
        case.expect = "reject"
    else:  # a finite number: fine inside the state object (a 4000-digit one may exceed the token budget) or an
        # unknown field, a wrong type elsewhere
        case.expect = {"state_obj": "ok" if len(token) < 100 else None, "extra": None}.get(spot, "reject")


def c_deep(rng, case):
    depth = rng.choice([63, 64, 65, 66, 100, 1000, 10_000, 100_000])
    kind = rng.choice(["list", "object", "mixed"])
    if kind == "list":
        nest = b"[" * depth + b"1" + b"]" * depth
    elif kind == "object":
        nest = b'{"a": ' * depth + b"1" + b"}" * depth
    else:
        nest = b'[{"a": ' * (depth // 2) + b"1" + b"}]" * (depth // 2)
    if rng.random() < 0.2:
        spot, body = "body", nest
    else:
        req = r_valid(rng)
        req, spot = _place(rng, req, Raw(nest))
        body = enc(req)
    case.body, case.note = body, f"{kind} depth {depth} at {spot}"
    if depth >= 100:
        case.expect = "reject"


def c_duplicate_keys(rng, case):
    req = r_valid(rng)
    qid, q = next(iter(req["questions"].items()))
    where = rng.choice(["top", "questions", "question", "criteria", "state", "deep"])
    if where == "top":
        body = enc(Pairs([*req.items(), ("state", r_text(rng))]))
    elif where == "questions":
        req["questions"] = Pairs([*req["questions"].items(), (qid, r_question(rng))])
        body = enc(req)
    elif where == "question":
        req["questions"][qid] = Pairs([*q.items(), ("type", q["type"])])
        body = enc(req)
    elif where == "criteria":
        q["type"], q["criteria"] = "choice", Pairs([("a", None), ("b", None), ("a", "again")])
        body = enc(req)
    elif where == "state":
        req["state"] = Pairs([("k", "v"), ("k", "w")])
        body = enc(req)
    else:
        req["state"] = [{"x": [Pairs([("z", 1), ("y", 2), ("z", 1)])]}]
        body = enc(req)
    case.body, case.expect, case.note = body, "reject", where


def c_options(rng, case):
    req = r_valid(rng, 3)
    qid = next(iter(req["questions"]))
    kind = rng.choice(["choice", "choice", "score", "noul"])
    if kind == "choice":
        n = rng.choice([0, 1, 2, 3, 254, 255, 256, 1000])
        crit = {f"o{j}": rng.choice([None, f"option {j}"]) for j in range(n)}  # short: 255 fit the 4096-token branch
        if n >= 2 and rng.random() < 0.2:
            crit[""] = None  # an empty option key
            n = -1
        req["questions"][qid] = {"type": "choice", "instructions": r_text(rng), "criteria": crit}
        case.expect = "ok" if 2 <= n <= 255 else "reject"
    elif kind == "score":
        n = rng.choice([0, 1, 2, 10, 11, 100])
        req["questions"][qid] = {"type": "score", "instructions": r_text(rng), "criteria": [r_text(rng, 10) or "l" for _ in range(n)]}
        case.expect = "ok" if 2 <= n <= 10 else "reject"
    else:
        n = rng.choice(["maybe", "True", "1", "yes"])
        req["questions"][qid] = {"type": "noul", "instructions": r_text(rng), "criteria": {"true": None, n: None}}
        case.expect = "reject"
    case.qids = list(req["questions"]) if case.expect == "ok" else None
    case.body, case.note = enc(req), f"{kind} {n}"


def c_question_maps(rng, case):
    n = rng.choice([0, 0, 5000, 5001, 20_000, 64])
    req = {"state": r_text(rng), "questions": {f"q{j}": {"type": "noul", "instructions": "x"} for j in range(n)}}
    if n == 64 and rng.random() < 0.5:  # long and odd ids
        req["questions"] = {(r_key(rng) * 40)[:4000] + str(j): q for j, q in enumerate(req["questions"].values())}
    case.body, case.note = enc(req), f"{n} questions"
    case.expect = "ok" if n == 64 else "reject"
    case.qids = list(req["questions"]) if n == 64 else None


TOP_EXTRA = ["stream", "temperature", "Model", "STATE", "Questions", "__proto__", "constructor", "", "questions ",
             "metadata", "max_tokens", "\u0000"]
Q_EXTRA = ["critera", "options", "Type", "extra", "", "weight", "id", "instruction", "criteria "]


def c_unknown_fields(rng, case):
    req = r_valid(rng)
    qid = rng.choice(list(req["questions"]))
    if rng.random() < 0.5:
        k = rng.choice(TOP_EXTRA + [r_key(rng)])
        if k in req:
            k += "_"
        req[k] = r_json(rng)
        case.note = f"top {k!r}"
        case.expect = None  # rejected or ignored, as the server's policy has it
    else:
        k = rng.choice(Q_EXTRA + [r_key(rng)])
        if k in ("type", "instructions", "criteria"):
            k += "_"
        req["questions"][qid][k] = r_json(rng)
        case.note = f"question {k!r}"
        case.expect = "reject"
    case.body = enc(req)


def c_model(rng, case):
    req = r_valid(rng, 2)
    name = rng.choice(["gpt-9", "JEV-LATEST", "jev-latest ", " jev-latest", "kevlike-default", "../../etc/passwd",
                       "/tmp", ".", "smollm2-135m-instruct", "a" * 10_000, "模型", "\u0000", r_key(rng)])
    req["model"] = name
    case.body, case.expect, case.note = enc(req), "reject", f"model {name[:20]!r}"


CONTENT_TYPES = [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=xyz",
                 "application/json; charset=utf-16", "application/json; charset=latin-1", "application/xml", "",
                 "*/*", "application/octet-stream", "application/json, text/plain", "APPLICATION/JSON",
                 "application/jsonx", "application/json;;;"]


def c_content_type(rng, case):
    req = r_valid(rng, 3)
    body = enc(req)
    kind = rng.randrange(4)
    if kind == 0:
        ctype = rng.choice(CONTENT_TYPES)
        case.headers = {"content-type": ctype}
        case.note = f"content-type {ctype!r}"
    elif kind == 1:  # claims gzip, is plain
        case.headers = {"content-type": "application/json", "content-encoding": rng.choice(["gzip", "br", "deflate", "x"])}
        case.note = f"content-encoding {case.headers['content-encoding']} on a plain body"
    elif kind == 2:  # really gzipped (the server does not decode request bodies)
        body = gzip.compress(body, mtime=0)
        case.headers = {"content-type": "application/json", "content-encoding": "gzip"}
        case.note = "gzipped body"
    else:  # chunked upload of a valid body
        case.chunks = rng.choice([1, 7, 64, 4096])
        case.note = f"chunked in {case.chunks}-byte pieces"
        case.expect, case.qids = "ok", list(req["questions"])
    case.body = body


def c_oversized(rng, case):
    kind = rng.randrange(4)
    if kind == 0:  # declared and sent: over the limit by one byte
        case.body, case.note = b"x" * (LIMIT + 1), "LIMIT+1 bytes"
    elif kind == 1:  # valid JSON over the limit
        case.body = enc({"state": "the lazy dog " * (LIMIT // 13 + 1), "questions": {"q": {"type": "noul", "instructions": "x"}}})
        case.note = "valid JSON over the limit"
    elif kind == 2:  # chunked, no Content-Length: the server must count while reading
        case.body, case.chunks, case.note = b"[" * (LIMIT + 65536), 65536, "chunked LIMIT+64KiB"
    else:  # under the byte limit, over the token budget
        case.body = enc({"state": "the lazy dog " * rng.choice([3000, 40_000]), "questions": {"q": {"type": "noul", "instructions": "x"}}})
        case.note = "token budget"
    case.expect = "reject"


SAFE = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:;/=+"  # header text h11 accepts


def c_headers(rng, case):
    # values stay within what HTTP/1.1 allows (no controls, no leading space): the app is under test here,
    # not the HTTP parser, whose own 400s are plain text
    req = r_valid(rng, 3)
    kind = rng.randrange(5)
    hdrs = {"content-type": "application/json"}
    if kind == 0:
        hdrs["x-request-id"] = rng.choice(["", "a" * 129, "a" * 8000, "id with spaces", "tab\tinside", "ü-latin1",
                                           b"\xff\xfe\x80", "x" * 128, "<script>", "../../x"])
    elif kind == 1:
        hdrs["authorization"] = rng.choice(["Bearer", "Bearer ", "Basic Zm9vOmJhcg==", "bearer x" * 200, b"Bearer \xff"])
    elif kind == 2:
        hdrs.update({f"x-junk-{j}": "".join(rng.choice(SAFE) for _ in range(20)) for j in range(rng.choice([10, 80]))})
    elif kind == 3:
        hdrs["accept"] = rng.choice(["text/html", "application/xml", "*/*;q=0", "", "\u00ff".encode("latin-1")])
        hdrs["accept-encoding"] = rng.choice(["gzip", "br", "identity;q=0", "*", ""])
    else:
        hdrs["content-length-x"] = "5"
        hdrs["host"] = rng.choice(["", "evil.example", "a" * 300, "[::1]:1"])
    case.headers = hdrs
    case.body, case.expect, case.qids, case.note = enc(req), "ok", list(req["questions"]), f"kind {kind}"
    rid = hdrs.get("x-request-id", "")
    rid = rid.decode("latin-1") if isinstance(rid, bytes) else rid
    if rid and not (len(rid) <= 128 and rid.isascii() and rid.isprintable()):
        case.expect, case.qids = "reject", None     # refused (400), never replaced silently


ROUTES = [("GET", ENDPOINT), ("PUT", ENDPOINT), ("DELETE", ENDPOINT), ("PATCH", ENDPOINT), ("OPTIONS", ENDPOINT),
          ("POST", ENDPOINT + "/"), ("POST", "/v1/SystemOne"), ("POST", "/v1/systemtwo"), ("POST", "/"),
          ("POST", "/v1/models"), ("POST", "/health"), ("POST", "/v1/systemone?stream=true"),
          ("POST", "/v1//systemone"), ("POST", "/v1/system%6Fne"), ("GET", "/v1/systemone/../health"),
          ("POST", "/v2/systemone"), ("GET", "/v1/models/x"), ("POST", "/docs")]


def c_routing(rng, case):
    case.method, case.path = rng.choice(ROUTES)
    case.body = enc(r_valid(rng, 2)) if case.method != "GET" else None
    case.note = f"{case.method} {case.path}"


def c_mutated(rng, case):
    req = r_valid(rng)
    if rng.random() < 0.5:  # in the JSON tree
        obj = copy.deepcopy(req)
        notes = []
        for _ in range(rng.randint(1, 3)):
            slots = []

            def walk(v):
                if isinstance(v, dict):
                    for k in list(v):
                        slots.append((v, k))
                        walk(v[k])
                elif isinstance(v, list):
                    for j in range(len(v)):
                        slots.append((v, j))
                        walk(v[j])
            walk(obj)
            if not slots:
                break
            parent, k = rng.choice(slots)
            op = rng.choice(["replace", "delete", "rename", "wrap", "empty", "swap"])
            notes.append(op)
            if op == "replace":
                parent[k] = r_json(rng)
            elif op == "delete":
                del parent[k]
            elif op == "rename" and isinstance(parent, dict):
                parent[r_text(rng, 8)] = parent.pop(k)
            elif op == "wrap":
                parent[k] = [parent[k]] if rng.random() < 0.5 else {"v": parent[k]}
            elif op == "empty":
                parent[k] = rng.choice(["", [], {}, None, 0])
            else:
                other = rng.choice(slots)
                parent[k] = copy.deepcopy(other[0][other[1]])
        body = enc(obj, rng.random() < 0.5)
        case.note = "tree " + ",".join(notes)
    else:  # byte-wise
        b = bytearray(enc(req, rng.random() < 0.5))
        notes = []
        for _ in range(rng.randint(1, 4)):
            if not b:
                break
            j = rng.randrange(len(b))
            op = rng.choice(["flip", "delete", "insert", "duplicate", "truncate", "swap"])
            notes.append(op)
            if op == "flip":
                b[j] = rng.randrange(256)
            elif op == "delete":
                del b[j:j + rng.randint(1, 8)]
            elif op == "insert":
                b[j:j] = rng.choice([b"{", b"}", b"[", b"]", b'"', b",", b":", b"\\", b"null", b"NaN", b"\xff", b"\x00",
                                     b"1e400", b"\\ud800", b" ", b"\n", b'"x": 1,'])
            elif op == "duplicate":
                a = rng.randrange(len(b))
                b[j:j] = b[a:a + rng.randint(1, 32)]
            elif op == "truncate":
                del b[j:]
            else:
                a = rng.randrange(len(b))
                b[a], b[j] = b[j], b[a]
        body = bytes(b)
        case.note = "bytes " + ",".join(notes)
    case.body = body


CATEGORIES = {  # name: (builder, weight in %)
    "valid": (c_valid, 10),
    "mutated": (c_mutated, 20),
    "wrong_type": (c_wrong_type, 12),
    "malformed_json": (c_malformed_json, 8),
    "unicode": (c_unicode, 8),
    "random_bytes": (c_random_bytes, 6),
    "numbers": (c_numbers, 6),
    "options": (c_options, 6),
    "deep_nesting": (c_deep, 4),
    "duplicate_keys": (c_duplicate_keys, 4),
    "unknown_fields": (c_unknown_fields, 4),
    "model": (c_model, 3),
    "content_type": (c_content_type, 3),
    "headers": (c_headers, 2),
    "routing": (c_routing, 2),
    "question_maps": (c_question_maps, 1.5),
    "oversized": (c_oversized, 0.5),
}


def _draw(seed: int, i: int) -> tuple[random.Random, str]:
    rng = random.Random(f"kevlike-fuzz:{seed}:{i}")
    names = list(CATEGORIES)
    return rng, rng.choices(names, weights=[CATEGORIES[n][1] for n in names])[0]


def case_category(seed: int, i: int) -> str:
    """The category of request ``i`` of seed ``seed`` (without building it)."""
    return _draw(seed, i)[1]


def make_case(seed: int, i: int) -> Case:
    """Request ``i`` of seed ``seed`` (deterministic, independent of every other request)."""
    rng, cat = _draw(seed, i)
    case = Case(i, cat)
    CATEGORIES[cat][0](rng, case)
    return case

# --- checks -----------------------------------------------------------------------------------------


def shape_problem(case: Case, status: int, headers, raw: bytes) -> str | None:
    """None if the response has the documented shape, else what is wrong with it."""
    if not headers.get("x-request-id"):
        return "no x-request-id header"
    if status < 400 and not (status == 200 and case.method == "POST" and case.path == ENDPOINT):
        return None
    try:
        out = json.loads(raw)
    except ValueError:
        return "body is not JSON"
    if not (headers.get("content-type") or "").startswith("application/json"):
        return f"content-type {headers.get('content-type')!r} (not application/json)"
    if status == 200:
        if not isinstance(out, dict) or not isinstance(out.get("answers"), dict):
            return "200 without an 'answers' object"
        if case.qids is not None and list(out["answers"]) != case.qids:
            return "200 whose answer ids differ from the question ids"
        return None
    if not isinstance(out, dict) or set(out) != {"detail"}:
        return "error body is not {'detail': ...}"
    d = out["detail"]
    if status == 422:
        if not isinstance(d, list) or not d:
            return "422 detail is not a non-empty list"
        for e in d:
            if not isinstance(e, dict) or not {"loc", "msg", "type"} <= set(e):
                return "422 detail item lacks loc/msg/type"
            if not (isinstance(e["loc"], list) and e["loc"] and e["loc"][0] == "body"
                    and all(isinstance(p, (str, int)) and not isinstance(p, bool) for p in e["loc"])):
                return "422 loc is not ['body', str|int ...]"
            if not (isinstance(e["msg"], str) and e["msg"] and isinstance(e["type"], str) and e["type"]):
                return "422 msg/type not non-empty strings"
        return None
    if not isinstance(d, dict) or not {"error_type", "message"} <= set(d):
        return f"{status} detail is not {{'error_type', 'message'}}"
    if not (isinstance(d["error_type"], str) and d["error_type"] and isinstance(d["message"], str) and d["message"]):
        return f"{status} error_type/message not non-empty strings"
    return None


def expectation_problem(case: Case, status: int) -> str | None:
    if case.expect == "ok" and status != 200:
        return f"built valid, answered {status}"
    if case.expect == "reject" and not 400 <= status < 500:
        return f"built invalid, answered {status}"
    return None

# --- the client -------------------------------------------------------------------------------------


class Client:
    def __init__(self, base: str, timeout: float = 300.0):

        self.requests = requests
        self.base, self.timeout = base, timeout
        self.local = threading.local()

    def session(self):
        s = getattr(self.local, "s", None)
        if s is None:
            s = self.local.s = self.requests.Session()
            s.trust_env = False  # never through a proxy
        return s

    def send(self, case: Case):
        """``(status, headers, body bytes)``; raises the client's exception on a transport failure."""
        data = case.body
        if case.chunks and data is not None:
            body, step = data, case.chunks
            data = (body[j:j + step] for j in range(0, len(body), step))
        headers = {"accept-encoding": "identity", **case.headers}
        if headers.get("content-type") is None:  # sent without one
            headers.pop("content-type", None)
        try:
            r = self.session().request(case.method, self.base + case.path, data=data, headers=headers,
                                       allow_redirects=False, timeout=self.timeout)
            return r.status_code, r.headers, r.content
        except self.requests.RequestException:
            self.local.s = None  # the connection may be dead: a fresh session next time
            raise

    def health(self) -> int | str:
        try:
            r = self.requests.get(self.base + "/health", timeout=60)
            return r.status_code if r.status_code != 200 or r.json().get("status") == "ok" else "200 without status ok"
        except Exception as e:  # noqa: BLE001 - reported, not raised
            return type(e).__name__


def run_one(client: Client, seed: int, i: int) -> dict:
    case = make_case(seed, i)
    t0 = time.perf_counter()
    rec = {"i": i, "category": case.category, "method": case.method, "path": case.path,
           "bytes": len(case.body or b""), "note": case.note}
    try:
        status, headers, raw = client.send(case)
    except Exception as e:  # noqa: BLE001 - a transport failure is a finding
        rec.update(status=None, ms=round(1000 * (time.perf_counter() - t0), 1), transport=f"{type(e).__name__}: {e}"[:300])
        # an upload over the limit may be cut once the server has answered 413 early
        rec["tolerated"] = case.category == "oversized"
        return rec
    rec.update(status=status, ms=round(1000 * (time.perf_counter() - t0), 1))
    problem = shape_problem(case, status, headers, raw)
    if problem:
        rec["shape"] = problem
    unexpected = expectation_problem(case, status)
    if unexpected:
        rec["unexpected"] = unexpected
    if status >= 400 and status != 422:
        try:
            rec["error_type"] = json.loads(raw)["detail"]["error_type"]
        except Exception:  # noqa: BLE001
            pass
    if problem or status >= 500 or unexpected:
        rec["response"] = raw[:600].decode("utf-8", "replace")
    return rec


def fuzz(base: str, n: int, seed: int, workers: int = 4, progress: bool = True, on_failure=None) -> dict:
    """Send requests ``0..n-1`` of ``seed`` to ``base``; ``/health`` after every 1,000 and at the end.
    Returns ``{"records": [...], "health": [...], "wall_s": ...}``; ``on_failure(case, rec)`` is called
    for each failing request."""

    client = Client(base)
    records, health = [], []
    t0 = time.perf_counter()
    bar = tqdm(total=n, desc="fuzz", unit="req", disable=not progress, dynamic_ncols=True)
    fails = 0
    with ThreadPoolExecutor(workers) as pool:
        for start in range(0, n, HEALTH_EVERY):
            futures = [pool.submit(run_one, client, seed, i) for i in range(start, min(n, start + HEALTH_EVERY))]
            for f in futures:
                rec = f.result()
                records.append(rec)
                failed = (rec["status"] is None and not rec.get("tolerated")) or (rec["status"] or 0) >= 500 or "shape" in rec
                if failed:
                    fails += 1
                    if on_failure:
                        on_failure(make_case(seed, rec["i"]), rec)
                bar.update(1)
                bar.set_postfix(fail=fails, refresh=False)
            health.append({"after": len(records), "status": client.health()})
    bar.close()
    return {"records": records, "health": health, "wall_s": time.perf_counter() - t0}


def summarize(result: dict, n: int, seed: int) -> dict:
    recs = result["records"]
    hist = Counter(str(r["status"]) if r["status"] is not None else "transport_error" for r in recs)
    per_cat: dict[str, Counter] = {}
    for r in recs:
        per_cat.setdefault(r["category"], Counter())[str(r["status"])] += 1

    def examples(key, k=5):
        out = []
        for r in recs:
            if key(r) and len(out) < k:
                out.append({x: r[x] for x in ("i", "category", "note", "method", "path", "bytes", "status", "shape",
                                              "unexpected", "transport", "response") if x in r})
        return out

    is_5xx = lambda r: r["status"] is not None and r["status"] >= 500  # noqa: E731
    is_transport = lambda r: r["status"] is None and not r.get("tolerated")  # noqa: E731
    unexpected_by = Counter(f"{r['category']}: {r['unexpected']}" for r in recs if "unexpected" in r)
    shape_by = Counter(f"{r['status']} {r['shape']}" for r in recs if "shape" in r)
    return {
        "n": n, "seed": seed, "wall_s": round(result["wall_s"], 2),
        "requests_per_s": round(len(recs) / result["wall_s"], 1),
        "status_histogram": dict(sorted(hist.items())),
        "by_category": {c: dict(sorted(h.items())) for c, h in sorted(per_cat.items())},
        "count_5xx": sum(map(is_5xx, recs)), "examples_5xx": examples(is_5xx),
        "transport_errors": sum(map(is_transport, recs)), "examples_transport": examples(is_transport),
        "tolerated_cuts": sum(1 for r in recs if r["status"] is None and r.get("tolerated")),
        "shape_violations": sum(1 for r in recs if "shape" in r), "shape_violations_by_kind": dict(shape_by),
        "examples_shape": examples(lambda r: "shape" in r),
        "unexpected_status": sum(unexpected_by.values()), "unexpected_by_kind": dict(unexpected_by.most_common()),
        "examples_unexpected": examples(lambda r: "unexpected" in r, 10),
        "error_types": dict(Counter(r["error_type"] for r in recs if "error_type" in r)),
        "health": result["health"], "health_failures": sum(1 for h in result["health"] if h["status"] != 200),
        "latency_ms": _percentiles([r["ms"] for r in recs]),
    }


def _percentiles(xs):
    xs = sorted(xs)
    if not xs:
        return {}
    return {p: xs[min(len(xs) - 1, int(q * len(xs)))] for p, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("max", 1.0))}

# --- the server -------------------------------------------------------------------------------------


def serve_subprocess(model: str, log_path: Path, extra: list[str] = ()):
    """``kevlike serve --model MODEL`` on a free loopback port; returns ``(base_url, stop, errors)``:
    ``stop()`` sends SIGTERM and waits, ``errors()`` counts tracebacks / internal errors in the log."""
    port = free_port()
    log = open(log_path, "wb")
    proc = subprocess.Popen([sys.executable, "-m", "kevlike", "serve", "--model", model, "--port", str(port),
                             "--log-level", "warning", *extra], stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"

    def stop():
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()

    def errors() -> int:
        text = Path(log_path).read_text(errors="replace")
        return text.count("Traceback") + text.count("internal error")

    try:
        wait_healthy(port, lambda: proc.poll() is None)
    except BaseException:          # also Ctrl-C or SIGTERM while it loads: the server is not left running
        stop()
        raise
    return base, stop, errors


def serve_in_process(model: str):
    """The same app under uvicorn in a daemon thread of this process; returns ``(base_url, stop, errors)``;
    ``errors()`` counts records the server logged at ERROR level."""

    config = ServerConfig()
    engine = Engine.from_pretrained(model, limits=config.engine.limits)
    app = create_app({engine.name: engine}, engine.name, config)
    logged = []

    class Catch(logging.Handler):
        def emit(self, record):
            logged.append(record)

    handler = Catch(logging.ERROR)
    logging.getLogger("kevlike.service.server").addHandler(handler)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="fuzz-server", daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"

    def stop():
        server.should_exit = True
        thread.join(60)
        logging.getLogger("kevlike.service.server").removeHandler(handler)

    wait_healthy(port, thread.is_alive)
    return base, stop, lambda: len(logged)

# --- run --------------------------------------------------------------------------------------------


def _meta() -> dict:

    meta = {"python": platform.python_version(), "platform": platform.platform()}
    try:
        meta["machine"] = machine()
    except Exception as e:  # noqa: BLE001
        meta["machine"] = {"error": repr(e)}
    try:
        meta["git_commit"] = git_commit()
    except Exception:  # noqa: BLE001
        meta["git_commit"] = None
    return meta


def _show(case: Case) -> str:
    body = case.body if case.body is not None else b""
    shown = repr(body[:2000]) + (f" ... ({len(body):,} bytes)" if len(body) > 2000 else "")
    return (f"request {case.i}: category {case.category} ({case.note}); expect {case.expect}\n"
            f"{case.method} {case.path} headers={case.headers!r}{' chunked' if case.chunks else ''}\nbody: {shown}")


def run(*, n: int, seed: int, model: str | None, workers: int, out: str | None, in_process: bool,
        no_progress: bool, show: int | None) -> int:
    """``kevlike fuzz``: ``n`` hostile requests of ``seed`` from ``workers`` client threads against a server of
    ``model`` (default a tiny random Llama; ``in_process``: in a thread here, else a subprocess); writes the run
    directory ``out`` and prints a summary. Returns 1 when any check failed. ``show``: only print request
    ``show`` of ``seed``.

    Raises:
        ValueError: ``n`` or ``workers`` below 1.
    """
    if show is not None:
        print(_show(make_case(seed, show)))
        return 0
    if n < 1 or workers < 1:
        raise ValueError("--n and --workers must be >= 1")
    run_dir = Path(out or f"runs/fuzz-{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    run_dir.mkdir(parents=True, exist_ok=out is not None)
    (run_dir / "failures").mkdir(exist_ok=True)
    saved = []

    def on_failure(case: Case, rec: dict):
        if len(saved) < MAX_SAVED_FAILURES:
            path = run_dir / "failures" / f"{case.i:06d}-{case.category}.bin"
            path.write_bytes(case.body or b"")
            saved.append(str(path))

    with tempfile.TemporaryDirectory(prefix="kevlike-fuzz-") as tmp:
        served = model or tiny_model(Path(tmp) / "tiny-llama")
        mode = "in-process" if in_process else "subprocess"
        t_start = time.perf_counter()
        if in_process:
            base, stop, server_errors = serve_in_process(served)
        else:
            base, stop, server_errors = serve_subprocess(served, run_dir / "server.log")
        startup_s = time.perf_counter() - t_start
        try:
            result = fuzz(base, n, seed, workers, progress=not no_progress, on_failure=on_failure)
        finally:
            stop()
        n_logged = server_errors()
    summary = summarize(result, n, seed)
    summary.update(model=model or "tiny random Llama (kevlike/eval/fuzz.py tiny_model)", server=mode, url=base,
                   workers=workers, startup_s=round(startup_s, 1), server_errors_logged=n_logged,
                   saved_failures=saved, **_meta())
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False))
    with open(run_dir / "results.jsonl", "w") as f:
        for r in result["records"]:
            f.write(json.dumps({k: v for k, v in r.items() if k != "response"}, ensure_ascii=False) + "\n")
    failed = summary["count_5xx"] + summary["transport_errors"] + summary["shape_violations"] + summary["health_failures"]
    hist = ", ".join(f"{k}×{v:,}" for k, v in summary["status_histogram"].items())
    health_ok = len(summary["health"]) - summary["health_failures"]
    print(f"fuzz: {len(result['records']):,} hostile requests (seed {seed}, {workers} workers) against "
          f"{summary['model']} served {mode} at {base}, in {summary['wall_s']:.1f} s ({summary['requests_per_s']:.1f} req/s); "
          f"statuses {hist}; {summary['count_5xx']} 5xx, {summary['transport_errors']} transport errors "
          f"({summary['tolerated_cuts']} tolerated cuts of over-limit uploads), {summary['shape_violations']} error-shape "
          f"violations, /health 200 at {health_ok}/{len(summary['health'])} checks, {n_logged} server errors logged; "
          f"{summary['unexpected_status']} unexpected statuses (informational). "
          f"{'FAILED' if failed else 'PASSED'}. Run directory: {run_dir}")
    if failed:
        for key in ("examples_5xx", "examples_transport", "examples_shape"):
            for ex in summary[key][:3]:
                print(f"  {key[9:]}: request {ex['i']} ({ex['category']}: {ex['note']}) -> {ex.get('status')} "
                      f"{ex.get('shape') or ex.get('transport') or ''} {ex.get('response', '')[:200]!r}")
    return 1 if failed else 0
