"""How fast can int8 Linear layers make a whole request on this CPU (issue 14's "int8 ≥ 1.8× faster
than fp32" on an AVX2-only CPU)? Amdahl's law with measured parts.

Profiles one packed forward pass of a real request (``examples/review.json`` by default) with
``torch.profiler``, once in float32 and once with ``--quantize int8`` (``kevlike/model/quantize.py``), and
splits each pass's time into its Linear layers (float32 ``aten::mm``/``addmm``; int8
``quantized::linear_dynamic``, activation quantization included) and everything else (attention, norms,
activations, rotary, indexing). With ``f`` the float32 Linear share and ``s`` the measured int8/float32
speed-up of the int8 layers over the same layers in float32 (their share of the Linear time taken as their
share of the Linear weights, i.e. of the FLOP) the bound on the whole pass is ``1 / ((1 − f) + f / s)``, reached only if
*every* Linear (down_proj too, which ``--quantize int8`` keeps in float32 for accuracy) ran at that rate and
nothing else changed. Prints one JSON object: CPU, threads, tokens, the two passes' milliseconds and
parts, ``f``, ``s`` and the bound.

    python experiments/int8_bound.py --threads 1
"""

from __future__ import annotations

import argparse
import json

import torch
from torch.profiler import ProfilerActivity, profile

from kevlike.model.engine import Engine
from kevlike.runs import machine

FLOAT_OPS = {"aten::mm", "aten::addmm"}
INT8_OPS = {"quantized::linear_dynamic"}


def parts_ms(engine: Engine, enc, reps: int) -> dict:
    """Median over ``reps`` profiled passes of ``{"total", "linear", "linear_fp32", "linear_int8", "other"}`` in
    milliseconds (self CPU time)."""
    rows = []
    with torch.inference_mode():
        engine.question_logits([enc])
        for _ in range(reps):
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                engine.question_logits([enc])
            ev = prof.key_averages()
            total = sum(e.self_cpu_time_total for e in ev) / 1e3
            fl = sum(e.self_cpu_time_total for e in ev if e.key in FLOAT_OPS) / 1e3
            q8 = sum(e.self_cpu_time_total for e in ev if e.key in INT8_OPS) / 1e3
            rows.append({"total": total, "linear": fl + q8, "linear_fp32": fl, "linear_int8": q8,
                         "other": total - fl - q8})
    rows.sort(key=lambda r: r["total"])
    return rows[len(rows) // 2]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--request", default="examples/review.json", help="a Jev request JSON file")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--reps", type=int, default=5, help="profiled passes per precision (median kept)")
    p.add_argument("--model", default=None, help="decision model (default: kevlike-default)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    with open(args.request) as fh:
        request = json.load(fh)
    out = {"machine": machine(), "request": args.request}
    for q in ("none", "int8"):
        eng = Engine.from_pretrained(args.model, dtype="float32", quantize=q, threads=args.threads)
        if q == "int8":   # the share of the Linear weights (= FLOP per token) that run in int8
            dyn = torch.ao.nn.quantized.dynamic.Linear
            n8 = sum(m.in_features * m.out_features for m in eng.model.modules() if isinstance(m, dyn))
            nf = sum(m.in_features * m.out_features for n, m in eng.model.named_modules()
                     if isinstance(m, torch.nn.Linear) and "lm_head" not in n)
            out["int8_weight_share"] = n8 / (n8 + nf)
        enc = eng.prepare(request).encoded
        out["tokens"] = len(enc.state_ids) + sum(b.n_tokens for b in enc.branches)
        out["float32" if q == "none" else "int8"] = parts_ms(eng, enc, args.reps)
    out["threads"] = torch.get_num_threads()      # what the passes ran at (the engine's thread policy applies it)
    fp, q8, w = out["float32"], out["int8"], out["int8_weight_share"]
    if q8["linear_int8"] <= 0:
        raise SystemExit("no quantized::linear_dynamic time in the int8 profile: the op was renamed?")
    f = fp["linear"] / fp["total"]
    s = w * fp["linear"] / q8["linear_int8"]       # the int8 layers' speed-up over the same layers in float32
    out.update({"linear_share_fp32": f, "int8_layer_speedup": s, "measured_speedup": fp["total"] / q8["total"],
                "bound_all_linear_int8": 1 / ((1 - f) + f / s), "bound_linear_free": 1 / (1 - f),
                "linear_speedup_needed_for_1.8x": f / (1 / 1.8 - (1 - f)) if 1 / 1.8 > 1 - f else None})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
