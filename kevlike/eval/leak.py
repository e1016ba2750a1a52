"""The leak probe: what the branch mask exists to prevent, shown on the model itself (DESIGN.md §1, §5, §6; issue 34).

One request ``[state][branch 1]…[branch Q]`` is run twice through the stock HF decoder body, changing
only the attention mask and the position ids:

* **naive packing**: one plain causal mask over the whole packed sequence and running positions
  ``0…L−1`` — what concatenating the questions into one prompt does; branch k reads branches 1…k−1;
* **branch mask**: the engine's mask (:func:`kevlike.model.kernels.masks.packed_mask_mod`) and positions
  restarted at S for every branch — each branch sees the state and itself.

Both are built by :func:`kevlike.model.kernels.attention.attention_mask_for` (naive packing is the same
``mask_mod`` with every token in segment 0, i.e. the causal mask), passed as the dense bool mask
``[1, 1, L, L]`` to sdpa; the readout (pointer head, or the LM readout of a bare backbone) reads the
same packed indices in both runs. Two measurements per request, each reported per mask:

* **contamination**: the instructions of question 1 are replaced by :data:`EDIT`; |Δp| over every
  probability of every *other* question (a noul answer counts P(true) and P(false));
* **order dependence**: the first and last questions swap places; |Δp| over every probability of every
  question, matched by question id.

Each gives ``max_abs_dp``, ``mean_abs_dp`` (over probabilities) and ``flip_rate`` (share of the compared
questions whose most likely answer changes). Probabilities are the engine's calibrated ones
(:meth:`kevlike.model.engine.Engine.probabilities`). Target (DESIGN §6 equality rule, shapes differ
between the variants): the branch mask moves no answer by more than 1e-5 in float32 (2e-2 in
bfloat16); naive packing visibly more.
"""

from __future__ import annotations

import random

import torch

from kevlike.model.engine import backbone_hidden
from kevlike.model.heads import pool_orders
from kevlike.request.pack import pack
from kevlike.request.schema import validate_request

EDIT = "Does the text mention the weather anywhere?"
"""The instructions that replace question 1's in the contamination variant."""

MASKS = ("naive", "branch")


@torch.inference_mode()
def request_probabilities(engine, request: dict, mask: str) -> dict[str, torch.Tensor]:
    """Calibrated probabilities per question id of one request run under ``mask``.

    Args:
        engine: a local :class:`kevlike.model.engine.Engine` (its model, encoder, readout, temperatures).
        request: a Jev request dict.
        mask: ``"branch"`` (the engine's mask, positions restarted per branch) or ``"naive"`` (plain causal
            mask over the packed sequence, positions ``0…L−1``).

    Returns:
        ``{question id: [K_q] float32 CPU tensor}``.

    Raises:
        ValueError: an unknown ``mask``.
        kevlike.request.schema.RequestError: an invalid request.
    """
    if mask not in MASKS:
        raise ValueError(f"mask must be one of {MASKS}, got {mask!r}")
    req = validate_request(request)
    enc = engine.encode(req)
    batch = pack([enc], engine.encoder.pad_id).to(engine.device)     # B = 1: no padding
    L = batch.input_ids.shape[1]
    if mask == "naive":
        segment_ids = torch.zeros_like(batch.segment_ids)              # one segment: the plain causal mask
        position_ids = torch.arange(L, device=engine.device).unsqueeze(0)   # [1, L] running positions
        option_ids = None
    else:
        segment_ids, position_ids, option_ids = batch.segment_ids, batch.position_ids, batch.option_ids
    hidden = backbone_hidden(engine.model, "sdpa", batch.input_ids, segment_ids, position_ids, option_ids)  # [1, L, d]
    z = engine.readout.logits(engine.model, hidden, batch)                                               # [1, NB, K]
    zs = pool_orders(enc, z[0].float().cpu())
    return {q.id: p.float() for q, p in zip(req.questions, engine.probabilities(req, zs))}


def _compare(a: dict, b: dict, ids: list[str]) -> tuple[list[float], int]:
    """Every |Δp| of the questions ``ids`` (noul: P(true) and P(false)) and the number whose argmax differs."""
    diffs, flips = [], 0
    for qid in ids:
        pa, pb = a[qid], b[qid]
        if pa.numel() == 1:                       # a noul answer as one P(true): count both sides
            pa, pb = torch.cat([pa, 1 - pa]), torch.cat([pb, 1 - pb])
        diffs.extend(float(x) for x in (pa - pb).abs())
        flips += int(pa.argmax()) != int(pb.argmax())
    return diffs, flips


def _summary(diffs: list[float], flips: int, questions: int) -> dict:
    return {"max_abs_dp": max(diffs, default=float("nan")),
            "mean_abs_dp": sum(diffs) / len(diffs) if diffs else float("nan"),
            "flip_rate": flips / questions if questions else float("nan"), "questions": questions}


def edited(request: dict) -> dict:
    """``request`` with question 1's instructions replaced by :data:`EDIT` (a sibling's text changes)."""
    qs = dict(request["questions"])
    first = next(iter(qs))
    qs[first] = {**qs[first], "instructions": EDIT}
    return {**request, "questions": qs}


def swapped(request: dict) -> dict:
    """``request`` with its first and last questions swapped (ids and content move together)."""
    items = list(request["questions"].items())
    items[0], items[-1] = items[-1], items[0]
    return {**request, "questions": dict(items)}


def leak_probe(engine, requests: list[dict]) -> dict:
    """Contamination and order dependence under naive packing and under the branch mask (module docstring).

    Args:
        engine: a local engine.
        requests: Jev request dicts, each with ≥ 2 questions.

    Returns:
        ``{"n", "tokens_mean", "naive": {"contamination": {...}, "order": {...}}, "branch": {...}}`` where
        each inner dict is ``{"max_abs_dp", "mean_abs_dp", "flip_rate", "questions"}``.

    Raises:
        ValueError: a request with fewer than 2 questions.
    """
    acc = {m: {"contamination": ([], 0, 0), "order": ([], 0, 0)} for m in MASKS}
    tokens = []
    for request in requests:
        ids = list(request["questions"])
        if len(ids) < 2:
            raise ValueError(f"the leak probe needs requests with >= 2 questions, got {len(ids)}")
        tokens.append(engine.encode(validate_request(request)).n_tokens)
        for m in MASKS:
            base = request_probabilities(engine, request, m)
            for name, variant, compared in (("contamination", edited(request), ids[1:]),
                                            ("order", swapped(request), ids)):
                d, f = _compare(base, request_probabilities(engine, variant, m), compared)
                old = acc[m][name]
                acc[m][name] = (old[0] + d, old[1] + f, old[2] + len(compared))
    out = {"n": len(requests), "tokens_mean": sum(tokens) / len(tokens) if tokens else float("nan")}
    for m in MASKS:
        out[m] = {name: _summary(*acc[m][name]) for name in ("contamination", "order")}
    return out


def leak_requests(n: int, seed: int = 0) -> list[dict]:
    """``n`` seeded test rows of kevlike's ``documents`` reading source (4–8 questions of all three types
    about a generated document, some padded to a page; :mod:`kevlike.data.reading`)."""
    from kevlike.data.reading import rows

    data = rows("documents", "test")
    picked = random.Random(seed).sample(range(len(data)), min(n, len(data)))
    return [data[i][0] for i in picked]
