"""Probe: packed vs separate (DESIGN.md §12), as kev defines it.

For every request, each question answered alone (``[state][branch]``, one forward per question)
vs all questions packed in one forward; reports max and mean |Δp| over every probability of every
answer, and the wall-time ratio separate / packed.

    kevlike parity [--model NAME_OR_DIR] [--dtype float32] REQUEST.json ...
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from kevlike.config.engine import EngineOptions
from kevlike.model.engine import Engine


def answer_probabilities(response: dict) -> dict:
    """``{(question id, option key): p}``; a noul answer contributes P(true) and P(false)."""
    out = {}
    for qid, a in response["answers"].items():
        if a["type"] == "noul":
            out[(qid, "true")], out[(qid, "false")] = a["noul"], 1.0 - a["noul"]
        else:
            out.update({(qid, k): p for k, p in a["probabilities"].items()})
    return out


def packed_vs_separate(engine, requests: list) -> dict:
    """Run each request packed and separate; returns per-request rows and the overall max/mean |Δp|.
    Times are wall-clock seconds of ``Engine.decide`` (after one warm-up call)."""
    engine.decide(requests[0])
    rows, diffs = [], []
    for r in requests:
        t0 = time.perf_counter()
        packed = engine.decide(r)
        t1 = time.perf_counter()
        separate = engine.decide(r, mode="separate")
        t2 = time.perf_counter()
        pa, pb = answer_probabilities(packed), answer_probabilities(separate)
        d = [abs(pa[k] - pb[k]) for k in pa]
        diffs.extend(d)
        rows.append({"questions": len(packed["answers"]), "tokens_packed": packed["usage"]["input_tokens"],
                     "tokens_separate": separate["usage"]["input_tokens"], "max_abs_dp": max(d),
                     "packed_s": t1 - t0, "separate_s": t2 - t1})
    return {"requests": rows, "max_abs_dp": max(diffs), "mean_abs_dp": sum(diffs) / len(diffs),
            "n_probabilities": len(diffs)}


def run(options: EngineOptions, *, paths: list[str], model: str | None) -> int:
    """``kevlike parity``: :func:`packed_vs_separate` of ``model`` (loaded with ``options``) on the request files
    ``paths``, printed as a table."""

    engine = Engine.from_pretrained(model, options)
    requests = [json.loads(Path(x).read_text()) for x in paths]
    res = packed_vs_separate(engine, requests)
    print(f"model={engine.name} readout={engine.readout.name} dtype={options.dtype} backend={engine.backend}")
    print(f"{'request':32} {'Q':>3} {'tok packed':>10} {'tok sep':>8} {'max|dp|':>9} {'packed s':>9} {'sep s':>7}")
    for path, row in zip(paths, res["requests"]):
        print(f"{Path(path).name:32} {row['questions']:3d} {row['tokens_packed']:10d} {row['tokens_separate']:8d} "
              f"{row['max_abs_dp']:9.1e} {row['packed_s']:9.2f} {row['separate_s']:7.2f}")
    print(f"overall: max |dp| = {res['max_abs_dp']:.1e}, mean |dp| = {res['mean_abs_dp']:.1e} "
          f"over {res['n_probabilities']} probabilities")
    return 0
