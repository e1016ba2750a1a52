"""The needle probe: recall of one fact against state length and the fact's depth (issue 34).

The design's long-state and sliding-window claims (DESIGN.md §4 limits, §6 windows on restarted
positions) rest on the model reading a fact wherever it sits in a long state. A state of about
``length`` tokens is built from neutral filler — the unrelated paragraphs of
:data:`kevlike.data.reading.PADDING`, shuffled and repeated — with one fact sentence
(:data:`FACT`: a meeting moved to a city) inserted between paragraphs at *depth* d (0 = before the
first paragraph, 1 = after the last; the paragraph boundary nearest to d). Each state is asked, as
sibling branches of one request:

* two yes/no questions (:data:`NOUL_Q`), one naming the true city (gold *yes*), one a distractor
  (gold *no*); correct when P(true) is on the gold side of 0.5;
* one choice question (:data:`CHOICE_Q`) over the true city and three distractors, shuffled;
  correct when the argmax is the true city.

Accuracy per (length, depth) cell, over ``trials`` states per cell. Chance: 0.5 (yes/no), 0.25
(choice). ``length`` counts the encoded state (its ``<state>`` delimiter included); the filler is cut
at a paragraph boundary, so a state is about ``length`` tokens or a little less (the last paragraph that fits is
chosen from the shuffled round); ``tokens_mean`` reports what was built. Lengths run from :data:`MIN_TOKENS`,
doubling, to ``max_tokens`` — up to the backbone's branch limit (the smaller of
``max_position_embeddings``, 8,192 for SmolLM2, and Jev's 32k) minus :data:`BRANCH_ROOM`.
"""

from __future__ import annotations

import math
import random

import torch

from kevlike.data.reading import NAMES, PADDING
from kevlike.request.schema import validate_request

MIN_TOKENS = 256
"""The shortest state of the grid."""

DEFAULT_MAX_TOKENS = 1024
"""``kevlike probes --needle-max-tokens`` default: feasible on 2 CPU cores (about a minute per trial per
depth row at 1,024 tokens for SmolLM2-135M beside a training job); the documented maximum is the
backbone's branch limit."""

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
"""Fact depths, as a fraction of the filler before the fact."""

BRANCH_ROOM = 64
"""Tokens kept free for the longest question branch when checking a length against the branch limit."""

CITIES = ("Lisbon", "Oslo", "Nairobi", "Lima", "Hanoi", "Dublin", "Quito", "Seoul", "Vienna", "Accra", "Perth",
          "Bogota", "Cairo", "Tallinn", "Manila", "Havana")
FACT = "Please note: the meeting with {name} has been moved to {city}."
NOUL_Q = "Has the meeting with {name} been moved to {city}?"
CHOICE_Q = "Where has the meeting with {name} been moved to?"


def needle_lengths(max_tokens: int) -> tuple[int, ...]:
    """``256, 512, 1024, …`` below ``max_tokens``, then ``max_tokens`` itself.

    Raises:
        ValueError: ``max_tokens`` < :data:`MIN_TOKENS`.
    """
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < MIN_TOKENS:
        raise ValueError(f"the needle's longest state must be an integer >= {MIN_TOKENS} tokens, got {max_tokens!r}")
    out, x = [], MIN_TOKENS
    while x < max_tokens:
        out.append(x)
        x *= 2
    return (*out, max_tokens)


def check_max_tokens(engine, max_tokens: int) -> int:
    """Return ``max_tokens`` if a state that long plus a question branch fits ``engine``'s branch limit.

    Raises:
        ValueError: below :data:`MIN_TOKENS`, or above the branch limit − :data:`BRANCH_ROOM` (the message names it).
    """
    needle_lengths(max_tokens)
    limit = engine.encoder.branch_limit
    if max_tokens + BRANCH_ROOM > limit:
        raise ValueError(f"the needle's longest state ({max_tokens} tokens) does not fit: this backbone's branch limit "
                         f"is {limit} tokens (state + longest branch), so at most {limit - BRANCH_ROOM}")
    return max_tokens


def _n_tokens(tokenizer, text: str) -> int:
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def needle_state(tokenizer, length: int, depth: float, fact: str, rng: random.Random) -> str:
    """Filler paragraphs (shuffled :data:`PADDING`, repeated; when the next one does not fit, the next one
    of the shuffled round that does) totalling at most ``length`` − 1 tokens with
    ``fact`` inserted at the paragraph boundary nearest to ``depth`` (0–1) of them; paragraphs joined by a
    blank line. Token counts are per piece (+ 2 per blank line), so the encoded state may differ by a few
    tokens from the sum; :func:`needle_probe` measures it.

    Raises:
        ValueError: ``depth`` outside [0, 1].
    """
    if not 0.0 <= depth <= 1.0:
        raise ValueError(f"depth must be within [0, 1], got {depth}")
    budget = length - 1 - _n_tokens(tokenizer, fact)      # 1: the <state> delimiter
    size = {p: _n_tokens(tokenizer, p) + 2 for p in PADDING}    # + 2: the blank line between paragraphs
    paras, used, pool = [], 0, []
    while True:
        if not pool:
            pool = list(PADDING)
            rng.shuffle(pool)
        fits = [i for i in range(len(pool) - 1, -1, -1) if used + size[pool[i]] <= budget]
        if not fits:
            break
        para = pool.pop(fits[0])
        paras.append(para)
        used += size[para]
    k = round(depth * len(paras))
    return "\n\n".join(paras[:k] + [fact] + paras[k:])


def needle_request(tokenizer, length: int, depth: float, rng: random.Random) -> tuple[dict, str]:
    """One seeded needle request (module docstring) and its true city. Question ids: ``yes`` (gold true),
    ``no`` (gold false), ``where`` (choice, gold: the true city)."""
    name = rng.choice(NAMES)
    city, wrong, *others = rng.sample(CITIES, 4)
    options = [city, wrong, *others]
    rng.shuffle(options)
    state = needle_state(tokenizer, length, depth, FACT.format(name=name, city=city), rng)
    return {"state": state, "questions": {
        "yes": {"type": "noul", "instructions": NOUL_Q.format(name=name, city=city)},
        "no": {"type": "noul", "instructions": NOUL_Q.format(name=name, city=wrong)},
        "where": {"type": "choice", "instructions": CHOICE_Q.format(name=name),
                  "criteria": {c: None for c in options}}}}, city


def needle_probe(engine, max_tokens: int = DEFAULT_MAX_TOKENS, n: int = 40, depths: tuple[float, ...] = DEPTHS,
                 seed: int = 0, progress=None) -> dict:
    """Accuracy per (length, depth) of yes/no and choice questions about one fact (module docstring).

    Args:
        engine: a local engine (or anything with ``encoder``, ``encode``, ``question_logits``, ``probabilities``).
        max_tokens: the longest state (:func:`needle_lengths`; checked by :func:`check_max_tokens`).
        n: at least this many requests in all: ``trials = ceil(n / cells)`` states per cell.
        depths: fact depths in [0, 1].
        seed: the states, names and cities of a seed are always the same.
        progress: a callable taking a one-line string after each length, or None.

    Returns:
        ``{"lengths", "depths", "trials_per_cell", "n", "tokens_mean": [per length], "p_true_yes", "p_true_no":
        [per length: mean P(true) of the question naming the true city / the distractor], "noul_accuracy":
        [[per depth] per length], "choice_accuracy": [[…]], "noul_mean", "choice_mean", "chance"}``.

    Raises:
        ValueError: ``max_tokens`` out of range, ``n`` < 1, a depth outside [0, 1].
    """
    check_max_tokens(engine, max_tokens)
    if n < 1:
        raise ValueError(f"the needle probe needs n >= 1, got {n}")
    lengths = needle_lengths(max_tokens)
    trials = math.ceil(n / (len(lengths) * len(depths)))
    tok = engine.encoder.tokenizer
    noul = [[0.0] * len(depths) for _ in lengths]
    choice = [[0.0] * len(depths) for _ in lengths]
    tokens, p_yes, p_no = [], [], []
    for i, length in enumerate(lengths):
        built, py, pn = [], [], []
        for j, depth in enumerate(depths):
            hits_n = hits_c = 0
            for t in range(trials):
                rng = random.Random(f"needle:{seed}:{length}:{depth}:{t}")
                request, city = needle_request(tok, length, depth, rng)
                req = validate_request(request)
                enc = engine.encode(req)
                built.append(len(enc.state_ids))
                probs = dict(zip((q.id for q in req.questions),
                                 engine.probabilities(req, engine.question_logits([enc])[0])))
                py.append(float(probs["yes"][0]))
                pn.append(float(probs["no"][0]))
                hits_n += (py[-1] > 0.5) + (pn[-1] < 0.5)
                keys = [o.key for o in next(q for q in req.questions if q.id == "where").options]
                hits_c += keys[int(torch.argmax(probs["where"]))] == city
            noul[i][j] = hits_n / (2 * trials)
            choice[i][j] = hits_c / trials
        tokens.append(sum(built) / len(built))
        p_yes.append(sum(py) / len(py))
        p_no.append(sum(pn) / len(pn))
        if progress is not None:
            progress(f"needle: {length} tokens done")
    cells = len(lengths) * len(depths)
    return {"lengths": list(lengths), "depths": list(depths), "trials_per_cell": trials, "n": trials * cells,
            "tokens_mean": tokens, "p_true_yes": p_yes, "p_true_no": p_no, "noul_accuracy": noul, "choice_accuracy": choice,
            "noul_mean": sum(map(sum, noul)) / cells, "choice_mean": sum(map(sum, choice)) / cells,
            "chance": {"noul": 0.5, "choice": 0.25}}
