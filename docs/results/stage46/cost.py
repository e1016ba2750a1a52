"""Request cost of negation twins: wall time of one request per realistic page, with and without twins.

    python docs/results/stage46/cost.py [--model kevlike-reader] [--twins 1] [--reps 3] [--threads 2]

One model load; a second engine shares its weights and reads each yes/no question with ``--twins`` negation twins.
Every page of the realistic split and of ``realistic_fresh`` is one request (its state and all its questions, as a
user sends it); the two engines alternate page by page, ``--reps`` times, so drift on a busy machine hits both
alike. Prints the packed tokens and the median milliseconds per request of each, and their ratio.
"""

import argparse
import platform
import statistics
import time

import torch

from kevlike.eval.realistic import REALISTIC_FILE, REALISTIC_FRESH_FILE, realistic_items
from kevlike.model.engine import Engine


def requests() -> list[dict]:
    out = []
    for path in (REALISTIC_FILE, REALISTIC_FRESH_FILE):
        for item in realistic_items(path):
            qs = {k: {f: v for f, v in q.items() if f in ("type", "instructions", "criteria")}
                  for k, q in item["questions"].items()}
            out.append({"state": item["state"], "questions": qs})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="kevlike-reader")
    ap.add_argument("--twins", type=int, default=1)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    args = ap.parse_args()
    base = Engine.from_pretrained(args.model, dtype=args.dtype, threads=args.threads, negation_twins=0)
    twin = Engine(base.model, base.encoder.tokenizer, name=base.name, head=base.head, temperatures=base.temperatures,
                  backend=base.backend, lm_abstain=base.abstain and base.head is None, threads=args.threads,
                  option_mode=base.option_mode, negation_twins=args.twins)
    reqs = requests()
    times = {"base": [], "twins": []}
    tokens = {"base": 0, "twins": 0}
    for rep in range(args.reps):
        for req in reqs:
            for name, eng in (("base", base), ("twins", twin)) if rep % 2 == 0 else (("twins", twin), ("base", base)):
                t0 = time.perf_counter()
                resp = eng.decide(req)
                times[name].append(time.perf_counter() - t0)
                if rep == 0:
                    tokens[name] += resp["usage"]["input_tokens"]
    med = {k: statistics.median(v) * 1000 for k, v in times.items()}
    print(f"{platform.processor() or platform.machine()}; torch {torch.__version__}; {args.dtype}, {args.threads} "
          f"threads; model {args.model}; {len(reqs)} pages x {args.reps} reps")
    for k in ("base", "twins"):
        print(f"{k:>6}: {tokens[k] / len(reqs):7.0f} tokens per request, median {med[k]:7.0f} ms per request")
    print(f"ratio twins / base: tokens {tokens['twins'] / tokens['base']:.3f}, time {med['twins'] / med['base']:.3f}")


if __name__ == "__main__":
    main()
