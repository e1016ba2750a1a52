"""Time one choice question with many options (``--max-options``; docs/guide/options.md, "Beyond 255 options"): a ~500-token
state and N short options (CLINC150's intent names, numbered past 150), answered in set mode (one pass)
or in list mode (shortlist-then-decide), on the CPU. Prints JSON: wall time per request (the median of
``--reps`` after one warm-up), tokens, the shortlist size, and the process's peak RSS.

    python experiments/many_options.py --model runs/stage5 --options 1000 --state-tokens 500
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time


def request(n_options: int, state_tokens: int, tokenizer) -> dict:
    from kevlike.data.sources import humanize, intent_labels

    labels = [humanize(x) for x in intent_labels("clinc150")]
    keys = [labels[i % len(labels)] + (f" {i // len(labels)}" if i >= len(labels) else "") for i in range(n_options)]
    sentence = ("I was charged twice for the same order last week and the support line keeps hanging up on me, "
                "so I would like to know how to get the duplicate payment refunded to my card. ")
    state = ""
    while len(tokenizer(state)["input_ids"]) < state_tokens:
        state += sentence
    return {"state": state, "questions": {"intent": {"type": "choice",
                                                     "instructions": "Which intent does this message express?",
                                                     "criteria": {k: None for k in keys}}}}


def main(argv: list[str] | None = None) -> int:
    from kevlike import Engine, Limits

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="decision model trained for set mode (default: kevlike-default)")
    ap.add_argument("--options", type=int, default=1000)
    ap.add_argument("--state-tokens", type=int, default=500)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--mode", choices=["set", "list"], default="set",
                    help="set: one pass; list: shortlist-then-decide (one process per mode, for its peak RSS)")
    args = ap.parse_args(argv)
    limits = Limits(max_options=max(args.options, 255))
    out = {"options": args.options}
    for mode in (args.mode,):
        eng = Engine.from_pretrained(args.model, limits=limits, option_mode=mode)
        req = request(args.options, args.state_tokens, eng.encoder.tokenizer)
        resp = eng.decide(req)                                # warm-up
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            resp = eng.decide(req)
            times.append(time.perf_counter() - t0)
        top = max(resp["answers"]["intent"]["probabilities"].items(), key=lambda kv: kv[1])
        out[mode] = {"seconds_median": statistics.median(times), "seconds": times,
                     "input_tokens": resp["usage"]["input_tokens"], "shortlist": resp.get("x_shortlist"),
                     "top": top, "threads": eng.thread_policy.describe()}
        out["state_tokens"] = len(eng.encoder.tokenizer(req["state"])["input_ids"])
    out["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    from kevlike.runs import machine

    out["machine"] = machine()
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
