"""State cache against the uncached pass, bfloat16 and float32 (break-test 2026-12-05; docs/guide/benchmark.md).

    python docs/results/stage31/cache_bf16.py

kevlike-default on examples/review.json: a request whose state is the first ~300 characters of the review primes the
cache; then the full request (a prefix hit) and the same again (an exact hit) against a fresh engine without a cache.
Prints the largest |difference| of any answer probability per dtype."""
import json

from kevlike.model.engine import Engine


def probs(response):
    """Every answer probability of a response, keyed by (question, option)."""
    out = {}
    for q, a in response["answers"].items():
        for k, v in (a.get("probabilities") or {"true": a["noul"]}).items():
            out[(q, k)] = v
    return out


def main():
    full = json.load(open("examples/review.json"))
    s = full["state"]
    part = dict(full, state=s[:s.index(". ", 300) + 1])
    for dtype in ("bfloat16", "float32"):
        cold = probs(Engine.from_pretrained("kevlike-default", dtype=dtype, threads=1).decide(full))
        cached = Engine.from_pretrained("kevlike-default", dtype=dtype, threads=1, state_cache_mb=256)
        cached.decide(part)
        prefix, exact = cached.decide(full), cached.decide(full)
        print(f"{dtype}: cached tokens {prefix.get('x_cached_tokens')} / {exact.get('x_cached_tokens')}; max |dp| "
              f"prefix hit vs uncached {max(abs(cold[k] - v) for k, v in probs(prefix).items()):.2e}, exact hit vs "
              f"uncached {max(abs(cold[k] - v) for k, v in probs(exact).items()):.2e}")


if __name__ == "__main__":
    main()
