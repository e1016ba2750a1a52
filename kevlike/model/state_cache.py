"""A state computed once: an LRU cache of the state's per-layer keys and values.

Users ask several rounds of questions about the same text (a ticket, a document, a conversation
that grows). The packed pass (docs/design/DESIGN.md §6) already reads the state once per request; this cache
reads it once per *state*: the keys/values of every decoder layer over the state's tokens are kept,
keyed by the exact token ids of the state (which encode the model's tokenizer and template; one cache
belongs to one engine, i.e. one model), and a later request runs only its branches against them:

* **hit** — the same state tokens: no state forward at all;
* **prefix** — the state *extends* a cached one (a conversation that grew): only the new tokens run,
  on top of the longest cached prefix; the extended state is cached too;
* **miss** — the state runs once and is cached.

The branches then run back to back in one row on top of the state's keys/values (transformers'
``DynamicCache``), under a ``[ΣL, S + ΣL]`` mask with positions ``S…S+L−1`` per branch — exactly
the positions and visibility of the packed pass: each branch sees the state and itself. The pass
extends a *shallow copy* of the cached entry (its own layer objects, the entry's tensors): transformers
grows a layer by ``torch.cat`` into a new tensor, so the entry's tensors are never written and never
grow. The cache is still meant for one forward pass at a time per engine (the server runs one model
thread per model). Answers equal the uncached packed path to float rounding (≤ 1e-5 in fp32, tested on
tiny models and the real backbone).

Memory: a state costs ``2 · layers · kv_heads · head_dim · bytes`` per token (46 KB per token for
SmolLM2-135M in fp32, 23.6 MB for a 512-token state); entries are evicted least recently used once
their sum exceeds ``max_mb``. What is counted is what is held: :meth:`StateCache.put` keeps compact
tensors only (a view into a larger buffer, e.g. a cropped ``[state + branches]`` cache, is copied
down to its own size first) and counts the bytes of their storage. ``max_mb = 0`` turns the cache
off. Pointer readout only.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from types import SimpleNamespace

import torch

from kevlike.model.heads import pool_abstain, pool_orders
from kevlike.model.kernels.masks import branch_rows_mask


def _kv_tensors(cache):
    """``(layer, name, tensor)`` for every key/value tensor of a transformers cache."""
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values"):
            t = getattr(layer, name, None)
            if isinstance(t, torch.Tensor):
                yield layer, name, t


def cache_nbytes(cache) -> int:
    """Bytes held by the key/value tensors of a transformers cache: the size of their storage (each storage
    counted once), not of the views: a view of ``S`` tokens into an ``[S + L]``-token buffer holds it all."""
    seen, total = set(), 0
    for _, _, t in _kv_tensors(cache):
        st = t.untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            total += st.nbytes()
    return total


def compact(cache):
    """Make every key/value tensor of ``cache`` own exactly its elements (in place; returns ``cache``): a tensor
    that is a view into a larger storage, or not contiguous, is replaced by a contiguous copy."""
    for layer, name, t in _kv_tensors(cache):
        if not t.is_contiguous() or t.untyped_storage().nbytes() != t.numel() * t.element_size():
            setattr(layer, name, t.contiguous().clone())
    return cache


def shallow_copy(cache):
    """A cache that shares ``cache``'s key/value tensors but has its own layer objects: extending it (transformers'
    ``DynamicLayer.update`` concatenates into new tensors) leaves ``cache`` as it was, without copying it."""
    new = copy.copy(cache)
    new.layers = [copy.copy(layer) for layer in cache.layers]
    return new


class StateCache:
    """LRU of state keys/values, keyed by the state's token ids, capped at ``max_mb`` MiB.

    Raises:
        ValueError: a negative ``max_mb``, or one whose byte count is not finite.
    """

    def __init__(self, max_mb: float):
        if not (0 <= max_mb * 2 ** 20 < float("inf")):
            raise ValueError(f"state cache size must be a finite number of MB >= 0, got {max_mb}")
        self.max_bytes = int(max_mb * 2 ** 20)
        self._entries: OrderedDict[tuple, tuple[object, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = self.prefix_hits = self.misses = 0

    def lookup(self, ids: tuple[int, ...]) -> tuple[int, object | None]:
        """``(n, cache)``: the cached keys/values of the longest cached prefix of ``ids`` (``n`` tokens;
        ``n == len(ids)`` on an exact hit), or ``(0, None)``. The cache object is shared: extend a
        :func:`shallow_copy` of it, never the object itself."""
        with self._lock:
            if ids in self._entries:
                self._entries.move_to_end(ids)
                self.hits += 1
                return len(ids), self._entries[ids][0]
            best = None
            for key in self._entries:
                if len(key) < len(ids) and (best is None or len(key) > len(best)) and ids[:len(key)] == key:
                    best = key
            if best is None:
                self.misses += 1
                return 0, None
            self._entries.move_to_end(best)
            self.prefix_hits += 1
            return len(best), self._entries[best][0]

    def put(self, ids: tuple[int, ...], cache) -> None:
        """Keep ``cache`` for ``ids`` (its tensors made compact first, :func:`compact`; its size counted as the
        bytes of their storage); evict least recently used entries beyond the cap (a state larger than the
        whole cap is not kept)."""
        size = cache_nbytes(compact(cache))
        if size > self.max_bytes:
            return
        with self._lock:
            if ids in self._entries:
                self.bytes -= self._entries.pop(ids)[1]
            self._entries[ids] = (cache, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, n) = self._entries.popitem(last=False)
                self.bytes -= n

    def discard(self, ids: tuple[int, ...]) -> None:
        """Forget the entry for ``ids`` (if any)."""
        with self._lock:
            if ids in self._entries:
                self.bytes -= self._entries.pop(ids)[1]

    def __len__(self) -> int:
        return len(self._entries)


@torch.inference_mode()
def cached_branch_logits(engine, enc, state_cache: StateCache) -> tuple[list[torch.Tensor], int]:
    """Pointer logits per question (as :meth:`kevlike.model.engine.Engine.question_logits` returns for one
    request) computed from the cached state, and the number of state tokens that came from the cache.

    ``engine``: an :class:`~kevlike.model.engine.Engine` with a pointer head; ``enc``: one encoded request.
    """
    logits, _, n_cached = cached_branch_outputs(engine, enc, state_cache)
    return logits, n_cached


@torch.inference_mode()
def cached_branch_outputs(engine, enc, state_cache: StateCache) -> tuple[list[torch.Tensor], list | None, int]:
    """:func:`cached_branch_logits` plus, between them, the per-question abstention logits (as
    :meth:`kevlike.model.engine.Engine.question_outputs` returns them; None without the capability)."""
    body = engine.model.get_decoder()
    dev = engine.device
    state = tuple(enc.state_ids)
    S = len(state)
    n_cached, kv = state_cache.lookup(state)
    if n_cached < S:
        rest = torch.tensor([state[n_cached:]], device=dev)
        pos = torch.arange(n_cached, S, device=dev)[None]
        kv = shallow_copy(kv) if kv is not None else None       # the cached prefix stays as it is
        kv = body(input_ids=rest, position_ids=pos, cache=kv, use_cache=True).cache
        state_cache.put(state, kv)
    # all branches in one row after the cached state, each as [prompt][sub-branch 1]…: the packed mask's
    # branch rows (kernels/masks.branch_rows_mask, [T, S + T]) let each token see the
    # state, its own branch causally and no sibling sub-branch; positions restart at S per branch and after
    # the prompt per sub-branch. The branches extend a shallow copy of the entry: the entry keeps its own
    # compact [state] tensors (the [state + branches] ones are dropped with the copy after the pass)
    kv = shallow_copy(kv)
    ids, pos, seg, opt, decide, reads = [], [], [], [], [], []
    for j, b in enumerate(enc.branches):
        start = len(ids)
        n = len(b.ids)
        ids.extend(b.ids)
        pos.extend(range(S, S + n))
        seg.extend([j + 1] * n)
        opt.extend([0] * n)
        decide.append(start + b.decide)
        if b.answers:                                       # set mode: read each sub-branch's last token
            row = []
            for o, a in enumerate(b.answers):
                ids.extend(a)
                pos.extend(range(S + n, S + n + len(a)))
                seg.extend([j + 1] * len(a))
                opt.extend([o + 1] * len(a))
                row.append(len(ids) - 1)
            reads.append(row)
        else:
            reads.append([start + o for o in b.options])
    mask = branch_rows_mask(S, torch.tensor(seg, device=dev), torch.tensor(opt, device=dev))   # (1, 1, T, S + T)
    h = body(input_ids=torch.tensor([ids], device=dev), attention_mask=mask,
             position_ids=torch.tensor([pos], device=dev), cache=kv, use_cache=True).last_hidden_state[0]
    del kv
    # the engine's readout on this one row, given the positions a PackedBatch would hold: <decide> per branch,
    # option k's last token (option_end - 1) per branch and option
    NB, K = len(reads), max(len(r) for r in reads)
    option_end = torch.ones((1, NB, K), dtype=torch.long, device=dev)
    option_mask = torch.zeros((1, NB, K), dtype=torch.bool, device=dev)
    for j, row in enumerate(reads):
        option_end[0, j, :len(row)] = torch.tensor(row, device=dev) + 1
        option_mask[0, j, :len(row)] = True
    rows = SimpleNamespace(decide_index=torch.tensor([decide], device=dev), option_end=option_end,
                           option_mask=option_mask)
    z = engine.readout.logits(engine.model, h[None], rows)[0]
    z_none = engine.readout.none_logits(engine.model, h[None], rows)
    abstain = None if z_none is None else pool_abstain(enc, z.float().cpu(), z_none[0].cpu())
    return pool_orders(enc, z.float().cpu()), abstain, n_cached
